//! `/engine/{name}`: an engine-neutral name, mapped to the chosen upstream's engine route
//! (`model::control`), the body and query passed through and the engine's answer passed back
//! with its status. Dynamo's answers where sysport answers itself: an unknown or unserved name
//! 404, a body that is not JSON 400 (`lib/runtime/src/system_status_server.rs`,
//! `engine_route_handler`).

use super::{Call, Control, Reply};
use crate::model::control::Method;
use crate::model::routes;
use axum::http::StatusCode;

impl Control {
    /// Whether `/engine/{name}` is served at all for `name` (Dynamo's variables); the server
    /// answers 404 before asking who calls when it is not.
    pub fn serves_engine_route(&self, path: &str) -> bool {
        routes::engine_route(path)
            .map(|rest| rest.split('/').next().unwrap_or(rest))
            .is_some_and(|name| self.config.control.engine_routes.serves(name))
    }

    /// Answers `/engine/{name}` for a caller the server let through.
    pub async fn engine(&self, call: Call) -> Reply {
        let Some(rest) = routes::engine_route(&call.path) else {
            return not_found(&call.path);
        };
        let (name, arg) = match rest.split_once('/') {
            Some((name, arg)) => (name, Some(arg)),
            None => (rest, None),
        };
        if !self.config.control.engine_routes.serves(name) {
            return not_found(&call.path);
        }
        if !call.body.is_empty()
            && let Err(err) = serde_json::from_slice::<serde_json::Value>(&call.body)
        {
            return Reply::error(StatusCode::BAD_REQUEST, "Invalid JSON", err);
        }
        let u = match self.upstream(&call, |u| u.engine.control().route(name).is_some(), name) {
            Ok(u) => u,
            Err(reply) => return reply,
        };
        let engine = self.config.upstreams[u].engine;
        let Some(route) = engine.control().route(name) else {
            return Reply::error(
                StatusCode::NOT_FOUND,
                "Route not found",
                format!("{} has no route for /engine/{name}", engine.preset().name),
            );
        };
        let arg = match (route.takes_arg, arg) {
            (true, Some(arg)) if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_digit()) => {
                Some(arg)
            }
            (false, None) => None,
            (true, _) => {
                return Reply::error(
                    StatusCode::NOT_FOUND,
                    "Route not found",
                    format!("/engine/{name} needs a number after it: /engine/{name}/0"),
                );
            }
            (false, Some(_)) => return not_found(&call.path),
        };
        if call.method != axum::http::Method::GET && call.method != axum::http::Method::POST {
            return Reply::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed",
                "the /engine routes take GET or POST",
            );
        }
        let mut target = route.target(arg);
        if let Some(query) = call.passed_query() {
            target.push(if target.contains('?') { '&' } else { '?' });
            target.push_str(&query);
        }
        let body =
            (route.method == Method::Post && !call.body.is_empty()).then(|| call.body.clone());
        match self
            .forward(&call, name, u, route.method, &target, body)
            .await
        {
            Ok(answer) => Reply::passed(answer),
            Err(err) => Reply::error(err.status(), "Engine call failed", err),
        }
    }
}

fn not_found(path: &str) -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        "Route not found",
        format!("Route {path} not found"),
    )
}

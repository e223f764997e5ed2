//! The control routes at the server: who may call them (docs/control.md, "Who may call"),
//! who calls (for the log line), and the hand-over to `control` on the worker runtime.
//!
//! `/engine/*` and `/v1/loras` answer 404 when Dynamo's variables turn them off, then 403 to a
//! caller that did not prove who it is (basic auth or a verified client certificate) unless
//! `control.allow_unauthenticated` is set; the engine is never asked in either case.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use super::app::{App, Runtime};
use super::parts::Parts;
use crate::control::{Call, Reply};
use crate::listener::conn::{ClientCert, ClientIp, Credentialed};
use crate::model::routes;

/// The longest request body passed to an engine: a control call's or an adapter's JSON.
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Which control route a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Engine,
    Loras,
}

/// The control route of `path`, if it is one (`/metadata` is an ordinary route).
pub(super) fn kind(path: &str) -> Option<Kind> {
    if routes::engine_route(path).is_some() {
        Some(Kind::Engine)
    } else if path == routes::LORAS || routes::lora_name(path).is_some() {
        Some(Kind::Loras)
    } else {
        None
    }
}

/// Answers a control route: 404 when off, 403 when the caller may not, else the engine's.
pub(super) async fn answer(
    app: &Arc<App>,
    runtime: &Arc<Runtime>,
    kind: Kind,
    req: Request,
) -> Response {
    let control = &runtime.control;
    let served = match kind {
        Kind::Engine => control.serves_engine_route(req.uri().path()),
        Kind::Loras => control.lora_enabled(),
    };
    if !served {
        return reply(Reply::error(
            StatusCode::NOT_FOUND,
            "Route not found",
            format!("Route {} not found", req.uri().path()),
        ));
    }
    let users = runtime
        .config
        .listen
        .web
        .as_ref()
        .is_some_and(|w| !w.users.is_empty());
    // With users configured, the auth layer let only callers with good credentials this far.
    let proved = users || req.extensions().get::<Credentialed>().is_some();
    if !proved && !control.allows_unauthenticated() {
        return reply(Reply::error(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "the control routes need a port with basic auth or client certificates (the web \
             configuration), or control.allow_unauthenticated: true",
        ));
    }
    let who = who(&req, users);
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(body) => body,
        Err(err) => {
            return reply(Reply::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Request too large",
                format!("a control request's body is at most {MAX_REQUEST_BYTES} bytes: {err}"),
            ));
        }
    };
    let call = Call {
        who,
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        body,
    };
    let control = control.clone();
    let work = async move {
        match kind {
            Kind::Engine => control.engine(call).await,
            Kind::Loras => control.loras(call).await,
        }
    };
    match super::front::on_worker(&app.worker, work).await {
        Some(r) => reply(r),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response(),
    }
}

/// `/metadata`, worked out on the worker runtime.
pub(super) async fn metadata(app: &Arc<App>, runtime: &Arc<Runtime>) -> Response {
    let control = runtime.control.clone();
    match super::front::on_worker(&app.worker, async move { control.metadata().await }).await {
        Some(r) => reply(r),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response(),
    }
}

/// Who calls: the basic-auth user, else a verified client certificate's subject, each with the
/// peer's address; else the peer's address.
fn who(req: &Request, users: bool) -> String {
    let peer = req
        .extensions()
        .get::<ClientIp>()
        .map_or_else(|| "unknown".to_owned(), |c| c.0.to_string());
    let user = users
        .then(|| basic_user(req.headers().get(header::AUTHORIZATION)?))
        .flatten();
    match user {
        Some(user) => format!("user {user:?} from {peer}"),
        None => match req.extensions().get::<ClientCert>() {
            Some(cert) => format!("client certificate {:?} from {peer}", &*cert.0),
            None if req.extensions().get::<Credentialed>().is_some() => {
                format!("client certificate from {peer}")
            }
            None => peer,
        },
    }
}

fn basic_user(value: &HeaderValue) -> Option<String> {
    let (scheme, encoded) = value.to_str().ok()?.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    Some(text.split_once(':')?.0.to_owned())
}

fn reply(r: Reply) -> Response {
    let mut response = Response::new(Body::new(Parts::new([r.body])));
    *response.status_mut() = r.status;
    if let Ok(ct) = HeaderValue::from_str(&r.content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

//! `GET /incidents`, `/incidents/{id}` and `/incidents/{id}.tar.gz`: what `crate::incidents`
//! kept, behind the same TLS and authentication as `/metrics` (never on the probe port).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::incidents::Incidents;
use crate::model::routes;

/// The answer to `path`, and whether its body is compressed already (the bundle).
pub(super) fn answer(incidents: &Incidents, path: &str) -> (Response, bool) {
    if path == routes::INCIDENTS {
        return (json(incidents.list().to_string()), false);
    }
    let Some((id, bundle)) = routes::incident(path) else {
        return (not_found(), false);
    };
    let Some(kept) = incidents.get(id) else {
        return (not_found(), false);
    };
    if bundle {
        let mut r = Response::new(Body::from(kept.bundle.clone()));
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/gzip"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Ok(v) =
            HeaderValue::from_str(&format!("attachment; filename=\"incident-{id}.tar.gz\""))
        {
            h.insert(header::CONTENT_DISPOSITION, v);
        }
        return (r, true);
    }
    (json(kept.json.clone()), false)
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such incident\n").into_response()
}

fn json(body: impl Into<Bytes>) -> Response {
    let mut r = Response::new(Body::from(body.into()));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

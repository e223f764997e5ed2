//! Basic auth and the configured response headers, as a layer in front of every route except
//! the probes (the kubelet sends no credentials).
//!
//! bcrypt costs tens of milliseconds by design (about a second at cost 14, the most the web
//! configuration accepts); a scrape every 5 s must not pay it each time, so a successful check
//! is remembered (under a keyed hash, never the password itself). An unknown user is checked
//! against a hash of the same cost, so a wrong user costs what a wrong password does; user
//! names are compared in constant time. Uncached checks run one at a time off the runtime
//! thread, taken in turn from each client address and user (`gate`): a flood of guesses waits
//! behind itself, not in front of a second user or another client, and cannot starve the
//! probes or other scrapes.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

use super::gate::{Full, Gate, Key};
use crate::listener::conn::{ClientIp, Credentialed};
use crate::model::routes;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use ring::hmac;
use subtle::ConstantTimeEq;

/// Successful checks remembered; past this the memory is cleared and refilled.
const CACHE_ENTRIES: usize = 256;

/// Which paths are open (the probes); read per request, so a reload's paths apply.
pub type IsOpen = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The layer's state.
#[derive(Clone)]
pub struct Guard {
    inner: Arc<Inner>,
    is_open: IsOpen,
    /// `http_requests_total{path,code,read}`, for the requests answered here.
    requests: Option<prometheus::IntCounterVec>,
}

struct Inner {
    users: Vec<(String, String)>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Keyed hashes of (user, password, hash) that passed.
    passed: Mutex<HashSet<[u8; 32]>>,
    key: hmac::Key,
    gate: Arc<Gate>,
    /// A hash of the highest configured cost, checked for unknown users.
    decoy: OnceLock<String>,
    decoy_cost: u32,
}

/// Answer to one set of credentials.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    Busy,
}

/// Why basic auth and the configured headers cannot be put in front of the routes.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// `http_server_config.headers` names a header HTTP does not allow.
    #[error("header name {name:?}: {source}")]
    HeaderName {
        /// The name as configured.
        name: String,
        /// Why HTTP refuses it.
        source: axum::http::header::InvalidHeaderName,
    },
    /// A configured header's value is not a valid HTTP header value.
    #[error("header {name} value {value:?}: {source}")]
    HeaderValue {
        /// The header's name.
        name: String,
        /// The value as configured.
        value: String,
        /// Why HTTP refuses it.
        source: axum::http::header::InvalidHeaderValue,
    },
    /// The system gave no randomness for the key of the credential cache.
    #[error("no randomness for the credential cache")]
    NoRandomness,
}

impl Guard {
    /// A guard for `users` (user, bcrypt hash) adding `headers` to every response; paths for
    /// which `is_open` holds need no credentials.
    ///
    /// # Errors
    /// A header that is not a valid HTTP header name or value; no randomness for the key of the
    /// credential cache.
    pub fn new(
        users: &[(String, String)],
        headers: &[(String, String)],
        is_open: IsOpen,
    ) -> Result<Guard, GuardError> {
        let headers = headers
            .iter()
            .map(|(k, v)| {
                let name =
                    HeaderName::try_from(k.as_str()).map_err(|source| GuardError::HeaderName {
                        name: k.clone(),
                        source,
                    })?;
                let value = HeaderValue::try_from(v.as_str()).map_err(|source| {
                    GuardError::HeaderValue {
                        name: k.clone(),
                        value: v.clone(),
                        source,
                    }
                })?;
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, GuardError>>()?;
        let decoy_cost = users
            .iter()
            .filter_map(|(_, h)| h.parse::<bcrypt::HashParts>().ok())
            .map(|p| p.get_cost())
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST);
        let rng = ring::rand::SystemRandom::new();
        let key =
            hmac::Key::generate(hmac::HMAC_SHA256, &rng).map_err(|_| GuardError::NoRandomness)?;
        Ok(Guard {
            inner: Arc::new(Inner {
                users: users.to_vec(),
                headers,
                passed: Mutex::new(HashSet::new()),
                key,
                gate: Arc::default(),
                decoy: OnceLock::new(),
                decoy_cost,
            }),
            is_open,
            requests: None,
        })
    }

    /// Counts the requests refused here in `requests` (`http_requests_total{path,code,read}`).
    pub fn counting(mut self, requests: prometheus::IntCounterVec) -> Guard {
        self.requests = Some(requests);
        self
    }

    async fn check(&self, authorization: Option<&HeaderValue>, client: Option<IpAddr>) -> Verdict {
        let Some((user, password)) = authorization.and_then(basic_credentials) else {
            return Verdict::Fail;
        };
        let inner = &self.inner;
        let mut hash = None;
        let mut index = None;
        for (i, (name, h)) in inner.users.iter().enumerate() {
            if bool::from(name.as_bytes().ct_eq(user.as_bytes())) {
                hash = Some(h.clone());
                index = Some(i);
            }
        }
        let known = hash.is_some();
        let mut tag = hmac::Context::with_key(&inner.key);
        for part in [
            user.as_bytes(),
            password.as_bytes(),
            hash.as_deref().unwrap_or("").as_bytes(),
        ] {
            tag.update(&(part.len() as u64).to_le_bytes());
            tag.update(part);
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(tag.sign().as_ref());
        if known && inner.passed.lock().expect("cache lock").contains(&digest) {
            return Verdict::Pass;
        }
        // The turn is given back however this request ends: when the check is done, or, if the
        // request is cancelled while it waits, when its future is dropped.
        let key = Key {
            client,
            user: index,
        };
        let turn = match inner.gate.enter(key).await {
            Ok(turn) => turn,
            Err(Full) => return Verdict::Busy,
        };
        let checker = self.inner.clone();
        let matched = tokio::task::spawn_blocking(move || {
            // Held until bcrypt is done, even when the request has gone: one check at a time.
            let _turn = turn;
            let hash = hash.unwrap_or_else(|| checker.decoy().to_owned());
            bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if !(known && matched) {
            return Verdict::Fail;
        }
        let mut passed = inner.passed.lock().expect("cache lock");
        if passed.len() >= CACHE_ENTRIES {
            passed.clear();
        }
        passed.insert(digest);
        Verdict::Pass
    }
}

impl Inner {
    fn decoy(&self) -> &str {
        self.decoy.get_or_init(|| {
            bcrypt::hash_with_salt(b"decoy", self.decoy_cost, [7u8; 16])
                .map(|h| h.to_string())
                .unwrap_or_default()
        })
    }
}

/// `Authorization: Basic base64(user:password)` → (user, password).
fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let value = value.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// The layer: probes pass, other routes need credentials when users are configured; every
/// response gets the configured headers.
pub async fn require(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let open = guard.inner.users.is_empty() || (guard.is_open)(req.uri().path());
    let path = if req.uri().path() == routes::METRICS {
        routes::METRICS
    } else {
        "other"
    };
    let mut response = if open {
        // A probe needs no credentials; one that brings good ones is shown its whole body.
        let mut req = req;
        if !guard.inner.users.is_empty() && req.headers().contains_key(header::AUTHORIZATION) {
            let client = req.extensions().get::<ClientIp>().map(|c| c.0);
            let verdict = guard
                .check(req.headers().get(header::AUTHORIZATION), client)
                .await;
            if verdict == Verdict::Pass {
                req.extensions_mut().insert(Credentialed);
            }
        }
        next.run(req).await
    } else {
        let client = req.extensions().get::<ClientIp>().map(|c| c.0);
        let verdict = guard
            .check(req.headers().get(header::AUTHORIZATION), client)
            .await;
        if let (Some(requests), Verdict::Fail | Verdict::Busy) = (&guard.requests, &verdict) {
            let code = if verdict == Verdict::Fail {
                "401"
            } else {
                "429"
            };
            requests.with_label_values(&[path, code, ""]).inc();
        }
        match verdict {
            Verdict::Pass => next.run(req).await,
            Verdict::Fail => {
                let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"sysport\", charset=\"UTF-8\""),
                );
                r
            }
            Verdict::Busy => {
                let mut r = Response::new(Body::from("Too many authentication attempts\n"));
                *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                r
            }
        }
    };
    for (name, value) in &guard.inner.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> HeaderValue {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).expect("header")
    }

    fn guard() -> Guard {
        let hash = bcrypt::hash("secret", 4).expect("hash");
        Guard::new(
            &[("prometheus".to_owned(), hash)],
            &[],
            Arc::new(|p: &str| p == "/live"),
        )
        .expect("guard")
    }

    #[tokio::test]
    async fn the_right_password_passes_and_is_remembered_a_wrong_one_never() {
        let g = guard();
        assert_eq!(
            g.check(Some(&basic("prometheus", "secret")), None).await,
            Verdict::Pass
        );
        assert_eq!(g.inner.passed.lock().expect("lock").len(), 1);
        assert_eq!(
            g.check(Some(&basic("prometheus", "secret")), None).await,
            Verdict::Pass
        );
        assert_eq!(
            g.check(Some(&basic("prometheus", "wrong")), None).await,
            Verdict::Fail
        );
        assert_eq!(
            g.check(Some(&basic("nobody", "secret")), None).await,
            Verdict::Fail
        );
        assert_eq!(g.check(None, None).await, Verdict::Fail);
        assert_eq!(
            g.inner.passed.lock().expect("lock").len(),
            1,
            "only successes are kept"
        );
    }

    #[test]
    fn an_unknown_user_is_checked_against_a_hash_of_the_same_cost() {
        let g = guard();
        let decoy: bcrypt::HashParts = g.inner.decoy().parse().expect("a bcrypt hash");
        assert_eq!(decoy.get_cost(), 4);
    }

    #[test]
    fn credentials_are_read_from_the_basic_scheme_only() {
        assert_eq!(
            basic_credentials(&basic("a", "b:c")),
            Some(("a".to_owned(), "b:c".to_owned()))
        );
        assert_eq!(
            basic_credentials(&HeaderValue::from_static("Bearer abc")),
            None
        );
        assert_eq!(
            basic_credentials(&HeaderValue::from_static("Basic !!!")),
            None
        );
    }
}

//! How many TLS handshakes may be in progress: in all, and from one source address.
//!
//! A handshake costs the server a key exchange and a signature before the client has proved
//! anything (an RSA-4096 signature takes milliseconds), so a client that replays a captured
//! ClientHello from many connections makes sysport work while it does nothing. Beyond
//! [`PER_SOURCE`] handshakes in progress from one address, a new connection from it is closed at
//! once; beyond [`IN_ALL`] in all, a new connection waits for a place until its request-head
//! deadline. Handshakes run on the main port's thread, never the probes' (`server::front`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most TLS handshakes in progress at once, from every source together.
pub const IN_ALL: usize = 32;
/// Most TLS handshakes in progress at once from one source address (a Prometheus, a gateway
/// replica and the kubelet each come from an address of their own).
pub const PER_SOURCE: usize = 4;

/// The handshakes in progress.
#[derive(Debug)]
pub struct Handshakes {
    places: Arc<Semaphore>,
    per_source: Mutex<HashMap<IpAddr, usize>>,
    per_source_max: usize,
}

/// A handshake's place: given back when dropped.
#[derive(Debug)]
pub struct Place {
    _permit: OwnedSemaphorePermit,
    source: Option<(Arc<Handshakes>, IpAddr)>,
}

impl Handshakes {
    /// At most `in_all` handshakes at once, `per_source` from one address.
    pub fn new(in_all: usize, per_source: usize) -> Arc<Handshakes> {
        Arc::new(Handshakes {
            places: Arc::new(Semaphore::new(in_all)),
            per_source: Mutex::new(HashMap::new()),
            per_source_max: per_source,
        })
    }

    /// A place for a handshake from `source`: `None` at once when that source has as many as
    /// it may, else when one is free (the caller bounds the wait by the head deadline).
    pub async fn enter(self: &Arc<Handshakes>, source: Option<IpAddr>) -> Option<Place> {
        if let Some(ip) = source {
            let mut counts = self.per_source.lock().expect("handshake counts lock");
            let count = counts.entry(ip).or_insert(0);
            if *count >= self.per_source_max {
                return None;
            }
            *count += 1;
        }
        // From here the source's count is held: a guard gives it back if the wait is dropped.
        let source = source.map(|ip| (self.clone(), ip));
        let guard = SourceGuard(source);
        let permit = self.places.clone().acquire_owned().await.ok()?;
        Some(Place {
            _permit: permit,
            source: guard.take(),
        })
    }

    fn leave(&self, ip: IpAddr) {
        let mut counts = self.per_source.lock().expect("handshake counts lock");
        if let Some(count) = counts.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&ip);
            }
        }
    }

    /// Handshakes in progress from `ip` (for tests and the status of a source).
    pub fn from_source(&self, ip: IpAddr) -> usize {
        let counts = self.per_source.lock().expect("handshake counts lock");
        counts.get(&ip).copied().unwrap_or(0)
    }
}

/// A source's count while its handshake waits for a place.
struct SourceGuard(Option<(Arc<Handshakes>, IpAddr)>);

impl SourceGuard {
    fn take(mut self) -> Option<(Arc<Handshakes>, IpAddr)> {
        self.0.take()
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        if let Some((h, ip)) = self.0.take() {
            h.leave(ip);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some((h, ip)) = self.source.take() {
            h.leave(ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([127, 0, 0, last]))
    }

    #[tokio::test]
    async fn one_source_gets_at_most_its_share_and_the_rest_wait_for_a_place() {
        let h = Handshakes::new(3, 2);
        let a1 = h.enter(ip(2)).await.expect("first from .2");
        let _a2 = h.enter(ip(2)).await.expect("second from .2");
        // A third from the same source is closed at once, without waiting.
        assert!(h.enter(ip(2)).await.is_none());
        assert_eq!(h.from_source(IpAddr::from([127, 0, 0, 2])), 2);
        let _b1 = h.enter(ip(3)).await.expect("another source");
        // Every place is taken: the next waits until one is given back.
        let waiting = tokio::spawn({
            let h = h.clone();
            async move { h.enter(ip(4)).await.is_some() }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a1);
        assert!(waiting.await.expect("task"));
        assert_eq!(h.from_source(IpAddr::from([127, 0, 0, 2])), 1);
    }

    #[tokio::test]
    async fn a_wait_given_up_gives_back_its_sources_count() {
        let h = Handshakes::new(1, 2);
        let _held = h.enter(ip(2)).await.expect("place");
        let wait = tokio::time::timeout(std::time::Duration::from_millis(20), h.enter(ip(5)));
        assert!(wait.await.is_err());
        assert_eq!(h.from_source(IpAddr::from([127, 0, 0, 5])), 0);
    }
}

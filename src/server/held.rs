//! The bytes that answers being written hold, against `listen.max_answer_bytes_held`.
//!
//! A live engine's page changes at every fetch, so each answer a slow or non-reading client
//! holds is a copy of its own: without a bound, a few hundred such clients on a 15 MB page hold
//! gigabytes. Every answer's bytes are charged here while it is being written (a shared
//! rendering once, however many answers share it) and given back when the last holder is done;
//! while the total is over the budget, a new `/metrics` or view answer gets 503 with
//! `Retry-After` (counted) before anything is fetched. The probes are never refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use prometheus::{IntCounter, IntGauge, Opts};

use crate::telemetry::{NAMESPACE, Telemetry};

/// Seconds a refused client is told to wait (`Retry-After`): about the time a held answer
/// takes to go out to a client that reads.
pub(super) const RETRY_AFTER_SECONDS: u64 = 1;

/// The bytes held by answers in progress.
#[derive(Debug)]
pub(super) struct Ledger {
    held: AtomicUsize,
    budget: AtomicUsize,
    gauge: IntGauge,
    refused: IntCounter,
}

/// Bytes charged to the ledger, given back when dropped.
#[derive(Debug)]
pub(super) struct Charge {
    ledger: Arc<Ledger>,
    bytes: usize,
}

impl Ledger {
    /// A ledger with `budget` bytes, its series registered in `telemetry`.
    pub(super) fn new(budget: usize, telemetry: &Telemetry) -> Arc<Ledger> {
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace(NAMESPACE);
        let gauge = IntGauge::with_opts(opts(
            "answer_bytes_held",
            "Bytes held by answers being written (a shared rendering counted once).",
        ))
        .expect("valid metric");
        let refused = IntCounter::with_opts(opts(
            "answers_refused_total",
            "Answers refused with 503 because answers being written held \
             listen.max_answer_bytes_held.",
        ))
        .expect("valid metric");
        telemetry.register(Box::new(gauge.clone()));
        telemetry.register(Box::new(refused.clone()));
        Arc::new(Ledger {
            held: AtomicUsize::new(0),
            budget: AtomicUsize::new(budget),
            gauge,
            refused,
        })
    }

    /// The budget in force (a reload may change it).
    pub(super) fn set_budget(&self, budget: usize) {
        self.budget.store(budget, Ordering::Relaxed);
    }

    /// Whether a new answer may start: `false` (and counted) while held bytes are at or over
    /// the budget.
    pub(super) fn admit(&self) -> bool {
        let ok = self.held.load(Ordering::Relaxed) < self.budget.load(Ordering::Relaxed);
        if !ok {
            self.refused.inc();
        }
        ok
    }

    /// Charges `bytes` until the returned charge is dropped.
    pub(super) fn charge(self: &Arc<Ledger>, bytes: usize) -> Charge {
        let now = self.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.gauge.set(i64::try_from(now).unwrap_or(i64::MAX));
        Charge {
            ledger: self.clone(),
            bytes,
        }
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let now = self.ledger.held.fetch_sub(self.bytes, Ordering::Relaxed) - self.bytes;
        self.ledger
            .gauge
            .set(i64::try_from(now).unwrap_or(i64::MAX));
    }
}

/// `bytes`, charged to `ledger` until the last copy of it is dropped (written or abandoned).
pub(super) fn charged(ledger: &Arc<Ledger>, bytes: Bytes) -> Bytes {
    let charge = ledger.charge(bytes.len());
    hold(bytes, charge)
}

/// `bytes`, holding `what` (a charge, a shared rendering) until the last copy of them is
/// dropped: an answer's last run keeps what it was made from alive until it is written.
pub(super) fn hold<T: Send + 'static>(bytes: Bytes, what: T) -> Bytes {
    Bytes::from_owner(Owned { bytes, _what: what })
}

/// Bytes that hold something until they are dropped.
struct Owned<T> {
    bytes: Bytes,
    _what: T,
}

impl<T> AsRef<[u8]> for Owned<T> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_refused_while_held_bytes_reach_the_budget_and_admitted_once_given_back() {
        let ledger = Ledger::new(100, &Telemetry::new());
        assert!(ledger.admit());
        let a = charged(&ledger, Bytes::from(vec![0u8; 60]));
        let b = a.clone();
        assert!(ledger.admit(), "60 of 100 held");
        let c = ledger.charge(40);
        assert_eq!(ledger.held(), 100);
        assert!(!ledger.admit(), "at the budget");
        assert_eq!(ledger.refused.get(), 1);
        drop(a);
        assert_eq!(ledger.held(), 100, "a copy still holds the bytes");
        drop(b);
        assert_eq!(ledger.held(), 40);
        assert!(ledger.admit());
        drop(c);
        assert_eq!(ledger.held(), 0);
        assert_eq!(ledger.gauge.get(), 0);
    }
}

//! Connection accounting: at most `max` connections at once, and what happens at the cap.
//!
//! At the cap, a new connection is admitted and the connection that has moved nothing longest is
//! closed to make room: one waiting for a request head (an idle keep-alive one, or one trickling
//! or withholding its head), since it began to wait, or one whose client does not take its
//! answer, since the client last took a byte. Simply not accepting would leave a fresh probe
//! queued in the kernel's backlog behind the very connections that fill the cap, until their
//! deadlines; shedding answers the probe at once, while a scraper whose connection is shed only
//! reconnects. A connection whose answer is still being made is never shed; when every one is,
//! the new connection is closed at once (`refused`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

use super::metrics::{Closed, ListenerMetrics};
use super::phase::Watch;

/// The open connections of a listener (or of several sharing one cap).
pub struct Slots {
    max: usize,
    inner: Mutex<Inner>,
    metrics: ListenerMetrics,
}

struct Inner {
    next: u64,
    open: HashMap<u64, Entry>,
}

struct Entry {
    /// The connection's phase and progress.
    watch: Arc<Watch>,
    shed: Arc<Notify>,
}

/// One admitted connection; leaves the accounting when dropped.
pub struct Slot {
    id: u64,
    slots: Arc<Slots>,
    /// Notified when the connection is shed to make room.
    pub(crate) shed: Arc<Notify>,
}

impl Slots {
    /// Accounting for at most `max` connections (the main port's: its cap is the one
    /// `http_connections_limit` shows).
    pub fn new(max: usize, metrics: ListenerMetrics) -> Arc<Slots> {
        metrics.limit.set(i64::try_from(max).unwrap_or(i64::MAX));
        Slots::reserve(max, metrics)
    }

    /// Accounting for at most `max` connections of their own (the probe port's reserve, which
    /// the main port's connections cannot take), counted in the same metrics.
    pub fn reserve(max: usize, metrics: ListenerMetrics) -> Arc<Slots> {
        Arc::new(Slots {
            max: max.max(1),
            inner: Mutex::new(Inner {
                next: 0,
                open: HashMap::new(),
            }),
            metrics,
        })
    }

    /// The metrics its connections are counted in.
    pub fn metrics(&self) -> &ListenerMetrics {
        &self.metrics
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections held now.
    pub fn open(&self) -> usize {
        self.inner.lock().expect("slots lock").open.len()
    }

    /// Admits a new connection (its `watch` made as it was accepted), shedding the one that
    /// has moved nothing longest at the cap; `None` when every connection's answer is being
    /// made.
    pub fn admit(self: &Arc<Self>, watch: Arc<Watch>) -> Option<Slot> {
        let mut inner = self.inner.lock().expect("slots lock");
        if inner.open.len() >= self.max {
            let oldest: Option<(Instant, u64)> = inner
                .open
                .iter()
                .filter_map(|(&id, e)| e.watch.stuck_since().map(|since| (since, id)))
                .min();
            match oldest {
                Some((_, id)) => {
                    let entry = inner.open.remove(&id).expect("found just now");
                    // A stored permit: the connection closes even if it is not waiting yet.
                    entry.shed.notify_one();
                    self.metrics.closed(Closed::Shed);
                    self.metrics.open.dec();
                }
                None => {
                    self.metrics.closed(Closed::Refused);
                    return None;
                }
            }
        }
        let id = inner.next;
        inner.next += 1;
        let shed = Arc::new(Notify::new());
        inner.open.insert(
            id,
            Entry {
                watch,
                shed: shed.clone(),
            },
        );
        self.metrics.open.inc();
        Some(Slot {
            id,
            slots: self.clone(),
            shed,
        })
    }
}

impl Slot {
    /// The listener's metrics, to count why the connection ends.
    pub fn metrics(&self) -> &ListenerMetrics {
        &self.slots.metrics
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.slots.inner.lock().expect("slots lock");
        if inner.open.remove(&self.id).is_some() {
            self.slots.metrics.open.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::telemetry::Telemetry;

    fn slots(max: usize) -> Arc<Slots> {
        Slots::new(max, ListenerMetrics::new(&Telemetry::new()))
    }

    fn shed(slot: &Slot) -> bool {
        futures_util::FutureExt::now_or_never(slot.shed.notified()).is_some()
    }

    #[test]
    fn at_the_cap_the_longest_waiter_makes_room() {
        let s = slots(2);
        let t0 = Instant::now();
        let first = s.admit(Watch::new(t0)).expect("room");
        let second = s
            .admit(Watch::new(t0 + Duration::from_secs(1)))
            .expect("room");
        let third = s
            .admit(Watch::new(t0 + Duration::from_secs(2)))
            .expect("the oldest is shed");
        assert_eq!(s.open(), 2);
        // The first one's close signal is stored until its task looks.
        assert!(shed(&first));
        assert!(!shed(&second));
        drop(first);
        assert_eq!(s.open(), 2, "a shed slot was already given up");
        drop((second, third));
        assert_eq!(s.open(), 0);
    }

    #[test]
    fn an_answer_being_made_is_never_shed_one_its_client_does_not_take_is() {
        let s = slots(2);
        let t0 = Instant::now();
        let making = Watch::new(t0);
        making.busy(t0);
        let busy = s.admit(making).expect("room");
        let waiting = s
            .admit(Watch::new(t0 + Duration::from_secs(5)))
            .expect("room");
        let _new = s
            .admit(Watch::new(t0 + Duration::from_secs(6)))
            .expect("room");
        assert!(shed(&waiting));
        assert!(!shed(&busy));

        // An answer handed to a client that takes nothing: shed before a fresher waiter.
        let s = slots(2);
        let blocked = Watch::new(t0);
        blocked.busy(t0);
        blocked.writing(t0 + Duration::from_secs(1));
        let blocked = s.admit(blocked).expect("room");
        let fresh = s
            .admit(Watch::new(t0 + Duration::from_secs(3)))
            .expect("room");
        let _new = s
            .admit(Watch::new(t0 + Duration::from_secs(4)))
            .expect("room");
        assert!(shed(&blocked), "moved no byte since t0 + 1 s");
        assert!(!shed(&fresh));
    }

    #[test]
    fn when_every_answer_is_being_made_a_new_connection_is_refused() {
        let s = slots(1);
        let now = Instant::now();
        let making = Watch::new(now);
        making.busy(now);
        let _busy = s.admit(making.clone()).expect("room");
        assert!(s.admit(Watch::new(now)).is_none());
        making.idle(Instant::now());
        assert!(s.admit(Watch::new(Instant::now())).is_some());
    }
}

//! Connection accounting: at most `max` connections at once, and what happens at the cap.
//!
//! At the cap, a new connection is admitted and the connection that has waited longest for a
//! request head (an idle keep-alive one, or one trickling or withholding its head) is closed to
//! make room. Simply not accepting would leave a fresh probe queued in the kernel's backlog
//! behind the very connections that fill the cap, until their head timeout; shedding the oldest
//! waiter answers the probe at once, while a scraper whose connection is shed only reconnects.
//! Connections with a request in flight are never shed; when every one is busy, the new
//! connection is closed at once (`refused`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

use super::metrics::{Closed, ListenerMetrics};

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
    /// Since when the connection waits for a request head; `None` while a request is in flight.
    waiting_since: Option<Instant>,
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
    /// Accounting for at most `max` connections.
    pub fn new(max: usize, metrics: ListenerMetrics) -> Arc<Slots> {
        metrics.limit.set(i64::try_from(max).unwrap_or(i64::MAX));
        Arc::new(Slots {
            max: max.max(1),
            inner: Mutex::new(Inner {
                next: 0,
                open: HashMap::new(),
            }),
            metrics,
        })
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections held now.
    pub fn open(&self) -> usize {
        self.inner.lock().expect("slots lock").open.len()
    }

    /// Admits a new connection, shedding the longest waiter at the cap; `None` when every
    /// connection has a request in flight.
    pub fn admit(self: &Arc<Self>, now: Instant) -> Option<Slot> {
        let mut inner = self.inner.lock().expect("slots lock");
        if inner.open.len() >= self.max {
            let oldest = inner
                .open
                .iter()
                .filter_map(|(&id, e)| e.waiting_since.map(|since| (since, id)))
                .min();
            match oldest {
                Some((_, id)) => {
                    let entry = inner.open.remove(&id).expect("found just now");
                    // A stored permit: the connection closes even if it is not waiting yet.
                    entry.shed.notify_one();
                    self.metrics.closed(Closed::Shed);
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
                waiting_since: Some(now),
                shed: shed.clone(),
            },
        );
        self.metrics.open.set(inner.open.len() as i64);
        Some(Slot {
            id,
            slots: self.clone(),
            shed,
        })
    }

    fn set_waiting(&self, id: u64, since: Option<Instant>) {
        if let Some(entry) = self.inner.lock().expect("slots lock").open.get_mut(&id) {
            entry.waiting_since = since;
        }
    }
}

impl Slot {
    /// A request is in flight: the connection cannot be shed until [`Slot::waiting`].
    pub fn busy(&self) {
        self.slots.set_waiting(self.id, None);
    }

    /// The connection waits for its next request head since `since`.
    pub fn waiting(&self, since: Instant) {
        self.slots.set_waiting(self.id, Some(since));
    }

    /// The listener's metrics, to count why the connection ends.
    pub fn metrics(&self) -> &ListenerMetrics {
        &self.slots.metrics
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.slots.inner.lock().expect("slots lock");
        inner.open.remove(&self.id);
        self.slots.metrics.open.set(inner.open.len() as i64);
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

    #[test]
    fn at_the_cap_the_longest_waiter_makes_room() {
        let s = slots(2);
        let t0 = Instant::now();
        let first = s.admit(t0).expect("room");
        let second = s.admit(t0 + Duration::from_secs(1)).expect("room");
        let third = s
            .admit(t0 + Duration::from_secs(2))
            .expect("the oldest is shed");
        assert_eq!(s.open(), 2);
        // The first one's close signal is stored until its task looks.
        let shed = first.shed.clone();
        assert!(futures_util::FutureExt::now_or_never(shed.notified()).is_some());
        assert!(futures_util::FutureExt::now_or_never(second.shed.notified()).is_none());
        drop(first);
        assert_eq!(s.open(), 2, "a shed slot was already given up");
        drop((second, third));
        assert_eq!(s.open(), 0);
    }

    #[test]
    fn a_connection_with_a_request_in_flight_is_never_shed() {
        let s = slots(2);
        let t0 = Instant::now();
        let busy = s.admit(t0).expect("room");
        busy.busy();
        let waiting = s.admit(t0 + Duration::from_secs(5)).expect("room");
        let _new = s.admit(t0 + Duration::from_secs(6)).expect("room");
        assert!(futures_util::FutureExt::now_or_never(waiting.shed.notified()).is_some());
        assert!(futures_util::FutureExt::now_or_never(busy.shed.notified()).is_none());
    }

    #[test]
    fn when_every_connection_is_busy_a_new_one_is_refused() {
        let s = slots(1);
        let busy = s.admit(Instant::now()).expect("room");
        busy.busy();
        assert!(s.admit(Instant::now()).is_none());
        busy.waiting(Instant::now());
        assert!(s.admit(Instant::now()).is_some());
    }
}

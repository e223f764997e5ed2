//! The queue in front of bcrypt: uncached checks run one at a time, taken in turn from each
//! client address and user (round robin), so that a flood of guesses from one source or at one
//! user waits behind itself and not in front of everyone else.
//!
//! - A key is the client's address and the user name when it is a configured user; every
//!   unknown name from one address shares one key (inventing names makes no new queue).
//! - A key holds at most [`PER_KEY`] waiting checks and the gate at most [`MAX_WAITING`]; past
//!   either, the request is refused at once (429): memory and waiting time stay bounded.
//! - A waiting check that ends before its turn (cancelled, reset, timed out) leaves its queue
//!   when its future is dropped; a turn handed to a request that is gone passes to the next.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Checks one key may have waiting; more from it get 429.
pub(super) const PER_KEY: usize = 4;
/// Checks waiting in all; more get 429.
pub(super) const MAX_WAITING: usize = 64;

/// Who a check is for: the client's address (when known) and the configured user it names
/// (`None`: a name that is no user's).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) client: Option<IpAddr>,
    pub(super) user: Option<usize>,
}

#[derive(Default)]
pub(super) struct Gate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A check holds the turn.
    running: bool,
    /// Keys with waiting checks, in the order they get their next turn.
    order: VecDeque<Key>,
    queues: HashMap<Key, VecDeque<Waiter>>,
    waiting: usize,
    next_id: u64,
}

struct Waiter {
    id: u64,
    turn: oneshot::Sender<Turn>,
}

/// The right to run one check; handed on to the next waiter when dropped.
pub(super) struct Turn {
    gate: Arc<Gate>,
    /// A turn that could not be handed over (its waiter was gone) and was taken back.
    spent: bool,
}

/// The gate refused to queue a check.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Full;

impl Gate {
    /// Waits for the turn of a check for `key`.
    pub(super) async fn enter(self: &Arc<Gate>, key: Key) -> Result<Turn, Full> {
        let (id, turn) = {
            let mut s = self.state.lock().expect("gate lock");
            if !s.running && s.waiting == 0 {
                s.running = true;
                return Ok(Turn {
                    gate: self.clone(),
                    spent: false,
                });
            }
            let queued = s.queues.get(&key).map_or(0, VecDeque::len);
            if queued >= PER_KEY || s.waiting >= MAX_WAITING {
                return Err(Full);
            }
            let (tx, rx) = oneshot::channel();
            s.next_id += 1;
            let id = s.next_id;
            if queued == 0 {
                s.order.push_back(key.clone());
            }
            s.queues
                .entry(key.clone())
                .or_default()
                .push_back(Waiter { id, turn: tx });
            s.waiting += 1;
            (id, rx)
        };
        let leave = Leave {
            gate: self.clone(),
            key,
            id,
        };
        let turn = turn.await.map_err(|_| Full);
        drop(leave);
        turn
    }

    /// Hands the turn to the next waiter, key by key; frees it when nobody waits.
    fn pass_on(self: &Arc<Gate>) {
        loop {
            let next = {
                let mut s = self.state.lock().expect("gate lock");
                match s.take_next() {
                    Some(w) => w,
                    None => {
                        s.running = false;
                        return;
                    }
                }
            };
            let turn = Turn {
                gate: self.clone(),
                spent: false,
            };
            match next.turn.send(turn) {
                Ok(()) => return,
                // Its request ended just now: the next one gets the turn.
                Err(mut back) => back.spent = true,
            }
        }
    }

    /// How many checks wait (for tests and the metrics).
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.state.lock().expect("gate lock").waiting
    }
}

impl State {
    fn take_next(&mut self) -> Option<Waiter> {
        let key = self.order.pop_front()?;
        let queue = self.queues.get_mut(&key)?;
        let waiter = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&key);
        } else {
            self.order.push_back(key);
        }
        if waiter.is_some() {
            self.waiting -= 1;
        }
        waiter
    }

    fn remove(&mut self, key: &Key, id: u64) {
        let Some(queue) = self.queues.get_mut(key) else {
            return;
        };
        let Some(at) = queue.iter().position(|w| w.id == id) else {
            return;
        };
        queue.remove(at);
        self.waiting -= 1;
        if queue.is_empty() {
            self.queues.remove(key);
            self.order.retain(|k| k != key);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.spent {
            self.gate.pass_on();
        }
    }
}

/// Takes a waiter out of its queue when its request ends before its turn.
struct Leave {
    gate: Arc<Gate>,
    key: Key,
    id: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.gate
            .state
            .lock()
            .expect("gate lock")
            .remove(&self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(client: u8, user: Option<usize>) -> Key {
        Key {
            client: Some(IpAddr::from([127, 0, 0, client])),
            user,
        }
    }

    #[tokio::test]
    async fn cancelled_waiters_give_their_places_back() {
        let gate = Arc::new(Gate::default());
        let running = gate.enter(key(1, None)).await.expect("first runs");
        for _ in 0..10 {
            // Each waiter is dropped before its turn: a client that reset its connection.
            let wait = gate.enter(key(1, None));
            let gone = tokio::time::timeout(std::time::Duration::from_millis(5), wait).await;
            assert!(gone.is_err(), "no turn while the first runs");
        }
        assert_eq!(gate.waiting(), 0, "every cancelled waiter left");
        drop(running);
        // The gate is free again: nothing was kept for the cancelled ones.
        let again = gate.enter(key(1, None)).await;
        assert!(again.is_ok());
    }

    #[tokio::test]
    async fn a_key_gets_its_turn_however_long_another_queue_is() {
        let gate = Arc::new(Gate::default());
        let running = gate.enter(key(1, Some(0))).await.expect("runs");
        let mut flood = Vec::new();
        for _ in 0..PER_KEY {
            let g = gate.clone();
            flood.push(tokio::spawn(async move {
                let t = g.enter(key(1, Some(0))).await;
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                drop(t);
            }));
        }
        tokio::task::yield_now().await;
        while gate.waiting() < PER_KEY {
            tokio::task::yield_now().await;
        }
        // The flooding key is full; another user from the same address still gets a place.
        assert_eq!(gate.enter(key(1, Some(0))).await.err(), Some(Full));
        let g = gate.clone();
        let other = tokio::spawn(async move { g.enter(key(1, Some(1))).await.is_ok() });
        while gate.waiting() < PER_KEY + 1 {
            tokio::task::yield_now().await;
        }
        drop(running);
        // Round robin: the other key's check comes second, not after the whole flood.
        assert!(other.await.expect("task"));
        for f in flood {
            f.await.expect("task");
        }
        assert_eq!(gate.waiting(), 0);
    }

    #[tokio::test]
    async fn a_turn_handed_to_a_gone_waiter_passes_on() {
        let gate = Arc::new(Gate::default());
        let running = gate.enter(key(1, None)).await.expect("runs");
        let (tx, rx) = oneshot::channel::<()>();
        let g = gate.clone();
        let gone = tokio::spawn(async move {
            let _t = g.enter(key(2, None)).await;
            let _ = rx.await;
        });
        while gate.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        drop(running);
        // The waiter got the turn; its request then ends without running a check.
        gone.abort();
        drop(tx);
        let _ = gone.await;
        let next =
            tokio::time::timeout(std::time::Duration::from_secs(1), gate.enter(key(3, None)))
                .await
                .expect("the turn came back");
        assert!(next.is_ok());
    }
}

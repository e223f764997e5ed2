//! Timeouts judged by a thread that was running at its deadline.
//!
//! A timer that fires late says that the runtime's thread was kept from running around its
//! deadline: a container starved of CPU (a CPU engine busy on every core of the node, a small
//! CPU request), a stopped process, a long piece of work on the thread. An engine's answer may
//! have come in meanwhile and wait, unread, in its socket; and the runtime, running again, would
//! poll the timer before the connection that reads it (reqwest's own timeout is polled first),
//! so that a check of an engine that answered in time would end "timed out": the engine called
//! down, an incident opened, a canary failed, for sysport's own lateness.
//!
//! So the timeout counts only at a deadline the thread met on time. When the timer fires more
//! than [`LATE`] after its deadline, the work gets [`GRACE`] more, which reads what has come
//! in; again while each grace ends late too, until the timeout has passed twice: a hung engine
//! is timed out within twice its timeout and a grace, plus however late the thread came back
//! to the last two deadlines.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How late a timer may fire and still say the thread was running: the timer wheel's
/// millisecond, a busy runtime's few (a parse of a large page holds the thread for about
/// 6 ms), with room to spare.
const LATE: Duration = Duration::from_millis(50);

/// What the work gets after a deadline the thread met late: ample, on a running thread, to read
/// an answer already in its socket.
const GRACE: Duration = Duration::from_millis(100);

/// `work`'s output, or `None` when it was not done `timeout` from now at a deadline the thread
/// met on time (see the module's doc).
pub(crate) async fn within<F: Future>(timeout: Duration, work: F) -> Option<F::Output> {
    let mut due = Instant::now() + timeout;
    let last = due + timeout;
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            out = &mut work => return Some(out),
            () = tokio::time::sleep_until(due) => {}
        }
        let now = Instant::now();
        if now.saturating_duration_since(due) <= LATE || due >= last {
            return None;
        }
        due = now + GRACE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds the runtime's only thread for `d`, as a starved or stopped process would be held.
    fn hold_thread(d: Duration) {
        std::thread::sleep(d);
    }

    /// An answer that comes in while the runtime's thread is held past the deadline, and is
    /// handed over by another task in pieces, one a turn of the runtime (as hyper's connection
    /// task hands a body to the request), waited for `timeout` by `wait`: whether all of it came.
    async fn answer_in_pieces_across_a_held_thread<F, W>(wait: W) -> bool
    where
        W: FnOnce(tokio::sync::mpsc::Receiver<u32>) -> F,
        F: Future<Output = Option<u32>> + Send + 'static,
    {
        let (came_in, arrived) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            if arrived.await.is_ok() {
                for piece in 0..8 {
                    let _ = tx.send(piece).await;
                    tokio::task::yield_now().await;
                }
            }
        });
        let waited = tokio::spawn(wait(rx));
        tokio::task::yield_now().await;
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let _ = came_in.send(());
        });
        hold_thread(Duration::from_millis(400));
        waited.await.expect("task") == Some(8)
    }

    async fn all_pieces(mut rx: tokio::sync::mpsc::Receiver<u32>) -> u32 {
        let mut n = 0;
        while rx.recv().await.is_some() {
            n += 1;
        }
        n
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_answer_that_came_in_while_the_thread_was_held_past_the_deadline_is_read() {
        let timeout = Duration::from_millis(100);
        // tokio's own timeout, polled as the runtime comes back, finds the deadline passed with
        // the answer half handed over: a timeout, for the thread's lateness.
        let plain = |rx| async move { tokio::time::timeout(timeout, all_pieces(rx)).await.ok() };
        assert!(!answer_in_pieces_across_a_held_thread(plain).await);
        assert!(answer_in_pieces_across_a_held_thread(|rx| within(timeout, all_pieces(rx))).await);
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_never_ends_times_out_at_the_deadline_on_a_running_thread() {
        // The clock stands still but for the runtime's own advance to each timer: every timer
        // fires exactly on time, and the timeout is the timeout, without a grace.
        let started = Instant::now();
        let out = within(Duration::from_millis(100), std::future::pending::<()>()).await;
        assert_eq!(out, None);
        assert_eq!(started.elapsed(), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_never_ends_times_out_within_twice_the_timeout_however_late_the_thread() {
        // The clock jumps 90 ms at a time, as for a thread that gets a CPU now and then: each
        // timer fires up to a jump late. The work still ends, within twice its timeout, a grace
        // and a jump for each of the two late deadlines that bound it (the last one before
        // twice the timeout, and its grace's).
        const JUMP: Duration = Duration::from_millis(90);
        let timeout = Duration::from_millis(200);
        let started = Instant::now();
        let waited = tokio::spawn(async move {
            let out = within(timeout, std::future::pending::<()>()).await;
            (out, started.elapsed())
        });
        let jumps = tokio::spawn(async {
            for _ in 0..40 {
                tokio::time::advance(JUMP).await;
            }
        });
        let (out, took) = waited.await.expect("task");
        jumps.abort();
        assert_eq!(out, None);
        assert!(
            took > timeout + LATE,
            "{took:?}: the late deadline was taken as the end"
        );
        assert!(took <= timeout * 2 + GRACE + JUMP * 2, "{took:?}");
    }
}

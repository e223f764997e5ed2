//! The second thread of the two-thread parse: one long-lived thread takes the second part of
//! every large parse in turn, instead of a thread spawned and joined per parse. sysport parses
//! on its one runtime thread, so a spawn per page was paid there (and a new thread starts on its
//! parent's core on the VMs measured, bench/RESULTS.md §9). The thread is started on first use
//! and ends with the process.
//!
//! Parses running at once (more than one runtime worker) queue their second parts: a part whose
//! turn comes late finds the first thread done with the body and takes nothing, which is what a
//! thread that started late did too.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send>;

/// Runs `f` on the helper thread; `None` when that thread cannot be started.
pub(super) fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<Handle<T>> {
    let (done, rx) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        // A panic goes to the waiter, and the thread lives on for the next parse. Nobody
        // waits when the first thread parsed the whole body itself.
        let _ = done.send(catch_unwind(AssertUnwindSafe(f)));
    });
    queue()?.send(job).ok()?;
    Some(Handle { rx })
}

/// The helper thread's queue, the thread started on first use.
fn queue() -> Option<&'static Sender<Job>> {
    static QUEUE: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("sysport-parse".into())
                .spawn(move || rx.into_iter().for_each(|job| job()))
                .ok()?;
            Some(tx)
        })
        .as_ref()
}

/// A job given to the helper thread.
pub(super) struct Handle<T> {
    rx: Receiver<std::thread::Result<T>>,
}

impl<T> Handle<T> {
    /// The job's result, as [`std::thread::JoinHandle::join`] gives a thread's, after spinning
    /// up to `spin` before sleeping (when the job is about done, that is quicker than being
    /// woken up by its end). `None` if the job was dropped without running (no helper thread).
    pub(super) fn wait(self, spin: Duration) -> Option<std::thread::Result<T>> {
        let start = Instant::now();
        loop {
            match self.rx.try_recv() {
                Ok(result) => return Some(result),
                Err(TryRecvError::Empty) if start.elapsed() < spin => std::hint::spin_loop(),
                Err(TryRecvError::Empty) => return self.rx.recv().ok(),
                Err(TryRecvError::Disconnected) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_on_the_same_long_lived_thread() {
        let here = std::thread::current().id();
        let ids: Vec<_> = (0..20)
            .map(|_| {
                run(|| std::thread::current().id())
                    .expect("helper starts")
                    .wait(Duration::ZERO)
                    .expect("the job ran")
                    .expect("the job did not panic")
            })
            .collect();
        assert!(ids.iter().all(|&id| id == ids[0] && id != here), "{ids:?}");
    }

    #[test]
    fn a_panicking_job_panics_its_waiter_and_the_helper_lives_on() {
        let job = run(|| -> u32 { panic!("a parser bug") }).expect("helper starts");
        let panic = job
            .wait(Duration::ZERO)
            .expect("the job ran")
            .expect_err("the job's panic reaches its waiter");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"a parser bug"));
        let next = run(|| 7).expect("helper still there");
        assert!(matches!(next.wait(Duration::from_micros(100)), Some(Ok(7))));
    }
}

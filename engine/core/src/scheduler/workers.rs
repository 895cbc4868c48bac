//! The threads that execute nodes, kept for the whole run: a node is handed to a worker waiting for one, and a
//! new worker starts only when none is waiting. A run so starts about as many threads as it runs nodes at once
//! instead of one per node: a thread's creation, the first page faults of its stack and allocator heap, and
//! its exit were a tenth of the engine's time on a first run of trivial nodes, and on a chain's critical path.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::Scope;

/// A node's execution, borrowing what the run holds.
pub(super) type Job<'env> = Box<dyn FnOnce() + Send + 'env>;

/// The run's workers, started in `scope` as they are needed; dropping this lets them end once the jobs
/// handed to them are done (the scope then joins them).
pub(super) struct Workers<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    shared: Arc<Shared<'env>>,
}

struct Shared<'env> {
    state: Mutex<State<'env>>,
    handed: Condvar,
}

#[derive(Default)]
struct State<'env> {
    queue: VecDeque<Job<'env>>,
    /// Workers waiting for a job: each takes one job from the queue when it wakes.
    waiting: usize,
    closed: bool,
}

impl<'scope, 'env> Workers<'scope, 'env> {
    pub fn new(scope: &'scope Scope<'scope, 'env>) -> Self {
        Workers {
            scope,
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                handed: Condvar::new(),
            }),
        }
    }

    /// Runs `job` on a waiting worker, or on a new one when every worker is busy. A woken worker stays counted
    /// as waiting until it takes a job, and the job it will take is in the queue: more waiting workers than
    /// queued jobs means one is free for this job.
    pub fn run(&self, job: Job<'env>) {
        let mut state = lock(&self.shared);
        let free = state.waiting > state.queue.len();
        state.queue.push_back(job);
        drop(state);
        if free {
            self.shared.handed.notify_one();
        } else {
            let shared = Arc::clone(&self.shared);
            self.scope.spawn(move || work(&shared));
        }
    }
}

impl Drop for Workers<'_, '_> {
    fn drop(&mut self) {
        lock(&self.shared).closed = true;
        self.shared.handed.notify_all();
    }
}

/// A worker's life: jobs until the run closes and none is left.
fn work(shared: &Shared<'_>) {
    let mut state = lock(shared);
    loop {
        if let Some(job) = state.queue.pop_front() {
            drop(state);
            job();
            state = lock(shared);
            continue;
        }
        if state.closed {
            return;
        }
        state.waiting += 1;
        state = shared
            .handed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
        state.waiting -= 1;
    }
}

/// The state, even after a job panicked while another worker held the lock: the lock guards only the queue
/// and counters, which every holder leaves consistent.
fn lock<'a, 'env>(shared: &'a Shared<'env>) -> MutexGuard<'a, State<'env>> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    #[test]
    fn every_job_runs_and_workers_are_reused_once_free() {
        let ran = AtomicUsize::new(0);
        let threads = Mutex::new(std::collections::HashSet::new());
        std::thread::scope(|scope| {
            let workers = Workers::new(scope);
            let (done, finished) = mpsc::channel();
            // One job at a time, as a chain runs: each waits for the previous one to end.
            for _ in 0..50 {
                let done = done.clone();
                let (ran, threads) = (&ran, &threads);
                workers.run(Box::new(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                    threads
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(std::thread::current().id());
                    let _ = done.send(());
                }));
                finished.recv().expect("the job ran");
                // Until the worker waits again (bounded): a job handed over before that starts another worker.
                for _ in 0..2000 {
                    if lock(&workers.shared).waiting == 1 {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        });
        assert_eq!(ran.load(Ordering::SeqCst), 50);
        let started = threads.lock().unwrap_or_else(PoisonError::into_inner).len();
        assert_eq!(started, 1, "{started} workers for 50 sequential jobs");
    }

    #[test]
    fn jobs_handed_at_once_run_side_by_side() {
        // Four jobs that each wait until all four have started: with fewer than four workers this never ends,
        // so the wait is bounded and its outcome checked.
        let started = AtomicUsize::new(0);
        let all_met = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let workers = Workers::new(scope);
            for _ in 0..4 {
                let (started, all_met) = (&started, &all_met);
                workers.run(Box::new(move || {
                    started.fetch_add(1, Ordering::SeqCst);
                    for _ in 0..2000 {
                        if started.load(Ordering::SeqCst) == 4 {
                            all_met.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                }));
            }
        });
        assert_eq!(all_met.load(Ordering::SeqCst), 4);
    }
}

//! One node's execution on one of the run's workers: each attempt in a fresh staging directory, staged for the cache
//! only on success (the run's committer publishes it), transient failures retried with backoff.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use petgraph::graph::NodeIndex;

use crate::cache::Staged;
use crate::exec::{Cancel, Inputs, Job, NodeError, Outcome, RunIdentity};
use crate::fingerprint::Fingerprint;
use crate::keylock::KeyLock;
use crate::run::now_rfc3339;
use crate::spec::NodeSpec;

use super::Engine;

/// First wait before retrying a transient failure; doubled per attempt, capped at `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often a backoff looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// A node the run has started: everything its thread needs, owned or borrowed from the graph.
#[derive(Debug)]
pub(super) struct Launch<'g> {
    pub index: NodeIndex,
    pub spec: &'g NodeSpec,
    pub fingerprint: Fingerprint,
    pub key: fracflow_record::Digest,
    /// Each dependency and the run directory's view of its outputs.
    pub inputs: Inputs<'g>,
    pub log: PathBuf,
    /// The key's lock, held until the entry is committed or the node failed.
    pub key_lock: Option<KeyLock>,
}

/// A node's thread is done with it.
#[derive(Debug)]
pub(super) struct Finished {
    pub index: NodeIndex,
    pub result: Result<Staged, NodeError>,
    pub seconds: f64,
    /// Still held when the node succeeded: released once its entry is committed.
    pub key_lock: Option<KeyLock>,
    /// The staging directory of the attempt that succeeded, removed after the commit.
    pub staging: Option<PathBuf>,
}

impl Launch<'_> {
    /// Executes the node until it succeeds, fails for good, runs out of retries or the run is cancelled.
    pub fn execute(self, engine: Engine<'_>, cancel: &Cancel, identity: &RunIdentity) -> Finished {
        let started = Instant::now();
        let (result, staging) = match self.attempts(engine, cancel, identity) {
            Ok((staged, staging)) => (Ok(staged), Some(staging)),
            Err(error) => (Err(error), None),
        };
        Finished {
            index: self.index,
            // A failed node releases its key now: a waiting engine takes the lock and builds the key itself.
            key_lock: result.is_ok().then_some(self.key_lock).flatten(),
            result,
            seconds: started.elapsed().as_secs_f64(),
            staging,
        }
    }

    fn attempts(
        &self,
        engine: Engine<'_>,
        cancel: &Cancel,
        identity: &RunIdentity,
    ) -> Result<(Staged, PathBuf), NodeError> {
        let spec = self.spec;
        let executor = engine
            .kinds
            .executor(&spec.kind)
            .ok_or_else(|| NodeError::permanent(format!("no executor for kind `{}`", spec.kind)))?;
        let io = |e: std::io::Error| NodeError::permanent(format!("node `{}`: {e}", spec.id));
        // A fresh log for this run; the kind appends to it. The run's `logs/` is made by the first node that
        // finds none, not checked by every node.
        match fs::File::create(&self.log) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = self.log.parent() {
                    fs::create_dir_all(parent).map_err(io)?;
                }
                fs::File::create(&self.log).map_err(io)?;
            }
            created => {
                created.map_err(io)?;
            }
        }
        let mut attempt = 0;
        loop {
            let staging = engine.cache.staging_dir(&spec.id).map_err(io)?;
            let started = Instant::now();
            let job = Job {
                spec,
                root: engine.root,
                out_dir: &staging,
                inputs: &self.inputs,
                log: &self.log,
                cancel,
                attempt,
                run: identity,
                key: &self.key,
            };
            let result: Result<Outcome, NodeError> = executor.execute(&job);
            let staged = result.and_then(|outcome| {
                engine
                    .cache
                    .stage(
                        &spec.id,
                        &self.fingerprint,
                        &staging,
                        &spec.outputs,
                        outcome.metrics,
                        Some(&self.log),
                        started.elapsed().as_secs_f64(),
                        now_rfc3339(),
                    )
                    .map_err(|e| {
                        NodeError::permanent(format!("storing outputs of `{}`: {e}", spec.id))
                    })
            });
            let error = match staged {
                Ok(staged) => return Ok((staged, staging)),
                Err(error) => error,
            };
            let _ = engine.cache.files().remove_dir_all(&staging);
            if !error.transient || attempt >= spec.retries || cancel.is_cancelled() {
                return Err(error);
            }
            let backoff = FIRST_BACKOFF
                .saturating_mul(1 << attempt.min(16))
                .min(MAX_BACKOFF);
            append_log(
                &self.log,
                &format!(
                    "fracflow: attempt {} failed ({error}); retrying in {backoff:?}\n",
                    attempt + 1
                ),
            );
            let deadline = Instant::now() + backoff;
            while Instant::now() < deadline && !cancel.is_cancelled() {
                std::thread::sleep(CANCEL_POLL);
            }
            attempt += 1;
        }
    }
}

fn append_log(log: &Path, text: &str) {
    use std::io::Write;
    if let Ok(mut file) = fs::OpenOptions::new().append(true).open(log) {
        let _ = file.write_all(text.as_bytes());
    }
}

//! Nodes handed to an existing Slurm cluster: the testbed profile names the kinds (`slurm.kinds`, e.g. the build
//! chain) and the resources; each such node is submitted with `sbatch`, polled with `scontrol show job`, its log
//! streamed into the node's log, and its outputs collected from the shared project directory.
//!
//! The job runs `fracflow __node-exec DIR` on a compute node: the same executor as a local run, reading the
//! node's request from `DIR` and leaving its outputs, metrics and exit status there. `DIR` is
//! `<project>/.fracflow/slurm/<node key>/`, so the project must be on a filesystem the compute nodes share.
//! The key is the node's cache key, so a restarted engine finds the same `DIR`: while `DIR/job` names a job that is still queued or running it re-attaches to it instead of
//! submitting again, and a job that finished meanwhile is collected without running again. A failed,
//! cancelled or timed-out job fails its node with Slurm's state, exit code and reason; cancelling the run
//! (Ctrl-C) `scancel`s the job by id.
//!
//! Not relied on: `sbatch --wait` (it holds a process for the job's length and cannot re-attach) and `sacct`
//! (clusters without accounting storage refuse it); `DIR/exit` records the outcome instead, so a job purged
//! from `scontrol` after `MinJobAge` is still read correctly.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fracflow_core::{Executor, Inputs, Job, KindInfo, NodeError, NodeSpec, Outcome, RunIdentity};
use fracflow_record::Digest;
use serde::{Deserialize, Serialize};

/// The hidden verb a Slurm job runs.
pub const NODE_EXEC_VERB: &str = "__node-exec";
/// Files in a node's Slurm directory.
const REQUEST_FILE: &str = "request.json";
const JOB_FILE: &str = "job";
const EXIT_FILE: &str = "exit";
const OUTCOME_FILE: &str = "outcome.json";
const LOG_FILE: &str = "slurm.out";
const OUT_DIR: &str = "out";
/// How long the engine keeps polling a controller that does not answer before it gives the node up (the job
/// itself is kept, and the next run re-attaches to it).
const CONTROLLER_PATIENCE: Duration = Duration::from_secs(600);
/// How long `scancel` gets to end a job before the node gives up waiting.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// The profile's `slurm:` section.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlurmProfile {
    /// Node kinds submitted to Slurm (`[hls, weave, partials, image]`: the build chain).
    pub kinds: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `-c`: CPUs per job.
    #[serde(default = "one")]
    pub cpus: u32,
    /// `--mem` (`4G`); absent: the partition's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<String>,
    /// `-t` (`30`, `2:00:00`, `1-00:00:00`); absent: the partition's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Seconds between state polls.
    #[serde(default = "default_poll")]
    pub poll_s: f64,
    /// `fracflow` as the compute nodes see it; default: this engine's binary (a shared filesystem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fracflow: Option<String>,
    /// More `sbatch` options, as words (`[--account, fpga, --qos, long]`).
    #[serde(default)]
    pub sbatch_args: Vec<String>,
}

fn one() -> u32 {
    1
}
fn default_poll() -> f64 {
    2.0
}

/// What a job needs to run one node (`DIR/request.json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct NodeRequest {
    pub spec: NodeSpec,
    pub key: Digest,
    pub root: PathBuf,
    pub inputs: BTreeMap<String, PathBuf>,
    pub attempt: u32,
    pub pipeline: String,
    pub run_id: String,
    pub testbed: String,
}

/// Runs a Slurm client command (`sbatch`, `scontrol`, `scancel`): its exit code and stdout + stderr.
type SlurmClient = fn(&str, &[String]) -> Result<(i32, String), String>;

/// A kind whose nodes run as Slurm jobs; `inner` is the same kind run locally (for `info` and `describe`).
pub struct SlurmKind {
    inner: Box<dyn Executor>,
    profile: SlurmProfile,
    client: SlurmClient,
}

impl SlurmKind {
    pub fn new(inner: Box<dyn Executor>, profile: SlurmProfile) -> SlurmKind {
        SlurmKind {
            inner,
            profile,
            client: query,
        }
    }
}

impl std::fmt::Debug for SlurmKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmKind")
            .field("profile", &self.profile)
            .finish()
    }
}

fn failed(spec: &NodeSpec, what: impl std::fmt::Display) -> NodeError {
    NodeError::permanent(format!("node `{}`: {what}", spec.id))
}

impl Executor for SlurmKind {
    // Where a node runs changes none of its outputs: the key stays the local one, so results are shared.
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        self.inner.info(spec)
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        format!("[slurm] {}", self.inner.describe(spec))
    }

    // The job runs the same kind: its configuration is the inner kind's.
    fn check(&self, spec: &NodeSpec, root: &Path) -> Vec<fracflow_core::ConfigProblem> {
        self.inner.check(spec, root)
    }

    fn config_schema(&self) -> serde_json::Value {
        self.inner.config_schema()
    }

    fn shell_fields(&self) -> &'static [&'static str] {
        self.inner.shell_fields()
    }

    fn implied_outputs(&self, spec: &NodeSpec) -> Vec<String> {
        self.inner.implied_outputs(spec)
    }

    fn implied_inputs(&self, spec: &NodeSpec, root: &Path) -> Vec<String> {
        self.inner.implied_inputs(spec, root)
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let spec = job.spec;
        let dir = job_dir(job);
        fs::create_dir_all(&dir).map_err(|e| failed(spec, format!("{}: {e}", dir.display())))?;
        let mut log = NodeLog::open(job.log).map_err(|e| failed(spec, e))?;
        let id = match read_trimmed(&dir.join(JOB_FILE)) {
            Some(id) => {
                log.line(&format!(
                    "re-attached to Slurm job {id}, submitted by an earlier run (not submitted again)"
                ));
                id
            }
            None => self.submit(job, &dir, &mut log)?,
        };
        let ended = self.follow(job, &dir, &id, &mut log)?;
        let result = collect(job, &dir, &id, &ended);
        if result.is_ok() || ended.state != "COMPLETED" {
            // Done with this job either way: a rerun submits afresh.
            let _ = fs::remove_dir_all(&dir);
        }
        result
    }
}

impl SlurmKind {
    fn submit(&self, job: &Job<'_>, dir: &Path, log: &mut NodeLog) -> Result<String, NodeError> {
        let spec = job.spec;
        // Leftovers of an attempt whose job was lost must not pass for this one's.
        for stale in [EXIT_FILE, OUTCOME_FILE, LOG_FILE] {
            let _ = fs::remove_file(dir.join(stale));
        }
        let _ = fs::remove_dir_all(dir.join(OUT_DIR));
        let request = NodeRequest {
            spec: spec.clone(),
            key: *job.key,
            root: job.root.to_owned(),
            inputs: job.inputs.to_map(),
            attempt: job.attempt,
            pipeline: job.run.pipeline.clone(),
            run_id: job.run.run_id.clone(),
            testbed: job.run.testbed.clone(),
        };
        let text = serde_json::to_vec_pretty(&request).map_err(|e| failed(spec, e))?;
        fracflow_record::atomic_write(&dir.join(REQUEST_FILE), &text)
            .map_err(|e| failed(spec, e))?;
        let fracflow = match &self.profile.fracflow {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .map_err(|e| failed(spec, format!("this engine's binary: {e}")))?
                .display()
                .to_string(),
        };
        let mut args = vec![
            "--parsable".to_owned(),
            "--job-name".to_owned(),
            format!("fracflow:{}", spec.id),
            "--output".to_owned(),
            dir.join(LOG_FILE).display().to_string(),
            "--open-mode=append".to_owned(),
            "--chdir".to_owned(),
            job.root.display().to_string(),
            "--cpus-per-task".to_owned(),
            self.profile.cpus.to_string(),
        ];
        if let Some(partition) = &self.profile.partition {
            args.extend(["--partition".to_owned(), partition.clone()]);
        }
        if let Some(mem) = &self.profile.mem {
            args.extend(["--mem".to_owned(), mem.clone()]);
        }
        if let Some(time) = &self.profile.time {
            args.extend(["--time".to_owned(), time.clone()]);
        }
        args.extend(self.profile.sbatch_args.iter().cloned());
        args.extend([
            "--wrap".to_owned(),
            format!(
                "exec {} {NODE_EXEC_VERB} {}",
                crate::remote::quote(&fracflow),
                crate::remote::quote(&dir.display().to_string())
            ),
        ]);
        let (code, out) = (self.client)("sbatch", &args).map_err(|e| failed(spec, e))?;
        let id = submitted_job_id(code, &out)
            .ok_or_else(|| failed(spec, format!("sbatch failed (exit {code}): {}", out.trim())))?;
        // Recorded before anything else, so a killed engine re-attaches instead of submitting twice.
        fracflow_record::atomic_write(&dir.join(JOB_FILE), id.as_bytes())
            .map_err(|e| failed(spec, e))?;
        log.line(&format!(
            "submitted Slurm job {id}: sbatch {}",
            args[..args.len() - 2].join(" ")
        ));
        Ok(id)
    }

    /// Polls until the job ends (or the run is cancelled), streaming its log into the node's.
    fn follow(
        &self,
        job: &Job<'_>,
        dir: &Path,
        id: &str,
        log: &mut NodeLog,
    ) -> Result<Ended, NodeError> {
        let spec = job.spec;
        let poll = Duration::from_secs_f64(self.profile.poll_s.clamp(0.05, 300.0));
        let mut offset = 0u64;
        let mut last_state = String::new();
        let mut unreachable_since: Option<Instant> = None;
        loop {
            offset = log.stream(&dir.join(LOG_FILE), offset);
            if job.cancel.is_cancelled() {
                return Err(cancel(job, dir, id, log, self.client));
            }
            let state = match job_state(id, self.client) {
                Ok(state) => {
                    unreachable_since = None;
                    state
                }
                // The controller restarting or a network blip: keep polling, and keep the job, for a while.
                Err(why) => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > CONTROLLER_PATIENCE {
                        return Err(NodeError::transient(format!(
                            "node `{}`: Slurm has not answered about job {id} for {:?} ({why}); the job is \
                             kept and the next run re-attaches to it",
                            spec.id, CONTROLLER_PATIENCE
                        )));
                    }
                    if since.elapsed() < poll {
                        log.line(&format!("cannot read job {id}'s state, retrying: {why}"));
                    }
                    std::thread::sleep(poll);
                    continue;
                }
            };
            match state {
                Some(state) => {
                    if state.state != last_state {
                        log.line(&format!("Slurm job {id}: {}", state.state));
                        last_state.clone_from(&state.state);
                    }
                    if state.is_final() {
                        log.stream(&dir.join(LOG_FILE), offset);
                        return Ok(state);
                    }
                }
                // Purged after MinJobAge (or never known): the exit file the job wrote is the record.
                None => {
                    log.stream(&dir.join(LOG_FILE), offset);
                    return match read_trimmed(&dir.join(EXIT_FILE)) {
                        Some(code) => Ok(Ended::from_exit_file(&code)),
                        None => {
                            let _ = fs::remove_file(dir.join(JOB_FILE));
                            Err(NodeError::transient(format!(
                                "node `{}`: Slurm no longer knows job {id} and it left no result; it will be \
                                 submitted again",
                                spec.id
                            )))
                        }
                    };
                }
            }
            std::thread::sleep(poll);
        }
    }
}

/// `scancel` by id, then wait (bounded) until Slurm says it ended. The job is forgotten: the next run submits
/// the node afresh instead of re-attaching to a job this run cancelled.
fn cancel(
    job: &Job<'_>,
    dir: &Path,
    id: &str,
    log: &mut NodeLog,
    client: SlurmClient,
) -> NodeError {
    let _ = client("scancel", &[id.to_owned()]);
    let _ = fs::remove_file(dir.join(JOB_FILE));
    log.line(&format!("run cancelled: scancel {id}"));
    let deadline = Instant::now() + CANCEL_WAIT;
    while Instant::now() < deadline {
        match job_state(id, client) {
            Ok(Some(state)) if !state.is_final() => std::thread::sleep(Duration::from_millis(200)),
            _ => break,
        }
    }
    NodeError::permanent(format!(
        "node `{}`: interrupted; Slurm job {id} was cancelled",
        job.spec.id
    ))
}

/// The job id `sbatch --parsable` printed (`ID` or `ID;CLUSTER` on its first line), if it succeeded.
pub fn submitted_job_id(code: i32, out: &str) -> Option<String> {
    out.lines()
        .next()
        .and_then(|l| l.split(';').next())
        .map(str::trim)
        .filter(|id| code == 0 && !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_owned)
}

/// A job's state as Slurm reports it (final once [`Ended::is_final`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub state: String,
    /// `N:S`: exit code and signal.
    pub exit_code: String,
    pub reason: String,
}

impl Ended {
    pub fn is_final(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "SUSPENDED"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
                | "RESV_DEL_HOLD"
        )
    }

    /// What the job's exit file (`CODE` or `CODE node …: why`) says, for a job Slurm no longer knows.
    pub fn from_exit_file(code: &str) -> Ended {
        let state = if code.split_whitespace().next() == Some("0") {
            "COMPLETED"
        } else {
            "FAILED"
        };
        Ended {
            state: state.to_owned(),
            exit_code: format!("{}:0", code.split_whitespace().next().unwrap_or("?")),
            reason: "read from the job's exit file (Slurm had purged the job)".to_owned(),
        }
    }
}

/// `scontrol show job -o ID`: `None` when Slurm does not know the id (any more).
fn job_state(id: &str, client: SlurmClient) -> Result<Option<Ended>, String> {
    let (code, out) = client(
        "scontrol",
        &["show".into(), "job".into(), "-o".into(), id.into()],
    )?;
    parse_show_job(id, code, &out)
}

/// What `scontrol show job -o ID` answered (its exit code and output): `None` when Slurm does not know the id.
pub fn parse_show_job(id: &str, code: i32, out: &str) -> Result<Option<Ended>, String> {
    if code != 0 {
        if out.contains("Invalid job id") {
            return Ok(None);
        }
        return Err(format!(
            "scontrol show job {id} failed (exit {code}): {}",
            out.trim()
        ));
    }
    let field = |name: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .unwrap_or("")
            .to_owned()
    };
    let state = field("JobState");
    if state.is_empty() {
        return Err(format!(
            "scontrol show job {id}: no JobState in `{}`",
            out.trim()
        ));
    }
    Ok(Some(Ended {
        state,
        exit_code: field("ExitCode"),
        reason: field("Reason"),
    }))
}

fn collect(job: &Job<'_>, dir: &Path, id: &str, ended: &Ended) -> Result<Outcome, NodeError> {
    let spec = job.spec;
    let exit = read_trimmed(&dir.join(EXIT_FILE));
    let succeeded = ended.state == "COMPLETED" && exit.as_deref().map(str::trim) == Some("0");
    if !succeeded {
        let said = exit
            .as_deref()
            .and_then(|e| e.split_once(' ').map(|(_, why)| why.to_owned()))
            .map(|why| format!("; the node said: {why}"))
            .unwrap_or_default();
        return Err(failed(
            spec,
            format!(
                "Slurm job {id} ended {} with exit code {} (reason {}){said}",
                ended.state,
                ended.exit_code,
                if ended.reason.is_empty() {
                    "none"
                } else {
                    &ended.reason
                }
            ),
        ));
    }
    let out = dir.join(OUT_DIR);
    move_tree(&out, job.out_dir)
        .map_err(|e| failed(spec, format!("collecting {}: {e}", out.display())))?;
    let outcome: BTreeMap<String, serde_json::Value> = read_trimmed(&dir.join(OUTCOME_FILE))
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| failed(spec, format!("{OUTCOME_FILE}: {e}")))?
        .unwrap_or_default();
    Ok(Outcome { metrics: outcome })
}

/// Runs a Slurm client command; its exit code (-1 when a signal ended it) and stdout + stderr.
fn query(program: &str, args: &[String]) -> Result<(i32, String), String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    crate::process::ask(program, &args)
        .map(|answer| (answer.code.unwrap_or(-1), answer.text))
        .map_err(|e| format!("{e} (is Slurm's client installed?)"))
}

/// `<root>/.fracflow/slurm/<the node's key>`: the same after a restart (a new run, whose dependencies' output
/// directories are elsewhere), and the same for any engine doing this work.
fn job_dir(job: &Job<'_>) -> PathBuf {
    job.root.join(".fracflow/slurm").join(&*job.key.to_hex())
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Moves every entry of `from` into `to` (a rename on one filesystem, a copy across).
fn move_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if fs::rename(entry.path(), &target).is_err() {
            if entry.file_type()?.is_dir() {
                move_tree(&entry.path(), &target)?;
            } else {
                fs::copy(entry.path(), &target)?;
            }
        }
    }
    Ok(())
}

/// The node's log, appended to.
struct NodeLog(fs::File);

impl NodeLog {
    fn open(path: &Path) -> Result<NodeLog, String> {
        fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map(NodeLog)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    fn line(&mut self, text: &str) {
        let _ = writeln!(self.0, "[slurm] {text}");
    }

    /// Appends what `source` gained since `offset`; the new offset.
    fn stream(&mut self, source: &Path, offset: u64) -> u64 {
        let Ok(mut file) = fs::File::open(source) else {
            return offset;
        };
        if file.seek(SeekFrom::Start(offset)).is_err() {
            return offset;
        }
        let mut fresh = Vec::new();
        match file.read_to_end(&mut fresh) {
            Ok(read) => {
                let _ = self.0.write_all(&fresh);
                offset + read as u64
            }
            Err(_) => offset,
        }
    }
}

/// The compute-node side (`fracflow __node-exec DIR`): runs the request in `DIR` with `kinds`, leaves the
/// outputs in `DIR/out`, the metrics in `DIR/outcome.json` and `0` or `1 <why>` in `DIR/exit`.
pub fn node_exec(dir: &Path, kinds: &dyn fracflow_core::Kinds) -> Result<(), String> {
    let text = fs::read_to_string(dir.join(REQUEST_FILE))
        .map_err(|e| format!("{}: {e}", dir.join(REQUEST_FILE).display()))?;
    let request: NodeRequest =
        serde_json::from_str(&text).map_err(|e| format!("{REQUEST_FILE}: {e}"))?;
    let out = dir.join(OUT_DIR);
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let log = dir.join(LOG_FILE);
    let result = match kinds.executor(&request.spec.kind) {
        None => Err(format!("no kind `{}` in this fracflow", request.spec.kind)),
        Some(executor) => {
            let cancel = fracflow_core::Cancel::new();
            let run = RunIdentity {
                pipeline: request.pipeline.clone(),
                run_id: request.run_id.clone(),
                testbed: request.testbed.clone(),
            };
            let job = Job {
                spec: &request.spec,
                root: &request.root,
                out_dir: &out,
                inputs: &Inputs::Listed(&request.inputs),
                log: &log,
                cancel: &cancel,
                attempt: request.attempt,
                run: &run,
                key: &request.key,
            };
            executor.execute(&job).map_err(|e| e.to_string())
        }
    };
    let exit = match &result {
        Ok(outcome) => {
            let metrics = serde_json::to_vec(&outcome.metrics).map_err(|e| e.to_string())?;
            fracflow_record::atomic_write(&dir.join(OUTCOME_FILE), &metrics)
                .map_err(|e| e.to_string())?;
            "0".to_owned()
        }
        Err(why) => format!("1 {}", why.replace('\n', " ")),
    };
    fracflow_record::atomic_write(&dir.join(EXIT_FILE), exit.as_bytes())
        .map_err(|e| e.to_string())?;
    result.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// `scontrol` calls the fake controller has answered so far.
    static POLLS: AtomicUsize = AtomicUsize::new(0);

    /// A cluster whose controller does not answer the first three polls (as while slurmctld restarts); the job
    /// itself runs at once: `sbatch` leaves its output and exit status where a real job would.
    fn flaky_controller(program: &str, args: &[String]) -> Result<(i32, String), String> {
        match program {
            "sbatch" => {
                let log = args
                    .iter()
                    .position(|a| a == "--output")
                    .and_then(|i| args.get(i + 1))
                    .ok_or("no --output")?;
                let dir = Path::new(log).parent().ok_or("no job directory")?;
                fs::create_dir_all(dir.join(OUT_DIR)).map_err(|e| e.to_string())?;
                fs::write(dir.join(OUT_DIR).join("built.txt"), "built")
                    .map_err(|e| e.to_string())?;
                fs::write(dir.join(EXIT_FILE), "0").map_err(|e| e.to_string())?;
                Ok((0, "77\n".to_owned()))
            }
            "scontrol" => Ok(match POLLS.fetch_add(1, Ordering::SeqCst) {
                0..=2 => (
                    1,
                    "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
                        .to_owned(),
                ),
                3 => (
                    0,
                    "JobId=77 JobName=fracflow:slow JobState=RUNNING Reason=None ExitCode=0:0"
                        .to_owned(),
                ),
                _ => (
                    0,
                    "JobId=77 JobName=fracflow:slow JobState=COMPLETED Reason=None ExitCode=0:0"
                        .to_owned(),
                ),
            }),
            other => Err(format!("unexpected {other}")),
        }
    }

    #[test]
    fn a_controller_that_does_not_answer_for_a_while_is_waited_out() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = dir.path().join("staging");
        let log = dir.path().join("node.log");
        let spec = crate::test_spec(
            "slow",
            "command",
            BTreeMap::from([("run".to_owned(), serde_json::json!("true"))]),
            &["built.txt"],
        );
        let kind = SlurmKind {
            inner: Box::new(crate::command::CommandKind),
            profile: SlurmProfile {
                kinds: vec!["command".into()],
                partition: None,
                cpus: 1,
                mem: None,
                time: None,
                poll_s: 0.05,
                fracflow: Some("fracflow".into()),
                sbatch_args: Vec::new(),
            },
            client: flaky_controller,
        };
        let listed = BTreeMap::new();
        let inputs = Inputs::Listed(&listed);
        let cancel = fracflow_core::Cancel::new();
        let run = RunIdentity::default();
        let key = Digest::of(b"abc123");
        let job = Job {
            spec: &spec,
            root: dir.path(),
            out_dir: &out,
            inputs: &inputs,
            log: &log,
            cancel: &cancel,
            attempt: 0,
            run: &run,
            key: &key,
        };
        kind.execute(&job).map_err(|e| e.message)?;
        assert_eq!(
            fs::read_to_string(out.join("built.txt")).map_err(|e| e.to_string())?,
            "built"
        );
        let log = fs::read_to_string(&log).map_err(|e| e.to_string())?;
        assert!(
            log.contains("cannot read job 77's state, retrying"),
            "{log}"
        );
        assert!(log.contains("Slurm job 77: COMPLETED"), "{log}");
        assert!(POLLS.load(Ordering::SeqCst) >= 5);
        assert!(
            !dir.path()
                .join(".fracflow/slurm")
                .join(key.to_string())
                .exists(),
            "the job's directory is gone"
        );
        Ok(())
    }

    #[test]
    fn final_states_and_purged_jobs_are_read() {
        let running = Ended {
            state: "RUNNING".into(),
            exit_code: "0:0".into(),
            reason: "None".into(),
        };
        assert!(!running.is_final());
        for state in [
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
        ] {
            let ended = Ended {
                state: state.into(),
                ..running.clone()
            };
            assert!(ended.is_final(), "{state}");
        }
        assert_eq!(Ended::from_exit_file("0").state, "COMPLETED");
        let failed = Ended::from_exit_file("1 node `x`: exited with code 3");
        assert_eq!(
            (failed.state.as_str(), failed.exit_code.as_str()),
            ("FAILED", "1:0")
        );
    }
}

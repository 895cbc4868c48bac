//! The `command` kind: a tool run through the process helper, with metrics extracted from its stdout.
//!
//! The child sees `FRACFLOW_OUT` (write declared outputs there), `FRACFLOW_ROOT`, `FRACFLOW_NODE`,
//! `FRACFLOW_ATTEMPT`, `FRACFLOW_DEPS` (a file: `id<TAB>directory` per dependency; empty, often `/dev/null`, for
//! none) and, with up to 256 dependencies, `FRACFLOW_DEP_<ID>` for each dependency's output directory (the id
//! upper-cased, every other character than A–Z and 0–9 turned into `_`). Exit code 75 (`EX_TEMPFAIL`) and a
//! timeout are transient failures, retried up to the node's `retries`; every other failure is final.
//!
//! After a successful exit, every `require` pattern must match the stdout (a provenance banner such as
//! `################ BENCH 3 ################`), then the `metrics` are read from it: a regex's k-th match
//! (`match`, 1-based, negative from the end; default the last) parsed in a `base` (10, 16 without `0x`, or
//! `auto`: `0x…` as hex, else a decimal float), or a JSON path. A node with `metrics` or `labels` writes
//! `metrics.json` (a `fracflow_record::MetricsRecord`: its point, labels and metrics), which an `aggregate` node
//! with `stats: metrics` reads as one row; the kind names it in `implied_outputs`, and the loader adds it to the
//! node's outputs.
//!
//! The node's log gets the command's stderr as it comes. Its stdout goes there too as it comes when nothing
//! reads it (no `require`, no `metrics`); otherwise it is captured, and appended after a `--- stdout ---` line
//! once the command ended.
//!
//! With `effect: true` the node is a lazy effect (a device set-up step: program, reboot, load a driver): never
//! cached, and run only when a node depending on it runs (see `fracflow_core::scheduler`). Its `check` (run by
//! the loader before anything starts) makes sure it declares no outputs, metrics or labels.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::PathBuf;

use fracflow_core::{
    ConfigProblem, Executor, Job, KindInfo, NodeError, NodeSpec, Outcome, PathSegment,
};
use fracflow_record::MetricsRecord;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::config;

use crate::process::{self, Ending, Grace, Spawn};

/// Above this many dependencies only `FRACFLOW_DEPS` lists them.
const MAX_DEP_VARIABLES: usize = 256;

/// The dependency listing, `id<TAB>directory` per line, in the staging directory (never an output), which keeps
/// it for the next node it serves.
const DEPS_FILE: &str = fracflow_core::cache::STAGING_KEPT_FILE;

/// The listing of a node without dependencies.
const EMPTY_DEPS_FILE: &str = "/dev/null";

/// sysexits.h `EX_TEMPFAIL`: the conventional "try again later".
const EX_TEMPFAIL: i32 = 75;

#[derive(Debug)]
pub struct CommandKind;

/// Writes what `write` writes over what the plain file at `path` holds, made if missing, keeping its inode and
/// its data block (a truncation to zero would free the block, and with `discard` the free waits for the disk).
/// Never through a symlink, nor into a file with another name. Buffered as it is written, never held whole: the
/// listing of an aggregator over a 300 000-point sweep is tens of megabytes.
fn rewrite_in_place(
    path: &std::path::Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::io::Seek;
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    if !fracflow_core::cache::is_private_file(&file.metadata()?) {
        return Err(std::io::Error::other(
            "not a plain file of the staging directory's own",
        ));
    }
    let mut out = std::io::BufWriter::new(&file);
    write(&mut out)?;
    let mut written = out.into_inner().map_err(|e| e.into_error())?;
    let end = written.stream_position()?;
    file.set_len(end)
}

/// A command: one shell string (run by `sh -c`), or argv words.
#[derive(Debug, JsonSchema)]
#[serde(untagged)]
pub enum Run {
    /// Run by `sh -c`.
    Shell(String),
    /// argv words: the program, then its arguments.
    Argv(Vec<config::Word>),
}

impl<'de> Deserialize<'de> for Run {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Run, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => Ok(Run::Shell(text)),
            words @ serde_json::Value::Array(_) => Vec::<config::Word>::deserialize(words)
                .map(Run::Argv)
                .map_err(serde::de::Error::custom),
            other => Err(config::custom_with_hint(
                format_args!(
                    "expected a command string or a list of argv words, found {}",
                    config::kind_of(&other)
                ),
                other.is_object().then(|| {
                    "in YAML, a value that starts with `{` is a mapping; quote it, e.g. \"{m}\""
                        .to_owned()
                }),
            )),
        }
    }
}

/// The file a node with `metrics` or `labels` writes into its outputs (declared through `implied_outputs`).
pub use fracflow_record::METRICS_FILE;

/// How one metric is read from the stdout: exactly one of `regex` and `json`; `match` and `base` go with `regex`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metric {
    /// A regex; the value is its first capture group (or the group named `value`).
    #[serde(default)]
    regex: Option<String>,
    /// A path (e.g. `$.latency.p50`) into the JSON the node prints.
    #[serde(default)]
    json: Option<String>,
    /// 1-based index of the match; negative counts from the end (−1, the default, is the last).
    #[serde(default, rename = "match")]
    nth: Option<i64>,
    /// How the capture is read: 10, 16 (hex without `0x`) or auto (`0x…` as hex, else a decimal number; the
    /// default). With a base, a capture that does not parse fails the node.
    #[serde(default)]
    base: Option<Base>,
}

/// The base a regex capture is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Decimal,
    /// Hex digits, with or without `0x` (RPCNIC's dumps print hex without it).
    Hex,
    /// `0x…` as hex, anything else as a decimal float.
    Auto,
}

impl<'de> Deserialize<'de> for Base {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Base, D::Error> {
        // The loader normalises to 10, 16 or "auto"; a template may have left the number as text.
        let value = serde_json::Value::deserialize(deserializer)?;
        match value
            .as_u64()
            .map(|n| n.to_string())
            .as_deref()
            .or(value.as_str())
        {
            Some("10") => Ok(Base::Decimal),
            Some("16") => Ok(Base::Hex),
            Some("auto") => Ok(Base::Auto),
            _ => Err(serde::de::Error::custom(format!(
                "expected 10, 16 or auto, found `{}`",
                config::shown(&value)
            ))),
        }
    }
}

crate::config::inline_schema!(Base, {
    config::or_template(serde_json::json!({ "enum": [10, 16, "auto"] }))
});

/// `command`: runs a shell command (or an argv list) in the project root; it writes its outputs under
/// `$FRACFLOW_OUT`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// A shell command (run by `sh -c`) or a list of argv words. Templates: `{name}` is a param or sweep
    /// value, `{{`/`}}` are literal braces, so shell's `${VAR}` is written `${{VAR}}`. In a shell string a value
    /// is quoted for where it lands (one word, or escaped inside the author's quotes): it never becomes shell
    /// syntax.
    pub run: Run,
    /// Extra environment variables (values are templates).
    #[serde(default)]
    pub env: BTreeMap<String, config::Word>,
    /// Working directory, relative to the project root (default: the root).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Values the node reports, by name, read from its standard output. With `metrics` or `labels` the node
    /// also writes `metrics.json` (its sweep point, labels and metrics: one row for `aggregate` with
    /// `stats: metrics`), added to its outputs.
    #[serde(default)]
    pub metrics: BTreeMap<String, Metric>,
    /// Regexes that must all match the standard output, or the node fails naming the one that did not (a
    /// provenance banner such as `BENCH {bench}`).
    #[serde(default)]
    pub require: Vec<String>,
    /// Labels of the node's row in `metrics.json`, beside its sweep point, e.g. `{design: one-shot}`.
    #[serde(default)]
    pub labels: BTreeMap<String, serde_json::Value>,
    /// Exit codes that count as success (default: `[0]`), each 0–255.
    #[serde(default = "default_success")]
    pub success_codes: Vec<i32>,
    /// A device set-up step (program a board, reboot a host, load a driver): never cached, and run only when a
    /// node that depends on it runs, once, before it. Its dependents key on its command, not on what it
    /// printed. It declares no `outputs`, `metrics` or `labels`.
    #[serde(default)]
    pub effect: bool,
}

fn default_success() -> Vec<i32> {
    vec![0]
}

/// The highest exit code a process can report (`exit(256)` is seen as 0).
const MAX_EXIT_CODE: i32 = 255;

fn key_path(parts: &[&str]) -> Vec<PathSegment> {
    parts
        .iter()
        .map(|p| PathSegment::Key((*p).to_owned()))
        .collect()
}

impl CommandConfig {
    /// Every value the node would fail on once it ran, judged now.
    fn check(&self, spec: &NodeSpec) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        match &self.run {
            Run::Shell(text) if text.trim().is_empty() => {
                problems.push(ConfigProblem::key("run", "`run` is an empty command"));
            }
            Run::Argv(words) if words.is_empty() => {
                problems.push(
                    ConfigProblem::key("run", "`run` needs at least one argv word")
                        .with_hint(Some("e.g. `run: [make, all]`".to_owned())),
                );
            }
            _ => {}
        }
        for name in self.env.keys() {
            if name.is_empty() || name.contains(['=', '\0']) {
                let mut problem = ConfigProblem::at(
                    key_path(&["env", name]),
                    format!("`{name}` is not an environment variable name"),
                )
                .with_hint(Some(
                    "a name is not empty and holds no `=` (write `NAME: value`)".to_owned(),
                ));
                problem.at_key = true;
                problems.push(problem);
            }
        }
        for (index, code) in self.success_codes.iter().enumerate() {
            if !(0..=MAX_EXIT_CODE).contains(code) {
                problems.push(
                    ConfigProblem::at(
                        vec![
                            PathSegment::Key("success_codes".to_owned()),
                            PathSegment::Index(index),
                        ],
                        format!("exit code {code} cannot happen"),
                    )
                    .with_hint(Some(format!("a process exits with 0–{MAX_EXIT_CODE}"))),
                );
            }
        }
        for (index, pattern) in self.require.iter().enumerate() {
            if let Err(error) = regex::Regex::new(pattern) {
                problems.push(ConfigProblem::at(
                    vec![
                        PathSegment::Key("require".to_owned()),
                        PathSegment::Index(index),
                    ],
                    format!("`{pattern}` is not a regex: {}", first_line(&error)),
                ));
            }
        }
        for (name, metric) in &self.metrics {
            problems.extend(metric.problems(name));
        }
        if self.effect {
            // Its dependents key on its command, not on what it printed, and it does not run when they are all
            // cached: values read from its output would belong to no key, and would be missing from such runs.
            let why = "an effect's output is not kept: a dependent keys on the effect's command, and when every \
                       dependent is cached the effect does not run at all; read the value in the node that needs it";
            for (key, empty) in [
                ("metrics", self.metrics.is_empty()),
                ("labels", self.labels.is_empty()),
            ] {
                if !empty {
                    problems.push(
                        ConfigProblem::key(
                            key,
                            format!("an effect (`effect: true`) cannot have `{key}`"),
                        )
                        .with_hint(Some(why.to_owned())),
                    );
                }
            }
            if !spec.outputs.is_empty() {
                problems.push(
                    ConfigProblem::at(
                        vec![PathSegment::Key("outputs".to_owned()), PathSegment::Index(0)],
                        "the node declares outputs but is an effect",
                    )
                    .with_hint(Some(
                        "an effect (`effect: true`) is never cached and its dependents key on its command, not on files \
                         it writes: drop `outputs:`, or drop `effect: true` to make a cached node"
                            .to_owned(),
                    )),
                );
            }
        }
        problems
    }
}

/// A regex error's first line (the rest is a drawing of the pattern, which the diagnostic shows already).
fn first_line(error: &regex::Error) -> String {
    let text = error.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    // regex's messages end with "error: WHAT"; the lines before draw the pattern.
    lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .or(lines.last().copied())
        .unwrap_or("invalid")
        .to_owned()
}

fn config(spec: &NodeSpec) -> Result<CommandConfig, NodeError> {
    config::typed(spec)
}

/// `gen[m=1024]` → `FRACFLOW_DEP_GEN_M_1024`.
pub fn dep_variable(id: &str) -> String {
    let upper: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("FRACFLOW_DEP_{}", upper.trim_end_matches('_'))
}

impl Executor for CommandKind {
    fn check(&self, spec: &NodeSpec, _root: &std::path::Path) -> Vec<ConfigProblem> {
        config::check_with::<CommandConfig>(spec, |config| config.check(spec))
    }

    fn config_schema(&self) -> serde_json::Value {
        crate::config::schema_of::<CommandConfig>()
    }

    fn shell_fields(&self) -> &'static [&'static str] {
        &["run"]
    }

    fn implied_outputs(&self, spec: &NodeSpec) -> Vec<String> {
        match config(spec) {
            Ok(c) if !c.metrics.is_empty() || !c.labels.is_empty() => vec![METRICS_FILE.to_owned()],
            _ => Vec::new(),
        }
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        // Only `effect` matters here, read straight from the settings: every node is keyed on every run, and
        // parsing its whole config to read one flag was 3 % of a no-op. The load has already checked every
        // node's settings against `CommandConfig`; a flag that is not a bool is parsed, to fail as it did.
        let effect = match spec.config.get("effect") {
            None => false,
            Some(serde_json::Value::Bool(effect)) => *effect,
            Some(_) => config(spec)?.effect,
        };
        Ok(KindInfo {
            // 2: `require`, `labels`, k-th match and bases, and `metrics.json`. (`effect` needs no bump: it is
            // in the config only when true, so the keys of other nodes stay as they were.)
            version: 2,
            tools: BTreeMap::new(),
            cacheable: !effect,
        })
    }

    fn lazy(&self, spec: &NodeSpec) -> bool {
        config(spec).is_ok_and(|config| config.effect)
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config(spec) {
            Ok(CommandConfig {
                run: Run::Shell(text),
                ..
            }) => text,
            Ok(CommandConfig {
                run: Run::Argv(argv),
                ..
            }) => argv
                .iter()
                .map(|w| w.0.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            Err(error) => format!("<{error}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let spec = job.spec;
        let config = config(spec)?;
        let (program, args) = match &config.run {
            Run::Shell(text) => (
                PathBuf::from("/bin/sh"),
                vec!["-c".to_owned(), text.clone()],
            ),
            Run::Argv(argv) => match argv.split_first() {
                Some((program, rest)) => (
                    PathBuf::from(&program.0),
                    rest.iter().map(|w| w.0.clone()).collect(),
                ),
                None => {
                    return Err(NodeError::permanent(format!(
                        "node `{}`: `run` is an empty list",
                        spec.id
                    )));
                }
            },
        };
        let mut env: Vec<(String, String)> = vec![
            ("FRACFLOW_OUT".into(), job.out_dir.display().to_string()),
            ("FRACFLOW_ROOT".into(), job.root.display().to_string()),
            ("FRACFLOW_NODE".into(), spec.id.clone()),
            ("FRACFLOW_ATTEMPT".into(), job.attempt.to_string()),
        ];
        // Every dependency is listed in a file; small fan-ins also get one variable each (thousands of variables
        // would approach the kernel's limit on the environment's size). The file is rewritten in place in the
        // staging directory, which keeps it for its next node, and a node without dependencies whose directory
        // holds none reads the empty /dev/null: a file made and removed per node costs an inode and, on a
        // filesystem mounted with `discard`, a wait for the disk (see `STAGING_KEPT_FILE`).
        let deps_path = job.out_dir.join(DEPS_FILE);
        let deps_file = if job.inputs.is_empty() && fs::symlink_metadata(&deps_path).is_err() {
            PathBuf::from(EMPTY_DEPS_FILE)
        } else {
            rewrite_in_place(&deps_path, |out| {
                for (id, dir) in job.inputs.iter() {
                    writeln!(out, "{id}\t{}", dir.display())?;
                }
                Ok(())
            })
            .map_err(|e| NodeError::permanent(format!("{}: {e}", deps_path.display())))?;
            deps_path
        };
        env.push(("FRACFLOW_DEPS".into(), deps_file.display().to_string()));
        if job.inputs.len() <= MAX_DEP_VARIABLES {
            env.extend(
                job.inputs
                    .iter()
                    .map(|(id, dir)| (dep_variable(id), dir.display().to_string())),
            );
        }
        env.extend(config.env.iter().map(|(k, v)| (k.clone(), v.0.clone())));
        let spawn = Spawn {
            program,
            args,
            env,
            cwd: config
                .cwd
                .as_ref()
                .map(|c| job.root.join(c))
                .unwrap_or_else(|| job.root.to_owned()),
            log: job.log.to_owned(),
            timeout: spec.timeout,
            grace: Grace::default(),
        };
        // What the command prints is read only for `require` and `metrics`; otherwise it goes to the log as it
        // comes, interleaved with stderr.
        let reads_stdout = !config.require.is_empty() || !config.metrics.is_empty();
        let finished = if reads_stdout {
            process::run(&spawn, job.cancel)
        } else {
            process::run_to_log(&spawn, job.cancel)
        };
        let finished = finished.map_err(|e| {
            NodeError::permanent(format!(
                "node `{}`: cannot run {}: {e}",
                spec.id,
                spawn.program.display()
            ))
        })?;
        let captured = String::from_utf8_lossy(&finished.stdout);
        // The log holds stderr as it happened, then the stdout that was read, so one file tells the whole story.
        if !captured.is_empty() {
            let appended = fs::OpenOptions::new()
                .append(true)
                .open(job.log)
                .and_then(|mut log| {
                    log.write_all(b"--- stdout ---\n")?;
                    log.write_all(&finished.stdout)
                });
            appended.map_err(|e| NodeError::permanent(format!("{}: {e}", job.log.display())))?;
        }
        let ending = finished.ending;
        match ending {
            Ending::Exited(code) if config.success_codes.contains(&code) => {}
            Ending::Exited(EX_TEMPFAIL) => {
                return Err(NodeError::transient(format!(
                    "`{}` exited 75 (temporary failure)",
                    spec.id
                )));
            }
            Ending::Exited(code) => {
                return Err(NodeError::permanent(format!(
                    "`{}` exited with code {code}",
                    spec.id
                )));
            }
            Ending::Signalled(signal) => {
                return Err(NodeError::permanent(format!(
                    "`{}` was killed by signal {signal}",
                    spec.id
                )));
            }
            Ending::TimedOut => {
                return Err(NodeError::transient(format!(
                    "`{}` timed out after {:?}",
                    spec.id,
                    spec.timeout.unwrap_or_default()
                )));
            }
            Ending::Cancelled => {
                return Err(NodeError::permanent(format!(
                    "`{}` was interrupted",
                    spec.id
                )));
            }
        }
        let failed = |why: String| NodeError::permanent(format!("node `{}`: {why}", spec.id));
        for pattern in &config.require {
            let regex = regex::Regex::new(pattern).map_err(|e| {
                failed(format!("`require` pattern `{pattern}` is not a regex: {e}"))
            })?;
            if !regex.is_match(&captured) {
                return Err(failed(format!(
                    "its output does not match the required pattern `{pattern}` (see the log for what it printed)"
                )));
            }
        }
        let mut metrics = BTreeMap::new();
        for (name, metric) in &config.metrics {
            let value = extract(metric, &captured)
                .map_err(|why| failed(format!("metric `{name}`: {why}")))?;
            metrics.insert(name.clone(), value);
        }
        if !config.metrics.is_empty() || !config.labels.is_empty() {
            let path = job.out_dir.join(METRICS_FILE);
            // The file is fracflow's record of this node's row; a command that wrote its own would be overwritten.
            if path.exists() {
                return Err(failed(format!(
                    "the command wrote {METRICS_FILE} itself, but fracflow writes that file for nodes with `metrics` or `labels`; name the command's file differently"
                )));
            }
            let record = MetricsRecord {
                version: MetricsRecord::VERSION,
                point: spec.point.to_btree_map(),
                labels: config.labels.clone(),
                metrics: metrics.clone(),
            };
            fracflow_record::write_record(&path, &record).map_err(|e| failed(e.to_string()))?;
        }
        Ok(Outcome { metrics })
    }
}

impl Metric {
    /// Exactly one source; `match` and `base` only with `regex`; `match` is never 0; the regex compiles.
    fn problems(&self, name: &str) -> Vec<ConfigProblem> {
        let at = |key: Option<&str>| {
            let mut path = key_path(&["metrics", name]);
            path.extend(key.map(|k| PathSegment::Key(k.to_owned())));
            path
        };
        let shape = match (&self.regex, &self.json) {
            (Some(_), Some(_)) => Some(("a metric reads `regex` or `json`, not both", None)),
            (None, None) => Some((
                "a metric needs `regex` or `json`",
                Some("e.g. `{regex: 'speed: (\\S+)'}`"),
            )),
            (None, Some(_)) if self.nth.is_some() || self.base.is_some() => {
                Some(("`match` and `base` apply to `regex` metrics only", None))
            }
            _ => None,
        };
        if let Some((message, hint)) = shape {
            return vec![ConfigProblem::at(at(None), message).with_hint(hint.map(str::to_owned))];
        }
        let mut problems = Vec::new();
        if self.nth == Some(0) {
            problems.push(
                ConfigProblem::at(
                    at(Some("match")),
                    "`match` counts matches from 1, or from the end with -1, -2, …",
                )
                .with_hint(Some("-1 (the default) is the last match".to_owned())),
            );
        }
        if let Some(pattern) = &self.regex
            && let Err(error) = regex::Regex::new(pattern)
        {
            problems.push(ConfigProblem::at(
                at(Some("regex")),
                format!("`{pattern}` is not a regex: {}", first_line(&error)),
            ));
        }
        problems
    }
}

/// The metric's value in `stdout`, or why there is none.
pub fn extract(metric: &Metric, stdout: &str) -> Result<serde_json::Value, String> {
    if let Some(pattern) = &metric.regex {
        let regex =
            regex::Regex::new(pattern).map_err(|e| format!("`{pattern}` is not a regex: {e}"))?;
        let matches: Vec<regex::Captures<'_>> = regex.captures_iter(stdout).collect();
        let nth = metric.nth.unwrap_or(-1);
        let index = if nth > 0 {
            usize::try_from(nth - 1).ok()
        } else {
            usize::try_from(-nth)
                .ok()
                .and_then(|back| matches.len().checked_sub(back))
        };
        let Some(captures) = index.and_then(|i| matches.get(i)) else {
            return Err(if matches.is_empty() {
                format!("not found in its output (no match of `{pattern}`)")
            } else {
                format!(
                    "`{pattern}` matched {} time(s) in its output, too few for `match: {nth}`",
                    matches.len()
                )
            });
        };
        let text = captures
            .name("value")
            .or_else(|| captures.get(1))
            .or_else(|| captures.get(0))
            .map_or("", |m| m.as_str());
        return match metric.base {
            // Without `base` a capture that is no number stays text (a version string, a name).
            None => Ok(parse(text, Base::Auto)
                .unwrap_or_else(|| serde_json::Value::String(text.to_owned()))),
            Some(base) => parse(text, base).ok_or_else(|| {
                let shown = match base {
                    Base::Decimal => "a decimal number",
                    Base::Hex => "a hex number",
                    Base::Auto => "a number (decimal, or hex with 0x)",
                };
                format!("`{text}` (match {nth} of `{pattern}`) is not {shown}")
            }),
        };
    }
    let path = metric.json.as_deref().unwrap_or("$");
    // The whole stdout, or else its last line that parses (tools often print a banner first).
    let document: serde_json::Value = serde_json::from_str(stdout)
        .ok()
        .or_else(|| {
            stdout
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str(l).ok())
        })
        .ok_or_else(|| "its output holds no JSON document".to_owned())?;
    json_path(&document, path)
        .cloned()
        .ok_or_else(|| format!("no `{path}` in the JSON it printed"))
}

/// `text` as a number in `base`; hex becomes an integer, decimal a float.
fn parse(text: &str, base: Base) -> Option<serde_json::Value> {
    let text = text.trim();
    let hex_digits = |digits: &str| {
        u64::from_str_radix(digits, 16)
            .ok()
            .map(serde_json::Value::from)
    };
    let prefixed = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"));
    match base {
        Base::Hex => hex_digits(prefixed.unwrap_or(text)),
        Base::Auto if prefixed.is_some() => prefixed.and_then(hex_digits),
        Base::Auto | Base::Decimal => scalar(text),
    }
}

/// A decimal float (`1234`, `5.5`, `1e3`); NaN and infinities are not JSON numbers.
fn scalar(text: &str) -> Option<serde_json::Value> {
    text.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(serde_json::Value::Number)
}

/// `$.a.b[2].c` or `a.b.2.c`.
fn json_path<'a>(document: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut current = document;
    for part in path
        .replace('[', ".")
        .replace(']', "")
        .split('.')
        .filter(|p| !p.is_empty())
    {
        current = match current {
            serde_json::Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            other => other.get(part)?,
        };
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fracflow_core::{Cancel, RunIdentity};

    fn regex(pattern: &str, nth: Option<i64>, base: Option<Base>) -> Metric {
        Metric {
            regex: Some(pattern.to_owned()),
            json: None,
            nth,
            base,
        }
    }

    #[test]
    fn extracts_regex_and_json_metrics() {
        let out = "banner\ntps=1234 lat=5.5us\n{\"lat\": {\"p\": [1, 2.5]}}\n";
        assert_eq!(
            extract(&regex(r"tps=(\d+)", None, None), out),
            Ok(serde_json::json!(1234.0))
        );
        let json = Metric {
            regex: None,
            json: Some("$.lat.p[1]".into()),
            nth: None,
            base: None,
        };
        assert_eq!(extract(&json, out), Ok(serde_json::json!(2.5)));
        let missing = extract(&regex(r"nothing=(\d+)", None, None), out);
        assert!(missing.is_err_and(|e| e.contains("not found")));
        assert_eq!(
            dep_variable("gen[m=1024,n=4]"),
            "FRACFLOW_DEP_GEN_M_1024_N_4"
        );
    }

    #[test]
    fn the_kth_match_counts_from_the_start_or_from_the_end() {
        // serialize_co prints the same label twice: the software part first, the total second.
        let out = "Serialize() timeing: 1.5 us\nSerialize() timeing: 4.25 us\nSerialize() timeing: 9 us\n";
        let pattern = r"timeing: ([0-9.]+) us";
        let nth = |k| extract(&regex(pattern, Some(k), None), out);
        assert_eq!(nth(1), Ok(serde_json::json!(1.5)));
        assert_eq!(nth(2), Ok(serde_json::json!(4.25)));
        assert_eq!(nth(-1), Ok(serde_json::json!(9.0)));
        assert_eq!(nth(-3), Ok(serde_json::json!(1.5)));
        for beyond in [4, -4] {
            let error = nth(beyond).expect_err("no such match");
            assert!(error.contains("matched 3 time(s)"), "{error}");
        }
        assert!(!regex(pattern, Some(0), None).problems("t").is_empty());
    }

    #[test]
    fn bases_read_hex_without_prefix_and_reject_what_does_not_parse() {
        // EXP.md's serialize_hw sample: `host_serialized_len = 1f6`, `p_c2h_buffer_size = 16680` (hex).
        let out = "host_serialized_len = 1f6\np_c2h_buffer_size = 16680\nspeed: 0x20\n";
        let len = |base| extract(&regex(r"host_serialized_len = (\S+)", None, base), out);
        assert_eq!(len(Some(Base::Hex)), Ok(serde_json::json!(502)));
        let c2h = extract(
            &regex(r"p_c2h_buffer_size = (\S+)", None, Some(Base::Hex)),
            out,
        );
        assert_eq!(c2h, Ok(serde_json::json!(91776)));
        let error = len(Some(Base::Decimal)).expect_err("1f6 is no decimal");
        assert!(
            error.contains("`1f6`") && error.contains("decimal"),
            "{error}"
        );
        let error = len(Some(Base::Auto)).expect_err("auto needs 0x for hex");
        assert!(error.contains("`1f6`"), "{error}");
        let speed = |base| extract(&regex(r"speed: (\S+)", None, base), out);
        assert_eq!(speed(Some(Base::Auto)), Ok(serde_json::json!(32)));
        assert_eq!(speed(None), Ok(serde_json::json!(32)));
        // Without `base`, text that is no number stays text, as before bases existed.
        assert_eq!(len(None), Ok(serde_json::json!("1f6")));
        let decoded: Metric =
            serde_json::from_value(serde_json::json!({"regex": "x", "match": 2, "base": 16}))
                .expect("map form");
        assert_eq!(decoded, regex("x", Some(2), Some(Base::Hex)));
        let auto: Metric =
            serde_json::from_value(serde_json::json!({"regex": "x", "base": "auto"}))
                .expect("auto");
        assert_eq!(auto.base, Some(Base::Auto));
        assert!(
            serde_json::from_value::<Metric>(serde_json::json!({"regex": "x", "base": 8})).is_err()
        );
        let json_with_base = Metric {
            regex: None,
            json: Some("$.a".into()),
            nth: None,
            base: Some(Base::Hex),
        };
        assert!(!json_with_base.problems("t").is_empty());
    }

    #[test]
    fn only_an_effect_is_uncacheable_and_a_flag_that_is_not_a_bool_fails() {
        let info = |config: serde_json::Value| {
            let config = match config {
                serde_json::Value::Object(map) => map.into_iter().collect(),
                other => panic!("config must be an object: {other}"),
            };
            CommandKind.info(&crate::test_spec("n", "command", config, &[]))
        };
        let cacheable = |config| info(config).map(|info| info.cacheable);
        assert_eq!(cacheable(serde_json::json!({"run": "true"})), Ok(true));
        assert_eq!(
            cacheable(serde_json::json!({"run": "true", "effect": false})),
            Ok(true)
        );
        assert_eq!(
            cacheable(serde_json::json!({"run": "true", "effect": true})),
            Ok(false)
        );
        assert!(info(serde_json::json!({"run": "true", "effect": "yes"})).is_err());
    }

    /// Runs a `command` node with `config` in a fresh directory: its result and its output directory.
    fn run_node(config: serde_json::Value) -> (Result<Outcome, NodeError>, tempfile::TempDir) {
        run_node_after(config, &[])
    }

    /// [`run_node`] with dependencies: each id's output directory is `dep-<id>` in the fresh directory.
    fn run_node_after(
        config: serde_json::Value,
        deps: &[&str],
    ) -> (Result<Outcome, NodeError>, tempfile::TempDir) {
        run_node_in_staging(config, deps, None)
    }

    /// [`run_node_after`] in an output directory where a node before left the listing `left` (the staging
    /// directory keeps it).
    fn run_node_in_staging(
        config: serde_json::Value,
        deps: &[&str],
        left: Option<&str>,
    ) -> (Result<Outcome, NodeError>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        fs::create_dir_all(&out).expect("out dir");
        if let Some(left) = left {
            fs::write(out.join(DEPS_FILE), left).expect("listing left behind");
        }
        let log = dir.path().join("node.log");
        fs::write(&log, "").expect("log");
        let config = match config {
            serde_json::Value::Object(map) => map.into_iter().collect(),
            other => panic!("config must be an object: {other}"),
        };
        let mut spec = crate::test_spec("run[bench=3,idx=7]", "command", config, &[]);
        spec.point = fracflow_core::Settings::from([
            ("bench".to_owned(), serde_json::json!(3)),
            ("idx".to_owned(), serde_json::json!(7)),
        ]);
        let listed = deps
            .iter()
            .map(|id| (id.to_string(), dir.path().join(format!("dep-{id}"))))
            .collect();
        let inputs = fracflow_core::Inputs::Listed(&listed);
        let cancel = Cancel::new();
        let identity = RunIdentity::default();
        let job = Job {
            spec: &spec,
            root: dir.path(),
            out_dir: &out,
            inputs: &inputs,
            log: &log,
            cancel: &cancel,
            attempt: 0,
            run: &identity,
            key: &fracflow_record::Digest::from_bytes([0; 32]),
        };
        (CommandKind.execute(&job), dir)
    }

    /// The dependency listing: a file in the output directory (never an output) with a line per dependency,
    /// and the empty `/dev/null` for a node without any, which makes no file.
    #[test]
    fn the_dependency_listing_names_each_dependency_or_is_empty() {
        let count =
            serde_json::json!({"run": "wc -l < \"$FRACFLOW_DEPS\" > \"$FRACFLOW_OUT/deps\""});
        let (result, dir) = run_node(count.clone());
        result.expect("the node succeeds");
        let out = dir.path().join("out");
        assert_eq!(
            fs::read_to_string(out.join("deps")).ok().as_deref(),
            Some("0\n")
        );
        assert!(!out.join(DEPS_FILE).exists());
        let (result, dir) = run_node_after(count, &["a", "b"]);
        result.expect("the node succeeds");
        let out = dir.path().join("out");
        assert_eq!(
            fs::read_to_string(out.join("deps")).ok().as_deref(),
            Some("2\n")
        );
        let listing = fs::read_to_string(out.join(DEPS_FILE)).unwrap_or_default();
        assert_eq!(
            listing,
            format!(
                "a\t{}\nb\t{}\n",
                dir.path().join("dep-a").display(),
                dir.path().join("dep-b").display()
            )
        );
    }

    /// The listing a node before left in the staging directory is rewritten with nothing of the old listing
    /// after the new one; a node without dependencies finds it empty.
    #[test]
    fn a_listing_left_in_the_staging_directory_is_rewritten_in_place() {
        let copy = serde_json::json!({"run": "cat \"$FRACFLOW_DEPS\" > \"$FRACFLOW_OUT/seen\""});
        let long = "a-much-longer-id\t/some/long/directory/left/by/the/node/before\n".repeat(4);
        let (result, dir) = run_node_in_staging(copy.clone(), &["b"], Some(&long));
        result.expect("the node succeeds");
        let out = dir.path().join("out");
        let seen = fs::read_to_string(out.join("seen")).unwrap_or_default();
        assert_eq!(seen, format!("b\t{}\n", dir.path().join("dep-b").display()));

        let (result, dir) = run_node_in_staging(copy, &[], Some(&long));
        result.expect("the node succeeds");
        let out = dir.path().join("out");
        assert_eq!(
            fs::read_to_string(out.join("seen")).ok().as_deref(),
            Some("")
        );
    }

    /// A symlink or a hard link under the listing's name (a staging directory never keeps one) fails the node,
    /// saying why: nothing is written through it.
    #[test]
    fn a_listing_is_never_written_through_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("users-file");
        fs::write(&target, "keep me").expect("target");
        let out = dir.path().join("out");
        fs::create_dir_all(&out).expect("out");
        std::os::unix::fs::symlink(&target, out.join(DEPS_FILE)).expect("symlink");
        let error = rewrite_in_place(&out.join(DEPS_FILE), |o| o.write_all(b"a\t/x\n"))
            .expect_err("a symlink");
        assert_eq!(error.raw_os_error(), Some(libc::ELOOP), "{error}");
        assert_eq!(fs::read_to_string(&target).ok().as_deref(), Some("keep me"));
        fs::remove_file(out.join(DEPS_FILE)).expect("symlink removed");
        fs::hard_link(&target, out.join(DEPS_FILE)).expect("hard link");
        let error = rewrite_in_place(&out.join(DEPS_FILE), |o| o.write_all(b"a\t/x\n"))
            .expect_err("a hard link");
        assert_eq!(
            error.to_string(),
            "not a plain file of the staging directory's own"
        );
        assert_eq!(fs::read_to_string(&target).ok().as_deref(), Some("keep me"));
    }

    /// A node that reads nothing of its stdout has it in its log as it came, between its stderr lines; one with
    /// `metrics` has it captured, and appended after its stderr once it ended.
    #[test]
    fn stdout_goes_to_the_log_as_it_comes_unless_a_metric_reads_it() {
        let (result, dir) = run_node(serde_json::json!({
            "run": "echo out1; echo err1 >&2; echo out2",
        }));
        result.expect("the node succeeds");
        assert_eq!(
            fs::read_to_string(dir.path().join("node.log"))
                .ok()
                .as_deref(),
            Some("out1\nerr1\nout2\n")
        );
        let (result, dir) = run_node(serde_json::json!({
            "run": "echo speed: 9.5; echo err1 >&2",
            "metrics": {"speed": {"regex": "speed: (\\S+)"}},
        }));
        let outcome = result.expect("the node succeeds");
        assert_eq!(outcome.metrics.get("speed"), Some(&serde_json::json!(9.5)));
        assert_eq!(
            fs::read_to_string(dir.path().join("node.log"))
                .ok()
                .as_deref(),
            Some("err1\n--- stdout ---\nspeed: 9.5\n")
        );
    }

    #[test]
    fn a_missing_required_banner_fails_the_node_naming_the_pattern() {
        let (result, _dir) = run_node(serde_json::json!({
            "run": "echo '################ BENCH 1 ################'; echo 'speed: 9.5'",
            "require": ["BENCH 3 #"],
            "metrics": {"speed": {"regex": "speed: (\\S+)"}},
        }));
        let error = result.expect_err("BENCH 1 is not BENCH 3");
        assert!(!error.transient);
        assert!(
            error.message.contains("`BENCH 3 #`") && error.message.contains("run[bench=3,idx=7]"),
            "{}",
            error.message
        );
    }

    #[test]
    fn metrics_and_labels_are_written_with_the_point() {
        let (result, dir) = run_node(serde_json::json!({
            "run": "echo '################ BENCH 3 ################'; echo 'len = 1f6'; echo 'speed: 92.5'",
            "require": ["(?m)^#+ BENCH 3 #+$"],
            "metrics": {
                "speed": {"regex": "speed: (\\S+)"},
                "len": {"regex": "len = (\\S+)", "base": 16},
            },
            "labels": {"design": "one-shot"},
        }));
        let outcome = result.expect("the node succeeds");
        assert_eq!(outcome.metrics["len"], serde_json::json!(502));
        let written: serde_json::Value = serde_json::from_slice(
            &fs::read(dir.path().join("out").join(METRICS_FILE)).expect("metrics.json"),
        )
        .expect("json");
        assert_eq!(
            written,
            serde_json::json!({
                "point": {"bench": 3, "idx": 7},
                "labels": {"design": "one-shot"},
                "metrics": {"speed": 92.5, "len": 502},
            })
        );
        // A value that does not parse in its base fails the node, naming the metric.
        let (result, _dir) = run_node(serde_json::json!({
            "run": "echo 'len = 1f6'",
            "metrics": {"len": {"regex": "len = (\\S+)", "base": 10}},
        }));
        let error = result.expect_err("1f6 is not decimal");
        assert!(error.message.contains("metric `len`"), "{}", error.message);
    }
}

//! The `command` kind: a tool run through the process helper, with metrics extracted from its stdout.
//!
//! The child sees `FRACFLOW_OUT` (write declared outputs there), `FRACFLOW_ROOT`, `FRACFLOW_NODE`,
//! `FRACFLOW_ATTEMPT`, `FRACFLOW_DEPS` (a file: `id<TAB>directory` per dependency) and, with up to 256
//! dependencies, `FRACFLOW_DEP_<ID>` for each dependency's output directory (the id upper-cased, every other
//! character than A–Z and 0–9 turned into `_`). Exit code 75 (`EX_TEMPFAIL`) and a timeout are
//! transient failures, retried up to the node's `retries`; every other failure is final.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::PathBuf;

use fracflow_core::{Executor, Job, KindInfo, NodeError, NodeSpec, Outcome};
use serde::Deserialize;

use crate::process::{self, Ending, Grace, Spawn};

/// Above this many dependencies only `FRACFLOW_DEPS` lists them.
const MAX_DEP_VARIABLES: usize = 256;

/// The dependency listing, `id<TAB>directory` per line, in the staging directory (never an output).
const DEPS_FILE: &str = ".fracflow-deps.tsv";

/// sysexits.h `EX_TEMPFAIL`: the conventional "try again later".
const EX_TEMPFAIL: i32 = 75;

#[derive(Debug)]
pub struct CommandKind;

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Run {
    Shell(String),
    Argv(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Metric {
    Regex(String),
    Json(String),
}

#[derive(Debug, Deserialize)]
struct CommandConfig {
    run: Run,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    #[serde(default)]
    metrics: BTreeMap<String, Metric>,
    #[serde(default = "default_success")]
    success_codes: Vec<i32>,
}

fn default_success() -> Vec<i32> {
    vec![0]
}

fn config(spec: &NodeSpec) -> Result<CommandConfig, NodeError> {
    crate::kind_config(spec)
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
    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        config(spec)?;
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
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
            }) => argv.join(" "),
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
                Some((program, rest)) => (PathBuf::from(program), rest.to_vec()),
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
        // would approach the kernel's limit on the environment's size).
        let listing: String = job
            .inputs
            .iter()
            .map(|(id, dir)| format!("{id}\t{}\n", dir.display()))
            .collect();
        let deps_file = job.out_dir.join(DEPS_FILE);
        fs::write(&deps_file, listing)
            .map_err(|e| NodeError::permanent(format!("{}: {e}", deps_file.display())))?;
        env.push(("FRACFLOW_DEPS".into(), deps_file.display().to_string()));
        if job.inputs.len() <= MAX_DEP_VARIABLES {
            env.extend(
                job.inputs
                    .iter()
                    .map(|(id, dir)| (dep_variable(id), dir.display().to_string())),
            );
        }
        env.extend(config.env.iter().map(|(k, v)| (k.clone(), v.clone())));
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
        let finished = process::run(&spawn, job.cancel).map_err(|e| {
            NodeError::permanent(format!(
                "node `{}`: cannot run {}: {e}",
                spec.id,
                spawn.program.display()
            ))
        })?;
        let captured = String::from_utf8_lossy(&finished.stdout);
        // The log holds stderr as it happened, then stdout, so one file tells the whole story.
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
        let mut metrics = BTreeMap::new();
        for (name, metric) in &config.metrics {
            let value = extract(metric, &captured).ok_or_else(|| {
                NodeError::permanent(format!(
                    "node `{}`: metric `{name}` not found in its output",
                    spec.id
                ))
            })?;
            metrics.insert(name.clone(), value);
        }
        Ok(Outcome { metrics })
    }
}

fn extract(metric: &Metric, stdout: &str) -> Option<serde_json::Value> {
    match metric {
        Metric::Regex(pattern) => {
            let regex = regex::Regex::new(pattern).ok()?;
            let captures = regex.captures_iter(stdout).last()?;
            let text = captures
                .name("value")
                .or_else(|| captures.get(1))
                .or_else(|| captures.get(0))?
                .as_str();
            Some(scalar(text))
        }
        Metric::Json(path) => {
            // The whole stdout, or else its last line that parses (tools often print a banner first).
            let document: serde_json::Value = serde_json::from_str(stdout).ok().or_else(|| {
                stdout
                    .lines()
                    .rev()
                    .find_map(|l| serde_json::from_str(l).ok())
            })?;
            json_path(&document, path).cloned()
        }
    }
}

fn scalar(text: &str) -> serde_json::Value {
    text.trim()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(serde_json::Value::Number)
        .unwrap_or_else(|| serde_json::Value::String(text.to_owned()))
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

    #[test]
    fn extracts_regex_and_json_metrics() {
        let out = "banner\ntps=1234 lat=5.5us\n{\"lat\": {\"p\": [1, 2.5]}}\n";
        assert_eq!(
            extract(&Metric::Regex(r"tps=(\d+)".into()), out),
            Some(serde_json::json!(1234.0))
        );
        assert_eq!(
            extract(&Metric::Json("$.lat.p[1]".into()), out),
            Some(serde_json::json!(2.5))
        );
        assert_eq!(extract(&Metric::Regex(r"nothing=(\d+)".into()), out), None);
        assert_eq!(
            dep_variable("gen[m=1024,n=4]"),
            "FRACFLOW_DEP_GEN_M_1024_N_4"
        );
    }
}

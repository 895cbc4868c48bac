//! `fracflow run TARGET`: build, run and measure what TARGET needs; everything cached is reused.

use std::path::{Path, PathBuf};

use clap::Args;
use fracflow_core::{Cancel, LockError, LockScope, RunDir, TestbedLock};
use fracflow_executors::testbed::TestbedKind;
use fracflow_record::RunStatus;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human::{self, shown};
use crate::project::{self, Project};
use crate::reporter::Reporter;
use crate::select::Select;

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub select: Select,
    /// Core budget for parallel nodes (default: the number of cores).
    #[arg(long, short = 'j', value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// After a failure, go on with branches that do not depend on it.
    #[arg(long)]
    pub keep_going: bool,
    /// Keep writing into this run directory instead of a new one.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// Stream events as JSON lines on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `--jobs N`: a budget of zero cores would start nothing and wait forever.
fn parse_jobs(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("at least 1 core is needed (leave --jobs out to use every core)".to_owned()),
        Ok(jobs) => Ok(jobs),
        Err(e) => Err(format!("not a number of cores: {e}")),
    }
}

pub fn run(project: &Project, args: &RunArgs) -> Result<Exit> {
    let select = &args.select;
    // `git status` walks the work tree: it runs while the pipeline loads instead of after.
    let git_root = project.root.clone();
    let git = std::thread::spawn(move || fracflow_executors::host::git_state(&git_root));
    // Best effort: a cache that cannot be written is reported below, before any node starts.
    let _ = project.cache.fold_pointer_journals();
    let (loaded, targets) = project.load(select)?;
    let testbed = project.testbed()?;
    if let Some(dir) = &args.resume {
        refuse_another_pipelines_run(dir, &loaded.pipeline.name)?;
    }
    // Every node stages its outputs there: a read-only cache is the user's to fix, and must be named before
    // the first node starts rather than fail each node.
    let staging = project.cache.root().join("tmp");
    crate::project::check_writable(&staging)
        .map_err(|e| Error::io("cannot write into the cache", &staging, e))?;
    let command: Vec<String> = std::env::args().collect();
    // An emulated testbed's device belongs to each run (a fresh one on a free loopback port), so only runs of
    // one project exclude each other there; a real board is one for every project on this machine.
    let scope = match testbed.profile.kind {
        TestbedKind::Emulated => LockScope::Project(&project.root),
        _ => LockScope::Machine,
    };
    let lock_name = fracflow_core::lock_name(&select.testbed, scope);
    let lock_dir = project::lock_dir();
    let _lock =
        TestbedLock::acquire(&lock_dir, &lock_name, &command.join(" ")).map_err(|e| match e {
            LockError::Held { .. } => Error::Busy {
                message: e.to_string(),
            },
            LockError::Io { path, source } => {
                Error::io("cannot take the testbed lock", &path, source)
            }
        })?;
    let cancel = Cancel::new();
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, cancel.flag())
            .map_err(|e| Error::internal("cannot watch for interrupts", e))?;
    }
    let meta = fracflow_executors::host::run_meta(
        git.join().unwrap_or(None),
        command,
        select.variant(),
        &select.testbed,
        testbed.as_used(&loaded.adapted),
    );
    let results = project.root.join("results");
    let mut run_dir = match &args.resume {
        Some(dir) => RunDir::resume(dir, &loaded.graph)
            .map_err(|e| Error::io("cannot resume the run", dir, e))?,
        None => RunDir::create(&results, &loaded.pipeline.name, &meta).map_err(|e| {
            Error::io(
                "cannot create the run directory under",
                &results.join(&loaded.pipeline.name),
                e,
            )
        })?,
    };
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let options = super::run_options(select, jobs, args.keep_going, testbed.fingerprint_fields());
    let mut reporter = Reporter::new(args.json);
    let summary = fracflow_core::scheduler::run(
        project.engine(),
        &loaded.graph,
        &targets,
        &options,
        &mut run_dir,
        &mut reporter,
        &cancel,
    )
    .map_err(|e| Error::internal(format!("running {}", run_dir.dir().display()), e))?;
    // The emulated device lives as long as the run.
    testbed.session.stop();
    // Uploads run in the background while nodes run; the run is over once they are done.
    let remote = project
        .cache
        .remote()
        .map(|tier| (tier.describe(), tier.finish()));
    let report = fracflow_executors::report::write_run_report(
        run_dir.dir(),
        run_dir.manifest(),
        &project.cache,
    )
    .map_err(|e| Error::internal("writing the run report", e))?;
    // Only a failed claim fails the run; inconclusive and not testable here are results, not failures.
    let failed_expectations: Vec<_> = report.expectations.iter().filter(|e| e.failed()).collect();
    if !args.json {
        eprintln!(
            "{} built, {} cached, {} failed, {} skipped; results in {}",
            summary.built,
            summary.cached,
            summary.failed.len(),
            summary.skipped,
            shown(&project.root, run_dir.dir())
        );
        for (node, error) in &summary.failed {
            eprintln!(
                "error: node `{node}` failed: {error}\n  log: {}",
                run_dir.log_path(node).display()
            );
        }
        if let Some((url, stats)) = &remote {
            eprintln!(
                "remote cache {url}: {} hit(s), {} downloaded; {} entr{} uploaded, {}{}{}",
                stats.hits,
                human::bytes(stats.downloaded_bytes),
                stats.uploaded_entries,
                if stats.uploaded_entries == 1 {
                    "y"
                } else {
                    "ies"
                },
                human::bytes(stats.uploaded_bytes),
                if stats.skipped_uploads > 0 {
                    format!(
                        "; {} not uploaded by the upload policy",
                        stats.skipped_uploads
                    )
                } else {
                    String::new()
                },
                if stats.went_down {
                    "; it failed during the run, which went on locally"
                } else {
                    ""
                }
            );
        }
        for figure in &report.figures {
            eprintln!("figure: {}", shown(&project.root, figure));
        }
        if !report.expectations.is_empty() {
            eprintln!(
                "expectations ({} testbed): {}",
                select.testbed,
                fracflow_executors::report::verdict_counts(&report.expectations)
            );
            for verdict in &report.expectations {
                eprintln!(
                    "  {} {}: {}",
                    verdict.verdict.words(),
                    verdict.name,
                    verdict.measured
                );
            }
        }
        eprintln!("report: {}", shown(&project.root, &report.path));
    }
    // The expanded pipeline and its graph (two copies of every node's spec) go with the process: freeing them
    // spec by spec was a thirtieth of a 10 000-node no-op, for memory the process returns anyway. So does the
    // finished run's record (every node's), whose events were all appended by `finish`.
    std::mem::forget(loaded);
    std::mem::forget(run_dir);
    Ok(match summary.status {
        RunStatus::Succeeded if !failed_expectations.is_empty() => Exit::ExpectationsFailed,
        RunStatus::Succeeded => Exit::Ok,
        RunStatus::Interrupted => {
            eprintln!(
                "fracflow: interrupted; completed nodes are cached, run the same command to continue"
            );
            Exit::Interrupted
        }
        RunStatus::Failed | RunStatus::Running => Exit::NodeFailed,
    })
}

/// `--resume DIR` continues a run of the pipeline being run, never another one's: its nodes, keys and
/// `latest` link would be mixed into a run that names a different pipeline.
fn refuse_another_pipelines_run(dir: &Path, pipeline: &str) -> Result<()> {
    let manifest = fracflow_core::run::read_manifest(dir).map_err(|e| {
        Error::bad_input_because(
            format!(
                "--resume {}: not a run directory fracflow can read",
                dir.display()
            ),
            e,
            "name a directory under results/<pipeline>/, e.g. results/<pipeline>/latest",
        )
    })?;
    if manifest.pipeline == pipeline {
        return Ok(());
    }
    Err(Error::bad_input_with_hint(
        format!(
            "--resume {}: that is a run of pipeline `{}`, not of `{pipeline}`",
            dir.display(),
            manifest.pipeline
        ),
        format!(
            "resume it with `fracflow run {} --resume {}`, or leave --resume out to start a new run of `{pipeline}`",
            manifest.pipeline,
            dir.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_must_be_a_positive_number() {
        assert_eq!(parse_jobs("4"), Ok(4));
        assert_eq!(
            parse_jobs("0"),
            Err("at least 1 core is needed (leave --jobs out to use every core)".to_owned())
        );
        assert!(parse_jobs("many").is_err_and(|e| e.starts_with("not a number of cores")));
    }
}

//! `fracflow status [--json]`: the runs in progress on this machine, found by their held testbed locks (in the
//! lock directory every project on this machine shares) and read from their event journals, which are the
//! live record: the manifest is only rewritten from time to time.

use std::path::Path;

use clap::Args;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human;
use crate::rundirs::{self, LiveRun, Progress};

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print a JSON array, one object per run in progress.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cache_flag: Option<&Path>, args: &StatusArgs) -> Result<Exit> {
    let live = rundirs::live_run_dirs(&crate::project::lock_dir());
    let now = rundirs::now_ms();
    let mut shown = Vec::new();
    for run in &live {
        shown.push(describe(run, cache_flag, now));
    }
    if args.json {
        let text = serde_json::to_string_pretty(&shown)
            .map_err(|e| Error::internal("writing the status as JSON", e))?;
        println!("{text}");
        return Ok(Exit::Ok);
    }
    if shown.is_empty() {
        println!("nothing running");
        return Ok(Exit::Ok);
    }
    for (run, status) in live.iter().zip(&shown) {
        print_run(run, status);
    }
    Ok(Exit::Ok)
}

fn describe(run: &LiveRun, cache_flag: Option<&Path>, now: u64) -> serde_json::Value {
    let Some(dir) = &run.dir else {
        return serde_json::json!({
            "pid": run.pid,
            "command": run.command,
            "lock": run.lock,
            "run_dir": null,
        });
    };
    let manifest = fracflow_core::run::read_manifest(dir).ok();
    let progress = rundirs::progress(dir);
    let cache = rundirs::root_of(dir).and_then(|root| {
        let cache_dir = crate::project::cache_dir(root, cache_flag);
        cache_dir
            .is_dir()
            .then(|| fracflow_core::Cache::open(&cache_dir).ok())
            .flatten()
    });
    let running: Vec<serde_json::Value> = progress
        .running
        .iter()
        .map(|(node, since)| {
            serde_json::json!({
                "node": node,
                "seconds": now.saturating_sub(*since) as f64 / 1000.0,
            })
        })
        .collect();
    serde_json::json!({
        "pid": run.pid,
        "command": run.command,
        "run_dir": dir,
        "pipeline": manifest.as_ref().map(|m| m.pipeline.clone()),
        "run_id": manifest.as_ref().map(|m| m.run_id.clone()),
        "testbed": manifest.as_ref().map(|m| m.testbed.clone()),
        "nodes": {
            "total": progress.total,
            "done": progress.done,
            "failed": progress.failed,
            "running": progress.running.len(),
            "left": left(&progress),
        },
        "running": running,
        "eta_seconds": cache.as_ref().and_then(|c| eta(c, &progress, now)),
    })
}

fn left(progress: &Progress) -> usize {
    progress
        .total
        .saturating_sub(progress.done + progress.running.len())
}

/// Seconds until every node left has run, if past runs give a duration for each: what each running node has
/// still to go by its median, plus the medians of the nodes not started. Serial, since the scheduler's
/// parallelism depends on cores and resources a status reader cannot see; an upper bound, said as an estimate.
fn eta(cache: &fracflow_core::Cache, progress: &Progress, now: u64) -> Option<f64> {
    let mut total = 0.0;
    for (node, since) in &progress.running {
        let median = cache.median_duration(node)?;
        total += (median - now.saturating_sub(*since) as f64 / 1000.0).max(0.0);
    }
    for node in &progress.pending {
        total += cache.median_duration(node)?;
    }
    Some(total)
}

fn print_run(run: &LiveRun, status: &serde_json::Value) {
    if status["run_dir"].is_null() {
        println!(
            "pid {}: {} (its run directory cannot be seen from this user; lock {})",
            run.pid,
            run.command,
            run.lock.display()
        );
        return;
    }
    let nodes = &status["nodes"];
    println!(
        "{} run {} on {} (pid {}): {} of {} nodes done{}, {} running, {} left",
        status["pipeline"].as_str().unwrap_or("?"),
        status["run_id"].as_str().unwrap_or("?"),
        status["testbed"].as_str().unwrap_or("?"),
        run.pid,
        nodes["done"],
        nodes["total"],
        match nodes["failed"].as_u64() {
            Some(0) | None => String::new(),
            Some(n) => format!(" ({n} failed)"),
        },
        nodes["running"],
        nodes["left"],
    );
    for node in status["running"].as_array().into_iter().flatten() {
        println!(
            "  running {} for {}",
            node["node"].as_str().unwrap_or("?"),
            human::seconds(node["seconds"].as_f64().unwrap_or(0.0))
        );
    }
    match status["eta_seconds"].as_f64() {
        Some(seconds) => println!(
            "  eta: about {} (from past durations)",
            human::seconds(seconds)
        ),
        None => println!("  eta: no estimate (a node left has no past duration)"),
    }
}

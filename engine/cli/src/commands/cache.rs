//! `fracflow cache verify | gc`: check every blob and entry, or remove what no recent run references.

use std::io;

use clap::Subcommand;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human;
use crate::project::Project;

#[derive(Subcommand, Debug)]
pub enum CacheAction {
    /// Re-hash every blob, check every entry, name what is corrupt.
    Verify,
    /// Remove every entry and blob that none of the newest runs of each pipeline references.
    Gc {
        /// How many of each pipeline's newest runs keep their entries.
        #[arg(long, default_value_t = 5)]
        keep_runs: usize,
        /// Also keep every entry built or used within this many days, by any project sharing the cache.
        #[arg(long, default_value_t = 7.0, value_parser = parse_days)]
        keep_days: f64,
    },
}

/// `--keep-days D`: a finite number of days, zero or more.
fn parse_days(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(days) if days >= 0.0 && days.is_finite() => Ok(days),
        Ok(_) => Err("a number of days >= 0".to_owned()),
        Err(e) => Err(format!("not a number of days: {e}")),
    }
}

pub fn run(project: &Project, action: &CacheAction) -> Result<Exit> {
    match action {
        CacheAction::Verify => verify(project),
        CacheAction::Gc {
            keep_runs,
            keep_days,
        } => gc(project, *keep_runs, *keep_days),
    }
}

fn verify(project: &Project) -> Result<Exit> {
    let report = project
        .cache
        .verify()
        .map_err(|e| Error::io("cannot verify the cache", project.cache.root(), e))?;
    for corruption in &report.corrupt {
        println!(
            "corrupt: {}: {}",
            corruption.path.display(),
            corruption.reason
        );
    }
    println!(
        "cache {}: {} entries, {} blobs, {} corrupt",
        project.cache.root().display(),
        report.entries,
        report.blobs,
        report.corrupt.len()
    );
    Ok(if report.corrupt.is_empty() {
        Exit::Ok
    } else {
        Exit::CacheCorrupt
    })
}

fn gc(project: &Project, keep_runs: usize, keep_days: f64) -> Result<Exit> {
    let results = project.root.join("results");
    let keep = fracflow_core::history::recent_keys(&results, keep_runs)
        .map_err(|e| Error::io("cannot read the runs under", &results, e))?;
    let used_within = std::time::Duration::from_secs_f64(keep_days * 86_400.0);
    let report = project.cache.gc(&keep, used_within).map_err(|e| {
        if e.kind() == io::ErrorKind::ResourceBusy {
            // Another engine is running on this cache: deleting now could take blobs it is linking.
            Error::Busy {
                message: format!("cache gc: {e}"),
            }
        } else {
            Error::io("cannot clean the cache", project.cache.root(), e)
        }
    })?;
    println!(
        "removed {} entries, {} blobs ({}) and {} stale key locks; kept what the newest {keep_runs} runs of \
         each pipeline reference and what any project used within {keep_days} days",
        report.entries_removed,
        report.blobs_removed,
        human::bytes(report.bytes_freed),
        report.locks_removed
    );
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_days_is_a_finite_number_at_least_zero() {
        assert_eq!(parse_days("0"), Ok(0.0));
        assert_eq!(parse_days("2.5"), Ok(2.5));
        for refused in ["-1", "inf", "NaN"] {
            assert_eq!(
                parse_days(refused),
                Err("a number of days >= 0".to_owned()),
                "{refused}"
            );
        }
        assert!(parse_days("soon").is_err());
    }
}

//! `fracflow clean [PIPELINE] [--keep N] [--older-than D] [--dry-run]`: prunes run directories. Never one a
//! `latest*` link points at, never a running one, and never one whose `nodes/` or `logs/` a kept run borrows
//! (a run of cache hits links them to an earlier sibling). A run is renamed to a hidden `.trash-*` name before
//! it is removed, so a clean killed half-way leaves no half-deleted run that looks whole; the next clean
//! finishes removing it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use clap::Args;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human::{self, shown};
use crate::rundirs::{self, RunInfo, RunState};

#[derive(Args, Debug)]
pub struct CleanArgs {
    /// Only this pipeline's runs.
    pub pipeline: Option<String>,
    /// Keep each pipeline's newest N runs.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Remove only runs last written longer ago than this: `45m`, `12h`, `7d`, `2w`.
    #[arg(long, value_name = "D", value_parser = parse_age)]
    pub older_than: Option<Duration>,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The prefix of a run directory being removed (hidden, so no command lists it as a run).
const TRASH: &str = ".trash-";

/// `7d`, `12h`, `30m`, `45s`, `2w`: a whole number and one unit.
pub fn parse_age(text: &str) -> std::result::Result<Duration, String> {
    let units = [
        ("s", 1u64),
        ("m", 60),
        ("h", 3600),
        ("d", 86_400),
        ("w", 604_800),
    ];
    let refused =
        || format!("`{text}`: a whole number and a unit (s, m, h, d or w), e.g. 7d or 12h");
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(refused)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| refused())?;
    let (_, scale) = units.iter().find(|(u, _)| *u == unit).ok_or_else(refused)?;
    number
        .checked_mul(*scale)
        .map(Duration::from_secs)
        .ok_or_else(refused)
}

pub fn run(root: &Path, args: &CleanArgs) -> Result<Exit> {
    if args.keep.is_none() && args.older_than.is_none() {
        return Err(Error::bad_input_with_hint(
            "clean: say which runs may go, with --keep N, --older-than D, or both",
            "e.g. `fracflow clean --keep 5` keeps each pipeline's five newest runs; add --dry-run to see first",
        ));
    }
    if let Some(name) = &args.pipeline {
        super::runs::check_pipeline_name(root, name)?;
    }
    let runs = rundirs::list_runs(root, args.pipeline.as_deref())?;
    let plan = plan(root, &runs, args.keep, args.older_than);
    for (info, why) in &plan.kept_because {
        println!(
            "keep   {}/{}: {why}",
            info.manifest.pipeline, info.manifest.run_id
        );
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "remove"
    };
    let mut freed = 0;
    for info in &plan.remove {
        let bytes = unshared_bytes(&info.dir);
        println!(
            "{verb} {} ({})",
            shown(root, &info.dir),
            human::bytes(bytes)
        );
        if !args.dry_run {
            remove_run(&info.dir)?;
            freed += bytes;
        }
    }
    if !args.dry_run {
        // What an earlier clean renamed and was killed before removing.
        for pipeline in rundirs::pipelines(&root.join("results"))? {
            freed += finish_trash(&root.join("results").join(pipeline))?;
        }
    }
    if args.dry_run {
        let would: u64 = plan.remove.iter().map(|i| unshared_bytes(&i.dir)).sum();
        println!(
            "dry run: would remove {} run(s), freeing {}; nothing was removed",
            plan.remove.len(),
            human::bytes(would)
        );
    } else {
        println!(
            "removed {} run(s), freed {} (files the cache shares by hard link are freed by `fracflow cache gc`)",
            plan.remove.len(),
            human::bytes(freed)
        );
    }
    Ok(Exit::Ok)
}

/// What to remove, and each run kept for a reason other than its age or rank.
struct Plan<'a> {
    remove: Vec<&'a RunInfo>,
    kept_because: Vec<(&'a RunInfo, String)>,
}

fn plan<'a>(
    root: &Path,
    runs: &'a [RunInfo],
    keep: Option<usize>,
    older_than: Option<Duration>,
) -> Plan<'a> {
    let results = root.join("results");
    let mut linked: BTreeMap<PathBuf, String> = BTreeMap::new();
    for pipeline in rundirs::pipelines(&results).unwrap_or_default() {
        let base = results.join(&pipeline);
        for entry in fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !fracflow_core::run::is_latest_link(&name) {
                continue;
            }
            if let Ok(target) = fs::read_link(entry.path()) {
                linked.entry(canonical(&base.join(target))).or_insert(name);
            }
        }
    }
    let mut rank: BTreeMap<&str, usize> = BTreeMap::new();
    let now = SystemTime::now();
    let mut wanted_gone = Vec::new();
    let mut kept_because = Vec::new();
    for info in runs {
        let position = rank.entry(info.manifest.pipeline.as_str()).or_insert(0);
        *position += 1;
        let beyond_keep = keep.is_none_or(|n| *position > n);
        let old_enough = older_than.is_none_or(|age| {
            fs::metadata(info.dir.join("manifest.json"))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|written| now.duration_since(written).ok())
                .is_some_and(|elapsed| elapsed > age)
        });
        if !(beyond_keep && old_enough) {
            continue;
        }
        if let Some(link) = linked.get(&canonical(&info.dir)) {
            kept_because.push((info, format!("the `{link}` link points at it")));
        } else if info.state == RunState::Running {
            kept_because.push((info, "it is running".to_owned()));
        } else {
            wanted_gone.push(info);
        }
    }
    // A kept run whose nodes/ or logs/ link into a run to be removed keeps that run too; repeated, since the
    // run kept that way may itself borrow from another.
    let mut gone: BTreeSet<PathBuf> = wanted_gone.iter().map(|i| canonical(&i.dir)).collect();
    loop {
        let mut rescued = None;
        for info in runs {
            if gone.contains(&canonical(&info.dir)) {
                continue;
            }
            for view in ["nodes", "logs"] {
                let Ok(target) = fs::read_link(info.dir.join(view)) else {
                    continue;
                };
                let lender = info
                    .dir
                    .join(target)
                    .parent()
                    .map(canonical)
                    .unwrap_or_default();
                if gone.contains(&lender) {
                    rescued = Some((lender, info.manifest.run_id.clone(), view));
                    break;
                }
            }
            if rescued.is_some() {
                break;
            }
        }
        let Some((lender, borrower, view)) = rescued else {
            break;
        };
        gone.remove(&lender);
        if let Some(info) = wanted_gone.iter().find(|i| canonical(&i.dir) == lender) {
            kept_because.push((
                info,
                format!("kept run {borrower} links its {view}/ into it"),
            ));
        }
    }
    Plan {
        remove: wanted_gone
            .into_iter()
            .filter(|i| gone.contains(&canonical(&i.dir)))
            .collect(),
        kept_because,
    }
}

fn canonical(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

/// Bytes a removal frees: regular files under `dir` (symlinks not followed) that no other name links, since a
/// node's outputs are hard links of cache blobs that removing the run does not free.
fn unshared_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(next) = stack.pop() {
        for entry in fs::read_dir(&next).into_iter().flatten().flatten() {
            let Ok(meta) = fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() && meta.nlink() == 1 {
                total += meta.len();
            }
        }
    }
    total
}

/// Renames the run to a hidden `.trash-<id>-<pid>` sibling, then removes that.
fn remove_run(dir: &Path) -> Result<()> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let trash = dir.with_file_name(format!("{TRASH}{name}-{}", std::process::id()));
    fs::rename(dir, &trash).map_err(|e| Error::io("cannot move aside the run", dir, e))?;
    fs::remove_dir_all(&trash).map_err(|e| Error::io("cannot remove", &trash, e))
}

/// Removes every `.trash-*` folder of `base` an interrupted clean left, returning the bytes freed.
fn finish_trash(base: &Path) -> Result<u64> {
    let mut freed = 0;
    for entry in fs::read_dir(base).into_iter().flatten().flatten() {
        if !entry.file_name().to_string_lossy().starts_with(TRASH) {
            continue;
        }
        let path = entry.path();
        let bytes = unshared_bytes(&path);
        match fs::remove_dir_all(&path) {
            Ok(()) => {
                freed += bytes;
                println!("removed the leftover {}", path.display());
            }
            // Another clean running at the same time finished it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("cannot remove", &path, e)),
        }
    }
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_a_number_and_a_unit() {
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
        for refused in ["7", "d", "7 days", "-1d", "1.5h", "99999999999999999999w"] {
            assert!(parse_age(refused).is_err(), "{refused}");
        }
    }
}

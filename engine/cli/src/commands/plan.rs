//! `fracflow plan TARGET`: what `run` would do and why, with estimated time and disk; touches nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::Args;
use fracflow_core::plan::Verdict;
use fracflow_executors::images::PrebuiltConfig;
use fracflow_executors::measure::{PlannedDevice, PlannedStep, planned_steps};

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human;
use crate::project::Project;
use crate::select::Select;

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub select: Select,
    #[arg(long)]
    pub json: bool,
}

pub fn run(project: &Project, args: &PlanArgs) -> Result<Exit> {
    let select = &args.select;
    let (loaded, targets) = project.load(select)?;
    let testbed = project.testbed()?;
    let options = super::run_options(select, 1, false, testbed.fingerprint_fields());
    let items = fracflow_core::plan::plan(project.engine(), &loaded.graph, &targets, &options);
    if args.json {
        let mut lines = Vec::new();
        for item in &items {
            serde_json::to_writer(&mut lines, item).map_err(|e| {
                Error::internal(format!("serialising the plan of {}", item.node), e)
            })?;
            lines.push(b'\n');
        }
        super::runs::print_out(&lines)?;
        forget_plan(loaded, items);
        return Ok(Exit::Ok);
    }
    let to_run: Vec<_> = items.iter().filter(|i| i.will_run()).collect();
    let steps = board_steps(&loaded, &items, testbed);
    let board_seconds: f64 = steps.values().flatten().map(|s| s.seconds).sum();
    let seconds: f64 = to_run
        .iter()
        .filter_map(|i| i.estimate_seconds)
        .sum::<f64>()
        + board_seconds;
    let unknown = to_run
        .iter()
        .filter(|i| i.estimate_seconds.is_none())
        .count();
    let bytes: u64 = to_run.iter().filter_map(|i| i.estimate_bytes).sum();
    // Set-up steps that nothing needs are neither run nor taken from the cache: counted on their own.
    let not_needed = items
        .iter()
        .filter(|i| matches!(i.verdict, Verdict::NotNeeded { .. }))
        .count();
    let not_needed_note = if not_needed > 0 {
        format!(", {not_needed} not needed")
    } else {
        String::new()
    };
    let remote = items
        .iter()
        .filter(|i| matches!(i.verdict, Verdict::Remote { .. }))
        .count();
    let remote_note = match project.cache.remote() {
        Some(tier) => format!(
            " ({remote} of them from the remote cache {})",
            tier.describe()
        ),
        None => String::new(),
    };
    println!(
        "plan: pipeline `{}`, testbed `{}` ({}): {} nodes, {} to run, {} cached{remote_note}{not_needed_note}",
        loaded.pipeline.name,
        select.testbed,
        testbed.profile.description,
        items.len(),
        to_run.len(),
        items.len() - to_run.len() - not_needed
    );
    let adaptation = testbed.adaptation_lines(&loaded.adapted);
    if !adaptation.is_empty() {
        println!(
            "testbed `{}` adapts the paper's runs (recorded in the run manifest):",
            select.testbed
        );
        for line in &adaptation {
            println!("  - {line}");
        }
    }
    if let Some(images) = testbed.images().filter(|c| !c.files.is_empty()) {
        println!("images: {}", images.source);
        for file in &images.files {
            println!("  - {file}");
        }
        if images.no_program {
            println!(
                "  - --no-program: the board is taken to hold the image; slots are loaded and checked"
            );
        }
    }
    println!(
        "estimated time {}{}{}, estimated disk {}",
        human::seconds(seconds),
        if board_seconds > 0.0 {
            format!(
                " (of which {} the testbed session: programming, settling, slot loads, server starts)",
                human::seconds(board_seconds)
            )
        } else {
            String::new()
        },
        if unknown > 0 {
            format!(" (+{unknown} nodes with no estimate)")
        } else {
            String::new()
        },
        human::bytes(bytes)
    );
    // One write for the listing: stdout is line-buffered, and a line per node was a write per node.
    let mut listing = String::new();
    for item in &items {
        let (tag, reason) = match &item.verdict {
            Verdict::Cached { .. } => ("cached", String::new()),
            Verdict::Remote { .. } => ("cached", "from the remote cache".to_owned()),
            Verdict::Run { changes, .. } if changes.is_empty() => {
                ("run", "no cached entry".to_owned())
            }
            Verdict::Run { changes, .. } => (
                "run",
                format!(
                    "changed: {}",
                    changes
                        .iter()
                        .map(|c| c.field.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            Verdict::Forced { .. } => ("run", "forced by --rerun".to_owned()),
            Verdict::Always { .. } => ("run", "effect: runs before what needs it".to_owned()),
            Verdict::NotNeeded { .. } => ("skip", "effect: nothing that needs it runs".to_owned()),
            Verdict::AfterUpstream { upstream } => {
                ("run?", format!("after upstream: {}", listed(upstream)))
            }
            Verdict::Error { message } => ("error", message.clone()),
        };
        let estimate = match item.estimate_seconds {
            Some(s) => format!("{} ({})", human::seconds(s), item.estimate_source),
            None => "unknown".to_owned(),
        };
        if tag == "cached" {
            let _ = writeln!(listing, "  cached  {}", item.node);
        } else {
            let _ = writeln!(
                listing,
                "  {tag:<6}  {} [{}] est {estimate}: {reason}",
                item.node, item.kind
            );
            match steps.get(&item.node) {
                Some(session) => {
                    for step in session {
                        let _ = writeln!(listing, "          $ {}", step.command);
                    }
                    if !testbed.profile.measures_with_fperf() {
                        let _ = writeln!(listing, "          $ {}", item.command);
                    }
                }
                None => {
                    let _ = writeln!(listing, "          $ {}", item.command);
                }
            }
        }
    }
    super::runs::print_out(listing.as_bytes())?;
    drop(steps);
    forget_plan(loaded, items);
    Ok(Exit::Ok)
}

/// The expanded pipeline, its graph and the plan go with the process, as `run` leaves its loaded pipeline:
/// freeing them node by node was a sixteenth of a 10 000-node plan.
fn forget_plan(loaded: fracflow_loader::Loaded, items: Vec<fracflow_core::plan::PlanItem>) {
    std::mem::forget(loaded);
    std::mem::forget(items);
}

/// On a real or doubles testbed, what the device session will do before each measurement that runs, in plan
/// order (programming, slot loads and checks, the server, the real fperf), as the session would do it.
fn board_steps(
    loaded: &fracflow_loader::Loaded,
    items: &[fracflow_core::plan::PlanItem],
    testbed: &crate::project::Testbed,
) -> BTreeMap<String, Vec<PlannedStep>> {
    let mut steps = BTreeMap::new();
    if testbed.profile.kind == fracflow_executors::testbed::TestbedKind::Emulated {
        return steps;
    }
    let graph = &loaded.graph;
    let mut device = PlannedDevice::default();
    for item in items.iter().filter(|i| i.will_run() && i.kind == "measure") {
        let Some(spec) = graph.index(&item.node).map(|index| graph.spec(index)) else {
            continue;
        };
        let mut pinned = BTreeMap::new();
        for dep in &spec.deps {
            let Some(dep) = graph.index(dep).map(|index| graph.spec(index)) else {
                continue;
            };
            if dep.kind != "prebuilt" {
                continue;
            }
            let Ok(config) = fracflow_executors::config::typed::<PrebuiltConfig>(dep) else {
                continue;
            };
            for file in config.files {
                let name = file.path.rsplit('/').next().unwrap_or_default().to_owned();
                pinned.insert(name, (file.path, file.sha256, file.size));
            }
        }
        steps.insert(
            item.node.clone(),
            planned_steps(spec, &testbed.session, &pinned, &mut device),
        );
    }
    steps
}

/// Upstream nodes a `run?` line names before it counts the rest: an aggregator over a million-point sweep
/// waits on every point, and naming each made one line of 16 MB (`--json` keeps the whole list).
const LISTED_UPSTREAM: usize = 8;

/// `upstream`, the first [`LISTED_UPSTREAM`] by name and the rest as a count.
fn listed(upstream: &[String]) -> String {
    if upstream.len() <= LISTED_UPSTREAM {
        return upstream.join(", ");
    }
    format!(
        "{} and {} more",
        upstream[..LISTED_UPSTREAM].join(", "),
        upstream.len() - LISTED_UPSTREAM
    )
}

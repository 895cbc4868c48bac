//! `fracflow plan TARGET`: what `run` would do and why, with estimated time and disk; touches nothing.

use clap::Args;
use fracflow_core::plan::Verdict;

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
        for item in &items {
            let line = serde_json::to_string(item).map_err(|e| {
                Error::internal(format!("serialising the plan of {}", item.node), e)
            })?;
            println!("{line}");
        }
        return Ok(Exit::Ok);
    }
    let to_run: Vec<_> = items.iter().filter(|i| i.will_run()).collect();
    let seconds: f64 = to_run.iter().filter_map(|i| i.estimate_seconds).sum();
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
    println!(
        "plan: pipeline `{}`, testbed `{}` ({}): {} nodes, {} to run, {} cached{not_needed_note}",
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
        "estimated time {}{}, estimated disk {}",
        human::seconds(seconds),
        if unknown > 0 {
            format!(" (+{unknown} nodes with no estimate)")
        } else {
            String::new()
        },
        human::bytes(bytes)
    );
    for item in &items {
        let (tag, reason) = match &item.verdict {
            Verdict::Cached { .. } => ("cached", String::new()),
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
                ("run?", format!("after upstream: {}", upstream.join(", ")))
            }
            Verdict::Error { message } => ("error", message.clone()),
        };
        let estimate = match item.estimate_seconds {
            Some(s) => format!("{} ({})", human::seconds(s), item.estimate_source),
            None => "unknown".to_owned(),
        };
        if tag == "cached" {
            println!("  cached  {}", item.node);
        } else {
            println!(
                "  {tag:<6}  {} [{}] est {estimate}: {reason}",
                item.node, item.kind
            );
            println!("          $ {}", item.command);
        }
    }
    Ok(Exit::Ok)
}

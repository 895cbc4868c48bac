//! `fracflow logs NODE [--run RUN] [--pipeline P]`: a node's log from a run (default: the newest run that
//! holds the node), following a cached run's borrowed `logs/` link.

use clap::Args;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human::shown;
use crate::rundirs::{self, RunInfo};

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// Node id as the manifest names it, e.g. `measure[m=1024,n=4]`.
    pub node: String,
    /// The run id (a folder under results/<pipeline>/, or a `latest*` link name); default: the newest run
    /// holding NODE.
    #[arg(long)]
    pub run: Option<String>,
    /// Only look in this pipeline's runs.
    #[arg(long)]
    pub pipeline: Option<String>,
}

pub fn run(root: &std::path::Path, args: &LogsArgs) -> Result<Exit> {
    if let Some(name) = &args.pipeline {
        super::runs::check_pipeline_name(root, name)?;
    }
    let runs = rundirs::list_runs(root, args.pipeline.as_deref())?;
    let chosen: Vec<&RunInfo> = match &args.run {
        Some(wanted) => {
            let matching = runs_named(root, &runs, wanted);
            if matching.is_empty() {
                return Err(unknown_run(wanted, &runs));
            }
            matching
        }
        None => runs.iter().collect(),
    };
    let Some(info) = chosen
        .iter()
        .find(|info| info.manifest.nodes.contains_key(&args.node))
    else {
        return Err(unknown_node(&args.node, &chosen));
    };
    let path = match &info.manifest.nodes[&args.node].log {
        Some(log) => info.dir.join(log),
        None => info
            .dir
            .join("logs")
            .join(fracflow_core::run::node_dir_name(&args.node) + ".log"),
    };
    let bytes = std::fs::read(&path).map_err(|e| {
        Error::bad_input_because(
            format!(
                "node `{}` of run {} has no log at {}",
                args.node,
                info.manifest.run_id,
                shown(root, &path)
            ),
            e,
            "a node taken from the cache in its first run, or one that never started, has no log there",
        )
    })?;
    eprintln!(
        "log of `{}` in run {} ({})",
        args.node,
        info.manifest.run_id,
        shown(root, &path)
    );
    super::runs::print_out(&bytes)?;
    Ok(Exit::Ok)
}

/// The runs `wanted` names: a run id, or a `latest*` link of a pipeline's folder.
fn runs_named<'a>(root: &std::path::Path, runs: &'a [RunInfo], wanted: &str) -> Vec<&'a RunInfo> {
    let by_link: Vec<std::path::PathBuf> = if fracflow_core::run::is_latest_link(wanted) {
        rundirs::pipelines(&root.join("results"))
            .unwrap_or_default()
            .iter()
            .filter_map(|p| {
                std::fs::read_link(root.join("results").join(p).join(wanted))
                    .ok()
                    .map(|t| root.join("results").join(p).join(t))
            })
            .collect()
    } else {
        Vec::new()
    };
    runs.iter()
        .filter(|info| info.manifest.run_id == wanted || by_link.contains(&info.dir))
        .collect()
}

fn unknown_run(wanted: &str, runs: &[RunInfo]) -> Error {
    Error::bad_input_with_hint(
        format!("no run `{wanted}` under results/"),
        rundirs::unknown_run_hint(wanted, runs),
    )
}

fn unknown_node(node: &str, runs: &[&RunInfo]) -> Error {
    let mut names: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.manifest.nodes.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    let where_ = match runs {
        [one] => format!("run {}", one.manifest.run_id),
        [] => "any run (there are none yet)".to_owned(),
        _ => format!("any of the {} runs", runs.len()),
    };
    let hint =
        fracflow_core::suggest::did_you_mean(node, names.iter().copied()).unwrap_or_else(|| {
            format!(
                "nodes there: {}",
                fracflow_core::suggest::list_names(names.iter().take(20).copied())
            )
        });
    Error::bad_input_with_hint(format!("no node `{node}` in {where_}"), hint)
}

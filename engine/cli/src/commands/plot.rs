//! `fracflow plot TARGET`: every `plot` node TARGET needs, re-drawn from the tables its dependencies left in
//! a run, without measuring anything.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human::shown;
use crate::project::Project;
use crate::select::Select;

#[derive(Args, Debug)]
pub struct PlotArgs {
    #[command(flatten)]
    pub select: Select,
    /// The run directory (default: the `latest` link of the chosen variant and testbed under
    /// results/<pipeline>/: `latest`, `latest-smoke`, `latest-<testbed>`, `latest-smoke-<testbed>`).
    #[arg(long, value_name = "RUN_DIR")]
    pub run: Option<PathBuf>,
    /// Where to write the figures (default: <RUN_DIR>/replot).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(project: &Project, args: &PlotArgs) -> Result<Exit> {
    let started = std::time::Instant::now();
    let (loaded, targets) = project.load(&args.select)?;
    let run_dir = match &args.run {
        Some(dir) => dir.clone(),
        None => project
            .root
            .join("results")
            .join(&loaded.pipeline.name)
            .join(fracflow_core::run::latest_link(
                args.select.variant().as_deref(),
                &args.select.testbed,
            )),
    };
    let manifest = fracflow_core::run::read_manifest(&run_dir).map_err(|e| {
        let hint = match &args.run {
            Some(_) => "name a run directory under results/<pipeline>/ with --run".to_owned(),
            None => format!(
                "`{}` makes it, or name a run with --run",
                run_command(&args.select)
            ),
        };
        Error::bad_input_because(
            format!("no run to re-draw in {}", shown(&project.root, &run_dir)),
            e,
            hint,
        )
    })?;
    let out_dir = args.out.clone().unwrap_or_else(|| run_dir.join("replot"));
    prepare_out_dir(&out_dir)?;
    // The run's own provenance, as its report page says it (who measured is in its measurements' summaries);
    // each figure's footer then names the client its tables name, as the figure drawn in the run did.
    let provenance = fracflow_executors::report::run_provenance(&run_dir, &manifest);
    let graph = &loaded.graph;
    let mut drawn = 0;
    for index in graph.closure(&targets) {
        let spec = graph.spec(index);
        if spec.kind != "plot" {
            continue;
        }
        let dep_dirs = fracflow_core::history::dependency_outputs(&run_dir, graph, index)
            .map_err(|missing| Error::bad_input(format!("node `{}`: {missing}", spec.id)))?;
        let files = fracflow_executors::analysis::redraw(spec, &dep_dirs, &provenance, &out_dir)
            .map_err(|e| Error::failed(format!("node `{}`: {e}", spec.id)))?;
        for file in files {
            println!("{}", shown(&project.root, &file));
        }
        drawn += 1;
    }
    eprintln!(
        "re-drew {drawn} figure(s) from run {} ({}, testbed {}) in {:.2}s",
        manifest.run_id,
        shown(&project.root, &run_dir),
        manifest.testbed,
        started.elapsed().as_secs_f64()
    );
    Ok(Exit::Ok)
}

/// The `fracflow run` command whose run the default `latest` link of these flags points at.
fn run_command(select: &Select) -> String {
    let mut command = format!("fracflow run {}", select.target);
    if select.smoke {
        command.push_str(" --smoke");
    } else if let Some(variant) = &select.variant {
        command.push_str(&format!(" --variant {variant}"));
    }
    if select.testbed != fracflow_core::run::DEFAULT_TESTBED {
        command.push_str(&format!(" --testbed {}", select.testbed));
    }
    command
}

/// `--out DIR` exists as a directory fracflow may write into, checked before anything is drawn: a file named
/// there, or a read-only directory, is the user's to fix and must not surface as a failed figure.
fn prepare_out_dir(out_dir: &Path) -> Result<()> {
    let refused = |e| Error::io("cannot write the figures into", out_dir, e);
    std::fs::create_dir_all(out_dir).map_err(refused)?;
    crate::project::check_writable(out_dir).map_err(refused)
}

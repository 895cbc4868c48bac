//! `fracflow runs [PIPELINE]`: every run under `results/`, newest first, one line each (or a JSON array).

use clap::Args;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human;
use crate::rundirs::{self, RunInfo};

#[derive(Args, Debug)]
pub struct RunsArgs {
    /// Only this pipeline's runs (a folder under results/).
    pub pipeline: Option<String>,
    /// Print a JSON array, one object per run, instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// A pipeline name as a folder of `results/`: one plain path component, so a name the user types never reaches
/// outside the project's results.
pub fn check_pipeline_name(root: &std::path::Path, name: &str) -> Result<()> {
    let plain =
        !name.is_empty() && !name.starts_with('.') && !name.contains('/') && !name.contains('\\');
    if !plain {
        return Err(Error::bad_input_with_hint(
            format!("`{name}` is not a pipeline name"),
            "name a pipeline as `fracflow targets` lists it, e.g. `scalability`",
        ));
    }
    let known = rundirs::pipelines(&root.join("results"))?;
    if known.iter().any(|k| k == name) {
        return Ok(());
    }
    let hint = fracflow_core::suggest::did_you_mean(name, known.iter().map(String::as_str))
        .unwrap_or_else(|| {
            format!(
                "pipelines with runs: {}",
                fracflow_core::suggest::list_names(known.iter().map(String::as_str))
            )
        });
    Err(Error::bad_input_with_hint(
        format!("no runs of pipeline `{name}` under results/"),
        hint,
    ))
}

pub fn run(root: &std::path::Path, args: &RunsArgs) -> Result<Exit> {
    if let Some(name) = &args.pipeline {
        check_pipeline_name(root, name)?;
    }
    let runs = rundirs::list_runs(root, args.pipeline.as_deref())?;
    if args.json {
        let array: Vec<serde_json::Value> = runs.iter().map(as_json).collect();
        let text = serde_json::to_string_pretty(&array)
            .map_err(|e| Error::internal("writing the runs as JSON", e))?;
        println!("{text}");
        return Ok(Exit::Ok);
    }
    if runs.is_empty() {
        println!("no runs under results/ yet");
        return Ok(Exit::Ok);
    }
    let text: String = runs.iter().map(|info| line(info) + "\n").collect();
    print_out(text.as_bytes())?;
    Ok(Exit::Ok)
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is not an error of ours.
pub fn print_out(bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::internal("printing to stdout", e))
        }
        _ => Ok(()),
    }
}

fn line(info: &RunInfo) -> String {
    let manifest = &info.manifest;
    let (built, cached, failed) = info.node_counts();
    let duration = info
        .seconds()
        .map_or_else(|| "-".to_owned(), human::seconds);
    let verdicts = match info.verdicts() {
        Some((held, failed)) => format!("  claims {held}/{} hold", held + failed),
        None => String::new(),
    };
    format!(
        "{}  {}  variant {}  testbed {} ({})  {}  {}  built {built} cached {cached} failed {failed}{verdicts}  git {}",
        manifest.run_id,
        manifest.pipeline,
        info.variant().unwrap_or_else(|| "-".to_owned()),
        manifest.testbed,
        info.testbed_kind(),
        info.state.as_str(),
        duration,
        info.commit()
    )
}

fn as_json(info: &RunInfo) -> serde_json::Value {
    let manifest = &info.manifest;
    let (built, cached, failed) = info.node_counts();
    let verdicts = info
        .verdicts()
        .map(|(held, failed)| serde_json::json!({"held": held, "failed": failed}));
    serde_json::json!({
        "run_id": manifest.run_id,
        "pipeline": manifest.pipeline,
        "dir": info.dir,
        "variant": info.variant(),
        "testbed": manifest.testbed,
        "testbed_kind": info.testbed_kind(),
        "status": info.state.as_str(),
        "started": manifest.started,
        "finished": manifest.finished,
        "seconds": info.seconds(),
        "nodes": {"built": built, "cached": cached, "failed": failed},
        "claims": verdicts,
        "git": manifest.git,
    })
}

//! `fracflow why NODE`: the fingerprint fields of NODE that differ from its newest cached entry.

use clap::Args;
use fracflow_core::plan::Why;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::project::Project;
use crate::select::Select;

#[derive(Args, Debug)]
pub struct WhyArgs {
    /// Node id, e.g. `measure[m=1024,n=4]`.
    pub node: String,
    /// The pipeline (or target) holding the node; default: every pipeline is searched.
    #[arg(long)]
    pub pipeline: Option<String>,
    #[arg(long, default_value = "emulated")]
    pub testbed: String,
    #[arg(long)]
    pub json: bool,
}

pub fn run(project: &Project, args: &WhyArgs) -> Result<Exit> {
    let node = args.node.as_str();
    let candidates: Vec<String> = match &args.pipeline {
        Some(name) => vec![name.clone()],
        None => fracflow_loader::discover(&project.root)
            .into_iter()
            .map(|e| e.name)
            .collect(),
    };
    let testbed_fields = project.testbed()?.fingerprint_fields();
    let mut unloadable = None;
    for name in candidates {
        let select = Select::whole(&name, &args.testbed);
        let loaded = match project.load(&select) {
            Ok((loaded, _)) => loaded,
            // The pipeline the user named must load; while searching every pipeline, one that does not load
            // may be the node's: its problems are the answer if no loadable pipeline has the node.
            Err(error) if args.pipeline.is_some() => return Err(error),
            Err(error) => {
                unloadable.get_or_insert(error);
                continue;
            }
        };
        let Some(index) = loaded.graph.index(node) else {
            continue;
        };
        let options = super::run_options(&select, 1, false, testbed_fields.clone());
        let answer = fracflow_core::plan::why(project.engine(), &loaded.graph, index, &options);
        if args.json {
            let line = serde_json::to_string(&answer)
                .map_err(|e| Error::internal(format!("serialising why `{node}`"), e))?;
            println!("{line}");
            return Ok(Exit::Ok);
        }
        match answer {
            Why::UpToDate { key } => println!("{node}: up to date (key {})", &key.to_hex()[..16]),
            Why::NeverBuilt => println!("{node}: never built: no cached entry for this node"),
            Why::UpstreamPending { upstream } => {
                println!(
                    "{node}: its key depends on nodes that have no cached result yet: {}",
                    upstream.join(", ")
                );
            }
            Why::Error { message } => return Err(Error::bad_input(message)),
            Why::Changed {
                old_key,
                new_key,
                changes,
            } => {
                println!(
                    "{node}: key {} -> {}; changed since the newest cached entry:",
                    &old_key.to_hex()[..16],
                    &new_key.to_hex()[..16]
                );
                for change in changes {
                    println!(
                        "  {}: {} -> {}",
                        change.field,
                        change.old.as_deref().unwrap_or("(absent)"),
                        change.new.as_deref().unwrap_or("(absent)")
                    );
                }
            }
        }
        return Ok(Exit::Ok);
    }
    Err(unloadable.unwrap_or_else(|| Error::bad_input(format!("no pipeline has a node `{node}`"))))
}

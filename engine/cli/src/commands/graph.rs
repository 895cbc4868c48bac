//! `fracflow graph TARGET`: the DAG of TARGET as Graphviz dot or Mermaid.

use clap::{Args, ValueEnum};

use crate::error::Result;
use crate::exit::Exit;
use crate::project::Project;
use crate::select::Select;

#[derive(Args, Debug)]
pub struct GraphArgs {
    #[command(flatten)]
    pub select: Select,
    #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
    pub format: GraphFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum GraphFormat {
    Dot,
    Mermaid,
}

pub fn run(project: &Project, args: &GraphArgs) -> Result<Exit> {
    let (loaded, targets) = project.load(&args.select)?;
    let closure = loaded.graph.closure(&targets);
    let text = match args.format {
        GraphFormat::Dot => loaded.graph.to_dot(Some(&closure)),
        GraphFormat::Mermaid => loaded.graph.to_mermaid(Some(&closure)),
    };
    print!("{text}");
    Ok(Exit::Ok)
}

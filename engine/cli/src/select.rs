//! The flags that choose what a command works on (`run`, `plan`, `plot`, `graph`), checked before anything
//! is loaded or run.

use std::collections::BTreeMap;

use clap::Args;
use fracflow_loader::OnlyFilter;

use crate::error::{Error, Result};

#[derive(Args, Debug, Clone)]
pub struct Select {
    /// A target (fig16), a pipeline name (demo), PIPELINE:TARGET, or a pipeline file.
    pub target: String,
    /// The reduced sweep declared under `variants: smoke`.
    #[arg(long)]
    pub smoke: bool,
    /// Any variant declared under `variants:`.
    #[arg(long, conflicts_with = "smoke")]
    pub variant: Option<String>,
    /// Keep only these swept values: KEY=V1,V2 (repeatable).
    #[arg(long = "only", value_name = "KEY=V1,V2")]
    pub only: Vec<String>,
    /// Override a parameter: KEY=VALUE (repeatable; VALUE is read as JSON, else taken as text).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Testbed profile from hw/testbeds/.
    #[arg(long, default_value = "emulated")]
    pub testbed: String,
    /// Run these nodes even when cached (node id or glob; repeatable).
    #[arg(long, value_name = "GLOB", value_parser = parse_rerun)]
    pub rerun: Vec<String>,
    #[command(flatten)]
    pub images: ImageFlags,
}

/// The artifact's image flags (docs/frac.md §6.1): what a real testbed programs and loads in this run. The
/// files' hashes enter the measurements' keys, never their paths.
#[derive(Args, Debug, Clone, Default)]
pub struct ImageFlags {
    /// Program this full image instead of the source's: `frac=FILE` or `bypass=FILE` (repeatable).
    #[arg(long = "bitstream", value_name = "NAME=FILE")]
    pub bitstream: Vec<String>,
    /// Load the `cXX_fYY.bin` partials of DIR instead of the source's: `frac=DIR`.
    #[arg(long = "partials", value_name = "NAME=DIR")]
    pub partials: Vec<String>,
    /// The board already holds the image: do not program it (slots are still loaded and checked).
    #[arg(long)]
    pub no_program: bool,
    /// Where the pinned images' artifact folder is on this machine (default: the profile's, else the one
    /// recorded at import).
    #[arg(long, value_name = "DIR")]
    pub artifact: Option<std::path::PathBuf>,
}

impl ImageFlags {
    pub fn overrides(&self) -> Result<fracflow_executors::images::ImageOverrides> {
        let pairs = |flag: &str, list: &[String]| -> Result<BTreeMap<String, std::path::PathBuf>> {
            list.iter()
                .map(|text| match text.split_once('=') {
                    Some((name, path)) if !name.is_empty() && !path.is_empty() => {
                        Ok((name.to_owned(), std::path::PathBuf::from(path)))
                    }
                    _ => Err(Error::bad_input_with_hint(
                        format!("--{flag} {text}: expected NAME=PATH"),
                        format!("e.g. --{flag} frac=…"),
                    )),
                })
                .collect()
        };
        Ok(fracflow_executors::images::ImageOverrides {
            bitstreams: pairs("bitstream", &self.bitstream)?,
            partials: pairs("partials", &self.partials)?,
            no_program: self.no_program,
            artifact: self.artifact.clone(),
        })
    }
}

impl Select {
    /// Every node of `target` (a pipeline or target name), with no variant, filter or override.
    pub fn whole(target: &str, testbed: &str) -> Select {
        Select {
            target: target.to_owned(),
            smoke: false,
            variant: None,
            only: Vec::new(),
            set: Vec::new(),
            testbed: testbed.to_owned(),
            rerun: Vec::new(),
            images: ImageFlags::default(),
        }
    }

    pub fn variant(&self) -> Option<String> {
        if self.smoke {
            Some("smoke".to_owned())
        } else {
            self.variant.clone()
        }
    }

    pub fn only_filters(&self) -> Result<Vec<OnlyFilter>> {
        self.only
            .iter()
            .map(|text| {
                fracflow_loader::parse_only(text)
                    .map_err(|e| Error::bad_input(format!("--only {text}: {e}")))
            })
            .collect()
    }

    pub fn overrides(&self) -> Result<BTreeMap<String, serde_json::Value>> {
        self.set
            .iter()
            .map(|text| {
                fracflow_loader::parse_set(text)
                    .map_err(|e| Error::bad_input(format!("--set {text}: {e}")))
            })
            .collect()
    }
}

/// `--rerun GLOB`: a node id or a glob over node ids. An invalid glob would match nothing and silently
/// rerun nothing, so it is refused here.
fn parse_rerun(text: &str) -> std::result::Result<String, String> {
    glob::Pattern::new(text)
        .map(|_| text.to_owned())
        .map_err(|e| format!("not a node id or glob: {e} (write `[[]` for a literal `[`)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rerun_accepts_ids_and_globs_and_refuses_broken_globs() {
        for good in ["measure[m=1024]", "measure*", "hls.*", "*"] {
            assert_eq!(parse_rerun(good).as_deref(), Ok(good));
        }
        let refused = parse_rerun("[").expect_err("an unclosed class");
        assert!(refused.starts_with("not a node id or glob: "), "{refused}");
    }
}

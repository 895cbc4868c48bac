//! Node kinds of fracflow: one module per kind gluing tools to the core's `Executor` contract, and the one
//! helper that spawns processes.

pub mod analysis;
pub mod command;
pub mod config;
pub mod fperf;
#[cfg(test)]
mod fperf_adapter_tests;
pub mod fpga;
pub mod images;
pub mod measure;
pub mod process;
pub mod remote;
pub mod report;
pub mod slotcheck;
pub mod slurm;
pub mod spawner;
pub mod sudo;
pub mod supervisor;
pub mod testbed;
pub mod testbed_check;
pub mod trace_input;

use std::collections::BTreeMap;

use fracflow_core::{ConfigProblem, Executor, KindInfo, Kinds, NodeError, NodeSpec, Outcome};

/// Every kind this build knows, by name.
pub struct Registry {
    kinds: BTreeMap<&'static str, Box<dyn Executor>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

impl Registry {
    /// The registry with every built-in kind and no testbed: measurements need a fixed `addr`.
    pub fn builtin() -> Registry {
        Registry::with_session(None)
    }

    /// The registry for a run on a testbed: measurements drive the session's device.
    pub fn for_testbed(session: std::sync::Arc<testbed::Session>) -> Registry {
        Registry::with_session(Some(session))
    }

    fn with_session(session: Option<std::sync::Arc<testbed::Session>>) -> Registry {
        let mut kinds: BTreeMap<&'static str, Box<dyn Executor>> = BTreeMap::new();
        kinds.insert("command", Box::new(command::CommandKind));
        kinds.insert("group", Box::new(GroupKind));
        kinds.insert("hls", Box::new(fpga::HlsKind::default()));
        kinds.insert("weave", Box::new(fpga::WeaveKind::default()));
        kinds.insert("partials", Box::new(fpga::PartialsKind));
        kinds.insert("image", Box::new(fpga::ImageKind));
        kinds.insert(
            "prebuilt",
            Box::new(images::PrebuiltKind {
                session: session.clone(),
            }),
        );
        kinds.insert("program", Box::new(fpga::ProgramKind));
        kinds.insert("load", Box::new(fpga::LoadKind));
        kinds.insert(
            "measure",
            Box::new(measure::MeasureKind {
                session: session.clone(),
            }),
        );
        kinds.insert("aggregate", Box::new(analysis::AggregateKind));
        kinds.insert(
            "plot",
            Box::new(analysis::PlotKind {
                session: session.clone(),
            }),
        );
        let slurm = session.as_ref().and_then(|s| s.profile().slurm.clone());
        kinds.insert("check", Box::new(analysis::CheckKind { session }));
        // The profile's Slurm kinds run as jobs on the cluster; the same executor runs inside each job.
        if let Some(profile) = slurm {
            for name in &profile.kinds {
                if let Some((name, inner)) = kinds.remove_entry(name.as_str()) {
                    let profile = profile.clone();
                    kinds.insert(name, Box::new(slurm::SlurmKind::new(inner, profile)));
                }
            }
        }
        Registry { kinds }
    }

    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.kinds.keys().copied()
    }
}

impl Kinds for Registry {
    fn executor(&self, kind: &str) -> Option<&dyn Executor> {
        self.kinds.get(kind).map(|b| b.as_ref())
    }
    fn names(&self) -> Vec<&str> {
        self.kinds.keys().copied().collect()
    }
}

/// A node that only gathers its dependencies (a target's anchor); its result is their outputs' hashes.
#[derive(Debug)]
struct GroupKind;

/// `group`: does nothing itself; it gathers its `deps` (e.g. to name them in a target).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct GroupConfig {}

impl Executor for GroupKind {
    fn check(&self, spec: &NodeSpec, _root: &std::path::Path) -> Vec<ConfigProblem> {
        config::check_with::<GroupConfig>(spec, |_| Vec::new())
    }
    fn config_schema(&self) -> serde_json::Value {
        config::schema_of::<GroupConfig>()
    }
    fn info(&self, _spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        format!("(group of {} nodes)", spec.deps.len())
    }
    fn execute(&self, _job: &fracflow_core::Job<'_>) -> Result<Outcome, NodeError> {
        Ok(Outcome::default())
    }
}

/// Facts about the machine and the project for the run manifest.
pub mod host {
    use std::path::Path;

    use fracflow_core::run::RunMeta;

    /// The machine's host name.
    pub fn name() -> String {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown-host".to_owned())
    }

    /// The project's git commit and whether its work tree has changes; None outside a git checkout.
    pub fn git_state(root: &Path) -> Option<GitState> {
        // Outside a checkout there is nothing to ask: starting `git` only to hear so was a sixth of a
        // 1 000-node no-op.
        if !root.ancestors().any(|dir| dir.join(".git").exists()) {
            return None;
        }
        let commit = duct::cmd!("git", "rev-parse", "HEAD")
            .dir(root)
            .stderr_null()
            .read()
            .ok()?;
        let status = duct::cmd!("git", "status", "--porcelain")
            .dir(root)
            .stderr_null()
            .read()
            .ok()?;
        Some(GitState {
            commit: commit.trim().to_owned(),
            dirty: !status.trim().is_empty(),
        })
    }

    /// Run facts for a run of `variant` (None: the pipeline as written) started with `command` on `testbed`,
    /// in a checkout whose state is `git` (see [`git_state`]).
    pub fn run_meta(
        git: Option<GitState>,
        command: Vec<String>,
        variant: Option<String>,
        testbed: &str,
        testbed_profile: serde_json::Value,
    ) -> RunMeta {
        RunMeta {
            engine_version: env!("CARGO_PKG_VERSION").to_owned(),
            command,
            host: name(),
            testbed: testbed.to_owned(),
            variant,
            testbed_profile,
            git,
        }
    }

    pub use fracflow_record::manifest::GitState;
}

/// A resolved node for the kinds' unit tests: `kind` with `config`, declaring `outputs`, unswept.
#[cfg(test)]
pub(crate) fn test_spec(
    id: &str,
    kind: &str,
    config: BTreeMap<String, serde_json::Value>,
    outputs: &[&str],
) -> NodeSpec {
    NodeSpec {
        id: id.into(),
        name: id.split('[').next().unwrap_or(id).into(),
        kind: kind.into(),
        config: config.into_iter().collect(),
        point: fracflow_core::Settings::new(),
        deps: Vec::new(),
        inputs: Vec::new(),
        outputs: outputs.iter().map(|o| (*o).to_owned()).collect(),
        resources: Vec::new(),
        retries: 0,
        timeout: None,
        estimate: None,
        origin: fracflow_core::Origin {
            file: "pipelines/p.yaml".into(),
            line: 1,
            column: 1,
        },
    }
}

#[cfg(test)]
mod tests {
    /// Here rather than in the end-to-end tests: a test binary that links this crate links polars (through
    /// aggregation), and this crate's unit tests are one already.
    #[test]
    fn the_pipeline_schema_offers_exactly_the_kinds_the_registry_has() {
        let registry = super::Registry::builtin();
        let schema = fracflow_loader::json_schema(&registry);
        let offered: Vec<&str> = schema
            .pointer("/$defs/Node/properties/kind/enum")
            .and_then(|v| v.as_array())
            .map(|names| names.iter().filter_map(|n| n.as_str()).collect())
            .unwrap_or_default();
        let registered: Vec<&str> = registry.names().collect();
        assert_eq!(offered, registered);
        assert_eq!(registered.len(), 13, "{registered:?}");
    }
}

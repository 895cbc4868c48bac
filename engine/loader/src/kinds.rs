//! Node kinds: each kind is one struct of its own keys (deny unknown keys, typed values) and one line in
//! [`KINDS`]. The struct both validates a node and, serialized after template resolution, is the node's
//! `config`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, DeserializeOwned, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::de::{DeError, OrderedMap, custom_with_hint, deserialize_all, struct_fields};
use crate::diag::{did_you_mean, list_names};
use crate::doc::{NodeCommon, Text};
use crate::template;
use crate::tree::Node;

/// Every node kind the loader knows. To add one: write its struct below and add its line here.
pub(crate) const KINDS: &[KindDef] = &[
    KindDef::of::<CommandKind>("command"),
    KindDef::of::<GroupKind>("group"),
    KindDef::of::<HlsKind>("hls"),
    KindDef::of::<WeaveKind>("weave"),
    KindDef::of::<PartialsKind>("partials"),
    KindDef::of::<ImageKind>("image"),
    KindDef::of::<ProgramKind>("program"),
    KindDef::of::<LoadKind>("load"),
    KindDef::of::<MeasureKind>("measure"),
    KindDef::of::<AggregateKind>("aggregate"),
    KindDef::of::<PlotKind>("plot"),
    KindDef::of::<CheckKind>("check"),
];

/// `command`: runs a shell command (or an argv list) in the project root; it writes its outputs under
/// `$FRACFLOW_OUT`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CommandKind {
    /// A shell command (run by `sh -c`) or a list of argv words. Templates: `{name}` is a param or sweep
    /// value, `{{`/`}}` are literal braces, so shell's `${VAR}` is written `${{VAR}}`.
    pub run: RunSpec,
    /// Extra environment variables (values are templates).
    #[serde(default, skip_serializing_if = "OrderedMap::is_empty")]
    pub env: OrderedMap<Text>,
    /// Working directory, relative to the project root (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Values the node reports, by name, read from its standard output. With `metrics` or `labels` the node
    /// also writes `metrics.json` (its sweep point, labels and metrics: one row for `aggregate` with
    /// `stats: metrics`), added to its outputs.
    #[serde(default, skip_serializing_if = "OrderedMap::is_empty")]
    pub metrics: OrderedMap<Metric>,
    /// Regexes that must all match the standard output, or the node fails naming the one that did not (a
    /// provenance banner such as `BENCH {bench}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require: Vec<String>,
    /// Labels of the node's row in `metrics.json`, beside its sweep point, e.g. `{design: one-shot}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, serde_json::Value>,
    /// Exit codes that count as success (default: `[0]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_codes: Option<Vec<i32>>,
    /// A device set-up step (program a board, reboot a host, load a driver): never cached, and run only when a
    /// node that depends on it runs, once, before it. Its dependents key on its command, not on what it
    /// printed. It declares no `outputs`, `metrics` or `labels`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub effect: bool,
}

/// `group`: does nothing itself; it gathers its `deps` (e.g. to name them in a target).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupKind {}

/// The file a `command` node with `metrics` or `labels` writes (the executor's `METRICS_FILE`).
const METRICS_FILE: &str = "metrics.json";

impl Kind for CommandKind {
    const CHECKS: bool = true;
    fn check(&self, node: &str, _root: &Path) -> Vec<KindProblem> {
        if !self.effect {
            return Vec::new();
        }
        // Its dependents key on its command, not on what it printed, and it does not run when they are all
        // cached: values read from its output would belong to no key, and would be missing from such runs.
        let why = "an effect's output is not kept: a dependent keys on the effect's command, and when every \
                   dependent is cached the effect does not run at all; read the value in the node that needs it";
        let mut problems = Vec::new();
        for (key, empty) in [
            ("metrics", self.metrics.is_empty()),
            ("labels", self.labels.is_empty()),
        ] {
            if !empty {
                problems.push(KindProblem {
                    key,
                    message: format!(
                        "node `{node}` is an effect (`effect: true`) and cannot have `{key}`"
                    ),
                    hint: Some(why.to_owned()),
                });
            }
        }
        problems
    }
    fn outputs_forbidden(config: &Config) -> Option<&'static str> {
        config
            .get("effect")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
            .then_some(
                "an effect (`effect: true`) is never cached and its dependents key on its command, not on files \
                 it writes: drop `outputs:`, or drop `effect: true` to make a cached node",
            )
    }
    fn implied_outputs(config: &Config) -> Vec<&'static str> {
        let non_empty = |key: &str| {
            config
                .get(key)
                .and_then(|v| v.as_object())
                .is_some_and(|m| !m.is_empty())
        };
        if non_empty("metrics") || non_empty("labels") {
            vec![METRICS_FILE]
        } else {
            Vec::new()
        }
    }
}
impl Kind for GroupKind {}

/// `hls`: compiles one accelerator, `hw/accelerators/<unit>/`, into the kernel its partials carry. The
/// emulated flow builds a plugin with a C++ compiler; `vitis_hls` runs the HLS tool for `part`. List the unit's
/// files in `inputs` (e.g. `"hw/accelerators/{unit}/*"` and `hw/accelerators/frac_kernel.h`) so that an edit
/// rebuilds it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HlsKind {
    /// The accelerator (`top_k`, `cnn`, …; 1–32 of `a-z 0-9 _`): its sources are `hw/accelerators/<unit>/`.
    pub unit: Tpl<UnitName>,
    /// The C++ compiler of the emulated flow (default: the executor's `$CXX`, else `g++`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiler: Option<String>,
    /// The flow: `emulated` (default) or `vitis_hls`.
    #[serde(default)]
    pub tool: Tpl<HlsTool>,
    /// The FPGA part, for the real flow (e.g. `xcu280-fsvh2892-2L-e`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
}

impl Kind for HlsKind {
    const CHECKS: bool = true;
    fn check(&self, node: &str, root: &Path) -> Vec<KindProblem> {
        let Tpl::Value(UnitName(unit)) = &self.unit else {
            return Vec::new();
        };
        let dir = Path::new(ACCELERATORS).join(unit);
        if root.join(&dir).is_dir() {
            return Vec::new();
        }
        let known = subdirectories(&root.join(ACCELERATORS));
        let hint = did_you_mean(unit, known.iter().map(String::as_str)).or_else(|| {
            (!known.is_empty()).then(|| {
                format!(
                    "units in `{ACCELERATORS}/`: {}",
                    list_names(known.iter().map(String::as_str))
                )
            })
        });
        vec![KindProblem {
            key: "unit",
            message: format!(
                "unit `{unit}` of node `{node}` has no sources: `{}/` is not a directory",
                dir.display()
            ),
            hint,
        }]
    }
}

/// Where the accelerators' sources are, relative to the project root.
const ACCELERATORS: &str = "hw/accelerators";

/// `weave`: places the units into the cells of the shell and writes the design (`design.json`). It reads the
/// shell and each unit's `unit.yaml` (declarations, no C++): list them in `inputs`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WeaveKind {
    /// The shell: its cells and the modules each may hold, relative to the project root.
    #[serde(default = "default_shell")]
    pub shell: String,
    /// The directory of the units (one subdirectory each), relative to the project root.
    #[serde(default = "default_units")]
    pub units: String,
    /// The flow: `emulated` (default) or `spinhdl`.
    #[serde(default)]
    pub tool: Tpl<WeaveTool>,
}

fn default_shell() -> String {
    "hw/shell.yaml".to_owned()
}

fn default_units() -> String {
    ACCELERATORS.to_owned()
}

impl Kind for WeaveKind {
    const CHECKS: bool = true;
    fn check(&self, node: &str, root: &Path) -> Vec<KindProblem> {
        let mut problems = Vec::new();
        if !template::has_braces(&self.shell) && !root.join(&self.shell).is_file() {
            problems.push(KindProblem {
                key: "shell",
                message: format!("shell `{}` of node `{node}` is not a file", self.shell),
                hint: Some("`shell` is relative to the project root".to_owned()),
            });
        }
        if !template::has_braces(&self.units) && !root.join(&self.units).is_dir() {
            problems.push(KindProblem {
                key: "units",
                message: format!(
                    "units directory `{}` of node `{node}` is not a directory",
                    self.units
                ),
                hint: Some("`units` is relative to the project root".to_owned()),
            });
        }
        problems
    }
}

/// `partials`: the partial bitstreams of one unit, `icap/cXX_fYY.bin` for each cell that may hold it. It reads
/// the design from its `weave` dependency and the kernel from its `hls` dependency.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartialsKind {
    /// The unit whose partials are made (as in its `hls` dependency).
    pub unit: Tpl<UnitName>,
    /// The flow: `emulated` (default) or `spinhdl` (`spinhdl spin UNIT` against each cell's abstract shell).
    #[serde(default)]
    pub tool: Tpl<WeaveTool>,
}

impl Kind for PartialsKind {}

/// `image`: the full image `jtag/frac.bit`, from the design of its `weave` dependency and the kernels of all its
/// `hls` dependencies; or, with `bypass: true`, the bypass image `bypass/frac.bit` (no fRAC; no dependencies).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImageKind {
    /// Make the bypass image instead of the full image.
    #[serde(default)]
    pub bypass: bool,
}

impl Kind for ImageKind {}

/// `program`: programs the device at `addr` with a full image (a side effect: it runs whenever its dependents
/// do).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProgramKind {
    /// A full image file, relative to the project root (default: `jtag/frac.bit`, or `bypass/frac.bit`, of the
    /// `image` dependency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The device, `HOST:PORT`.
    pub addr: Tpl<DeviceAddr>,
    /// The flow: `emulated` (default: the emulator's management channel) or `vivado` (the programming script,
    /// then ping until the board answers, then settle).
    #[serde(default)]
    pub tool: Tpl<ProgramTool>,
    /// Real flow: the programming script, relative to the project root (default `scripts/programfpga.sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub programfpga: Option<String>,
    /// Real flow: `VIVADO_ROOT` for the script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vivado_root: Option<String>,
    /// Real flow: `HW_TARGET` for the script (the JTAG target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hw_target: Option<String>,
    /// Real flow: seconds to wait after the board answers ping (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_s: Option<f64>,
    /// Real flow: seconds to wait for the board to answer ping after programming (default 90).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_timeout_s: Option<f64>,
}

impl Kind for ProgramKind {
    const CHECKS: bool = true;
    fn check(&self, node: &str, root: &Path) -> Vec<KindProblem> {
        match &self.image {
            Some(image) if !template::has_braces(image) && !root.join(image).is_file() => {
                vec![KindProblem {
                    key: "image",
                    message: format!("image `{image}` of node `{node}` is not a file"),
                    hint: Some(
                        "`image` is relative to the project root; leave it out to program the image of the `image` dependency"
                            .to_owned(),
                    ),
                }]
            }
            _ => Vec::new(),
        }
    }
}

/// `load`: loads a partial bitstream into a slot of the device at `addr` through the reconfiguration
/// controller: `WRITE_HBM` of `chunk_size` bytes each from `hbm_addr`, then `RECONF_ICAP`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadKind {
    /// The slot (cell) to reload, 0–3.
    pub slot: Tpl<SlotNumber>,
    /// The partial's file name (e.g. `c00_f00.bin`), found in a dependency's `icap/` outputs.
    pub partial: Tpl<FileName>,
    /// The device, `HOST:PORT`.
    pub addr: Tpl<DeviceAddr>,
    /// Bytes per `WRITE_HBM`: 64–256, a multiple of 64 (default 256).
    #[serde(default = "default_chunk_size")]
    pub chunk_size: Tpl<ChunkSize>,
    /// Where the partial is staged in HBM: 32-byte aligned, below 2^33 (default `0x10004000`).
    #[serde(default = "default_hbm_addr")]
    pub hbm_addr: Tpl<HbmAddr>,
}

impl Kind for LoadKind {}

/// `measure`: runs the embedded load client in-process with fperf's flags against the testbed's device (after
/// programming `image` and loading `slots` unless the device already holds them), a fixed `addr`, or a fresh CPU
/// baseline server; keeps its fperf-format console log, per-second records, per-request samples (Parquet) and a
/// summary.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeasureKind {
    /// A fixed device (or server) `HOST:PORT`; default: the testbed's device (an emulated testbed starts one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<Tpl<DeviceAddr>>,
    /// fperf's arguments without `-c`/`-p`, e.g. `-t rr -d {d} -n {n} -m {m} -X {m} -R 64 -Z 1 -K {slot}`; a
    /// list runs one client per entry at the same time (the artifact's `together`).
    pub fperf: FperfArgs,
    /// The artifact's `instances`: one client per slot 0..N at once, each with `clients / N` threads (`-n` and
    /// `-K` are added to `fperf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Tpl<Count>>,
    /// Total client threads over the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Tpl<Count>>,
    /// The full image to program first: a file of the `image` dependency (`jtag/frac.bit`, `bypass/frac.bit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Slot → partial (`c00_f00.bin`) of a `partials` dependency, loaded first unless already in that slot.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub slots: BTreeMap<String, String>,
    /// Measure a fresh CPU baseline server (`fracflow cpu-server -n CORES` on this host) instead of the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSpec>,
    /// Replay a synthetic trace with the Azure trace's apps and sizes (written as output `trace.csv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSpec>,
    /// Labels for aggregation beside the sweep point, e.g. `{series: fRAC, clients: "{n}"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, serde_json::Value>,
    /// Labels of each client process run at once (one entry per `fperf` string or instance), e.g. the function
    /// each one drives; aggregation then splits the point by process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub member_labels: Vec<BTreeMap<String, serde_json::Value>>,
    /// Seconds at the start left out of the samples (warm-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_s: Option<u32>,
    /// Open loop instead of fperf's closed loop: `RATE[:poisson|:fixed]` requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_loop: Option<String>,
}

impl Kind for MeasureKind {
    const CHECKS: bool = true;
    fn check(&self, _node: &str, _root: &Path) -> Vec<KindProblem> {
        let mut problems = Vec::new();
        let not_a_slot = |s: &String| !s.parse::<i64>().is_ok_and(|n| (0..SLOT_COUNT).contains(&n));
        if let Some(slot) = self.slots.keys().find(|s| not_a_slot(s)) {
            problems.push(KindProblem {
                key: "slots",
                message: format!("slot {slot} does not exist"),
                hint: Some("the device has four slots, 0–3".to_owned()),
            });
        }
        if self.instances.is_some() && self.clients.is_none() {
            problems.push(KindProblem {
                key: "instances",
                message: "`instances` needs `clients` (the total over the instances)".to_owned(),
                hint: None,
            });
        }
        problems
    }
}

/// One fperf argument string, or several run at once.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum FperfArgs {
    One(String),
    Together(Vec<String>),
}

/// The CPU baseline server of a `measure` node.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerSpec {
    /// Compute threads of the server.
    pub cores: Tpl<Count>,
}

/// A synthetic trace for a `measure` node.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TraceSpec {
    /// Requests in the trace.
    pub rows: Tpl<Count>,
    /// Generator seed.
    #[serde(default)]
    pub seed: u64,
}

/// `aggregate`: its dependencies' per-request samples, per-second records or extracted metrics → summary tables
/// (`summary.csv`, `summary.parquet`, and `cdf.*` when asked). The keys are fracflow-aggregate's spec (see its docs); they are
/// checked in full when the run starts.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AggregateKind {
    /// `seconds` (per-second values, figs 13–15), `samples` (raw samples, figs 16–17), `trace` (fig 18) or
    /// `metrics` (one row per dependency's `metrics.json`, the rows of repeated runs reduced to mean, sd and n).
    pub stats: String,
    /// `stats: metrics`: labels that tell repetitions apart (`[rep]`); rows equal in every other label are
    /// reduced into one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_s: Option<Tpl<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_s: Option<Tpl<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_fraction: Option<Tpl<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdf: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<Tpl<Number>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derive: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<serde_json::Value>,
}

impl Kind for AggregateKind {}

/// `plot`: draws one figure from its `aggregate` dependency's tables as SVG, PNG and PDF. The keys are
/// fracflow-plot's spec (see its docs); they are checked in full when the run starts.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlotKind {
    /// The figure's file stem, e.g. `fig16`.
    pub figure: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub style: Option<String>,
    pub x: serde_json::Value,
    pub y: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panels: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "where")]
    pub filter: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outline: Option<serde_json::Value>,
}

impl Kind for PlotKind {}

/// `check`: the paper's claims as data, evaluated on its `aggregate` dependencies' tables. `expect` maps a
/// testbed kind (`emulated`, `real`) or profile name to its claims; only the run's testbed's claims apply. A
/// failed claim is a result (listed in the summary and the report, own exit code), not a failed node.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckKind {
    pub expect: BTreeMap<String, Vec<serde_json::Value>>,
}

impl Kind for CheckKind {}
fn default_chunk_size() -> Tpl<ChunkSize> {
    Tpl::Value(ChunkSize(DEFAULT_CHUNK_SIZE))
}

fn default_hbm_addr() -> Tpl<HbmAddr> {
    Tpl::Value(HbmAddr(DEFAULT_HBM_ADDR))
}

// The device's limits, as `fracflow-proto`'s `limits` has them (checked there again when loading).
const SLOT_COUNT: i64 = 4;
const MIN_CHUNK_SIZE: i64 = 64;
const MAX_CHUNK_SIZE: i64 = 256;
const CHUNK_STEP: i64 = 64;
const DEFAULT_CHUNK_SIZE: u32 = 256;
const DEFAULT_HBM_ADDR: u64 = 0x1000_4000;
const HBM_ALIGN: u64 = 32;
const HBM_ADDR_BITS: u32 = 33;
const MAX_UNIT_NAME: usize = 32;

/// A problem with a resolved value: the message, and a hint.
type Problem = (String, Option<String>);

/// A kind-specific value that may also be written as a template: checked as soon as it holds no `{…}`.
pub(crate) trait Checked: Sized {
    /// What the value must be, for messages: "a slot number 0–3".
    const EXPECTING: &'static str;
    fn from_int(value: i64) -> Result<Self, Problem> {
        Err((
            format!("expected {}, found the integer `{value}`", Self::EXPECTING),
            None,
        ))
    }
    fn from_float(value: f64) -> Result<Self, Problem> {
        Err((
            format!("expected {}, found the number `{value}`", Self::EXPECTING),
            None,
        ))
    }
    fn from_text(text: &str) -> Result<Self, Problem>;
    /// The schema of the value as written (templates included).
    fn schema() -> Schema;
}

/// A [`Checked`] value, or a template string not yet filled in (at validation; each instance fills it in and
/// checks the result).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tpl<T> {
    Value(T),
    Pending(String),
}

impl<T: Default> Default for Tpl<T> {
    fn default() -> Tpl<T> {
        Tpl::Value(T::default())
    }
}

impl<'de, T: Checked> Deserialize<'de> for Tpl<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Tpl<T>, D::Error> {
        struct TplVisitor<T>(std::marker::PhantomData<T>);
        impl<T: Checked> Visitor<'_> for TplVisitor<T> {
            type Value = Tpl<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTING)
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Tpl<T>, E> {
                T::from_int(value)
                    .map(Tpl::Value)
                    .map_err(|(message, hint)| custom_with_hint(message, hint))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Tpl<T>, E> {
                match i64::try_from(value) {
                    Ok(value) => self.visit_i64(value),
                    Err(_) => Err(E::custom(format_args!(
                        "expected {}, found the integer `{value}`",
                        T::EXPECTING
                    ))),
                }
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Tpl<T>, E> {
                T::from_float(value)
                    .map(Tpl::Value)
                    .map_err(|(message, hint)| custom_with_hint(message, hint))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Tpl<T>, E> {
                if template::has_braces(text) {
                    return Ok(Tpl::Pending(text.to_owned()));
                }
                T::from_text(text)
                    .map(Tpl::Value)
                    .map_err(|(message, hint)| custom_with_hint(message, hint))
            }
        }
        deserializer.deserialize_any(TplVisitor(std::marker::PhantomData))
    }
}

impl<T: Serialize> Serialize for Tpl<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Tpl::Value(value) => value.serialize(serializer),
            Tpl::Pending(text) => serializer.serialize_str(text),
        }
    }
}

impl<T: Checked> JsonSchema for Tpl<T> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        T::EXPECTING.into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        T::schema()
    }
}

/// An accelerator's name: 1–32 of `a-z 0-9 _` (the emulator's rule for unit names).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct UnitName(pub String);

impl Checked for UnitName {
    const EXPECTING: &'static str = "a unit name (1–32 of `a-z 0-9 _`)";
    fn from_text(text: &str) -> Result<UnitName, Problem> {
        let valid = !text.is_empty()
            && text.len() <= MAX_UNIT_NAME
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if valid {
            return Ok(UnitName(text.to_owned()));
        }
        let hint = (text.len() <= MAX_UNIT_NAME && text != text.to_ascii_lowercase())
            .then(|| format!("unit names are lower case: `{}`", text.to_ascii_lowercase()));
        Err((
            format!("expected {}, found `{text}`", Self::EXPECTING),
            hint,
        ))
    }
    fn schema() -> Schema {
        json_schema!({ "type": "string" })
    }
}

/// A slot of the device, 0–3.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct SlotNumber(pub u8);

impl Checked for SlotNumber {
    const EXPECTING: &'static str = "a slot number 0–3";
    fn from_int(value: i64) -> Result<SlotNumber, Problem> {
        match u8::try_from(value) {
            Ok(slot) if i64::from(slot) < SLOT_COUNT => Ok(SlotNumber(slot)),
            _ => Err((
                format!("expected {}, found `{value}`", Self::EXPECTING),
                Some("the device has four slots (cells C00–C03)".to_owned()),
            )),
        }
    }
    fn from_text(text: &str) -> Result<SlotNumber, Problem> {
        match template::integer_expression(text) {
            Some(Ok(value)) => SlotNumber::from_int(value),
            _ => Err((
                format!("expected {}, found `{text}`", Self::EXPECTING),
                None,
            )),
        }
    }
    fn schema() -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "integer", "minimum": 0, "maximum": SLOT_COUNT - 1 },
                { "type": "string", "description": "A template giving the slot number, e.g. \"{slot}\"." }
            ]
        })
    }
}

/// A non-negative number (seconds, a fraction, bytes) that may be computed by a template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Number(pub f64);

impl Serialize for Number {
    /// A whole number stays an integer, so kinds may read it as one.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.fract() == 0.0 && self.0 < 9.0e15 {
            serializer.serialize_u64(self.0 as u64)
        } else {
            serializer.serialize_f64(self.0)
        }
    }
}

impl Checked for Number {
    const EXPECTING: &'static str = "a number ≥ 0";
    fn from_int(value: i64) -> Result<Number, Problem> {
        if value < 0 {
            return Err((
                format!("expected {}, found `{value}`", Self::EXPECTING),
                None,
            ));
        }
        Ok(Number(value as f64))
    }
    fn from_float(value: f64) -> Result<Number, Problem> {
        if value.is_finite() && value >= 0.0 {
            Ok(Number(value))
        } else {
            Err((
                format!("expected {}, found `{value}`", Self::EXPECTING),
                None,
            ))
        }
    }
    fn from_text(text: &str) -> Result<Number, Problem> {
        if let Some(Ok(value)) = template::integer_expression(text) {
            return Number::from_int(value);
        }
        match text.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value >= 0.0 => Ok(Number(value)),
            _ => Err((
                format!("expected {}, found `{text}`", Self::EXPECTING),
                None,
            )),
        }
    }
    fn schema() -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "number", "minimum": 0 },
                { "type": "string", "description": "A template giving the number, e.g. \"{skip}\"." }
            ]
        })
    }
}

/// A count of clients, instances or cores: 1 or more.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct Count(pub u32);

impl Checked for Count {
    const EXPECTING: &'static str = "a whole number ≥ 1";
    fn from_int(value: i64) -> Result<Count, Problem> {
        match u32::try_from(value) {
            Ok(n) if n >= 1 => Ok(Count(n)),
            _ => Err((
                format!("expected {}, found `{value}`", Self::EXPECTING),
                None,
            )),
        }
    }
    fn from_text(text: &str) -> Result<Count, Problem> {
        match template::integer_expression(text) {
            Some(Ok(value)) => Count::from_int(value),
            _ => Err((
                format!("expected {}, found `{text}`", Self::EXPECTING),
                None,
            )),
        }
    }
    fn schema() -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "integer", "minimum": 1 },
                { "type": "string", "description": "A template giving the count, e.g. \"{n}\"." }
            ]
        })
    }
}

/// Bytes per `WRITE_HBM`: 64–256, a multiple of 64.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct ChunkSize(pub u32);

impl Checked for ChunkSize {
    const EXPECTING: &'static str = "a chunk size of 64, 128, 192 or 256 bytes";
    fn from_int(value: i64) -> Result<ChunkSize, Problem> {
        if (MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&value) && value % CHUNK_STEP == 0 {
            return Ok(ChunkSize(
                u32::try_from(value).unwrap_or(DEFAULT_CHUNK_SIZE),
            ));
        }
        Err((
            format!("expected {}, found `{value}`", Self::EXPECTING),
            Some(
                "the reconfiguration controller takes 64–256 bytes per write, in multiples of 64"
                    .to_owned(),
            ),
        ))
    }
    fn from_text(text: &str) -> Result<ChunkSize, Problem> {
        match template::integer_expression(text) {
            Some(Ok(value)) => ChunkSize::from_int(value),
            _ => Err((
                format!("expected {}, found `{text}`", Self::EXPECTING),
                None,
            )),
        }
    }
    fn schema() -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "integer", "enum": [64, 128, 192, 256] },
                { "type": "string", "description": "A template giving the chunk size." }
            ]
        })
    }
}

/// An HBM address: 32-byte aligned, below 2^33; written as an integer or a string (`"0x10004000"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct HbmAddr(pub u64);

impl Checked for HbmAddr {
    const EXPECTING: &'static str = "a 32-byte aligned HBM address below 2^33";
    fn from_int(value: i64) -> Result<HbmAddr, Problem> {
        match u64::try_from(value) {
            Ok(addr) if addr % HBM_ALIGN == 0 && addr >> HBM_ADDR_BITS == 0 => Ok(HbmAddr(addr)),
            _ => Err((
                format!("expected {}, found `{value:#x}`", Self::EXPECTING),
                Some(format!("the default is `{DEFAULT_HBM_ADDR:#x}`")),
            )),
        }
    }
    fn from_text(text: &str) -> Result<HbmAddr, Problem> {
        let trimmed = text.trim();
        let hex = trimmed
            .strip_prefix("0x")
            .or_else(|| trimmed.strip_prefix("0X"));
        let value = match hex {
            Some(digits) => i64::from_str_radix(&digits.replace('_', ""), 16).ok(),
            None => match template::integer_expression(trimmed) {
                Some(Ok(value)) => Some(value),
                _ => None,
            },
        };
        match value {
            Some(value) => HbmAddr::from_int(value),
            None => Err((
                format!(
                    "expected {} (e.g. `0x10004000`), found `{text}`",
                    Self::EXPECTING
                ),
                None,
            )),
        }
    }
    fn schema() -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "integer", "minimum": 0 },
                { "type": "string", "description": "`0x…` hexadecimal, a decimal integer expression, or a template." }
            ]
        })
    }
}

/// The device's network address, `HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct DeviceAddr(pub String);

impl Checked for DeviceAddr {
    const EXPECTING: &'static str = "a device address `HOST:PORT`";
    fn from_text(text: &str) -> Result<DeviceAddr, Problem> {
        let valid = text.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.contains(char::is_whitespace)
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if valid {
            Ok(DeviceAddr(text.to_owned()))
        } else {
            Err((
                format!(
                    "expected {} (e.g. `127.0.0.1:7000`), found `{text}`",
                    Self::EXPECTING
                ),
                None,
            ))
        }
    }
    fn schema() -> Schema {
        json_schema!({ "type": "string", "description": "`HOST:PORT`, e.g. `127.0.0.1:7000`." })
    }
}

/// A file name without a directory (`c00_f00.bin`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct FileName(pub String);

impl Checked for FileName {
    const EXPECTING: &'static str = "a file name such as `c00_f00.bin`";
    fn from_text(text: &str) -> Result<FileName, Problem> {
        if !text.is_empty() && !text.contains(['/', '\\']) && text != "." && text != ".." {
            return Ok(FileName(text.to_owned()));
        }
        let hint = text
            .rsplit_once('/')
            .filter(|(_, name)| !name.is_empty())
            .map(|(_, name)| format!("write the name alone, `{name}`: it is looked up in the `icap/` outputs of the dependencies"));
        Err((
            format!("expected {}, found `{text}`", Self::EXPECTING),
            hint,
        ))
    }
    fn schema() -> Schema {
        json_schema!({ "type": "string" })
    }
}

/// Defines a word-valued enum: its words, serde and schema.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident($expecting:literal) { $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
        pub(crate) enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant),+
        }

        impl $name {
            const WORDS: &[&str] = &[$($word),+];
        }

        impl Checked for $name {
            const EXPECTING: &'static str = $expecting;
            fn from_text(text: &str) -> Result<$name, Problem> {
                $(if text == $word {
                    return Ok($name::$variant);
                })+
                Err((
                    format!("expected {}, found `{text}`", Self::EXPECTING),
                    did_you_mean(text, Self::WORDS.iter().copied()),
                ))
            }
            fn schema() -> Schema {
                json_schema!({
                    "anyOf": [
                        { "enum": $name::WORDS },
                        { "type": "string", "pattern": "[{}]", "description": "A template." }
                    ]
                })
            }
        }
    };
}

words! {
    /// The flow of an `hls` node.
    HlsTool("`emulated` or `vitis_hls`") {
        /// The emulated flow: a C++ compiler builds the kernel plugin.
        #[default]
        Emulated = "emulated",
        /// AMD Vitis HLS (the real flow).
        VitisHls = "vitis_hls",
    }
}

words! {
    /// The flow of a `weave` node.
    WeaveTool("`emulated` or `spinhdl`") {
        #[default]
        Emulated = "emulated",
        Spinhdl = "spinhdl",
    }
}

words! {
    /// The flow of a `program` node.
    ProgramTool("`emulated` or `vivado`") {
        #[default]
        Emulated = "emulated",
        Vivado = "vivado",
    }
}

/// The directories directly under `dir`, sorted (for suggestions).
fn subdirectories(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// How a metric is read: `{regex: PATTERN}` (the first capture group, or the group named `value`, of the last
/// match), `{regex: PATTERN, match: K, base: 16}`, or `{json: PATH}`.
#[derive(Debug, Serialize)]
pub(crate) struct Metric {
    #[serde(skip_serializing_if = "Option::is_none")]
    regex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    json: Option<String>,
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    nth: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base: Option<Tpl<MetricBase>>,
}

/// The keys of a metric as written; [`Metric`] checks how they combine.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricKeys {
    #[serde(default)]
    regex: Option<String>,
    #[serde(default)]
    json: Option<String>,
    #[serde(default, rename = "match")]
    nth: Option<i64>,
    #[serde(default)]
    base: Option<Tpl<MetricBase>>,
}

impl<'de> Deserialize<'de> for Metric {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Metric, D::Error> {
        let keys = MetricKeys::deserialize(deserializer)?;
        let problem = match (&keys.regex, &keys.json) {
            (Some(_), Some(_)) => Some(("a metric reads `regex` or `json`, not both", None)),
            (None, None) => Some((
                "a metric needs `regex` or `json`",
                Some("e.g. `{regex: 'speed: (\\S+)'}`"),
            )),
            (None, Some(_)) if keys.nth.is_some() || keys.base.is_some() => {
                Some(("`match` and `base` apply to `regex` metrics only", None))
            }
            _ if keys.nth == Some(0) => Some((
                "`match` counts matches from 1, or from the end with -1, -2, …",
                Some("-1 (the default) is the last match"),
            )),
            _ => None,
        };
        if let Some((message, hint)) = problem {
            return Err(custom_with_hint(message, hint.map(str::to_owned)));
        }
        Ok(Metric {
            regex: keys.regex,
            json: keys.json,
            nth: keys.nth,
            base: keys.base,
        })
    }
}

inline_schema!(Metric, "Metric", |_| {
    json_schema!({
        "description": "How a metric is read from the node's standard output.",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "regex": {
                "type": "string",
                "description": "A regex; the value is its first capture group (or the group named `value`)."
            },
            "json": {
                "type": "string",
                "description": "A path (e.g. `$.latency.p50`) into the JSON the node prints."
            },
            "match": {
                "type": "integer",
                "not": { "const": 0 },
                "description": "Which match of `regex`: 1-based, negative from the end (default -1, the last)."
            },
            "base": MetricBase::schema()
        },
        "oneOf": [
            { "required": ["regex"] },
            { "required": ["json"], "not": { "anyOf": [ { "required": ["match"] }, { "required": ["base"] } ] } }
        ]
    })
});

/// A regex metric's base: 10, 16 or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricBase {
    Ten,
    Sixteen,
    Auto,
}

impl Checked for MetricBase {
    const EXPECTING: &'static str = "10, 16 or auto";
    fn from_int(value: i64) -> Result<MetricBase, Problem> {
        match value {
            10 => Ok(MetricBase::Ten),
            16 => Ok(MetricBase::Sixteen),
            _ => Err((
                format!("expected 10, 16 or auto, found the integer `{value}`"),
                None,
            )),
        }
    }
    fn from_text(text: &str) -> Result<MetricBase, Problem> {
        // A rendered template is text: `base: "{len_base}"` becomes "16".
        match text.trim() {
            "10" => Ok(MetricBase::Ten),
            "16" => Ok(MetricBase::Sixteen),
            "auto" => Ok(MetricBase::Auto),
            _ => Err((
                format!("expected 10, 16 or auto, found the string `{text}`"),
                None,
            )),
        }
    }
    fn schema() -> Schema {
        json_schema!({
            "description": "How the capture is read: 10, 16 (hex without `0x`) or auto (`0x…` as hex, else a decimal number; the default). With a base, a capture that does not parse fails the node. May be a template.",
            "anyOf": [ { "enum": [10, 16, "auto"] }, { "type": "string", "pattern": "[{}]", "description": "A template." } ]
        })
    }
}

impl Serialize for MetricBase {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MetricBase::Ten => serializer.serialize_u8(10),
            MetricBase::Sixteen => serializer.serialize_u8(16),
            MetricBase::Auto => serializer.serialize_str("auto"),
        }
    }
}

/// A command: one shell string, or argv words.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum RunSpec {
    Shell(String),
    Argv(Vec<Text>),
}

impl<'de> Deserialize<'de> for RunSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RunSpec, D::Error> {
        struct RunVisitor;
        impl<'de> Visitor<'de> for RunVisitor {
            type Value = RunSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a command string or a list of argv words")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RunSpec, E> {
                if s.trim().is_empty() {
                    return Err(E::invalid_value(de::Unexpected::Str(s), &self));
                }
                Ok(RunSpec::Shell(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RunSpec, A::Error> {
                let mut words = Vec::new();
                while let Some(word) = seq.next_element()? {
                    words.push(word);
                }
                if words.is_empty() {
                    return Err(de::Error::custom("`run` needs at least one argv word"));
                }
                Ok(RunSpec::Argv(words))
            }
        }
        deserializer.deserialize_any(RunVisitor)
    }
}

inline_schema!(RunSpec, "Run", |generator| {
    let word = generator.subschema_for::<Text>();
    json_schema!({
        "anyOf": [
            { "type": "string", "description": "Run by `sh -c`." },
            { "type": "array", "items": word, "minItems": 1, "description": "argv words." }
        ]
    })
});

/// A node's kind-specific settings, as they go into `NodeSpec::config`.
pub(crate) type Config = BTreeMap<String, serde_json::Value>;

/// One entry of [`KINDS`].
#[derive(Debug)]
pub(crate) struct KindDef {
    pub name: &'static str,
    /// The kind's own keys.
    pub fields: fn() -> &'static [&'static str],
    /// Checks the kind's keys (a mapping) and returns them as the node's config.
    pub config: fn(&Node) -> Result<Config, Vec<DeError>>,
    pub schema: fn(&mut SchemaGenerator) -> Schema,
    /// Checks a resolved config against the project (e.g. that the files it names exist); `None` when the
    /// kind has nothing to check.
    pub check: Option<CheckFn>,
    /// Files the kind writes beyond the node's `outputs:`, given its resolved config; the loader adds them to
    /// the node's outputs so the cache keeps them.
    pub implied_outputs: fn(&Config) -> Vec<&'static str>,
    /// Why the node may not declare `outputs:`, given its resolved config (`None`: it may).
    pub outputs_forbidden: fn(&Config) -> Option<&'static str>,
}

/// Checks a node's resolved config (`&str` is the node's name, `&Path` the project root).
pub(crate) type CheckFn = fn(&Config, &str, &Path) -> Vec<KindProblem>;

impl KindDef {
    const fn of<T: Kind>(name: &'static str) -> KindDef {
        KindDef {
            name,
            fields: struct_fields::<T>,
            config: config_of::<T>,
            schema: T::json_schema,
            check: if T::CHECKS { Some(check_of::<T>) } else { None },
            implied_outputs: T::implied_outputs,
            outputs_forbidden: T::outputs_forbidden,
        }
    }
}

/// A node kind's struct.
pub(crate) trait Kind: DeserializeOwned + Serialize + JsonSchema {
    /// Whether [`Kind::check`] does anything.
    const CHECKS: bool = false;
    /// Checks the resolved keys against the project under `root`.
    fn check(&self, _node: &str, _root: &Path) -> Vec<KindProblem> {
        Vec::new()
    }
    /// Files the kind writes whatever the node's `outputs:` say (see [`KindDef::implied_outputs`]).
    fn implied_outputs(_config: &Config) -> Vec<&'static str> {
        Vec::new()
    }
    /// Why a node of this kind may not declare outputs (see [`KindDef::outputs_forbidden`]).
    fn outputs_forbidden(_config: &Config) -> Option<&'static str> {
        None
    }
}

/// A problem [`Kind::check`] finds: the key it is about, the message and a hint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KindProblem {
    pub key: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

fn check_of<T: Kind>(config: &Config, node: &str, root: &Path) -> Vec<KindProblem> {
    let value =
        serde_json::Value::Object(config.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    match serde_json::from_value::<T>(value) {
        Ok(kind) => kind.check(node, root),
        // The config came from `T` itself; nothing to add when it does not read back.
        Err(_) => Vec::new(),
    }
}

fn config_of<T: DeserializeOwned + Serialize>(node: &Node) -> Result<Config, Vec<DeError>> {
    let (value, errors) = deserialize_all::<T>(node);
    match value {
        Some(value) if errors.is_empty() => match serde_json::to_value(value) {
            Ok(serde_json::Value::Object(map)) => Ok(map.into_iter().collect()),
            Ok(_) => Ok(BTreeMap::new()),
            Err(error) => Err(vec![de::Error::custom(error)]),
        },
        _ => Err(errors),
    }
}

pub(crate) fn find(name: &str) -> Option<&'static KindDef> {
    KINDS.iter().find(|k| k.name == name)
}

/// The keys every node has (from [`NodeCommon`]).
pub(crate) fn common_fields() -> &'static [&'static str] {
    struct_fields::<NodeCommon>()
}

/// A node's body as written: checked by [`NodeCommon`] and its kind's struct. Its schema joins the two.
#[derive(Debug, Clone)]
pub(crate) struct NodeBody(pub Node);

impl<'de> Deserialize<'de> for NodeBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NodeBody, D::Error> {
        Node::deserialize(deserializer).map(NodeBody)
    }
}

impl JsonSchema for NodeBody {
    fn schema_name() -> Cow<'static, str> {
        "Node".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let common = NodeCommon::json_schema(generator);
        let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
        let mut branches = Vec::new();
        for kind in KINDS {
            let own = (kind.schema)(generator);
            let mut properties = serde_json::Map::new();
            let mut required: Vec<serde_json::Value> = Vec::new();
            for part in [&common, &own] {
                if let Some(props) = part.get("properties").and_then(|p| p.as_object()) {
                    properties.extend(props.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                if let Some(list) = part.get("required").and_then(|r| r.as_array()) {
                    required.extend(list.iter().cloned());
                }
            }
            properties.insert("kind".to_owned(), serde_json::json!({ "const": kind.name }));
            let mut then = serde_json::json!({
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            });
            if let (Some(description), Some(object)) =
                (own.get("description"), then.as_object_mut())
            {
                object.insert("description".to_owned(), description.clone());
            }
            branches.push(serde_json::json!({
                "if": { "properties": { "kind": { "const": kind.name } }, "required": ["kind"] },
                "then": then,
            }));
        }
        json_schema!({
            "type": "object",
            "required": ["kind"],
            "properties": {
                "kind": { "description": "What the node does.", "enum": names }
            },
            "allOf": branches,
        })
    }
}

//! Where a testbed's fRAC images come from, and what may reach a board: the profile's image source (the
//! emulated build chain, or prebuilt images pinned by sha256 in `bitstreams/NAME.yaml`), the run's overrides
//! (`--bitstream`, `--partials`, `--no-program`, `--artifact`), the rewrite of a loaded pipeline that puts the
//! pinned files in place of the build chain's products, and the `prebuilt` kind that copies them into the cache.
//! Everything a board must not get is refused here, before any node runs (docs/frac.md §3, §4.2, §4.3).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fracflow_core::{ConfigProblem, Executor, Job, KindInfo, NodeError, NodeSpec, Outcome};
use fracflow_proto::bitstream::{self, BitstreamKind};
use fracflow_record::prebuilt::{self, ImageRole, PrebuiltManifest, Provenance};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::testbed::{Session, TestbedKind};

/// The manifest the shipped `u280-*` profiles pin their images with.
pub const DEFAULT_MANIFEST: &str = "frac-example";

/// The image names `--bitstream NAME=FILE` and `--partials NAME=DIR` take: the fRAC design and the bypass
/// baseline (the artifact's targets O=1 and O=0, docs/frac.md §6.1).
pub const FRAC: &str = "frac";
pub const BYPASS: &str = "bypass";

/// How much of a file tells a `.bit` header or a `.bin` sync word apart (proto::bitstream).
const CLASSIFY_BYTES: usize = 4096;

/// Where a testbed's images come from.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ImageSourceKind {
    /// The emulated build chain (`pipelines/frac/build.yaml`): containers only the emulated device runs.
    Emulated,
    /// Real bitstreams pinned in `bitstreams/<manifest>.yaml`: the artifact's `example/` tree, or a Vivado
    /// build's `build/frac/bitstreams/` imported the same way.
    Prebuilt,
    /// The real build, run by the pipeline: `vitis_hls` per accelerator, `spinhdl weave` for the static design
    /// and every partial, `spinhdl spin` for one RM against its cell's abstract shell (docs/frac.md §4.2). Its
    /// products are content-hashed like every output, so measurements key on them.
    Vivado,
}

/// A profile's `images:` section.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImagesProfile {
    pub source: ImageSourceKind,
    /// The manifest under `bitstreams/` (without `.yaml`) that pins the files.
    #[serde(default = "default_manifest")]
    pub manifest: String,
    /// The folder the manifest's paths are relative to (absolute, or relative to the project root); default: the
    /// root recorded at import. Never part of a key: the hashes are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
}

fn default_manifest() -> String {
    DEFAULT_MANIFEST.to_owned()
}

impl ImagesProfile {
    /// A profile without `images:`: the emulated chain on an emulated testbed, the artifact's pinned images
    /// everywhere else (a board can only take real bitstreams).
    pub fn default_for(kind: TestbedKind) -> ImagesProfile {
        ImagesProfile {
            source: match kind {
                TestbedKind::Emulated => ImageSourceKind::Emulated,
                TestbedKind::Real | TestbedKind::Doubles => ImageSourceKind::Prebuilt,
            },
            manifest: default_manifest(),
            artifact: None,
        }
    }
}

/// The run's own choices, as the artifact's `run.py` takes them (docs/frac.md §6.1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageOverrides {
    /// `--bitstream NAME=FILE`: this full image instead of the source's.
    pub bitstreams: BTreeMap<String, PathBuf>,
    /// `--partials NAME=DIR`: the `cXX_fYY.bin` partials in DIR instead of the source's.
    pub partials: BTreeMap<String, PathBuf>,
    /// `--no-program`: the board already holds the image; only slots are loaded.
    pub no_program: bool,
    /// `--artifact DIR`: where the manifest's files are on this machine.
    pub artifact: Option<PathBuf>,
}

/// One file put in place of a build product: where it is (never in a key) and what it hashes to.
#[derive(Debug, Clone, PartialEq)]
struct Pinned {
    /// Its path below the node's outputs (`jtag/frac.bit`, `icap/c00_f00.bin`).
    output: String,
    source: PathBuf,
    sha256: String,
    size: u64,
    /// Where it was named: `manifest frac-example: frac/icap/c00_f00.bin`, `--partials frac=DIR`.
    origin: String,
    /// The build it came from (`RUN`/`STAGED`), when known.
    provenance: Option<(String, Provenance)>,
}

/// What the rewrite chose, for `plan`, the run manifest and the log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImageChoice {
    /// One line: the source and where its files are.
    pub source: String,
    /// Per file used: output name, sha256 and provenance.
    pub files: Vec<String>,
    pub no_program: bool,
    /// Some node was rewritten, so the graph must be built again; a pipeline with no image leaves it as loaded.
    #[serde(skip)]
    pub rewrote_pipeline: bool,
}

/// Rewrites the pipeline in `graph` for the testbed's image source: every needed `image`/`partials` node
/// becomes a `prebuilt` node holding the pinned files' hashes (so measurements key on them, and editing an
/// accelerator rebuilds nothing), after checking each file, and the graph is built again from the rewritten
/// nodes. A pipeline with no needed image is left as it is. Returns every refusal at once.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    root: &Path,
    testbed: &str,
    kind: TestbedKind,
    images: &ImagesProfile,
    overrides: &ImageOverrides,
    graph: &mut fracflow_core::Graph,
    needed: &BTreeSet<String>,
    session: Option<&Session>,
) -> Result<ImageChoice, Vec<String>> {
    let mut refusals = Vec::new();
    for name in overrides.bitstreams.keys().chain(overrides.partials.keys()) {
        if name != FRAC && name != BYPASS {
            refusals.push(format!(
                "`{name}` names no image: `--bitstream` and `--partials` take `{FRAC}=…` or `{BYPASS}=…`"
            ));
        }
    }
    if overrides.partials.contains_key(BYPASS) {
        refusals.push(format!(
            "`--partials {BYPASS}=…`: the bypass image has no slots"
        ));
    }
    let products: Vec<usize> = graph
        .specs()
        .enumerate()
        .filter(|(_, n)| (n.kind == "image" || n.kind == "partials") && needed.contains(&n.id))
        .map(|(i, _)| i)
        .collect();
    let mut choice = ImageChoice {
        no_program: overrides.no_program,
        ..ImageChoice::default()
    };
    if products.is_empty() {
        choice.source = "no image needed".to_owned();
        return if refusals.is_empty() {
            Ok(choice)
        } else {
            Err(refusals)
        };
    }
    choice.rewrote_pipeline = true;
    let mut nodes = std::mem::take(graph).into_specs();
    let rewritten = rewrite(
        root, testbed, kind, images, overrides, &mut nodes, needed, session, products, refusals,
        choice,
    );
    // The graph is built again from the rewritten nodes, after a refusal too (when they still form one), so
    // that a caller reporting the refusal still has the pipeline; a refusal is the answer either way.
    match (rewritten, fracflow_core::Graph::build(nodes)) {
        (Ok(choice), Ok(rebuilt)) => {
            *graph = rebuilt;
            Ok(choice)
        }
        (Ok(_), Err(errors)) => Err(vec![format!(
            "the pipeline with the pinned images is not a DAG: {}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )]),
        (Err(refusals), rebuilt) => {
            if let Ok(rebuilt) = rebuilt {
                *graph = rebuilt;
            }
            Err(refusals)
        }
    }
}

/// [`apply`]'s rewrite of `nodes` (declaration order), once some needed node is an image or partials.
#[allow(clippy::too_many_arguments)]
fn rewrite(
    root: &Path,
    testbed: &str,
    kind: TestbedKind,
    images: &ImagesProfile,
    overrides: &ImageOverrides,
    nodes: &mut [NodeSpec],
    needed: &BTreeSet<String>,
    session: Option<&Session>,
    products: Vec<usize>,
    mut refusals: Vec<String>,
    mut choice: ImageChoice,
) -> Result<ImageChoice, Vec<String>> {
    let real = kind != TestbedKind::Emulated;
    if images.source == ImageSourceKind::Vivado {
        refusals.extend(use_vivado(nodes, needed, overrides));
    }
    let products: Vec<usize> = products
        .into_iter()
        .filter(|&i| matches!(nodes[i].kind.as_str(), "image" | "partials"))
        .filter(|&i| {
            images.source != ImageSourceKind::Vivado || is_overridden(&nodes[i], overrides)
        })
        .collect();
    let mut source = PinnedSource::new(root, images, overrides);
    let units = shell_units(root);
    // Which source gives each product: its override, the pinned manifest, or the build chain.
    let mut replaced: Vec<(usize, Vec<Pinned>)> = Vec::new();
    for &index in &products {
        let node = &nodes[index];
        let files = if node.kind == "image" {
            let name = image_name(node);
            let output = node.outputs.first().cloned().unwrap_or_default();
            source.full_image(name, &output)
        } else {
            let unit = node
                .config
                .get("unit")
                .and_then(|u| u.as_str())
                .unwrap_or_default();
            source.partials(unit, &units)
        };
        match files {
            Some(Ok(files)) => replaced.push((index, files)),
            Some(Err(why)) => refusals.push(why),
            None if real => refusals.push(format!(
                "testbed `{testbed}` is {}: node `{}` would hand the board the emulated build chain's {}, a \
                 container that configures no FPGA; pin real images (`images: {{source: prebuilt}}` in \
                 hw/testbeds/{testbed}.yaml and `fracflow bitstreams import DIR`) or pass `--bitstream`/`--partials`",
                kind.as_str(),
                node.id,
                if node.kind == "image" { "image" } else { "partials" }
            )),
            None => {}
        }
    }
    // Every pinned file: the bytes the manifest pinned, a real Xilinx bitstream on a board (an emulated device
    // takes only its own containers), and of the build its image came from.
    let all: Vec<&Pinned> = replaced.iter().flat_map(|(_, f)| f).collect();
    for file in &all {
        match classify_file(&file.source).map_err(|e| format!("{}: {e}", file.source.display())) {
            Ok(found) if real && !found.is_xilinx() => refusals.push(format!(
                "{} ({}): {}; a board takes only real Xilinx bitstreams",
                file.source.display(),
                file.origin,
                describe_kind(&found)
            )),
            Ok(found) if !real && found.is_xilinx() => refusals.push(format!(
                "{} ({}): a real Xilinx bitstream on the emulated testbed `{testbed}`, whose device runs only \
                 the emulated flow's images; measure it with a `real` profile",
                file.source.display(),
                file.origin
            )),
            Ok(_) => {}
            Err(why) => refusals.push(why),
        }
    }
    refusals.extend(provenance_refusals(&all));
    refusals.extend(missing_slot_files(nodes, needed, &replaced));
    if !refusals.is_empty() {
        // Every node of one source meets the same missing manifest: say it once.
        let mut seen = BTreeSet::new();
        refusals.retain(|r| seen.insert(r.clone()));
        return Err(refusals);
    }
    choice.source = source.describe();
    for file in &all {
        choice.files.push(format!(
            "{}  sha256 {}  {} B  ({}){}",
            file.output,
            short(&file.sha256),
            file.size,
            file.origin,
            file.provenance
                .as_ref()
                .map(|(at, p)| format!("; build {}", describe_provenance(at, p)))
                .unwrap_or_default()
        ));
    }
    for (index, files) in replaced {
        if let Some(session) = session {
            for file in &files {
                session.pin_source(&file.sha256, &file.source);
            }
        }
        let node = &mut nodes[index];
        node.kind = "prebuilt".to_owned();
        node.deps.clear();
        node.inputs.clear();
        node.config = fracflow_core::Settings::from([(
            "files".to_owned(),
            serde_json::json!(
                files
                    .iter()
                    .map(|f| serde_json::json!({"path": f.output, "sha256": f.sha256, "size": f.size}))
                    .collect::<Vec<_>>()
            ),
        )]);
    }
    if let Some(session) = session {
        session.set_partial_units(units);
        session.set_no_program(overrides.no_program);
    }
    Ok(choice)
}

/// The FPGA part the real flow builds for (docs/frac.md §4.1).
const U280_PART: &str = "xcu280-fsvh2892-2L-e";

fn image_name(node: &NodeSpec) -> &'static str {
    if node.config.get("bypass") == Some(&serde_json::json!(true)) {
        BYPASS
    } else {
        FRAC
    }
}

/// Whether the run's flags give this product instead of its source.
fn is_overridden(node: &NodeSpec, overrides: &ImageOverrides) -> bool {
    match node.kind.as_str() {
        "image" => overrides.bitstreams.contains_key(image_name(node)),
        _ => overrides.partials.contains_key(FRAC),
    }
}

/// The real build in place of the emulated one: the build chain's kinds run their real tools, and a
/// measurement takes the image and the partials from what `spinhdl weave` left (`jtag/`, `icap/`), since
/// that one implementation is what its partials fit. The bypass baseline is a flat build of another branch
/// that fracflow does not drive: it must be given.
fn use_vivado(
    nodes: &mut [NodeSpec],
    needed: &BTreeSet<String>,
    overrides: &ImageOverrides,
) -> Vec<String> {
    let mut refusals = Vec::new();
    let weave = nodes
        .iter()
        .find(|n| n.kind == "weave" && needed.contains(&n.id))
        .map(|n| n.id.clone());
    let mut products = BTreeSet::new();
    for node in nodes.iter_mut().filter(|n| needed.contains(&n.id)) {
        match node.kind.as_str() {
            "hls" => {
                node.config
                    .insert("tool".to_owned(), serde_json::json!("vitis_hls"));
                node.config
                    .entry("part".to_owned())
                    .or_insert_with(|| serde_json::json!(U280_PART));
                node.outputs = vec!["ip/".to_owned()];
            }
            "weave" => {
                node.config
                    .insert("tool".to_owned(), serde_json::json!("spinhdl"));
                node.outputs = vec!["jtag/".to_owned(), "icap/".to_owned()];
            }
            "partials" if !is_overridden(node, overrides) => {
                node.config
                    .insert("tool".to_owned(), serde_json::json!("spinhdl"));
                products.insert(node.id.clone());
            }
            "image" if image_name(node) == BYPASS && !is_overridden(node, overrides) => {
                refusals.push(format!(
                    "node `{}`: the vivado source builds the fRAC design only; the bypass baseline is a flat \
                     build of another branch (docs/frac.md §4.2): give it with `--bitstream {BYPASS}=FILE` or pin it",
                    node.id
                ));
            }
            "image" if !is_overridden(node, overrides) => {
                // What `spinhdl weave` left is the full image: the node only gathers it.
                node.kind = "group".to_owned();
                node.config.clear();
                node.outputs.clear();
                node.deps = weave.iter().cloned().collect();
                products.insert(node.id.clone());
            }
            _ => {}
        }
    }
    let Some(weave) = weave else {
        return refusals;
    };
    for node in nodes.iter_mut().filter(|n| n.kind == "measure") {
        if node.deps.iter().any(|d| products.contains(d)) {
            node.deps.retain(|d| !products.contains(d));
            if !node.deps.contains(&weave) {
                node.deps.push(weave.clone());
            }
        }
    }
    refusals
}

/// Unit of each RM id, from the project's shell declaration (`hw/shell.yaml`, docs/frac.md §4.3): which
/// partials belong to which accelerator, and what a slot must answer as after a load.
pub fn shell_units(root: &Path) -> BTreeMap<u8, String> {
    fracflow_emulator::spec::ShellSpec::load(&root.join("hw").join("shell.yaml"))
        .map(|shell| {
            shell
                .cells
                .iter()
                .flat_map(|cell| &cell.rms)
                .filter_map(|rm| Some((u8::try_from(rm.id).ok()?, rm.unit.clone())))
                .collect()
        })
        .unwrap_or_default()
}

/// The manifest (loaded on first need) and the overrides, answering "which file is this product".
struct PinnedSource<'a> {
    root: &'a Path,
    images: &'a ImagesProfile,
    overrides: &'a ImageOverrides,
    manifest: Option<Result<(PrebuiltManifest, PathBuf), String>>,
}

impl<'a> PinnedSource<'a> {
    fn new(root: &'a Path, images: &'a ImagesProfile, overrides: &'a ImageOverrides) -> Self {
        PinnedSource {
            root,
            images,
            overrides,
            manifest: None,
        }
    }

    fn describe(&self) -> String {
        match &self.manifest {
            Some(Ok((manifest, at))) => format!(
                "prebuilt images pinned in bitstreams/{}.yaml, from {}",
                manifest.name,
                at.display()
            ),
            _ if self.images.source == ImageSourceKind::Emulated => {
                "the emulated build chain".to_owned()
            }
            _ if self.images.source == ImageSourceKind::Vivado => {
                "the real build (vitis_hls, spinhdl weave, spinhdl spin) run by this pipeline"
                    .to_owned()
            }
            _ => "the run's --bitstream/--partials files".to_owned(),
        }
    }

    /// The manifest and the folder its paths are relative to, or why not.
    fn manifest(&mut self) -> Result<&(PrebuiltManifest, PathBuf), String> {
        let (root, images, overrides) = (self.root, self.images, self.overrides);
        self.manifest
            .get_or_insert_with(|| load_manifest(root, images, overrides))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The full image `name`, placed at `output`: the override, else the manifest's (prebuilt source), else
    /// `None` (the build chain makes it).
    fn full_image(&mut self, name: &str, output: &str) -> Option<Result<Vec<Pinned>, String>> {
        if let Some(file) = self.overrides.bitstreams.get(name) {
            return Some(
                override_file(self.root, file, output, &format!("--bitstream {name}=…"))
                    .map(|f| vec![f]),
            );
        }
        if self.images.source != ImageSourceKind::Prebuilt {
            return None;
        }
        Some(self.manifest().and_then(|(manifest, at)| {
            let role = if name == BYPASS {
                ImageRole::Bypass
            } else {
                ImageRole::Full
            };
            let entry = manifest
                .files
                .iter()
                .filter(|f| f.role == role && f.path.ends_with(".bit"))
                .min_by_key(|f| !f.path.ends_with(output))
                .ok_or_else(|| {
                    format!(
                        "bitstreams/{}.yaml pins no {} image (a `{}`-role .bit)",
                        manifest.name,
                        name,
                        if role == ImageRole::Bypass {
                            "bypass"
                        } else {
                            "full"
                        }
                    )
                })?;
            pinned_from_manifest(manifest, at, entry, output.to_owned()).map(|f| vec![f])
        }))
    }

    /// The partials of `unit` (each RM of it in any cell), placed at `icap/<name>`.
    fn partials(
        &mut self,
        unit: &str,
        units: &BTreeMap<u8, String>,
    ) -> Option<Result<Vec<Pinned>, String>> {
        let of_unit = |name: &str| {
            prebuilt::parse_partial_name(name)
                .and_then(|(_, rm)| units.get(&rm))
                .is_some_and(|u| u == unit)
        };
        if let Some(dir) = self.overrides.partials.get(FRAC) {
            return Some(override_partials(self.root, dir, &of_unit));
        }
        if self.images.source != ImageSourceKind::Prebuilt {
            return None;
        }
        Some(self.manifest().and_then(|(manifest, at)| {
            manifest
                .files
                .iter()
                .filter(|f| f.role == ImageRole::Partial && f.path.ends_with(".bin"))
                .filter(|f| f.path.split('/').any(|part| part == "icap"))
                .filter(|f| of_unit(file_name(&f.path)))
                .map(|f| {
                    pinned_from_manifest(manifest, at, f, format!("icap/{}", file_name(&f.path)))
                })
                .collect()
        }))
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Every pinned file of `manifest` under `at` that is missing, unreadable or changed, one line each
/// (`fracflow bitstreams verify`, `fracflow testbed check`).
pub fn verify_files(manifest: &PrebuiltManifest, at: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for file in &manifest.files {
        match prebuilt::sha256_file(&at.join(&file.path)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                problems.push(format!("missing: {}", file.path));
            }
            Err(e) => problems.push(format!("unreadable: {} ({e})", file.path)),
            Ok((sha256, _)) if sha256 != file.sha256 => problems.push(format!(
                "changed: {} (sha256 {sha256}, pinned {})",
                file.path, file.sha256
            )),
            Ok(_) => {}
        }
    }
    problems
}

/// The profile's pinned images as `testbed check` reports them: present, and every file verifying.
pub fn source_finding(
    root: &Path,
    testbed_kind: TestbedKind,
    images: &ImagesProfile,
) -> (bool, String) {
    match images.source {
        ImageSourceKind::Emulated if testbed_kind != TestbedKind::Emulated => (
            false,
            "emulated build chain: its containers configure no FPGA; set `images.source: prebuilt` (or vivado)"
                .to_owned(),
        ),
        ImageSourceKind::Emulated => (true, "the emulated build chain".to_owned()),
        ImageSourceKind::Vivado => {
            let missing: Vec<&str> = ["vitis_hls", "spinhdl"]
                .into_iter()
                .filter(|tool| !crate::testbed::on_path(tool))
                .collect();
            if missing.is_empty() {
                (true, "the real build: vitis_hls and spinhdl found".to_owned())
            } else {
                (false, format!("the real build needs {} on PATH", missing.join(" and ")))
            }
        }
        ImageSourceKind::Prebuilt => match load_manifest(root, images, &ImageOverrides::default()) {
            Err(why) => (false, why),
            Ok((manifest, at)) => {
                let problems = verify_files(&manifest, &at);
                if problems.is_empty() {
                    (
                        true,
                        format!(
                            "bitstreams/{}.yaml: all {} pinned file(s) under {} verify",
                            manifest.name,
                            manifest.files.len(),
                            at.display()
                        ),
                    )
                } else {
                    (
                        false,
                        format!(
                            "bitstreams/{}.yaml under {}: {}",
                            manifest.name,
                            at.display(),
                            problems.join("; ")
                        ),
                    )
                }
            }
        },
    }
}

fn load_manifest(
    root: &Path,
    images: &ImagesProfile,
    overrides: &ImageOverrides,
) -> Result<(PrebuiltManifest, PathBuf), String> {
    let file = root
        .join("bitstreams")
        .join(format!("{}.yaml", images.manifest));
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "bitstreams/{}.yaml: {e}: the images are not pinned yet; pin the artifact's prebuilt images with \
             `fracflow bitstreams import PATH/TO/frac-atc-artifact --name {}`",
            images.manifest, images.manifest
        )
    })?;
    let manifest = PrebuiltManifest::from_yaml(&text)
        .map_err(|e| format!("bitstreams/{}.yaml: {e}", images.manifest))?;
    let at = overrides
        .artifact
        .clone()
        .or_else(|| images.artifact.as_ref().map(PathBuf::from))
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| PathBuf::from(&manifest.artifact_root));
    if !at.is_dir() {
        return Err(format!(
            "the artifact folder {} of bitstreams/{}.yaml does not exist on this machine; name it with \
             `--artifact DIR` (or `images.artifact` in the profile)",
            at.display(),
            images.manifest
        ));
    }
    Ok((manifest, at))
}

fn pinned_from_manifest(
    manifest: &PrebuiltManifest,
    at: &Path,
    entry: &prebuilt::PrebuiltFile,
    output: String,
) -> Result<Pinned, String> {
    let source = at.join(&entry.path);
    let (sha256, size) = prebuilt::sha256_file(&source).map_err(|e| {
        format!(
            "{} (pinned in bitstreams/{}.yaml): {e}",
            source.display(),
            manifest.name
        )
    })?;
    if sha256 != entry.sha256 || size != entry.size {
        return Err(format!(
            "{}: sha256 {} ({size} B), but bitstreams/{}.yaml pinned {} ({} B): the file changed since it was \
             pinned (`fracflow bitstreams verify {}` lists every difference)",
            source.display(),
            short(&sha256),
            manifest.name,
            short(&entry.sha256),
            entry.size,
            manifest.name
        ));
    }
    Ok(Pinned {
        output,
        source,
        sha256,
        size,
        origin: format!("bitstreams/{}.yaml: {}", manifest.name, entry.path),
        provenance: nearest_provenance(manifest, &entry.path),
    })
}

/// The provenance record of the nearest folder above `path` that has one.
fn nearest_provenance(manifest: &PrebuiltManifest, path: &str) -> Option<(String, Provenance)> {
    let mut dir = path;
    loop {
        dir = dir.rsplit_once('/').map_or("", |(d, _)| d);
        for name in ["RUN", "STAGED"] {
            let key = if dir.is_empty() {
                name.to_owned()
            } else {
                format!("{dir}/{name}")
            };
            if let Some(record) = manifest.provenance.get(&key) {
                return Some((key, record.clone()));
            }
        }
        if dir.is_empty() {
            return None;
        }
    }
}

fn override_file(root: &Path, file: &Path, output: &str, origin: &str) -> Result<Pinned, String> {
    let source = if file.is_absolute() {
        file.to_owned()
    } else {
        root.join(file)
    };
    let (sha256, size) = prebuilt::sha256_file(&source)
        .map_err(|e| format!("{origin}: {}: {e}", source.display()))?;
    Ok(Pinned {
        output: output.to_owned(),
        provenance: provenance_near(&source),
        source,
        sha256,
        size,
        origin: origin.to_owned(),
    })
}

fn override_partials(
    root: &Path,
    dir: &Path,
    of_unit: &dyn Fn(&str) -> bool,
) -> Result<Vec<Pinned>, String> {
    let dir = if dir.is_absolute() {
        dir.to_owned()
    } else {
        root.join(dir)
    };
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("--partials frac={}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| n.ends_with(".bin") && of_unit(n))
        .collect();
    names.sort();
    names
        .iter()
        .map(|name| {
            override_file(
                root,
                &dir.join(name),
                &format!("icap/{name}"),
                &format!("--partials frac={}", dir.display()),
            )
        })
        .collect()
}

/// A build's `RUN`/`STAGED` beside a file given on the command line: in its folder or up to two above
/// (`build/frac/bitstreams/icap/x.bin` → `build/frac/bitstreams/RUN`).
fn provenance_near(file: &Path) -> Option<(String, Provenance)> {
    file.ancestors().skip(1).take(3).find_map(|dir| {
        ["RUN", "STAGED"].iter().find_map(|name| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).ok().map(|text| {
                (
                    path.display().to_string(),
                    prebuilt::parse_provenance(&text),
                )
            })
        })
    })
}

/// A build's identity in its provenance: its job and payload hash, where recorded.
fn build_identity(provenance: &Provenance) -> Option<(Option<&str>, Option<&str>)> {
    let identity = (provenance.job.as_deref(), provenance.payload.as_deref());
    (identity != (None, None)).then_some(identity)
}

fn describe_provenance(at: &str, provenance: &Provenance) -> String {
    let mut parts = Vec::new();
    if let Some(job) = &provenance.job {
        parts.push(format!("job {job}"));
    }
    if let Some(payload) = &provenance.payload {
        parts.push(format!("payload {payload}"));
    }
    if let Some(vivado) = &provenance.vivado {
        parts.push(format!("Vivado {vivado}"));
    }
    if parts.is_empty() {
        parts.push("no job or payload recorded".to_owned());
    }
    format!("{} from {at}", parts.join(", "))
}

/// A partial works only on the full image of its own build (docs/frac.md §3): one whose recorded build
/// differs from the fRAC image's is refused. Unknown provenance is left to the functional check after loading.
fn provenance_refusals(files: &[&Pinned]) -> Vec<String> {
    let Some((image_at, image)) = files
        .iter()
        .find(|f| f.output.ends_with("jtag/frac.bit"))
        .and_then(|f| f.provenance.as_ref().map(|p| (f, p)))
    else {
        return Vec::new();
    };
    let Some(image_build) = build_identity(&image.1) else {
        return Vec::new();
    };
    files
        .iter()
        .filter(|f| f.output.starts_with("icap/"))
        .filter_map(|f| {
            let (at, provenance) = f.provenance.as_ref()?;
            let build = build_identity(provenance)?;
            (build != image_build).then(|| {
                format!(
                    "{} ({}) is of another build than the image {} it would be loaded on: {} against {}; a \
                     partial works only on the full image of its own build",
                    f.output,
                    f.origin,
                    image_at.output,
                    describe_provenance(at, provenance),
                    describe_provenance(&image.0, &image.1)
                )
            })
        })
        .collect()
}

/// Every measurement's `image` and `slots` files must be among the pinned ones, or it could never run.
fn missing_slot_files(
    nodes: &[NodeSpec],
    needed: &BTreeSet<String>,
    replaced: &[(usize, Vec<Pinned>)],
) -> Vec<String> {
    let replaced_ids: BTreeSet<&str> = replaced
        .iter()
        .map(|(i, _)| nodes[*i].id.as_str())
        .collect();
    let offered: BTreeSet<&str> = replaced
        .iter()
        .flat_map(|(_, files)| files.iter().map(|f| file_name(&f.output)))
        .collect();
    let mut refusals = BTreeSet::new();
    for node in nodes
        .iter()
        .filter(|n| n.kind == "measure" && needed.contains(&n.id))
    {
        if !node.deps.iter().any(|d| replaced_ids.contains(d.as_str())) {
            continue;
        }
        let slots = node
            .config
            .get("slots")
            .and_then(|s| s.as_object())
            .into_iter()
            .flat_map(|s| s.values());
        for wanted in slots.filter_map(|v| v.as_str()) {
            if !offered.contains(file_name(wanted)) {
                refusals.insert(format!(
                    "node `{}` loads {wanted}, which is not among the pinned partials ({})",
                    node.name,
                    offered
                        .iter()
                        .filter(|n| n.ends_with(".bin"))
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    refusals.into_iter().collect()
}

/// What the first bytes of `path` say it is (proto::bitstream): enough of them for a `.bit` header with long
/// strings and the sync word's search window.
pub fn classify_file(path: &Path) -> std::io::Result<BitstreamKind> {
    use std::io::Read;
    let mut head = Vec::with_capacity(CLASSIFY_BYTES);
    std::fs::File::open(path)?
        .take(CLASSIFY_BYTES as u64)
        .read_to_end(&mut head)?;
    Ok(bitstream::classify(&head))
}

pub(crate) fn describe_kind(kind: &BitstreamKind) -> String {
    match kind {
        BitstreamKind::Emulated(what) => {
            format!("an emulated {what} (an FRACFULL/FRACPART container of the emulated flow)")
        }
        BitstreamKind::Unknown(why) => format!("not a Xilinx bitstream: {why}"),
        BitstreamKind::XilinxBit(_) | BitstreamKind::XilinxBin { .. } => {
            "a Xilinx bitstream".to_owned()
        }
    }
}

// -------------------------------------------------------------------------------------------------- prebuilt

/// `prebuilt`: pinned image files copied into the node's outputs, each checked against its sha256. A testbed's
/// image source puts it in place of the build chain's `image` and `partials` nodes; the files' locations come
/// from the run (never from the key), their hashes from the node.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrebuiltConfig {
    pub files: Vec<PrebuiltFileConfig>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrebuiltFileConfig {
    /// Below the node's outputs (`jtag/frac.bit`, `icap/c00_f00.bin`).
    pub path: String,
    pub sha256: String,
    pub size: u64,
}

#[derive(Debug)]
pub struct PrebuiltKind {
    pub session: Option<Arc<Session>>,
}

impl Executor for PrebuiltKind {
    fn check(&self, spec: &NodeSpec, _root: &Path) -> Vec<ConfigProblem> {
        crate::config::check_with::<PrebuiltConfig>(spec, |_| Vec::new())
    }
    fn config_schema(&self) -> serde_json::Value {
        crate::config::schema_of::<PrebuiltConfig>()
    }
    fn info(&self, _spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        Ok(KindInfo {
            version: 1,
            tools: BTreeMap::new(),
            cacheable: true,
        })
    }
    fn describe(&self, spec: &NodeSpec) -> String {
        match crate::config::typed::<PrebuiltConfig>(spec) {
            Ok(config) => format!(
                "copy pinned {}",
                config
                    .files
                    .iter()
                    .map(|f| format!("{} (sha256 {})", f.path, short(&f.sha256)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => e.to_string(),
        }
    }
    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: PrebuiltConfig = crate::config::typed(job.spec)?;
        for output in job.spec.outputs.iter().filter(|o| o.ends_with('/')) {
            std::fs::create_dir_all(job.out_dir.join(output))
                .map_err(|e| NodeError::permanent(format!("creating {output}: {e}")))?;
        }
        for file in &config.files {
            let source = self
                .session
                .as_ref()
                .and_then(|s| s.pinned_source(&file.sha256))
                .ok_or_else(|| {
                    NodeError::permanent(format!(
                        "{}: no file with sha256 {} was named by the testbed's image source in this run",
                        file.path,
                        short(&file.sha256)
                    ))
                })?;
            let target = job.out_dir.join(&file.path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| NodeError::permanent(format!("{}: {e}", parent.display())))?;
            }
            std::fs::copy(&source, &target).map_err(|e| {
                NodeError::permanent(format!(
                    "copying {} to {}: {e}",
                    source.display(),
                    file.path
                ))
            })?;
            // Hashed again after the copy: the file may have changed since the plan hashed it.
            let (sha256, _) = prebuilt::sha256_file(&target)
                .map_err(|e| NodeError::permanent(format!("{}: {e}", target.display())))?;
            if sha256 != file.sha256 {
                return Err(NodeError::permanent(format!(
                    "{} changed while the run started: sha256 {} instead of the pinned {}",
                    source.display(),
                    short(&sha256),
                    short(&file.sha256)
                )));
            }
        }
        Ok(Outcome::default())
    }
}

//! `fracflow bitstreams import|verify`: pin an artifact's prebuilt images (its `example/` tree, or a real
//! build's `bitstreams/`) by sha256 in `bitstreams/NAME.yaml`, and re-check them later (docs/frac.md §4.2,
//! §4.3). Only real Xilinx bitstreams are pinned: an emulated container or any other file is refused here,
//! so it can never be handed to a board later.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use fracflow_proto::bitstream::BitstreamKind;
use fracflow_record::atomic::atomic_write;
use fracflow_record::prebuilt::{
    self, ImageRole, PREBUILT_FORMAT_VERSION, PrebuiltFile, PrebuiltManifest,
};

use crate::error::{Error, Result};
use crate::exit::Exit;

/// The manifest name the shipped `u280-*` profiles reference.
pub const DEFAULT_NAME: &str = "frac-example";

/// The provenance records a Vivado build leaves beside its products (docs/frac.md §4.2).
const PROVENANCE_FILES: [&str; 2] = ["RUN", "STAGED"];

#[derive(Subcommand, Debug)]
pub enum BitstreamsAction {
    /// Hash an artifact's `example/` tree (or a build's `bitstreams/`) into bitstreams/NAME.yaml.
    Import {
        /// The artifact checkout, its `example/` folder, or a build's `bitstreams/` folder.
        dir: PathBuf,
        /// The manifest's name: bitstreams/NAME.yaml.
        #[arg(long, default_value = DEFAULT_NAME)]
        name: String,
    },
    /// Re-hash every pinned file; name every mismatch or missing file (exit 4).
    Verify {
        /// The manifest's name: bitstreams/NAME.yaml.
        #[arg(default_value = DEFAULT_NAME)]
        name: String,
        /// The artifact root to check (default: the one recorded at import).
        #[arg(long)]
        artifact: Option<PathBuf>,
    },
}

pub fn run(root: &Path, action: &BitstreamsAction) -> Result<Exit> {
    match action {
        BitstreamsAction::Import { dir, name } => import(root, dir, name),
        BitstreamsAction::Verify { name, artifact } => verify(root, name, artifact.as_deref()),
    }
}

fn manifest_path(root: &Path, name: &str) -> Result<PathBuf> {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if !plain {
        return Err(Error::bad_input(format!(
            "bitstream manifest name `{name}` is not a plain file name (letters, digits, `-`, `_`, `.`)"
        )));
    }
    Ok(root.join("bitstreams").join(format!("{name}.yaml")))
}

/// The folder the pinned paths are relative to: `DIR/example` for an artifact checkout, else `DIR`.
fn artifact_root(dir: &Path) -> Result<PathBuf> {
    let meta = fs::metadata(dir).map_err(|e| Error::io("cannot read", dir, e))?;
    if !meta.is_dir() {
        return Err(Error::bad_input(format!(
            "{} is not a directory (expected an artifact checkout, its example/ or a build's bitstreams/)",
            dir.display()
        )));
    }
    let example = dir.join("example");
    let root = if example.join("frac").is_dir() || example.join("bypass").is_dir() {
        example
    } else {
        dir.to_owned()
    };
    fs::canonicalize(&root).map_err(|e| Error::io("cannot resolve", &root, e))
}

/// Every file below `dir`, sorted, as paths relative to `base`.
fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io("cannot list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("cannot list", dir, e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| Error::io("cannot read", &path, e))?;
        if kind.is_dir() {
            walk(base, &path, out)?;
        } else if kind.is_file()
            && let Ok(relative) = path.strip_prefix(base)
        {
            out.push(relative.to_owned());
        }
    }
    out.sort();
    Ok(())
}

fn slash_path(relative: &Path) -> String {
    relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn is_image(relative: &Path) -> bool {
    matches!(
        relative.extension().and_then(|e| e.to_str()),
        Some("bit" | "bin")
    )
}

fn role_of(relative: &str, file_name: &str) -> (ImageRole, Option<(u8, u8)>) {
    if let Some(cell_rm) = prebuilt::parse_partial_name(file_name) {
        (ImageRole::Partial, Some(cell_rm))
    } else if relative.split('/').any(|part| part == "bypass") {
        (ImageRole::Bypass, None)
    } else {
        (ImageRole::Full, None)
    }
}

fn classify_file(path: &Path) -> Result<BitstreamKind> {
    fracflow_executors::images::classify_file(path).map_err(|e| Error::io("cannot read", path, e))
}

fn import(project_root: &Path, dir: &Path, name: &str) -> Result<Exit> {
    let target = manifest_path(project_root, name)?;
    let root = artifact_root(dir)?;
    let mut relatives = Vec::new();
    walk(&root, &root, &mut relatives)?;

    let mut files = Vec::new();
    let mut provenance = BTreeMap::new();
    let mut refused = Vec::new();
    for relative in &relatives {
        let path = root.join(relative);
        let shown = slash_path(relative);
        let file_name = relative
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if PROVENANCE_FILES.contains(&file_name.as_str()) {
            let text = fs::read(&path).map_err(|e| Error::io("cannot read", &path, e))?;
            provenance.insert(
                shown,
                prebuilt::parse_provenance(&String::from_utf8_lossy(&text)),
            );
            continue;
        }
        if !is_image(relative) {
            continue;
        }
        match classify_file(&path)? {
            kind if kind.is_xilinx() => {}
            BitstreamKind::Emulated(what) => {
                refused.push(format!(
                    "{shown}: an emulated {what} container, not a Xilinx bitstream"
                ));
                continue;
            }
            BitstreamKind::Unknown(why) => {
                refused.push(format!("{shown}: not a Xilinx bitstream ({why})"));
                continue;
            }
            _ => {}
        }
        let (sha256, size) =
            prebuilt::sha256_file(&path).map_err(|e| Error::io("cannot read", &path, e))?;
        let (role, cell_rm) = role_of(&shown, &file_name);
        files.push(PrebuiltFile {
            path: shown,
            role,
            cell: cell_rm.map(|(cell, _)| cell),
            rm: cell_rm.map(|(_, rm)| rm),
            size,
            sha256,
        });
    }
    if !refused.is_empty() {
        return Err(Error::bad_input_with_hint(
            format!(
                "{} file(s) under {} cannot be pinned:\n  {}",
                refused.len(),
                root.display(),
                refused.join("\n  ")
            ),
            "import only real Vivado products (the artifact's example/ or build/frac/bitstreams/); \
             the emulated build chain's images need no manifest",
        ));
    }
    if files.is_empty() {
        return Err(Error::bad_input(format!(
            "no .bit or .bin images under {}",
            root.display()
        )));
    }
    let manifest = PrebuiltManifest {
        version: PREBUILT_FORMAT_VERSION,
        name: name.to_owned(),
        artifact_root: root.to_string_lossy().into_owned(),
        files,
        provenance,
    };
    let text = manifest
        .to_yaml()
        .map_err(|e| Error::internal("cannot serialise the bitstream manifest", e))?;
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io("cannot create", parent, e))?;
    }
    atomic_write(&target, text.as_bytes()).map_err(|e| Error::io("cannot write", &target, e))?;
    println!(
        "pinned {} image(s) from {} in {}",
        manifest.files.len(),
        root.display(),
        target.display()
    );
    for file in &manifest.files {
        println!(
            "  {:<8} {}  {}",
            role_name(file.role),
            &file.sha256[..16],
            file.path
        );
    }
    Ok(Exit::Ok)
}

fn role_name(role: ImageRole) -> &'static str {
    match role {
        ImageRole::Full => "full",
        ImageRole::Bypass => "bypass",
        ImageRole::Partial => "partial",
    }
}

fn verify(project_root: &Path, name: &str, artifact: Option<&Path>) -> Result<Exit> {
    let path = manifest_path(project_root, name)?;
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::bad_input_with_hint(
                format!("no bitstream manifest {}", path.display()),
                format!("pin the images first: fracflow bitstreams import DIR --name {name}"),
            ));
        }
        Err(e) => return Err(Error::io("cannot read", &path, e)),
    };
    let manifest = PrebuiltManifest::from_yaml(&text)
        .map_err(|e| Error::bad_input(format!("{}: {e}", path.display())))?;
    let root = artifact.map_or_else(|| PathBuf::from(&manifest.artifact_root), Path::to_owned);
    let problems = fracflow_executors::images::verify_files(&manifest, &root);
    if problems.is_empty() {
        println!(
            "{}: all {} image(s) under {} verify",
            name,
            manifest.files.len(),
            root.display()
        );
        Ok(Exit::Ok)
    } else {
        for problem in &problems {
            println!("  {problem}");
        }
        println!(
            "{}: {} of {} image(s) under {} do not verify",
            name,
            problems.len(),
            manifest.files.len(),
            root.display()
        );
        Ok(Exit::CacheCorrupt)
    }
}

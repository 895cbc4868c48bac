//! The manifest that pins a set of prebuilt fRAC images (`bitstreams/NAME.yaml`): per file its path below the
//! artifact root, its role, cell and RM id for a partial, size and sha256, and the build provenance the build
//! left in `RUN`/`STAGED` (docs/frac.md §4.2, naming §4.3). Written by `fracflow bitstreams import`,
//! re-checked by `fracflow bitstreams verify`.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped when a field changes meaning; a reader refuses versions it does not know.
pub const PREBUILT_FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrebuiltManifest {
    pub version: u32,
    pub name: String,
    /// The artifact root the files were hashed under, as given at import; `verify` uses it unless told
    /// another (the hashes, not this path, identify the images).
    pub artifact_root: String,
    pub files: Vec<PrebuiltFile>,
    /// One entry per provenance file found (`RUN`, `STAGED`), keyed by its path below the root.
    #[serde(default)]
    pub provenance: BTreeMap<String, Provenance>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrebuiltFile {
    /// Relative to the artifact root, with `/` separators.
    pub path: String,
    pub role: ImageRole,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rm: Option<u8>,
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageRole {
    /// The fRAC full image (`frac/jtag/frac.bit`).
    Full,
    /// The baseline without fRAC (`bypass/frac.bit`).
    Bypass,
    /// One RM for one cell (`cXX_fYY.bin`/`.bit`).
    Partial,
}

/// What a `RUN`/`STAGED` record says. The doc lists its contents (job, payload hash, Vivado version, cpus,
/// parallelism, start, elapsed, commits) but not a fixed syntax, so every `key: value` or `key=value` line is
/// kept in `fields`, and the ones later checks compare are lifted out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vivado: Option<String>,
    /// Every key naming a commit (`commit`, `repo_commit`, `commits.libtpa`, …) with its value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub commits: BTreeMap<String, String>,
    /// Every line, as key and value; a line without a separator is kept under `line N`.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// Parse a `RUN`/`STAGED` record; never fails: what is not understood is kept as a field.
pub fn parse_provenance(text: &str) -> Provenance {
    let mut provenance = Provenance::default();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let split = line
            .find([':', '='])
            .map(|at| (line[..at].trim(), line[at + 1..].trim()));
        let Some((key, value)) = split.filter(|(key, _)| !key.is_empty()) else {
            provenance
                .fields
                .insert(format!("line {}", index + 1), line.to_owned());
            continue;
        };
        let lower = key.to_ascii_lowercase();
        let value = value.trim_matches('"').to_owned();
        if lower == "job" || lower == "job_id" {
            provenance.job = Some(value.clone());
        } else if lower.starts_with("payload") {
            provenance.payload = Some(value.clone());
        } else if lower.contains("vivado") {
            provenance.vivado = Some(value.clone());
        } else if lower.contains("commit") {
            provenance.commits.insert(key.to_owned(), value.clone());
        }
        provenance.fields.insert(key.to_owned(), value);
    }
    provenance
}

/// The cell and RM id of a partial named `cXX_fYY.bin` or `.bit` (docs/frac.md §4.3), else `None`.
pub fn parse_partial_name(file_name: &str) -> Option<(u8, u8)> {
    let stem = file_name
        .strip_suffix(".bin")
        .or_else(|| file_name.strip_suffix(".bit"))?;
    let (cell, rm) = stem.strip_prefix('c')?.split_once("_f")?;
    let (cell, rm) = (two_digit_number(cell)?, two_digit_number(rm)?);
    Some((cell, rm))
}

fn two_digit_number(text: &str) -> Option<u8> {
    if text.len() == 2 && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse().ok()
    } else {
        None
    }
}

/// The sha256 of a file, as lowercase hex, and its size.
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        size += read as u64;
        hasher.update(&buffer[..read]);
    }
    Ok((hex(&hasher.finalize()), size))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl PrebuiltManifest {
    pub fn to_yaml(&self) -> Result<String, String> {
        serde_saphyr::to_string(self).map_err(|e| e.to_string())
    }

    pub fn from_yaml(text: &str) -> Result<PrebuiltManifest, String> {
        let manifest: PrebuiltManifest = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        if manifest.version != PREBUILT_FORMAT_VERSION {
            return Err(format!(
                "manifest version {} (this fracflow reads version {PREBUILT_FORMAT_VERSION})",
                manifest.version
            ));
        }
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_names_give_cell_and_rm() {
        assert_eq!(parse_partial_name("c02_f20.bin"), Some((2, 20)));
        assert_eq!(parse_partial_name("c00_f08.bit"), Some((0, 8)));
        assert_eq!(parse_partial_name("frac.bit"), None);
        assert_eq!(parse_partial_name("c2_f20.bin"), None);
        assert_eq!(parse_partial_name("c02_f20.prm"), None);
    }

    #[test]
    fn provenance_lifts_known_keys_and_keeps_the_rest() {
        let parsed = parse_provenance(
            "job: 1234\npayload = abc123\nvivado_version: 2022.1\nrepo_commit: 243eb1b\n\
             cpus: 16\nsomething odd\n",
        );
        assert_eq!(parsed.job.as_deref(), Some("1234"));
        assert_eq!(parsed.payload.as_deref(), Some("abc123"));
        assert_eq!(parsed.vivado.as_deref(), Some("2022.1"));
        assert_eq!(
            parsed.commits.get("repo_commit").map(String::as_str),
            Some("243eb1b")
        );
        assert_eq!(parsed.fields.get("cpus").map(String::as_str), Some("16"));
        assert_eq!(
            parsed.fields.get("line 6").map(String::as_str),
            Some("something odd")
        );
    }

    #[test]
    fn the_manifest_round_trips_and_refuses_unknown_versions() {
        let manifest = PrebuiltManifest {
            version: PREBUILT_FORMAT_VERSION,
            name: "frac-example".into(),
            artifact_root: "/a/example".into(),
            files: vec![PrebuiltFile {
                path: "frac/icap/c00_f01.bin".into(),
                role: ImageRole::Partial,
                cell: Some(0),
                rm: Some(1),
                size: 3,
                sha256: "00".into(),
            }],
            provenance: BTreeMap::from([("RUN".into(), parse_provenance("job: 7"))]),
        };
        let text = manifest.to_yaml().expect("serialises");
        assert_eq!(PrebuiltManifest::from_yaml(&text), Ok(manifest));
        let future = text.replace("version: 1", "version: 99");
        let error = PrebuiltManifest::from_yaml(&future).expect_err("refused");
        assert!(error.contains("version 99"), "{error}");
    }

    #[test]
    fn sha256_of_a_known_input() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("abc");
        std::fs::write(&path, b"abc").expect("write");
        let (sum, size) = sha256_file(&path).expect("hash");
        assert_eq!(size, 3);
        assert_eq!(
            sum,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

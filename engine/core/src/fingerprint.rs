//! The canonical, versioned struct whose blake3 hash is a node's cache key, and the diff `why` prints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bump when the meaning of any field changes: every key changes with it, so old entries are never misread.
pub const FINGERPRINT_VERSION: u32 = 1;

/// Everything that affects a node's outputs. Maps are sorted, so the JSON form is canonical.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub version: u32,
    pub kind: String,
    pub kind_version: u32,
    /// Resolved kind settings (command line, environment, …).
    pub config: BTreeMap<String, serde_json::Value>,
    /// Sweep coordinates of the instance.
    pub point: BTreeMap<String, serde_json::Value>,
    /// Declared output names.
    pub outputs: Vec<String>,
    /// Input file (relative to the project root) → blake3 of its content.
    pub inputs: BTreeMap<String, String>,
    /// Dependency id → hash of its outputs (not its key: equal outputs cut rebuilds off early).
    pub upstream: BTreeMap<String, String>,
    /// Tool name → version string (compiler, Vivado, …).
    pub tools: BTreeMap<String, String>,
    /// Testbed fields that change results.
    pub testbed: BTreeMap<String, serde_json::Value>,
    /// The devices and hosts the node runs on (`device:fpga0`): where a measurement ran changes its result.
    pub placement: Vec<String>,
}

/// One field that differs between two fingerprints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// Dotted path, e.g. `config.run` or `inputs.hw/accelerators/top_k/top_k.cpp`.
    pub field: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

impl Fingerprint {
    /// The cache key: blake3 of the canonical JSON form, as hex.
    pub fn key(&self) -> String {
        // Serialising maps of JSON values cannot fail; an empty key would only ever miss the cache.
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        blake3::hash(&bytes).to_hex().to_string()
    }

    /// Fields of `self` (old) that differ in `new`, sorted by field path.
    pub fn diff(&self, new: &Fingerprint) -> Vec<FieldChange> {
        let old = flatten(self);
        let new = flatten(new);
        let mut changes = Vec::new();
        for (field, old_value) in &old {
            let new_value = new.get(field);
            if new_value != Some(old_value) {
                changes.push(FieldChange {
                    field: field.clone(),
                    old: Some(old_value.clone()),
                    new: new_value.cloned(),
                });
            }
        }
        for (field, new_value) in &new {
            if !old.contains_key(field) {
                changes.push(FieldChange {
                    field: field.clone(),
                    old: None,
                    new: Some(new_value.clone()),
                });
            }
        }
        changes.sort_by(|a, b| a.field.cmp(&b.field));
        changes
    }
}

fn flatten(fingerprint: &Fingerprint) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(value) = serde_json::to_value(fingerprint) {
        flatten_into(&mut out, String::new(), &value, 0);
    }
    out
}

/// Flattens the top two levels into dotted paths; deeper values are compared as JSON text.
fn flatten_into(
    out: &mut BTreeMap<String, String>,
    prefix: String,
    value: &serde_json::Value,
    depth: usize,
) {
    match value {
        serde_json::Value::Object(map) if depth < 2 => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten_into(out, path, inner, depth + 1);
            }
        }
        serde_json::Value::String(text) => {
            out.insert(prefix, text.clone());
        }
        other => {
            out.insert(prefix, other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Fingerprint {
        Fingerprint {
            version: FINGERPRINT_VERSION,
            kind: "command".into(),
            kind_version: 1,
            config: BTreeMap::from([("run".into(), serde_json::json!("echo hi"))]),
            point: BTreeMap::new(),
            outputs: vec!["out.txt".into()],
            inputs: BTreeMap::from([("a.txt".into(), "aa".into())]),
            upstream: BTreeMap::new(),
            tools: BTreeMap::new(),
            testbed: BTreeMap::new(),
            placement: Vec::new(),
        }
    }

    #[test]
    fn key_changes_with_any_field_and_diff_names_it() {
        let old = sample();
        let mut new = sample();
        assert_eq!(old.key(), new.key());
        new.inputs.insert("a.txt".into(), "bb".into());
        new.config
            .insert("env".into(), serde_json::json!({"X": "1"}));
        assert_ne!(old.key(), new.key());
        let fields: Vec<String> = old.diff(&new).into_iter().map(|c| c.field).collect();
        assert_eq!(fields, ["config.env", "inputs.a.txt"]);
    }
}

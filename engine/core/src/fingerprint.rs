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
        blake3::hash(self.canonical_json().as_bytes())
            .to_hex()
            .to_string()
    }

    /// The canonical JSON form: the fields in declaration order, maps sorted by key, no spaces — the bytes
    /// `serde_json` writes for this struct, so keys did not change when this replaced it. Written by hand
    /// because a serialiser returns a `Result`, and a key made of whatever a failure left behind (empty
    /// bytes) would give unrelated nodes one key; every piece here is a string, a number or a JSON value,
    /// whose text cannot fail to be written.
    fn canonical_json(&self) -> String {
        fn string(text: &str) -> String {
            serde_json::Value::from(text).to_string()
        }
        fn object<'a, V: 'a>(
            entries: impl IntoIterator<Item = (&'a String, &'a V)>,
            value: impl Fn(&V) -> String,
        ) -> String {
            let fields: Vec<String> = entries
                .into_iter()
                .map(|(key, inner)| format!("{}:{}", string(key), value(inner)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        fn array(items: &[String]) -> String {
            let items: Vec<String> = items.iter().map(|item| string(item)).collect();
            format!("[{}]", items.join(","))
        }
        let json = |value: &serde_json::Value| value.to_string();
        let text = |value: &String| string(value);
        let fields = [
            ("version", self.version.to_string()),
            ("kind", string(&self.kind)),
            ("kind_version", self.kind_version.to_string()),
            ("config", object(&self.config, json)),
            ("point", object(&self.point, json)),
            ("outputs", array(&self.outputs)),
            ("inputs", object(&self.inputs, text)),
            ("upstream", object(&self.upstream, text)),
            ("tools", object(&self.tools, text)),
            ("testbed", object(&self.testbed, json)),
            ("placement", array(&self.placement)),
        ];
        let fields: Vec<String> = fields
            .iter()
            .map(|(name, value)| format!("{}:{value}", string(name)))
            .collect();
        format!("{{{}}}", fields.join(","))
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
    use serde_json::Value;
    fn object<V: Clone + Into<Value>>(map: &BTreeMap<String, V>) -> Value {
        Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), value.clone().into()))
                .collect(),
        )
    }
    // Built field by field rather than through `serde_json::to_value`, which could only fail by leaving
    // `why` with an empty diff.
    let fields = [
        ("version", Value::from(fingerprint.version)),
        ("kind", Value::from(fingerprint.kind.clone())),
        ("kind_version", Value::from(fingerprint.kind_version)),
        ("config", object(&fingerprint.config)),
        ("point", object(&fingerprint.point)),
        ("outputs", Value::from(fingerprint.outputs.clone())),
        ("inputs", object(&fingerprint.inputs)),
        ("upstream", object(&fingerprint.upstream)),
        ("tools", object(&fingerprint.tools)),
        ("testbed", object(&fingerprint.testbed)),
        ("placement", Value::from(fingerprint.placement.clone())),
    ];
    let value = Value::Object(
        fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
    );
    let mut out = BTreeMap::new();
    flatten_into(&mut out, String::new(), &value, 0);
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

    /// Keys must not change with the encoding: entries in existing caches stay hits.
    #[test]
    fn the_canonical_form_is_what_serde_json_writes() {
        let mut fingerprint = sample();
        fingerprint.config.insert(
            "nested".into(),
            serde_json::json!({"z": [1, 2.5, null], "a": {"q\"uote": "tab\there", "ünï": true}}),
        );
        fingerprint.point.insert("n".into(), serde_json::json!(-4));
        fingerprint.upstream.insert("dep\\x".into(), "ff".into());
        fingerprint.tools.insert("g++".into(), "13.2".into());
        fingerprint
            .testbed
            .insert("client_threads".into(), serde_json::json!(8));
        fingerprint.placement.push("device:fpga0".into());
        for fingerprint in [sample(), fingerprint] {
            let serde = serde_json::to_string(&fingerprint).expect("serialisable");
            assert_eq!(fingerprint.canonical_json(), serde);
            assert_eq!(
                fingerprint.key(),
                blake3::hash(serde.as_bytes()).to_hex().to_string()
            );
            let mut through_serde = BTreeMap::new();
            let value = serde_json::to_value(&fingerprint).expect("serialisable");
            flatten_into(&mut through_serde, String::new(), &value, 0);
            assert_eq!(flatten(&fingerprint), through_serde);
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

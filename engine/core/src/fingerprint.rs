//! The canonical, versioned struct whose blake3 hash is a node's cache key, and the diff `why` prints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use fracflow_record::Digest;

use crate::graph::{Graph, NodeIndex};
use crate::spec::Settings;

/// Bump when the meaning of any field changes: every key changes with it, so old entries are never misread.
pub const FINGERPRINT_VERSION: u32 = 1;

/// Everything that affects a node's outputs. Maps are sorted, so the JSON form is canonical.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub version: u32,
    pub kind: String,
    pub kind_version: u32,
    /// Resolved kind settings (command line, environment, …).
    pub config: Settings,
    /// Sweep coordinates of the instance.
    pub point: Settings,
    /// Declared output names.
    pub outputs: Vec<String>,
    /// Input file (relative to the project root) → blake3 of its content.
    pub inputs: BTreeMap<String, String>,
    /// Dependency id → hash of its outputs (not its key: equal outputs cut rebuilds off early).
    pub upstream: BTreeMap<String, Digest>,
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

/// A fingerprint's fields where they already live: the node's spec, its kind's facts, the run's testbed. A
/// node is keyed from this, and a node found in the cache needs nothing more, so its settings, sweep point and
/// outputs are never copied; [`FingerprintRef::to_fingerprint`] makes the [`Fingerprint`] a new entry stores.
/// Copying them into a `Fingerprint` for every node, then dropping it, was 5 % of a no-op's instructions.
#[derive(Debug, Clone, Copy)]
pub struct FingerprintRef<'a> {
    pub version: u32,
    pub kind: &'a str,
    pub kind_version: u32,
    pub config: &'a Settings,
    pub point: &'a Settings,
    pub outputs: &'a [String],
    pub inputs: &'a BTreeMap<String, String>,
    pub upstream: UpstreamRef<'a>,
    pub tools: &'a BTreeMap<String, String>,
    pub testbed: &'a BTreeMap<String, serde_json::Value>,
    pub placement: &'a [String],
}

/// A fingerprint's `upstream`: each dependency's id and what it contributed, in id order.
#[derive(Debug, Clone, Copy)]
pub enum UpstreamRef<'a> {
    /// An owned fingerprint's map.
    Map(&'a BTreeMap<String, Digest>),
    /// Dependencies of a graph by index, sorted by id: a node over a 100 000-point sweep kept a map of as many
    /// copied ids while it was keyed (11 MB).
    Nodes {
        graph: &'a Graph,
        entries: &'a [(NodeIndex, Digest)],
    },
}

impl<'a> UpstreamRef<'a> {
    pub fn iter(self) -> impl Iterator<Item = (&'a str, &'a Digest)> {
        let (map, nodes) = match self {
            UpstreamRef::Map(map) => (Some(map), None),
            UpstreamRef::Nodes { graph, entries } => (None, Some((graph, entries))),
        };
        let from_map = map
            .into_iter()
            .flatten()
            .map(|(id, hash)| (id.as_str(), hash));
        let from_nodes = nodes.into_iter().flat_map(|(graph, entries)| {
            entries
                .iter()
                .map(move |(index, hash)| (graph.spec(*index).id.as_str(), hash))
        });
        from_map.chain(from_nodes)
    }
}

/// Puts dependencies' contributions in the order a fingerprint's `upstream` lists them (by id), each once.
pub(crate) fn sort_upstream(graph: &Graph, entries: &mut Vec<(NodeIndex, Digest)>) {
    entries.sort_unstable_by(|(a, _), (b, _)| graph.spec(*a).id.cmp(&graph.spec(*b).id));
    entries.dedup_by_key(|(dependency, _)| *dependency);
}

impl FingerprintRef<'_> {
    /// The cache key: blake3 of the canonical JSON form, hashed as it is written (see [`CanonicalJson`]).
    pub fn key(&self) -> Digest {
        let mut out = CanonicalJson {
            text: String::with_capacity(256),
            hasher: Some(blake3::Hasher::new()),
        };
        self.write(&mut out);
        match out.hasher {
            Some(mut hasher) => hasher.update(out.text.as_bytes()).finalize().into(),
            None => Digest::of(out.text.as_bytes()),
        }
    }

    pub fn to_fingerprint(&self) -> Fingerprint {
        Fingerprint {
            version: self.version,
            kind: self.kind.to_owned(),
            kind_version: self.kind_version,
            config: self.config.clone(),
            point: self.point.clone(),
            outputs: self.outputs.to_vec(),
            inputs: self.inputs.clone(),
            upstream: self
                .upstream
                .iter()
                .map(|(id, hash)| (id.to_owned(), *hash))
                .collect(),
            tools: self.tools.clone(),
            testbed: self.testbed.clone(),
            placement: self.placement.to_vec(),
        }
    }

    /// The canonical JSON form whole, which [`FingerprintRef::key`] hashes.
    #[cfg(test)]
    fn canonical_json(&self) -> String {
        let mut out = CanonicalJson {
            text: String::with_capacity(256),
            hasher: None,
        };
        self.write(&mut out);
        out.text
    }

    /// Writes the canonical JSON form: the fields in declaration order, maps sorted by key, no spaces — the
    /// bytes `serde_json` writes for [`Fingerprint`], so keys did not change when this replaced it. Written by
    /// hand because a serialiser returns a `Result`, and a key made of whatever a failure left behind (empty
    /// bytes) would give unrelated nodes one key; every piece here is a string, a number or a JSON value,
    /// whose text cannot fail to be written. Into one buffer: every node of a run is keyed, and building a
    /// string per field and per map entry made keying most of a no-op's work.
    fn write(&self, out: &mut CanonicalJson) {
        out.raw("{\"version\":");
        out.display(self.version);
        out.raw(",\"kind\":");
        out.string(self.kind);
        out.raw(",\"kind_version\":");
        out.display(self.kind_version);
        out.raw(",\"config\":");
        out.object(self.config, |out, value| out.value(value));
        out.raw(",\"point\":");
        out.object(self.point, |out, value| out.value(value));
        out.raw(",\"outputs\":");
        out.array(self.outputs);
        out.raw(",\"inputs\":");
        out.object(self.inputs, |out, text| out.string(text));
        out.raw(",\"upstream\":");
        // Hex digits need no escaping.
        out.object(self.upstream.iter(), |out, hash| {
            out.raw("\"");
            out.raw(&hash.to_hex());
            out.raw("\"");
        });
        out.raw(",\"tools\":");
        out.object(self.tools, |out, text| out.string(text));
        out.raw(",\"testbed\":");
        out.object(self.testbed, |out, value| out.value(value));
        out.raw(",\"placement\":");
        out.array(self.placement);
        out.raw("}");
    }
}

impl Fingerprint {
    /// The cache key: blake3 of the canonical JSON form.
    pub fn key(&self) -> Digest {
        self.as_ref().key()
    }

    pub fn as_ref(&self) -> FingerprintRef<'_> {
        FingerprintRef {
            version: self.version,
            kind: &self.kind,
            kind_version: self.kind_version,
            config: &self.config,
            point: &self.point,
            outputs: &self.outputs,
            inputs: &self.inputs,
            upstream: UpstreamRef::Map(&self.upstream),
            tools: &self.tools,
            testbed: &self.testbed,
            placement: &self.placement,
        }
    }

    #[cfg(test)]
    fn canonical_json(&self) -> String {
        self.as_ref().canonical_json()
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

/// The canonical JSON text being written. When it is being hashed, text past [`SPILL_BYTES`] goes to the hasher
/// between map entries: a node over a 100 000-point sweep has as many upstream entries, and its whole text (8 MB)
/// was held at once, at the moment a run holds the most.
struct CanonicalJson {
    text: String,
    hasher: Option<blake3::Hasher>,
}

/// How much text a hashed [`CanonicalJson`] holds before handing it to the hasher.
const SPILL_BYTES: usize = 64 << 10;

impl CanonicalJson {
    fn raw(&mut self, text: &str) {
        self.text.push_str(text);
    }

    /// A number, or a JSON value by its `Display` (serde_json's compact form, the bytes its serialiser writes).
    fn display(&mut self, value: impl std::fmt::Display) {
        use std::fmt::Write;
        // Writing into a `String` cannot fail, and neither can a JSON value's text (its map keys are strings).
        let _ = write!(self.text, "{value}");
    }

    /// A JSON value: a string or a whole number written here, anything else by its `Display`. Every node's
    /// settings and sweep point are mostly these, and going through the formatter for each was a twentieth of
    /// keying a node.
    fn value(&mut self, value: &serde_json::Value) {
        match value {
            serde_json::Value::String(text) => self.string(text),
            serde_json::Value::Number(number) => match (number.as_u64(), number.as_i64()) {
                (Some(whole), _) => self.text.push_str(itoa::Buffer::new().format(whole)),
                (None, Some(whole)) => self.text.push_str(itoa::Buffer::new().format(whole)),
                (None, None) => self.display(number),
            },
            other => self.display(other),
        }
    }

    /// A JSON string, escaped as serde_json escapes: `"`, `\\` and the control characters below U+0020, the
    /// common ones by their short forms, the rest as `\u00XX` in lower-case hex; everything else as is.
    fn string(&mut self, text: &str) {
        self.text.push('"');
        let mut rest = text;
        // Bytes, not chars: everything escaped is ASCII, and no byte of a multi-byte character is below 0x80.
        while let Some(at) = rest
            .bytes()
            .position(|b| b < b' ' || b == b'"' || b == b'\\')
        {
            self.text.push_str(&rest[..at]);
            let byte = rest.as_bytes()[at];
            match byte {
                b'"' => self.text.push_str("\\\""),
                b'\\' => self.text.push_str("\\\\"),
                b'\n' => self.text.push_str("\\n"),
                b'\r' => self.text.push_str("\\r"),
                b'\t' => self.text.push_str("\\t"),
                0x08 => self.text.push_str("\\b"),
                0x0c => self.text.push_str("\\f"),
                control => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    self.text.push_str("\\u00");
                    self.text.push(char::from(HEX[usize::from(control >> 4)]));
                    self.text.push(char::from(HEX[usize::from(control & 0xf)]));
                }
            }
            rest = &rest[at + 1..];
        }
        self.text.push_str(rest);
        self.text.push('"');
    }

    /// `entries` sorted by key, as both map types of [`Fingerprint`] iterate.
    fn object<'a, K: AsRef<str>, V: 'a>(
        &mut self,
        entries: impl IntoIterator<Item = (K, &'a V)>,
        value: impl Fn(&mut Self, &V),
    ) {
        self.text.push('{');
        for (position, (key, inner)) in entries.into_iter().enumerate() {
            if position > 0 {
                self.text.push(',');
            }
            self.string(key.as_ref());
            self.text.push(':');
            value(self, inner);
            if self.text.len() >= SPILL_BYTES
                && let Some(hasher) = &mut self.hasher
            {
                hasher.update(self.text.as_bytes());
                self.text.clear();
            }
        }
        self.text.push('}');
    }

    fn array(&mut self, items: &[String]) {
        self.text.push('[');
        for (position, item) in items.iter().enumerate() {
            if position > 0 {
                self.text.push(',');
            }
            self.string(item);
        }
        self.text.push(']');
    }
}

fn flatten(fingerprint: &Fingerprint) -> BTreeMap<String, String> {
    use serde_json::Value;
    fn object<'a, V: Clone + Into<Value> + 'a>(
        entries: impl IntoIterator<Item = (&'a String, &'a V)>,
    ) -> Value {
        Value::Object(
            entries
                .into_iter()
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
        (
            "upstream",
            Value::Object(
                (fingerprint.upstream.iter())
                    .map(|(id, hash)| (id.clone(), Value::from(hash.to_string())))
                    .collect(),
            ),
        ),
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
            config: crate::Settings::from([("run".into(), serde_json::json!("echo hi"))]),
            point: crate::Settings::new(),
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
        fingerprint
            .point
            .insert("big".into(), serde_json::json!(u64::MAX));
        fingerprint
            .point
            .insert("low".into(), serde_json::json!(i64::MIN));
        fingerprint.point.insert("x".into(), serde_json::json!(2.5));
        fingerprint
            .point
            .insert("zero".into(), serde_json::json!(0));
        fingerprint
            .upstream
            .insert("dep\\x".into(), Digest::of(b"ff"));
        fingerprint.tools.insert("g++".into(), "13.2".into());
        fingerprint
            .testbed
            .insert("client_threads".into(), serde_json::json!(8));
        fingerprint.placement.push("device:fpga0".into());
        // Every character serde_json may escape, in a key, a value, a JSON value and an array.
        let every_ascii: String = (0u8..=0x7f).map(char::from).chain("é€😀".chars()).collect();
        fingerprint
            .inputs
            .insert(every_ascii.clone(), every_ascii.clone());
        fingerprint.config.insert(
            every_ascii.clone(),
            serde_json::json!([every_ascii, 1e300, -0.5, u64::MAX]),
        );
        fingerprint
            .config
            .insert("text".into(), serde_json::json!(every_ascii));
        fingerprint.outputs.push(every_ascii);
        for fingerprint in [sample(), fingerprint] {
            let serde = serde_json::to_string(&fingerprint).expect("serialisable");
            assert_eq!(fingerprint.canonical_json(), serde);
            assert_eq!(fingerprint.key(), blake3::hash(serde.as_bytes()).into());
            let mut through_serde = BTreeMap::new();
            let value = serde_json::to_value(&fingerprint).expect("serialisable");
            flatten_into(&mut through_serde, String::new(), &value, 0);
            assert_eq!(flatten(&fingerprint), through_serde);
        }
    }

    /// A fingerprint whose text passes the hasher's spill point several times (a node over a large sweep) hashes
    /// to the same key as its whole text: nothing is lost or hashed twice between spills.
    #[test]
    fn a_key_hashed_in_pieces_is_the_key_of_the_whole_text() {
        let mut fingerprint = sample();
        fingerprint.upstream = (0..5_000u32)
            .map(|i| (format!("p[a={i}]"), Digest::of(&i.to_le_bytes())))
            .collect();
        let text = fingerprint.canonical_json();
        assert!(text.len() > 4 * SPILL_BYTES, "{} bytes", text.len());
        assert_eq!(fingerprint.key(), Digest::of(text.as_bytes()));
        assert_eq!(
            text,
            serde_json::to_string(&fingerprint).expect("serialisable")
        );
    }

    /// A node keyed from its dependencies in the graph has the key of the owned fingerprint naming them, in
    /// whatever order the graph holds them (here numeric, where ids sort as text).
    #[test]
    fn upstream_from_the_graph_keys_as_the_map_of_its_ids() {
        let ids: Vec<String> = (0..25).map(|i| format!("p[a={i}]")).collect();
        let deps: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut specs: Vec<crate::NodeSpec> = deps
            .iter()
            .map(|id| crate::NodeSpec::for_test(id, &[]))
            .collect();
        specs.push(crate::NodeSpec::for_test("agg", &deps));
        let graph = Graph::build(specs).expect("a DAG");
        let agg = graph.index("agg").expect("agg");
        let contribution = |index: NodeIndex| Digest::of(graph.spec(index).id.as_bytes());
        let mut entries: Vec<(NodeIndex, Digest)> = graph
            .dependencies(agg)
            .chain(graph.dependencies(agg).take(3))
            .map(|index| (index, contribution(index)))
            .collect();
        sort_upstream(&graph, &mut entries);
        let mut owned = sample();
        owned.upstream = ids
            .iter()
            .map(|id| (id.clone(), Digest::of(id.as_bytes())))
            .collect();
        let borrowed = FingerprintRef {
            upstream: UpstreamRef::Nodes {
                graph: &graph,
                entries: &entries,
            },
            ..owned.as_ref()
        };
        assert_eq!(borrowed.key(), owned.key());
        assert_eq!(borrowed.to_fingerprint(), owned);
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

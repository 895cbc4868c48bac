//! The serde types that define the pipeline format. The loader parses with them and `json_schema()` is
//! generated from them, so the schema cannot drift from what is accepted.

use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, json_schema};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::de::{OrderedMap, RawNode, Sp};
use crate::tree::Node;

/// A fracflow pipeline file. Without `pipeline:` the file is a node set, usable from other files via `uses:`.
// Some fields are only checked (and documented in the schema); the loader reads them from the tree.
#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "fracflow pipeline")]
pub(crate) struct Document {
    /// The pipeline's name. Required in a pipeline file; absent in a node set.
    pub pipeline: Option<Sp<String>>,
    /// What the pipeline produces, for `fracflow list`.
    pub description: Option<String>,
    /// A file (relative to this one) laid underneath this document: mappings merge deeply, this file wins,
    /// and an empty mapping here replaces the base's.
    pub base: Option<Sp<String>>,
    /// Node sets (files relative to this one) whose `nodes:` and `params:` (as defaults) are imported.
    #[serde(default)]
    pub uses: Vec<Sp<String>>,
    /// Named constants, usable as `{name}` in templates. A string whose whole text (after substitution) is an
    /// integer expression such as `"{X} - 64"` becomes that integer.
    #[serde(default)]
    pub params: OrderedMap<RawNode>,
    /// Swept keys and their values; the pipeline runs over their cartesian product, first key outermost.
    #[serde(default)]
    pub sweep: OrderedMap<Sp<Vec<Sp<Scalar>>>>,
    /// Sweep points to leave out: a point matching every key of a rule is excluded.
    #[serde(default)]
    pub exclude: Vec<Sp<OrderedMap<Sp<OneOrMany>>>>,
    /// Named overlays (e.g. `smoke`) deep-merged over this document when selected.
    #[serde(default)]
    pub variants: OrderedMap<Sp<Overlay>>,
    /// Named targets and the node names that make them (a swept node means all its instances).
    #[serde(default)]
    pub targets: OrderedMap<Sp<Vec<Sp<String>>>>,
    /// The nodes, by name (`[A-Za-z0-9_.-]+`).
    #[serde(default)]
    pub nodes: OrderedMap<NodeBody>,
}

/// A variant: any part of a pipeline document, deep-merged over it when the variant is selected.
#[allow(dead_code)] // checked and documented; applied as a tree
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Overlay {
    pub description: Option<String>,
    #[serde(default)]
    pub uses: Vec<Sp<String>>,
    #[serde(default)]
    pub params: OrderedMap<RawNode>,
    #[serde(default)]
    pub sweep: OrderedMap<Sp<Vec<Sp<Scalar>>>>,
    #[serde(default)]
    pub exclude: Vec<Sp<OrderedMap<Sp<OneOrMany>>>>,
    #[serde(default)]
    pub targets: OrderedMap<Sp<Vec<Sp<String>>>>,
    /// Partial nodes: only the keys to change.
    #[serde(default)]
    pub nodes: OrderedMap<PartialNode>,
}

/// The keys every node has, whatever its kind.
#[allow(dead_code)] // `kind` and `description` are checked here, read from the tree
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeCommon {
    /// What the node does; selects its kind-specific keys and its executor.
    pub kind: Sp<String>,
    pub description: Option<String>,
    /// What this node is expanded over: one instance per combination of values. A list names keys of the
    /// pipeline's `sweep:`; a mapping may also give the node axes of its own: `KEY: sweep` for a sweep key,
    /// `KEY: [V1, V2]` for a node-local axis.
    #[serde(default)]
    pub foreach: Foreach,
    /// Node names whose outputs this node reads. On a swept node, each instance depends on the instances
    /// of the dependency that agree with it on their shared sweep keys.
    #[serde(default)]
    pub deps: Vec<Sp<String>>,
    /// Files (globs allowed) relative to the project root; their content enters the node's key.
    #[serde(default)]
    pub inputs: Vec<Sp<String>>,
    /// Files the node must produce, relative to its output directory.
    #[serde(default)]
    pub outputs: Vec<Sp<String>>,
    /// `device:NAME`, `host:NAME` or `cores:N`.
    #[serde(default)]
    pub resources: Vec<Sp<String>>,
    /// Extra attempts after a transient failure.
    #[serde(default)]
    pub retries: u32,
    pub timeout: Option<Sp<DurationValue>>,
    /// Expected duration, for `plan` before any run has been recorded.
    pub estimate: Option<Sp<DurationValue>>,
    /// Node-local params, usable as `{name}` in this node's templates.
    #[serde(default)]
    pub params: OrderedMap<RawNode>,
}

/// `foreach`: a list of sweep keys, or a mapping of axes (`KEY: sweep` or `KEY: [V1, V2]`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Foreach {
    /// `foreach: [m, n]`: keys of the pipeline's sweep.
    Keys(Vec<Sp<String>>),
    /// `foreach: {m: sweep, unit: [top_k, log]}`, in the order written.
    Axes(OrderedMap<Sp<AxisValues>>),
}

impl Default for Foreach {
    fn default() -> Foreach {
        Foreach::Keys(Vec::new())
    }
}

impl<'de> Deserialize<'de> for Foreach {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Foreach, D::Error> {
        struct ForeachVisitor;
        impl<'de> Visitor<'de> for ForeachVisitor {
            type Value = Foreach;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of sweep keys or a mapping of axes")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Foreach, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = seq.next_element()? {
                    keys.push(key);
                }
                Ok(Foreach::Keys(keys))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Foreach, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Foreach::Axes(OrderedMap(entries)))
            }
        }
        deserializer.deserialize_any(ForeachVisitor)
    }
}

inline_schema!(Foreach, "Foreach", |generator| {
    let scalar = generator.subschema_for::<Scalar>();
    json_schema!({
        "anyOf": [
            {
                "type": "array",
                "items": { "type": "string" },
                "description": "Keys of the pipeline's `sweep:`."
            },
            {
                "type": "object",
                "description": "Axes in the order of the instance ids: `KEY: sweep` for a key of the pipeline's `sweep:`, `KEY: [V1, V2]` for an axis of this node's own.",
                "additionalProperties": {
                    "anyOf": [
                        { "const": "sweep", "description": "The pipeline's sweep key of this name." },
                        {
                            "type": "array",
                            "items": scalar,
                            "minItems": 1,
                            "description": "A node-local axis and its values, in order."
                        }
                    ]
                }
            }
        ]
    })
});

/// The value of one `foreach` axis written as a mapping entry: `sweep`, or the axis's own values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AxisValues {
    /// A word: `sweep` (anything else is reported where the node is checked).
    Word(String),
    Values(Vec<Sp<Scalar>>),
}

impl<'de> Deserialize<'de> for AxisValues {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<AxisValues, D::Error> {
        struct AxisVisitor;
        impl<'de> Visitor<'de> for AxisVisitor {
            type Value = AxisValues;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`sweep` or a list of values")
            }
            fn visit_str<E>(self, s: &str) -> Result<AxisValues, E> {
                Ok(AxisValues::Word(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AxisValues, A::Error> {
                let mut values = Vec::new();
                while let Some(value) = seq.next_element()? {
                    values.push(value);
                }
                Ok(AxisValues::Values(values))
            }
        }
        deserializer.deserialize_any(AxisVisitor)
    }
}

/// A node inside a variant: any subset of a node's keys.
#[derive(Debug, Clone)]
pub(crate) struct PartialNode;

impl<'de> Deserialize<'de> for PartialNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PartialNode, D::Error> {
        let node = Node::deserialize(deserializer)?;
        if node.is_map() {
            Ok(PartialNode)
        } else {
            Err(de::Error::invalid_type(
                de::Unexpected::Other(node.describe()),
                &"a mapping of node keys",
            ))
        }
    }
}

inline_schema!(PartialNode, "PartialNode", |_| {
    json_schema!({ "type": "object", "description": "Keys of a node to change in this variant." })
});

/// A sweep value (and a value in `exclude` rules): a string, integer, number or boolean.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Scalar::Bool(b) => serde_json::Value::Bool(*b),
            Scalar::Int(i) => serde_json::Value::from(*i),
            Scalar::Float(x) => {
                serde_json::Number::from_f64(*x).map_or(serde_json::Value::Null, Into::into)
            }
            Scalar::Str(s) => serde_json::Value::String(s.clone()),
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(_) => write!(f, "{}", self.to_json()),
            Scalar::Str(s) => f.write_str(s),
        }
    }
}

struct ScalarVisitor;

impl Visitor<'_> for ScalarVisitor {
    type Value = Scalar;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, number or boolean")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Scalar, E> {
        Ok(Scalar::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Scalar, E> {
        Ok(Scalar::Int(i))
    }
    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Scalar, E> {
        i64::try_from(u)
            .map(Scalar::Int)
            .map_err(|_| E::custom("integer too large"))
    }
    fn visit_f64<E>(self, x: f64) -> Result<Scalar, E> {
        Ok(Scalar::Float(x))
    }
    fn visit_str<E>(self, s: &str) -> Result<Scalar, E> {
        Ok(Scalar::Str(s.to_owned()))
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scalar, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

impl Serialize for Scalar {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

inline_schema!(Scalar, "Scalar", |_| {
    json_schema!({ "type": ["string", "number", "boolean"] })
});

/// One value or a list of values (in `exclude` rules).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OneOrMany {
    One(Scalar),
    Many(Vec<Scalar>),
}

impl OneOrMany {
    pub fn values(&self) -> &[Scalar] {
        match self {
            OneOrMany::One(one) => std::slice::from_ref(one),
            OneOrMany::Many(many) => many,
        }
    }
}

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<OneOrMany, D::Error> {
        struct OneOrManyVisitor;
        impl<'de> Visitor<'de> for OneOrManyVisitor {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or a list of values")
            }
            fn visit_bool<E>(self, b: bool) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(Scalar::Bool(b)))
            }
            fn visit_i64<E>(self, i: i64) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(Scalar::Int(i)))
            }
            fn visit_u64<E: de::Error>(self, u: u64) -> Result<OneOrMany, E> {
                ScalarVisitor.visit_u64(u).map(OneOrMany::One)
            }
            fn visit_f64<E>(self, x: f64) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(Scalar::Float(x)))
            }
            fn visit_str<E>(self, s: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(Scalar::Str(s.to_owned())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                let mut values = Vec::new();
                while let Some(value) = seq.next_element()? {
                    values.push(value);
                }
                Ok(OneOrMany::Many(values))
            }
        }
        deserializer.deserialize_any(OneOrManyVisitor)
    }
}

inline_schema!(OneOrMany, "ScalarOrList", |generator| {
    let scalar = generator.subschema_for::<Scalar>();
    json_schema!({ "anyOf": [scalar, { "type": "array", "items": scalar }] })
});

/// `30s`, `5m`, `2h`, `250ms`, or a number of seconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DurationValue {
    Seconds(f64),
    Text(String),
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<DurationValue, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = DurationValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as `30s`, `5m`, `2h`, `250ms` or a number of seconds")
            }
            fn visit_i64<E: de::Error>(self, i: i64) -> Result<DurationValue, E> {
                if i < 0 {
                    return Err(E::invalid_value(de::Unexpected::Signed(i), &self));
                }
                Ok(DurationValue::Seconds(i as f64))
            }
            fn visit_u64<E>(self, u: u64) -> Result<DurationValue, E> {
                Ok(DurationValue::Seconds(u as f64))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<DurationValue, E> {
                if !(x.is_finite() && x >= 0.0) {
                    return Err(E::invalid_value(de::Unexpected::Float(x), &self));
                }
                Ok(DurationValue::Seconds(x))
            }
            fn visit_str<E>(self, s: &str) -> Result<DurationValue, E> {
                Ok(DurationValue::Text(s.to_owned()))
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

inline_schema!(DurationValue, "Duration", |_| {
    json_schema!({
        "description": "A duration: `30s`, `5m`, `2h`, `250ms`, or a number of seconds.",
        "anyOf": [
            { "type": "number", "minimum": 0 },
            { "type": "string" }
        ]
    })
});

/// Parses `30s`, `5m`, `2h`, `250ms`, `1.5s` or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => f64::NAN,
    };
    let value: Option<f64> = number.parse().ok();
    match value {
        Some(value) if scale.is_finite() && value.is_finite() => {
            Duration::try_from_secs_f64(value * scale)
                .map_err(|_| format!("duration `{text}` is out of range"))
        }
        _ => Err(format!(
            "`{text}` is not a duration; write e.g. `30s`, `5m`, `2h`, `250ms` or a number of seconds"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("12"), Ok(Duration::from_secs(12)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}

/// The keys every node has (from [`NodeCommon`]); the others are its kind's.
pub(crate) fn common_fields() -> &'static [&'static str] {
    fracflow_core::suggest::field_names::<NodeCommon>()
}

/// A node's body as written: checked by [`NodeCommon`] here and by its kind's `check` once resolved. Its
/// schema is the common keys; `json_schema` joins each kind's keys to them.
#[derive(Debug, Clone)]
pub(crate) struct NodeBody(pub Node);

impl<'de> Deserialize<'de> for NodeBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NodeBody, D::Error> {
        Node::deserialize(deserializer).map(NodeBody)
    }
}

impl JsonSchema for NodeBody {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Node".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        NodeCommon::json_schema(generator)
    }
}

//! Node kinds: each kind is one struct of its own keys (deny unknown keys, typed values) and one line in
//! [`KINDS`]. The struct both validates a node and, serialized after template resolution, is the node's
//! `config`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, DeserializeOwned, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::de::{DeError, OrderedMap, deserialize_all, struct_fields};
use crate::doc::{NodeCommon, Text};
use crate::tree::Node;

/// Every node kind the loader knows. To add one: write its struct below and add its line here.
pub(crate) const KINDS: &[KindDef] = &[
    KindDef::of::<CommandKind>("command"),
    KindDef::of::<GroupKind>("group"),
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
    /// Values the node reports, by name.
    #[serde(default, skip_serializing_if = "OrderedMap::is_empty")]
    pub metrics: OrderedMap<Metric>,
    /// Exit codes that count as success (default: `[0]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_codes: Option<Vec<i32>>,
}

/// `group`: does nothing itself; it gathers its `deps` (e.g. to name them in a target).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupKind {}

/// How a metric is read.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Metric {
    /// A regex over the node's standard output; its first capture group is the value.
    Regex(String),
    /// A path (e.g. `$.latency.p50`) into the JSON the node writes to standard output.
    Json(String),
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

impl JsonSchema for RunSpec {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Run".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let word = generator.subschema_for::<Text>();
        json_schema!({
            "anyOf": [
                { "type": "string", "description": "Run by `sh -c`." },
                { "type": "array", "items": word, "minItems": 1, "description": "argv words." }
            ]
        })
    }
}

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
}

impl KindDef {
    const fn of<T: DeserializeOwned + Serialize + JsonSchema>(name: &'static str) -> KindDef {
        KindDef {
            name,
            fields: struct_fields::<T>,
            config: config_of::<T>,
            schema: T::json_schema,
        }
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

//! A serde `Deserializer` over position-carrying trees, so the typed structs that define the format (and its
//! JSON schema) report every error at the YAML that caused it.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess,
    SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde::{Deserialize, Serialize, Serializer};

use crate::tree::{Loc, Node, Val};

/// Why a tree does not fit a type, and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeError {
    pub kind: DeErrorKind,
    pub loc: Option<Loc>,
    /// Field path from the innermost outwards (reversed when shown).
    path: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DeErrorKind {
    Custom(String),
    UnknownField {
        field: String,
        expected: &'static [&'static str],
    },
    UnknownVariant {
        variant: String,
        expected: &'static [&'static str],
    },
    MissingField(&'static str),
    InvalidType {
        found: String,
        expected: String,
    },
    InvalidValue {
        found: String,
        expected: String,
    },
}

impl DeError {
    fn new(kind: DeErrorKind) -> DeError {
        DeError {
            kind,
            loc: None,
            path: Vec::new(),
        }
    }

    /// Sets the position if the error has none yet (the innermost node wins).
    pub fn at(mut self, loc: Loc) -> DeError {
        if self.loc.is_none() && loc.is_known() {
            self.loc = Some(loc);
        }
        self
    }

    fn in_field(mut self, name: &str) -> DeError {
        self.path.push(name.to_owned());
        self
    }

    fn in_index(mut self, index: usize) -> DeError {
        self.path.push(format!("[{index}]"));
        self
    }

    /// `metrics.tps.regex`, `inputs[2]`; empty at the top.
    pub fn path(&self) -> String {
        let mut text = String::new();
        for segment in self.path.iter().rev() {
            if !text.is_empty() && !segment.starts_with('[') {
                text.push('.');
            }
            text.push_str(segment);
        }
        text
    }

    pub fn is_missing_field(&self) -> bool {
        matches!(self.kind, DeErrorKind::MissingField(_))
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DeErrorKind::Custom(text) => f.write_str(text),
            DeErrorKind::UnknownField { field, .. } => write!(f, "unknown key `{field}`"),
            DeErrorKind::UnknownVariant { variant, .. } => write!(f, "unknown variant `{variant}`"),
            DeErrorKind::MissingField(field) => write!(f, "missing required key `{field}`"),
            DeErrorKind::InvalidType { found, expected } => {
                write!(f, "expected {expected}, found {found}")
            }
            DeErrorKind::InvalidValue { found, expected } => {
                write!(f, "expected {expected}, found {found}")
            }
        }
    }
}

impl std::error::Error for DeError {}

/// serde's names for what it expected, in words a YAML author knows.
fn humane_expected(expected: &dyn de::Expected) -> String {
    let text = expected.to_string();
    match text.as_str() {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number ≥ 0".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "a sequence" => "a list".to_owned(),
        "a map" => "a mapping".to_owned(),
        "a borrowed string" => "a string".to_owned(),
        "unit" => "nothing".to_owned(),
        t if t.starts_with("struct ") => "a mapping".to_owned(),
        t if t.starts_with("enum ") => "one of the allowed values".to_owned(),
        _ => text,
    }
}

fn humane_found(unexpected: &Unexpected<'_>) -> String {
    match unexpected {
        Unexpected::Bool(b) => format!("`{b}`"),
        Unexpected::Unsigned(n) => format!("the integer `{n}`"),
        Unexpected::Signed(n) => format!("the integer `{n}`"),
        Unexpected::Float(x) => format!("the number `{x}`"),
        Unexpected::Str(s) => format!("the string `{s}`"),
        Unexpected::Unit => "nothing (null)".to_owned(),
        Unexpected::Seq => "a list".to_owned(),
        Unexpected::Map => "a mapping".to_owned(),
        other => other.to_string(),
    }
}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> DeError {
        DeError::new(DeErrorKind::Custom(msg.to_string()))
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> DeError {
        DeError::new(DeErrorKind::InvalidType {
            found: humane_found(&unexpected),
            expected: humane_expected(expected),
        })
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> DeError {
        DeError::new(DeErrorKind::InvalidValue {
            found: humane_found(&unexpected),
            expected: humane_expected(expected),
        })
    }

    fn invalid_length(len: usize, expected: &dyn de::Expected) -> DeError {
        <DeError as de::Error>::custom(format_args!(
            "expected {}, found {len} items",
            humane_expected(expected)
        ))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> DeError {
        DeError::new(DeErrorKind::UnknownVariant {
            variant: variant.to_owned(),
            expected,
        })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> DeError {
        DeError::new(DeErrorKind::UnknownField {
            field: field.to_owned(),
            expected,
        })
    }

    fn missing_field(field: &'static str) -> DeError {
        DeError::new(DeErrorKind::MissingField(field))
    }

    fn duplicate_field(field: &'static str) -> DeError {
        <DeError as de::Error>::custom(format_args!("key `{field}` appears twice"))
    }
}

/// The name under which [`Sp`] asks our deserializer for a position.
const SPANNED: &str = "$fracflow::spanned";

/// Deserializes a type from a tree node.
pub(crate) struct De<'a>(pub &'a Node);

impl<'de> Deserializer<'de> for De<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let node = self.0;
        let result = match &node.val {
            Val::Null => visitor.visit_unit(),
            Val::Bool(b) => visitor.visit_bool(*b),
            Val::Int(i) => visitor.visit_i64(*i),
            Val::Float(x) => visitor.visit_f64(*x),
            Val::Str(s) => visitor.visit_str(s),
            Val::Seq(items) => visitor.visit_seq(SeqDe {
                items: items.iter(),
                index: 0,
            }),
            Val::Map(entries) => visitor.visit_map(MapDe {
                entries: entries.iter(),
                pending: None,
            }),
        };
        result.map_err(|e| e.at(node.loc))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.val {
            Val::Null => visitor.visit_none().map_err(|e: DeError| e.at(self.0.loc)),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name == SPANNED {
            visitor.visit_seq(SpannedSeq {
                node: self.0,
                step: 0,
            })
        } else {
            visitor.visit_newtype_struct(self)
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let node = self.0;
        let result = match &node.val {
            // A bare string names a unit variant; when it names none, the author most likely meant a mapping.
            Val::Str(text) => visitor
                .visit_enum(EnumDe {
                    tag: node,
                    content: None,
                })
                .map_err(|error| match error.kind {
                    DeErrorKind::UnknownVariant { variant, expected } if variant == *text => {
                        <DeError as de::Error>::custom(format_args!(
                            "expected a mapping with one key ({}), found the string `{text}`",
                            crate::diag::list_choices(expected.iter().copied())
                        ))
                    }
                    _ => error,
                }),
            Val::Map(entries) if entries.len() == 1 => {
                let (tag, content) = &entries[0];
                visitor.visit_enum(EnumDe {
                    tag,
                    content: Some(content),
                })
            }
            _ => self.deserialize_any(visitor),
        };
        result.map_err(|e| e.at(node.loc))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

struct SeqDe<'a> {
    items: std::slice::Iter<'a, Node>,
    index: usize,
}

impl<'de> SeqAccess<'de> for SeqDe<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(De(item))
            .map(Some)
            .map_err(|e| e.at(item.loc).in_index(index))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'a> {
    entries: std::slice::Iter<'a, (Node, Node)>,
    pending: Option<&'a (Node, Node)>,
}

impl<'de> MapAccess<'de> for MapDe<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.pending = Some(entry);
        seed.deserialize(De(&entry.0))
            .map(Some)
            .map_err(|e| e.at(entry.0.loc))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((key, value)) = self.pending.take() else {
            return Err(<DeError as de::Error>::custom(
                "internal error: a value was read before its key",
            ));
        };
        seed.deserialize(De(value))
            .map_err(|e| e.at(value.loc).in_field(key.as_str().unwrap_or("?")))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

struct EnumDe<'a> {
    tag: &'a Node,
    content: Option<&'a Node>,
}

impl<'de, 'a> EnumAccess<'de> for EnumDe<'a> {
    type Error = DeError;
    type Variant = VariantDe<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantDe<'a>), DeError> {
        let tag = self.tag;
        let value = seed.deserialize(De(tag)).map_err(|e| e.at(tag.loc))?;
        Ok((
            value,
            VariantDe {
                tag,
                content: self.content,
            },
        ))
    }
}

struct VariantDe<'a> {
    tag: &'a Node,
    content: Option<&'a Node>,
}

impl VariantDe<'_> {
    fn content(&self) -> Result<&Node, DeError> {
        self.content.ok_or_else(|| {
            let name = self.tag.as_str().unwrap_or("?");
            <DeError as de::Error>::custom(format_args!(
                "`{name}` needs a value: write `{name}: …`"
            ))
            .at(self.tag.loc)
        })
    }

    fn field(&self) -> &str {
        self.tag.as_str().unwrap_or("?")
    }
}

impl<'de> VariantAccess<'de> for VariantDe<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.content {
            None | Some(Node { val: Val::Null, .. }) => Ok(()),
            Some(node) => Err(<DeError as de::Error>::custom(format_args!(
                "`{}` takes no value",
                self.field()
            ))
            .at(node.loc)),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        let content = self.content()?;
        seed.deserialize(De(content))
            .map_err(|e| e.at(content.loc).in_field(self.field()))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        let content = self.content()?;
        De(content)
            .deserialize_any(visitor)
            .map_err(|e| e.in_field(self.field()))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let content = self.content()?;
        De(content)
            .deserialize_any(visitor)
            .map_err(|e| e.in_field(self.field()))
    }
}

/// Hands [`Sp`] the position (file, line, column) and then the value.
struct SpannedSeq<'a> {
    node: &'a Node,
    step: u8,
}

impl<'de> SeqAccess<'de> for SpannedSeq<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let loc = self.node.loc;
        self.step += 1;
        match self.step {
            1 => seed.deserialize(loc.file.into_deserializer()).map(Some),
            2 => seed.deserialize(loc.line.into_deserializer()).map(Some),
            3 => seed.deserialize(loc.col.into_deserializer()).map(Some),
            4 => seed.deserialize(De(self.node)).map(Some),
            _ => Ok(None),
        }
    }
}

/// A value with the position it was written at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sp<T> {
    pub value: T,
    pub loc: Loc,
}

impl<T> std::ops::Deref for Sp<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sp<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Sp<T>, D::Error> {
        struct SpVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for SpVisitor<T> {
            type Value = Sp<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Sp<T>, A::Error> {
                let missing = || de::Error::custom("internal error: incomplete position");
                let file: u32 = seq.next_element()?.ok_or_else(missing)?;
                let line: u32 = seq.next_element()?.ok_or_else(missing)?;
                let col: u32 = seq.next_element()?.ok_or_else(missing)?;
                let value: T = seq.next_element()?.ok_or_else(missing)?;
                Ok(Sp {
                    value,
                    loc: Loc { file, line, col },
                })
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Sp<T>, D::Error> {
                Ok(Sp {
                    value: T::deserialize(d)?,
                    loc: Loc::default(),
                })
            }
        }
        deserializer.deserialize_newtype_struct(SPANNED, SpVisitor(std::marker::PhantomData))
    }
}

impl<T: Serialize> Serialize for Sp<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl<T: JsonSchema> JsonSchema for Sp<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }
    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}

/// A mapping that keeps its keys' order and positions (`nodes:`, `sweep:`, `params:`, …). A null value
/// (`params:` with every entry commented out) reads as empty.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OrderedMap<V>(pub Vec<(Sp<String>, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Sp<String>, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<OrderedMap<V>, D::Error> {
        struct MapVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_unit<E>(self) -> Result<OrderedMap<V>, E> {
                Ok(OrderedMap(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedMap<V>, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(OrderedMap(entries))
            }
        }
        deserializer.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (&k.value, v)))
    }
}

impl<V: JsonSchema> JsonSchema for OrderedMap<V> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("Map_of_{}", V::schema_name()).into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let values = generator.subschema_for::<V>();
        json_schema!({ "type": "object", "additionalProperties": values })
    }
}

/// Any YAML value, kept as a tree (with positions) for later processing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawNode(pub Node);

impl<'de> Deserialize<'de> for RawNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawNode, D::Error> {
        Node::deserialize(deserializer).map(RawNode)
    }
}

inline_schema!(RawNode, "AnyValue", |_| { json_schema!(true) });

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        struct ValVisitor;
        impl<'de> Visitor<'de> for ValVisitor {
            type Value = Val;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E>(self) -> Result<Val, E> {
                Ok(Val::Null)
            }
            fn visit_none<E>(self) -> Result<Val, E> {
                Ok(Val::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Val, E> {
                Ok(Val::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> Result<Val, E> {
                Ok(Val::Int(i))
            }
            fn visit_u64<E: de::Error>(self, u: u64) -> Result<Val, E> {
                i64::try_from(u)
                    .map(Val::Int)
                    .map_err(|_| E::custom("integer too large"))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Val, E> {
                Ok(Val::Float(x))
            }
            fn visit_str<E>(self, s: &str) -> Result<Val, E> {
                Ok(Val::Str(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Node>()? {
                    items.push(item);
                }
                Ok(Val::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<Node, Node>()? {
                    entries.push(entry);
                }
                Ok(Val::Map(entries))
            }
        }
        struct AnyVal(Val);
        impl<'de> Deserialize<'de> for AnyVal {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyVal, D::Error> {
                d.deserialize_any(ValVisitor).map(AnyVal)
            }
        }
        let spanned = Sp::<AnyVal>::deserialize(deserializer)?;
        Ok(Node {
            loc: spanned.loc,
            val: spanned.value.0,
        })
    }
}

/// Deserializes `node` as `T`, and on failure finds every key that is wrong, not just the first: each entry of
/// the mapping is tried alone, then the good entries together (for missing required keys).
/// Returns the value (on failure: made of the good entries, when they are enough) and the errors.
pub(crate) fn deserialize_all<T: DeserializeOwned>(node: &Node) -> (Option<T>, Vec<DeError>) {
    let first = match T::deserialize(De(node)) {
        Ok(value) => return (Some(value), Vec::new()),
        Err(error) => error,
    };
    let Val::Map(entries) = &node.val else {
        return (None, vec![first]);
    };
    let mut errors = Vec::new();
    let mut good = Vec::new();
    for entry in entries {
        let single = Node::map(node.loc, vec![entry.clone()]);
        match T::deserialize(De(&single)) {
            Ok(_) => good.push(entry.clone()),
            Err(error) if error.is_missing_field() => good.push(entry.clone()),
            Err(error) => errors.push(error),
        }
    }
    let partial = match T::deserialize(De(&Node::map(node.loc, good))) {
        Ok(value) => Some(value),
        Err(error) => {
            // A key that is present but wrong is not also "missing".
            let present = match &error.kind {
                DeErrorKind::MissingField(field) => {
                    entries.iter().any(|(k, _)| k.as_str() == Some(field))
                }
                _ => false,
            };
            if !present && !errors.contains(&error) {
                errors.push(error);
            }
            None
        }
    };
    if errors.is_empty() {
        errors.push(first);
    }
    (partial, errors)
}

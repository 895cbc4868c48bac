//! Reading a node's configuration into its kind's typed struct, once, with the path of every value serde
//! rejects, so the loader can point at the YAML of that value; and the value types several kinds share.
//!
//! The same parse serves the load-time `check` and `execute`: a kind has one struct, and what `check`
//! accepted is what `execute` gets.

use std::fmt;

use fracflow_core::suggest::{did_you_mean, list_choices};
use fracflow_core::{ConfigProblem, NodeError, NodeSpec, PathSegment};
use schemars::{JsonSchema, Schema, json_schema};
use serde::de::{self, DeserializeOwned, Deserializer, IntoDeserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Separates a message from its hint inside a serde error's text (serde errors carry one string).
const HINT_MARK: char = '\u{1f}';

/// A serde error that says what is wrong and, when it knows, what to write instead.
pub fn custom_with_hint<E: de::Error>(message: impl fmt::Display, hint: Option<String>) -> E {
    match hint {
        Some(hint) => E::custom(format_args!("{message}{HINT_MARK}{hint}")),
        None => E::custom(message),
    }
}

/// The node's configuration as `T`, or every problem serde finds in it.
pub fn parse<T: DeserializeOwned>(spec: &NodeSpec) -> Result<T, Vec<ConfigProblem>> {
    // Most configurations are valid, and every node's is parsed at load (`check`), when keyed (`info`) and by
    // `plan` (`describe`): read straight from the node's map first, with serde_json's deserializer over its
    // values, which takes every value as the tracked parse does. Only a configuration it rejects pays for the
    // copy the problem-collecting parse takes values out of (a fifth of a 10 000-node plan's instructions).
    let entries = spec.config.iter().map(|(key, value)| (key.as_str(), value));
    let direct: Result<T, serde_json::Error> =
        T::deserialize(de::value::MapDeserializer::new(entries));
    if let Ok(parsed) = direct {
        return Ok(parsed);
    }
    let object = Value::Object(
        spec.config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    );
    parse_owned(object)
}

/// `value` as `T`, or every problem serde finds in it, each with the path of the value it rejected.
///
/// serde stops at the first problem, so after each one the rejected value is taken out and the parse runs
/// again: one pass finds all the wrong values of a node. That a value taken out is then missing says nothing
/// new: the mapping that misses it is taken out in turn. List items taken out keep their positions in the
/// paths reported.
pub fn parse_value<T: DeserializeOwned>(value: &Value) -> Result<T, Vec<ConfigProblem>> {
    parse_owned(value.clone())
}

/// [`parse_value`] on a value of its own, which it takes problems out of: `parse` builds one per call, and
/// copying it once more was a twentieth of a 10 000-node plan (three parses per node).
fn parse_owned<T: DeserializeOwned>(mut value: Value) -> Result<T, Vec<ConfigProblem>> {
    let mut problems: Vec<ConfigProblem> = Vec::new();
    let mut shifts = Shifts::default();
    // (mapping, key) pairs taken out, as written.
    let mut removed: Vec<(Vec<PathSegment>, String)> = Vec::new();
    loop {
        let mut problem = match parse_once::<T>(&value) {
            Ok(parsed) if problems.is_empty() => return Ok(parsed),
            Ok(_) => return Err(problems),
            Err(problem) => problem,
        };
        let current = std::mem::take(&mut problem.path);
        problem.path = shifts.as_written(&current);
        let echo = removed.iter().any(|(parent, key)| {
            *parent == problem.path && problem.message == format!("missing key `{key}`")
        });
        if !echo {
            if let (Some(PathSegment::Key(key)), Some((_, parent))) =
                (problem.path.last(), problem.path.split_last())
            {
                removed.push((parent.to_vec(), key.clone()));
            }
            problems.push(problem);
        }
        if current.is_empty() || !shifts.take_out(&mut value, &current) {
            return Err(problems);
        }
    }
}

/// Which items of each list are still there, by their positions as written (lists keyed by their paths as
/// written).
#[derive(Default)]
struct Shifts(std::collections::HashMap<Vec<PathSegment>, Vec<usize>>);

impl Shifts {
    /// A path into the value as it is now, as a path into the value as written.
    fn as_written(&self, path: &[PathSegment]) -> Vec<PathSegment> {
        let mut written = Vec::with_capacity(path.len());
        for segment in path {
            let segment = match segment {
                PathSegment::Index(index) => PathSegment::Index(
                    self.0
                        .get(&written)
                        .and_then(|kept| kept.get(*index).copied())
                        .unwrap_or(*index),
                ),
                key => key.clone(),
            };
            written.push(segment);
        }
        written
    }

    /// Removes the value at `path` (a path into the value as it is now) from its mapping or list.
    fn take_out(&mut self, value: &mut Value, path: &[PathSegment]) -> bool {
        let Some((last, parent)) = path.split_last() else {
            return false;
        };
        let mut node = &mut *value;
        for segment in parent {
            let next = match segment {
                PathSegment::Key(key) => node.get_mut(key.as_str()),
                PathSegment::Index(index) => node.get_mut(*index),
            };
            match next {
                Some(next) => node = next,
                None => return false,
            }
        }
        match (last, node) {
            (PathSegment::Key(key), Value::Object(map)) => map.remove(key).is_some(),
            (PathSegment::Index(index), Value::Array(items)) if *index < items.len() => {
                let written = self.as_written(parent);
                let kept = self
                    .0
                    .entry(written)
                    .or_insert_with(|| (0..items.len()).collect());
                kept.remove(*index);
                items.remove(*index);
                true
            }
            _ => false,
        }
    }
}

/// `value` as `T`, or the first problem, with the path of the value serde rejected.
fn parse_once<T: DeserializeOwned>(value: &Value) -> Result<T, ConfigProblem> {
    let mut path = Vec::new();
    let result = T::deserialize(Tracked {
        value,
        path: &mut path,
    });
    result.map_err(|error| {
        let (message, hint) = match error.message.split_once(HINT_MARK) {
            Some((message, hint)) => (message.to_owned(), Some(hint.to_owned())),
            None => (error.message, None),
        };
        ConfigProblem {
            path,
            message,
            hint,
            at_key: error.at_key,
        }
    })
}

/// A node's configuration problems as the error of a node that runs anyway (a registry used without the
/// loader's check, e.g. in unit tests).
pub fn node_error(spec: &NodeSpec, problem: &ConfigProblem) -> NodeError {
    let place = if problem.path.is_empty() {
        String::new()
    } else {
        format!(" `{}`", problem.dotted_path())
    };
    NodeError::permanent(format!(
        "node `{}` (at {}){place}: {}",
        spec.id, spec.origin, problem.message
    ))
}

/// The typed configuration of `spec`, for `execute`, `info` and `describe`.
pub fn typed<T: DeserializeOwned>(spec: &NodeSpec) -> Result<T, NodeError> {
    parse(spec).map_err(|problems| match problems.first() {
        Some(problem) => node_error(spec, problem),
        None => NodeError::permanent(format!("node `{}`: invalid configuration", spec.id)),
    })
}

/// Every problem of `spec`'s configuration: serde's, or, once it parses, the kind's own `checks`.
pub fn check_with<T: DeserializeOwned>(
    spec: &NodeSpec,
    checks: impl FnOnce(&T) -> Vec<ConfigProblem>,
) -> Vec<ConfigProblem> {
    match parse::<T>(spec) {
        Ok(config) => checks(&config),
        Err(problems) => problems,
    }
}

/// Why serde rejected a value.
#[derive(Debug)]
pub struct PathError {
    message: String,
    at_key: bool,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PathError {}

impl de::Error for PathError {
    fn custom<T: fmt::Display>(msg: T) -> PathError {
        PathError {
            message: msg.to_string(),
            at_key: false,
        }
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> PathError {
        let hint = did_you_mean(field, expected.iter().copied()).or_else(|| {
            Some(format!(
                "the keys here are {}",
                list_choices(expected.iter().copied())
            ))
        });
        PathError {
            message: match hint {
                Some(hint) => format!("unknown key `{field}`{HINT_MARK}{hint}"),
                None => format!("unknown key `{field}`"),
            },
            at_key: true,
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> PathError {
        let hint = did_you_mean(variant, expected.iter().copied());
        let message = format!(
            "expected {}, found `{variant}`",
            list_choices(expected.iter().copied())
        );
        de::Error::custom(match hint {
            Some(hint) => format!("{message}{HINT_MARK}{hint}"),
            None => message,
        })
    }

    fn missing_field(field: &'static str) -> PathError {
        de::Error::custom(format_args!("missing key `{field}`"))
    }

    fn invalid_type(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> PathError {
        let expected = expected.to_string();
        // serde names Rust's types; a pipeline author writes YAML.
        let expected = match expected.as_str() {
            e if e.starts_with("struct ") || e.starts_with("map") => "a mapping".to_owned(),
            e if e.starts_with("a sequence") => "a list".to_owned(),
            "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number ≥ 0".to_owned(),
            "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".to_owned(),
            "f32" | "f64" => "a number".to_owned(),
            "path string" => "a path".to_owned(),
            _ => expected,
        };
        let found = match unexpected {
            de::Unexpected::Seq => "a list".to_owned(),
            de::Unexpected::Map => "a mapping".to_owned(),
            de::Unexpected::Str(text) => format!("the string `{text}`"),
            de::Unexpected::Unsigned(n) => format!("the number `{n}`"),
            de::Unexpected::Signed(n) => format!("the number `{n}`"),
            de::Unexpected::Float(n) => format!("the number `{n}`"),
            de::Unexpected::Bool(b) => format!("`{b}`"),
            de::Unexpected::Unit => "null".to_owned(),
            other => other.to_string(),
        };
        let hint = (found == "a mapping" && expected.contains("string")).then(|| {
            "in YAML, a value that starts with `{` is a mapping; quote it, e.g. \"{m}\"".to_owned()
        });
        custom_with_hint(format_args!("expected {expected}, found {found}"), hint)
    }
}

/// A deserializer over a JSON value that records where it is, so that the path of a rejected value
/// survives the error (the path stays at the deepest point reached when serde gives up).
struct Tracked<'a, 'p> {
    value: &'a Value,
    path: &'p mut Vec<PathSegment>,
}

impl<'de, 'a, 'p> Deserializer<'de> for Tracked<'a, 'p> {
    type Error = PathError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PathError> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => visitor.visit_seq(Items {
                items: items.iter(),
                index: 0,
                path: self.path,
            }),
            Value::Object(map) => visitor.visit_map(Entries {
                entries: map.iter(),
                pending: None,
                path: self.path,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PathError> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, PathError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PathError> {
        match self.value {
            Value::String(word) => visitor.visit_enum(word.as_str().into_deserializer()),
            // `{scale_by: {…}}`: the variant and its content.
            Value::Object(map) if map.len() == 1 => match map.iter().next() {
                Some((variant, value)) => visitor.visit_enum(Variant {
                    variant,
                    value,
                    path: self.path,
                }),
                None => self.deserialize_any(visitor),
            },
            _ => self.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// An enum written as a one-key mapping: the key names the variant.
struct Variant<'a, 'p> {
    variant: &'a String,
    value: &'a Value,
    path: &'p mut Vec<PathSegment>,
}

impl<'de, 'a, 'p> de::EnumAccess<'de> for Variant<'a, 'p> {
    type Error = PathError;
    type Variant = Self;

    fn variant_seed<V: de::DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), PathError> {
        self.path.push(PathSegment::Key(self.variant.clone()));
        let variant = seed.deserialize(Key(self.variant))?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_, '_> {
    type Error = PathError;

    fn unit_variant(self) -> Result<(), PathError> {
        match self.value {
            Value::Null => Ok(()),
            other => Err(de::Error::custom(format_args!(
                "`{}` takes no value, found {}",
                self.variant,
                kind_of(other)
            ))),
        }
    }

    fn newtype_variant_seed<T: de::DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, PathError> {
        let value = seed.deserialize(Tracked {
            value: self.value,
            path: &mut *self.path,
        })?;
        self.path.pop();
        Ok(value)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, PathError> {
        let value = Tracked {
            value: self.value,
            path: &mut *self.path,
        }
        .deserialize_any(visitor)?;
        self.path.pop();
        Ok(value)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PathError> {
        let value = Tracked {
            value: self.value,
            path: &mut *self.path,
        }
        .deserialize_any(visitor)?;
        self.path.pop();
        Ok(value)
    }
}

struct Items<'a, 'p> {
    items: std::slice::Iter<'a, Value>,
    index: usize,
    path: &'p mut Vec<PathSegment>,
}

impl<'de> de::SeqAccess<'de> for Items<'_, '_> {
    type Error = PathError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, PathError> {
        let Some(value) = self.items.next() else {
            return Ok(None);
        };
        self.path.push(PathSegment::Index(self.index));
        let element = seed.deserialize(Tracked {
            value,
            path: self.path,
        })?;
        self.path.pop();
        self.index += 1;
        Ok(Some(element))
    }
}

struct Entries<'a, 'p> {
    entries: serde_json::map::Iter<'a>,
    pending: Option<&'a Value>,
    path: &'p mut Vec<PathSegment>,
}

impl<'de> de::MapAccess<'de> for Entries<'_, '_> {
    type Error = PathError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, PathError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        // Pushed before the key is read: an unknown key's error then carries its own path.
        self.path.push(PathSegment::Key(key.clone()));
        self.pending = Some(value);
        seed.deserialize(Key(key)).map(Some).map_err(|mut error| {
            // A key that cannot be read (not a number where one is needed) is shown at the key.
            error.at_key = true;
            error
        })
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, PathError> {
        let value = self.pending.take().unwrap_or(&Value::Null);
        let result = seed.deserialize(Tracked {
            value,
            path: self.path,
        })?;
        self.path.pop();
        Ok(result)
    }
}

/// A mapping's key: text, or a number where the key type is one (`functions: {0: Top-K}`; JSON keys are
/// always text).
struct Key<'a>(&'a str);

macro_rules! parsed_key {
    ($($method:ident => $visit:ident: $ty:ty),+ $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PathError> {
            match self.0.trim().parse::<$ty>() {
                Ok(number) => visitor.$visit(number),
                Err(_) => Err(de::Error::custom(format_args!(
                    "expected a number as the key, found `{}`",
                    self.0
                ))),
            }
        })+
    };
}

impl<'de> Deserializer<'de> for Key<'_> {
    type Error = PathError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PathError> {
        visitor.visit_str(self.0)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PathError> {
        visitor.visit_enum(self.0.into_deserializer())
    }

    parsed_key! {
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64,
        deserialize_i8 => visit_i8: i8,
        deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32,
        deserialize_i64 => visit_i64: i64,
    }

    serde::forward_to_deserialize_any! {
        bool i128 u128 f32 f64 char str string bytes byte_buf option unit unit_struct newtype_struct seq
        tuple tuple_struct map struct identifier ignored_any
    }
}

/// The schema of a kind's config struct, as an object.
pub fn schema_of<T: JsonSchema>() -> serde_json::Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    generator.root_schema_for::<T>().to_value()
}

/// A whole number as a kind reads it: an integer, or text that a template left (`"2"`, `"0x1000"`,
/// `"268451840 + 64"`: the loader renders templates to text, and a number computed from params stays text).
pub fn integer_of(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(text) => integer_text(text),
        _ => None,
    }
}

/// `text` as an integer: decimal, `0x` hexadecimal (with `_` separators), or a sum or difference of those.
pub fn integer_text(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut sign: i64 = 1;
    let mut expect_term = true;
    for token in text.split_whitespace() {
        if expect_term {
            let (negative, digits) = match token.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, token),
            };
            let value = match digits
                .strip_prefix("0x")
                .or_else(|| digits.strip_prefix("0X"))
            {
                Some(hex) => i64::from_str_radix(&hex.replace('_', ""), 16).ok()?,
                None => digits.replace('_', "").parse::<i64>().ok()?,
            };
            let value = if negative { -value } else { value };
            total = total.checked_add(sign.checked_mul(value)?)?;
            expect_term = false;
        } else {
            sign = match token {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            expect_term = true;
        }
    }
    (!expect_term).then_some(total)
}

/// The JSON schema of a value that may also be written as a template string (`"{slot}"`).
pub fn or_template(schema: Value) -> Schema {
    json_schema!({
        "anyOf": [
            schema,
            { "type": "string", "pattern": "[{}]", "description": "A template." }
        ]
    })
}

/// The JSON Schema of a type whose `Deserialize` is written by hand: inlined where it is used, named `$ty`, with
/// the schema `$schema` builds.
macro_rules! inline_schema {
    ($ty:ident, $schema:block) => {
        impl schemars::JsonSchema for $ty {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema $schema
        }
    };
}

pub(crate) use inline_schema;

/// Defines a whole-number type with a range check: `Name(inner)`, what it must be (for messages), the test,
/// a hint, and its schema.
macro_rules! whole_number {
    ($(#[$meta:meta])* $name:ident($inner:ty), $expecting:literal, |$v:ident| $valid:expr, $hint:expr, $schema:tt) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                let value = Value::deserialize(deserializer)?;
                let hint: Option<String> = $hint;
                match integer_of(&value) {
                    Some($v) if $valid => <$inner>::try_from($v)
                        .map($name)
                        .map_err(|_| custom_with_hint(format_args!("expected {}, found `{}`", $expecting, $v), hint)),
                    _ => Err(custom_with_hint(
                        format_args!("expected {}, found `{}`", $expecting, shown(&value)),
                        hint,
                    )),
                }
            }
        }

        $crate::config::inline_schema!($name, {
            $crate::config::or_template(serde_json::json!($schema))
        });
    };
}

/// A string, or a number or boolean taken as its text (env values, argv words: `N: 5` means `N=5`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Word(pub String);

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Word, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(Word(text)),
            value @ (Value::Number(_) | Value::Bool(_)) => Ok(Word(value.to_string())),
            other => Err(de::Error::custom(format_args!(
                "expected a string, number or boolean, found {}",
                kind_of(&other)
            ))),
        }
    }
}

inline_schema!(Word, {
    json_schema!({ "type": ["string", "number", "boolean"] })
});

/// What a value is, for messages: "a list", "a mapping", …
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A value as the user wrote it, for messages: text without JSON quotes.
pub fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

whole_number! {
    /// A count of clients, instances or cores: 1 or more.
    Count(u32), "a whole number ≥ 1", |v| v >= 1, None, { "type": "integer", "minimum": 1 }
}

whole_number! {
    /// A whole number of seconds or items, 0 or more.
    Whole(u32), "a whole number ≥ 0", |v| v >= 0, None, { "type": "integer", "minimum": 0 }
}

whole_number! {
    /// A slot of the device (`fracflow_proto::limits::SLOTS` of them).
    Slot(u8), "a slot number 0–3", |v| (0..i64::from(fracflow_proto::limits::SLOT_COUNT)).contains(&v),
    Some("the device has four slots (cells C00–C03)".to_owned()),
    { "type": "integer", "minimum": 0, "maximum": 3 }
}

/// A non-negative number (seconds, a fraction) that a template may have left as text.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Number(pub f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Number, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let number = match &value {
            Value::Number(n) => n.as_f64(),
            Value::String(text) => text.trim().parse::<f64>().ok(),
            _ => None,
        };
        match number {
            Some(n) if n.is_finite() && n >= 0.0 => Ok(Number(n)),
            _ => Err(de::Error::custom(format_args!(
                "expected a number ≥ 0, found `{}`",
                shown(&value)
            ))),
        }
    }
}

inline_schema!(Number, {
    or_template(serde_json::json!({ "type": "number", "minimum": 0 }))
});

/// An accelerator's name: 1–32 of `a-z 0-9 _` (the emulator's rule for unit names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct UnitName(pub String);

/// The longest unit name the build chain accepts.
const MAX_UNIT_NAME: usize = 32;

impl<'de> Deserialize<'de> for UnitName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<UnitName, D::Error> {
        let text = String::deserialize(deserializer)?;
        let valid = !text.is_empty()
            && text.len() <= MAX_UNIT_NAME
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if valid {
            return Ok(UnitName(text));
        }
        let hint = (text.len() <= MAX_UNIT_NAME && text != text.to_ascii_lowercase())
            .then(|| format!("unit names are lower case: `{}`", text.to_ascii_lowercase()));
        Err(custom_with_hint(
            format_args!("expected a unit name (1–32 of `a-z 0-9 _`), found `{text}`"),
            hint,
        ))
    }
}

inline_schema!(UnitName, {
    json_schema!({ "type": "string", "description": "1–32 of `a-z 0-9 _` (may be a template)." })
});

/// Defines a word-valued enum (a tool's flow): its words, serde with did-you-mean, and schema.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant),+
        }

        $crate::config::inline_schema!($name, {
            $crate::config::or_template(serde_json::json!({ "enum": [$($word),+] }))
        });
    };
}

pub(crate) use words;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Claim {
        metric: String,
        #[serde(default)]
        slot: Option<Slot>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Claims {
        claims: Vec<Claim>,
    }

    #[test]
    fn a_rejected_value_keeps_its_path() {
        let value =
            json!({"claims": [{"metric": "a"}, {"metric": "b"}, {"metric": "c", "slot": 9}]});
        let problems = parse_value::<Claims>(&value).expect_err("rejected");
        let [problem] = problems.as_slice() else {
            panic!("one problem: {problems:?}")
        };
        assert_eq!(problem.dotted_path(), "claims.2.slot");
        assert_eq!(problem.message, "expected a slot number 0–3, found `9`");
        assert_eq!(
            problem.hint.as_deref(),
            Some("the device has four slots (cells C00–C03)")
        );
        assert!(!problem.at_key);
    }

    #[test]
    fn an_unknown_key_is_reported_at_the_key_with_a_suggestion() {
        let value = json!({"claims": [{"metric": "a", "metirc": "b"}]});
        let problems = parse_value::<Claims>(&value).expect_err("rejected");
        let problem = &problems[0];
        assert_eq!(problem.dotted_path(), "claims.0.metirc");
        assert_eq!(problem.message, "unknown key `metirc`");
        assert_eq!(problem.hint.as_deref(), Some("did you mean `metric`?"));
        assert!(problem.at_key);
    }

    #[test]
    fn a_missing_key_is_reported_at_its_mapping() {
        let problems = parse_value::<Claims>(&json!({"claims": [{}]})).expect_err("rejected");
        assert_eq!(problems[0].dotted_path(), "claims.0");
        assert_eq!(problems[0].message, "missing key `metric`");
    }

    #[test]
    fn every_rejected_value_is_reported_and_a_key_taken_out_is_not_reported_missing() {
        let value = json!({"claims": [
            {"metric": 5, "slot": 1},
            {"metric": "b", "slot": "soon", "extra": 1},
            {"metric": "c"}
        ]});
        let problems = parse_value::<Claims>(&value).expect_err("rejected");
        let found: Vec<(String, &str)> = problems
            .iter()
            .map(|p| (p.dotted_path(), p.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "claims.0.metric".to_owned(),
                    "expected a string, found the number `5`"
                ),
                // A mapping's keys come in sorted order (the node's config is sorted).
                ("claims.1.extra".to_owned(), "unknown key `extra`"),
                (
                    "claims.1.slot".to_owned(),
                    "expected a slot number 0–3, found `soon`"
                ),
            ]
        );
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Step {
        Keep,
        ScaleBy { factor: Slot },
    }

    #[test]
    fn an_enum_written_as_a_one_key_mapping_keeps_the_path_into_its_variant() {
        let steps = parse_value::<Vec<Step>>(&json!(["keep", {"scale_by": {"factor": 2}}]));
        assert_eq!(
            steps.ok(),
            Some(vec![Step::Keep, Step::ScaleBy { factor: Slot(2) }])
        );
        let problems =
            parse_value::<Vec<Step>>(&json!([{"scale_by": {"factor": 9}}])).expect_err("slot 9");
        assert_eq!(problems[0].dotted_path(), "0.scale_by.factor");
        let problems =
            parse_value::<Vec<Step>>(&json!([{"keep": 1}])).expect_err("keep takes no value");
        assert_eq!(problems[0].message, "`keep` takes no value, found a number");
    }

    #[test]
    fn integers_written_as_text_by_templates_are_read() {
        assert_eq!(integer_text("2"), Some(2));
        assert_eq!(integer_text("0x1000_4000"), Some(0x1000_4000));
        assert_eq!(integer_text("268451840 + 64"), Some(268_451_904));
        assert_eq!(integer_text("10 - -2"), Some(12));
        assert_eq!(integer_text("2 +"), None);
        assert_eq!(integer_text("soon"), None);
        assert_eq!(integer_text(""), None);
    }
}

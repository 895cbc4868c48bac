//! A YAML document as a tree whose every node remembers where it was written, and the deep merge that lays
//! one document over another (`base:`, variants).

use std::collections::HashMap;

/// A position in one of the loaded files. `line == 0` means unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct Loc {
    pub file: u32,
    pub line: u32,
    pub col: u32,
}

impl Loc {
    pub fn unknown(file: u32) -> Loc {
        Loc {
            file,
            line: 0,
            col: 0,
        }
    }

    pub fn is_known(self) -> bool {
        self.line > 0
    }
}

/// One YAML node with its position. Mapping keys are nodes too (always strings), so they keep positions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub loc: Loc,
    pub val: Val,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    pub fn str(loc: Loc, text: impl Into<String>) -> Node {
        Node {
            loc,
            val: Val::Str(text.into()),
        }
    }

    /// Gives every position of this tree file number `file` (a tree parsed from one file names only it).
    pub fn renumber_file(&mut self, file: u32) {
        self.loc.file = file;
        match &mut self.val {
            Val::Seq(items) => items.iter_mut().for_each(|item| item.renumber_file(file)),
            Val::Map(entries) => entries.iter_mut().for_each(|(key, value)| {
                key.renumber_file(file);
                value.renumber_file(file);
            }),
            Val::Null | Val::Bool(_) | Val::Int(_) | Val::Float(_) | Val::Str(_) => {}
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.val {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn entries(&self) -> &[(Node, Node)] {
        match &self.val {
            Val::Map(entries) => entries,
            _ => &[],
        }
    }

    pub fn is_map(&self) -> bool {
        matches!(self.val, Val::Map(_))
    }

    /// The entry whose key is `key` (key node, value node).
    pub fn entry(&self, key: &str) -> Option<&(Node, Node)> {
        self.entries().iter().find(|(k, _)| k.as_str() == Some(key))
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|(_, v)| v)
    }

    /// This mapping without the entry `key` (unchanged if it is not a mapping).
    pub fn without(&self, key: &str) -> Node {
        match &self.val {
            Val::Map(entries) => Node {
                loc: self.loc,
                val: Val::Map(
                    entries
                        .iter()
                        .filter(|(k, _)| k.as_str() != Some(key))
                        .cloned()
                        .collect(),
                ),
            },
            _ => self.clone(),
        }
    }

    /// A mapping made of the given entries, positioned at `loc`.
    pub fn map(loc: Loc, entries: Vec<(Node, Node)>) -> Node {
        Node {
            loc,
            val: Val::Map(entries),
        }
    }

    /// The value as JSON (positions dropped).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.val {
            Val::Null => Value::Null,
            Val::Bool(b) => Value::Bool(*b),
            Val::Int(i) => Value::from(*i),
            Val::Float(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
            Val::Str(s) => Value::String(s.clone()),
            Val::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Val::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// A JSON value as a node, every part positioned at `loc`.
    pub fn from_json(value: &serde_json::Value, loc: Loc) -> Node {
        use serde_json::Value;
        let val = match value {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Val::Int(i),
                None => Val::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Val::Str(s.clone()),
            Value::Array(items) => {
                Val::Seq(items.iter().map(|v| Node::from_json(v, loc)).collect())
            }
            Value::Object(map) => Val::Map(
                map.iter()
                    .map(|(k, v)| (Node::str(loc, k.clone()), Node::from_json(v, loc)))
                    .collect(),
            ),
        };
        Node { loc, val }
    }

    /// What the value is, for messages: "a string", "a list", …
    pub fn describe(&self) -> &'static str {
        match self.val {
            Val::Null => "null",
            Val::Bool(_) => "a boolean",
            Val::Int(_) => "an integer",
            Val::Float(_) => "a number",
            Val::Str(_) => "a string",
            Val::Seq(_) => "a list",
            Val::Map(_) => "a mapping",
        }
    }
}

/// Lays `overlay` over `base`: mappings merge key by key (recursively), anything else — and an empty mapping —
/// in the overlay replaces what is underneath. Keys keep the base's order; new keys follow in overlay order.
pub(crate) fn merge(base: Node, overlay: Node) -> Node {
    match (base.val, overlay.val) {
        (Val::Map(base_entries), Val::Map(overlay_entries)) if !overlay_entries.is_empty() => {
            let mut slots: Vec<Option<(Node, Node)>> =
                overlay_entries.into_iter().map(Some).collect();
            let index: HashMap<String, usize> = slots
                .iter()
                .enumerate()
                .filter_map(|(i, e)| {
                    e.as_ref()
                        .and_then(|(k, _)| k.as_str())
                        .map(|k| (k.to_owned(), i))
                })
                .collect();
            let mut merged = Vec::with_capacity(base_entries.len() + slots.len());
            for (key, value) in base_entries {
                let taken = key
                    .as_str()
                    .and_then(|k| index.get(k))
                    .and_then(|&i| slots[i].take());
                match taken {
                    // The key keeps its first position: where the entry (e.g. a node) was declared.
                    Some((_, overlay_value)) => merged.push((key, merge(value, overlay_value))),
                    None => merged.push((key, value)),
                }
            }
            merged.extend(slots.into_iter().flatten());
            Node {
                loc: overlay.loc,
                val: Val::Map(merged),
            }
        }
        (_, val) => Node {
            loc: overlay.loc,
            val,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(line: u32) -> Loc {
        Loc {
            file: 0,
            line,
            col: 1,
        }
    }

    fn map(entries: Vec<(&str, Node)>) -> Node {
        Node::map(
            loc(1),
            entries
                .into_iter()
                .map(|(k, v)| (Node::str(loc(1), k), v))
                .collect(),
        )
    }

    fn int(i: i64) -> Node {
        Node {
            loc: loc(1),
            val: Val::Int(i),
        }
    }

    #[test]
    fn deep_merge_keeps_order_and_replaces_on_empty_map() {
        let base = map(vec![
            ("a", int(1)),
            ("m", map(vec![("x", int(1)), ("y", int(2))])),
            ("e", map(vec![("z", int(3))])),
        ]);
        let overlay = map(vec![
            ("m", map(vec![("y", int(20)), ("w", int(4))])),
            ("e", map(vec![])),
            ("b", int(5)),
        ]);
        let merged = merge(base, overlay);
        let keys = |node: &Node| -> Vec<String> {
            node.entries()
                .iter()
                .filter_map(|(k, _)| k.as_str().map(str::to_owned))
                .collect()
        };
        assert_eq!(keys(&merged), ["a", "m", "e", "b"]);
        let m = merged.get("m").expect("m is kept");
        assert_eq!(keys(m), ["x", "y", "w"]);
        assert_eq!(m.get("y").map(|y| &y.val), Some(&Val::Int(20)));
        assert_eq!(merged.get("e").map(Node::entries).map(<[_]>::len), Some(0));
        assert_eq!(merged.get("b").map(|b| &b.val), Some(&Val::Int(5)));
    }
}

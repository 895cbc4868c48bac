//! The YAML files of one load: reading, parsing into position-carrying trees, and turning positions into
//! diagnostics.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use crate::diag::Diagnostic;
use crate::tree::{Loc, Node, Val};

/// One file that was read.
#[derive(Debug)]
pub(crate) struct SourceFile {
    /// Absolute (canonical when possible).
    pub path: PathBuf,
    /// As shown in messages: relative to the root when under it.
    pub shown: PathBuf,
    pub text: String,
}

#[cfg(test)]
thread_local! {
    /// The files this thread has parsed: the unit tests count the parses of work that should parse each file
    /// once.
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A file's tree as a discovery on this thread parsed it, for the load that follows.
struct Discovered {
    path: PathBuf,
    text: String,
    file: u32,
    tree: Node,
}

/// The most text whose trees a discovery keeps for a load: a tree takes about ten times its text (two nodes of
/// about 48 bytes, and their strings, for a `key: value` line of a dozen bytes), and a project's other
/// pipelines are kept only until the load ends.
const KEPT_TEXT_BYTES: usize = 32 << 20;

thread_local! {
    /// Discovering the project's pipelines parses each file, and loading the one asked for parsed it again: a
    /// 3 000-node file's parse takes about 20 ms, a fifth to a third of a first run's start. A load takes its
    /// file's tree from here (same path, same text) and drops the rest once it is done ([`forget_discovered`]).
    static DISCOVERED: std::cell::RefCell<Vec<Discovered>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Drops the trees discovery kept on this thread.
pub(crate) fn forget_discovered() {
    DISCOVERED.with_borrow_mut(Vec::clear);
}

/// Every file read by one load, addressed by the `file` number of a [`Loc`].
#[derive(Debug)]
pub(crate) struct Sources {
    pub root: PathBuf,
    pub files: Vec<SourceFile>,
    by_path: HashMap<PathBuf, u32>,
}

impl Sources {
    pub fn new(root: PathBuf) -> Sources {
        Sources {
            root,
            files: Vec::new(),
            by_path: HashMap::new(),
        }
    }

    /// The absolute, canonical form of `path` (or just absolute when it does not exist).
    pub fn absolute(&self, path: &Path) -> PathBuf {
        let joined = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        std::fs::canonicalize(&joined).unwrap_or(joined)
    }

    /// How `path` is shown: relative to the root when it lies under it.
    pub fn shown(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| path.to_path_buf())
    }

    /// The id of an already read file.
    pub fn id_of(&self, path: &Path) -> Option<u32> {
        self.by_path.get(path).copied()
    }

    /// Reads a file (once) and returns its id. `path` must be absolute.
    pub fn read(&mut self, path: &Path) -> std::io::Result<u32> {
        if let Some(id) = self.by_path.get(path) {
            return Ok(*id);
        }
        let text = std::fs::read_to_string(path)?;
        Ok(self.add(path.to_path_buf(), text))
    }

    /// Registers a file whose text is already known.
    pub fn add(&mut self, path: PathBuf, text: String) -> u32 {
        let id = u32::try_from(self.files.len()).unwrap_or(u32::MAX);
        let shown = self.shown(&path);
        self.by_path.insert(path.clone(), id);
        self.files.push(SourceFile { path, shown, text });
        id
    }

    pub fn path(&self, file: u32) -> &Path {
        self.files
            .get(file as usize)
            .map_or(Path::new(""), |f| f.path.as_path())
    }

    pub fn shown_path(&self, file: u32) -> &Path {
        self.files
            .get(file as usize)
            .map_or(Path::new(""), |f| f.shown.as_path())
    }

    /// A diagnostic at `loc` with the excerpt of its line.
    pub fn diag(&self, loc: Loc, message: impl Into<String>) -> Diagnostic {
        let mut d = Diagnostic::new(message);
        if let Some(file) = self.files.get(loc.file as usize) {
            d.file = file.shown.clone();
            if loc.is_known() {
                d.line = loc.line as usize;
                d.column = loc.col as usize;
                d.source_line = file.text.lines().nth(d.line - 1).map(str::to_owned);
            }
        }
        d
    }

    /// `file:line:col` as shown in notes.
    pub fn describe(&self, loc: Loc) -> String {
        let shown = self.shown_path(loc.file).display();
        if loc.is_known() {
            format!("{shown}:{}:{}", loc.line, loc.col)
        } else {
            shown.to_string()
        }
    }

    /// Parses file `file` as [`Sources::parse`] does, and keeps a copy of the tree for a load of the same file
    /// later on this thread ([`Sources::parse_or_take`]).
    pub fn parse_and_keep(&self, file: u32) -> Result<Node, Box<Diagnostic>> {
        let tree = self.parse(file)?;
        if let Some(source) = self.files.get(file as usize) {
            DISCOVERED.with_borrow_mut(|kept| {
                let held: usize = kept.iter().map(|d| d.text.len()).sum();
                if held + source.text.len() <= KEPT_TEXT_BYTES {
                    kept.push(Discovered {
                        path: source.path.clone(),
                        text: source.text.clone(),
                        file,
                        tree: tree.clone(),
                    });
                }
            });
        }
        Ok(tree)
    }

    /// The tree of file `file`: the one a discovery on this thread kept of the same path and text, taken and
    /// given this file's number, or else parsed.
    pub fn parse_or_take(&self, file: u32) -> Result<Node, Box<Diagnostic>> {
        let Some(source) = self.files.get(file as usize) else {
            return self.parse(file);
        };
        let kept = DISCOVERED.with_borrow_mut(|kept| {
            let at = kept
                .iter()
                .position(|d| d.path == source.path && d.text == source.text)?;
            Some(kept.swap_remove(at))
        });
        match kept {
            Some(Discovered {
                file: parsed_as,
                mut tree,
                ..
            }) => {
                if parsed_as != file {
                    tree.renumber_file(file);
                }
                Ok(tree)
            }
            None => self.parse(file),
        }
    }

    /// Parses file `file` into a tree. A YAML syntax error (tabs, bad indentation, duplicate keys, …) is a
    /// diagnostic at its position.
    pub fn parse(&self, file: u32) -> Result<Node, Box<Diagnostic>> {
        #[cfg(test)]
        PARSES.with(|parses| parses.set(parses.get() + 1));
        let text = self
            .files
            .get(file as usize)
            .map_or("", |f| f.text.as_str());
        let mut options = serde_saphyr::options::Options::default();
        options.with_snippet = false;
        options.strict_booleans = true;
        options.budget = Some(budget_for(text.len()));
        let parsed: Result<Spanned<Raw>, serde_saphyr::Error> =
            serde_saphyr::from_str_with_options(text, options);
        match parsed {
            Ok(root) => {
                convert(root, file).map_err(|(loc, message)| Box::new(self.diag(loc, message)))
            }
            Err(error) => Err(Box::new(self.syntax_error(file, &error))),
        }
    }

    fn syntax_error(&self, file: u32, error: &serde_saphyr::Error) -> Diagnostic {
        let error = error.without_snippet();
        let loc = error.location().map_or(Loc::unknown(file), |l| Loc {
            file,
            line: u32::try_from(l.line()).unwrap_or(u32::MAX),
            col: u32::try_from(l.column()).unwrap_or(u32::MAX),
        });
        let (message, hint) = match error {
            serde_saphyr::Error::DuplicateMappingKey { key: Some(key), .. } => (
                format!("duplicate key `{key}`"),
                Some("each key may appear once in a mapping".to_owned()),
            ),
            serde_saphyr::Error::DuplicateMappingKey { key: None, .. } => (
                "duplicate key".to_owned(),
                Some("each key may appear once in a mapping".to_owned()),
            ),
            other => {
                let text = other.to_string();
                let text = match text.rfind(" at line ") {
                    Some(cut) => text[..cut].to_owned(),
                    None => text,
                };
                let hint = if text.contains("tab") {
                    Some("indent with spaces: YAML does not allow tabs for indentation".to_owned())
                } else if text.contains("flow") {
                    Some("inside `[…]` and `{…}`, quote strings that hold braces or commas, e.g. \"out_{m}.txt\"".to_owned())
                } else {
                    None
                };
                (format!("invalid YAML: {text}"), hint)
            }
        };
        self.diag(loc, message).with_hint(hint)
    }
}

/// What serde-saphyr gives us: any YAML value with spans.
enum Raw {
    Null,
    Bool(bool),
    Int(i64),
    BigInt(String),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Raw>>),
    Map(Vec<(Spanned<Raw>, Spanned<Raw>)>),
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Raw, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = Raw;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_none<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
                Raw::deserialize(d)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Raw, E> {
                Ok(Raw::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> Result<Raw, E> {
                Ok(Raw::Int(i))
            }
            fn visit_u64<E>(self, u: u64) -> Result<Raw, E> {
                Ok(i64::try_from(u).map_or_else(|_| Raw::BigInt(u.to_string()), Raw::Int))
            }
            fn visit_i128<E>(self, i: i128) -> Result<Raw, E> {
                Ok(i64::try_from(i).map_or_else(|_| Raw::BigInt(i.to_string()), Raw::Int))
            }
            fn visit_u128<E>(self, u: u128) -> Result<Raw, E> {
                Ok(i64::try_from(u).map_or_else(|_| Raw::BigInt(u.to_string()), Raw::Int))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Raw, E> {
                Ok(Raw::Float(x))
            }
            fn visit_str<E>(self, s: &str) -> Result<Raw, E> {
                Ok(Raw::Str(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Raw, E> {
                Ok(Raw::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Raw::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Raw::Map(entries))
            }
        }
        deserializer.deserialize_any(RawVisitor)
    }
}

fn loc_of<T>(spanned: &Spanned<T>, file: u32) -> Loc {
    Loc {
        file,
        line: u32::try_from(spanned.referenced.line()).unwrap_or(u32::MAX),
        col: u32::try_from(spanned.referenced.column()).unwrap_or(u32::MAX),
    }
}

fn convert(raw: Spanned<Raw>, file: u32) -> Result<Node, (Loc, String)> {
    let loc = loc_of(&raw, file);
    let val = match raw.value {
        Raw::Null => Val::Null,
        Raw::Bool(b) => Val::Bool(b),
        Raw::Int(i) => Val::Int(i),
        Raw::BigInt(text) => return Err((loc, format!("integer `{text}` is too large"))),
        Raw::Float(x) => Val::Float(x),
        Raw::Str(s) => Val::Str(s),
        Raw::Seq(items) => Val::Seq(
            items
                .into_iter()
                .map(|item| convert(item, file))
                .collect::<Result<_, _>>()?,
        ),
        Raw::Map(entries) => {
            let mut converted = Vec::with_capacity(entries.len());
            for (key, value) in entries {
                let key = convert(key, file)?;
                let key = match key.val {
                    Val::Str(s) => Node::str(key.loc, s),
                    Val::Int(i) => Node::str(key.loc, i.to_string()),
                    Val::Bool(b) => Node::str(key.loc, b.to_string()),
                    Val::Float(x) => Node::str(key.loc, x.to_string()),
                    Val::Null => Node::str(key.loc, "null"),
                    Val::Seq(_) | Val::Map(_) => {
                        return Err((key.loc, "a mapping key must be a plain string".to_owned()));
                    }
                };
                converted.push((key, convert(value, file)?));
            }
            Val::Map(converted)
        }
    };
    Ok(Node { loc, val })
}

/// The parser's limits for a file of `len` bytes. The guard against alias bombs (a few lines that expand into
/// millions of nodes) stays, but grows with the file: without aliases every YAML node takes at least one byte
/// of text, so one node and two events per byte admit any explicit pipeline (100 000 nodes are about 10 MB)
/// while still bounding what aliases may add to what is written.
fn budget_for(len: usize) -> serde_saphyr::budget::Budget {
    let mut budget = serde_saphyr::budget::Budget::default();
    budget.max_nodes = budget.max_nodes.max(len);
    budget.max_events = budget.max_events.max(len.saturating_mul(2));
    budget
}

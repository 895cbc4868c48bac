//! Loading one pipeline: the entry file and its `base:` chain, the selected variant, `uses:` node sets,
//! params, the sweep, every node's validation — then expansion into node specs and the DAG check.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use fracflow_core::{Graph, GraphError, Kinds, Origin, Pipeline};

use crate::de::{DeError, DeErrorKind, Sp, deserialize_all};
use crate::diag::{Diagnostic, Diagnostics, did_you_mean, list_choices, list_names};
use crate::doc::{AxisValues, Document, DurationValue, Foreach, NodeCommon, Scalar, common_fields};
use crate::expand::{check_duration, check_output, check_resource};
use crate::source::Sources;
use crate::sweep::{MAX_POINTS, Rule, Sweep};
use crate::template::{self, TemplateError};
use crate::tree::{Loc, Node, Val, merge};
use crate::{LoadOptions, Loaded};

/// The hint of every path that leaves the project (`base:`, `uses:`, `inputs:`): what a run reads is hashed
/// and cached as the project's, and a bundle carries only the project, so nothing may come from beside it.
pub(crate) const OUTSIDE_HINT: &str =
    "paths resolve under the project root (symlinks followed); copy the file into the project";

/// Where a deserialization error happened, for its message.
#[derive(Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// The top level of a document.
    Top,
    /// A node's keys.
    Node { name: &'a str, at: Loc },
}

/// A global param: `params:` of the pipeline (after base and variant), of node sets, or `--set`.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub name: String,
    pub key_loc: Loc,
    pub value: Node,
    /// Set on the command line.
    pub from_cli: bool,
    /// A default from a `uses:` node set (a sweep key of the same name replaces it).
    pub from_set: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Params {
    pub list: Vec<Param>,
    pub index: HashMap<String, usize>,
    /// Each param's swept keys (directly or through other params); `None` when the param is broken.
    pub sweeps: Vec<Option<BTreeSet<usize>>>,
}

impl Params {
    fn set(&mut self, param: Param) {
        match self.index.get(&param.name) {
            Some(&i) => self.list[i] = param,
            None => {
                self.index.insert(param.name.clone(), self.list.len());
                self.list.push(param);
            }
        }
    }

    fn remove(&mut self, name: &str) {
        self.list.retain(|p| p.name != name);
        self.index = self
            .list
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
    }
}

/// Entries of a mapping.
type Entries = Vec<(Node, Node)>;

/// A node as declared (name and body), before validation.
#[derive(Debug, Clone)]
pub(crate) struct Decl {
    pub name: Sp<String>,
    pub body: Node,
}

/// A validated node.
#[derive(Debug)]
pub(crate) struct NodeDef {
    pub name: String,
    pub name_loc: Loc,
    pub common: NodeCommon,
    /// The kind's name, one the registry knows.
    pub kind: String,
    /// The node's whole mapping as written: the kind's problems are positioned in it.
    pub body: Node,
    /// The kind's own keys, unresolved.
    pub kind_map: Node,
    /// The config when no kind key holds a template (then it is the same for every instance).
    pub fixed_config: Option<crate::expand::Config>,
    /// The axes the node is expanded over, in the order of its instance ids.
    pub foreach: Vec<Axis>,
    /// Declaration indices of the dependencies.
    pub deps: Vec<usize>,
    /// Node-local params.
    pub params: Vec<(String, Node)>,
}

impl NodeDef {
    /// The sweep keys among the node's axes.
    pub fn sweep_keys(&self) -> Vec<usize> {
        sweep_keys(&self.foreach)
    }
}

/// The sweep keys among `axes`, sorted.
fn sweep_keys(axes: &[Axis]) -> Vec<usize> {
    let mut keys: Vec<usize> = axes
        .iter()
        .filter_map(|axis| match axis {
            Axis::Sweep(k) => Some(*k),
            Axis::Local(_) => None,
        })
        .collect();
    keys.sort_unstable();
    keys
}

/// One axis of a node's `foreach`.
#[derive(Debug)]
pub(crate) enum Axis {
    /// A key of the pipeline's sweep (its index): its values among the selected points.
    Sweep(usize),
    /// An axis of the node's own, with its values.
    Local(LocalAxis),
}

/// A node-local axis: `unit: [top_k, log]` in a `foreach` mapping.
#[derive(Debug)]
pub(crate) struct LocalAxis {
    pub name: String,
    pub loc: Loc,
    pub values: Vec<Scalar>,
    /// `values` as text, for ids and for matching dependencies.
    pub texts: Vec<String>,
}

impl Axis {
    pub fn name<'a>(&'a self, sweep: &'a Sweep) -> &'a str {
        match self {
            Axis::Sweep(k) => &sweep.keys[*k],
            Axis::Local(local) => &local.name,
        }
    }

    pub fn local(&self) -> Option<&LocalAxis> {
        match self {
            Axis::Sweep(_) => None,
            Axis::Local(local) => Some(local),
        }
    }
}

pub(crate) struct Loader<'o> {
    pub opts: &'o LoadOptions,
    /// The kinds nodes may have; each checks its nodes' configurations.
    pub kinds: &'o dyn Kinds,
    pub src: Sources,
    pub diags: Vec<(Loc, Diagnostic)>,
    /// Errors repeated across instances: (position, message) → (index in `diags`, repeats).
    repeats: HashMap<(Loc, String), (usize, usize)>,
    pub entry: u32,
    /// Params lowered by a testbed cap.
    pub adapted: Vec<crate::Adaptation>,
    /// Every `inputs:` pattern (and implied input) looked up, with the files it named: what a remembered
    /// load must find again to be reused.
    pub input_lookups: Vec<(String, Vec<PathBuf>)>,
}

impl<'o> Loader<'o> {
    pub fn new(root: PathBuf, opts: &'o LoadOptions, kinds: &'o dyn Kinds) -> Loader<'o> {
        Loader {
            opts,
            kinds,
            src: Sources::new(root),
            diags: Vec::new(),
            repeats: HashMap::new(),
            entry: 0,
            adapted: Vec::new(),
            input_lookups: Vec::new(),
        }
    }

    pub fn error(&mut self, loc: Loc, message: impl Into<String>, hint: Option<String>) {
        let diagnostic = self.src.diag(loc, message).with_hint(hint);
        self.diags.push((loc, diagnostic));
    }

    pub fn push(&mut self, loc: Loc, diagnostic: Diagnostic) {
        self.diags.push((loc, diagnostic));
    }

    /// An error that may repeat for many instances: reported once (`message`, with ` (instance `ID`)` when
    /// given), with a count of the other instances where the same `message` came up.
    pub fn instance_error(
        &mut self,
        loc: Loc,
        message: String,
        hint: Option<String>,
        instance: Option<&str>,
    ) {
        let key = (loc, message.clone());
        if let Some((_, repeats)) = self.repeats.get_mut(&key) {
            *repeats += 1;
            return;
        }
        let shown = match instance {
            Some(id) => format!("{message} (instance `{id}`)"),
            None => message,
        };
        self.repeats.insert(key, (self.diags.len(), 0));
        self.error(loc, shown, hint);
    }

    /// All diagnostics, in file order then position, without repeats.
    pub fn finish(mut self) -> Diagnostics {
        for (index, repeats) in self.repeats.values() {
            if *repeats > 0
                && let Some((_, d)) = self.diags.get_mut(*index)
            {
                let plural = if *repeats == 1 { "" } else { "s" };
                d.notes.push(format!(
                    "the same error occurs in {repeats} more instance{plural}"
                ));
            }
        }
        let mut diags = std::mem::take(&mut self.diags);
        diags.sort_by_key(|(loc, _)| (loc.file, loc.line, loc.col));
        let mut seen = HashSet::new();
        diags.retain(|(loc, d)| seen.insert((*loc, d.message.clone())));
        Diagnostics(diags.into_iter().map(|(_, d)| d).collect())
    }

    /// Reads `path` (absolute) and its `base:` chain, merged. `None` when something could not be read or
    /// parsed (the diagnostic is recorded).
    pub fn load_with_base(
        &mut self,
        path: &Path,
        at: Option<Loc>,
        chain: &mut Vec<PathBuf>,
    ) -> Option<Node> {
        let file = match self.src.read(path) {
            Ok(file) => file,
            Err(error) => {
                let shown = self.src.shown(path);
                let message = format!("cannot read `{}`: {error}", shown.display());
                match at {
                    Some(loc) => self.error(loc, message, None),
                    None => self.push(Loc::unknown(u32::MAX), Diagnostic::new(message)),
                }
                return None;
            }
        };
        let tree = match self.src.parse_or_take(file) {
            Ok(tree) => tree,
            Err(diagnostic) => {
                let loc = Loc {
                    file,
                    line: diagnostic.line as u32,
                    col: diagnostic.column as u32,
                };
                self.push(loc, *diagnostic);
                return None;
            }
        };
        self.with_base(path, file, tree, chain)
    }

    /// `tree`, file `file` (read from `path`) as parsed, merged over the files its `base:` names, as
    /// [`Loader::load_with_base`] returns it: for a caller that has parsed the file already.
    pub fn with_base(
        &mut self,
        path: &Path,
        file: u32,
        tree: Node,
        chain: &mut Vec<PathBuf>,
    ) -> Option<Node> {
        let tree = match tree.val {
            Val::Map(_) => tree,
            Val::Null => Node::map(
                Loc {
                    file,
                    line: 1,
                    col: 1,
                },
                Vec::new(),
            ),
            _ => {
                let what = tree.describe();
                self.error(
                    tree.loc,
                    format!("a pipeline file must be a mapping of keys, found {what}"),
                    None,
                );
                return None;
            }
        };
        let Some(base) = tree.get("base") else {
            return Some(tree);
        };
        let Some(relative) = base.as_str() else {
            // Reported by the typed check of the document.
            return Some(tree);
        };
        let base_loc = base.loc;
        let base_path = self.relative_to(file, relative);
        if self.outside_root(&base_path) {
            self.error(
                base_loc,
                format!("`base:` file `{relative}` is outside the project"),
                Some(OUTSIDE_HINT.to_owned()),
            );
            return None;
        }
        chain.push(path.to_path_buf());
        if chain.contains(&base_path) {
            let mut names: Vec<String> = chain
                .iter()
                .map(|p| self.src.shown(p).display().to_string())
                .collect();
            names.push(self.src.shown(&base_path).display().to_string());
            self.error(
                base_loc,
                format!("`base:` files form a cycle: {}", names.join(" -> ")),
                None,
            );
            return None;
        }
        let under = self.load_with_base(&base_path, Some(base_loc), chain)?;
        chain.pop();
        Some(merge(under.without("base"), tree))
    }

    /// Whether `path` (from [`Loader::relative_to`]: canonical when it exists) is an existing file outside the
    /// project root, symlinks followed. A missing file is left for the read to report.
    fn outside_root(&self, path: &Path) -> bool {
        path.exists() && !path.starts_with(&self.src.root)
    }

    /// A path written in file `file`, relative to that file's directory, made absolute.
    pub fn relative_to(&self, file: u32, relative: &str) -> PathBuf {
        let dir = self
            .src
            .path(file)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let joined = dir.join(relative);
        std::fs::canonicalize(&joined).unwrap_or(joined)
    }

    /// Turns a deserialization error into a diagnostic.
    pub fn de_error(&mut self, error: &DeError, scope: Scope<'_>, fallback: Loc) {
        let (loc, message, hint) = de_message(error, scope, fallback);
        self.error(loc, message, hint);
    }

    /// A template error in a string of `owner` (a node or param), for one instance when `instance` is given.
    pub fn template_error(
        &mut self,
        at: Loc,
        error: TemplateError,
        owner: &str,
        instance: Option<&str>,
    ) {
        let loc = error.loc.unwrap_or(at);
        let message = match instance {
            Some(_) => error.message,
            None => format!("{} ({owner})", error.message),
        };
        self.instance_error(loc, message, error.hint, instance);
    }

    // ---------------------------------------------------------------------------------------------------

    /// The whole load. `None` when there were errors (they are in `diags`).
    pub fn run(&mut self, entry: &Path) -> Option<(Pipeline, Graph)> {
        let entry_path = self.src.absolute(entry);
        let tree = self.load_with_base(&entry_path, None, &mut Vec::new())?;
        self.entry = self.src.id_of(&entry_path).unwrap_or(0);
        let tree = self.apply_variant(tree);
        let (doc, errors) = deserialize_all::<Document>(&tree);
        for error in &errors {
            self.de_error(error, Scope::Top, tree.loc);
        }
        let doc = doc?;
        let name = match &doc.pipeline {
            Some(name) => name.clone(),
            None => {
                let shown = self.src.shown_path(self.entry).display().to_string();
                self.error(
                    Loc::unknown(self.entry),
                    format!(
                        "`{shown}` has no `pipeline:` key, so it is a node set, not a pipeline"
                    ),
                    Some(
                        "add `pipeline: NAME`, or import this file from a pipeline with `uses:`"
                            .to_owned(),
                    ),
                );
                return None;
            }
        };
        if !is_name(&name) {
            self.error(
                name.loc,
                format!(
                    "pipeline name `{}` may only use A-Z a-z 0-9 _ . -",
                    name.value
                ),
                None,
            );
        }

        // Node sets, then the pipeline's own nodes.
        let mut sets = Vec::new();
        let mut seen_sets = HashSet::from([entry_path.clone()]);
        if !self.load_uses(&doc.uses, &mut sets, &mut seen_sets, &mut vec![entry_path]) {
            // A node set that cannot be read would only cause follow-up errors (its nodes "missing").
            return None;
        }
        let mut params = Params::default();
        let mut decls: Vec<Decl> = Vec::new();
        for set in &sets {
            for (key, value) in set.params.iter() {
                params.set(Param {
                    name: key.value.clone(),
                    key_loc: key.loc,
                    value: value.0.clone(),
                    from_cli: false,
                    from_set: true,
                });
            }
            decls.extend(set.nodes.iter().map(|(k, v)| Decl {
                name: k.clone(),
                body: v.0.clone(),
            }));
        }
        for (key, value) in doc.params.iter() {
            params.set(Param {
                name: key.value.clone(),
                key_loc: key.loc,
                value: value.0.clone(),
                from_cli: false,
                from_set: false,
            });
        }
        decls.extend(doc.nodes.iter().map(|(k, v)| Decl {
            name: k.clone(),
            body: v.0.clone(),
        }));

        let mut sweep = self.build_sweep(&doc, &tree, &mut params);
        self.apply_cli_params(&mut params, &sweep, &tree);
        self.apply_caps(&mut params);
        self.analyse_params(&mut params, &sweep);
        let document_ok = self.diags.is_empty();

        let mut first_seen: HashMap<String, Loc> = HashMap::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, decl) in decls.iter().enumerate() {
            if let Some(first) = first_seen.get(&decl.name.value) {
                let note = format!("first declared at {}", self.src.describe(*first));
                let d = self
                    .src
                    .diag(
                        decl.name.loc,
                        format!("node `{}` is declared twice", decl.name.value),
                    )
                    .with_hint(Some(
                        "node names are shared by the pipeline and its `uses:` files".to_owned(),
                    ))
                    .with_note(note);
                self.push(decl.name.loc, d);
            } else {
                first_seen.insert(decl.name.value.clone(), decl.name.loc);
                index.insert(decl.name.value.clone(), i);
            }
        }
        let defs: Vec<Option<NodeDef>> = decls
            .iter()
            .map(|decl| self.validate_node(decl, &index, &sweep, &params, document_ok))
            .collect();
        let targets = self.check_targets(&doc, &index);
        if !document_ok {
            return None;
        }
        let all_nodes_ok = defs.iter().all(Option::is_some) && self.diags.is_empty();

        let mut expander = crate::expand::Expander::new(self, &mut sweep, &params);
        let (nodes, instance_ids) = expander.expand(&defs, &decls);
        let lookups = expander.input_lookups();
        self.input_lookups = lookups;
        let targets = targets
            .into_iter()
            .map(|(target, names)| {
                let ids = names
                    .iter()
                    .flat_map(|&i| instance_ids[i].iter().cloned())
                    .collect();
                (target, ids)
            })
            .collect();
        let mut pipeline = Pipeline {
            name: name.value,
            root: self.src.root.clone(),
            sources: self.src.files.iter().map(|f| f.path.clone()).collect(),
            nodes,
            targets,
        };
        if !all_nodes_ok || !self.diags.is_empty() {
            return None;
        }
        match Graph::from_pipeline(&mut pipeline) {
            Ok(graph) => Some((pipeline, graph)),
            Err(errors) => {
                self.graph_errors(errors);
                None
            }
        }
    }

    fn apply_variant(&mut self, tree: Node) -> Node {
        let Some(name) = &self.opts.variant else {
            return tree;
        };
        let variants = tree.entry("variants");
        let body = variants
            .and_then(|(_, v)| v.get(name))
            .filter(|b| b.is_map())
            .cloned();
        match body {
            Some(body) => {
                // The selected variant is checked where it lands, so it is not checked twice.
                let rest = match tree.entry("variants") {
                    Some((key, all)) => {
                        let kept = all.without(name);
                        let mut entries: Vec<(Node, Node)> = tree.entries().to_vec();
                        for entry in &mut entries {
                            if entry.0.as_str() == Some("variants") {
                                *entry = (key.clone(), kept.clone());
                            }
                        }
                        Node::map(tree.loc, entries)
                    }
                    None => tree,
                };
                merge(rest, body)
            }
            None => {
                let declared: Vec<&str> = variants
                    .map(|(_, v)| v.entries().iter().filter_map(|(k, _)| k.as_str()).collect())
                    .unwrap_or_default();
                if variants.and_then(|(_, v)| v.get(name)).is_some() {
                    return tree; // not a mapping: the typed check reports it
                }
                let loc = variants.map_or(Loc::unknown(self.entry), |(k, _)| k.loc);
                let hint = did_you_mean(name, declared.iter().copied()).or_else(|| {
                    Some(if declared.is_empty() {
                        "this pipeline declares no `variants:`".to_owned()
                    } else {
                        format!(
                            "declared variants: {}",
                            list_names(declared.iter().copied())
                        )
                    })
                });
                self.error(loc, format!("unknown variant `{name}`"), hint);
                tree
            }
        }
    }

    /// Reads the node sets named by `uses` (depth first, each once). False when one could not be read.
    fn load_uses(
        &mut self,
        uses: &[Sp<String>],
        sets: &mut Vec<Document>,
        seen: &mut HashSet<PathBuf>,
        stack: &mut Vec<PathBuf>,
    ) -> bool {
        let mut all_read = true;
        for used in uses {
            let path = self.relative_to(used.loc.file, &used.value);
            if self.outside_root(&path) {
                self.error(
                    used.loc,
                    format!("`uses:` file `{}` is outside the project", used.value),
                    Some(OUTSIDE_HINT.to_owned()),
                );
                all_read = false;
                continue;
            }
            if stack.contains(&path) {
                let mut names: Vec<String> = stack
                    .iter()
                    .map(|p| self.src.shown(p).display().to_string())
                    .collect();
                names.push(self.src.shown(&path).display().to_string());
                self.error(
                    used.loc,
                    format!("`uses:` files form a cycle: {}", names.join(" -> ")),
                    None,
                );
                continue;
            }
            if !seen.insert(path.clone()) {
                continue;
            }
            let Some(tree) = self.load_with_base(&path, Some(used.loc), &mut Vec::new()) else {
                all_read = false;
                continue;
            };
            let shown = self.src.shown(&path).display().to_string();
            for (key, _) in tree.entries() {
                let key_name = key.as_str().unwrap_or_default();
                if matches!(
                    key_name,
                    "pipeline" | "sweep" | "exclude" | "variants" | "targets"
                ) {
                    let message = if key_name == "pipeline" {
                        format!(
                            "`{shown}` is a pipeline; `uses:` imports node sets (files without `pipeline:`)"
                        )
                    } else {
                        format!("`{key_name}` is not allowed in node set `{shown}`")
                    };
                    self.error(
                        key.loc,
                        message,
                        Some("a node set has only `description`, `base`, `uses`, `params` and `nodes`".to_owned()),
                    );
                }
            }
            let (doc, errors) = deserialize_all::<Document>(&tree);
            for error in &errors {
                self.de_error(error, Scope::Top, tree.loc);
            }
            let Some(doc) = doc else { continue };
            stack.push(path);
            all_read &= self.load_uses(&doc.uses, sets, seen, stack);
            stack.pop();
            sets.push(doc);
        }
        all_read
    }

    /// Checks the sweep, `--only` and `exclude`, and fills the points.
    fn build_sweep(&mut self, doc: &Document, tree: &Node, params: &mut Params) -> Sweep {
        let mut sweep = Sweep::default();
        for (key, values) in doc.sweep.iter() {
            if !is_identifier(&key.value) {
                self.error(
                    key.loc,
                    format!(
                        "sweep key `{}` must be an identifier (letters, digits, `_`)",
                        key.value
                    ),
                    None,
                );
            }
            if let Some(&i) = params.index.get(&key.value) {
                if params.list[i].from_set {
                    // A node set's default gives way to the sweep.
                    params.remove(&key.value);
                } else {
                    let param_loc = params.list[i].key_loc;
                    let d = self
                        .src
                        .diag(
                            param_loc,
                            format!("`{}` is both a param and a sweep key", key.value),
                        )
                        .with_hint(Some("remove it from `params:` or from `sweep:`".to_owned()))
                        .with_note(format!("swept at {}", self.src.describe(key.loc)));
                    self.push(param_loc, d);
                }
            }
            if values.is_empty() {
                self.error(
                    values.loc,
                    format!("sweep key `{}` has no values", key.value),
                    None,
                );
            }
            let texts =
                self.axis_texts(values, "sweep value", &format!("sweep key `{}`", key.value));
            sweep.keys.push(key.value.clone());
            sweep.key_locs.push(key.loc);
            sweep
                .values
                .push(values.iter().map(|v| v.value.clone()).collect());
            sweep.texts.push(texts);
        }

        // --only
        let sweep_loc = tree
            .entry("sweep")
            .map_or(Loc::unknown(self.entry), |(k, _)| k.loc);
        let mut allowed: Vec<Vec<u32>> = sweep
            .texts
            .iter()
            .map(|t| (0..t.len() as u32).collect())
            .collect();
        for filter in &self.opts.only {
            let Some(k) = sweep.key_index(&filter.key) else {
                let hint = did_you_mean(&filter.key, sweep.keys.iter().map(String::as_str))
                    .or_else(|| {
                        Some(if sweep.keys.is_empty() {
                            "this pipeline sweeps nothing".to_owned()
                        } else {
                            format!(
                                "swept keys: {}",
                                list_names(sweep.keys.iter().map(String::as_str))
                            )
                        })
                    });
                self.error(
                    sweep_loc,
                    format!("`--only {}`: `{}` is not a sweep key", filter, filter.key),
                    hint,
                );
                continue;
            };
            let mut keep = Vec::new();
            for value in &filter.values {
                match sweep.texts[k].iter().position(|t| t == value) {
                    Some(i) => keep.push(i as u32),
                    None => {
                        let texts = sweep.texts[k].iter().map(String::as_str);
                        let hint = if value.chars().all(|c| c.is_ascii_digit() || c == '-') {
                            None
                        } else {
                            did_you_mean(value, texts.clone())
                        };
                        let hint = hint.or_else(|| {
                            Some(format!("values of `{}`: {}", filter.key, list_names(texts)))
                        });
                        self.error(
                            sweep.key_locs[k],
                            format!(
                                "`--only {}`: `{value}` is not a value of sweep key `{}`",
                                filter, filter.key
                            ),
                            hint,
                        );
                    }
                }
            }
            allowed[k].retain(|i| keep.contains(i));
        }

        // exclude
        let mut rules: Vec<Rule> = Vec::new();
        for rule in &doc.exclude {
            let mut parsed: Rule = Vec::new();
            let mut usable = true;
            for (key, values) in rule.iter() {
                let Some(k) = sweep.key_index(&key.value) else {
                    let hint = did_you_mean(&key.value, sweep.keys.iter().map(String::as_str));
                    self.error(
                        key.loc,
                        format!("`exclude` names `{}`, which is not a sweep key", key.value),
                        hint,
                    );
                    usable = false;
                    continue;
                };
                let wanted: HashSet<String> =
                    values.values().iter().map(Scalar::to_string).collect();
                let indices = sweep.texts[k]
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| wanted.contains(*t))
                    .map(|(i, _)| i as u32)
                    .collect();
                parsed.push((k, indices));
            }
            if rule.is_empty() {
                self.error(
                    rule.loc,
                    "an `exclude` rule with no keys would exclude every point",
                    None,
                );
                usable = false;
            }
            if usable {
                rules.push(parsed);
            }
        }
        let count = Sweep::product_len(&allowed);
        if count > MAX_POINTS {
            self.error(
                sweep_loc,
                format!("the sweep has {count} points; at most {MAX_POINTS} are allowed"),
                None,
            );
            return sweep;
        }
        sweep.fill_points(&allowed, &rules);
        sweep
    }

    /// The values of a sweep key or local axis as text (for ids), each checked: usable in an id, and not twice.
    /// `what` names a value (`sweep value`), `owner` the axis (`sweep key `m``).
    fn axis_texts(&mut self, values: &[Sp<Scalar>], what: &str, owner: &str) -> Vec<String> {
        let mut texts: Vec<String> = Vec::with_capacity(values.len());
        let mut distinct: HashSet<String> = HashSet::with_capacity(values.len());
        for value in values {
            let text = value.value.to_string();
            if text.contains([',', '=', '[', ']'])
                || text.contains(char::is_whitespace)
                || text.is_empty()
            {
                self.error(
                    value.loc,
                    format!("{what} `{text}` cannot be used in node ids"),
                    Some(format!(
                        "{what}s may not be empty or contain spaces, `,`, `=`, `[` or `]`"
                    )),
                );
            }
            if !distinct.insert(text.clone()) {
                self.error(
                    value.loc,
                    format!("value `{text}` appears twice in {owner}"),
                    None,
                );
            }
            texts.push(text);
        }
        texts
    }

    /// `--set NAME=VALUE` overrides (applied last).
    fn apply_cli_params(&mut self, params: &mut Params, sweep: &Sweep, tree: &Node) {
        let params_loc = tree
            .entry("params")
            .map_or(Loc::unknown(self.entry), |(k, _)| k.loc);
        for (name, value) in &self.opts.set {
            if sweep.key_index(name).is_some() {
                self.error(
                    Loc::unknown(self.entry),
                    format!("`--set {name}=…`: `{name}` is a sweep key, not a param"),
                    Some(format!("pick sweep values with `--only {name}=V1,V2`")),
                );
                continue;
            }
            if !params.index.contains_key(name) {
                let hint =
                    did_you_mean(name, params.index.keys().map(String::as_str)).or_else(|| {
                        Some(format!(
                            "declared params: {}",
                            list_names(params.list.iter().map(|p| p.name.as_str()))
                        ))
                    });
                self.error(
                    params_loc,
                    format!("`--set {name}=…`: this pipeline has no param `{name}`"),
                    hint,
                );
                continue;
            }
            params.set(Param {
                name: name.clone(),
                key_loc: Loc::unknown(self.entry),
                value: Node::from_json(value, Loc::unknown(self.entry)),
                from_cli: true,
                from_set: false,
            });
        }
    }

    /// Testbed adaptation: lowers each declared param holding a plain number above its cap, then replaces the
    /// overridden ones. Params the pipeline does not declare are left alone: a testbed adapts values, it never
    /// adds any.
    fn apply_caps(&mut self, params: &mut Params) {
        for (name, cap) in &self.opts.caps {
            let Some(&i) = params.index.get(name) else {
                continue;
            };
            let param = &mut params.list[i];
            let (current, lowered) = match param.value.val {
                Val::Int(v) if (v as f64) > *cap => {
                    let to = if cap.fract() == 0.0 {
                        Val::Int(*cap as i64)
                    } else {
                        Val::Float(*cap)
                    };
                    (serde_json::json!(v), to)
                }
                Val::Float(v) if v > *cap => (serde_json::json!(v), Val::Float(*cap)),
                _ => continue,
            };
            let to = match lowered {
                Val::Int(v) => serde_json::json!(v),
                Val::Float(v) => serde_json::json!(v),
                _ => serde_json::Value::Null,
            };
            param.value.val = lowered;
            self.adapted.push(crate::Adaptation {
                param: name.clone(),
                from: current,
                to,
            });
        }
        for (name, value) in &self.opts.overrides {
            let Some(&i) = params.index.get(name) else {
                continue;
            };
            let param = &mut params.list[i];
            let replacement = Node::from_json(value, param.value.loc);
            if replacement.val == param.value.val {
                continue;
            }
            self.adapted.push(crate::Adaptation {
                param: name.clone(),
                from: param.value.to_json(),
                to: value.clone(),
            });
            param.value = replacement;
        }
    }

    /// Checks every global param's templates and works out which sweep keys each depends on.
    fn analyse_params(&mut self, params: &mut Params, sweep: &Sweep) {
        let mut refs: Vec<Option<Vec<String>>> = Vec::with_capacity(params.list.len());
        for param in &params.list {
            if !param.from_cli && !is_identifier(&param.name) {
                self.error(
                    param.key_loc,
                    format!(
                        "param name `{}` must be an identifier (letters, digits, `_`)",
                        param.name
                    ),
                    None,
                );
            }
            let owner = if param.from_cli {
                format!("param `{}`, set on the command line", param.name)
            } else {
                format!("param `{}`", param.name)
            };
            let mut names = Vec::new();
            let mut ok = true;
            for (string, loc) in strings_of(&param.value) {
                match template::parse(string) {
                    Ok(t) => {
                        for name in t.names() {
                            if params.index.contains_key(name) || sweep.key_index(name).is_some() {
                                names.push(name.to_owned());
                            } else {
                                let candidates = params
                                    .index
                                    .keys()
                                    .map(String::as_str)
                                    .chain(sweep.keys.iter().map(String::as_str));
                                let hint = did_you_mean(name, candidates);
                                self.error(
                                    loc,
                                    format!("unknown name `{name}` in template ({owner})"),
                                    hint,
                                );
                                ok = false;
                            }
                        }
                    }
                    Err(error) => {
                        self.template_error(loc, error, &owner, None);
                        ok = false;
                    }
                }
            }
            refs.push(ok.then_some(names));
        }
        // Depth-first closure over param references, reporting cycles.
        #[derive(Clone)]
        enum State {
            New,
            Busy,
            Done(Option<BTreeSet<usize>>),
        }
        let mut state = vec![State::New; params.list.len()];
        fn visit(
            i: usize,
            params: &Params,
            sweep: &Sweep,
            refs: &[Option<Vec<String>>],
            state: &mut Vec<State>,
            stack: &mut Vec<usize>,
            cycles: &mut Vec<Vec<usize>>,
        ) -> Option<BTreeSet<usize>> {
            match &state[i] {
                State::Done(result) => return result.clone(),
                State::Busy => {
                    let from = stack.iter().position(|&s| s == i).unwrap_or(0);
                    cycles.push(stack[from..].to_vec());
                    return None;
                }
                State::New => {}
            }
            state[i] = State::Busy;
            stack.push(i);
            let mut keys = Some(BTreeSet::new());
            for name in refs[i].iter().flatten() {
                let found = if let Some(k) = sweep.key_index(name) {
                    Some(BTreeSet::from([k]))
                } else if let Some(&j) = params.index.get(name) {
                    visit(j, params, sweep, refs, state, stack, cycles)
                } else {
                    None
                };
                keys = match (keys, found) {
                    (Some(mut all), Some(more)) => {
                        all.extend(more);
                        Some(all)
                    }
                    _ => None,
                };
            }
            if refs[i].is_none() {
                keys = None;
            }
            stack.pop();
            state[i] = State::Done(keys.clone());
            keys
        }
        let mut cycles = Vec::new();
        let mut sweeps = Vec::with_capacity(params.list.len());
        for i in 0..params.list.len() {
            sweeps.push(visit(
                i,
                params,
                sweep,
                &refs,
                &mut state,
                &mut Vec::new(),
                &mut cycles,
            ));
        }
        for cycle in cycles {
            let mut names: Vec<&str> = cycle
                .iter()
                .map(|&i| params.list[i].name.as_str())
                .collect();
            names.push(names[0]);
            let first = &params.list[cycle[0]];
            self.error(
                first.key_loc,
                format!(
                    "params refer to each other in a cycle: {}",
                    names.join(" -> ")
                ),
                None,
            );
        }
        params.sweeps = sweeps;
    }

    /// Validates one node declaration: name, keys (common and kind), kind, foreach, deps, params, templates.
    /// `references` is false when the document's sweep or params are broken: names in `foreach` and in
    /// templates are then not checked against them.
    fn validate_node(
        &mut self,
        decl: &Decl,
        index: &HashMap<String, usize>,
        sweep: &Sweep,
        params: &Params,
        references: bool,
    ) -> Option<NodeDef> {
        let name = decl.name.value.as_str();
        let at = decl.name.loc;
        if !is_name(name) {
            self.error(
                at,
                format!("node name `{name}` may only use A-Z a-z 0-9 _ . -"),
                None,
            );
        }
        if !decl.body.is_map() {
            let found = decl.body.describe();
            self.error(
                decl.body.loc,
                format!("node `{name}` must be a mapping of keys, found {found}"),
                None,
            );
            return None;
        }
        let common_fields = common_fields();
        let (common_entries, kind_entries): (Entries, Entries) = decl
            .body
            .entries()
            .iter()
            .cloned()
            .partition(|(k, _)| k.as_str().is_some_and(|k| common_fields.contains(&k)));
        let kind_map = Node::map(decl.body.loc, kind_entries);
        let (common, errors) =
            deserialize_all::<NodeCommon>(&Node::map(decl.body.loc, common_entries));
        for error in &errors {
            self.de_error(error, Scope::Node { name, at }, at);
        }
        let mut ok = errors.is_empty();

        // The kind, from the tree (the typed keys may be broken); its keys are checked per instance, resolved.
        let kind_node = decl.body.get("kind");
        let kind = match kind_node.and_then(Node::as_str) {
            Some(kind_name) if self.kinds.executor(kind_name).is_some() => {
                Some(kind_name.to_owned())
            }
            Some(kind_name) => {
                let known = self.kinds.names();
                let hint = did_you_mean(kind_name, known.iter().copied());
                let loc = kind_node.map_or(at, |n| n.loc);
                self.error(
                    loc,
                    format!(
                        "unknown kind `{kind_name}` in node `{name}`; known kinds: {}",
                        list_names(known.iter().copied())
                    ),
                    hint,
                );
                None
            }
            None => None,
        };
        ok &= kind.is_some();
        let fixed_config = (!strings_of(&kind_map)
            .iter()
            .any(|(s, _)| template::has_braces(s)))
        .then(|| crate::expand::config_of(&kind_map));
        // The rest is checked even when the kind's keys are wrong, so one run reports it all.
        let common = common?;

        // foreach
        let (foreach, foreach_ok) =
            self.check_foreach(name, &common.foreach, sweep, params, references);
        ok &= foreach_ok;

        // deps
        let mut deps = Vec::new();
        for dep in &common.deps {
            match index.get(&dep.value) {
                Some(&i) => {
                    if !deps.contains(&i) {
                        deps.push(i);
                    }
                }
                None => {
                    let hint = did_you_mean(&dep.value, index.keys().map(String::as_str));
                    self.error(
                        dep.loc,
                        format!(
                            "node `{name}` depends on `{}`, which no node declares",
                            dep.value
                        ),
                        hint,
                    );
                    ok = false;
                }
            }
        }

        // Node params and templates.
        let node_params: Vec<(String, Node)> = common
            .params
            .iter()
            .map(|(k, v)| (k.value.clone(), v.0.clone()))
            .collect();
        for (key, _) in common.params.iter() {
            if !is_identifier(&key.value) {
                self.error(
                    key.loc,
                    format!(
                        "param name `{}` must be an identifier (letters, digits, `_`)",
                        key.value
                    ),
                    None,
                );
                ok = false;
            } else if sweep.key_index(&key.value).is_some() {
                self.error(
                    key.loc,
                    format!(
                        "param `{}` of node `{name}` has the name of a sweep key",
                        key.value
                    ),
                    Some("rename it; `{…}` in this node would be ambiguous".to_owned()),
                );
                ok = false;
            } else if foreach
                .iter()
                .filter_map(Axis::local)
                .any(|axis| axis.name == key.value)
            {
                self.error(
                    key.loc,
                    format!(
                        "param `{}` of node `{name}` has the name of one of its `foreach` axes",
                        key.value
                    ),
                    Some("rename it; `{…}` in this node would be ambiguous".to_owned()),
                );
                ok = false;
            }
        }
        // With a broken sweep or params, name checks would only echo that (the node is not expanded anyway).
        if references
            && !self.check_node_templates(
                name,
                &common,
                &kind_map,
                &node_params,
                &foreach,
                sweep,
                params,
            )
        {
            ok = false;
        }
        // Values without templates are checked now (those with templates, per instance).
        for text in common.resources.iter().filter(|t| !template::has_braces(t)) {
            if let Err(message) = check_resource(name, text) {
                self.error(text.loc, message, None);
                ok = false;
            }
        }
        for output in common.outputs.iter().filter(|t| !template::has_braces(t)) {
            if let Err((message, hint)) = check_output(name, output) {
                self.error(output.loc, message, hint);
                ok = false;
            }
        }
        for (what, value) in [("timeout", &common.timeout), ("estimate", &common.estimate)] {
            let Some(value) = value else { continue };
            if let DurationValue::Text(text) = &value.value
                && template::has_braces(text)
            {
                continue;
            }
            if let Err(message) = check_duration(name, what, &value.value) {
                self.error(value.loc, message, None);
                ok = false;
            }
        }
        let kind = kind?;
        ok.then(|| NodeDef {
            name: name.to_owned(),
            name_loc: at,
            common,
            kind,
            body: decl.body.clone(),
            kind_map,
            fixed_config,
            foreach,
            deps,
            params: node_params,
        })
    }

    /// The axes of a node's `foreach`: a list of sweep keys (in sweep order), or a mapping of `KEY: sweep` and
    /// node-local `KEY: [V1, V2]` (in the order written), and whether they are all fine (problems are reported,
    /// except names that cannot be checked because the sweep or params are broken: `references` is false).
    /// A broken axis is still returned (without values), so that templates naming it are not reported too.
    fn check_foreach(
        &mut self,
        name: &str,
        foreach: &Foreach,
        sweep: &Sweep,
        params: &Params,
        references: bool,
    ) -> (Vec<Axis>, bool) {
        let mut ok = true;
        let broken = |key: &Sp<String>| {
            Axis::Local(LocalAxis {
                name: key.value.clone(),
                loc: key.loc,
                values: Vec::new(),
                texts: Vec::new(),
            })
        };
        let mut axes = Vec::new();
        let not_swept = |key: &str| {
            did_you_mean(key, sweep.keys.iter().map(String::as_str)).or_else(|| {
                params.index.contains_key(key).then(|| {
                    format!("`{key}` is a param; only sweep keys and node-local axes can be in `foreach`")
                })
            })
        };
        match foreach {
            Foreach::Keys(keys) => {
                let mut indices = Vec::new();
                for key in keys {
                    match sweep.key_index(&key.value) {
                        Some(k) => indices.push(k),
                        None if !references => ok = false,
                        None => {
                            let hint = not_swept(&key.value).or_else(|| {
                                Some(format!(
                                    "a node-local axis is written as a mapping: `foreach: {{{}: [V1, V2]}}`",
                                    key.value
                                ))
                            });
                            self.error(
                                key.loc,
                                format!(
                                    "node `{name}` has `{}` in `foreach`, but it is not a sweep key",
                                    key.value
                                ),
                                hint,
                            );
                            ok = false;
                        }
                    }
                }
                indices.sort_unstable();
                indices.dedup();
                axes.extend(indices.into_iter().map(Axis::Sweep));
            }
            Foreach::Axes(entries) => {
                for (key, value) in entries.iter() {
                    match &value.value {
                        AxisValues::Word(word) if word == "sweep" => {
                            match sweep.key_index(&key.value) {
                                Some(k) => axes.push(Axis::Sweep(k)),
                                None if !references => {
                                    axes.push(broken(key));
                                    ok = false;
                                }
                                None => {
                                    axes.push(broken(key));
                                    let hint = not_swept(&key.value).or_else(|| {
                                        Some(if sweep.keys.is_empty() {
                                            format!("this pipeline sweeps nothing; give the axis its own values: `{}: [V1, V2]`", key.value)
                                        } else {
                                            format!(
                                                "swept keys: {}; an axis of the node's own is written `{}: [V1, V2]`",
                                                list_names(sweep.keys.iter().map(String::as_str)),
                                                key.value
                                            )
                                        })
                                    });
                                    self.error(
                                        value.loc,
                                        format!(
                                            "node `{name}` has `{}: sweep` in `foreach`, but `{}` is not a sweep key",
                                            key.value, key.value
                                        ),
                                        hint,
                                    );
                                    ok = false;
                                }
                            }
                        }
                        AxisValues::Word(word) => {
                            axes.push(broken(key));
                            let hint = did_you_mean(word, ["sweep"]).or_else(|| {
                                Some(format!(
                                    "write `{}: sweep` for the pipeline's sweep key, or `{}: [{word}]` for an axis with one value",
                                    key.value, key.value
                                ))
                            });
                            self.error(
                                value.loc,
                                format!(
                                    "`{}` in the `foreach` of node `{name}` must be `sweep` or a list of values, found the string `{word}`",
                                    key.value
                                ),
                                hint,
                            );
                            ok = false;
                        }
                        AxisValues::Values(values) => {
                            if let Some(k) = sweep.key_index(&key.value) {
                                let d = self
                                    .src
                                    .diag(
                                        key.loc,
                                        format!(
                                            "node `{name}` gives `{}` values of its own in `foreach`, but `{}` is a sweep key",
                                            key.value, key.value
                                        ),
                                    )
                                    .with_hint(Some(format!(
                                        "write `{}: sweep` to expand over the sweep's values (narrow them with `exclude` or `--only`), or rename this axis",
                                        key.value
                                    )))
                                    .with_note(format!(
                                        "swept at {}",
                                        self.src.describe(sweep.key_locs[k])
                                    ));
                                self.push(key.loc, d);
                                axes.push(Axis::Sweep(k));
                                ok = false;
                                continue;
                            }
                            if !is_identifier(&key.value) {
                                self.error(
                                    key.loc,
                                    format!(
                                        "axis name `{}` must be an identifier (letters, digits, `_`)",
                                        key.value
                                    ),
                                    None,
                                );
                                ok = false;
                            }
                            if values.is_empty() {
                                self.error(
                                    value.loc,
                                    format!(
                                        "local axis `{}` of node `{name}` has no values",
                                        key.value
                                    ),
                                    Some(
                                        "list at least one value, e.g. `unit: [top_k]`".to_owned(),
                                    ),
                                );
                                axes.push(broken(key));
                                ok = false;
                                continue;
                            }
                            let errors = self.diags.len();
                            let texts = self.axis_texts(
                                values,
                                "axis value",
                                &format!("local axis `{}` of node `{name}`", key.value),
                            );
                            ok &= self.diags.len() == errors;
                            axes.push(Axis::Local(LocalAxis {
                                name: key.value.clone(),
                                loc: key.loc,
                                values: values.iter().map(|v| v.value.clone()).collect(),
                                texts,
                            }));
                        }
                    }
                }
            }
        }
        (axes, ok)
    }

    /// Every template of a node must parse and name known values; swept keys (directly or through params)
    /// must be in the node's `foreach`.
    #[allow(clippy::too_many_arguments)]
    fn check_node_templates(
        &mut self,
        name: &str,
        common: &NodeCommon,
        kind_map: &Node,
        node_params: &[(String, Node)],
        foreach: &[Axis],
        sweep: &Sweep,
        params: &Params,
    ) -> bool {
        let owner = format!("node `{name}`");
        let locals: Vec<&str> = foreach
            .iter()
            .filter_map(Axis::local)
            .map(|axis| axis.name.as_str())
            .collect();
        let swept = sweep_keys(foreach);
        let mut ok = true;
        // (text, position, the node param it belongs to)
        let mut texts: Vec<(&str, Loc, Option<usize>)> = Vec::new();
        for list in [&common.inputs, &common.outputs, &common.resources] {
            texts.extend(list.iter().map(|s| (s.value.as_str(), s.loc, None)));
        }
        for duration in [&common.timeout, &common.estimate].into_iter().flatten() {
            if let DurationValue::Text(text) = &duration.value {
                texts.push((text.as_str(), duration.loc, None));
            }
        }
        for (i, (_, value)) in node_params.iter().enumerate() {
            texts.extend(
                strings_of(value)
                    .into_iter()
                    .map(|(s, loc)| (s, loc, Some(i))),
            );
        }
        texts.extend(
            strings_of(kind_map)
                .into_iter()
                .map(|(s, loc)| (s, loc, None)),
        );

        // References of each node param, for the closure.
        let mut param_refs: Vec<Vec<String>> = vec![Vec::new(); node_params.len()];
        let mut uses: Vec<(Loc, String)> = Vec::new();
        for (text, loc, param) in texts {
            if !template::has_braces(text) {
                continue;
            }
            let parsed = match template::parse(text) {
                Ok(parsed) => parsed,
                Err(error) => {
                    self.template_error(loc, error, &owner, None);
                    ok = false;
                    continue;
                }
            };
            for used in parsed.names() {
                let known = locals.contains(&used)
                    || node_params.iter().any(|(n, _)| n == used)
                    || params.index.contains_key(used)
                    || sweep.key_index(used).is_some();
                if !known {
                    let candidates = locals
                        .iter()
                        .copied()
                        .chain(node_params.iter().map(|(n, _)| n.as_str()))
                        .chain(params.index.keys().map(String::as_str))
                        .chain(sweep.keys.iter().map(String::as_str));
                    let hint = did_you_mean(used, candidates);
                    self.error(
                        loc,
                        format!("unknown name `{used}` in template ({owner})"),
                        hint,
                    );
                    ok = false;
                    continue;
                }
                match param {
                    Some(i) => param_refs[i].push(used.to_owned()),
                    None => uses.push((loc, used.to_owned())),
                }
            }
        }
        if !ok {
            return false;
        }
        // Which swept keys a name brings in, and through which param.
        let mut reported = HashSet::new();
        for (loc, used) in uses {
            let mut trail = Vec::new();
            let mut visiting = HashSet::new();
            let keys = swept_keys_of(
                &used,
                &locals,
                node_params,
                &param_refs,
                params,
                sweep,
                &mut trail,
                &mut visiting,
            );
            let Some(keys) = keys else {
                self.error(
                    loc,
                    format!("params of node `{name}` refer to each other in a cycle ({used})"),
                    None,
                );
                ok = false;
                continue;
            };
            for (key, through) in keys {
                if swept.contains(&key) || !reported.insert((loc, key)) {
                    continue;
                }
                let key_name = &sweep.keys[key];
                let via = match through {
                    Some(param) if param != *key_name => format!(" (through param `{param}`)"),
                    _ => String::new(),
                };
                self.error(
                    loc,
                    format!(
                        "node `{name}` uses swept key `{key_name}`{via} but is not expanded over it; add `{key_name}` to foreach"
                    ),
                    None,
                );
                ok = false;
            }
        }
        ok
    }

    /// Target names must be declared nodes; returns each target's declaration indices.
    fn check_targets(
        &mut self,
        doc: &Document,
        index: &HashMap<String, usize>,
    ) -> Vec<(String, Vec<usize>)> {
        let mut targets = Vec::new();
        for (target, names) in doc.targets.iter() {
            let mut decls = Vec::new();
            for name in names.iter() {
                match index.get(&name.value) {
                    Some(&i) => decls.push(i),
                    None => {
                        let hint = did_you_mean(&name.value, index.keys().map(String::as_str));
                        self.error(
                            name.loc,
                            format!(
                                "target `{}` names `{}`, which no node declares",
                                target.value, name.value
                            ),
                            hint,
                        );
                    }
                }
            }
            targets.push((target.value.clone(), decls));
        }
        targets
    }

    fn loc_of_origin(&self, origin: &Origin) -> Loc {
        let file = self
            .src
            .files
            .iter()
            .position(|f| f.shown == origin.file)
            .map_or(self.entry, |i| i as u32);
        Loc {
            file,
            line: origin.line as u32,
            col: origin.column as u32,
        }
    }

    fn graph_errors(&mut self, errors: Vec<GraphError>) {
        let mut cycles_seen: HashMap<BTreeSet<String>, usize> = HashMap::new();
        let mut cycle_diags: Vec<(Loc, Diagnostic, BTreeSet<String>)> = Vec::new();
        for error in errors {
            match error {
                GraphError::Duplicate { id, first, second } => {
                    let loc = self.loc_of_origin(&second);
                    let d = self
                        .src
                        .diag(loc, format!("node `{id}` is declared twice"))
                        .with_note(format!("first declared at {first}"));
                    self.push(loc, d);
                }
                GraphError::UnknownDep {
                    id,
                    origin,
                    missing,
                } => {
                    let loc = self.loc_of_origin(&origin);
                    self.error(
                        loc,
                        format!("node `{id}` depends on `{missing}`, which no node declares"),
                        None,
                    );
                }
                GraphError::UnknownTargetNode { target, missing } => {
                    self.error(
                        Loc::unknown(self.entry),
                        format!("target `{target}` names `{missing}`, which no node declares"),
                        None,
                    );
                }
                GraphError::Cycle(members) => {
                    let names: BTreeSet<String> = members
                        .iter()
                        .map(|(id, _)| base_name(id).to_owned())
                        .collect();
                    if let Some(count) = cycles_seen.get_mut(&names) {
                        *count += 1;
                        continue;
                    }
                    cycles_seen.insert(names.clone(), 0);
                    let Some((_, first_origin)) = members.first() else {
                        continue;
                    };
                    let loc = self.loc_of_origin(first_origin);
                    let mut path: Vec<&str> = members.iter().map(|(id, _)| id.as_str()).collect();
                    path.push(path[0]);
                    let mut d = self
                        .src
                        .diag(loc, format!("dependency cycle: {}", path.join(" -> ")));
                    for (id, origin) in &members {
                        d.notes.push(format!("`{id}` is declared at {origin}"));
                    }
                    cycle_diags.push((loc, d, names));
                }
            }
        }
        for (loc, mut d, names) in cycle_diags {
            let more = cycles_seen.get(&names).copied().unwrap_or(0);
            if more > 0 {
                let text = if more == 1 {
                    "1 more cycle runs through instances of the same nodes".to_owned()
                } else {
                    format!("{more} more cycles run through instances of the same nodes")
                };
                d.notes.push(text);
            }
            self.push(loc, d);
        }
    }
}

/// The position, message and hint of a deserialization error.
fn de_message(error: &DeError, scope: Scope<'_>, fallback: Loc) -> (Loc, String, Option<String>) {
    let path = error.path();
    let (whole_node, place) = match scope {
        Scope::Top if path.is_empty() => (true, String::new()),
        Scope::Top => (false, format!(" in `{path}`")),
        Scope::Node { name, .. } if path.is_empty() => (true, format!(" in node `{name}`")),
        Scope::Node { name, .. } => (false, format!(" in `{path}` of node `{name}`")),
    };
    let mut loc = error.loc.unwrap_or(fallback);
    let mut hint = None;
    let message = match &error.kind {
        DeErrorKind::UnknownField { field, expected } => {
            let mut candidates: Vec<&str> = expected.to_vec();
            if matches!(scope, Scope::Node { .. }) && whole_node {
                candidates.extend(common_fields());
            }
            hint = did_you_mean(field, candidates.iter().copied());
            match scope {
                Scope::Top if whole_node => format!("unknown top-level key `{field}`"),
                _ => format!("unknown key `{field}`{place}"),
            }
        }
        DeErrorKind::UnknownVariant { variant, expected } => {
            hint = did_you_mean(variant, expected.iter().copied());
            format!(
                "unknown key `{variant}`{place}; expected {}",
                list_choices(expected.iter().copied())
            )
        }
        DeErrorKind::MissingField(field) => {
            if let Scope::Node { name, at } = scope
                && whole_node
            {
                loc = at;
                format!("missing required key `{field}` in node `{name}`")
            } else {
                format!("missing required key `{field}`{place}")
            }
        }
        DeErrorKind::InvalidType { found, expected } => {
            if found == "a mapping" && expected.contains("string") {
                hint = Some(
                    "in YAML, a value that starts with `{` is a mapping; quote it, e.g. \"{m}\""
                        .to_owned(),
                );
            }
            if whole_node {
                match scope {
                    Scope::Node { name, .. } => {
                        format!("node `{name}` must be {expected}, found {found}")
                    }
                    Scope::Top => {
                        format!("expected {expected} at the top level, found {found}")
                    }
                }
            } else {
                format!(
                    "wrong type for `{path}`{}: expected {expected}, found {found}",
                    node_suffix(scope)
                )
            }
        }
        DeErrorKind::InvalidValue { found, expected } => {
            format!(
                "invalid value for `{path}`{}: expected {expected}, found {found}",
                node_suffix(scope)
            )
        }
        DeErrorKind::Custom(text) => {
            if whole_node {
                format!("{text}{place}")
            } else {
                format!("invalid `{path}`{}: {text}", node_suffix(scope))
            }
        }
    };
    (loc, message, hint)
}

/// `gen` of `gen[m=1]`.
fn base_name(id: &str) -> &str {
    id.split_once('[').map_or(id, |(name, _)| name)
}

fn node_suffix(scope: Scope<'_>) -> String {
    match scope {
        Scope::Top => String::new(),
        Scope::Node { name, .. } => format!(" in node `{name}`"),
    }
}

/// Node and pipeline names: `[A-Za-z0-9_.-]+`.
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Param and sweep key names: usable inside `{…}`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// Every string value in a tree (not keys), with its position.
pub(crate) fn strings_of(node: &Node) -> Vec<(&str, Loc)> {
    let mut out = Vec::new();
    fn walk<'a>(node: &'a Node, out: &mut Vec<(&'a str, Loc)>) {
        match &node.val {
            Val::Str(s) => out.push((s.as_str(), node.loc)),
            Val::Seq(items) => items.iter().for_each(|item| walk(item, out)),
            Val::Map(entries) => entries.iter().for_each(|(_, v)| walk(v, out)),
            _ => {}
        }
    }
    walk(node, &mut out);
    out
}

/// The swept keys `name` brings into a node's template, each with the param it came through (if any).
/// `None` on a cycle among node params.
#[allow(clippy::too_many_arguments)]
fn swept_keys_of(
    name: &str,
    locals: &[&str],
    node_params: &[(String, Node)],
    param_refs: &[Vec<String>],
    params: &Params,
    sweep: &Sweep,
    trail: &mut Vec<String>,
    visiting: &mut HashSet<usize>,
) -> Option<Vec<(usize, Option<String>)>> {
    let via = trail.first().cloned();
    if locals.contains(&name) {
        // A node-local axis: the node is expanded over it by definition (and it hides a param of its name).
        return Some(Vec::new());
    }
    if let Some(i) = node_params.iter().position(|(n, _)| n == name) {
        if !visiting.insert(i) {
            return None;
        }
        trail.push(name.to_owned());
        let mut keys = Vec::new();
        for used in &param_refs[i] {
            keys.extend(swept_keys_of(
                used,
                locals,
                node_params,
                param_refs,
                params,
                sweep,
                trail,
                visiting,
            )?);
        }
        trail.pop();
        visiting.remove(&i);
        return Some(keys);
    }
    if let Some(&i) = params.index.get(name) {
        let via = via.or_else(|| Some(name.to_owned()));
        let keys = params.sweeps.get(i).cloned().flatten().unwrap_or_default();
        return Some(keys.into_iter().map(|k| (k, via.clone())).collect());
    }
    Some(
        sweep
            .key_index(name)
            .map(|k| (k, via))
            .into_iter()
            .collect(),
    )
}

/// Loads `entry` with `opts`, its nodes of the kinds `kinds` has.
pub(crate) fn load(
    entry: &Path,
    opts: &LoadOptions,
    kinds: &dyn Kinds,
) -> Result<Loaded, Diagnostics> {
    let root_given = if opts.root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        opts.root.as_path()
    };
    let root = match std::fs::canonicalize(root_given) {
        Ok(root) => root,
        Err(error) => {
            return Err(Diagnostic::new(format!(
                "project root `{}` cannot be used: {error}",
                root_given.display()
            ))
            .into());
        }
    };
    let mut loader = Loader::new(root, opts, kinds);
    match loader.run(entry) {
        Some((pipeline, graph)) if loader.diags.is_empty() => Ok(Loaded {
            pipeline,
            graph,
            adapted: loader.adapted,
            input_lookups: loader.input_lookups,
        }),
        _ => {
            let diagnostics = loader.finish();
            if diagnostics.is_empty() {
                Err(Diagnostic::new("the pipeline could not be loaded").into())
            } else {
                Err(diagnostics)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_errors_become_positioned_diagnostics() {
        let opts = LoadOptions::default();
        let mut loader = Loader::new(PathBuf::from("/project"), &opts, &crate::NoKinds);
        loader.src.add(
            PathBuf::from("/project/pipelines/p.yaml"),
            "pipeline: p\nnodes:\n  a:\n    kind: group\n".to_owned(),
        );
        let origin = Origin {
            file: "pipelines/p.yaml".into(),
            line: 3,
            column: 3,
        };
        let at = |id: &str| (id.to_owned(), origin.clone());
        loader.graph_errors(vec![
            GraphError::Duplicate {
                id: "a".into(),
                first: origin.clone(),
                second: origin.clone(),
            },
            GraphError::UnknownDep {
                id: "a".into(),
                origin: origin.clone(),
                missing: "b".into(),
            },
            GraphError::UnknownTargetNode {
                target: "t".into(),
                missing: "x".into(),
            },
            GraphError::Cycle(vec![at("a[m=1]"), at("b[m=1]")]),
            GraphError::Cycle(vec![at("a[m=2]"), at("b[m=2]")]),
        ]);
        let text = loader.finish().to_string();
        for expected in [
            "error: node `a` is declared twice\n --> pipelines/p.yaml:3:3\n  |\n3 |   a:\n  |   ^\n  = note: first declared at pipelines/p.yaml:3:3",
            "error: node `a` depends on `b`, which no node declares",
            "error: target `t` names `x`, which no node declares",
            "error: dependency cycle: a[m=1] -> b[m=1] -> a[m=1]",
            "= note: `b[m=1]` is declared at pipelines/p.yaml:3:3",
            "= note: 1 more cycle runs through instances of the same nodes",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        assert!(!text.contains("a[m=2] ->"), "{text}");
    }
}

//! Expansion: each validated node becomes one spec per instance, its templates filled in with that instance's
//! values (sweep point and node-local axes), its inputs found on disk, and its dependencies matched on the
//! `foreach` axes both nodes have.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use fracflow_core::{ConfigProblem, NodeSpec, Origin, PathSegment, Resource};
use serde_json::Value;

use crate::de::Sp;
use crate::doc::{DurationValue, Scalar, parse_duration};
use crate::load::{Axis, Decl, Loader, LocalAxis, NodeDef, Params};
use crate::sweep::{MAX_POINTS, Sweep};
use crate::template::{self, TemplateError};
use crate::tree::{Loc, Node, Val};

/// A node's kind-specific settings, as they go into `NodeSpec::config`.
pub(crate) type Config = fracflow_core::Settings;

/// A kind's keys (a mapping) as the node's config.
pub(crate) fn config_of(kind_map: &Node) -> Config {
    match kind_map.to_json() {
        Value::Object(map) => map.into_iter().collect(),
        _ => Config::new(),
    }
}

/// Where in the node's mapping `problem` is: the value its path leads to (the key, for a problem with the key),
/// or, where the path leaves what was written (a key left to its default), the deepest mapping on the way.
fn problem_loc(body: &Node, problem: &ConfigProblem, fallback: Loc) -> Loc {
    let mut node = body;
    let mut loc = fallback;
    let last = problem.path.len().saturating_sub(1);
    for (depth, segment) in problem.path.iter().enumerate() {
        let next = match (segment, &node.val) {
            (PathSegment::Key(key), Val::Map(_)) => node.entry(key).map(|(k, v)| {
                if depth == last && problem.at_key {
                    (k.loc, v)
                } else {
                    (v.loc, v)
                }
            }),
            (PathSegment::Index(index), Val::Seq(items)) => items.get(*index).map(|v| (v.loc, v)),
            _ => None,
        };
        match next {
            Some((at, child)) => {
                loc = at;
                node = child;
            }
            None => break,
        }
    }
    if loc.is_known() { loc } else { fallback }
}

/// A kind's problem as the loader words it: which value of which node, then what is wrong with it.
fn problem_message(node: &str, problem: &ConfigProblem) -> String {
    let dotted = |path: &[PathSegment]| {
        path.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(".")
    };
    match problem.path.split_last() {
        // The problem is the key itself: name the mapping it was found in.
        Some((_, [])) if problem.at_key => format!("{} in node `{node}`", problem.message),
        Some((_, parent)) if problem.at_key => format!(
            "{} in `{}` of node `{node}`",
            problem.message,
            dotted(parent)
        ),
        Some(_) => format!(
            "invalid `{}` in node `{node}`: {}",
            dotted(&problem.path),
            problem.message
        ),
        None => format!("{} in node `{node}`", problem.message),
    }
}

/// Instances of a dependency by their values of the keys shared with a dependent.
type DepIndex = HashMap<Vec<u32>, Vec<usize>>;

/// How one dependency is matched: (its declaration, the positions of the shared axes in its coordinates) —
/// the key of its [`DepIndex`] —, where those axes sit in the dependent's coordinates, and whether a local axis
/// is among them.
type DepPlan = ((usize, Vec<usize>), Vec<usize>, bool);

pub(crate) struct Expander<'l, 'o> {
    lx: &'l mut Loader<'o>,
    sweep: &'l mut Sweep,
    params: &'l Params,
    /// Input patterns already looked up.
    inputs: HashMap<String, Result<Vec<PathBuf>, InputProblem>>,
    /// Nodes whose config (the same for every instance) has been checked against the project.
    checked: HashSet<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum InputProblem {
    Missing,
    Directory,
    BadPattern(String),
    /// A file the pattern names lies outside the project root (an absolute path, `..`, or a symlink out).
    Outside,
}

impl<'l, 'o> Expander<'l, 'o> {
    pub fn new(
        lx: &'l mut Loader<'o>,
        sweep: &'l mut Sweep,
        params: &'l Params,
    ) -> Expander<'l, 'o> {
        Expander {
            lx,
            sweep,
            params,
            inputs: HashMap::new(),
            checked: HashSet::new(),
        }
    }

    /// The specs of every instance of every valid node, and each declaration's instance ids.
    pub fn expand(
        &mut self,
        defs: &[Option<NodeDef>],
        decls: &[Decl],
    ) -> (Vec<NodeSpec>, Vec<Vec<String>>) {
        let instances: Vec<Rc<Vec<Vec<u32>>>> = defs
            .iter()
            .map(|def| match def {
                Some(def) => self.instances(def),
                None => Rc::new(Vec::new()),
            })
            .collect();
        let ids: Vec<Vec<String>> = defs
            .iter()
            .zip(&instances)
            .map(|(def, list)| match def {
                Some(def) => list.iter().map(|c| self.instance_id(def, c)).collect(),
                None => Vec::new(),
            })
            .collect();
        // Each axis value as a number that is the same for equal values across nodes: a sweep key's value
        // index, or for a local axis the text interned per axis name.
        let mut interned: HashMap<(&str, &str), u32> = HashMap::new();
        let global: Vec<Vec<Option<Vec<u32>>>> = defs
            .iter()
            .map(|def| {
                def.iter()
                    .flat_map(|def| &def.foreach)
                    .map(|axis| {
                        axis.local().map(|local| {
                            local
                                .texts
                                .iter()
                                .map(|text| {
                                    let next = interned.len() as u32;
                                    *interned
                                        .entry((local.name.as_str(), text.as_str()))
                                        .or_insert(next)
                                })
                                .collect()
                        })
                    })
                    .collect()
            })
            .collect();
        let value_of = |node: usize, axis: usize, coord: u32| -> u32 {
            match &global[node][axis] {
                Some(map) => map[coord as usize],
                None => coord,
            }
        };
        let mut dep_indexes: HashMap<(usize, Vec<usize>), DepIndex> = HashMap::new();
        let mut specs = Vec::with_capacity(ids.iter().map(Vec::len).sum());
        for (i, def) in defs.iter().enumerate() {
            let Some(def) = def else { continue };
            debug_assert_eq!(decls[i].name.value, def.name);
            // For each dependency: the index of its instances by the shared axes, and where those axes sit in
            // this node's coordinates.
            let mut plans: Vec<DepPlan> = Vec::new();
            for &j in &def.deps {
                let Some(dep) = defs[j].as_ref() else {
                    continue;
                };
                let mut theirs = Vec::new();
                let mut mine = Vec::new();
                for (p, axis) in dep.foreach.iter().enumerate() {
                    let name = axis.name(self.sweep);
                    if let Some(q) = def.foreach.iter().position(|a| a.name(self.sweep) == name) {
                        theirs.push(p);
                        mine.push(q);
                    }
                }
                let key = (j, theirs);
                dep_indexes.entry(key.clone()).or_insert_with(|| {
                    let mut index: DepIndex = HashMap::new();
                    for (m, coords) in instances[j].iter().enumerate() {
                        index
                            .entry(key.1.iter().map(|&p| value_of(j, p, coords[p])).collect())
                            .or_default()
                            .push(m);
                    }
                    index
                });
                let local = mine.iter().any(|&q| def.foreach[q].local().is_some());
                plans.push((key, mine, local));
            }
            for (n, coords) in instances[i].iter().enumerate() {
                let mut deps = Vec::new();
                for (key, mine, local) in &plans {
                    let wanted: Vec<u32> =
                        mine.iter().map(|&q| value_of(i, q, coords[q])).collect();
                    match dep_indexes.get(key).and_then(|index| index.get(&wanted)) {
                        Some(found) => deps.extend(found.iter().map(|&m| ids[key.0][m].clone())),
                        // Sweep keys always match (both nodes take their values from the same points); a
                        // local axis value the dependency lacks is a mistake.
                        None if *local => {
                            let dep_name = defs[key.0].as_ref().map_or("", |d| d.name.as_str());
                            let wanted: Vec<String> = mine
                                .iter()
                                .map(|&q| {
                                    let axis = &def.foreach[q];
                                    format!(
                                        "{}={}",
                                        axis.name(self.sweep),
                                        self.axis_text(axis, coords[q])
                                    )
                                })
                                .collect();
                            let loc = def
                                .common
                                .deps
                                .iter()
                                .find(|d| d.value == dep_name)
                                .map_or(def.name_loc, |d| d.loc);
                            self.lx.instance_error(
                                loc,
                                format!(
                                    "node `{}` depends on `{dep_name}`, which has no instance with {}",
                                    def.name,
                                    wanted.join(",")
                                ),
                                Some(format!(
                                    "instances of a dependency are matched on the `foreach` axes both nodes have; give `{dep_name}` the same values"
                                )),
                                Some(&ids[i][n]),
                            );
                        }
                        None => {}
                    }
                }
                let spec = self.instance(def, coords, ids[i][n].clone(), deps);
                specs.push(spec);
            }
        }
        (specs, ids)
    }

    /// A node's instances: one value index per axis (in the node's axis order), first axis outermost. Sweep
    /// keys take their distinct combinations among the selected points, local axes their listed values.
    fn instances(&mut self, def: &NodeDef) -> Rc<Vec<Vec<u32>>> {
        let keys = def.sweep_keys();
        let projected = self.sweep.instances(&keys);
        let locals: Vec<&LocalAxis> = def.foreach.iter().filter_map(Axis::local).collect();
        let in_sweep_order = def
            .foreach
            .iter()
            .map(|axis| match axis {
                Axis::Sweep(k) => Some(*k),
                Axis::Local(_) => None,
            })
            .eq(keys.iter().copied().map(Some));
        if in_sweep_order {
            // Only sweep keys, in sweep order (always so for the list form): the points' projection as is.
            return projected;
        }
        let count = locals.iter().fold(projected.len(), |n, axis| {
            n.saturating_mul(axis.values.len())
        });
        if count == 0 {
            return Rc::new(Vec::new());
        }
        if count > MAX_POINTS {
            let loc = locals.first().map_or(def.name_loc, |axis| axis.loc);
            self.lx.error(
                loc,
                format!(
                    "node `{}` has {count} instances; at most {MAX_POINTS} are allowed",
                    def.name
                ),
                None,
            );
            return Rc::new(Vec::new());
        }
        let mut out = Vec::with_capacity(count);
        let mut local_coords = vec![0u32; locals.len()];
        for combo in projected.iter() {
            'product: loop {
                let mut local_at = 0;
                let coords: Vec<u32> = def
                    .foreach
                    .iter()
                    .map(|axis| match axis {
                        // `combo` follows the sorted sweep keys.
                        Axis::Sweep(k) => keys
                            .iter()
                            .position(|key| key == k)
                            .map_or(0, |at| combo[at]),
                        Axis::Local(_) => {
                            local_at += 1;
                            local_coords[local_at - 1]
                        }
                    })
                    .collect();
                out.push(coords);
                // Odometer over the local axes.
                let mut digit = locals.len();
                loop {
                    if digit == 0 {
                        break 'product;
                    }
                    digit -= 1;
                    local_coords[digit] += 1;
                    if (local_coords[digit] as usize) < locals[digit].values.len() {
                        break;
                    }
                    local_coords[digit] = 0;
                }
            }
        }
        // First axis outermost: value indices follow the sweep's (and each axis's) order.
        out.sort();
        Rc::new(out)
    }

    /// `name[m=1024,unit=top_k]`, or `name` for a node without axes.
    fn instance_id(&self, def: &NodeDef, coords: &[u32]) -> String {
        if def.foreach.is_empty() {
            return def.name.clone();
        }
        let mut id = String::with_capacity(def.name.len() + 16 * coords.len());
        id.push_str(&def.name);
        id.push('[');
        for (i, (axis, &value)) in def.foreach.iter().zip(coords).enumerate() {
            if i > 0 {
                id.push(',');
            }
            id.push_str(axis.name(self.sweep));
            id.push('=');
            id.push_str(self.axis_text(axis, value));
        }
        id.push(']');
        id
    }

    fn axis_text<'a>(&'a self, axis: &'a Axis, value: u32) -> &'a str {
        match axis {
            Axis::Sweep(k) => &self.sweep.texts[*k][value as usize],
            Axis::Local(local) => &local.texts[value as usize],
        }
    }

    /// One instance's spec. Problems are recorded; the spec is still made (with what could be resolved), so
    /// later checks see the whole graph.
    fn instance(
        &mut self,
        def: &NodeDef,
        coords: &[u32],
        id: String,
        deps: Vec<String>,
    ) -> NodeSpec {
        let mut point_pairs: Vec<(usize, u32)> = Vec::new();
        let mut local_values: Vec<(&str, &Scalar)> = Vec::new();
        for (axis, &value) in def.foreach.iter().zip(coords) {
            match axis {
                Axis::Sweep(k) => point_pairs.push((*k, value)),
                Axis::Local(local) => {
                    local_values.push((local.name.as_str(), &local.values[value as usize]));
                }
            }
        }
        let sweep: &Sweep = self.sweep;
        let mut r = Resolver {
            sweep,
            params: self.params,
            node_params: &def.params,
            coords: &point_pairs,
            locals: &local_values,
            cache: HashMap::new(),
            depth: 0,
        };
        let owner = format!("node `{}`", def.name);
        let instance = (!def.foreach.is_empty()).then_some(id.as_str());
        let mut problems: Vec<(Loc, TemplateError)> = Vec::new();
        fn render(
            r: &mut Resolver<'_>,
            text: &Sp<String>,
            problems: &mut Vec<(Loc, TemplateError)>,
        ) -> Option<String> {
            match r.render(&text.value) {
                Ok(done) => Some(done),
                Err(error) => {
                    problems.push((text.loc, error));
                    None
                }
            }
        }

        let mut inputs = Vec::new();
        let mut input_errors = Vec::new();
        for pattern in &def.common.inputs {
            if let Some(text) = render(&mut r, pattern, &mut problems) {
                input_errors.push((pattern.loc, text));
            }
        }
        // Sized from the declaration: grown from empty, a node's one output took a vector of four.
        let mut outputs = Vec::with_capacity(def.common.outputs.len());
        let mut late = Vec::new();
        for output in &def.common.outputs {
            if let Some(text) = render(&mut r, output, &mut problems) {
                match check_output(&def.name, &text) {
                    Ok(()) => {
                        if !outputs.contains(&text) {
                            outputs.push(text);
                        }
                    }
                    Err((message, hint)) => late.push((output.loc, message, hint)),
                }
            }
        }
        let mut resources = Vec::with_capacity(def.common.resources.len());
        for text in &def.common.resources {
            if let Some(done) = render(&mut r, text, &mut problems) {
                match check_resource(&def.name, &done) {
                    Ok(resource) => {
                        if !resources.contains(&resource) {
                            resources.push(resource);
                        }
                    }
                    Err(message) => late.push((text.loc, message, None)),
                }
            }
        }
        let mut durations = [None, None];
        for (slot, (what, value)) in [
            ("timeout", &def.common.timeout),
            ("estimate", &def.common.estimate),
        ]
        .into_iter()
        .enumerate()
        {
            let Some(value) = value else { continue };
            let resolved = match &value.value {
                DurationValue::Text(text) => {
                    match render(
                        &mut r,
                        &Sp {
                            value: text.clone(),
                            loc: value.loc,
                        },
                        &mut problems,
                    ) {
                        Some(done) => DurationValue::Text(done),
                        None => continue,
                    }
                }
                seconds => seconds.clone(),
            };
            match check_duration(&def.name, what, &resolved) {
                Ok(duration) => durations[slot] = Some(duration),
                Err(message) => late.push((value.loc, message, None)),
            }
        }

        let shell_fields = self
            .lx
            .kinds
            .executor(&def.kind)
            .map_or(&[][..], |executor| executor.shell_fields());
        let config = match &def.fixed_config {
            Some(config) => Some(config.clone()),
            None => match render_config(&mut r, shell_fields, &def.kind_map) {
                Ok(rendered) => Some(config_of(&rendered)),
                Err(problem) => {
                    problems.push(problem);
                    None
                }
            },
        };
        let point: fracflow_core::Settings = point_pairs
            .iter()
            .map(|&(k, v)| (sweep.keys[k].clone(), sweep.values[k][v as usize].to_json()))
            .chain(
                local_values
                    .iter()
                    .map(|(name, value)| ((*name).to_owned(), value.to_json())),
            )
            .collect();
        drop(r);

        // Report, then look the inputs up.
        for (loc, error) in problems {
            self.lx.template_error(loc, error, &owner, instance);
        }
        for (loc, pattern) in input_errors {
            match self.find_inputs(&pattern) {
                Ok(found) => {
                    for path in found {
                        if !inputs.contains(&path) {
                            inputs.push(path);
                        }
                    }
                }
                Err(problem) => {
                    let (message, hint) = match problem {
                        InputProblem::Missing => (
                            format!("missing input file `{pattern}` in node `{}`", def.name),
                            "input paths are relative to the project root",
                        ),
                        InputProblem::Directory => (
                            format!("input `{pattern}` of node `{}` is a directory", def.name),
                            "name its files instead, e.g. with a glob like `DIR/**/*`",
                        ),
                        InputProblem::BadPattern(why) => (
                            format!("invalid glob `{pattern}` in node `{}`: {why}", def.name),
                            "",
                        ),
                        InputProblem::Outside => (
                            format!(
                                "input `{pattern}` of node `{}` names a file outside the project",
                                def.name
                            ),
                            crate::load::OUTSIDE_HINT,
                        ),
                    };
                    let hint = (!hint.is_empty()).then(|| hint.to_owned());
                    self.lx.instance_error(loc, message, hint, None);
                }
            }
        }
        for (loc, message, hint) in late {
            self.lx.instance_error(loc, message, hint, None);
        }
        let shown_instance = instance.map(str::to_owned);
        let resolved = config.is_some();
        let origin = Origin {
            file: self.lx.src.shown_path(def.name_loc.file).to_path_buf(),
            line: def.name_loc.line as usize,
            column: def.name_loc.col as usize,
        };
        let mut spec = NodeSpec {
            id,
            name: def.name.clone(),
            kind: def.kind.clone(),
            config: config.unwrap_or_default(),
            point,
            deps,
            inputs,
            outputs,
            resources,
            retries: def.common.retries,
            timeout: durations[0],
            estimate: durations[1],
            origin,
        };
        let mut implied_inputs = Vec::new();
        if resolved && let Some(kind) = self.lx.kinds.executor(&def.kind) {
            // A config without templates is the same for every instance: checked once, reported without an
            // instance.
            let fixed = def.fixed_config.is_some();
            if !fixed || self.checked.insert(def.name.clone()) {
                for problem in kind.check(&spec, &self.lx.src.root) {
                    let loc = problem_loc(&def.body, &problem, def.name_loc);
                    let hint = self
                        .unknown_key_hint(def, &problem)
                        .or_else(|| problem.hint.clone());
                    self.lx.instance_error(
                        loc,
                        problem_message(&def.name, &problem),
                        hint,
                        shown_instance.as_deref().filter(|_| !fixed),
                    );
                }
            }
            for implied in kind.implied_outputs(&spec) {
                if !spec.outputs.contains(&implied) {
                    spec.outputs.push(implied);
                }
            }
            implied_inputs = kind.implied_inputs(&spec, &self.lx.src.root);
        }
        // Looked up as `inputs:` entries are, so they are hashed into the key the same way; a kind names one
        // file, so a `[` or `*` in its name is that character, not a glob.
        for file in implied_inputs {
            let pattern = glob::Pattern::escape(&file);
            match self.find_inputs(&pattern) {
                Ok(found) => {
                    for path in found {
                        if !spec.inputs.contains(&path) {
                            spec.inputs.push(path);
                        }
                    }
                }
                Err(_) => self.lx.instance_error(
                    def.name_loc,
                    format!(
                        "input `{file}` of node `{}` (named by its configuration) cannot be read",
                        def.name
                    ),
                    Some("input paths are relative to the project root".to_owned()),
                    shown_instance.as_deref(),
                ),
            }
        }
        spec
    }

    /// For a key of the node's mapping that its kind does not know, a better hint than the kind can give: the
    /// kind it belongs to, or the closest of every key the node may have (its kind's and the common ones).
    fn unknown_key_hint(&self, def: &NodeDef, problem: &ConfigProblem) -> Option<String> {
        let [PathSegment::Key(key)] = problem.path.as_slice() else {
            return None;
        };
        if !problem.at_key || def.kind_map.get(key).is_none() {
            return None;
        }
        let kinds = self.lx.kinds;
        let keys_of = |kind: &str| -> Vec<String> {
            kinds
                .executor(kind)
                .map(|k| k.config_schema())
                .and_then(|schema| {
                    schema
                        .get("properties")
                        .and_then(Value::as_object)
                        .map(|props| props.keys().cloned().collect())
                })
                .unwrap_or_default()
        };
        let own = keys_of(&def.kind);
        if own.contains(key) {
            return None;
        }
        let owners: Vec<&str> = kinds
            .names()
            .into_iter()
            .filter(|name| *name != def.kind && keys_of(name).contains(key))
            .collect();
        if !owners.is_empty() {
            return Some(format!(
                "`{key}` is a key of kind {}, not of kind `{}`",
                crate::diag::list_names(owners),
                def.kind
            ));
        }
        let candidates = own
            .iter()
            .map(String::as_str)
            .chain(crate::doc::common_fields().iter().copied());
        crate::diag::did_you_mean(key, candidates)
    }

    /// Every pattern looked up that named files, with those files, sorted by pattern.
    pub fn input_lookups(&self) -> Vec<(String, Vec<PathBuf>)> {
        let mut found: Vec<(String, Vec<PathBuf>)> = self
            .inputs
            .iter()
            .filter_map(|(pattern, result)| {
                result.as_ref().ok().map(|f| (pattern.clone(), f.clone()))
            })
            .collect();
        found.sort();
        found
    }

    /// The files an `inputs:` entry names (relative to the root; globs allowed), sorted.
    fn find_inputs(&mut self, pattern: &str) -> Result<Vec<PathBuf>, InputProblem> {
        if let Some(found) = self.inputs.get(pattern) {
            return found.clone();
        }
        let found = look_up_inputs(&self.lx.src.root, pattern);
        self.inputs.insert(pattern.to_owned(), found.clone());
        found
    }
}

/// The files `pattern` (relative to `root`, which is canonical; globs allowed) names, sorted, each of them
/// inside `root` once symlinks are followed: the expander's lookup, and what a remembered load repeats to know
/// that it still holds.
pub(crate) fn look_up_inputs(root: &Path, pattern: &str) -> Result<Vec<PathBuf>, InputProblem> {
    let files = find_files(root, pattern)?;
    if files
        .iter()
        .all(|file| std::fs::canonicalize(file).is_ok_and(|real| real.starts_with(root)))
    {
        Ok(files)
    } else {
        Err(InputProblem::Outside)
    }
}

fn find_files(root: &Path, pattern: &str) -> Result<Vec<PathBuf>, InputProblem> {
    if pattern.contains(['*', '?', '[']) {
        let full = if Path::new(pattern).is_absolute() {
            pattern.to_owned()
        } else {
            format!(
                "{}/{pattern}",
                glob::Pattern::escape(&root.to_string_lossy())
            )
        };
        let options = glob::MatchOptions {
            require_literal_leading_dot: true,
            ..glob::MatchOptions::new()
        };
        match glob::glob_with(&full, options) {
            Ok(paths) => {
                let mut files: Vec<PathBuf> = paths
                    .filter_map(Result::ok)
                    .filter(|p| p.is_file())
                    .collect();
                files.sort();
                if files.is_empty() {
                    Err(InputProblem::Missing)
                } else {
                    Ok(files)
                }
            }
            Err(error) => Err(InputProblem::BadPattern(error.msg.to_owned())),
        }
    } else {
        let path = root.join(pattern);
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => Err(InputProblem::Directory),
            Ok(_) => Ok(vec![path]),
            Err(_) => Err(InputProblem::Missing),
        }
    }
}

/// An output must be a relative path that stays inside the node's output directory.
pub(crate) fn check_output(node: &str, text: &str) -> Result<(), (String, Option<String>)> {
    let path = Path::new(text);
    let inside = !text.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        Ok(())
    } else {
        Err((
            format!(
                "output `{text}` of node `{node}` must be a relative path inside its output directory"
            ),
            Some(
                "outputs are relative to `$FRACFLOW_OUT`; `..` and absolute paths are not allowed"
                    .to_owned(),
            ),
        ))
    }
}

pub(crate) fn check_resource(node: &str, text: &str) -> Result<Resource, String> {
    Resource::parse(text).map_err(|why| format!("bad resource in node `{node}`: {why}"))
}

/// `what` is `timeout` or `estimate`; a timeout must be more than zero.
pub(crate) fn check_duration(
    node: &str,
    what: &str,
    value: &DurationValue,
) -> Result<Duration, String> {
    let parsed = match value {
        DurationValue::Seconds(s) => {
            Duration::try_from_secs_f64(*s).map_err(|_| format!("`{s}` seconds is out of range"))
        }
        DurationValue::Text(text) => parse_duration(text),
    };
    match parsed {
        Ok(d) if what == "timeout" && d.is_zero() => Err(format!(
            "bad timeout in node `{node}`: a timeout must be longer than zero"
        )),
        Ok(d) => Ok(d),
        Err(why) => Err(format!("bad {what} in node `{node}`: {why}")),
    }
}

/// Fills templates in for one instance.
struct Resolver<'a> {
    sweep: &'a Sweep,
    params: &'a Params,
    node_params: &'a [(String, Node)],
    /// (sweep key index, value index) of this instance.
    coords: &'a [(usize, u32)],
    /// The values of this instance's node-local axes, by name.
    locals: &'a [(&'a str, &'a Scalar)],
    /// Resolved params: (is a node param, index) → value.
    cache: HashMap<(bool, usize), Value>,
    depth: usize,
}

fn located(mut error: TemplateError, loc: Loc) -> TemplateError {
    if error.loc.is_none() {
        error.loc = Some(loc);
    }
    error
}

impl Resolver<'_> {
    fn lookup(&mut self, name: &str) -> Result<Value, TemplateError> {
        if let Some((_, value)) = self.locals.iter().find(|(local, _)| *local == name) {
            return Ok(value.to_json());
        }
        if let Some(k) = self.sweep.key_index(name) {
            return match self.coords.iter().find(|(key, _)| *key == k) {
                Some(&(_, v)) => Ok(self.sweep.values[k][v as usize].to_json()),
                None => Err(TemplateError::new(
                    format!("swept key `{name}` is not in this node's foreach"),
                    None,
                )),
            };
        }
        if let Some(i) = self.node_params.iter().position(|(n, _)| n == name) {
            return self.param((true, i));
        }
        if let Some(&i) = self.params.index.get(name) {
            return self.param((false, i));
        }
        Err(TemplateError::new(format!("unknown name `{name}`"), None))
    }

    fn param(&mut self, key: (bool, usize)) -> Result<Value, TemplateError> {
        if let Some(value) = self.cache.get(&key) {
            return Ok(value.clone());
        }
        if self.depth > 64 {
            return Err(TemplateError::new(
                "params refer to each other too deeply (a cycle?)",
                None,
            ));
        }
        let node = if key.0 {
            &self.node_params[key.1].1
        } else {
            &self.params.list[key.1].value
        };
        self.depth += 1;
        let result = self.value(node);
        self.depth -= 1;
        let value = result?;
        self.cache.insert(key, value.clone());
        Ok(value)
    }

    /// A param's value: strings are templates, and one whose whole text is an integer expression
    /// (`"{X} - 64"` → `"1024 - 64"`) becomes that integer.
    fn value(&mut self, node: &Node) -> Result<Value, TemplateError> {
        match &node.val {
            Val::Str(text) => {
                let done = self.render(text).map_err(|e| located(e, node.loc))?;
                match template::integer_expression(&done) {
                    Some(Ok(i)) => Ok(Value::from(i)),
                    Some(Err(error)) => Err(located(error, node.loc)),
                    None => Ok(Value::String(done)),
                }
            }
            Val::Seq(items) => items
                .iter()
                .map(|item| self.value(item))
                .collect::<Result<_, _>>()
                .map(Value::Array),
            Val::Map(entries) => {
                let mut map = serde_json::Map::new();
                for (key, value) in entries {
                    map.insert(
                        key.as_str().unwrap_or_default().to_owned(),
                        self.value(value)?,
                    );
                }
                Ok(Value::Object(map))
            }
            _ => Ok(node.to_json()),
        }
    }

    fn render(&mut self, text: &str) -> Result<String, TemplateError> {
        if !template::has_braces(text) {
            return Ok(text.to_owned());
        }
        let parsed = template::parse(text)?;
        parsed.render(&mut |name| self.lookup(name))
    }

    /// A command for `sh -c`: each value is quoted for where it lands, so it cannot become shell syntax.
    fn render_shell(&mut self, text: &str) -> Result<String, TemplateError> {
        if !template::has_braces(text) {
            return Ok(text.to_owned());
        }
        let parsed = template::parse(text)?;
        parsed.render_shell(&mut |name| self.lookup(name))
    }
}

/// A kind's config with its templates filled in. The kind's shell fields (`Executor::shell_fields`: the
/// `command` kind's string `run`, which goes to `sh -c`) get their values shell-quoted for the context each
/// lands in; an argv-list `run` needs no quoting: each word is one argument.
fn render_config(
    r: &mut Resolver<'_>,
    shell_fields: &[&str],
    config: &Node,
) -> Result<Node, (Loc, TemplateError)> {
    let Val::Map(entries) = &config.val else {
        return render_tree(r, config);
    };
    let mut rendered = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let value = match &value.val {
            Val::Str(text) if key.as_str().is_some_and(|k| shell_fields.contains(&k)) => Node {
                loc: value.loc,
                val: Val::Str(r.render_shell(text).map_err(|e| (value.loc, e))?),
            },
            _ => render_tree(r, value)?,
        };
        rendered.push((key.clone(), value));
    }
    Ok(Node {
        loc: config.loc,
        val: Val::Map(rendered),
    })
}

/// A copy of `node` with every string's template filled in.
fn render_tree(r: &mut Resolver<'_>, node: &Node) -> Result<Node, (Loc, TemplateError)> {
    let val = match &node.val {
        Val::Str(text) => Val::Str(r.render(text).map_err(|e| (node.loc, e))?),
        Val::Seq(items) => Val::Seq(
            items
                .iter()
                .map(|item| render_tree(r, item))
                .collect::<Result<_, _>>()?,
        ),
        Val::Map(entries) => Val::Map(
            entries
                .iter()
                .map(|(k, v)| render_tree(r, v).map(|v| (k.clone(), v)))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    };
    Ok(Node { loc: node.loc, val })
}

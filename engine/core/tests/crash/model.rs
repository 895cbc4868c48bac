//! The states power loss may leave after a recorded prefix of operations, in the manner of ALICE and
//! CrashMonkey: what a sync made durable stays; everything else may be lost or reordered.
//!
//! The model, per crash point (after the first `p` operations):
//! - A file's appends before its last `SyncFile` are durable. The rest persist as a prefix (appends are
//!   written back in order), possibly with the next one torn in half.
//! - A change of names (create, mkdir, symlink, link, rename, unlink) is durable once the directory it
//!   changes was synced after it (a rename: either of its two directories, since both are one journal
//!   transaction). The others persist as a prefix per directory, independently of other directories: a rename
//!   into `entries/` may survive while a rename into `blobs/` is lost.
//! - Names and data are independent: a name may survive whose file lost its unsynced data, and the reverse.
//! - A `syncfs` makes everything before it durable.
//!
//! Every combination of those choices is one crash state; where a crash point has more than `limit`, every
//! option of each choice is taken alone (with the others at none kept, and at all kept), plus `limit`
//! combinations drawn by a fixed seed.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::recorder::{Initial, Ino, Log, Op};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<OsString, Ino>),
    Symlink(PathBuf),
}

/// One crash state: every inode's content and the root.
#[derive(Debug, Clone)]
pub struct State {
    root: Ino,
    nodes: HashMap<Ino, Node>,
}

/// The choices at one crash point.
struct Choices {
    /// Per file with undurable appends: how many of them there are.
    files: Vec<(Ino, usize)>,
    /// Per directory with undurable name changes: their operation indices, in order.
    dirs: Vec<(Ino, Vec<usize>)>,
}

impl Choices {
    /// How many options each choice has: a file with `m` undurable appends keeps 0..=m of them or tears the
    /// next one (2m + 1); a directory with `n` undurable changes keeps a prefix of 0..=n.
    fn radices(&self) -> Vec<usize> {
        self.files
            .iter()
            .map(|(_, m)| 2 * m + 1)
            .chain(self.dirs.iter().map(|(_, ops)| ops.len() + 1))
            .collect()
    }
}

/// The crash states after the first `point` operations of `log`: at most `limit`, and whether that was all.
pub fn states(log: &Log, point: usize, limit: usize) -> (Vec<State>, bool) {
    let ops = &log.ops[..point];
    let choices = choices(ops);
    let radices = choices.radices();
    let total = radices
        .iter()
        .try_fold(1usize, |acc, &r| acc.checked_mul(r))
        .unwrap_or(usize::MAX);
    let mut picks: Vec<Vec<usize>> = Vec::new();
    if total <= limit {
        let mut digits = vec![0; radices.len()];
        loop {
            picks.push(digits.clone());
            if !increment(&mut digits, &radices) {
                break;
            }
        }
    } else {
        // Every option of each choice alone, with all the others at none and at all kept: each directory's
        // and each file's own reorderings and tears, then random combinations up to the limit.
        let none = vec![0; radices.len()];
        let all: Vec<usize> = radices.iter().map(|r| r - 1).collect();
        for base in [&none, &all] {
            for (i, &radix) in radices.iter().enumerate() {
                for option in 0..radix {
                    let mut digits = base.clone();
                    digits[i] = option;
                    picks.push(digits);
                }
            }
        }
        picks.sort();
        picks.dedup();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ point as u64;
        let target = picks.len() + limit;
        while picks.len() < target {
            picks.push(
                radices
                    .iter()
                    .map(|&r| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed % r as u64) as usize
                    })
                    .collect(),
            );
        }
    }
    let states = picks
        .iter()
        .map(|digits| build(log, ops, &choices, digits))
        .collect();
    (states, total <= limit)
}

fn increment(digits: &mut [usize], radices: &[usize]) -> bool {
    for (digit, &radix) in digits.iter_mut().zip(radices) {
        *digit += 1;
        if *digit < radix {
            return true;
        }
        *digit = 0;
    }
    false
}

/// The directory whose journal a name change belongs to, and the other one a rename touches.
fn dirs_of(op: &Op) -> Option<(Ino, Option<Ino>)> {
    match op {
        Op::Create { dir, .. }
        | Op::Mkdir { dir, .. }
        | Op::Symlink { dir, .. }
        | Op::Link { dir, .. }
        | Op::Unlink { dir, .. } => Some((*dir, None)),
        Op::Rename {
            from_dir, to_dir, ..
        } => Some((*to_dir, Some(*from_dir))),
        Op::Append { .. } | Op::SyncFile { .. } | Op::SyncDir { .. } | Op::SyncFs => None,
    }
}

fn choices(ops: &[Op]) -> Choices {
    let mut last_file_sync: HashMap<Ino, usize> = HashMap::new();
    let mut last_dir_sync: HashMap<Ino, usize> = HashMap::new();
    // Everything before the last syncfs is durable.
    let settled = ops
        .iter()
        .rposition(|op| matches!(op, Op::SyncFs))
        .unwrap_or(0);
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::SyncFile { ino } => {
                last_file_sync.insert(*ino, i);
            }
            Op::SyncDir { ino } => {
                last_dir_sync.insert(*ino, i);
            }
            _ => {}
        }
    }
    let synced_after = |dir: Ino, i: usize| last_dir_sync.get(&dir).is_some_and(|&s| s > i);
    let mut files: BTreeMap<Ino, usize> = BTreeMap::new();
    let mut dirs: BTreeMap<Ino, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate().skip(settled) {
        if let Op::Append { ino, .. } = op {
            if last_file_sync.get(ino).is_none_or(|&s| s < i) {
                *files.entry(*ino).or_default() += 1;
            }
        } else if let Some((dir, other)) = dirs_of(op)
            && !synced_after(dir, i)
            && !other.is_some_and(|o| synced_after(o, i))
        {
            dirs.entry(dir).or_default().push(i);
        }
    }
    Choices {
        files: files.into_iter().collect(),
        dirs: dirs.into_iter().collect(),
    }
}

/// Applies the durable operations and the chosen undurable ones, in program order.
fn build(log: &Log, ops: &[Op], choices: &Choices, digits: &[usize]) -> State {
    let (file_digits, dir_digits) = digits.split_at(choices.files.len());
    // Per file: how many undurable appends to keep whole, and whether the one after them is kept torn
    // (digit 2k: k whole; 2k + 1: k whole and the next torn).
    let keep_appends: HashMap<Ino, (usize, bool)> = choices
        .files
        .iter()
        .zip(file_digits)
        .map(|(&(ino, _), &d)| (ino, (d / 2, d % 2 == 1)))
        .collect();
    let undurable: HashMap<usize, bool> = choices
        .dirs
        .iter()
        .zip(dir_digits)
        .flat_map(|((_, indices), &keep)| {
            indices.iter().enumerate().map(move |(n, &i)| (i, n < keep))
        })
        .collect();
    let mut nodes: HashMap<Ino, Node> = log
        .initial
        .iter()
        .map(|(&ino, initial)| {
            let node = match initial {
                Initial::Dir(children) => Node::Dir(children.iter().cloned().collect()),
                Initial::File(bytes) => Node::File(bytes.clone()),
                Initial::Symlink(target) => Node::Symlink(target.clone()),
            };
            (ino, node)
        })
        .collect();
    let mut undurable_seen: HashMap<Ino, usize> = HashMap::new();
    let undurable_appends: HashMap<Ino, usize> = choices.files.iter().copied().collect();
    let mut durable_appends_left: HashMap<Ino, usize> = HashMap::new();
    for op in ops {
        if let Op::Append { ino, .. } = op {
            *durable_appends_left.entry(*ino).or_default() += 1;
        }
    }
    for (ino, undurable) in &undurable_appends {
        if let Some(count) = durable_appends_left.get_mut(ino) {
            *count -= undurable;
        }
    }
    for (i, op) in ops.iter().enumerate() {
        if let Op::Append { ino, bytes } = op {
            let left = durable_appends_left.entry(*ino).or_default();
            let piece: &[u8] = if *left > 0 {
                *left -= 1;
                bytes
            } else {
                let seen = undurable_seen.entry(*ino).or_default();
                *seen += 1;
                let (keep, torn) = keep_appends.get(ino).copied().unwrap_or((0, false));
                if *seen <= keep {
                    bytes
                } else if *seen == keep + 1 && torn {
                    &bytes[..bytes.len() / 2]
                } else {
                    &[]
                }
            };
            match nodes.entry(*ino).or_insert_with(|| Node::File(Vec::new())) {
                Node::File(content) => content.extend_from_slice(piece),
                other => *other = Node::File(piece.to_vec()),
            }
            continue;
        }
        if dirs_of(op).is_none() || !undurable.get(&i).copied().unwrap_or(true) {
            continue;
        }
        apply_name_change(&mut nodes, op);
    }
    State {
        root: log.root,
        nodes,
    }
}

fn entries(nodes: &mut HashMap<Ino, Node>, dir: Ino) -> &mut BTreeMap<OsString, Ino> {
    let node = nodes
        .entry(dir)
        .or_insert_with(|| Node::Dir(BTreeMap::new()));
    if !matches!(node, Node::Dir(_)) {
        *node = Node::Dir(BTreeMap::new());
    }
    match node {
        Node::Dir(entries) => entries,
        _ => unreachable!("made a directory just above"),
    }
}

fn apply_name_change(nodes: &mut HashMap<Ino, Node>, op: &Op) {
    match op {
        Op::Create { dir, name, ino } => {
            nodes.entry(*ino).or_insert_with(|| Node::File(Vec::new()));
            entries(nodes, *dir).insert(name.clone(), *ino);
        }
        Op::Mkdir { dir, name, ino } => {
            nodes
                .entry(*ino)
                .or_insert_with(|| Node::Dir(BTreeMap::new()));
            entries(nodes, *dir).insert(name.clone(), *ino);
        }
        Op::Symlink {
            dir,
            name,
            ino,
            target,
        } => {
            nodes.insert(*ino, Node::Symlink(target.clone()));
            entries(nodes, *dir).insert(name.clone(), *ino);
        }
        Op::Link { dir, name, ino } => {
            nodes.entry(*ino).or_insert_with(|| Node::File(Vec::new()));
            entries(nodes, *dir).insert(name.clone(), *ino);
        }
        Op::Rename {
            from_dir,
            from_name,
            to_dir,
            to_name,
            ino,
        } => {
            let from = entries(nodes, *from_dir);
            if from.get(from_name) == Some(ino) {
                from.remove(from_name);
            }
            nodes.entry(*ino).or_insert_with(|| Node::File(Vec::new()));
            entries(nodes, *to_dir).insert(to_name.clone(), *ino);
        }
        Op::Unlink { dir, name, ino } => {
            let entries = entries(nodes, *dir);
            if entries.get(name) == Some(ino) {
                entries.remove(name);
            }
        }
        Op::Append { .. } | Op::SyncFile { .. } | Op::SyncDir { .. } | Op::SyncFs => {}
    }
}

impl State {
    /// A hash of what the state holds as seen from the root, for telling equal states apart: of the paths under
    /// one of `under`, leaving out files named as one of `except`.
    pub fn fingerprint(&self, under: &[&str], except: &[&str]) -> blake3::Hash {
        let mut hasher = blake3::Hasher::new();
        self.walk(self.root, &mut Vec::new(), &mut |path, node| {
            if !under.iter().any(|top| path.starts_with(top))
                || path
                    .file_name()
                    .is_some_and(|name| except.iter().any(|e| name == *e))
            {
                return;
            }
            hasher.update(path.as_os_str().as_encoded_bytes());
            hasher.update(&[0]);
            match node {
                Node::File(bytes) => {
                    hasher.update(b"f");
                    hasher.update(&(bytes.len() as u64).to_le_bytes());
                    hasher.update(bytes);
                }
                Node::Dir(_) => {
                    hasher.update(b"d");
                }
                Node::Symlink(target) => {
                    hasher.update(b"l");
                    hasher.update(target.as_os_str().as_encoded_bytes());
                }
            }
        });
        hasher.finalize()
    }

    /// Visits every reachable name, parents before children; a directory reachable twice (a cycle of
    /// reordered renames) is visited once.
    fn walk(&self, ino: Ino, seen: &mut Vec<Ino>, visit: &mut dyn FnMut(&Path, &Node)) {
        self.walk_at(ino, Path::new(""), seen, visit);
    }

    fn walk_at(
        &self,
        ino: Ino,
        path: &Path,
        seen: &mut Vec<Ino>,
        visit: &mut dyn FnMut(&Path, &Node),
    ) {
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        if let Node::Dir(children) = node {
            if seen.contains(&ino) {
                return;
            }
            seen.push(ino);
            for (name, &child) in children {
                let child_path = path.join(name);
                if let Some(child_node) = self.nodes.get(&child) {
                    visit(&child_path, child_node);
                }
                self.walk_at(child, &child_path, seen, visit);
            }
        }
    }

    /// Writes the state out under `dir` as real files.
    pub fn materialize(&self, dir: &Path) -> io::Result<()> {
        let mut result = fs::create_dir_all(dir);
        self.walk(self.root, &mut Vec::new(), &mut |path, node| {
            if result.is_err() {
                return;
            }
            let target = dir.join(path);
            result = match node {
                Node::Dir(_) => fs::create_dir_all(&target),
                Node::File(bytes) => fs::write(&target, bytes),
                Node::Symlink(link) => std::os::unix::fs::symlink(link, &target),
            };
        });
        result
    }
}

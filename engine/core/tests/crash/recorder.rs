//! A [`FileOps`] that performs every operation on the real filesystem and records it, resolved to inodes, so
//! that the states power loss could leave can be rebuilt afterwards (`model`).
//!
//! Files the engine did not make through the layer (a node's own outputs in its staging directory) are taken
//! in the first time an operation names them: recorded as created and written just then, and not synced.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use fracflow_record::{AppendFile, FileOps, RealFiles};

pub type Ino = u64;

/// One recorded operation, with every name resolved to the inode it concerned when it ran.
#[derive(Debug, Clone)]
pub enum Op {
    /// A new empty file `ino` named `name` in directory `dir`.
    Create {
        dir: Ino,
        name: OsString,
        ino: Ino,
    },
    Mkdir {
        dir: Ino,
        name: OsString,
        ino: Ino,
    },
    Symlink {
        dir: Ino,
        name: OsString,
        ino: Ino,
        target: PathBuf,
    },
    /// A second name for `ino`.
    Link {
        dir: Ino,
        name: OsString,
        ino: Ino,
    },
    Rename {
        from_dir: Ino,
        from_name: OsString,
        to_dir: Ino,
        to_name: OsString,
        ino: Ino,
    },
    /// `name` in `dir` (which named `ino`) removed: a file, a link or an empty directory.
    Unlink {
        dir: Ino,
        name: OsString,
        ino: Ino,
    },
    /// Bytes added at the end of file `ino`.
    Append {
        ino: Ino,
        bytes: Vec<u8>,
    },
    /// fsync of a file: its data is durable.
    SyncFile {
        ino: Ino,
    },
    /// fsync of a directory: the names changed in it are durable.
    SyncDir {
        ino: Ino,
    },
    /// syncfs: everything before it is durable.
    SyncFs,
}

/// What the root held when recording began: all of it durable.
#[derive(Debug, Clone)]
pub enum Initial {
    Dir(Vec<(OsString, Ino)>),
    File(Vec<u8>),
    Symlink(PathBuf),
}

#[derive(Debug, Default)]
pub struct Log {
    pub root: Ino,
    pub initial: HashMap<Ino, Initial>,
    pub ops: Vec<Op>,
    next: Ino,
    /// Every name the recorder knows, as a whole path, and the inode it names now.
    names: HashMap<PathBuf, Ino>,
}

impl Log {
    fn fresh(&mut self) -> Ino {
        self.next += 1;
        self.next
    }
}

#[derive(Debug, Clone)]
pub struct Recorder {
    top: PathBuf,
    log: Arc<Mutex<Log>>,
}

impl Recorder {
    /// Starts recording changes under `top`, whose current content is the durable starting state.
    pub fn start(top: &Path) -> io::Result<Recorder> {
        let mut log = Log::default();
        log.root = log.fresh();
        log.names.insert(top.to_owned(), log.root);
        let root = log.root;
        snapshot(&mut log, top, root)?;
        Ok(Recorder {
            top: top.to_owned(),
            log: Arc::new(Mutex::new(log)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The log so far.
    pub fn log(&self) -> MutexGuard<'_, Log> {
        self.lock()
    }

    /// The inode `path` names, taking in a file or directory made outside the layer (as created and written
    /// now, not synced). `None` outside the recorded tree.
    fn resolve(&self, log: &mut Log, path: &Path) -> io::Result<Option<Ino>> {
        if let Some(&ino) = log.names.get(path) {
            return Ok(Some(ino));
        }
        if !path.starts_with(&self.top) || path == self.top {
            return Ok(None);
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(None);
        };
        let Some(dir) = self.resolve(log, parent)? else {
            return Ok(None);
        };
        let meta = fs::symlink_metadata(path)?;
        let ino = log.fresh();
        let name = name.to_owned();
        if meta.is_dir() {
            log.ops.push(Op::Mkdir { dir, name, ino });
        } else if meta.file_type().is_symlink() {
            let target = fs::read_link(path)?;
            log.ops.push(Op::Symlink {
                dir,
                name,
                ino,
                target,
            });
        } else {
            log.ops.push(Op::Create { dir, name, ino });
            log.ops.push(Op::Append {
                ino,
                bytes: fs::read(path)?,
            });
        }
        log.names.insert(path.to_owned(), ino);
        Ok(Some(ino))
    }

    /// The directory inode and the last component of `path`, when `path` is inside the recorded tree.
    fn place(&self, log: &mut Log, path: &Path) -> io::Result<Option<(Ino, OsString)>> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(None);
        };
        Ok(self.resolve(log, parent)?.map(|dir| (dir, name.to_owned())))
    }
}

/// Takes in what `path` holds as durable initial state.
fn snapshot(log: &mut Log, path: &Path, ino: Ino) -> io::Result<()> {
    let mut children = Vec::new();
    for item in fs::read_dir(path)? {
        let item = item?;
        let child = log.fresh();
        let child_path = item.path();
        log.names.insert(child_path.clone(), child);
        children.push((item.file_name(), child));
        let kind = item.file_type()?;
        if kind.is_dir() {
            snapshot(log, &child_path, child)?;
        } else if kind.is_symlink() {
            log.initial
                .insert(child, Initial::Symlink(fs::read_link(&child_path)?));
        } else {
            log.initial
                .insert(child, Initial::File(fs::read(&child_path)?));
        }
    }
    log.initial.insert(ino, Initial::Dir(children));
    Ok(())
}

/// Moves every known name under `from` to the same place under `to` (a renamed directory's content).
fn move_names(log: &mut Log, from: &Path, to: &Path) {
    let moved: Vec<(PathBuf, Ino)> = log
        .names
        .iter()
        .filter(|(path, _)| path.starts_with(from))
        .map(|(path, &ino)| (path.clone(), ino))
        .collect();
    for (path, ino) in moved {
        log.names.remove(&path);
        if let Ok(rest) = path.strip_prefix(from) {
            log.names.insert(to.join(rest), ino);
        }
    }
}

impl FileOps for Recorder {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn Write + Send>> {
        let mut log = self.lock();
        let file = RealFiles.create_new(path)?;
        let Some((dir, name)) = self.place(&mut log, path)? else {
            return Ok(file);
        };
        let ino = log.fresh();
        log.ops.push(Op::Create { dir, name, ino });
        log.names.insert(path.to_owned(), ino);
        Ok(Box::new(RecordedFile {
            file,
            ino,
            log: Arc::clone(&self.log),
        }))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let mut log = self.lock();
        let existed = path.exists();
        let file = RealFiles.open_append(path)?;
        let ino = if existed {
            self.resolve(&mut log, path)?
        } else {
            match self.place(&mut log, path)? {
                Some((dir, name)) => {
                    let ino = log.fresh();
                    log.ops.push(Op::Create { dir, name, ino });
                    log.names.insert(path.to_owned(), ino);
                    Some(ino)
                }
                None => None,
            }
        };
        Ok(Box::new(RecordedAppend {
            file,
            ino,
            log: Arc::clone(&self.log),
        }))
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let mut log = self.lock();
        RealFiles.sync_file(path)?;
        if let Some(ino) = self.resolve(&mut log, path)? {
            log.ops.push(Op::SyncFile { ino });
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut log = self.lock();
        RealFiles.sync_dir(dir)?;
        if let Some(ino) = self.resolve(&mut log, dir)? {
            log.ops.push(Op::SyncDir { ino });
        }
        Ok(())
    }

    fn sync_fs(&self, path: &Path) -> io::Result<()> {
        let mut log = self.lock();
        RealFiles.sync_fs(path)?;
        log.ops.push(Op::SyncFs);
        Ok(())
    }

    /// The model takes a `syncfs` as making everything before it durable, whatever the filesystem below.
    fn sync_fs_is_durable(&self, _path: &Path) -> bool {
        true
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut log = self.lock();
        let source = self.resolve(&mut log, from)?;
        let from_place = self.place(&mut log, from)?;
        let to_place = self.place(&mut log, to)?;
        RealFiles.rename(from, to)?;
        if let (Some(ino), Some((from_dir, from_name)), Some((to_dir, to_name))) =
            (source, from_place, to_place)
        {
            log.ops.push(Op::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
                ino,
            });
            log.names.remove(to);
            move_names(&mut log, from, to);
        }
        Ok(())
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut log = self.lock();
        RealFiles.create_dir(dir)?;
        if let Some((parent, name)) = self.place(&mut log, dir)? {
            let ino = log.fresh();
            log.ops.push(Op::Mkdir {
                dir: parent,
                name,
                ino,
            });
            log.names.insert(dir.to_owned(), ino);
        }
        Ok(())
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        let mut log = self.lock();
        let source = self.resolve(&mut log, original)?;
        RealFiles.hard_link(original, link)?;
        if let (Some(ino), Some((dir, name))) = (source, self.place(&mut log, link)?) {
            log.ops.push(Op::Link { dir, name, ino });
            log.names.insert(link.to_owned(), ino);
        }
        Ok(())
    }

    fn symlink(&self, target: &Path, link: &Path) -> io::Result<()> {
        let mut log = self.lock();
        RealFiles.symlink(target, link)?;
        if let Some((dir, name)) = self.place(&mut log, link)? {
            let ino = log.fresh();
            log.ops.push(Op::Symlink {
                dir,
                name,
                ino,
                target: target.to_owned(),
            });
            log.names.insert(link.to_owned(), ino);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.remove(path, |p| RealFiles.remove_file(p))
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.remove(dir, |p| RealFiles.remove_dir(p))
    }

    fn set_readonly(&self, path: &Path) -> io::Result<()> {
        // A file made outside the layer (a node's output) is taken in here at the latest: its content is
        // final once the cache makes it read-only, and a `syncfs` that follows covers it.
        let mut log = self.lock();
        self.resolve(&mut log, path)?;
        RealFiles.set_readonly(path)
    }

    fn set_modified(&self, path: &Path, when: SystemTime) -> io::Result<()> {
        RealFiles.set_modified(path, when)
    }
}

impl Recorder {
    fn remove(&self, path: &Path, act: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
        let mut log = self.lock();
        let target = if path.exists() || path.is_symlink() {
            self.resolve(&mut log, path)?
        } else {
            None
        };
        let place = self.place(&mut log, path)?;
        act(path)?;
        if let (Some(ino), Some((dir, name))) = (target, place) {
            log.ops.push(Op::Unlink { dir, name, ino });
            log.names.remove(path);
        }
        Ok(())
    }
}

/// A file made with `create_new`: each write is recorded as an append.
struct RecordedFile {
    file: Box<dyn Write + Send>,
    ino: Ino,
    log: Arc<Mutex<Log>>,
}

impl Write for RecordedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let written = self.file.write(buf)?;
        log.ops.push(Op::Append {
            ino: self.ino,
            bytes: buf[..written].to_vec(),
        });
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[derive(Debug)]
struct RecordedAppend {
    file: Box<dyn AppendFile>,
    ino: Option<Ino>,
    log: Arc<Mutex<Log>>,
}

impl AppendFile for RecordedAppend {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        self.file.append(bytes)?;
        if let Some(ino) = self.ino {
            log.ops.push(Op::Append {
                ino,
                bytes: bytes.to_vec(),
            });
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        self.file.sync()?;
        if let Some(ino) = self.ino {
            log.ops.push(Op::SyncFile { ino });
        }
        Ok(())
    }
}

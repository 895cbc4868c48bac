//! The table of open connections: bounds their number and lets the device
//! close them all (on reprogramming) or close and join them (on stop).

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

#[derive(Debug)]
struct Entry {
    stream: TcpStream,
    handle: Option<JoinHandle<()>>,
    /// Set when the device itself shuts the socket (reprogramming), so the
    /// connection's thread can say why it ended.
    kicked: Arc<AtomicBool>,
}

/// Open connections of one listener, at most `limit`.
#[derive(Debug)]
pub(crate) struct ConnTable {
    limit: usize,
    entries: Mutex<HashMap<u64, Entry>>,
}

impl ConnTable {
    pub fn new(limit: usize) -> ConnTable {
        ConnTable {
            limit,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Registers connection `id` (a clone of its socket) unless the table is
    /// full; returns the flag [`ConnTable::close_all`] sets for it.
    pub fn try_register(&self, id: u64, stream: TcpStream) -> Option<Arc<AtomicBool>> {
        let mut entries = self.lock();
        if entries.len() >= self.limit {
            return None;
        }
        let kicked = Arc::new(AtomicBool::new(false));
        entries.insert(
            id,
            Entry {
                stream,
                handle: None,
                kicked: Arc::clone(&kicked),
            },
        );
        Some(kicked)
    }

    /// Records the thread serving `id`; if it already finished, the handle is
    /// dropped (the thread is gone anyway).
    pub fn set_handle(&self, id: u64, handle: JoinHandle<()>) {
        if let Some(entry) = self.lock().get_mut(&id) {
            entry.handle = Some(handle);
        }
    }

    /// Forgets `id` (its thread is exiting).
    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Shuts every socket down; the threads notice and exit on their own.
    pub fn close_all(&self) -> usize {
        let entries = self.lock();
        for entry in entries.values() {
            entry.kicked.store(true, Ordering::SeqCst);
            let _ = entry.stream.shutdown(Shutdown::Both);
        }
        entries.len()
    }

    /// Shuts every socket down and joins every thread.
    pub fn close_and_join(&self) {
        let entries: Vec<Entry> = self.lock().drain().map(|(_, e)| e).collect();
        for entry in &entries {
            let _ = entry.stream.shutdown(Shutdown::Both);
        }
        for entry in entries {
            if let Some(handle) = entry.handle {
                let _ = handle.join();
            }
        }
    }
}

/// Removes a connection from its table when its thread ends, however it ends.
pub(crate) struct ConnGuard {
    pub table: Arc<ConnTable>,
    pub id: u64,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.table.remove(self.id);
    }
}

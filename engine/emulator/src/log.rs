//! Where the device's log lines go.  Only the CLI prints; the device hands
//! every line to a [`LogSink`] given in its configuration.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// How serious a log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Normal operation: programming, reconfiguration, connections.
    Info,
    /// A client broke the protocol or a limit; only its connection suffers.
    Warn,
    /// Something inside the emulator failed.
    Error,
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEvent {
    /// Severity.
    pub level: Level,
    /// The connection it concerns, if any (ids count from 1 per device).
    pub conn: Option<u64>,
    /// That connection's peer.
    pub peer: Option<SocketAddr>,
    /// The message, one line.
    pub message: String,
}

impl fmt::Display for LogEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.level {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        write!(f, "{level}:")?;
        if let Some(conn) = self.conn {
            write!(f, " conn {conn}")?;
        }
        if let Some(peer) = self.peer {
            write!(f, " ({peer})")?;
        }
        write!(f, " {}", self.message)
    }
}

/// Receives every log line; called from the device's threads.
pub type LogSink = Arc<dyn Fn(&LogEvent) + Send + Sync>;

/// A sink that drops everything.
#[must_use]
pub fn discard() -> LogSink {
    Arc::new(|_| {})
}

/// A bounded in-memory log: keeps the newest `capacity` lines.
#[derive(Debug)]
pub struct MemoryLog {
    lines: Mutex<VecDeque<LogEvent>>,
    capacity: usize,
}

impl MemoryLog {
    /// An empty log keeping at most `capacity` lines.
    #[must_use]
    pub fn new(capacity: usize) -> Arc<MemoryLog> {
        Arc::new(MemoryLog {
            lines: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
        })
    }

    /// A sink appending to this log.
    #[must_use]
    pub fn sink(self: &Arc<Self>) -> LogSink {
        let log = Arc::clone(self);
        Arc::new(move |event| log.push(event.clone()))
    }

    fn push(&self, event: LogEvent) {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == self.capacity {
            lines.pop_front();
        }
        lines.push_back(event);
    }

    /// A copy of the lines held, oldest first.
    #[must_use]
    pub fn events(&self) -> Vec<LogEvent> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect()
    }

    /// The lines held, formatted.
    #[must_use]
    pub fn lines(&self) -> Vec<String> {
        self.events().iter().map(ToString::to_string).collect()
    }
}

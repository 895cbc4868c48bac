//! How a run looks on a terminal: indicatif bars on a TTY, one plain line per event otherwise, JSON with `--json`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// The longest a plain line about a cache hit waits before it is written.
const PLAIN_FLUSH: Duration = Duration::from_millis(100);

use fracflow_core::Observer;
use fracflow_record::EventKind;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug)]
pub enum Reporter {
    Bars {
        multi: MultiProgress,
        overall: ProgressBar,
        running: HashMap<String, ProgressBar>,
    },
    Plain {
        total: usize,
        done: usize,
        /// Lines of cache hits not written yet: a no-op of 10 000 nodes would otherwise make 10 000 writes
        /// to the terminal or log. Written with the next other line, with the first hit `PLAIN_FLUSH`
        /// after the last write, and at the end.
        pending: String,
        flushed: Instant,
    },
    Json,
}

impl Reporter {
    pub fn new(json: bool) -> Reporter {
        if json {
            Reporter::Json
        } else if std::io::stderr().is_terminal() {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let overall = multi.add(ProgressBar::new(0));
            overall.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} nodes  elapsed {elapsed}  eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Reporter::Bars {
                multi,
                overall,
                running: HashMap::new(),
            }
        } else {
            Reporter::Plain {
                total: 0,
                done: 0,
                pending: String::new(),
                flushed: Instant::now(),
            }
        }
    }

    /// Prints a line without tearing the bars.
    fn line(&mut self, text: &str) {
        match self {
            Reporter::Bars { multi, .. } => {
                let _ = multi.println(text);
            }
            Reporter::Plain { pending, .. } => {
                pending.push_str(text);
                pending.push('\n');
                write_plain(pending);
            }
            Reporter::Json => eprintln!("{text}"),
        }
    }
}

/// Writes the buffered plain lines to stderr in one write and empties the buffer.
fn write_plain(pending: &mut String) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(pending.as_bytes());
    let _ = err.flush();
    pending.clear();
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Reporter::Plain { pending, .. } = self
            && !pending.is_empty()
        {
            write_plain(pending);
        }
    }
}

impl Observer for Reporter {
    fn event(&mut self, event: &EventKind) {
        // A no-op reports one hit per node: its line is written in place, without the general path's two
        // formatted strings (the same text: `[done/total] cached   node`).
        if let (
            Reporter::Plain {
                total,
                done,
                pending,
                flushed,
            },
            EventKind::NodeCached { node, .. },
        ) = (&mut *self, event)
        {
            *done += 1;
            let _ = writeln!(pending, "[{done:>5}/{total}] cached   {node}");
            if flushed.elapsed() >= PLAIN_FLUSH {
                write_plain(pending);
                *flushed = Instant::now();
            }
            return;
        }
        if let Reporter::Json = self {
            if let Ok(text) = serde_json::to_string(event) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
            }
            return;
        }
        let finished_one = matches!(
            event,
            EventKind::NodeCached { .. }
                | EventKind::NodeFinished { .. }
                | EventKind::NodeFailed { .. }
                | EventKind::NodeSkipped { .. }
        );
        let text = match event {
            EventKind::RunStarted {
                pipeline,
                run_id,
                nodes,
                testbed,
            } => {
                format!("fracflow: {pipeline} run {run_id}: {nodes} nodes on testbed `{testbed}`")
            }
            EventKind::NodeCached { node, .. } => format!("cached   {node}"),
            EventKind::NodeStarted { node, .. } => format!("started  {node}"),
            EventKind::NodeWaiting {
                node,
                holder_pid,
                holder_host,
                holder_since,
                ..
            } => {
                let by = match (holder_pid, holder_host, holder_since) {
                    (Some(pid), Some(host), Some(since)) => {
                        // RFC 3339 in local time: the clock time is characters 11–18.
                        let clock = since.get(11..19).unwrap_or(since);
                        format!("being built by pid {pid} on host {host} since {clock}")
                    }
                    _ => "being built by another engine on this cache".to_owned(),
                };
                format!("waiting  for `{node}`, {by}")
            }
            EventKind::Warning { message } => format!("warning: {message}"),
            EventKind::NodeFinished { node, seconds, .. } => {
                format!("built    {node} ({seconds:.2}s)")
            }
            EventKind::NodeFailed { node, error } => format!("FAILED   {node}: {error}"),
            EventKind::NodeSkipped { node, reason } => format!("skipped  {node}: {reason}"),
            EventKind::RunRepeated { run_id, nodes } => {
                format!("fracflow: {nodes} nodes cached exactly as in run {run_id}")
            }
            EventKind::RunFinished { status, seconds } => {
                format!("fracflow: run {status} in {seconds:.2}s")
            }
        };
        match self {
            Reporter::Json => {}
            Reporter::Plain {
                total,
                done,
                pending,
                flushed,
            } => {
                if let EventKind::RunStarted { nodes, .. } = event {
                    *total = *nodes;
                }
                let line = if finished_one {
                    *done += 1;
                    format!("[{done:>5}/{total}] {text}\n")
                } else {
                    format!("{text}\n")
                };
                pending.push_str(&line);
                let hit = matches!(event, EventKind::NodeCached { .. });
                if !hit || flushed.elapsed() >= PLAIN_FLUSH {
                    write_plain(pending);
                    *flushed = Instant::now();
                }
            }
            Reporter::Bars {
                multi,
                overall,
                running,
            } => {
                match event {
                    EventKind::RunStarted { nodes, .. } => overall.set_length(*nodes as u64),
                    EventKind::NodeStarted { node, .. } => {
                        let spinner = multi.add(ProgressBar::new_spinner());
                        spinner.set_message(node.clone());
                        spinner.enable_steady_tick(Duration::from_millis(120));
                        running.insert(node.clone(), spinner);
                    }
                    _ => {}
                }
                if let Some(node) = event.node()
                    && finished_one
                {
                    if let Some(spinner) = running.remove(node) {
                        spinner.finish_and_clear();
                        multi.remove(&spinner);
                    }
                    overall.inc(1);
                }
                let quiet = matches!(
                    event,
                    EventKind::NodeCached { .. } | EventKind::NodeStarted { .. }
                );
                if !quiet {
                    self.line(&text);
                }
                if let (Reporter::Bars { overall, .. }, EventKind::RunFinished { .. }) =
                    (&*self, event)
                {
                    overall.finish_and_clear();
                }
            }
        }
    }
}

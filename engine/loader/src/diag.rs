//! Diagnostics: what went wrong, where, and how it is shown (rustc style).

use std::fmt;
use std::path::PathBuf;

/// One problem found while loading, pointing at the YAML that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file as shown to the user: relative to the project root when it lies under it.
    /// Empty when the problem has no file (e.g. a bad command-line option before any file was read).
    pub file: PathBuf,
    /// 1-based line; 0 when the position is unknown.
    pub line: usize,
    /// 1-based column in characters; 0 when unknown.
    pub column: usize,
    pub message: String,
    /// Shown after the caret, e.g. "did you mean `deps`?".
    pub hint: Option<String>,
    /// Extra lines shown as `= note: …` (e.g. the other members of a cycle).
    pub notes: Vec<String>,
    /// The text of `line`, for the excerpt.
    pub source_line: Option<String>,
}

impl Diagnostic {
    /// A diagnostic without a position.
    pub fn new(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: PathBuf::new(),
            line: 0,
            column: 0,
            message: message.into(),
            hint: None,
            notes: Vec::new(),
            source_line: None,
        }
    }

    pub fn with_hint(mut self, hint: Option<String>) -> Diagnostic {
        if hint.is_some() {
            self.hint = hint;
        }
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.message)?;
        let has_file = !self.file.as_os_str().is_empty();
        let excerpt = match (&self.source_line, self.line) {
            (Some(text), line) if line > 0 && has_file => Some(text),
            _ => None,
        };
        let width = if excerpt.is_some() {
            self.line.to_string().len()
        } else {
            1
        };
        let pad = " ".repeat(width);
        if has_file {
            if self.line > 0 {
                write!(
                    f,
                    "\n{pad}--> {}:{}:{}",
                    self.file.display(),
                    self.line,
                    self.column
                )?;
            } else {
                write!(f, "\n{pad}--> {}", self.file.display())?;
            }
        }
        let mut hint_shown = false;
        if let Some(text) = excerpt {
            let shown = expand_tabs(text);
            let caret_at = caret_offset(text, self.column);
            write!(f, "\n{pad} |")?;
            write!(f, "\n{} | {}", self.line, shown.trim_end())?;
            write!(f, "\n{pad} | {}^", " ".repeat(caret_at))?;
            if let Some(hint) = &self.hint {
                write!(f, " hint: {hint}")?;
                hint_shown = true;
            }
        }
        if !hint_shown && let Some(hint) = &self.hint {
            write!(f, "\n{pad} = hint: {hint}")?;
        }
        for note in &self.notes {
            write!(f, "\n{pad} = note: {note}")?;
        }
        Ok(())
    }
}

fn expand_tabs(text: &str) -> String {
    text.replace('\t', "    ")
}

/// Display offset of 1-based character column `column` in `text`, with tabs shown as four spaces.
fn caret_offset(text: &str, column: usize) -> usize {
    text.chars()
        .take(column.saturating_sub(1))
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

/// Every problem of one load, reported together.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(diagnostic: Diagnostic) -> Diagnostics {
        Diagnostics(vec![diagnostic])
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n\n")?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

pub(crate) use fracflow_core::suggest::{did_you_mean, list_choices, list_names};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_rustc_style() {
        let d = Diagnostic {
            file: "pipelines/demo.yaml".into(),
            line: 12,
            column: 5,
            message: "unknown key `deps_on` in node `gen`".into(),
            hint: Some("did you mean `deps`?".into()),
            notes: vec![],
            source_line: Some("    deps_on: [a]".into()),
        };
        assert_eq!(
            d.to_string(),
            "error: unknown key `deps_on` in node `gen`\n  --> pipelines/demo.yaml:12:5\n   |\n12 |     deps_on: [a]\n   |     ^ hint: did you mean `deps`?"
        );
    }
}

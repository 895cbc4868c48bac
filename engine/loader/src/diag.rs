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

/// Edit distance in characters, counting a swap of two neighbours as one edit (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub(crate) fn closest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let limit = (word.chars().count().max(3)) / 3;
    let lower = word.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == word {
            continue;
        }
        let other = candidate.to_lowercase();
        let distance = if other == lower {
            0
        } else {
            edit_distance(word, candidate)
        };
        // `deps_on` → `deps`: one name containing the other counts as close, however long the rest.
        let contains =
            lower.len().min(other.len()) >= 3 && (lower.contains(&other) || other.contains(&lower));
        if (distance <= limit || contains) && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// "did you mean `x`?" for the closest candidate.
pub(crate) fn did_you_mean<'a, I>(word: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
{
    closest(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// `a`, `b` and `c` — for messages listing what exists.
pub(crate) fn list_names<'a, I>(names: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    join_names(names, "and")
}

/// `a`, `b` or `c` — for messages listing what is allowed.
pub(crate) fn list_choices<'a, I>(names: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    join_names(names, "or")
}

fn join_names<'a, I>(names: I, conjunction: &str) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    let names: Vec<String> = names.into_iter().map(|n| format!("`{n}`")).collect();
    match names.len() {
        0 => "none".to_owned(),
        1 => names[0].clone(),
        n => format!(
            "{} {conjunction} {}",
            names[..n - 1].join(", "),
            names[n - 1]
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("deps_on", "deps"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("bulid", "build"), 1);
        assert_eq!(closest("bulid", ["build", "test"]), Some("build"));
        assert_eq!(closest("deps_on", ["deps", "outputs"]), Some("deps"));
        assert_eq!(closest("zzz", ["deps", "outputs"]), None);
        assert_eq!(closest("Run", ["run"]), Some("run"));
    }

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

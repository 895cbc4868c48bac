//! String templates: `{name}` substitutes a value, `{X - 64}` computes with integers (`+ - * // %`, unary
//! minus, parentheses), `{{` and `}}` are literal braces.

use serde_json::Value;

use crate::tree::Loc;

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template {
    pub pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Lit(String),
    /// `{…}`: the source text between the braces, and what it means.
    Expr(String, Expr),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Int(i64),
    Name(String),
    Neg(Box<Expr>),
    Bin(Op, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    FloorDiv,
    Mod,
}

/// What went wrong in a template; `loc` is set when the problem lies in another string (a param's value).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TemplateError {
    pub message: String,
    pub hint: Option<String>,
    pub loc: Option<Loc>,
}

impl TemplateError {
    pub fn new(message: impl Into<String>, hint: Option<&str>) -> TemplateError {
        TemplateError {
            message: message.into(),
            hint: hint.map(str::to_owned),
            loc: None,
        }
    }
}

const BRACES_HINT: &str = "write `{{` and `}}` for literal braces (shell's `${VAR}` is `${{VAR}}`)";

/// Whether `text` needs template processing at all.
pub(crate) fn has_braces(text: &str) -> bool {
    text.contains(['{', '}'])
}

/// Up to 24 characters of `text` from byte `at`, on one line, for messages.
fn excerpt(text: &str, at: usize) -> String {
    let rest = text.get(at..).unwrap_or_default();
    let line = rest.lines().next().unwrap_or_default();
    let mut shown: String = line.chars().take(24).collect();
    if shown.len() < rest.len() {
        shown.push('…');
    }
    shown
}

pub(crate) fn parse(text: &str) -> Result<Template, TemplateError> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(['{', '}']) {
        literal.push_str(&rest[..at]);
        let brace = &rest[at..];
        if let Some(after) = brace.strip_prefix("{{") {
            literal.push('{');
            rest = after;
        } else if let Some(after) = brace.strip_prefix("}}") {
            literal.push('}');
            rest = after;
        } else if brace.starts_with('}') {
            let offset = text.len() - brace.len();
            return Err(TemplateError::new(
                format!("unmatched `}}` at `{}`", excerpt(text, offset)),
                Some("write `}}` for a literal `}`"),
            ));
        } else {
            let offset = text.len() - brace.len();
            let Some(close) = brace.find('}') else {
                return Err(TemplateError::new(
                    format!("unclosed `{{` at `{}`", excerpt(text, offset)),
                    Some("close it with `}`, or write `{{` for a literal `{`"),
                ));
            };
            let source = &brace[1..close];
            if source.contains('{') {
                return Err(TemplateError::new(
                    format!("unclosed `{{` at `{}`", excerpt(text, offset)),
                    Some("close it with `}`, or write `{{` for a literal `{`"),
                ));
            }
            if source.trim().is_empty() {
                return Err(TemplateError::new(
                    "empty `{}` in template",
                    Some("put a name inside, or write `{{}}` for literal braces"),
                ));
            }
            let expr = parse_expr(source).map_err(|why| {
                TemplateError::new(
                    format!("cannot read `{{{source}}}` as a template: {why}"),
                    Some(BRACES_HINT),
                )
            })?;
            if !literal.is_empty() {
                pieces.push(Piece::Lit(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Expr(source.trim().to_owned(), expr));
            rest = &brace[close + 1..];
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Lit(literal));
    }
    Ok(Template { pieces })
}

impl Template {
    /// Every name the template refers to, in order of appearance.
    pub fn names(&self) -> Vec<&str> {
        let mut names = Vec::new();
        for piece in &self.pieces {
            if let Piece::Expr(_, expr) = piece {
                expr.names(&mut names);
            }
        }
        names
    }

    /// Fills the template in; `lookup` gives each name's value.
    pub fn render(
        &self,
        lookup: &mut dyn FnMut(&str) -> Result<Value, TemplateError>,
    ) -> Result<String, TemplateError> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Lit(text) => out.push_str(text),
                Piece::Expr(_, Expr::Name(name)) => {
                    let value = lookup(name)?;
                    out.push_str(&substitution(name, &value)?);
                }
                Piece::Expr(source, expr) => out.push_str(&eval(expr, source, lookup)?.to_string()),
            }
        }
        Ok(out)
    }
}

impl Template {
    /// Fills the template in as a command for `sh -c`: each substituted value is quoted for the shell context
    /// it lands in (see [`shell_contexts`]), so no value can become shell syntax. The literal text is the
    /// author's and stays shell code.
    pub fn render_shell(
        &self,
        lookup: &mut dyn FnMut(&str) -> Result<Value, TemplateError>,
    ) -> Result<String, TemplateError> {
        let contexts = shell_contexts(&self.pieces)?;
        let mut contexts = contexts.into_iter();
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Lit(text) => out.push_str(text),
                Piece::Expr(source, expr) => {
                    let text = match expr {
                        Expr::Name(name) => substitution(name, &lookup(name)?)?,
                        _ => eval(expr, source, lookup)?.to_string(),
                    };
                    let context = contexts.next().ok_or_else(|| {
                        TemplateError::new("the shell lexer lost track of a substitution", None)
                    })?;
                    out.push_str(&shell_quote(&text, context, source)?);
                }
            }
        }
        Ok(out)
    }
}

/// Where a substituted value lands in a shell command, which decides how it is quoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShellContext {
    /// Outside any quotes (also inside `$(…)`): the value becomes one single-quoted word.
    Unquoted,
    /// Inside the author's `"…"`: `\`, `"`, `$` and `` ` `` are escaped.
    DoubleQuoted,
    /// Inside the author's `'…'`: each `'` closes the quotes, is escaped, and reopens them.
    SingleQuoted,
    /// Inside `$((…))`: only an integer is accepted, since arithmetic evaluates names and subscripts.
    Arithmetic,
    /// After a `#` comment start: the text is inert, and a newline (which would end the comment) becomes a space.
    Comment,
}

/// Characters a value may hold and still stand unquoted as one literal word. Anything else (blanks, quotes,
/// `$`, globs, `~`, `=`, `#`, braces, operators) gets quoted; keeping plain words bare keeps the resolved command,
/// and so the node's key, what it was before quoting existed.
fn is_plain_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':' | ',' | '+' | '@' | '%')
}

/// `value` written so that, in `context`, the shell reads it back as exactly `value` and nothing else.
pub(crate) fn shell_quote(
    value: &str,
    context: ShellContext,
    source: &str,
) -> Result<String, TemplateError> {
    if value.contains('\0') {
        return Err(TemplateError::new(
            format!("`{{{source}}}` holds a NUL character, which a shell command cannot contain"),
            None,
        ));
    }
    Ok(match context {
        ShellContext::Unquoted => {
            if !value.is_empty() && value.chars().all(is_plain_word_char) {
                value.to_owned()
            } else {
                format!("'{}'", value.replace('\'', r"'\''"))
            }
        }
        ShellContext::DoubleQuoted => {
            let mut out = String::with_capacity(value.len());
            for c in value.chars() {
                if matches!(c, '\\' | '"' | '$' | '`') {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        }
        ShellContext::SingleQuoted => value.replace('\'', r"'\''"),
        ShellContext::Arithmetic => {
            let digits = value.strip_prefix('-').unwrap_or(value);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(TemplateError::new(
                    format!(
                        "`{{{source}}}` is inside `$((…))`, where only an integer may go, but its value is `{value}`"
                    ),
                    Some("pass it through `env:` and compute with it in the script"),
                ));
            }
            value.to_owned()
        }
        ShellContext::Comment => value.replace(['\n', '\r'], " "),
    })
}

/// Stands for a substitution while the literal text around it is lexed. A shell command cannot hold a NUL
/// (it goes to `sh -c` as a C string), so it cannot clash with the author's text.
const SLOT: char = '\0';

/// One level of shell quoting or nesting the lexer is inside.
#[derive(Debug, Clone, PartialEq)]
enum Frame {
    /// Commands: the top level, or inside `$(…)` (`nested`), counting the `(` of subshells opened inside.
    Commands {
        nested: bool,
        parens: usize,
    },
    Double,
    Single,
    /// `$'…'`: bash's backslash escapes, which single-quote escaping does not survive.
    AnsiC,
    Backtick,
    /// `${…}`: its word follows rules of its own.
    Parameter,
    Arithmetic {
        parens: usize,
    },
    Comment,
    /// A here-document's body, up to the line `delimiter`.
    HereDoc {
        delimiter: String,
        strip_tabs: bool,
    },
}

/// The context a substitution stands in, or why quoting cannot make a value safe there.
fn refusal(stack: &[Frame], escaped: bool, after_dollar: bool) -> Result<ShellContext, String> {
    if escaped {
        return Err(
            "right after a backslash, which would take the quoting of its first character away"
                .into(),
        );
    }
    if after_dollar {
        return Err("right after `$`, where it would be read as a variable's name; a shell variable is written `$NAME` or `${{NAME}}`".into());
    }
    for frame in stack {
        match frame {
            Frame::Backtick => {
                return Err(
                    "inside backticks, whose backslash rules undo quoting; use `$(…)`".into(),
                );
            }
            Frame::Parameter => {
                return Err("inside `${…}`, whose word follows quoting rules of its own".into());
            }
            Frame::AnsiC => {
                return Err("inside `$'…'`, whose backslash escapes undo quoting".into());
            }
            Frame::HereDoc { .. } => return Err(
                "inside a here-document, where no quoting can hold a line such as its delimiter"
                    .into(),
            ),
            _ => {}
        }
    }
    Ok(match stack.last() {
        Some(Frame::Double) => ShellContext::DoubleQuoted,
        Some(Frame::Single) => ShellContext::SingleQuoted,
        Some(Frame::Arithmetic { .. }) => ShellContext::Arithmetic,
        Some(Frame::Comment) => ShellContext::Comment,
        _ => ShellContext::Unquoted,
    })
}

/// The shell context of each substitution in `pieces`, in order: a small lexer of POSIX `sh` quoting (quotes,
/// backslashes, `$(…)`, `$((…))`, `${…}`, backticks, comments, here-documents). Where quoting cannot make a
/// value safe, an error says why.
pub(crate) fn shell_contexts(pieces: &[Piece]) -> Result<Vec<ShellContext>, TemplateError> {
    let mut text = String::new();
    let mut sources = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Lit(literal) => {
                if literal.contains(SLOT) {
                    return Err(TemplateError::new(
                        "the command holds a NUL character, which a shell command cannot contain",
                        None,
                    ));
                }
                text.push_str(literal);
            }
            Piece::Expr(source, _) => {
                text.push(SLOT);
                sources.push(source.as_str());
            }
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let mut contexts = Vec::new();
    let mut stack = vec![Frame::Commands {
        nested: false,
        parens: 0,
    }];
    // Here-documents announced on the current line, whose bodies start at its end.
    let mut pending: Vec<(String, bool)> = Vec::new();
    let mut escaped = false;
    let mut word_start = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let after_dollar = i > 0 && chars[i - 1] == '$' && !escaped_dollar(&chars, i - 1);
        if c == SLOT {
            let context = refusal(&stack, escaped, after_dollar && dollar_expands(&stack))
                .map_err(|why| {
                    let source = sources.get(contexts.len()).copied().unwrap_or_default();
                    TemplateError::new(
                        format!("`{{{source}}}` cannot be substituted into this shell command: it stands {why}"),
                        Some("pass the value through `env:` and use \"$NAME\", or use the argv-list form of `run`"),
                    )
                })?;
            contexts.push(context);
            escaped = false;
            word_start = false;
            i += 1;
            continue;
        }
        if escaped {
            escaped = false;
            i += 1;
            continue;
        }
        let top = stack.len() - 1;
        match &mut stack[top] {
            Frame::Single => {
                if c == '\'' {
                    stack.pop();
                }
            }
            Frame::Comment => {
                if c == '\n' {
                    stack.pop();
                    word_start = true;
                    start_here_docs(&mut stack, &mut pending);
                }
            }
            Frame::HereDoc {
                delimiter,
                strip_tabs,
            } => {
                // At a line's start: is this line the delimiter?
                let at_line_start = i == 0 || chars[i - 1] == '\n';
                if at_line_start {
                    let end = chars[i..]
                        .iter()
                        .position(|&c| c == '\n')
                        .map_or(chars.len(), |p| i + p);
                    let line: String = chars[i..end].iter().collect();
                    let line = if *strip_tabs {
                        line.trim_start_matches('\t')
                    } else {
                        &line
                    };
                    if line == delimiter.as_str() {
                        stack.pop();
                        i = end + 1;
                        start_here_docs(&mut stack, &mut pending);
                        continue;
                    }
                }
            }
            Frame::AnsiC | Frame::Backtick | Frame::Double | Frame::Parameter => {
                let frame = stack[top].clone();
                match (c, &frame) {
                    ('\\', _) => escaped = true,
                    ('\'', Frame::AnsiC)
                    | ('`', Frame::Backtick)
                    | ('"', Frame::Double)
                    | ('}', Frame::Parameter) => {
                        stack.pop();
                    }
                    (_, Frame::AnsiC) => {}
                    ('"', Frame::Parameter) => stack.push(Frame::Double),
                    ('\'', Frame::Parameter) => stack.push(Frame::Single),
                    _ => i += open_expansion(&chars, i, &mut stack),
                }
            }
            Frame::Arithmetic { parens } => match c {
                '(' => *parens += 1,
                ')' if *parens == 0 && next == Some(')') => {
                    stack.pop();
                    i += 1;
                }
                ')' => *parens = parens.saturating_sub(1),
                '\\' => escaped = true,
                '"' => stack.push(Frame::Double),
                _ => i += open_expansion(&chars, i, &mut stack),
            },
            Frame::Commands { nested, parens } => {
                let starts_word = word_start;
                word_start = false;
                match c {
                    '\\' => escaped = true,
                    '\'' => stack.push(Frame::Single),
                    '"' => stack.push(Frame::Double),
                    '#' if starts_word => stack.push(Frame::Comment),
                    '(' => {
                        *parens += 1;
                        word_start = true;
                    }
                    ')' => {
                        if *parens == 0 && *nested {
                            stack.pop();
                        } else {
                            *parens = parens.saturating_sub(1);
                            word_start = true;
                        }
                    }
                    '\n' => {
                        word_start = true;
                        start_here_docs(&mut stack, &mut pending);
                    }
                    '<' if next == Some('<') && chars.get(i + 2) != Some(&'<') => {
                        let (delimiter, strip_tabs, used) = here_doc_delimiter(&chars, i + 2)
                            .map_err(|why| {
                                TemplateError::new(why, Some("write the delimiter as literal text"))
                            })?;
                        pending.push((delimiter, strip_tabs));
                        i += 2 + used;
                        word_start = true;
                        continue;
                    }
                    c if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>') => {
                        word_start = true;
                    }
                    _ => i += open_expansion(&chars, i, &mut stack),
                }
            }
        }
        i += 1;
    }
    Ok(contexts)
}

/// Whether the `$` at `at` is literal because a backslash before it (itself not escaped) quotes it.
fn escaped_dollar(chars: &[char], at: usize) -> bool {
    let backslashes = chars[..at].iter().rev().take_while(|&&c| c == '\\').count();
    backslashes % 2 == 1
}

/// Whether a `$` expands where the lexer stands (not inside single quotes or a comment).
fn dollar_expands(stack: &[Frame]) -> bool {
    !matches!(
        stack.last(),
        Some(Frame::Single | Frame::Comment | Frame::AnsiC)
    )
}

/// Opens `$((`, `$(`, `${`, `$'` or a backtick at `at`; returns how many characters beyond the first it used.
fn open_expansion(chars: &[char], at: usize, stack: &mut Vec<Frame>) -> usize {
    let inside_double = matches!(stack.last(), Some(Frame::Double));
    match (chars[at], chars.get(at + 1), chars.get(at + 2)) {
        ('`', _, _) => {
            stack.push(Frame::Backtick);
            0
        }
        ('$', Some('('), Some('(')) => {
            stack.push(Frame::Arithmetic { parens: 0 });
            2
        }
        ('$', Some('('), _) => {
            stack.push(Frame::Commands {
                nested: true,
                parens: 0,
            });
            1
        }
        ('$', Some('{'), _) => {
            stack.push(Frame::Parameter);
            1
        }
        // Inside double quotes `$'` is a `$` and a quote character.
        ('$', Some('\''), _) if !inside_double => {
            stack.push(Frame::AnsiC);
            1
        }
        _ => 0,
    }
}

/// Enters the bodies of the here-documents announced on the line that just ended (the first one; the others
/// follow it when it closes).
fn start_here_docs(stack: &mut Vec<Frame>, pending: &mut Vec<(String, bool)>) {
    if !pending.is_empty() {
        let (delimiter, strip_tabs) = pending.remove(0);
        stack.push(Frame::HereDoc {
            delimiter,
            strip_tabs,
        });
    }
}

/// The delimiter word after `<<` (from `at`): its text with quotes removed, whether `<<-` strips tabs, and how
/// many characters it took.
fn here_doc_delimiter(chars: &[char], at: usize) -> Result<(String, bool, usize), String> {
    let mut i = at;
    let strip_tabs = chars.get(i) == Some(&'-');
    if strip_tabs {
        i += 1;
    }
    while chars.get(i).is_some_and(|c| *c == ' ' || *c == '\t') {
        i += 1;
    }
    let mut delimiter = String::new();
    let mut quote: Option<char> = None;
    while let Some(&c) = chars.get(i) {
        match (quote, c) {
            (_, SLOT) => {
                return Err("a here-document's delimiter cannot be a template substitution".into());
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => delimiter.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') => {}
            (None, c)
                if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>' | '(' | ')') =>
            {
                break;
            }
            (None, c) => delimiter.push(c),
        }
        i += 1;
    }
    Ok((delimiter, strip_tabs, i - at))
}

/// A value as text inside a string.
fn substitution(name: &str, value: &Value) -> Result<String, TemplateError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Err(TemplateError::new(
            format!("`{name}` is null and cannot be put into a string"),
            None,
        )),
        Value::Array(_) => Err(TemplateError::new(
            format!("`{name}` is a list and cannot be put into a string"),
            None,
        )),
        Value::Object(_) => Err(TemplateError::new(
            format!("`{name}` is a mapping and cannot be put into a string"),
            None,
        )),
    }
}

impl Expr {
    fn names<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::Int(_) => {}
            Expr::Name(name) => out.push(name),
            Expr::Neg(inner) => inner.names(out),
            Expr::Bin(_, a, b) => {
                a.names(out);
                b.names(out);
            }
        }
    }
}

fn eval(
    expr: &Expr,
    source: &str,
    lookup: &mut dyn FnMut(&str) -> Result<Value, TemplateError>,
) -> Result<i64, TemplateError> {
    let overflow = || TemplateError::new(format!("integer overflow in `{{{source}}}`"), None);
    match expr {
        Expr::Int(i) => Ok(*i),
        Expr::Name(name) => {
            let value = lookup(name)?;
            match value.as_i64() {
                Some(i) => Ok(i),
                None => Err(TemplateError::new(
                    format!(
                        "`{name}` is not an integer (it is {}), so `{{{source}}}` cannot be computed",
                        describe(&value)
                    ),
                    None,
                )),
            }
        }
        Expr::Neg(inner) => eval(inner, source, lookup)?
            .checked_neg()
            .ok_or_else(overflow),
        Expr::Bin(op, a, b) => {
            let a = eval(a, source, lookup)?;
            let b = eval(b, source, lookup)?;
            if matches!(op, Op::FloorDiv | Op::Mod) && b == 0 {
                return Err(TemplateError::new(
                    format!("division by zero in `{{{source}}}`"),
                    None,
                ));
            }
            match op {
                Op::Add => a.checked_add(b),
                Op::Sub => a.checked_sub(b),
                Op::Mul => a.checked_mul(b),
                Op::FloorDiv => floor_div(a, b),
                Op::Mod => floor_mod(a, b),
            }
            .ok_or_else(overflow)
        }
    }
}

/// Python's `//`: rounds toward negative infinity.
fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q.checked_sub(1)
    } else {
        Some(q)
    }
}

/// Python's `%`: the result has the divisor's sign.
fn floor_mod(a: i64, b: i64) -> Option<i64> {
    let r = a.checked_rem(b)?;
    if r != 0 && ((r < 0) != (b < 0)) {
        r.checked_add(b)
    } else {
        Some(r)
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("the string `{s}`"),
        Value::Number(n) => format!("the number `{n}`"),
        Value::Bool(b) => format!("`{b}`"),
        Value::Null => "null".to_owned(),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

/// If the whole of `text` is an integer expression without names (`"1024 - 64"`, `"42"`), its value.
pub(crate) fn integer_expression(text: &str) -> Option<Result<i64, TemplateError>> {
    if !text.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let expr = parse_expr(text).ok()?;
    let mut names = Vec::new();
    expr.names(&mut names);
    if !names.is_empty() {
        return None;
    }
    let mut no_names = |name: &str| -> Result<Value, TemplateError> {
        Err(TemplateError::new(format!("unknown name `{name}`"), None))
    };
    Some(eval(&expr, text.trim(), &mut no_names))
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Int(i64),
    Name(String),
    Op(Op),
    Minus,
    Plus,
    Open,
    Close,
}

fn tokenize(source: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = source.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '0'..='9' => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let digits: String = chars[start..i].iter().collect();
                if digits.len() > 1 && digits.starts_with('0') {
                    return Err(format!("`{digits}`: leading zeros are not allowed"));
                }
                let value = digits
                    .parse()
                    .map_err(|_| format!("`{digits}` is too large"))?;
                tokens.push(Token::Int(value));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                tokens.push(Token::Name(chars[start..i].iter().collect()));
            }
            '+' => {
                tokens.push(Token::Plus);
                i += 1;
            }
            '-' => {
                tokens.push(Token::Minus);
                i += 1;
            }
            '*' => {
                tokens.push(Token::Op(Op::Mul));
                i += 1;
            }
            '%' => {
                tokens.push(Token::Op(Op::Mod));
                i += 1;
            }
            '/' => {
                if chars.get(i + 1) == Some(&'/') {
                    tokens.push(Token::Op(Op::FloorDiv));
                    i += 2;
                } else {
                    return Err(
                        "`/` is not an operator here; use `//` for integer division".to_owned()
                    );
                }
            }
            '(' => {
                tokens.push(Token::Open);
                i += 1;
            }
            ')' => {
                tokens.push(Token::Close);
                i += 1;
            }
            other => return Err(format!("unexpected `{other}`")),
        }
    }
    Ok(tokens)
}

fn parse_expr(source: &str) -> Result<Expr, String> {
    let tokens = tokenize(source)?;
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
    };
    let expr = parser.sum()?;
    match parser.tokens.get(parser.at) {
        None => Ok(expr),
        Some(token) => Err(format!("unexpected {}", token_text(token))),
    }
}

fn token_text(token: &Token) -> String {
    match token {
        Token::Int(i) => format!("`{i}`"),
        Token::Name(n) => format!("`{n}`"),
        Token::Op(Op::Add) | Token::Plus => "`+`".to_owned(),
        Token::Op(Op::Sub) | Token::Minus => "`-`".to_owned(),
        Token::Op(Op::Mul) => "`*`".to_owned(),
        Token::Op(Op::FloorDiv) => "`//`".to_owned(),
        Token::Op(Op::Mod) => "`%`".to_owned(),
        Token::Open => "`(`".to_owned(),
        Token::Close => "`)`".to_owned(),
    }
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut left = self.product()?;
        loop {
            let op = match self.peek() {
                Some(Token::Plus) => Op::Add,
                Some(Token::Minus) => Op::Sub,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.product()?;
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        while let Some(Token::Op(op)) = self.peek() {
            let op = *op;
            self.at += 1;
            let right = self.unary()?;
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if let Some(Token::Minus) = self.peek() {
            self.at += 1;
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr, String> {
        let token = self.peek().cloned();
        self.at += 1;
        match token {
            Some(Token::Int(i)) => Ok(Expr::Int(i)),
            Some(Token::Name(name)) => Ok(Expr::Name(name)),
            Some(Token::Open) => {
                let inner = self.sum()?;
                match self.peek() {
                    Some(Token::Close) => {
                        self.at += 1;
                        Ok(inner)
                    }
                    _ => Err("missing `)`".to_owned()),
                }
            }
            Some(other) => Err(format!("unexpected {}", token_text(&other))),
            None => Err("the expression ends too early".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(text: &str) -> Result<String, TemplateError> {
        let template = parse(text)?;
        template.render(&mut |name| match name {
            "X" => Ok(Value::from(1024)),
            "k" => Ok(Value::from(4)),
            "zero" => Ok(Value::from(0)),
            "s" => Ok(Value::from("text")),
            other => Err(TemplateError::new(format!("unknown name `{other}`"), None)),
        })
    }

    #[test]
    fn substitution_and_arithmetic() {
        assert_eq!(render("m={X} k={k}").as_deref(), Ok("m=1024 k=4"));
        assert_eq!(render("{X - 64}").as_deref(), Ok("960"));
        assert_eq!(render("{X // k * 2 + 1}").as_deref(), Ok("513"));
        assert_eq!(render("{-(k - 10) % 4}").as_deref(), Ok("2"));
        assert_eq!(
            render("{-7 // 2} {-7 % 2} {7 // -2}").as_deref(),
            Ok("-4 1 -4")
        );
        assert_eq!(render("${{HOME}} {{x}}").as_deref(), Ok("${HOME} {x}"));
        assert_eq!(
            render("$FRACFLOW_OUT/{s}.txt").as_deref(),
            Ok("$FRACFLOW_OUT/text.txt")
        );
    }

    #[test]
    fn errors() {
        assert!(render("{X").is_err_and(|e| e.message.starts_with("unclosed `{`")));
        assert!(render("a } b").is_err_and(|e| e.message.starts_with("unmatched `}`")));
        assert!(render("{}").is_err_and(|e| e.message.contains("empty")));
        assert!(render("{X / 2}").is_err_and(|e| e.message.contains("`//`")));
        assert!(render("{k // zero}").is_err_and(|e| e.message.contains("division by zero")));
        assert!(render("{s + 1}").is_err_and(|e| e.message.contains("not an integer")));
        assert!(render("{9223372036854775807 + 1}").is_err_and(|e| e.message.contains("overflow")));
        assert!(render("{print $1}").is_err_and(|e| e.hint.is_some()));
    }

    #[test]
    fn whole_integer_expressions() {
        assert_eq!(integer_expression("1024 - 64"), Some(Ok(960)));
        assert_eq!(integer_expression(" 42 "), Some(Ok(42)));
        assert_eq!(integer_expression("-3"), Some(Ok(-3)));
        assert_eq!(integer_expression("abc"), None);
        assert_eq!(integer_expression("x1 + 2"), None);
        assert_eq!(integer_expression("1.5"), None);
        assert_eq!(integer_expression("2024-01-01"), None);
        assert!(integer_expression("5 // 0").is_some_and(|r| r.is_err()));
    }

    fn render_shell_with(text: &str, value: &str) -> Result<String, TemplateError> {
        parse(text)?.render_shell(&mut |name| match name {
            "v" => Ok(Value::from(value)),
            "n" => Ok(Value::from(-42)),
            other => Err(TemplateError::new(format!("unknown name `{other}`"), None)),
        })
    }

    fn contexts_of(text: &str) -> Result<Vec<ShellContext>, TemplateError> {
        shell_contexts(&parse(text)?.pieces)
    }

    /// What `sh -c command` prints on stdout.
    fn shell_prints(command: &str) -> String {
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .output()
            .unwrap_or_else(|e| panic!("cannot run sh: {e}"));
        assert!(output.status.success(), "sh -c {command:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    #[test]
    fn the_lexer_knows_where_each_substitution_stands() -> Result<(), TemplateError> {
        use ShellContext::*;
        let cases: &[(&str, &[ShellContext])] = &[
            ("echo {v} > \"$FRACFLOW_OUT/a.txt\"", &[Unquoted]),
            (
                "echo \"{v}\" '{v}' x{v}y",
                &[DoubleQuoted, SingleQuoted, Unquoted],
            ),
            (
                "echo \"a $(echo {v}) b\" '\"{v}\"'",
                &[Unquoted, SingleQuoted],
            ),
            ("echo \"$(echo \"{v}\")\"", &[DoubleQuoted]),
            (
                "echo $(( {n} * 2 )) $(( $(cat f) * {n} ))",
                &[Arithmetic, Arithmetic],
            ),
            (
                "echo a#b{v} # {v}\necho {v}",
                &[Unquoted, Comment, Unquoted],
            ),
            ("cat <<EOF\nbody\nEOF\necho {v}", &[Unquoted]),
            (
                "cat <<-'END' > f\n\tbody {{x}}\n\tEND\necho \"{v}\"",
                &[DoubleQuoted],
            ),
            ("echo \\\"{v}\\\"", &[Unquoted]),
            (
                "case \"{v}\" in a) echo {v};; *) ;; esac; echo '{v}'",
                &[DoubleQuoted, Unquoted, SingleQuoted],
            ),
            (
                "(cd x && echo {v}); echo \"${{HOME}}\" {v}",
                &[Unquoted, Unquoted],
            ),
            ("awk '{{s += $1 * {v}}} END {{print s}}'", &[SingleQuoted]),
            ("echo \"\\\"{v}\\\"\" \\${v}", &[DoubleQuoted, Unquoted]),
            ("echo \"$'{v}'\"", &[DoubleQuoted]),
        ];
        for (text, expected) in cases {
            assert_eq!(contexts_of(text)?, *expected, "in {text:?}");
        }
        Ok(())
    }

    #[test]
    fn a_substitution_that_quoting_cannot_hold_is_refused_saying_why() {
        let cases = [
            ("echo \\{v}", "right after a backslash"),
            ("echo \"\\{v}\"", "right after a backslash"),
            ("echo `echo {v}`", "inside backticks"),
            ("echo ${{X:-{v}}}", "inside `${…}`"),
            ("echo $'{v}'", "inside `$'…'`"),
            ("cat <<EOF\n{v}\nEOF", "inside a here-document"),
            ("echo ${v}", "right after `$`"),
            ("echo \"${v}\"", "right after `$`"),
            ("cat <<{v}\nx\n", "delimiter cannot be a template"),
        ];
        for (text, why) in cases {
            match render_shell_with(text, "x") {
                Err(error) => assert!(
                    error.message.contains(why),
                    "{text:?}: {} (expected {why:?})",
                    error.message
                ),
                Ok(done) => panic!("{text:?} was accepted as {done:?}"),
            }
        }
        let error = render_shell_with("echo {v}", "a\0b").err();
        assert_eq!(
            error.map(|e| e.message),
            Some("`{v}` holds a NUL character, which a shell command cannot contain".to_owned())
        );
        let error = render_shell_with("echo $(( {v} + 1 ))", "a[$(touch PWNED)]").err();
        assert_eq!(
            error.map(|e| e.message),
            Some("`{v}` is inside `$((…))`, where only an integer may go, but its value is `a[$(touch PWNED)]`".to_owned())
        );
        assert_eq!(
            render_shell_with("echo \\${v}", "x").err().map(|e| e.hint),
            None,
            "an escaped `$` is literal, so a value may follow it"
        );
    }

    #[test]
    fn plain_words_stay_bare_and_everything_else_is_quoted() -> Result<(), TemplateError> {
        assert_eq!(
            render_shell_with("run {v} {n}", "a-b/c.d:1,2@x%")?,
            "run a-b/c.d:1,2@x% -42"
        );
        assert_eq!(render_shell_with("echo {v}", "")?, "echo ''");
        assert_eq!(
            render_shell_with("echo {v}", "$(touch PWNED)")?,
            "echo '$(touch PWNED)'"
        );
        assert_eq!(render_shell_with("echo {v}", "it's")?, r"echo 'it'\''s'");
        assert_eq!(
            render_shell_with("echo \"{v}\"", "a\"; touch PWNED; \"$`\\")?,
            r#"echo "a\"; touch PWNED; \"\$\`\\""#
        );
        assert_eq!(render_shell_with("echo '{v}'", "a'b")?, r"echo 'a'\''b'");
        assert_eq!(
            render_shell_with("true # {v}", "a\ntouch PWNED")?,
            "true # a touch PWNED"
        );
        // Not a shell field: the plain render leaves values as they are.
        assert_eq!(
            render("$FRACFLOW_OUT/{s}.txt").as_deref(),
            Ok("$FRACFLOW_OUT/text.txt")
        );
        Ok(())
    }

    /// Random text from characters that mean something to a shell, plus plain ones.
    fn random_value(state: &mut u64) -> String {
        const ALPHABET: &[char] = &[
            '\'',
            '"',
            '$',
            '`',
            '\\',
            ';',
            '&',
            '|',
            '<',
            '>',
            '(',
            ')',
            '{',
            '}',
            '*',
            '?',
            '[',
            ']',
            '~',
            '#',
            '=',
            '!',
            ' ',
            '\n',
            '\t',
            'a',
            'Z',
            '0',
            '9',
            '-',
            '_',
            '.',
            '/',
            '%',
            'é',
            '\u{1F600}',
        ];
        let mut next = || {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state
        };
        let length = next() % 16;
        (0..length)
            .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize])
            .collect()
    }

    #[test]
    fn for_random_values_the_shell_prints_back_exactly_the_value_in_every_context()
    -> Result<(), TemplateError> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        eprintln!("seed {seed}");
        let mut state = seed | 1;
        for _ in 0..60 {
            let value = random_value(&mut state);
            for (template, expected) in [
                ("printf %s {v}", value.clone()),
                ("printf %s x{v}y", format!("x{value}y")),
                ("printf %s \"<{v}>\"", format!("<{value}>")),
                ("printf %s '<{v}>'", format!("<{value}>")),
                (
                    "printf %s \"$(printf %s {v}; printf .)\"",
                    format!("{value}."),
                ),
                (
                    "printf %s \"$(printf %s \"{v}\"; printf .)\"",
                    format!("{value}."),
                ),
                ("printf %s ok # {v}", "ok".to_owned()),
            ] {
                let command = render_shell_with(template, &value)?;
                assert_eq!(
                    shell_prints(&command),
                    expected,
                    "value {value:?} in {template:?} became {command:?} (seed {seed})"
                );
            }
        }
        let command = render_shell_with("printf %s $(( {n} * 2 ))", "")?;
        assert_eq!(shell_prints(&command), "-84");
        Ok(())
    }
}

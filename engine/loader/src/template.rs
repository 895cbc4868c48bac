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
}

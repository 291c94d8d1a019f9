//! Parser for oslo.policy check strings.
//!
//! The language (oslo.policy `_parser`): checks separated by whitespace and combined
//! with `and`, `or`, `not` (case-insensitive) and parentheses; `not` binds tightest,
//! then `and`, then `or`. Parentheses are peeled off the ends of whitespace-separated
//! tokens, so `(role:a or role:b)` needs no inner spaces, while `%(project_id)s` inside
//! a check survives because it never starts or ends a token. The empty string means
//! "always".
//!
//! Where oslo.policy logs a malformed rule and silently treats it as "never", this
//! parser returns a [`ParseError`]: a policy file with a typo should stop the service at
//! startup, not quietly lock everyone out of one API. oslo's remote `http:`/`https:`
//! checks are refused for the same reason: a deployment relying on them would
//! otherwise be silently denied.

use std::fmt;

use super::check::{Check, GenericKind, Piece, Template};

/// Why a check string was refused; `Display` names the string and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse policy check string {rule:?}: {problem}")]
pub struct ParseError {
    /// The whole check string.
    pub rule: String,
    pub problem: Problem,
}

/// What is wrong with a check string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("it is blank; write \"\" or \"@\" to allow everyone, \"!\" to allow no one")]
    Blank,
    #[error("expected a check, `not` or `(` but found {found}")]
    ExpectedCheck { found: Found },
    #[error("expected `and`, `or` or `)` but found {found}")]
    ExpectedOperator { found: Found },
    #[error("unbalanced parentheses: a `(` is never closed")]
    Unclosed,
    #[error("{token:?} is not a check: write `kind:match`, `@` or `!`")]
    NotACheck { token: String },
    #[error("{token:?} is a quoted string, which is only allowed as the left side of a check such as 'member':%(role)s")]
    QuotedString { token: String },
    #[error("{token:?} has an empty {part}")]
    EmptyPart { token: String, part: &'static str },
    #[error("{token:?}: remote `{kind}:` checks are not supported")]
    RemoteCheck { token: String, kind: String },
    #[error(
        "{token:?}: bad substitution; use `%(key)s` for a target value and `%%` for a percent sign"
    )]
    BadSubstitution { token: String },
}

/// The token found where something else was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    End,
    Token(String),
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::End => f.write_str("the end of the string"),
            Found::Token(t) => write!(f, "`{t}`"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    LParen,
    RParen,
    And,
    Or,
    Not,
    Check(Check),
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::LParen => "(".into(),
            Token::RParen => ")".into(),
            Token::And => "and".into(),
            Token::Or => "or".into(),
            Token::Not => "not".into(),
            Token::Check(c) => c.to_string(),
        }
    }
}

/// Parses one check string as oslo.policy's `parse_rule` does for a string value.
pub fn parse(rule: &str) -> Result<Check, ParseError> {
    let err = |problem| ParseError {
        rule: rule.to_owned(),
        problem,
    };
    if rule.is_empty() {
        return Ok(Check::Always);
    }
    let tokens = tokenize(rule).map_err(err)?;
    if tokens.is_empty() {
        return Err(err(Problem::Blank));
    }
    let mut p = Parser { tokens, pos: 0 };
    let check = p.or_expr().map_err(err)?;
    match p.peek() {
        None => Ok(check),
        Some(t) => Err(err(Problem::ExpectedOperator {
            found: Found::Token(t.describe()),
        })),
    }
}

/// Parses one element of oslo's legacy list syntax: a single check, no operators.
pub(crate) fn parse_single(token: &str) -> Result<Check, ParseError> {
    parse_check(token).map_err(|problem| ParseError {
        rule: token.to_owned(),
        problem,
    })
}

fn tokenize(rule: &str) -> Result<Vec<Token>, Problem> {
    let mut out = Vec::new();
    for word in rule.split_whitespace() {
        let body = word.trim_start_matches('(');
        out.extend(std::iter::repeat_n(Token::LParen, word.len() - body.len()));
        if body.is_empty() {
            continue;
        }
        let clean = body.trim_end_matches(')');
        let closing = body.len() - clean.len();
        if clean.eq_ignore_ascii_case("and") {
            out.push(Token::And);
        } else if clean.eq_ignore_ascii_case("or") {
            out.push(Token::Or);
        } else if clean.eq_ignore_ascii_case("not") {
            out.push(Token::Not);
        } else if !clean.is_empty() {
            // oslo tests for quotes before peeling the closing parentheses.
            if is_quoted(body) {
                return Err(Problem::QuotedString {
                    token: body.to_owned(),
                });
            }
            out.push(Token::Check(parse_check(clean)?));
        }
        out.extend(std::iter::repeat_n(Token::RParen, closing));
    }
    Ok(out)
}

fn is_quoted(s: &str) -> bool {
    s.len() >= 2
        && ((s.starts_with('"') && s.ends_with('"')) || (s.starts_with('\'') && s.ends_with('\'')))
}

fn parse_check(token: &str) -> Result<Check, Problem> {
    match token {
        "@" => return Ok(Check::Always),
        "!" => return Ok(Check::Never),
        _ => {}
    }
    let Some((kind, matched)) = token.split_once(':') else {
        return Err(Problem::NotACheck {
            token: token.to_owned(),
        });
    };
    let empty = |part| Problem::EmptyPart {
        token: token.to_owned(),
        part,
    };
    match kind {
        "" => Err(empty("kind before `:`")),
        "rule" if matched.is_empty() => Err(empty("rule name")),
        "rule" => Ok(Check::Rule(matched.to_owned())),
        "role" => Ok(Check::Role(template(token, matched)?)),
        "http" | "https" => Err(Problem::RemoteCheck {
            token: token.to_owned(),
            kind: kind.to_owned(),
        }),
        _ => Ok(Check::Generic {
            kind: generic_kind(kind),
            expected: template(token, matched)?,
        }),
    }
}

/// Python's `ast.literal_eval` on the kind, for the literals a policy can sensibly
/// hold: quoted strings, `True`/`False`/`None` and integers. Anything else is a path
/// into the credentials.
fn generic_kind(kind: &str) -> GenericKind {
    let literal = |value: String| GenericKind::Literal {
        raw: kind.to_owned(),
        value,
    };
    if is_quoted(kind) {
        let inner = &kind[1..kind.len() - 1];
        let quote = &kind[..1];
        if !inner.contains(quote) && !inner.contains('\\') {
            return literal(inner.to_owned());
        }
    }
    if matches!(kind, "True" | "False" | "None") {
        return literal(kind.to_owned());
    }
    if kind.bytes().any(|b| b.is_ascii_digit()) {
        if let Ok(n) = kind.parse::<i128>() {
            return literal(n.to_string());
        }
    }
    GenericKind::Credential(kind.to_owned())
}

/// Splits a match into text and `%(key)s` fields, as Python's `match % target` reads it.
fn template(token: &str, matched: &str) -> Result<Template, Problem> {
    let bad = || Problem::BadSubstitution {
        token: token.to_owned(),
    };
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = matched;
    while let Some(at) = rest.find('%') {
        text.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('%') {
            text.push('%');
            rest = after;
            continue;
        }
        let body = rest.strip_prefix('(').ok_or_else(bad)?;
        let close = body.find(')').ok_or_else(bad)?;
        let key = &body[..close];
        rest = body[close + 1..].strip_prefix('s').ok_or_else(bad)?;
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Field(key.to_owned()));
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Template(pieces))
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, want: &Token) -> bool {
        if self.peek() == Some(want) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn or_expr(&mut self) -> Result<Check, Problem> {
        let mut items = vec![self.and_expr()?];
        while self.eat(&Token::Or) {
            items.push(self.and_expr()?);
        }
        Ok(collapse(items, Check::Or))
    }

    fn and_expr(&mut self) -> Result<Check, Problem> {
        let mut items = vec![self.unary()?];
        while self.eat(&Token::And) {
            items.push(self.unary()?);
        }
        Ok(collapse(items, Check::And))
    }

    fn unary(&mut self) -> Result<Check, Problem> {
        if self.eat(&Token::Not) {
            return Ok(Check::Not(Box::new(self.unary()?)));
        }
        let found = match self.tokens.get(self.pos).cloned() {
            Some(Token::Check(c)) => {
                self.pos += 1;
                return Ok(c);
            }
            Some(Token::LParen) => {
                self.pos += 1;
                let inner = self.or_expr()?;
                return match self.peek() {
                    Some(Token::RParen) => {
                        self.pos += 1;
                        Ok(inner)
                    }
                    None => Err(Problem::Unclosed),
                    Some(t) => Err(Problem::ExpectedOperator {
                        found: Found::Token(t.describe()),
                    }),
                };
            }
            Some(t) => Found::Token(t.describe()),
            None => Found::End,
        };
        Err(Problem::ExpectedCheck { found })
    }
}

fn collapse(mut items: Vec<Check>, join: fn(Vec<Check>) -> Check) -> Check {
    if items.len() == 1 {
        items.remove(0)
    } else {
        join(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(s: &str) -> (GenericKind, Template) {
        match parse(s).unwrap() {
            Check::Generic { kind, expected } => (kind, expected),
            other => panic!("{s:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn templates_split_fields_from_text() {
        let (_, t) = generic("x:a%(b)s%%c%(d)s");
        assert_eq!(
            t.0,
            vec![
                Piece::Text("a".into()),
                Piece::Field("b".into()),
                Piece::Text("%c".into()),
                Piece::Field("d".into()),
            ]
        );
        assert_eq!(t.to_string(), "a%(b)s%%c%(d)s");
    }

    #[test]
    fn python_literals_on_the_left_are_values_not_paths() {
        let literal = |s: &str| match generic(s).0 {
            GenericKind::Literal { value, .. } => Some(value),
            GenericKind::Credential(_) => None,
        };
        assert_eq!(literal("True:x").as_deref(), Some("True"));
        assert_eq!(literal("None:x").as_deref(), Some("None"));
        assert_eq!(literal("'member':x").as_deref(), Some("member"));
        assert_eq!(literal("\"member\":x").as_deref(), Some("member"));
        assert_eq!(literal("+42:x").as_deref(), Some("42"));
        assert_eq!(literal("-0:x").as_deref(), Some("0"));
        assert_eq!(literal("project_id:x"), None);
        assert_eq!(literal("user.name:x"), None);
        assert_eq!(literal("true:x"), None);
    }

    #[test]
    fn operators_are_case_insensitive_but_kinds_are_not() {
        assert_eq!(
            parse("role:a AnD NoT role:b").unwrap().to_string(),
            "(role:a and not role:b)"
        );
        assert!(matches!(parse("RULE:x").unwrap(), Check::Generic { .. }));
    }

    #[test]
    fn the_only_colon_that_counts_is_the_first() {
        assert_eq!(
            parse("rule:placement:traits:list").unwrap(),
            Check::Rule("placement:traits:list".into())
        );
    }
}

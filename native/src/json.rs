//! Strict JSON (RFC 8259) read once, keeping only the top-level members a caller names.
//!
//! The flows' events are small objects of which a handful of members matter; the rest
//! must still be valid JSON (check 1 of docs/semantics/boards.md) but is never built. So
//! this scanner validates the whole text and hands back, for each wanted name, the last
//! value the object gave it (a repeated key takes its last value, as Python's readers do).
//!
//! What it accepts is exactly what the flow accepted before the kernel: orjson, backed
//! by the standard library's `json` for what orjson refuses only for its range: UTF-8
//! only, no `NaN` or `Infinity`, no control character inside a string, no surrogate
//! escape without its pair where it survives into the value (see [`lone_survives`]),
//! integers of any length, and nesting no deeper than [`MAX_DEPTH`] containers.

use std::borrow::Cow;
use std::collections::HashMap;

/// How deep containers may nest (orjson's limit, which the Python readers share).
pub const MAX_DEPTH: usize = 1024;

/// A member's value, as far as a check needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// A string, unescaped (borrowed from the input when it holds no escape).
    Str(Cow<'a, str>),
    /// An integer literal (`-?(0|[1-9][0-9]*)`), as written: any length.
    Int(&'a str),
    /// A number with a fraction or an exponent: not an integer, whatever its value.
    Float,
    Bool,
    Null,
    Array,
    Object,
}

impl Value<'_> {
    /// What the value is, in the words of a dead letter's detail.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Str(_) => "a string",
            Value::Int(_) | Value::Float => "a number",
            Value::Bool => "a boolean",
            Value::Null => "null",
            Value::Array => "an array",
            Value::Object => "an object",
        }
    }
}

/// Why a text is not JSON (the `invalid_json` detail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotJson(pub String);

/// The top-level value of a text: for an object, the wanted members' last values.
#[derive(Debug)]
pub enum Top<'a, const N: usize> {
    Object([Option<Value<'a>>; N]),
    Other(Value<'a>),
}

const LONE: &str = "a string holds an unpaired surrogate escape";

/// Read `raw` whole; keep the members of a top-level object named in `wanted`.
pub fn read_top<'a, const N: usize>(raw: &'a [u8], wanted: &[&str; N]) -> Result<Top<'a, N>, NotJson> {
    let text = std::str::from_utf8(raw).map_err(|e| NotJson(format!("not UTF-8 at byte {}", e.valid_up_to())))?;
    let mut reader = Reader { text, bytes: raw, pos: 0, depth: 0, lone: false };
    reader.skip_ws();
    let top = if reader.peek() == Some(b'{') {
        let mut members: [Option<Value<'a>>; N] = std::array::from_fn(|_| None);
        reader.object(Some((wanted, &mut members)))?;
        Top::Object(members)
    } else {
        Top::Other(reader.value()?)
    };
    reader.skip_ws();
    if reader.pos != raw.len() {
        return Err(reader.error("extra data after the value"));
    }
    if reader.lone && lone_survives(raw) {
        return Err(NotJson(LONE.into()));
    }
    Ok(top)
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    /// Whether a string held a surrogate escape without its pair (read as U+FFFD).
    lone: bool,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn error(&self, what: &str) -> NotJson {
        if self.pos >= self.bytes.len() {
            NotJson(format!("{what}: unexpected end of data at byte {}", self.pos))
        } else {
            NotJson(format!("{what} at byte {}", self.pos))
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, what: &str) -> Result<(), NotJson> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    fn enter(&mut self) -> Result<(), NotJson> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(NotJson(format!("nested deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    fn value(&mut self) -> Result<Value<'a>, NotJson> {
        match self.peek() {
            Some(b'{') => self.object::<0>(None).map(|_| Value::Object),
            Some(b'[') => self.array().map(|_| Value::Array),
            Some(b'"') => self.string().map(Value::Str),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true", Value::Bool),
            Some(b'f') => self.literal("false", Value::Bool),
            Some(b'n') => self.literal("null", Value::Null),
            _ => Err(self.error("expected a value")),
        }
    }

    fn literal(&mut self, word: &str, value: Value<'a>) -> Result<Value<'a>, NotJson> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a value"))
        }
    }

    /// An object; with `keep`, the wanted members' values go into its slots.
    fn object<const N: usize>(
        &mut self,
        mut keep: Option<(&[&str; N], &mut [Option<Value<'a>>; N])>,
    ) -> Result<(), NotJson> {
        self.enter()?;
        self.pos += 1; // '{'
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let name = self.string()?;
            self.skip_ws();
            self.expect(b':', "expected ':'")?;
            self.skip_ws();
            let value = self.value()?;
            if let Some((wanted, slots)) = keep.as_mut() {
                if let Some(i) = wanted.iter().position(|w| *w == name) {
                    slots[i] = Some(value);
                }
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                Some(b'}') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self) -> Result<(), NotJson> {
        self.enter()?;
        self.pos += 1; // '['
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.value()?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                Some(b']') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value<'a>, NotJson> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("expected a digit")),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error("expected a digit after '.'"));
            }
            integer = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
            integer = false;
        }
        Ok(if integer { Value::Int(&self.text[start..self.pos]) } else { Value::Float })
    }

    /// The 4 hex digits of a `\u` escape, `self.pos` at the first.
    fn hex4(&mut self) -> Result<u32, NotJson> {
        let mut code = 0u32;
        for _ in 0..4 {
            let digit = match self.peek() {
                Some(c @ b'0'..=b'9') => c - b'0',
                Some(c @ b'a'..=b'f') => c - b'a' + 10,
                Some(c @ b'A'..=b'F') => c - b'A' + 10,
                _ => return Err(self.error("expected 4 hex digits after \\u")),
            };
            code = code * 16 + u32::from(digit);
            self.pos += 1;
        }
        Ok(code)
    }

    /// The character of a `\u` escape, `self.pos` after the `u`; a surrogate pairs with a
    /// low surrogate escape right after it, or is lone (noted, read as U+FFFD).
    fn unicode_escape(&mut self) -> Result<char, NotJson> {
        let code = self.hex4()?;
        let c = match code {
            0xD800..=0xDBFF if self.bytes[self.pos..].starts_with(b"\\u") => {
                let back = self.pos;
                self.pos += 2;
                let low = self.hex4()?;
                if (0xDC00..=0xDFFF).contains(&low) {
                    char::from_u32(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))
                } else {
                    self.pos = back; // the next escape is read on its own
                    None
                }
            }
            0xD800..=0xDFFF => None,
            _ => char::from_u32(code),
        };
        Ok(c.unwrap_or_else(|| {
            self.lone = true;
            '\u{FFFD}'
        }))
    }

    /// A string, unescaped; borrowed from the input when it holds no escape.
    fn string(&mut self) -> Result<Cow<'a, str>, NotJson> {
        self.pos += 1; // '"'
        let start = self.pos;
        let mut owned: Option<String> = None;
        let mut run = start; // the start of the text not yet copied into `owned`
        loop {
            match self.peek() {
                None => return Err(self.error("a string never ends")),
                Some(b'"') => {
                    let end = self.pos;
                    self.pos += 1;
                    return Ok(match owned {
                        None => Cow::Borrowed(&self.text[start..end]),
                        Some(mut s) => {
                            s.push_str(&self.text[run..end]);
                            Cow::Owned(s)
                        }
                    });
                }
                Some(b'\\') => {
                    let mut s = owned.take().unwrap_or_default();
                    s.push_str(&self.text[run..self.pos]);
                    self.pos += 1;
                    let escaped = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            let c = self.unicode_escape()?;
                            self.pos -= 1; // the common step below
                            c
                        }
                        _ => return Err(self.error("an invalid escape")),
                    };
                    s.push(escaped);
                    owned = Some(s);
                    self.pos += 1;
                    run = self.pos;
                }
                Some(c) if c < 0x20 => return Err(self.error("a control character in a string")),
                Some(_) => self.pos += 1,
            }
        }
    }
}

/// Whether an unpaired surrogate escape is still in the value a text stands for.
///
/// Python's readers (and so the flow before the kernel, and the model in the tests)
/// refuse a lone surrogate only where it survives into the value: not in a member that a
/// repeated key replaced. Rare, so only a text that held one is read again, here, with
/// every object's keys compared (as UTF-16, where a pair and its character are equal).
/// `raw` is valid JSON but for its lone surrogates.
fn lone_survives(raw: &[u8]) -> bool {
    let mut pos = 0;
    survives(raw, &mut pos)
}

fn skip_ws(raw: &[u8], pos: &mut usize) {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = raw.get(*pos) {
        *pos += 1;
    }
}

fn survives(raw: &[u8], pos: &mut usize) -> bool {
    skip_ws(raw, pos);
    match raw[*pos] {
        b'"' => utf16(raw, pos).1,
        b'[' => {
            *pos += 1;
            let mut lone = false;
            loop {
                skip_ws(raw, pos);
                match raw[*pos] {
                    b']' => {
                        *pos += 1;
                        return lone;
                    }
                    b',' => *pos += 1,
                    _ => lone |= survives(raw, pos),
                }
            }
        }
        b'{' => {
            *pos += 1;
            let mut members: HashMap<Vec<u16>, bool> = HashMap::new();
            let mut lone_key = false;
            loop {
                skip_ws(raw, pos);
                match raw[*pos] {
                    b'}' => {
                        *pos += 1;
                        return lone_key || members.values().any(|lone| *lone);
                    }
                    b',' => *pos += 1,
                    _ => {
                        let (key, lone) = utf16(raw, pos);
                        lone_key |= lone;
                        skip_ws(raw, pos);
                        *pos += 1; // ':'
                        let value = survives(raw, pos);
                        members.insert(key, value);
                    }
                }
            }
        }
        _ => {
            while !matches!(raw.get(*pos), None | Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')) {
                *pos += 1;
            }
            false
        }
    }
}

/// A string's UTF-16 units, `pos` at its opening quote, and whether a surrogate in them
/// has no pair.
fn utf16(raw: &[u8], pos: &mut usize) -> (Vec<u16>, bool) {
    *pos += 1;
    let mut units = Vec::new();
    loop {
        match raw[*pos] {
            b'"' => break,
            b'\\' => {
                let unit = match raw[*pos + 1] {
                    b'u' => {
                        let hex = std::str::from_utf8(&raw[*pos + 2..*pos + 6]).expect("checked");
                        *pos += 4;
                        u16::from_str_radix(hex, 16).expect("checked")
                    }
                    b'b' => 8,
                    b'f' => 12,
                    b'n' => 10,
                    b'r' => 13,
                    b't' => 9,
                    other => u16::from(other),
                };
                units.push(unit);
                *pos += 2;
            }
            first => {
                let len = match first {
                    0..=0x7F => 1,
                    0xC0..=0xDF => 2,
                    0xE0..=0xEF => 3,
                    _ => 4,
                };
                let c = std::str::from_utf8(&raw[*pos..*pos + len]).expect("checked").chars().next().expect("a char");
                let mut buf = [0u16; 2];
                units.extend_from_slice(c.encode_utf16(&mut buf));
                *pos += len;
            }
        }
    }
    *pos += 1;
    let mut lone = false;
    let mut i = 0;
    while i < units.len() {
        match units[i] {
            0xD800..=0xDBFF if matches!(units.get(i + 1), Some(0xDC00..=0xDFFF)) => i += 2,
            0xD800..=0xDFFF => {
                lone = true;
                i += 1;
            }
            _ => i += 1,
        }
    }
    (units, lone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(raw: &[u8]) -> Result<Top<'_, 2>, NotJson> {
        read_top(raw, &["a", "b"])
    }

    fn members(raw: &[u8]) -> [Option<Value<'_>>; 2] {
        match top(raw) {
            Ok(Top::Object(m)) => m,
            other => panic!("not an object: {other:?}"),
        }
    }

    #[test]
    fn keeps_the_last_value_of_wanted_members() {
        let m = members(br#"{"a": 1, "x": [{"a": 2}], "a": "\u00e9\ud83c\udfae", "b": -0}"#);
        assert_eq!(m[0], Some(Value::Str(Cow::Owned("é🎮".into()))));
        assert_eq!(m[1], Some(Value::Int("-0")));
    }

    #[test]
    fn numbers_with_a_fraction_or_exponent_are_floats() {
        assert_eq!(members(br#"{"a": 1.0, "b": 1e400}"#), [Some(Value::Float), Some(Value::Float)]);
        assert_eq!(members(br#"{"a": 184467440737095516160000}"#)[0], Some(Value::Int("184467440737095516160000")));
    }

    #[test]
    fn refuses_what_is_not_json() {
        for raw in [
            &b""[..],
            b" ",
            b"{",
            b"{\"a\":1,}",
            b"\xef\xbb\xbf{}",
            b"01",
            b"[1 2]",
            b"NaN",
            b"{\"a\": Infinity}",
            b"\"\x01\"",
            b"\xff",
            br#""\ud800""#,
            br#""\udc00\ud800""#,
            br#""\ud800\u0041""#,
            br#"["\ud800\u004"]"#,
            br#""\x""#,
            b"1.",
            b"-",
            b"{} {}",
            b"{'a': 1}",
            b"tru",
            b"[1,]",
            br#""\u12""#,
        ] {
            assert!(top(raw).is_err(), "accepted {raw:?}");
        }
    }

    #[test]
    fn a_lone_surrogate_counts_only_where_it_survives() {
        assert!(top(br#"{"x": ["\ud83c"], "x": 1}"#).is_ok());
        assert!(top(br#"{"x": 1, "x": ["\ud83c"]}"#).is_err());
        assert!(top(br#"{"\ud83c": 1, "\ud83c": 2}"#).is_err());
        assert!(top(br#"[{"x": "\ud83c", "\u0078": 2}]"#).is_ok());
        assert!(top(br#"[{"x": "\ud83c", "y": 2}]"#).is_err());
        assert!(top(br#"{"x": "\ud83c\ud83c\udfae"}"#).is_err());
        assert!(top(b"{\"x\": {\"\\ud83c\\udfae\": \"\\ud83c\", \"\xf0\x9f\x8e\xae\": 0}}").is_ok());
    }

    #[test]
    fn nests_up_to_the_limit() {
        let nested = |n: usize| format!("{{\"a\":{}{}}}", "[".repeat(n - 1), "]".repeat(n - 1));
        assert!(top(nested(MAX_DEPTH).as_bytes()).is_ok());
        assert_eq!(top(nested(MAX_DEPTH + 1).as_bytes()).unwrap_err().0, "nested deeper than 1024");
    }

    #[test]
    fn other_values_say_what_they_are() {
        for (raw, kind) in [
            (&b"[]"[..], "an array"),
            (b" null ", "null"),
            (b"true", "a boolean"),
            (b"\"x\"", "a string"),
            (b"-1.5e3", "a number"),
        ] {
            match top(raw) {
                Ok(Top::Other(v)) => assert_eq!(v.kind(), kind),
                other => panic!("{other:?}"),
            }
        }
    }
}

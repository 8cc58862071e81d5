//! What a decision may answer: the response schema a gate asks for when it opens (`gates
//! create --response-schema`), and the answer a decider gives with the decision (`approve
//! --response`), checked against it. Both are sealed in the gate's audit events (its `created`
//! event, the decision's), and read back from there, never from a row.
//!
//! A schema uses a small part of JSON Schema: the keywords of [`KEYWORDS`], no `$ref` and
//! nothing else, so that what a person is asked for is plain and no schema reaches outside
//! itself. Each of them means the same in drafts 7 and 2020-12 (`items` is one schema, an
//! integral number such as `1.0` is an `integer`). It is validated by the `jsonschema` crate,
//! built without remote or file retrieval, as draft 7: the crate checks every schema against
//! its draft's meta-schema, and with its `macros` feature that validator is compiled into the
//! binary rather than built in every process at its first check.

use crate::error::{shown, usage};
use anyhow::Result;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The keywords a response schema may use.
pub const KEYWORDS: [&str; 14] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "items",
    "title",
    "description",
    "default",
];

/// The types a schema's `type` may name.
const TYPES: [&str; 6] = ["object", "string", "number", "integer", "boolean", "array"];

/// The largest schema, in bytes, and the most levels of schemas within schemas (`properties`,
/// `items`) it may have, the outermost being one.
pub const SCHEMA_MAX_BYTES: usize = 16 * 1024;
pub const SCHEMA_MAX_LEVELS: usize = 8;

/// The largest answer, in bytes, and the deepest it may nest (arrays and objects).
pub const ANSWER_MAX_BYTES: usize = 64 * 1024;
pub const ANSWER_MAX_DEPTH: usize = 16;

/// A gate's response schema, checked: the JSON value, and its canonical text (keys sorted,
/// no spaces), which is what its `created` event seals.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub value: Value,
    pub text: String,
}

/// The text of an option given as JSON or as `@FILE` (a file holding it), read at most `max`
/// bytes and one more (so that a longer one is refused whole, never cut); UTF-8 only.
pub fn text_of(what: &str, arg: &str, max: usize) -> Result<String> {
    let Some(path) = arg.strip_prefix('@') else {
        return Ok(arg.to_string());
    };
    use std::io::Read;
    // Opened without blocking (a FIFO with no writer would wait for one), then refused
    // unless it is a regular file.
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| usage(format!("{what} @{}: cannot read it: {e}", shown(path))))?;
    // A FIFO or a device would block or never end: only a regular file is read.
    let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !regular {
        return Err(usage(format!(
            "{what} @{}: not a regular file",
            shown(path)
        )));
    }
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| usage(format!("{what} @{}: cannot read it: {e}", shown(path))))?;
    if bytes.len() > max {
        return Err(usage(format!(
            "{what} @{} is over {max} bytes",
            shown(path)
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| usage(format!("{what} @{} is not UTF-8 text", shown(path))))
}

/// Reads and checks a response schema given as `what` (the option's name, for errors).
pub fn parse_schema(what: &str, text: &str) -> Result<Schema> {
    if text.len() > SCHEMA_MAX_BYTES {
        return Err(usage(format!(
            "{what} is {} bytes; a response schema is at most {SCHEMA_MAX_BYTES}",
            text.len()
        )));
    }
    // Its JSON nests two levels for each level of schema (`properties` then the property),
    // with room for an `enum` or `default` value's own: the levels are counted after.
    let value = strict_json(what, text, 4 * SCHEMA_MAX_LEVELS)?;
    check_schema(what, &value, "", 1)?;
    validator(&value)
        .map_err(|e| usage(format!("{what} is not a valid JSON Schema: {}", clip(&e))))?;
    let text = value.to_string();
    Ok(Schema { value, text })
}

/// Reads an answer given as `what`: JSON of at most [`ANSWER_MAX_BYTES`], nested at most
/// [`ANSWER_MAX_DEPTH`] deep, with no key twice in an object.
pub fn parse_answer(what: &str, text: &str) -> Result<Value> {
    if text.len() > ANSWER_MAX_BYTES {
        return Err(usage(format!(
            "{what} is {} bytes; an answer is at most {ANSWER_MAX_BYTES}",
            text.len()
        )));
    }
    strict_json(what, text, ANSWER_MAX_DEPTH)
}

/// Whether `answer` may go with a decision (`approve`: an approval) on a gate whose sealed
/// schema is `schema`: a gate with a schema needs an answer to be approved, and takes one
/// only if it fits; a gate without one takes none. The error names the first field that
/// does not fit, by its JSON pointer.
pub fn check_answer(schema: Option<&Value>, answer: Option<&Value>, approve: bool) -> Result<()> {
    match (schema, answer) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(usage(
            "--response given, but the gate asks for no response (it was opened without --response-schema)",
        )),
        (Some(_), None) if approve => Err(usage(
            "the gate asks for a response: approve it with --response JSON (its schema is in `gates show`)",
        )),
        (Some(_), None) => Ok(()),
        (Some(schema), Some(answer)) => {
            let validator = validator(schema).map_err(|e| {
                anyhow::anyhow!("the gate's sealed response schema does not compile: {e}")
            })?;
            let first = validator.iter_errors(answer).next().map(|e| {
                let at = e.instance_path().as_str().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                format!(
                    "--response does not fit the gate's response schema at {}: {}",
                    shown(&at),
                    clip(&e)
                )
            });
            match first {
                None => Ok(()),
                Some(why) => Err(usage(why)),
            }
        }
    }
}

/// Every place `answer` does not fit `schema`, each as the JSON pointer of the value it is
/// about (a required property that is missing: that property's) and a short message: what
/// the approval page shows beside its fields.
pub fn answer_errors(schema: &Value, answer: &Value) -> Vec<(String, String)> {
    let validator = match validator(schema) {
        Ok(v) => v,
        Err(e) => return vec![(String::new(), clip(&e))],
    };
    validator
        .iter_errors(answer)
        .map(|e| {
            let mut at = e.instance_path().as_str().to_string();
            if let jsonschema::error::ValidationErrorKind::Required {
                property: Value::String(p),
            } = e.kind()
            {
                at = format!("{at}/{}", p.replace('~', "~0").replace('/', "~1"));
            }
            // Shown on the page beside its field, escaped there: not quoted for a line.
            (at, crate::error::clip(&e.to_string(), 300))
        })
        .collect()
}

/// The validator of a response schema (see the module's note on the draft).
fn validator(
    schema: &Value,
) -> Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    jsonschema::draft7::new(schema)
}

/// An error's message, made safe to show on one line and short.
fn clip(e: &dyn std::fmt::Display) -> String {
    let message = e.to_string();
    crate::error::clip(&shown(&message), 300)
}

/// Checks one schema (an object using only [`KEYWORDS`]) at `at` (a JSON pointer, for
/// errors), `level` levels in, and the schemas within it.
fn check_schema(what: &str, schema: &Value, at: &str, level: usize) -> Result<()> {
    let place = if at.is_empty() { "/" } else { at };
    let bad = |why: String| usage(format!("{what}: at {}: {why}", shown(place)));
    if level > SCHEMA_MAX_LEVELS {
        return Err(bad(format!(
            "schemas nest at most {SCHEMA_MAX_LEVELS} levels deep"
        )));
    }
    let Value::Object(map) = schema else {
        return Err(bad("a schema is a JSON object".into()));
    };
    for (key, value) in map {
        if !KEYWORDS.contains(&key.as_str()) {
            return Err(bad(format!(
                "{} is not a keyword a response schema may use (these are: {})",
                shown(key),
                KEYWORDS.join(", ")
            )));
        }
        match key.as_str() {
            "type" => {
                let names: Vec<&Value> = match value {
                    Value::Array(a) => a.iter().collect(),
                    v => vec![v],
                };
                for n in names {
                    if !n.as_str().is_some_and(|n| TYPES.contains(&n)) {
                        return Err(bad(format!(
                            "type is one of {} (or a list of them)",
                            TYPES.join(", ")
                        )));
                    }
                }
            }
            "properties" => {
                let Value::Object(props) = value else {
                    return Err(bad("properties is an object of schemas".into()));
                };
                for (name, sub) in props {
                    check_text(what, "property name", name)?;
                    check_schema(what, sub, &format!("{at}/properties/{name}"), level + 1)?;
                }
            }
            "items" => check_schema(what, value, &format!("{at}/items"), level + 1)?,
            "additionalProperties" if value != &Value::Bool(false) => {
                return Err(bad("additionalProperties may only be false".into()));
            }
            "title" | "description" => match value {
                Value::String(s) => check_text(what, key, s)?,
                _ => return Err(bad(format!("{key} is a string"))),
            },
            "enum" if value.as_array().is_none_or(|a| a.is_empty()) => {
                return Err(bad("enum is a non-empty list of the answers allowed".into()));
            }
            "enum" | "const" | "default" => check_texts(what, key, value)?,
            _ => {}
        }
    }
    // What a person tells apart on the page: two choices, or two properties of one object,
    // that read alike once whitespace is laid out (runs collapsed, ends trimmed) would let
    // them pick one thinking it the other.
    // A choice reads as its text, or, not a string, as its JSON (`"true"` and `true` read alike).
    let labels: Vec<String> = match map.get("enum") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let texts: Vec<&str> = labels.iter().map(String::as_str).collect();
    let names: Vec<&str> = match map.get("properties") {
        Some(Value::Object(p)) => p.keys().map(String::as_str).collect(),
        None | Some(_) => Vec::new(),
    };
    for (list, what_they_are) in [(texts, "choices"), (names, "property names")] {
        let mut seen: std::collections::HashMap<String, &str> = Default::default();
        for t in list {
            let read = t.split_whitespace().collect::<Vec<_>>().join(" ");
            if let Some(first) = seen.insert(read, t) {
                return Err(bad(format!(
                    "the {what_they_are} {} and {} read alike on the approval page (whitespace is laid out there): make them differ in what a person reads",
                    shown(first),
                    shown(t)
                )));
            }
        }
    }
    // Bounds no answer can meet would make the gate one no person can approve.
    for (low, high) in [("minimum", "maximum"), ("minLength", "maxLength")] {
        if let (Some(l), Some(h)) = (
            map.get(low).and_then(Value::as_f64),
            map.get(high).and_then(Value::as_f64),
        ) {
            if l > h {
                return Err(bad(format!(
                    "{low} {} is above {high} {}: no answer could fit",
                    map[low], map[high]
                )));
            }
            // A whole number only: one must lie between them.
            if map.get("type") == Some(&Value::from("integer")) && l.ceil() > h.floor() {
                return Err(bad(format!(
                    "no integer lies between minimum {} and maximum {}: no answer could fit",
                    map[low], map[high]
                )));
            }
        }
    }
    // A required property an object may not have.
    if let (Some(Value::Array(required)), Some(Value::Bool(false))) =
        (map.get("required"), map.get("additionalProperties"))
    {
        let props = map.get("properties").and_then(Value::as_object);
        for r in required {
            let name = r.as_str().unwrap_or_default();
            if !props.is_some_and(|p| p.contains_key(name)) {
                return Err(bad(format!(
                    "{} is required, and additionalProperties is false with no such property: no answer could fit",
                    shown(name)
                )));
            }
        }
    }
    // Two choices that are one value (JSON Schema's equality: `1` and `1.0` are one number).
    if let Some(Value::Array(choices)) = map.get("enum") {
        for (i, a) in choices.iter().enumerate() {
            if let Some(b) = choices[..i].iter().find(|b| same_value(a, b)) {
                return Err(bad(format!(
                    "the choices {b} and {a} are the same value: give each once"
                )));
            }
        }
    }
    // Each choice, the `const` and the `default` fit the rest of the schema (each other
    // included: a `const` outside the `enum`): a choice that cannot, the page would offer and
    // the answer's check refuse; a default, fill in wrong.
    let given = |k: &str| match map.get(k) {
        Some(Value::Array(a)) if k == "enum" => a.iter().collect::<Vec<_>>(),
        Some(v) => vec![v],
        None => Vec::new(),
    };
    for key in ["enum", "const", "default"] {
        let values = given(key);
        if values.is_empty() {
            continue;
        }
        let rest: serde_json::Map<String, Value> = map
            .iter()
            .filter(|(k, _)| k.as_str() != key && k.as_str() != "default")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let Ok(v) = validator(&Value::Object(rest)) else {
            // The whole schema's compile error is reported after.
            return Ok(());
        };
        for value in values {
            if let Some(e) = v.iter_errors(value).next() {
                return Err(bad(format!(
                    "{key} {} does not fit the schema's own rules ({}): no answer could be it",
                    crate::error::clip(&shown(&value.to_string()), 80),
                    clip(&e)
                )));
            }
        }
    }
    Ok(())
}

/// JSON Schema's equality of two values: numbers by their value (`1` is `1.0`), arrays and
/// objects member by member.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// Checks every string in `value` (and every key) as text shown to a person.
fn check_texts(what: &str, key: &str, value: &Value) -> Result<()> {
    match value {
        Value::String(s) => check_text(what, key, s),
        Value::Array(a) => a.iter().try_for_each(|v| check_texts(what, key, v)),
        Value::Object(m) => m.iter().try_for_each(|(k, v)| {
            check_text(what, key, k)?;
            check_texts(what, key, v)
        }),
        _ => Ok(()),
    }
}

/// Text a schema shows a person (a title, a description, a choice): the prompt's rules,
/// no control character but newline and tab, and no bidirectional embedding, override or
/// isolate.
fn check_text(what: &str, field: &str, text: &str) -> Result<()> {
    let bad = text.chars().find(|&c| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    });
    match bad {
        Some(c) => Err(usage(format!(
            "{what}: its {field} {} holds the character U+{:04X}, which would change what an approver sees",
            shown(text),
            c as u32
        ))),
        None => Ok(()),
    }
}

/// Parses JSON text strictly: one value, no key twice in an object, nested at most `depth`
/// deep (arrays and objects).
fn strict_json(what: &str, text: &str, depth: usize) -> Result<Value> {
    if let Some(n) = inexact_number(text) {
        return Err(usage(format!(
            "{what} holds the number {}, which cannot be kept exactly: at most {EXACT_DIGITS} significant digits, or a whole number within 64 bits",
            shown(n)
        )));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Strict {
        left: depth,
        max: depth,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| usage(format!("{what} is not JSON as a response takes it: {e}")))?;
    Ok(value)
}

/// Parses JSON text refusing a key given twice in an object (what `--metadata` takes): a
/// document whose readers would each pick their own of two values is no document. `Err`
/// holds the parser's words.
pub fn unique_keys(text: &str) -> std::result::Result<Value, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    Strict {
        left: 128,
        max: 128,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| e.to_string())
}

/// Significant digits a number other than a 64-bit whole one may have: every decimal of at
/// most 15 digits is kept exactly as a double.
const EXACT_DIGITS: usize = 15;

/// The first number in the JSON text `text` that a double would not keep as written (so that
/// an answer is never checked or sealed as another number than the one given): one with more
/// than [`EXACT_DIGITS`] significant digits, unless it is a whole number within `i64`/`u64`,
/// and one outside the range of normal doubles (infinite, subnormal, or not zero but read as
/// zero).
/// Strings are skipped; what is not JSON is left to the parser.
fn inexact_number(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let (mut i, mut in_string, mut escaped) = (0, false, false);
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < bytes.len()
                && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
            {
                i += 1;
            }
            let token = &text[start..i];
            let whole = token.parse::<i64>().is_ok() || token.parse::<u64>().is_ok();
            let mantissa = token.split(['e', 'E']).next().unwrap_or("");
            let digits = mantissa
                .bytes()
                .filter(u8::is_ascii_digit)
                .skip_while(|d| *d == b'0')
                .count();
            // Trailing zeros of a fraction say nothing more (`1.50`).
            let trailing = match mantissa.split_once('.') {
                Some((_, frac)) => frac.bytes().rev().take_while(|d| *d == b'0').count(),
                None => 0,
            };
            if !whole && digits.saturating_sub(trailing) > EXACT_DIGITS {
                return Some(token);
            }
            // Fifteen digits are exact only in the range of normal doubles: past it a number
            // becomes infinite, or loses digits (a subnormal), or becomes zero.
            if !whole {
                if let Ok(v) = token.parse::<f64>() {
                    let zero_given = digits == 0;
                    if !v.is_finite() || (v == 0.0 && !zero_given) || (v != 0.0 && !v.is_normal()) {
                        return Some(token);
                    }
                }
            }
            continue;
        }
        i += 1;
    }
    None
}

/// A JSON value, read refusing a key given twice and nesting deeper than `left`.
struct Strict {
    left: usize,
    /// The most levels it may nest, for the error.
    max: usize,
}

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Strict {
    fn inner<E: serde::de::Error>(&self) -> Result<Strict, E> {
        match self.left {
            0 => Err(E::custom(format!(
                "it nests too deep (at most {} levels of arrays and objects)",
                self.max
            ))),
            n => Ok(Strict {
                left: n - 1,
                max: self.max,
            }),
        }
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.inner()?)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(A::Error::custom(format!(
                    "the key {} is given twice in one object",
                    shown(&key)
                )));
            }
            let v = map.next_value_seed(self.inner()?)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `v` is of JSON Schema type `t` (the oracle, written from the definition).
    fn of_type(t: &str, v: &Value) -> bool {
        match (t, v) {
            ("object", Value::Object(_)) | ("array", Value::Array(_)) => true,
            ("string", Value::String(_)) | ("boolean", Value::Bool(_)) => true,
            ("number", Value::Number(_)) => true,
            ("integer", Value::Number(n)) => n.as_f64().is_some_and(|f| f.fract() == 0.0),
            _ => false,
        }
    }

    /// For every type and a value of every JSON kind, a schema of that type whose `enum`,
    /// `const` or `default` is the value is accepted exactly when the value is of the type:
    /// no gate opens that no answer could approve, and none that could is refused.
    #[test]
    fn a_choice_a_const_or_a_default_fits_its_schema() {
        let values = [
            "null",
            "true",
            "0",
            "1",
            "1.0",
            "1.5",
            "-3",
            "\"s\"",
            "\"\"",
            "[]",
            "[1]",
            "{}",
            "{\"a\":1}",
        ];
        for t in TYPES {
            for v in values {
                let value: Value = serde_json::from_str(v).unwrap();
                for (key, given) in [
                    ("enum", format!("[{v}]")),
                    ("const", v.into()),
                    ("default", v.into()),
                ] {
                    let text = format!(r#"{{"type":"{t}","{key}":{given}}}"#);
                    let got = parse_schema("s", &text).is_ok();
                    assert_eq!(got, of_type(t, &value), "{text}");
                }
            }
        }
    }

    /// An integer schema's bounds, every pair of a grid of whole and fractional numbers: it
    /// opens exactly when a whole number lies between them (found by counting).
    #[test]
    fn integer_bounds_hold_a_whole_number() {
        let grid: Vec<f64> = (-8..=8).map(|i| i as f64 / 4.0).collect();
        for &lo in &grid {
            for &hi in &grid {
                let text = format!(r#"{{"type":"integer","minimum":{lo:?},"maximum":{hi:?}}}"#);
                let some = (-3..=3).any(|n| (n as f64) >= lo && (n as f64) <= hi);
                assert_eq!(parse_schema("s", &text).is_ok(), some, "{text}");
            }
        }
    }

    /// Choices that are one value under JSON Schema's equality are refused; choices that
    /// differ are not.
    #[test]
    fn choices_are_distinct_values() {
        for (choices, ok) in [
            ("[1, 1.0]", false),
            ("[0, -0]", false),
            ("[[1], [1.0]]", false),
            ("[{\"a\": 1}, {\"a\": 1.0}]", false),
            ("[1, \"1\"]", false),
            ("[\"true\", true]", false),
            ("[\"null\", null]", false),
            ("[1, 2]", true),
            ("[true, 1]", true),
        ] {
            let text = format!(r#"{{"enum":{choices}}}"#);
            assert_eq!(parse_schema("s", &text).is_ok(), ok, "{text}");
        }
        for disjoint in [
            r#"{"type":"string","enum":["a"],"const":"b"}"#,
            r#"{"const":"a","enum":["b"]}"#,
            r#"{"properties":{"a":{"enum":["x"],"const":"y"}}}"#,
        ] {
            assert!(parse_schema("s", disjoint).is_err(), "{disjoint}");
        }
        // A choice the `const` excludes is one the page would offer and no answer could be.
        assert!(parse_schema("s", r#"{"enum":["a","b"],"const":"a"}"#).is_err());
        assert!(parse_schema("s", r#"{"enum":["a"],"const":"a"}"#).is_ok());
        let unreachable = r#"{"type":"object","required":["x"],"additionalProperties":false}"#;
        assert!(parse_schema("s", unreachable).is_err());
        let reachable = r#"{"type":"object","properties":{"x":{}},"required":["x"],"additionalProperties":false}"#;
        assert!(parse_schema("s", reachable).is_ok());
    }

    #[test]
    fn schemas_use_only_the_keywords_named() {
        let ok = r#"{"type":"object","properties":{"size":{"type":"integer","minimum":1},
            "tone":{"enum":["warm","dry"]},"tags":{"type":"array","items":{"type":"string"}}},
            "required":["size"],"additionalProperties":false}"#;
        let s = parse_schema("--response-schema", ok).unwrap();
        assert!(s
            .text
            .starts_with(r#"{"additionalProperties":false,"properties""#));
        for bad in [
            r#"{"$ref":"http://example.com/s.json"}"#,
            r##"{"type":"object","properties":{"a":{"$ref":"#"}}}"##,
            r#"{"pattern":"a+"}"#,
            r#"{"additionalProperties":true}"#,
            r#"{"type":"null"}"#,
            r#"{"minimum":"one"}"#,
            r#"true"#,
            r#"{"type":"string","type":"object"}"#,
            "{\"title\":\"a\u{202e}b\"}",
            "{\"enum\":[\"ok\",\"x\u{7}\"]}",
            r#"{"type":"integer","minimum":2,"maximum":1}"#,
            r#"{"type":"object","properties":{"s":{"type":"string","minLength":3,"maxLength":2}}}"#,
        ] {
            let e = parse_schema("--response-schema", bad).unwrap_err();
            assert_eq!(
                crate::error::code_of(&e),
                Some(crate::error::Code::Usage),
                "{bad}"
            );
        }
        let mut deep = String::from(r#"{"type":"string"}"#);
        for _ in 0..SCHEMA_MAX_LEVELS {
            deep = format!(r#"{{"type":"object","properties":{{"a":{deep}}}}}"#);
        }
        assert!(parse_schema("s", &deep).is_err(), "nine levels");
        // Bounds that meet are an answer's to fit.
        assert!(parse_schema("s", r#"{"type":"integer","minimum":1,"maximum":1}"#).is_ok());
    }

    #[test]
    fn answers_are_checked_against_the_schema() {
        let s = parse_schema(
            "s",
            r#"{"type":"object","properties":{"size":{"type":"integer","minimum":1}},"required":["size"]}"#,
        )
        .unwrap();
        let good = parse_answer("a", r#"{"size": 3}"#).unwrap();
        check_answer(Some(&s.value), Some(&good), true).unwrap();
        let bad = parse_answer("a", r#"{"size": 0}"#).unwrap();
        let e = check_answer(Some(&s.value), Some(&bad), true).unwrap_err();
        assert!(e.to_string().contains("/size"), "{e}");
        assert!(check_answer(Some(&s.value), None, true).is_err());
        assert!(check_answer(Some(&s.value), None, false).is_ok());
        assert!(check_answer(None, Some(&good), true).is_err());
        assert!(parse_answer("a", r#"{"a":1,"a":2}"#).is_err());
        assert!(parse_answer("a", &"[".repeat(17)).is_err());
        assert!(parse_answer("a", &format!("{}{}", "[".repeat(16), "]".repeat(16))).is_ok());
        assert!(parse_answer("a", "1 2").is_err());
        // Numbers are kept as given, or refused.
        for inexact in [
            "123456789012345678901234567889",
            "1.0000000000000001",
            "[1, 0.12345678901234567]",
            "{\"a\": -98765432109876543210}",
        ] {
            let e = parse_answer("a", inexact).unwrap_err();
            assert!(
                e.to_string().contains("cannot be kept exactly"),
                "{inexact}: {e}"
            );
        }
        for exact in [
            "18446744073709551615",
            "-9223372036854775808",
            "0.1",
            "1.500000000000000000",
            "1e2",
            "[\"123456789012345678901234567889\"]",
            "0.000000000000001",
            "1e-307",
            "0e-400",
            "-0.0",
        ] {
            parse_answer("a", exact).unwrap();
        }
        // Past the range of normal doubles (an outside battery found these sealed changed).
        for inexact in [
            "1e-400",
            "-1e-400",
            "4.9e-324",
            "2.5e-324",
            "1.23456789012345e-320",
        ] {
            let e = parse_answer("a", inexact).unwrap_err();
            assert!(
                e.to_string().contains("cannot be kept exactly"),
                "{inexact}: {e}"
            );
        }
        assert!(parse_schema("s", r#"{"enum":[]}"#).is_err());
    }

    /// A decimal as (negative, significant digits, exponent of its last digit): two
    /// spellings of one number give the same.
    fn decimal(text: &str) -> (bool, String, i64) {
        let (neg, t) = match text.strip_prefix('-') {
            Some(t) => (true, t),
            None => (false, text),
        };
        let (mantissa, exp) = match t.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i64>().unwrap()),
            None => (t, 0),
        };
        let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let mut digits = format!("{whole}{frac}");
        let mut exp = exp - frac.len() as i64;
        while digits.ends_with('0') && digits.len() > 1 {
            digits.pop();
            exp += 1;
        }
        let digits = digits.trim_start_matches('0').to_string();
        if digits.is_empty() {
            return (false, "0".into(), 0);
        }
        (neg, digits, exp)
    }

    /// Every number an answer may hold, generated over its definition (signs, 1 to 17
    /// significant digits, a dot anywhere or none, exponents from -400 to 400): it is kept
    /// exactly as the same decimal, or refused. Never sealed as another number.
    #[test]
    fn a_number_is_kept_exactly_or_refused() {
        let mut seed: u64 = 0x5eed_0049;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let (mut kept, mut refused) = (0, 0);
        for _ in 0..20_000 {
            let len = 1 + next(17) as usize;
            let mut digits: String = (0..len).map(|_| (b'0' + next(10) as u8) as char).collect();
            if next(4) == 0 {
                digits = format!("{}{}", &digits[..len - 1], "0");
            }
            let mut text = digits.clone();
            if next(2) == 0 {
                let at = next(len as u64 + 1) as usize;
                let whole = digits[..at].trim_start_matches('0');
                let whole = if whole.is_empty() { "0" } else { whole };
                let frac = if at == len { "0" } else { &digits[at..] };
                text = format!("{whole}.{frac}");
            } else {
                text = text.trim_start_matches('0').to_string();
                if text.is_empty() {
                    text = "0".into();
                }
            }
            if next(2) == 0 {
                text = format!("{text}e{}", next(801) as i64 - 400);
            }
            if next(3) == 0 {
                text.insert(0, '-');
            }
            match parse_answer("a", &text) {
                Ok(v) => {
                    kept += 1;
                    let given = decimal(&text);
                    let sealed = decimal(&v.to_string());
                    // -0 is kept as a zero.
                    let zero = given.1 == "0" && sealed.1 == "0";
                    assert!(zero || given == sealed, "{text} was kept as {v}");
                }
                Err(e) => {
                    refused += 1;
                    assert!(
                        e.to_string().contains("cannot be kept exactly"),
                        "{text}: {e}"
                    );
                }
            }
        }
        assert!(
            kept > 1_000 && refused > 1_000,
            "kept {kept}, refused {refused}"
        );
    }
}

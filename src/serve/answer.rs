//! A gate's response schema as the page's form: each field the schema asks for, filled from
//! what was posted, and the answer read back from the posted fields.
//!
//! A field is named `r` followed by the JSON pointer of the value it gives (`r` for the whole
//! answer, `r/title`, `r/meta/priority`), so that an error the schema's validator reports at
//! an instance path is shown beside the field of that path. How each schema is asked for:
//! - `const`: shown, not asked (the answer holds the constant);
//! - `enum`: a select of its values;
//! - a string: a text field (a text area where its `maxLength` is over 120 or not set);
//! - a number or an integer: a number field, with its `minimum` and `maximum`;
//! - a boolean: a checkbox (unchecked is `false`);
//! - an array of strings: a text area, one item a line;
//! - an object with `properties`: a group of its properties' fields, at any depth;
//! - anything else (an array of objects, a schema with no `type`): a text area of JSON.
//!
//! An empty field leaves its property out of the answer, unless the property is required
//! (an empty string for a text, an empty list for lines), so the validator says what is
//! missing. Text areas' line ends are sent by browsers as CRLF: they are read as LF.

use maud::{html, Markup};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The posted fields of an answer by name, and the errors shown beside them by name.
pub(super) type Fields = BTreeMap<String, String>;
pub(super) type Errors = BTreeMap<String, String>;

/// The name of the field for the value at `pointer` (a JSON pointer, "" for the whole).
pub(super) fn name(pointer: &str) -> String {
    format!("r{pointer}")
}

/// A pointer one property further down.
fn below(pointer: &str, property: &str) -> String {
    format!(
        "{pointer}/{}",
        property.replace('~', "~0").replace('/', "~1")
    )
}

/// How a schema is asked for (see the module's list).
enum Ask<'a> {
    Fixed(&'a Value),
    Choice(&'a [Value]),
    Text { long: bool },
    Number { integer: bool },
    Boolean,
    Lines,
    Group(&'a Map<String, Value>),
    Json,
}

fn ask(schema: &Value) -> Ask<'_> {
    if let Some(c) = schema.get("const") {
        return Ask::Fixed(c);
    }
    if let Some(values) = schema["enum"].as_array() {
        return Ask::Choice(values);
    }
    match schema["type"].as_str() {
        Some("string") => Ask::Text {
            long: schema["maxLength"].as_u64().is_none_or(|n| n > 120),
        },
        Some("number") => Ask::Number { integer: false },
        Some("integer") => Ask::Number { integer: true },
        Some("boolean") => Ask::Boolean,
        Some("object") => match schema["properties"].as_object() {
            Some(p) => Ask::Group(p),
            None => Ask::Json,
        },
        Some("array")
            if schema["items"]["type"] == "string"
                && schema["items"].get("enum").is_none()
                && schema["items"].get("const").is_none() =>
        {
            Ask::Lines
        }
        _ => Ask::Json,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The fields a form filled with `value` posts (what a person who typed it sends): the
/// form's first filling, from the schema's defaults, and what the property test reads back.
pub(super) fn fields_of(schema: &Value, value: Option<&Value>) -> Fields {
    let mut out = Fields::new();
    fill(schema, "", value, &mut out);
    out
}

fn fill(schema: &Value, pointer: &str, value: Option<&Value>, out: &mut Fields) {
    let value = value.or_else(|| schema.get("default"));
    let field = name(pointer);
    match ask(schema) {
        Ask::Fixed(_) => {}
        Ask::Group(properties) => {
            for (p, s) in properties {
                let v = value.and_then(|v| v.get(p));
                fill(s, &below(pointer, p), v, out);
            }
        }
        Ask::Boolean => {
            if value == Some(&Value::Bool(true)) {
                out.insert(field, "true".into());
            }
        }
        Ask::Choice(_) => {
            out.insert(field, value.map(Value::to_string).unwrap_or_default());
        }
        Ask::Lines => {
            let lines = value
                .and_then(Value::as_array)
                .map(|items| items.iter().map(text).collect::<Vec<_>>().join("\n"))
                .unwrap_or_default();
            out.insert(field, lines);
        }
        Ask::Text { .. } | Ask::Number { .. } => {
            out.insert(field, value.map(text).unwrap_or_default());
        }
        Ask::Json => {
            out.insert(field, value.map(Value::to_string).unwrap_or_default());
        }
    }
}

/// The answer the posted `fields` give under `schema`, or the errors beside the fields that
/// do not read (a number that is not one, JSON that does not parse). The answer is then
/// checked against the schema by [`check`].
#[cfg(test)]
pub(super) fn answer_of(schema: &Value, fields: &Fields) -> Result<Option<Value>, Errors> {
    let (answer, errors) = read_answer(schema, fields);
    if errors.is_empty() {
        Ok(answer)
    } else {
        Err(errors)
    }
}

/// The answer the fields give, as far as they read, and the errors of those that do not.
pub(super) fn read_answer(schema: &Value, fields: &Fields) -> (Option<Value>, Errors) {
    let mut errors = Errors::new();
    let answer = read(schema, "", true, fields, &mut errors);
    (answer, errors)
}

/// Whether any field of the schema at `pointer` was given: a text typed, a box ticked (a
/// constant is not given). An optional group none of whose fields was given is left out.
fn given(schema: &Value, pointer: &str, fields: &Fields) -> bool {
    match ask(schema) {
        Ask::Fixed(_) => false,
        Ask::Group(properties) => properties
            .iter()
            .any(|(p, s)| given(s, &below(pointer, p), fields)),
        Ask::Boolean => fields.get(&name(pointer)).is_some_and(|v| v == "true"),
        _ => fields
            .get(&name(pointer))
            .is_some_and(|v| !v.trim().is_empty()),
    }
}

fn read(
    schema: &Value,
    pointer: &str,
    required: bool,
    fields: &Fields,
    errors: &mut Errors,
) -> Option<Value> {
    let field = name(pointer);
    let posted = fields.get(&field).map(|t| t.replace("\r\n", "\n"));
    let posted = posted.as_deref().unwrap_or("");
    match ask(schema) {
        Ask::Fixed(c) => Some(c.clone()),
        Ask::Group(_) if !required && !given(schema, pointer, fields) => None,
        Ask::Group(properties) => {
            let needed: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let mut object = Map::new();
            for (p, s) in properties {
                let here = below(pointer, p);
                if let Some(v) = read(s, &here, needed.contains(&p.as_str()), fields, errors) {
                    object.insert(p.clone(), v);
                }
            }
            Some(Value::Object(object))
        }
        Ask::Boolean => Some(Value::Bool(posted == "true")),
        _ if posted.is_empty() && !required => None,
        Ask::Text { .. } => Some(Value::String(posted.to_string())),
        Ask::Lines if posted.is_empty() => Some(Value::Array(Vec::new())),
        Ask::Lines => Some(Value::Array(
            posted
                .strip_suffix('\n')
                .unwrap_or(posted)
                .split('\n')
                .map(|l| Value::String(l.to_string()))
                .collect(),
        )),
        Ask::Number { .. } if posted.trim().is_empty() => None,
        // Read as `--response` reads a number: one that cannot be kept exactly is refused,
        // never rounded.
        Ask::Number { .. } => match crate::response::parse_answer("this field", posted.trim()) {
            Ok(n @ Value::Number(_)) => Some(n),
            Ok(_) => {
                errors.insert(field, "not a number".into());
                None
            }
            Err(e) if format!("{e:#}").contains("exactly") => {
                errors.insert(field, format!("{e:#}"));
                None
            }
            Err(_) => {
                errors.insert(field, "not a number".into());
                None
            }
        },
        Ask::Choice(_) | Ask::Json if posted.trim().is_empty() => None,
        Ask::Choice(values) => match serde_json::from_str::<Value>(posted) {
            Ok(v) if values.contains(&v) => Some(v),
            _ => {
                errors.insert(field, "not one of the choices".into());
                None
            }
        },
        Ask::Json => match crate::response::parse_answer("the field", posted) {
            Ok(v) => Some(v),
            Err(e) => {
                errors.insert(field, format!("{e:#}"));
                None
            }
        },
    }
}

/// The errors of `answer` against `schema`, each beside the field it is about: the field of
/// its instance path, or (a required property missing) of that property; an error with no
/// field of its own goes to the nearest field above it.
pub(super) fn check(schema: &Value, answer: &Value, names: &[String]) -> Errors {
    let mut errors = Errors::new();
    for (pointer, message) in crate::response::answer_errors(schema, answer) {
        let mut at = pointer;
        loop {
            if names.contains(&name(&at)) || at.is_empty() {
                break;
            }
            at.truncate(at.rfind('/').unwrap_or(0));
        }
        errors.entry(name(&at)).or_insert(message);
    }
    errors
}

/// The names of every field the schema's form has (its groups' included: an error about a
/// whole object is shown at its group).
pub(super) fn names(schema: &Value) -> Vec<String> {
    fn walk(schema: &Value, pointer: &str, out: &mut Vec<String>) {
        out.push(name(pointer));
        if let Ask::Group(properties) = ask(schema) {
            for (p, s) in properties {
                walk(s, &below(pointer, p), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out
}

/// The names of the fields the schema's form asks for: those with an input (not a group, and
/// not a constant, which is shown, not asked). A posted field of any other name is refused.
pub(super) fn asked(schema: &Value) -> Vec<String> {
    fn walk(schema: &Value, pointer: &str, out: &mut Vec<String>) {
        match ask(schema) {
            Ask::Fixed(_) => {}
            Ask::Group(properties) => {
                for (p, s) in properties {
                    walk(s, &below(pointer, p), out);
                }
            }
            _ => out.push(name(pointer)),
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out
}

/// The form's fields for `schema`, filled with `fields`, with `errors` beside them.
pub(super) fn form(schema: &Value, fields: &Fields, errors: &Errors) -> Markup {
    let mut n = 0;
    html! {
        fieldset.answer #answer {
            legend { "Your answer" }
            @if let Some(e) = errors.get("r").filter(|_| matches!(ask(schema), Ask::Group(_))) {
                p.field-error #r-error role="alert" { (super::layout::visible(e)) }
            }
            (field(schema, "", None, true, fields, errors, &mut n))
        }
    }
}

fn field(
    schema: &Value,
    pointer: &str,
    property: Option<&str>,
    required: bool,
    fields: &Fields,
    errors: &Errors,
    n: &mut usize,
) -> Markup {
    use super::layout::visible;
    let field = name(pointer);
    *n += 1;
    let id = format!("f{n}");
    let value = fields.get(&field).map(String::as_str).unwrap_or("");
    let label = schema["title"]
        .as_str()
        .or(property)
        .unwrap_or("Answer")
        .to_string();
    let hint = schema["description"].as_str();
    let default = schema.get("default").map(text);
    let error = errors
        .get(&field)
        .filter(|_| !pointer.is_empty() || !matches!(ask(schema), Ask::Group(_)));
    let described = format!("{id}-hint {id}-error");
    let (min, max) = (
        schema["minimum"].as_f64().map(|x| x.to_string()),
        schema["maximum"].as_f64().map(|x| x.to_string()),
    );
    let max_len = schema["maxLength"].as_u64().map(|x| x.to_string());
    let about = html! {
        @if let Some(h) = hint { span.hint id=(format!("{id}-hint")) { (visible(h)) } }
        @if let Some(d) = &default { span.default { "Default: " (visible(d)) } }
        @if let Some(e) = error { span.field-error id=(format!("{id}-error")) role="alert" { (visible(e)) } }
    };
    let head = html! {
        label for=(id) { (visible(&label)) @if required && property.is_some() { " (required)" } }
    };
    html! {
        @match ask(schema) {
            Ask::Fixed(c) => {
                div.field { span.label { (visible(&label)) } " " code { (visible(&c.to_string())) } (about) }
            }
            Ask::Group(properties) => {
                @let needed: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                @if pointer.is_empty() {
                    @if let Some(h) = hint { p.hint { (visible(h)) } }
                    @for (p, s) in properties {
                        (self::field(s, &below(pointer, p), Some(p), needed.contains(&p.as_str()), fields, errors, n))
                    }
                } @else {
                    fieldset.group data-field=(field) {
                        legend { (visible(&label)) }
                        (about)
                        @for (p, s) in properties {
                            (self::field(s, &below(pointer, p), Some(p), needed.contains(&p.as_str()), fields, errors, n))
                        }
                    }
                }
            }
            Ask::Boolean => {
                div.field {
                    input #(id) type="checkbox" name=(field) value="true" checked[value == "true"] aria-describedby=(described);
                    " " (head) (about)
                }
            }
            Ask::Choice(values) => {
                div.field {
                    (head)
                    select #(id) name=(field) aria-describedby=(described) aria-invalid=[error.map(|_| "true")] {
                        @if !required || value.is_empty() { option value="" selected[value.is_empty()] { "(choose)" } }
                        @for v in values {
                            @let json = v.to_string();
                            option value=(json) selected[json == value] { (visible(&text(v))) }
                        }
                    }
                    (about)
                }
            }
            Ask::Number { integer } => {
                div.field {
                    (head)
                    input #(id) type="number" name=(field) value=(value) step=(if integer { "1" } else { "any" }) min=[min] max=[max] aria-describedby=(described) aria-invalid=[error.map(|_| "true")];
                    (about)
                }
            }
            Ask::Text { long: false } => {
                div.field {
                    (head)
                    input #(id) type="text" name=(field) value=(value) maxlength=[max_len] aria-describedby=(described) aria-invalid=[error.map(|_| "true")];
                    (about)
                }
            }
            Ask::Text { long: true } | Ask::Lines | Ask::Json => {
                div.field {
                    (head)
                    @match ask(schema) {
                        Ask::Lines => { span.hint { " one a line" } }
                        Ask::Json => { span.hint { " as JSON" } }
                        _ => {}
                    }
                    // A text area drops the newline its content starts with: one is put first.
                    textarea #(id) name=(field) rows="4" aria-describedby=(described) aria-invalid=[error.map(|_| "true")] { "\n" (value) }
                    (about)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_goes_through_its_form_and_back() {
        let schema = json!({
            "type": "object",
            "required": ["title", "tags", "ok"],
            "properties": {
                "title": {"type": "string", "maxLength": 80},
                "notes": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "ok": {"type": "boolean"},
                "n": {"type": "integer", "minimum": 0},
                "level": {"enum": ["low", "high", 3]},
                "kind": {"const": "review"},
                "meta": {"type": "object", "properties": {"a/b": {"type": "number"}}},
                "raw": {"type": "array", "items": {"type": "object"}}
            }
        });
        let answer = json!({
            "title": "Ship it", "tags": ["a", "", "b c"], "ok": true, "n": 4,
            "level": 3, "kind": "review", "meta": {"a/b": 1.5}, "raw": [{"x": 1}],
            "notes": "two\nlines"
        });
        let fields = fields_of(&schema, Some(&answer));
        assert_eq!(fields["r/meta/a~1b"], "1.5");
        assert_eq!(answer_of(&schema, &fields).unwrap(), Some(answer));
    }

    #[test]
    fn errors_go_beside_their_fields() {
        let schema = json!({
            "type": "object", "required": ["title", "n"],
            "properties": {"title": {"type": "string"}, "n": {"type": "integer", "maximum": 3},
                           "meta": {"type": "object", "properties": {"m": {"type": "number"}}}}
        });
        let mut fields = Fields::new();
        fields.insert("r/n".into(), "x".into());
        fields.insert("r/meta/m".into(), "1e".into());
        let errors = answer_of(&schema, &fields).unwrap_err();
        assert_eq!(errors["r/n"], "not a number");
        assert_eq!(errors["r/meta/m"], "not a number");
        let errors = check(&schema, &json!({"n": 7}), &names(&schema));
        assert!(errors["r/title"].contains("required"), "{errors:?}");
        assert!(errors["r/n"].contains('3'), "{errors:?}");
        // An optional group nothing was given in is left out, though its fields are required
        // within it; a number that cannot be kept exactly is refused, never rounded.
        let s = json!({"type": "object", "properties": {
            "meta": {"type": "object", "required": ["name", "ok"],
                     "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"},
                                    "k": {"const": 1}}},
            "x": {"type": "number"}}});
        assert_eq!(answer_of(&s, &Fields::new()).unwrap(), Some(json!({})));
        let mut f = Fields::new();
        f.insert("r/meta/ok".into(), "true".into());
        assert_eq!(
            answer_of(&s, &f).unwrap(),
            Some(json!({"meta": {"name": "", "ok": true, "k": 1}}))
        );
        f.insert("r/x".into(), "0.12345678901234567890".into());
        assert!(answer_of(&s, &f).unwrap_err()["r/x"].contains("exactly"));
        // CRLF from a browser's text area reads as LF.
        let s = json!({"type": "string"});
        let mut f = Fields::new();
        f.insert("r".into(), "a\r\nb".into());
        assert_eq!(answer_of(&s, &f).unwrap(), Some(json!("a\nb")));
    }
}

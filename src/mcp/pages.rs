//! The size bound of every answer a model reads through MCP, and the cursor that continues
//! it. A model's context is the scarcest thing it has: no answer is longer than its bound,
//! each one says when it was cut, and the cursor it gives reaches the rest.

use serde_json::{json, Map, Value};

/// Lists (gates, runs, agents, imports, query rows): items a page by default, and at most.
pub const LIST_DEFAULT: u64 = 50;
pub const LIST_MAX: u64 = 500;
/// Log events a page by default, and at most.
pub const LOG_DEFAULT: u64 = 100;
pub const LOG_MAX: u64 = 1000;
/// A page of a list or the log holds at most about this many bytes of JSON (an item longer
/// than that on its own is given alone, so that the cursor always moves on).
pub const PAGE_BYTES: usize = 32 * 1024;
/// A value's or a memory's bytes a page by default, and at most.
pub const TEXT_DEFAULT: u64 = 16 * 1024;
pub const TEXT_MAX: u64 = 256 * 1024;
/// A prompt (a guide) a page, in bytes.
pub const PROMPT_BYTES: usize = 32 * 1024;

/// One page of a list: at most `limit` items from position `cursor`, within [`PAGE_BYTES`].
pub fn list(items: Vec<Value>, field: &str, cursor: u64, limit: u64) -> Value {
    let total = items.len();
    let start = usize::try_from(cursor).unwrap_or(usize::MAX).min(total);
    let mut page = Vec::new();
    let mut bytes = 0;
    for item in items.into_iter().skip(start) {
        if page.len() as u64 >= limit {
            break;
        }
        let size = serde_json::to_string(&item).map_or(0, |s| s.len()) + 1;
        if !page.is_empty() && bytes + size > PAGE_BYTES {
            break;
        }
        bytes += size;
        page.push(item);
    }
    let next = start + page.len();
    let mut out = json!({"total": total, "cursor": start,
                         "next_cursor": (next < total).then_some(next), "truncated": next < total});
    out[field] = Value::Array(page);
    out
}

/// How many of `part`'s bytes end on a whole character: a page that would end inside a
/// UTF-8 sequence ends before it instead, and the next page starts with the whole character.
/// At the value's end, or where the bytes are not text at all, the part is kept as it is.
fn whole_chars(part: &[u8], at_end: bool) -> usize {
    if at_end {
        return part.len();
    }
    match std::str::from_utf8(part) {
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => e.valid_up_to(),
        _ => part.len(),
    }
}

/// Puts a page of a text read in parts in `out`: `part`, the bytes from `offset` of a text of
/// `total` bytes (cut back to a whole character), as `field`, with the page fields: `offset`,
/// `length`, `total_bytes`, `next_offset` (null at the end) and `truncated` (whether more
/// follows).
pub fn put_part(out: &mut Map<String, Value>, field: &str, part: &[u8], offset: u64, total: u64) {
    let keep = whole_chars(part, offset + part.len() as u64 >= total);
    let text = String::from_utf8_lossy(&part[..keep]).into_owned();
    out.insert(field.into(), Value::String(text));
    let next = offset + keep as u64;
    out.insert("offset".into(), json!(offset));
    out.insert("length".into(), json!(keep));
    out.insert("total_bytes".into(), json!(total));
    out.insert("next_offset".into(), json!((next < total).then_some(next)));
    out.insert("truncated".into(), json!(next < total));
}

/// Puts the page of `bytes` from `offset`, at most `length` long, in `out` (see [`put_part`]).
pub fn put_page(out: &mut Map<String, Value>, field: &str, bytes: &[u8], offset: u64, length: u64) {
    let total = bytes.len() as u64;
    let start = offset.min(total);
    let end = start.saturating_add(length).min(total);
    put_part(
        out,
        field,
        &bytes[start as usize..end as usize],
        start,
        total,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_page_is_bounded_and_continues() {
        let items: Vec<Value> = (0..120).map(|i| json!(i)).collect();
        let p = list(items.clone(), "rows", 0, 50);
        assert_eq!(p["rows"].as_array().unwrap().len(), 50);
        assert_eq!(
            (p["next_cursor"].clone(), p["truncated"].clone()),
            (json!(50), json!(true))
        );
        let last = list(items, "rows", 100, 50);
        assert_eq!(last["rows"].as_array().unwrap().len(), 20);
        assert_eq!(
            (last["next_cursor"].clone(), last["truncated"].clone()),
            (json!(null), json!(false))
        );
        let big: Vec<Value> = (0..10).map(|_| json!("x".repeat(20_000))).collect();
        let p = list(big, "rows", 0, 50);
        assert_eq!(
            p["rows"].as_array().unwrap().len(),
            1,
            "one 20 KB item a 32 KiB page"
        );
    }

    #[test]
    fn a_text_page_never_splits_a_character() {
        let s = "aé€😀".repeat(3);
        let mut at = 0;
        let mut back = String::new();
        while at < s.len() as u64 {
            let mut page = Map::new();
            put_page(&mut page, "text", s.as_bytes(), at, 5);
            assert_eq!(page["offset"], json!(at));
            let len = page["length"].as_u64().unwrap();
            assert!(len > 0);
            back.push_str(page["text"].as_str().unwrap());
            at += len;
        }
        assert_eq!(back, s);
    }
}

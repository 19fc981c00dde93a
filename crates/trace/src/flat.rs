//! The fast path of the trace reader: a byte-level scanner for JSON objects in the shape trace
//! events have (keys without escapes, values that are strings, numbers, literals or small nested
//! containers), which hands out each member's key and raw value text without building anything.
//!
//! It either reads an object exactly as serde_json would (the same members, the same value
//! text, JSON validated as strictly) or declines (`None`), and the caller then reads that object
//! through serde as before: so every error message, bound and oddity keeps the one behaviour the
//! serde path defines. It declines, rather than decides, whenever an object leaves the common
//! shape: an escape in a key or in a string the caller wants as text, a `\u` escape anywhere,
//! nesting deeper than [`MAX_DEPTH`], an object cut off by the end of the buffer.

/// Nesting (the object itself counts as one) past which the scanner declines; serde_json's own
/// limit is 128.
pub const MAX_DEPTH: u32 = 16;

/// Members one object may have for the fast path (trace events have about ten, an NCCL
/// kernel's `args` about twenty-five); more decline. (The value offsets are `u32`: an object
/// past 4 GiB declines too.)
const MAX_MEMBERS: usize = 32;

/// Scans the object at the start of `b` (after JSON whitespace), then calls `member(key,
/// value)` for each member in order; `value` is the member's JSON text without surrounding
/// whitespace. `member` returns false to decline. Returns the bytes used, through the `}`.
pub fn object<'a>(b: &'a [u8], member: impl FnMut(&'a str, &'a str) -> bool) -> Option<usize> {
    object_with(b, |_, _| Some(None), member)
}

/// [`object`], with `nested(key, rest)` asked first for each member's value (`rest` starts at
/// it): `Some(Some(n))` when it read the value itself (the `n` bytes of a value it validated as
/// strictly as [`object`] does), `Some(None)` to leave it to the scanner, `None` to decline. So
/// an event's `args` is read once, not scanned and then read.
pub fn object_with<'a>(
    b: &'a [u8],
    mut nested: impl FnMut(&[u8], &'a [u8]) -> Option<Option<usize>>,
    mut member: impl FnMut(&'a str, &'a str) -> bool,
) -> Option<usize> {
    // Each member's key and value as byte ranges: key start and end, value start and end.
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_MEMBERS];
    let mut n = 0;
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    let used = if b.get(i) == Some(&b'}') {
        i + 1
    } else {
        loop {
            let (escaped, key_end) = string(b, i)?;
            if escaped || n == MAX_MEMBERS {
                return None;
            }
            let key = i + 1;
            i = skip_ws(b, key_end);
            if b.get(i) != Some(&b':') {
                return None;
            }
            let start = skip_ws(b, i + 1);
            let end = match nested(b.get(key..key_end - 1)?, b.get(start..)?)? {
                Some(n) => start + n,
                None => value(b, start, 2)?,
            };
            let offset = |x: usize| u32::try_from(x).ok();
            *spans.get_mut(n)? = (offset(key)?, offset(key_end - 1)?, offset(start)?, offset(end)?);
            n += 1;
            i = skip_ws(b, end);
            match b.get(i)? {
                b',' => i = skip_ws(b, i + 1),
                b'}' => break i + 1,
                _ => return None,
            }
        }
    };
    // One check of the whole object: structural bytes are ASCII, so every range above falls
    // on character boundaries.
    let text = std::str::from_utf8(b.get(..used)?).ok()?;
    for &(k0, k1, v0, v1) in spans.iter().take(n) {
        let range = |a: u32, b: u32| a as usize..b as usize;
        if !member(text.get(range(k0, k1))?, text.get(range(v0, v1))?) {
            return None;
        }
    }
    Some(used)
}

/// A member's value as text to keep: the contents of a string without escapes (`Some(Some)`),
/// `null` (`Some(None)`); anything else declines (`None`).
pub fn text(value: &str) -> Option<Option<&str>> {
    if value == "null" {
        return Some(None);
    }
    match string(value.as_bytes(), 0) {
        Some((false, end)) if end == value.len() => value.get(1..end - 1).map(Some),
        _ => None,
    }
}

/// The index of the first byte at or after `i` that is not JSON whitespace.
#[inline]
pub fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// Whether any of the eight bytes is `"`, `\` or below 0x20 (SWAR: the classic "has a zero
/// byte" and "has a byte less than n" tests).
#[inline]
fn special(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below_0x20 = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    (zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\'))) | below_0x20) != 0
}

/// The string starting at `b[i] == '"'`: whether it holds escapes, and the index after its
/// closing quote. Its bytes are not checked as UTF-8 here ([`object`] checks the whole object).
#[inline]
fn string(b: &[u8], i: usize) -> Option<(bool, usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        while let Some(chunk) = b.get(j..j + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            if special(u64::from_le_bytes(word)) {
                break;
            }
            j += 8;
        }
        match *b.get(j)? {
            b'"' => return Some((escaped, j + 1)),
            // `\u` escapes decline: serde_json checks their surrogate pairs.
            b'\\' => match b.get(j + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                    escaped = true;
                    j += 2;
                }
                _ => return None,
            },
            // A control character is invalid in a string.
            0..0x20 => return None,
            _ => j += 1,
        }
    }
}

/// The end of the JSON value starting at `b[i]`, validated; `depth` is its nesting level.
fn value(b: &[u8], i: usize, depth: u32) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string(b, i).map(|(_, end)| end),
        b'{' | b'[' if depth > MAX_DEPTH => None,
        b'{' => {
            let mut j = skip_ws(b, i + 1);
            if b.get(j) == Some(&b'}') {
                return Some(j + 1);
            }
            loop {
                let (_, end) = string(b, j)?;
                j = skip_ws(b, end);
                if b.get(j) != Some(&b':') {
                    return None;
                }
                j = skip_ws(b, value(b, skip_ws(b, j + 1), depth + 1)?);
                match b.get(j)? {
                    b',' => j = skip_ws(b, j + 1),
                    b'}' => return Some(j + 1),
                    _ => return None,
                }
            }
        }
        b'[' => {
            let mut j = skip_ws(b, i + 1);
            if b.get(j) == Some(&b']') {
                return Some(j + 1);
            }
            loop {
                j = skip_ws(b, value(b, j, depth + 1)?);
                match b.get(j)? {
                    b',' => j = skip_ws(b, j + 1),
                    b']' => return Some(j + 1),
                    _ => return None,
                }
            }
        }
        b't' => literal(b, i, b"true"),
        b'f' => literal(b, i, b"false"),
        b'n' => literal(b, i, b"null"),
        b'-' | b'0'..=b'9' => number(b, i),
        _ => None,
    }
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    b.get(i..i + word.len()).filter(|w| *w == word).map(|_| i + word.len())
}

/// The end of the number at `b[i]`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`. A number
/// that reaches the end of `b` declines (more digits may follow in the next read).
fn number(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |b: &[u8], i: usize| i + b.iter().skip(i).take_while(|c| c.is_ascii_digit()).count();
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(b, i),
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        let end = digits(b, i + 1);
        if end == i + 1 {
            return None;
        }
        i = end;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let end = digits(b, i);
        if end == i {
            return None;
        }
        i = end;
    }
    (i < b.len()).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(doc: &str) -> Option<(Vec<(String, String)>, usize)> {
        let mut out = Vec::new();
        let used = object(doc.as_bytes(), |k, v| {
            out.push((k.to_string(), v.to_string()));
            true
        })?;
        Some((out, used))
    }

    #[test]
    fn reads_members_and_their_raw_values() {
        let doc = r#" {"ph": "X", "ts" : 12.5e3 ,"args":{"grid":[1, 2,3],"x":{"y":[true,false,null]}},"s":"a\"b"}, "#;
        let (m, used) = members(doc).expect("common shape");
        assert_eq!(&doc[used..], ", ");
        let pairs: Vec<(&str, &str)> = m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("ph", "\"X\""),
                ("ts", "12.5e3"),
                ("args", r#"{"grid":[1, 2,3],"x":{"y":[true,false,null]}}"#),
                ("s", r#""a\"b""#)
            ]
        );
        assert_eq!(members("{}"), Some((vec![], 2)));
    }

    #[test]
    fn declines_what_it_does_not_read_exactly() {
        for doc in [
            r#"{"a": 1"#,                         // cut off
            r#"{"a": 12}"#.trim_end_matches('}'), // a number at the end of the buffer
            r#"{"p\u0068": "X"}"#,                // an escaped key
            r#"{"a": "\u00e9"}"#,                 // a \u escape
            "{\"a\": \"tab\there\"}",             // a control character
            r#"{"a": 01}"#,
            r#"{"a": 1.}"#,
            r#"{"a": -}"#,
            r#"{"a": 1e}"#,
            r#"{"a": tru}"#,
            r#"{"a": [1,]}"#,
            r#"{"a": 1,}"#,
            r#"{"a" 1}"#,
            r#"{"a": 1 "b": 2}"#,
            r#"["X"]"#,
            r#"{"a": "\x"}"#,
        ] {
            assert!(members(doc).is_none(), "{doc}");
        }
        let deep = format!("{{\"a\": {}1{}}}", "[".repeat(40), "]".repeat(40));
        assert!(members(&deep).is_none());
        assert!(object(b"{\"a\": \"\xff\"}", |_, _| true).is_none());
    }

    #[test]
    fn text_values_are_strings_without_escapes_or_null() {
        assert_eq!(text("\"kernel\""), Some(Some("kernel")));
        assert_eq!(text("null"), Some(None));
        assert_eq!(text("\"a\\nb\""), None);
        assert_eq!(text("12"), None);
    }
}

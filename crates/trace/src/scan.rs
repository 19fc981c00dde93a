//! Byte-by-byte scanning of JSON values too large to parse in place: skipping a value without
//! building it, and reducing an oversized event to the few fields attribution keeps (each
//! capped), so that a multi-gigabyte string under any key costs a bounded buffer, not memory
//! proportional to its size.

use std::io::Read;

use super::reader::{JsonStream, Keep, ReadError};

/// Bytes a kept raw value may have in a reduced event; a longer string is cut (on a character
/// and escape boundary), a longer number or container becomes `null`. Long enough that a cut
/// string still decodes to more than [`super::limits::MAX_NAME_BYTES`], so the name cap marks it.
pub const RAW_CAP: usize = 64 << 10;

/// Keys longer than this are no key the reader knows: their values are skipped.
const KEY_CAP: usize = 256;

/// Containers nested deeper than this are rejected (serde_json's own limit).
const MAX_DEPTH: usize = 128;

/// Raw bytes of a value, up to a cap.
struct Capture {
    bytes: Vec<u8>,
    cap: usize,
    overflow: bool,
    /// Within a string: the longest prefix that can be closed with `"` and stay valid.
    safe_cut: usize,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Capture { bytes: Vec::new(), cap, overflow: false, safe_cut: 0 }
    }

    fn push(&mut self, b: u8) {
        if self.bytes.len() < self.cap {
            self.bytes.push(b);
        } else {
            self.overflow = true;
        }
    }
}

fn push(sink: &mut Option<&mut Capture>, b: u8) {
    if let Some(c) = sink {
        c.push(b);
    }
}

impl<R: Read> JsonStream<R> {
    /// The next byte, consumed, without skipping whitespace.
    fn next_byte(&mut self) -> Result<u8, ReadError> {
        match self.next_raw()? {
            Some(b) => Ok(b),
            None => Err(ReadError::Truncated { offset: self.offset() }),
        }
    }

    fn fail(&self, message: String) -> ReadError {
        ReadError::Syntax { offset: self.offset(), message }
    }

    /// Consumes one value of any shape, checking its syntax, without building it.
    pub fn skip_value(&mut self) -> Result<(), ReadError> {
        self.scan_value(None)
    }

    /// Consumes one value; its bytes (without insignificant whitespace) go to `sink`.
    fn scan_value(&mut self, mut sink: Option<&mut Capture>) -> Result<(), ReadError> {
        let mut stack: Vec<u8> = Vec::new();
        loop {
            // A value.
            match self.peek()? {
                None => return Err(ReadError::Truncated { offset: self.offset() }),
                Some(open @ (b'{' | b'[')) => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(self.fail(format!("values nested more than {MAX_DEPTH} deep")));
                    }
                    self.next_byte()?;
                    push(&mut sink, open);
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.peek()? == Some(close) {
                        self.next_byte()?;
                        push(&mut sink, close);
                    } else {
                        stack.push(open);
                        if open == b'{' {
                            self.scan_member_key(&mut sink)?;
                        }
                        continue;
                    }
                }
                Some(b'"') => self.scan_string(&mut sink)?,
                Some(b'-' | b'0'..=b'9') => self.scan_number(&mut sink)?,
                Some(b't') => self.scan_literal(b"true", &mut sink)?,
                Some(b'f') => self.scan_literal(b"false", &mut sink)?,
                Some(b'n') => self.scan_literal(b"null", &mut sink)?,
                Some(b) => {
                    return Err(self.fail(format!("expected a value, found '{}'", char::from(b).escape_default())))
                }
            }
            // After a value: close containers until another element follows.
            loop {
                let Some(&open) = stack.last() else { return Ok(()) };
                let close = if open == b'{' { b'}' } else { b']' };
                match self.peek()? {
                    Some(b',') => {
                        self.next_byte()?;
                        push(&mut sink, b',');
                        if open == b'{' {
                            self.scan_member_key(&mut sink)?;
                        }
                        break;
                    }
                    Some(b) if b == close => {
                        self.next_byte()?;
                        push(&mut sink, close);
                        stack.pop();
                    }
                    Some(b) => {
                        return Err(self.fail(format!(
                            "expected ',' or '{}', found '{}'",
                            char::from(close),
                            char::from(b).escape_default()
                        )))
                    }
                    None => return Err(ReadError::Truncated { offset: self.offset() }),
                }
            }
        }
    }

    /// `"key":` inside an object.
    fn scan_member_key(&mut self, sink: &mut Option<&mut Capture>) -> Result<(), ReadError> {
        if self.peek()? != Some(b'"') {
            return Err(self.fail("expected a key (a string) in an object".to_string()));
        }
        self.scan_string(sink)?;
        self.expect(b':', "':' after a key")?;
        push(sink, b':');
        Ok(())
    }

    /// A string, from its opening quote: escapes checked, control characters rejected.
    fn scan_string(&mut self, sink: &mut Option<&mut Capture>) -> Result<(), ReadError> {
        self.next_byte()?;
        push(sink, b'"');
        // Whether the last unit was a `\uD800`–`\uDBFF` escape (a cut must not split the pair).
        let mut after_high = false;
        loop {
            let b = self.next_byte()?;
            if let Some(c) = sink.as_deref_mut() {
                if !c.overflow && !after_high && !(0x80..0xC0).contains(&b) {
                    c.safe_cut = c.bytes.len();
                }
            }
            match b {
                b'"' => {
                    push(sink, b);
                    return Ok(());
                }
                b'\\' => {
                    push(sink, b);
                    let e = self.next_byte()?;
                    push(sink, e);
                    after_high = false;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let mut code = 0u32;
                            for _ in 0..4 {
                                let h = self.next_byte()?;
                                push(sink, h);
                                let digit = char::from(h)
                                    .to_digit(16)
                                    .ok_or_else(|| self.fail("invalid \\u escape in a string".to_string()))?;
                                code = code * 16 + digit;
                            }
                            after_high = (0xD800..0xDC00).contains(&code);
                        }
                        _ => return Err(self.fail("invalid escape in a string".to_string())),
                    }
                }
                0..=0x1F => return Err(self.fail("control character in a string".to_string())),
                _ => {
                    push(sink, b);
                    after_high = false;
                }
            }
        }
    }

    fn scan_number(&mut self, sink: &mut Option<&mut Capture>) -> Result<(), ReadError> {
        while let Some(b) = self.peek_raw()? {
            if !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                break;
            }
            self.next_byte()?;
            push(sink, b);
        }
        Ok(())
    }

    fn scan_literal(&mut self, word: &[u8], sink: &mut Option<&mut Capture>) -> Result<(), ReadError> {
        for &want in word {
            if self.next_byte()? != want {
                return Err(self.fail(format!("expected `{}`", String::from_utf8_lossy(word))));
            }
            push(sink, want);
        }
        Ok(())
    }

    /// Consumes one value and returns a small JSON text holding only what `keep` names, each
    /// kept value capped (see [`RAW_CAP`]).
    pub fn reduce(&mut self, keep: &Keep) -> Result<Vec<u8>, ReadError> {
        let mut out = Vec::new();
        self.reduce_into(keep, &mut out)?;
        Ok(out)
    }

    fn reduce_into(&mut self, keep: &Keep, out: &mut Vec<u8>) -> Result<(), ReadError> {
        let fields = match keep {
            Keep::Object(fields) if self.peek()? == Some(b'{') => fields,
            _ => return self.capture_raw(out),
        };
        self.next_byte()?;
        out.push(b'{');
        if self.peek()? == Some(b'}') {
            self.next_byte()?;
            out.push(b'}');
            return Ok(());
        }
        let mut first = true;
        loop {
            if self.peek()? != Some(b'"') {
                return Err(self.fail("expected a key (a string) in an object".to_string()));
            }
            let mut key = Capture::new(KEY_CAP);
            self.scan_string(&mut Some(&mut key))?;
            self.expect(b':', "':' after a key")?;
            let wanted = if key.overflow { None } else { known(fields, &key.bytes) };
            match wanted {
                Some(sub) => {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    out.extend_from_slice(&key.bytes);
                    out.push(b':');
                    self.reduce_into(sub, out)?;
                }
                None => self.skip_value()?,
            }
            if !self.next_in_object()? {
                out.push(b'}');
                return Ok(());
            }
        }
    }

    /// One value's text, capped: a cut string is closed where it was cut, anything else too
    /// long becomes `null`.
    fn capture_raw(&mut self, out: &mut Vec<u8>) -> Result<(), ReadError> {
        let is_string = self.peek()? == Some(b'"');
        let mut c = Capture::new(RAW_CAP);
        self.scan_value(Some(&mut c))?;
        if !c.overflow {
            out.extend_from_slice(&c.bytes);
        } else if is_string {
            out.extend_from_slice(c.bytes.get(..c.safe_cut).unwrap_or_default());
            out.push(b'"');
        } else {
            out.extend_from_slice(b"null");
        }
        Ok(())
    }
}

/// The rule for the member whose key (raw JSON string text) is `raw_key`, if it is one of
/// `fields`.
fn known<'a>(fields: &'a [(&'static str, Keep)], raw_key: &[u8]) -> Option<&'a Keep> {
    let key: String = serde_json::from_slice(raw_key).ok()?;
    fields.iter().find(|(name, _)| *name == key).map(|(_, keep)| keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reduce(doc: &str, keep: &Keep) -> Result<String, String> {
        let mut s = JsonStream::with_capacity(doc.as_bytes(), 8);
        let out = s.reduce(keep).map_err(|e| e.to_string())?;
        Ok(String::from_utf8(out).expect("UTF-8"))
    }

    fn skip(doc: &str) -> Result<u64, String> {
        let mut s = JsonStream::with_capacity(doc.as_bytes(), 8);
        s.skip_value().map_err(|e| e.to_string())?;
        Ok(s.offset())
    }

    const EVENT: Keep = Keep::Object(&[("name", Keep::Raw), ("args", Keep::Object(&[("a", Keep::Raw)]))]);

    #[test]
    fn skipping_consumes_exactly_one_value_and_checks_it() {
        assert_eq!(skip(r#"{"a": [1, -2.5e3, "x\"\\\u00e9", true, false, null, {}], "b": []} ,"#), Ok(65));
        assert_eq!(skip("123 "), Ok(3));
        assert!(skip(r#"{"a" 1}"#).unwrap_err().contains("':'"));
        assert!(skip(r#"[1 2]"#).unwrap_err().contains("expected ','"));
        assert!(skip(r#"["a\q"]"#).unwrap_err().contains("invalid escape"));
        assert!(skip("[tru]").unwrap_err().contains("`true`"));
        assert!(skip("[1, ").unwrap_err().contains("ends early"));
        assert!(skip(&"[".repeat(200)).unwrap_err().contains("nested"));
        assert!(skip("\"a\u{1}\"").unwrap_err().contains("control character"));
    }

    #[test]
    fn reducing_keeps_named_members_only() {
        let doc = r#"{"big": "xxxxxxxx", "name": "k\u00e9", "args": {"a": [1, 2], "b": {"c": 1}}, "n\u0061me": 1}"#;
        assert_eq!(reduce(doc, &EVENT).as_deref(), Ok(r#"{"name":"k\u00e9","args":{"a":[1,2]},"n\u0061me":1}"#));
        assert_eq!(reduce("[1, 2]", &EVENT).as_deref(), Ok("[1,2]"), "not an object: kept raw");
        assert_eq!(reduce("{}", &EVENT).as_deref(), Ok("{}"));
    }

    #[test]
    fn long_values_are_cut_or_dropped_and_stay_valid_json() {
        let long = "é".repeat(RAW_CAP);
        let out = reduce(&format!(r#"{{"name": "{long}"}}"#), &EVENT).expect("reduces");
        let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
        let name = v["name"].as_str().expect("a string");
        assert!(name.len() <= RAW_CAP && name.len() > RAW_CAP - 4 && name.chars().all(|c| c == 'é'));
        // A surrogate pair straddling the cap is not split.
        let pairs = "\\ud83d\\ude00".repeat(RAW_CAP / 12 + 2);
        let out = reduce(&format!(r#"{{"name": "{pairs}"}}"#), &EVENT).expect("reduces");
        assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok(), "{}", &out[out.len() - 20..]);
        let numbers = format!("[{}1]", "1,".repeat(RAW_CAP));
        assert_eq!(reduce(&format!(r#"{{"name": {numbers}}}"#), &EVENT).as_deref(), Ok(r#"{"name":null}"#));
        let key = "k".repeat(KEY_CAP + 1);
        assert_eq!(reduce(&format!(r#"{{"{key}": 1, "name": 2}}"#), &EVENT).as_deref(), Ok(r#"{"name":2}"#));
    }
}

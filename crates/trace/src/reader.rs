//! A bounded-memory JSON reader for huge documents: it walks the top-level structure by hand
//! and hands each array element (one trace event) to serde as a borrowed slice of a refillable
//! buffer. Memory stays at the buffer size (about 1 MiB, grown only for a single larger value),
//! whatever the file size; no `serde_json::Value` tree is ever built.
//!
//! Why not `serde_json::from_reader`: its byte-at-a-time `IoRead` runs at ~130 MB/s here, while
//! parsing from a slice runs ~3× faster (measurements in `docs/crates.md`). Why not an
//! mmap: touched file pages count in the resident set, and gzip input needs a buffer anyway.

use std::io::{self, Read};

use serde::Deserialize;

const INITIAL_CAPACITY: usize = 1 << 20;

/// A value up to this size is parsed in place by serde; a larger one (always hostile or broken
/// in a trace: real events are a few hundred bytes) is scanned byte by byte instead (see
/// `scan.rs`), so the buffer never grows past twice this.
pub const MAX_INLINE_VALUE: usize = 1 << 20;

/// What can go wrong while reading: the stream itself, or the JSON at a byte offset.
#[derive(Debug)]
pub enum ReadError {
    /// The stream failed (for gzip input: corrupt or truncated compressed data) after `offset`
    /// bytes of the document had been read.
    Io { offset: u64, source: io::Error },
    /// Malformed JSON or an unexpected value; `offset` is the byte offset in the (decompressed)
    /// document where the offending value starts.
    Syntax { offset: u64, message: String },
    /// The document ended before it was complete.
    Truncated { offset: u64 },
    /// Well-formed JSON that is neither a profiler trace nor aggregated events: `found` says what it
    /// is (`a JSON array of numbers`, `a commgate result file`).
    NotATrace { found: String },
    /// The document holds more events than the limit allows.
    TooManyEvents { limit: u64 },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io { offset, source } => write!(f, "at byte {offset}: {source}"),
            ReadError::Syntax { offset, message } => write!(f, "at byte {offset}: {message}"),
            ReadError::Truncated { offset } => write!(f, "the JSON ends early at byte {offset} (truncated file?)"),
            ReadError::NotATrace { found } => write!(f, "is not a profiler trace ({found})"),
            ReadError::TooManyEvents { limit } => write!(f, "holds more than {limit} events"),
        }
    }
}

/// What to keep of a value too large to parse in place ([`JsonStream::with_reduced`]; the
/// scan that reduces it lives in `scan.rs`).
#[derive(Debug)]
pub enum Keep {
    /// The value's JSON text, capped at `scan::RAW_CAP`.
    Raw,
    /// Only these members of an object (anything else is kept as [`Keep::Raw`]).
    Object(&'static [(&'static str, Keep)]),
}

/// Streams a JSON document from any reader.
pub struct JsonStream<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Absolute offset of `buf[0]` in the document.
    base: u64,
    eof: bool,
}

impl<R: Read> JsonStream<R> {
    pub fn new(inner: R) -> Self {
        Self::with_capacity(inner, INITIAL_CAPACITY)
    }

    /// A stream with a buffer of `capacity` bytes to start with (tests use tiny ones to
    /// exercise every refill).
    pub fn with_capacity(inner: R, capacity: usize) -> Self {
        JsonStream { inner, buf: vec![0; capacity.max(1)], start: 0, end: 0, base: 0, eof: false }
    }

    /// The next byte, consumed, whitespace included; `None` at end of input.
    pub(super) fn next_raw(&mut self) -> Result<Option<u8>, ReadError> {
        let b = self.peek_raw()?;
        if b.is_some() {
            self.start += 1;
        }
        Ok(b)
    }

    /// The next byte, whitespace included, without consuming it; `None` at end of input.
    pub(super) fn peek_raw(&mut self) -> Result<Option<u8>, ReadError> {
        if self.start == self.end && !self.refill()? {
            return Ok(None);
        }
        Ok(self.unread().first().copied())
    }

    /// The bytes read from the input and not yet consumed (`start..end` of the buffer).
    fn unread(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }

    /// Absolute offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Reads more input, keeping the unread bytes; grows the buffer when it is mostly unread.
    /// Returns false at end of input.
    fn refill(&mut self) -> Result<bool, ReadError> {
        if self.eof {
            return Ok(false);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.end * 2 > self.buf.len() {
            let len = self.buf.len() * 2;
            self.buf.resize(len, 0);
        }
        // Fill the whole free space, not just one read's worth: a gzip decoder hands out a few
        // KiB per call, and a value that spans the buffer is parsed again after every refill,
        // so topping up by one small read made a large value cost quadratic time.
        let before = self.end;
        while let Some(free) = self.buf.get_mut(self.end..).filter(|free| !free.is_empty()) {
            match self.inner.read(free) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(ReadError::Io { offset: self.base + self.end as u64, source }),
            }
        }
        Ok(self.end > before)
    }

    /// The unread bytes in the buffer, topped up first when fewer than `want` are there and
    /// the input goes on (a fast path reads a whole element from it, or declines).
    pub(super) fn buffered(&mut self, want: usize) -> Result<&[u8], ReadError> {
        if self.end - self.start < want && !self.eof {
            self.refill()?;
        }
        Ok(self.unread())
    }

    /// Consumes `n` bytes of [`Self::buffered`]'s slice.
    pub(super) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }

    /// The next byte that is not JSON whitespace, without consuming it; `None` at end of input.
    pub fn peek(&mut self) -> Result<Option<u8>, ReadError> {
        loop {
            while let Some(&b) = self.unread().first() {
                if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    self.start += 1;
                } else if self.offset() == 0 && b == 0xEF {
                    // Perhaps a UTF-8 byte order mark: skip it only when all three bytes are
                    // there (a reader may hand them out one at a time).
                    while self.end - self.start < 3 && self.refill()? {}
                    if self.unread().starts_with(&[0xEF, 0xBB, 0xBF]) {
                        self.start += 3;
                    } else {
                        return Ok(Some(b));
                    }
                } else {
                    return Ok(Some(b));
                }
            }
            if !self.refill()? {
                return Ok(None);
            }
        }
    }

    /// Consumes `byte` (after whitespace) or fails naming what was expected.
    pub fn expect(&mut self, byte: u8, what: &str) -> Result<(), ReadError> {
        match self.peek()? {
            Some(b) if b == byte => {
                self.start += 1;
                Ok(())
            }
            Some(b) => Err(ReadError::Syntax {
                offset: self.offset(),
                message: format!("expected {what}, found '{}'", char::from(b).escape_default()),
            }),
            None => Err(ReadError::Truncated { offset: self.offset() }),
        }
    }

    /// After an element of an array: consumes `,` and returns true, or `]` and returns false.
    pub fn next_in_array(&mut self) -> Result<bool, ReadError> {
        self.next_or_close(b']', "']' in an array")
    }

    /// After a member of an object: consumes `,` and returns true, or `}` and returns false.
    pub fn next_in_object(&mut self) -> Result<bool, ReadError> {
        self.next_or_close(b'}', "'}' in an object")
    }

    /// Consumes `,` (true: another element follows) or `close` (false: the container ended).
    fn next_or_close(&mut self, close: u8, what: &str) -> Result<bool, ReadError> {
        match self.peek()? {
            Some(b) if b == b',' || b == close => {
                self.start += 1;
                Ok(b == b',')
            }
            Some(b) => Err(ReadError::Syntax {
                offset: self.offset(),
                message: format!("expected ',' or {what}, found '{}'", char::from(b).escape_default()),
            }),
            None => Err(ReadError::Truncated { offset: self.offset() }),
        }
    }

    /// Parses the next JSON value as `T` borrowing from the buffer and passes it to `f`, which
    /// must turn it into something owned. With `consume == false` the value is only looked at
    /// (a sniff) and will be parsed again.
    pub fn with_value<T, O, F>(&mut self, consume: bool, f: F) -> Result<O, ReadError>
    where
        T: for<'de> BorrowedDeserialize<'de>,
        F: for<'de> FnMut(<T as BorrowedDeserialize<'de>>::Out) -> O,
    {
        match self.with_value_within::<T, O, F>(consume, usize::MAX, f)? {
            Some(out) => Ok(out),
            None => Err(ReadError::Truncated { offset: self.offset() }),
        }
    }

    /// Like [`Self::with_value`] for a value that may be huge: one up to [`MAX_INLINE_VALUE`]
    /// bytes is parsed in place; a larger one is reduced to what `keep` names (each kept value
    /// capped) by a byte-by-byte scan, and that small text is parsed instead. Either way the
    /// value is consumed.
    pub fn with_reduced<T, O, F>(&mut self, keep: &Keep, mut f: F) -> Result<O, ReadError>
    where
        T: for<'de> BorrowedDeserialize<'de>,
        F: for<'de> FnMut(<T as BorrowedDeserialize<'de>>::Out) -> O,
    {
        if let Some(out) = self.with_value_within::<T, O, _>(true, MAX_INLINE_VALUE, &mut f)? {
            return Ok(out);
        }
        let offset = self.offset();
        let text = self.reduce(keep)?;
        parse_reduced::<T, O, F>(&text, f).map_err(|message| ReadError::Syntax { offset, message })
    }

    /// [`Self::with_value`], giving up (`None`, nothing consumed) once more than `limit` bytes
    /// are buffered without the value ending.
    pub fn with_value_within<T, O, F>(&mut self, consume: bool, limit: usize, mut f: F) -> Result<Option<O>, ReadError>
    where
        T: for<'de> BorrowedDeserialize<'de>,
        F: for<'de> FnMut(<T as BorrowedDeserialize<'de>>::Out) -> O,
    {
        if self.peek()?.is_none() {
            return Err(ReadError::Truncated { offset: self.offset() });
        }
        enum Step<O> {
            Done(O, usize),
            /// The value is cut off: read more, or it is truncated.
            NeedMore,
            /// The answer may change with more input: read more, or parse again at the end.
            MaybeMore,
            Fail(String),
        }
        loop {
            let at_eof = self.eof;
            let step = {
                let slice = self.unread();
                let mut stream =
                    serde_json::Deserializer::from_slice(slice).into_iter::<<T as BorrowedDeserialize<'_>>::Out>();
                match stream.next() {
                    Some(Ok(value)) => {
                        let used = stream.byte_offset();
                        // A number that ends exactly where the buffer does may go on in the
                        // next read (`12` of `1234`): read more and parse it again.
                        if used == slice.len() && !at_eof {
                            Step::MaybeMore
                        } else {
                            Step::Done(f(value), used)
                        }
                    }
                    Some(Err(e)) if e.is_eof() => Step::NeedMore,
                    // serde_json calls a number cut at the end of its input (`8.`, `1e`)
                    // invalid rather than incomplete: an error at the very end of the buffer
                    // may vanish with more input.
                    Some(Err(e)) if !at_eof && error_position(slice, &e) + 4 >= slice.len() => Step::MaybeMore,
                    None => Step::NeedMore,
                    Some(Err(e)) => Step::Fail(commgate_core::input::plain_message(&e.to_string())),
                }
            };
            match step {
                Step::Done(out, used) => {
                    if consume {
                        self.start += used;
                    }
                    return Ok(Some(out));
                }
                Step::NeedMore | Step::MaybeMore if self.end - self.start >= limit => return Ok(None),
                Step::NeedMore => {
                    if !self.refill()? {
                        return Err(ReadError::Truncated { offset: self.base + self.end as u64 });
                    }
                }
                // At the end of input `at_eof` is now true, so the next pass decides.
                Step::MaybeMore => {
                    self.refill()?;
                }
                Step::Fail(message) => return Err(ReadError::Syntax { offset: self.offset(), message }),
            }
        }
    }
}

/// Parses a reduced value (small, owned) as `T` and passes it to `f`.
fn parse_reduced<T, O, F>(text: &[u8], mut f: F) -> Result<O, String>
where
    T: for<'de> BorrowedDeserialize<'de>,
    F: for<'de> FnMut(<T as BorrowedDeserialize<'de>>::Out) -> O,
{
    let value: <T as BorrowedDeserialize<'_>>::Out =
        serde_json::from_slice(text).map_err(|e| commgate_core::input::plain_message(&e.to_string()))?;
    Ok(f(value))
}

/// Where in `slice` serde_json detected `e`, from its one-based line and column.
fn error_position(slice: &[u8], e: &serde_json::Error) -> usize {
    let line_start = match e.line() {
        0 | 1 => 0,
        line => {
            slice.iter().enumerate().filter(|&(_, &b)| b == b'\n').nth(line - 2).map_or(slice.len(), |(i, _)| i + 1)
        }
    };
    (line_start + e.column().saturating_sub(1)).min(slice.len())
}

/// Names a type that borrows from the input for any lifetime (`RawEvent<'de>` and friends):
/// `with_value::<EventOf, …>` then hands the closure a `RawEvent<'buf>`.
pub trait BorrowedDeserialize<'de> {
    type Out: Deserialize<'de>;
}

/// An owned value of type `T` (for small things such as `distributedInfo`).
pub struct Owned<T>(std::marker::PhantomData<T>);
impl<'de, T: serde::de::DeserializeOwned> BorrowedDeserialize<'de> for Owned<T> {
    type Out = T;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    struct Str;
    impl<'de> BorrowedDeserialize<'de> for Str {
        type Out = Cow<'de, str>;
    }

    /// A reader that hands out one byte per call, to exercise every refill path.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    fn strings(doc: &[u8]) -> Result<Vec<String>, ReadError> {
        let mut s = JsonStream::new(Trickle(doc));
        s.expect(b'[', "an array")?;
        let mut out = Vec::new();
        if s.peek()? == Some(b']') {
            return Ok(out);
        }
        loop {
            out.push(s.with_value::<Str, _, _>(true, |v| v.into_owned())?);
            if !s.next_in_array()? {
                return Ok(out);
            }
        }
    }

    #[test]
    fn reads_elements_across_refills() {
        let got = strings(br#" [ "a", "b\"c" ,"d"] "#).expect("parses");
        assert_eq!(got, ["a", "b\"c", "d"]);
        assert_eq!(strings(b"[]").expect("empty"), Vec::<String>::new());
    }

    #[test]
    fn numbers_split_across_reads_are_read_whole() {
        let mut s = JsonStream::new(Trickle(b"[12345, -6.5e2]"));
        s.expect(b'[', "an array").expect("array");
        assert_eq!(s.with_value::<Owned<f64>, _, _>(true, |v| v).expect("first"), 12345.0);
        assert!(s.next_in_array().expect("comma"));
        assert_eq!(s.with_value::<Owned<f64>, _, _>(true, |v| v).expect("second"), -650.0);
        assert!(!s.next_in_array().expect("end"));
    }

    #[test]
    fn numbers_cut_by_a_read_after_the_point_or_exponent_are_read_whole() {
        for doc in [&b"[8.5]"[..], b"[\n 8.5]", b"[1e3]", b"[-2]"] {
            for chunk_end in 1..doc.len() {
                let reader = doc[..chunk_end].chain(&doc[chunk_end..]);
                let mut s = JsonStream::new(Trickle2(reader));
                s.expect(b'[', "an array").expect("array");
                let v = s.with_value::<Owned<f64>, _, _>(true, |v| v);
                assert!(v.is_ok(), "{doc:?} split at {chunk_end}: {v:?}");
            }
        }
    }

    /// Hands out whatever the inner reader gives in one call (a `Chain` splits at its seam).
    struct Trickle2<R>(R);
    impl<R: Read> Read for Trickle2<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read(buf)
        }
    }

    #[test]
    fn a_byte_order_mark_is_skipped_even_one_byte_at_a_time() {
        let strings_of = |doc: &[u8]| strings(doc).map_err(|e| e.to_string());
        assert_eq!(strings_of(b"\xEF\xBB\xBF[\"a\"]"), Ok(vec!["a".to_string()]));
        assert!(strings_of(b"\xEF[\"a\"]").is_err());
    }

    #[test]
    fn large_values_grow_the_buffer() {
        let big = "x".repeat(3 * INITIAL_CAPACITY);
        let doc = format!("[\"{big}\", \"y\"]");
        let mut s = JsonStream::new(doc.as_bytes());
        s.expect(b'[', "an array").expect("array");
        let len = s.with_value::<Str, _, _>(true, |v| v.len()).expect("big string");
        assert_eq!(len, big.len());
        assert!(s.next_in_array().expect("comma"));
        assert_eq!(s.with_value::<Str, _, _>(true, |v| v.into_owned()).expect("y"), "y");
    }

    #[test]
    fn truncation_and_syntax_errors_carry_offsets() {
        assert!(matches!(strings(br#"["a", "b"#), Err(ReadError::Truncated { .. })));
        assert!(matches!(strings(b"[1]"), Err(ReadError::Syntax { offset: 1, .. })));
        assert!(matches!(strings(br#"["a" "b"]"#), Err(ReadError::Syntax { offset: 5, .. })));
        match strings(br#"["a", tru]"#) {
            Err(ReadError::Syntax { offset, .. }) => assert_eq!(offset, 6),
            other => panic!("unexpected {other:?}"),
        }
    }
}

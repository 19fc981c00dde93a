//! The rendezvous's wire format, pure functions over bytes: frames, their tags and per-tag
//! length limits, the handshake's payloads (challenge, hello, welcome), and the abort payload
//! that carries rank 0's error to its peers.
//!
//! Every message is a frame, a `u64` little-endian body length and then the body, whose first
//! byte says which call sent it (so ranks that disagree on the sequence of calls get an error,
//! not a silent mix-up). A reader says which tag it wants and how long that frame may be; the
//! header is checked against both before one body byte is read, so a frame of another tag, or a
//! longer one, costs an error and never a buffer. Abort frames are always accepted, up to
//! [`ABORT_MAX`].
//!
//! The handshake (`CGRV`, protocol version 3; words are little-endian `u32`):
//! - challenge (rank 0 → peer, on accept): magic, version, a 32-byte random nonce;
//! - hello (peer → rank 0): magic, version, rank, world size, the peer's 32-byte nonce, and its
//!   proof HMAC-SHA256(secret, "hello" ‖ challenge ‖ peer nonce ‖ rank ‖ world size);
//! - welcome (rank 0 → peer): magic, version, the peer's rank, world size, and rank 0's proof,
//!   the same HMAC under the label "welcome".

use std::io::{self, Read};

use crate::launch::secret::{NONCE_LEN, PROOF_LEN};
use crate::BenchError;

const MAGIC: &[u8; 4] = b"CGRV";
const VERSION: u32 = 3;

/// Payload bytes of each handshake frame.
pub(super) const CHALLENGE_LEN: usize = 8 + NONCE_LEN;
pub(super) const HELLO_LEN: usize = 16 + NONCE_LEN + PROOF_LEN;
pub(super) const WELCOME_LEN: usize = 16 + PROOF_LEN;
/// The most an abort's message may take: rank 0's error, one line.
pub(super) const ABORT_MAX: u64 = 64 * 1024;
/// The most a broadcast may carry: NCCL's unique id is 128 bytes.
pub(super) const BROADCAST_MAX: u64 = 1024 * 1024;
/// The most one rank's gather may carry: its timings, 8 bytes per sample, at most 100 000
/// repeats of 4 schedules (3.2 MB), with room to spare.
pub(super) const GATHER_MAX: u64 = 64 * 1024 * 1024;

/// The first body byte: which call sent the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Tag {
    Hello = 1,
    Welcome = 2,
    Broadcast = 3,
    Gather = 4,
    Barrier = 5,
    Reduce = 6,
    Reduced = 7,
    Abort = 8,
    Challenge = 9,
}

impl Tag {
    fn from_byte(byte: u8) -> Option<Tag> {
        [
            Tag::Hello,
            Tag::Welcome,
            Tag::Broadcast,
            Tag::Gather,
            Tag::Barrier,
            Tag::Reduce,
            Tag::Reduced,
            Tag::Abort,
            Tag::Challenge,
        ]
        .into_iter()
        .find(|t| *t as u8 == byte)
    }

    pub(super) fn call(self) -> &'static str {
        match self {
            Tag::Hello | Tag::Welcome | Tag::Challenge => "rendezvous",
            Tag::Broadcast => "broadcast",
            Tag::Gather => "gather",
            Tag::Barrier => "barrier",
            Tag::Reduce | Tag::Reduced => "all_reduce",
            Tag::Abort => "abort",
        }
    }
}

/// How long the payload of the frame a reader wants may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Len {
    /// The reader knows the size (a barrier, an all-reduce of its own buffer's size).
    Exactly(u64),
    /// A cap for frames whose size the reader cannot know.
    AtMost(u64),
}

/// Bytes of a frame header: the body length and the tag.
pub(super) const HEADER_LEN: usize = 9;

/// Starts `buf` as a frame with this tag; [`finish_frame`] fills in the length.
fn start_frame(buf: &mut Vec<u8>, tag: Tag) {
    buf.clear();
    buf.extend_from_slice(&[0; 8]);
    buf.push(tag as u8);
}

/// Writes the body length into the frame [`start_frame`] began (which is at least a header long).
fn finish_frame(buf: &mut [u8]) {
    if let Some((len, body)) = buf.split_first_chunk_mut::<8>() {
        *len = (body.len() as u64).to_le_bytes();
    }
}

pub(super) fn frame(tag: Tag, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(9 + payload.len());
    start_frame(&mut buf, tag);
    buf.extend_from_slice(payload);
    finish_frame(&mut buf);
    buf
}

/// Fills `buf` with a frame of `data` as little-endian f32, reusing its capacity (the all-reduce
/// allocates only on its first call).
pub(super) fn f32_frame(buf: &mut Vec<u8>, tag: Tag, data: &[f32]) {
    start_frame(buf, tag);
    buf.reserve(data.len() * 4);
    for x in data {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    finish_frame(buf);
}

/// The little-endian f32s of an all-reduce payload (a trailing partial value is ignored).
pub(super) fn f32s(payload: &[u8]) -> impl Iterator<Item = f32> + '_ {
    payload.as_chunks::<4>().0.iter().map(|b| f32::from_le_bytes(*b))
}

/// Why reading a frame failed, before it is given a rank and a call.
pub(super) enum ReadError {
    Io(io::Error),
    /// Not this protocol: the text says what arrived.
    Garbage(String),
    /// A frame of a known tag the reader did not want (its body left unread).
    Unexpected(Tag),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Checks a frame header against what the reader wants, before any body byte is read: the tag
/// must be `want` (or an abort), and the payload length within `len` (or [`ABORT_MAX`]). Returns
/// the tag and the payload length.
pub(super) fn validate_header(header: &[u8; HEADER_LEN], want: Tag, len: Len) -> Result<(Tag, usize), ReadError> {
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[..8]);
    let body = u64::from_le_bytes(len_bytes);
    let tag = Tag::from_byte(header[8])
        .ok_or_else(|| ReadError::Garbage(format!("a frame with unknown type byte {}", header[8])))?;
    if body == 0 {
        return Err(ReadError::Garbage("a frame of length 0".to_string()));
    }
    let got = body - 1;
    let allowed = match (tag, len) {
        (t, len) if t == want => len,
        (Tag::Abort, _) => Len::AtMost(ABORT_MAX),
        (other, _) => return Err(ReadError::Unexpected(other)),
    };
    match allowed {
        Len::Exactly(expected) if got != expected => Err(ReadError::Garbage(format!(
            "{got} bytes for {} where {expected} were expected: do all ranks run the same plan?",
            tag.call()
        ))),
        Len::AtMost(max) if got > max => {
            Err(ReadError::Garbage(format!("{got} bytes for {}, over the {max} this protocol allows", tag.call())))
        }
        // Within a limit of this protocol, so it fits any machine that runs it.
        _ => usize::try_from(got).map(|got| (tag, got)).map_err(|_| {
            ReadError::Garbage(format!("{got} bytes for {}, more than this machine can hold", tag.call()))
        }),
    }
}

/// Reads one frame into `payload` (cleared first) and returns its tag: `want`, or an abort.
/// The header is checked by [`validate_header`] before the payload is read, so no frame makes the
/// reader buffer more than its limit.
pub(super) fn read_frame(stream: &mut impl Read, payload: &mut Vec<u8>, want: Tag, len: Len) -> Result<Tag, ReadError> {
    let mut header = [0u8; HEADER_LEN];
    stream.read_exact(&mut header)?;
    let (tag, len) = validate_header(&header, want, len)?;
    payload.clear();
    let got = stream.take(len as u64).read_to_end(payload)?;
    if got != len {
        return Err(ReadError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "frame cut short")));
    }
    Ok(tag)
}

/// An abort frame's payload: `rank` (u32::MAX for none), then `kind`, a newline, the message.
pub(super) fn encode_abort(error: &BenchError) -> Vec<u8> {
    let (kind, message, rank) = match error {
        BenchError::Failed { kind, message, rank } => (kind.as_str(), message.as_str(), *rank),
        BenchError::Unavailable(message) => ("rendezvous", message.as_str(), None),
    };
    let mut payload = rank.unwrap_or(u32::MAX).to_le_bytes().to_vec();
    payload.extend_from_slice(kind.as_bytes());
    payload.push(b'\n');
    payload.extend_from_slice(message.as_bytes());
    // Within the readers' limit; a cut inside a character decodes lossily, which is fine for a message.
    payload.truncate(usize::try_from(ABORT_MAX).unwrap_or(usize::MAX));
    payload
}

pub(super) fn decode_abort(payload: &[u8]) -> BenchError {
    let Some((rank, text)) = payload.split_first_chunk::<4>() else {
        return BenchError::failed("rendezvous", "rank 0 aborted the run without saying why", Some(0));
    };
    let rank = u32::from_le_bytes(*rank);
    let text = String::from_utf8_lossy(text);
    let (kind, message) = text.split_once('\n').unwrap_or(("rendezvous", &text));
    BenchError::failed(
        kind,
        format!("rank 0 aborted the run: {message}"),
        if rank == u32::MAX { None } else { Some(rank) },
    )
}

/// The start of every handshake payload: magic, version, then the frame's own words.
fn handshake_payload(words: &[u32], tail: &[&[u8]]) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&VERSION.to_le_bytes());
    for word in words {
        payload.extend_from_slice(&word.to_le_bytes());
    }
    for bytes in tail {
        payload.extend_from_slice(bytes);
    }
    payload
}

/// Checks a handshake payload's magic, version and length; returns its fields after the version.
fn handshake_body<'a>(payload: &'a [u8], len: usize, what: &'a str) -> Result<Fields<'a>, String> {
    let head = payload.split_first_chunk::<8>().filter(|(head, _)| head.starts_with(MAGIC));
    let Some((&[.., v0, v1, v2, v3], body)) = head else {
        return Err(format!("something that is not a commgate rendezvous {what}"));
    };
    let version = u32::from_le_bytes([v0, v1, v2, v3]);
    if version != VERSION {
        return Err(format!(
            "rendezvous protocol version {version} (this commgate speaks {VERSION}): run the same commgate on every rank"
        ));
    }
    if payload.len() != len {
        return Err(wrong_length(what, payload.len(), len));
    }
    Ok(Fields { body, what, got: payload.len(), len })
}

fn wrong_length(what: &str, got: usize, len: usize) -> String {
    format!("a {what} of {got} bytes where {len} were expected")
}

/// A handshake payload's fields after its version, read front to back. Its length was checked
/// whole, so every field is there; one missing would be reported as a payload of the wrong length.
struct Fields<'a> {
    body: &'a [u8],
    what: &'a str,
    /// The payload's length, and the length its kind must have.
    got: usize,
    len: usize,
}

impl Fields<'_> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let Some((field, rest)) = self.body.split_first_chunk::<N>() else {
            return Err(wrong_length(self.what, self.got, self.len));
        };
        self.body = rest;
        Ok(*field)
    }

    fn word(&mut self) -> Result<u32, String> {
        self.bytes().map(u32::from_le_bytes)
    }
}

pub(super) fn challenge_payload(nonce: &[u8; NONCE_LEN]) -> Vec<u8> {
    handshake_payload(&[], &[nonce])
}

pub(super) fn parse_challenge(payload: &[u8]) -> Result<[u8; NONCE_LEN], String> {
    handshake_body(payload, CHALLENGE_LEN, "challenge")?.bytes()
}

/// A peer's hello as it arrived; its proof is checked by the caller, who holds the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hello {
    pub rank: u32,
    pub world_size: u32,
    pub nonce: [u8; NONCE_LEN],
    pub proof: [u8; PROOF_LEN],
}

pub(super) fn hello_payload(hello: &Hello) -> Vec<u8> {
    handshake_payload(&[hello.rank, hello.world_size], &[&hello.nonce, &hello.proof])
}

pub(super) fn parse_hello(payload: &[u8]) -> Result<Hello, String> {
    let mut fields = handshake_body(payload, HELLO_LEN, "hello")?;
    Ok(Hello { rank: fields.word()?, world_size: fields.word()?, nonce: fields.bytes()?, proof: fields.bytes()? })
}

/// A welcome: the peer's rank, the world size and rank 0's proof.
pub(super) fn welcome_payload(rank: u32, world_size: u32, proof: &[u8; PROOF_LEN]) -> Vec<u8> {
    handshake_payload(&[rank, world_size], &[proof])
}

pub(super) fn parse_welcome(payload: &[u8]) -> Result<(u32, u32, [u8; PROOF_LEN]), String> {
    let mut fields = handshake_body(payload, WELCOME_LEN, "welcome")?;
    Ok((fields.word()?, fields.word()?, fields.bytes()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one frame from `bytes`: its tag and payload, or the error as text.
    fn read(bytes: &[u8], want: Tag, len: Len) -> Result<(Tag, Vec<u8>), String> {
        let mut payload = vec![9; 3]; // cleared by the read
        match read_frame(&mut &bytes[..], &mut payload, want, len) {
            Ok(tag) => Ok((tag, payload)),
            Err(ReadError::Garbage(what)) => Err(what),
            Err(ReadError::Unexpected(tag)) => Err(format!("unexpected {tag:?}")),
            Err(ReadError::Io(e)) => Err(format!("io: {:?}", e.kind())),
        }
    }

    const ANY: Len = Len::AtMost(1024);

    #[test]
    fn a_frame_is_its_body_length_then_tag_and_payload() {
        let bytes = frame(Tag::Gather, b"abc");
        assert_eq!(bytes, [4, 0, 0, 0, 0, 0, 0, 0, Tag::Gather as u8, b'a', b'b', b'c']);
        assert_eq!(read(&bytes, Tag::Gather, ANY), Ok((Tag::Gather, b"abc".to_vec())));
        assert_eq!(read(&frame(Tag::Barrier, &[]), Tag::Barrier, Len::Exactly(0)), Ok((Tag::Barrier, Vec::new())));
        // An abort is read whatever the reader wanted.
        assert_eq!(read(&frame(Tag::Abort, b"why"), Tag::Barrier, Len::Exactly(0)), Ok((Tag::Abort, b"why".to_vec())));
    }

    #[test]
    fn every_tag_survives_its_byte() {
        for byte in 0..=u8::MAX {
            if let Some(tag) = Tag::from_byte(byte) {
                assert_eq!(tag as u8, byte);
            }
        }
        assert_eq!(Tag::from_byte(Tag::Challenge as u8), Some(Tag::Challenge));
        assert_eq!(Tag::from_byte(0), None);
    }

    #[test]
    fn bad_frames_are_garbage_or_cut_short() {
        let mut unknown = frame(Tag::Gather, b"x");
        unknown[8] = 200;
        assert_eq!(read(&unknown, Tag::Gather, ANY), Err("a frame with unknown type byte 200".to_string()));
        assert_eq!(read(&[0; 9][..], Tag::Gather, ANY).unwrap_err(), "a frame with unknown type byte 0");
        let mut empty = frame(Tag::Gather, b"");
        empty[..8].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(read(&empty, Tag::Gather, ANY), Err("a frame of length 0".to_string()));
        assert_eq!(read(&frame(Tag::Gather, b"x")[..5], Tag::Gather, ANY), Err("io: UnexpectedEof".to_string()));
        assert_eq!(read(&frame(Tag::Gather, b"xy")[..10], Tag::Gather, ANY), Err("io: UnexpectedEof".to_string()));
    }

    /// A reader that fails if anything past the header is read: proves a refusal reads no body.
    struct HeaderOnly(Vec<u8>);

    impl Read for HeaderOnly {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                panic!("the body of a refused frame was read");
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    fn refused_from_header(header: [u8; HEADER_LEN], want: Tag, len: Len) -> String {
        let mut payload = Vec::new();
        match read_frame(&mut HeaderOnly(header.to_vec()), &mut payload, want, len) {
            Err(ReadError::Garbage(what)) => what,
            Err(ReadError::Unexpected(tag)) => format!("unexpected {tag:?}"),
            Err(ReadError::Io(e)) => format!("io: {e}"),
            Ok(tag) => format!("accepted {tag:?}"),
        }
    }

    fn header(len: u64, tag: u8) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&len.to_le_bytes());
        h[8] = tag;
        h
    }

    #[test]
    fn limits_are_checked_on_the_header_whatever_the_tag() {
        let huge = 1u64 << 40;
        assert_eq!(
            refused_from_header(header(huge, Tag::Gather as u8), Tag::Gather, Len::AtMost(GATHER_MAX)),
            format!("{} bytes for gather, over the {GATHER_MAX} this protocol allows", huge - 1)
        );
        // Another tag than the one wanted: refused on its tag, whatever its length.
        assert_eq!(refused_from_header(header(huge, Tag::Reduce as u8), Tag::Hello, ANY), "unexpected Reduce");
        assert_eq!(refused_from_header(header(huge, 77), Tag::Hello, ANY), "a frame with unknown type byte 77");
        // Aborts have their own cap.
        assert_eq!(
            refused_from_header(header(huge, Tag::Abort as u8), Tag::Barrier, Len::Exactly(0)),
            format!("{} bytes for abort, over the {ABORT_MAX} this protocol allows", huge - 1)
        );
        assert_eq!(
            refused_from_header(header(21, Tag::Reduce as u8), Tag::Reduce, Len::Exactly(16)),
            "20 bytes for all_reduce where 16 were expected: do all ranks run the same plan?"
        );
    }

    #[test]
    fn f32_frames_round_trip() {
        let mut buf = vec![1, 2, 3];
        f32_frame(&mut buf, Tag::Reduced, &[1.5, -2.0, 0.0]);
        let (tag, payload) = read(&buf, Tag::Reduced, Len::Exactly(12)).unwrap();
        assert_eq!(tag, Tag::Reduced);
        assert_eq!(f32s(&payload).collect::<Vec<_>>(), [1.5, -2.0, 0.0]);
    }

    #[test]
    fn handshake_payloads_round_trip_and_refuse_strangers() {
        let challenge = challenge_payload(&[7; NONCE_LEN]);
        assert_eq!(challenge.len(), CHALLENGE_LEN);
        assert_eq!(parse_challenge(&challenge), Ok([7; NONCE_LEN]));
        let hello = Hello { rank: 3, world_size: 8, nonce: [1; NONCE_LEN], proof: [2; PROOF_LEN] };
        let bytes = hello_payload(&hello);
        assert_eq!(bytes.len(), HELLO_LEN);
        assert_eq!(parse_hello(&bytes), Ok(hello));
        let welcome = welcome_payload(3, 8, &[5; PROOF_LEN]);
        assert_eq!(welcome.len(), WELCOME_LEN);
        assert_eq!(parse_welcome(&welcome), Ok((3, 8, [5; PROOF_LEN])));
        let not_ours = "something that is not a commgate rendezvous hello".to_string();
        assert_eq!(parse_hello(b"GET / HTTP/1.1\r\n\r\n"), Err(not_ours));
        assert_eq!(parse_hello(&bytes[..15]), Err("a hello of 15 bytes where 80 were expected".to_string()));
        // Version 1's hello: magic, version, rank, world size.
        let mut old = MAGIC.to_vec();
        for word in [1u32, 1, 2] {
            old.extend_from_slice(&word.to_le_bytes());
        }
        old.extend_from_slice(&2u32.to_le_bytes());
        let error = parse_hello(&old).unwrap_err();
        assert!(error.starts_with("rendezvous protocol version 1 (this commgate speaks 3)"), "{error}");
    }

    #[test]
    fn abort_carries_kind_message_and_rank() {
        let died = BenchError::failed("rank_died", "rank 0 lost rank 2", Some(2));
        assert_eq!(
            decode_abort(&encode_abort(&died)),
            BenchError::failed("rank_died", "rank 0 aborted the run: rank 0 lost rank 2", Some(2))
        );
        let unavailable = BenchError::Unavailable("no port".to_string());
        assert_eq!(
            decode_abort(&encode_abort(&unavailable)),
            BenchError::failed("rendezvous", "rank 0 aborted the run: no port", None)
        );
        assert_eq!(
            decode_abort(&[1, 2]),
            BenchError::failed("rendezvous", "rank 0 aborted the run without saying why", Some(0))
        );
        let long = BenchError::failed("rendezvous", "x".repeat(100_000), None);
        assert_eq!(encode_abort(&long).len() as u64, ABORT_MAX);
    }
}

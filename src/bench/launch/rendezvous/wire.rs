//! The rendezvous's wire format, pure functions over bytes: frames, their tags, the hello and
//! welcome payloads, and the abort payload that carries rank 0's error to its peers.
//!
//! Every message is a frame, a `u64` little-endian body length and then the body, whose first
//! byte says which call sent it (so ranks that disagree on the sequence of calls get an error,
//! not a silent mix-up). A hello (peer → rank 0) and a welcome (rank 0 → peer) carry the magic
//! `CGRV`, the protocol version, the sender's rank and the world size, each a little-endian `u32`.

use std::io::{self, Read};

use crate::bench::BenchError;

const MAGIC: &[u8; 4] = b"CGRV";
const VERSION: u32 = 1;

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
}

impl Tag {
    fn from_byte(byte: u8) -> Option<Tag> {
        [Tag::Hello, Tag::Welcome, Tag::Broadcast, Tag::Gather, Tag::Barrier, Tag::Reduce, Tag::Reduced, Tag::Abort]
            .into_iter()
            .find(|t| *t as u8 == byte)
    }

    pub(super) fn call(self) -> &'static str {
        match self {
            Tag::Hello | Tag::Welcome => "rendezvous",
            Tag::Broadcast => "broadcast",
            Tag::Gather => "gather",
            Tag::Barrier => "barrier",
            Tag::Reduce | Tag::Reduced => "all_reduce",
            Tag::Abort => "abort",
        }
    }
}

/// Starts `buf` as a frame with this tag; [`finish_frame`] fills in the length.
fn start_frame(buf: &mut Vec<u8>, tag: Tag) {
    buf.clear();
    buf.extend_from_slice(&[0; 8]);
    buf.push(tag as u8);
}

fn finish_frame(buf: &mut [u8]) {
    let body = (buf.len() - 8) as u64;
    buf[..8].copy_from_slice(&body.to_le_bytes());
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
    payload.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Why reading a frame failed, before it is given a rank and a call.
pub(super) enum ReadError {
    Io(io::Error),
    /// Not this protocol: the text says what arrived.
    Garbage(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads one frame into `payload` (cleared first) and returns its tag. The payload grows as bytes
/// arrive, so a garbage length costs an error, not a giant allocation. `expect`: a frame of this
/// tag must have this payload length, checked before the payload is read.
pub(super) fn read_frame(
    stream: &mut impl Read,
    payload: &mut Vec<u8>,
    expect: Option<(Tag, u64)>,
) -> Result<Tag, ReadError> {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header)?;
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[..8]);
    let body = u64::from_le_bytes(len_bytes);
    let tag = Tag::from_byte(header[8])
        .ok_or_else(|| ReadError::Garbage(format!("a frame with unknown type byte {}", header[8])))?;
    if body == 0 {
        return Err(ReadError::Garbage("a frame of length 0".to_string()));
    }
    let len = body - 1;
    if let Some((expected_tag, expected)) = expect {
        if tag == expected_tag && len != expected {
            return Err(ReadError::Garbage(format!(
                "{len} bytes for {} where {expected} were expected: do all ranks run the same plan?",
                tag.call()
            )));
        }
    }
    payload.clear();
    let got = stream.take(len).read_to_end(payload)?;
    if got as u64 != len {
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
    payload
}

pub(super) fn decode_abort(payload: &[u8]) -> BenchError {
    if payload.len() < 4 {
        return BenchError::failed("rendezvous", "rank 0 aborted the run without saying why", Some(0));
    }
    let rank = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let text = String::from_utf8_lossy(&payload[4..]);
    let (kind, message) = text.split_once('\n').unwrap_or(("rendezvous", &text));
    BenchError::failed(
        kind,
        format!("rank 0 aborted the run: {message}"),
        if rank == u32::MAX { None } else { Some(rank) },
    )
}

pub(super) fn hello_payload(rank: u32, world_size: u32) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    for word in [VERSION, rank, world_size] {
        payload.extend_from_slice(&word.to_le_bytes());
    }
    payload
}

/// `(rank, world_size)` from a hello or welcome payload, or what is wrong with it.
pub(super) fn parse_hello(payload: &[u8]) -> Result<(u32, u32), String> {
    if payload.len() != 16 || &payload[..4] != MAGIC {
        return Err("something that is not a commgate rendezvous hello".to_string());
    }
    let word = |i: usize| u32::from_le_bytes([payload[i], payload[i + 1], payload[i + 2], payload[i + 3]]);
    if word(4) != VERSION {
        return Err(format!("rendezvous protocol version {} (this commgate speaks {VERSION})", word(4)));
    }
    Ok((word(8), word(12)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one frame from `bytes`: its tag and payload, or the garbage text / I/O error kind.
    fn read(bytes: &[u8], expect: Option<(Tag, u64)>) -> Result<(Tag, Vec<u8>), String> {
        let mut payload = vec![9; 3]; // cleared by the read
        match read_frame(&mut &bytes[..], &mut payload, expect) {
            Ok(tag) => Ok((tag, payload)),
            Err(ReadError::Garbage(what)) => Err(what),
            Err(ReadError::Io(e)) => Err(format!("io: {:?}", e.kind())),
        }
    }

    #[test]
    fn a_frame_is_its_body_length_then_tag_and_payload() {
        let bytes = frame(Tag::Gather, b"abc");
        assert_eq!(bytes, [4, 0, 0, 0, 0, 0, 0, 0, Tag::Gather as u8, b'a', b'b', b'c']);
        assert_eq!(read(&bytes, None), Ok((Tag::Gather, b"abc".to_vec())));
        assert_eq!(read(&frame(Tag::Barrier, &[]), Some((Tag::Barrier, 0))), Ok((Tag::Barrier, Vec::new())));
    }

    #[test]
    fn every_tag_survives_its_byte() {
        for byte in 0..=u8::MAX {
            if let Some(tag) = Tag::from_byte(byte) {
                assert_eq!(tag as u8, byte);
            }
        }
        assert_eq!(Tag::from_byte(Tag::Abort as u8), Some(Tag::Abort));
        assert_eq!(Tag::from_byte(0), None);
    }

    #[test]
    fn bad_frames_are_garbage_or_cut_short() {
        let mut unknown = frame(Tag::Gather, b"x");
        unknown[8] = 200;
        assert_eq!(read(&unknown, None), Err("a frame with unknown type byte 200".to_string()));
        assert_eq!(read(&[0; 9][..], None).unwrap_err(), "a frame with unknown type byte 0");
        let mut empty = frame(Tag::Gather, b"");
        empty[..8].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(read(&empty, None), Err("a frame of length 0".to_string()));
        // A huge length is an error once the bytes run out, not a huge allocation.
        let mut huge = frame(Tag::Gather, b"xy");
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(read(&huge, None), Err("io: UnexpectedEof".to_string()));
        assert_eq!(read(&frame(Tag::Gather, b"x")[..5], None), Err("io: UnexpectedEof".to_string()));
    }

    #[test]
    fn an_expected_length_is_checked_for_its_tag_only() {
        let reduce = frame(Tag::Reduce, &[0; 20]);
        let error = read(&reduce, Some((Tag::Reduce, 16))).unwrap_err();
        assert_eq!(error, "20 bytes for all_reduce where 16 were expected: do all ranks run the same plan?");
        assert!(read(&reduce, Some((Tag::Barrier, 0))).is_ok());
    }

    #[test]
    fn f32_frames_round_trip() {
        let mut buf = vec![1, 2, 3];
        f32_frame(&mut buf, Tag::Reduced, &[1.5, -2.0, 0.0]);
        let (tag, payload) = read(&buf, Some((Tag::Reduced, 12))).unwrap();
        assert_eq!(tag, Tag::Reduced);
        assert_eq!(f32s(&payload).collect::<Vec<_>>(), [1.5, -2.0, 0.0]);
    }

    #[test]
    fn hello_round_trips_and_refuses_strangers() {
        let hello = hello_payload(3, 8);
        assert_eq!(hello.len(), 16);
        assert_eq!(parse_hello(&hello), Ok((3, 8)));
        let not_ours = "something that is not a commgate rendezvous hello".to_string();
        assert_eq!(parse_hello(b"GET / HTTP/1.1\r\n\r\n"), Err(not_ours.clone()));
        assert_eq!(parse_hello(&hello[..15]), Err(not_ours));
        let mut future = hello.clone();
        future[4..8].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(parse_hello(&future), Err("rendezvous protocol version 7 (this commgate speaks 1)".to_string()));
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
    }
}

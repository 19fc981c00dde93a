//! The few JSON writers the generator needs, straight into a byte buffer (no formatter, no
//! allocation per number): it writes millions of events.

pub(super) fn push(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
}

pub(super) fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// A time in µs from ns: `123.456` (always three decimals) or `123`.
pub(super) fn push_ts(buf: &mut Vec<u8>, ns: u64, frac: bool) {
    push_u64(buf, ns / 1_000);
    if frac {
        let rem = ns % 1_000;
        buf.push(b'.');
        buf.push(b'0' + (rem / 100) as u8);
        buf.push(b'0' + (rem / 10 % 10) as u8);
        buf.push(b'0' + (rem % 10) as u8);
    }
}

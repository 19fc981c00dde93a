//! Peak resident memory of the measuring child, shared by the benches that attribute in a child
//! process (so its `VmHWM` counts the measured work alone).

/// `VmHWM` of this process in bytes (Linux only; `None` elsewhere).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

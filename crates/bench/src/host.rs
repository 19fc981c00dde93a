//! What the Linux host says about itself through `/proc`: the CPU model, the NVIDIA kernel
//! module's version and the memory available. Every `/proc` read of the benchmark is here, as a
//! pure parser of the file's text plus a thin reader that yields `None` where the file is absent
//! (another OS, a container without it), so the backends never parse `/proc` themselves.

/// The first "model name" of `/proc/cpuinfo`, `None` without the file or the field.
pub fn cpu_model() -> Option<String> {
    std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| parse_cpu_model(&text))
}

/// The NVIDIA kernel module's version from `/proc/driver/nvidia/version`, `None` without it.
pub fn driver_version() -> Option<String> {
    std::fs::read_to_string("/proc/driver/nvidia/version").ok().and_then(|text| parse_driver_version(&text))
}

/// `MemAvailable` from `/proc/meminfo`, in bytes; `None` where there is no such file.
pub fn mem_available() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| parse_mem_available(&text))
}

/// The first "model name" of `/proc/cpuinfo`'s text, `None` when it is missing or empty.
pub fn parse_cpu_model(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_string())
        .filter(|value| !value.is_empty())
}

/// The kernel module's version from `/proc/driver/nvidia/version`'s text, e.g. "580.95.05" from
/// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 …".
pub fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    line.split_whitespace()
        .find(|token| {
            token.contains('.')
                && token.split('.').all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// `MemAvailable` from `/proc/meminfo`'s text (which counts in KiB), in bytes.
pub fn parse_mem_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n";
        assert_eq!(parse_cpu_model(cpuinfo).as_deref(), Some("Intel(R) Xeon(R) Platinum 8480+"));
        let two = "model name\t: First\nmodel name\t: Second\n";
        assert_eq!(parse_cpu_model(two).as_deref(), Some("First"));
        assert_eq!(parse_cpu_model("processor\t: 0\n"), None);
        assert_eq!(parse_cpu_model("model name\t:   \n"), None);
    }

    #[test]
    fn the_driver_version_is_the_dotted_number_of_the_nvrm_line() {
        let proc_text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-I3-C03-3-3)  Tue Sep 23 09:31:17 UTC 2025\nGCC version:  gcc version 13.3.0\n";
        assert_eq!(parse_driver_version(proc_text).as_deref(), Some("580.95.05"));
        assert_eq!(parse_driver_version("GCC version: 13.3.0"), None);
    }

    #[test]
    fn mem_available_is_read_in_kib_and_given_in_bytes() {
        let meminfo = "MemTotal:       65536000 kB\nMemFree:         1000000 kB\nMemAvailable:   32768000 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(32_768_000 * 1024));
        assert_eq!(parse_mem_available("MemTotal:       65536000 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable:   lots kB\n"), None);
    }
}

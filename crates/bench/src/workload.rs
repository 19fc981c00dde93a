//! Workloads: a named set of benchmark parameters, and the id its result files and baseline
//! store file are named by. Owns the id rule (docs/formats.md, "Workloads"): which parameters an
//! id is derived from, how a payload size is written, which names are valid, that no two
//! workloads of one run share an id, and how `--payload-sizes` entries are read.
//!
//! The one workload a plain `commgate bench` or `check` runs (no `--workload`, no
//! `[workloads.<name>]` table, no `--payload-sizes`) keeps the id every store written before
//! workloads existed is named by, [`LEGACY_ID`], so that an existing baseline is never orphaned.

use std::fmt;

use super::{Dtype, Plan};

/// The id of the default workload, and the name of every store file written before workloads
/// could be named (`baselines/<profile>/par-overlap-allreduce-matmul.json`).
pub const LEGACY_ID: &str = "par-overlap-allreduce-matmul";
pub use commgate_core::result::{validate_id, IdError, MAX_ID_CHARS};

/// How a workload's id is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdChoice {
    /// The default workload of a run that names none: [`LEGACY_ID`].
    Legacy,
    /// Derived from what the run measures ([`derive_id`]), once the backend's defaults are known.
    Derived,
    /// Given by `--workload` or a table's `id` (already checked by [`validate_id`]).
    Named(String),
}

impl IdChoice {
    /// The id of a workload that runs `plan`.
    pub fn id_for(&self, plan: &Plan) -> String {
        match self {
            IdChoice::Legacy => LEGACY_ID.to_string(),
            IdChoice::Derived => derive_id(plan),
            IdChoice::Named(id) => id.clone(),
        }
    }
}

/// The readable id of what a plan measures: `allreduce-bf16-8MiB-mm2048`. It names the
/// parameters that change what is measured (collective, element type, bytes per rank, matmul
/// size); how often (warm-up, repeats) and where (world size, backend: the environment
/// profile's business, and checked against the store anyway) are left out.
pub fn derive_id(plan: &Plan) -> String {
    format!(
        "allreduce-{}-{}-mm{}",
        dtype_short(plan.dtype),
        format_bytes(plan.payload_bytes_per_rank()),
        plan.compute_dim
    )
}

fn dtype_short(d: Dtype) -> &'static str {
    match d {
        Dtype::Bfloat16 => "bf16",
        Dtype::Float16 => "fp16",
        Dtype::Float32 => "fp32",
    }
}

const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];

/// Bytes with the largest binary unit that divides them exactly: `8MiB`, `1536KiB`, `100B`.
pub fn format_bytes(bytes: u64) -> String {
    UNITS
        .iter()
        .find(|(_, unit)| bytes > 0 && bytes.is_multiple_of(*unit))
        .map_or_else(|| format!("{bytes}B"), |(name, unit)| format!("{}{name}", bytes / unit))
}

/// Why a size (`64Mi`, `1048576`) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty; give a size in bytes such as 1048576, 64Ki, 1Mi or 2Gi")]
    Empty,
    #[error("not a size; give bytes as a whole number with an optional Ki, Mi or Gi suffix (1048576, 64Ki, 1Mi, 2Gi)")]
    NotASize,
    #[error("0 bytes; the all-reduce needs at least one element")]
    Zero,
    #[error("too large; at most {} GiB per rank", super::sizes::MAX_PAYLOAD_BYTES >> 30)]
    TooLarge,
}

/// Reads a size in bytes: a whole number, optionally followed by a binary suffix `Ki`, `Mi` or
/// `Gi` (also `KiB`, `MiB`, `GiB`, and `B` alone). Exact: no fractions, no decimal units.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SizeError::Empty);
    }
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits);
    let unit: u64 = match suffix {
        "" | "B" => 1,
        "Ki" | "KiB" => 1 << 10,
        "Mi" | "MiB" => 1 << 20,
        "Gi" | "GiB" => 1 << 30,
        _ => return Err(SizeError::NotASize),
    };
    if number.is_empty() {
        return Err(SizeError::NotASize);
    }
    // A digit string too long for u64 is too large, not malformed.
    let n: u64 = number.parse().map_err(|_| SizeError::TooLarge)?;
    let bytes = n.checked_mul(unit).ok_or(SizeError::TooLarge)?;
    if bytes == 0 {
        return Err(SizeError::Zero);
    }
    if bytes > super::sizes::MAX_PAYLOAD_BYTES {
        return Err(SizeError::TooLarge);
    }
    Ok(bytes)
}

/// The elements of `dtype` that make `bytes`, when they make a whole number of them.
pub fn elements_of(bytes: u64, dtype: Dtype) -> Option<u64> {
    bytes.is_multiple_of(dtype.size()).then(|| bytes / dtype.size())
}

/// Two workloads of one run with one id: their results would share a file name and a store file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DuplicateId {
    pub id: String,
    pub first: String,
    pub second: String,
}

impl fmt::Display for DuplicateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} and {} both have the workload id {:?}; their results would share one baseline file: \
             give one of them another `id`, or change what it measures",
            self.first, self.second, self.id
        )
    }
}

/// Refuses two workloads with one id, `(label, id)` each, the label saying where the workload
/// was declared. Ids are compared ignoring ASCII case: on a case-insensitive file system
/// `A.json` and `a.json` are one file.
pub fn validate_unique<'a>(workloads: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<(), DuplicateId> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (label, id) in workloads {
        if let Some((first, first_id)) = seen.iter().find(|(_, other)| other.eq_ignore_ascii_case(id)) {
            return Err(DuplicateId { id: (*first_id).to_string(), first: (*first).to_string(), second: label.into() });
        }
        seen.push((label, id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(dtype: Dtype, payload_elements: u64, compute_dim: u64) -> Plan {
        Plan { world_size: 2, dtype, payload_elements, compute_dim, warmup: 10, repeats: 200, seed: 1 }
    }

    #[test]
    fn ids_are_derived_from_what_is_measured() {
        let cases = [
            (Dtype::Bfloat16, 4 << 20, 2048, "allreduce-bf16-8MiB-mm2048"),
            (Dtype::Bfloat16, 1 << 20, 192, "allreduce-bf16-2MiB-mm192"),
            (Dtype::Float32, 1 << 28, 4096, "allreduce-fp32-1GiB-mm4096"),
            (Dtype::Float16, 768, 64, "allreduce-fp16-1536B-mm64"),
            (Dtype::Float16, 3 << 9, 64, "allreduce-fp16-3KiB-mm64"),
            (Dtype::Float32, 3 << 18, 1, "allreduce-fp32-3MiB-mm1"),
            (Dtype::Bfloat16, 1, 1, "allreduce-bf16-2B-mm1"),
        ];
        for (dtype, elements, dim, want) in cases {
            let id = derive_id(&plan(dtype, elements, dim));
            assert_eq!(id, want);
            assert_eq!(validate_id(&id), Ok(()), "a derived id is a valid id");
        }
        // Warm-up, repeats and world size do not change the id.
        let a = plan(Dtype::Bfloat16, 4 << 20, 2048);
        let b = Plan { world_size: 8, warmup: 0, repeats: 20, seed: 9, ..a.clone() };
        assert_eq!(derive_id(&a), derive_id(&b));
        assert_eq!(IdChoice::Legacy.id_for(&a), LEGACY_ID);
        assert_eq!(IdChoice::Named("mine".into()).id_for(&a), "mine");
    }

    #[test]
    fn bytes_are_written_exactly() {
        let cases = [
            (1, "1B"),
            (1023, "1023B"),
            (1024, "1KiB"),
            (1536, "1536B"),
            (3 << 10, "3KiB"),
            (1 << 20, "1MiB"),
            ((1 << 20) + (1 << 10), "1025KiB"),
            (64 << 30, "64GiB"),
            (0, "0B"),
        ];
        for (bytes, want) in cases {
            assert_eq!(format_bytes(bytes), want, "{bytes}");
        }
    }

    #[test]
    fn sizes_are_read_exactly() {
        let good = [
            ("1048576", 1 << 20),
            ("1Mi", 1 << 20),
            ("64Mi", 64 << 20),
            ("1Gi", 1 << 30),
            ("4KiB", 4 << 10),
            ("2GiB", 2 << 30),
            ("512B", 512),
            (" 8Ki ", 8 << 10),
            ("64Gi", 64 << 30),
        ];
        for (text, want) in good {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        let bad = [
            ("", SizeError::Empty),
            ("Mi", SizeError::NotASize),
            ("1.5Mi", SizeError::NotASize),
            ("1MB", SizeError::NotASize),
            ("1mi", SizeError::NotASize),
            ("-1", SizeError::NotASize),
            ("1 Mi", SizeError::NotASize),
            ("0", SizeError::Zero),
            ("0Gi", SizeError::Zero),
            ("65Gi", SizeError::TooLarge),
            ("18446744073709551615Gi", SizeError::TooLarge),
            ("99999999999999999999999", SizeError::TooLarge),
        ];
        for (text, want) in bad {
            assert_eq!(parse_size(text), Err(want), "{text:?}");
        }
        assert_eq!(elements_of(1 << 20, Dtype::Bfloat16), Some(1 << 19));
        assert_eq!(elements_of(6, Dtype::Float32), None);
    }

    #[test]
    fn ids_are_file_names() {
        for ok in ["a", "allreduce-bf16-8MiB-mm2048", "x.y_z+1", &"a".repeat(64), LEGACY_ID] {
            assert_eq!(validate_id(ok), Ok(()), "{ok}");
        }
        assert_eq!(validate_id(""), Err(IdError::Empty));
        assert_eq!(validate_id(&"a".repeat(65)), Err(IdError::TooLong(65)));
        assert_eq!(validate_id("."), Err(IdError::LeadingDot));
        assert_eq!(validate_id(".."), Err(IdError::LeadingDot));
        assert_eq!(validate_id(".hidden"), Err(IdError::LeadingDot));
        assert_eq!(validate_id("../x"), Err(IdError::LeadingDot));
        assert_eq!(validate_id("a/b"), Err(IdError::BadChar('/')));
        assert_eq!(validate_id("a b"), Err(IdError::BadChar(' ')));
        assert_eq!(validate_id("é"), Err(IdError::BadChar('é')));
        assert_eq!(validate_id("a\nb"), Err(IdError::BadChar('\n')));
    }

    #[test]
    fn two_workloads_with_one_id_are_refused_naming_both() {
        assert_eq!(validate_unique([("[workloads.a]", "x"), ("[workloads.b]", "y")]), Ok(()));
        let e = validate_unique([("[workloads.a]", "x"), ("[workloads.b]", "y"), ("[workloads.c]", "X")]).unwrap_err();
        assert_eq!((e.first.as_str(), e.second.as_str(), e.id.as_str()), ("[workloads.a]", "[workloads.c]", "x"));
        assert!(e.to_string().starts_with("[workloads.a] and [workloads.c] both have the workload id \"x\""), "{e}");
    }
}

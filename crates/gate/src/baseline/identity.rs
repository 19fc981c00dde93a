//! A run's identity: a SHA-256 over what makes a measurement that measurement (when it was made,
//! the profile and workload it speaks for, every sample), so that the same run is never stored
//! twice. A run stored twice would count twice and shrink the baseline's measured spread, so
//! later comparisons would raise false alarms.
//!
//! Left out on purpose: what is derived from the samples (medians, metrics, the run's own
//! decision), what only describes or labels the run (`run_label`, the tool, hardware and software
//! descriptions), and the file's formatting. Relabelling or re-rendering a result does not make
//! it another measurement.

use std::fmt;

use sha2::{Digest, Sha256};

use commgate_core::result::RunResult;

/// The identity of a run: 64 lowercase hex digits. Displayed short (12 digits), like a commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId(String);

impl RunId {
    /// All 64 hex digits.
    pub fn full(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// A run's identity. Pure: the same fields give the same id on every machine and version (the
/// encoding is fixed, versioned by its tag, and independent of the JSON formatting).
pub fn run_id(run: &RunResult) -> RunId {
    let mut h = Encoder(Sha256::new());
    h.bytes(b"commgate run id v1");
    h.str(&run.created_at);
    h.str(&run.environment_profile);
    let w = &run.workload;
    for s in [&w.id, &w.collective, &w.dtype, &w.backend] {
        h.str(s);
    }
    for n in [
        u64::from(w.world_size),
        w.payload_elements,
        w.payload_bytes_per_rank,
        w.compute_dim,
        u64::from(w.warmup),
        u64::from(w.repeats),
    ] {
        h.u64(n);
    }
    // In schedule order, whatever the order of the rows in the file.
    let mut rows: Vec<_> = run.rows.iter().collect();
    rows.sort_by_key(|r| r.schedule);
    h.u64(rows.len() as u64);
    for row in rows {
        h.str(row.schedule.as_str());
        h.str(&row.collective);
        h.u64(row.payload_bytes_per_rank);
        h.floats(&row.samples_ms);
        h.floats(&row.rank_mean_ms);
    }
    // An nccl-tests sweep's points are its measurement (benchmark runs have none: their ids are
    // unchanged).
    if let Some(sweep) = &run.sweep {
        h.str(&sweep.program);
        h.u64(sweep.points.len() as u64);
        for p in &sweep.points {
            for s in [&p.key.collective, &p.key.dtype, &p.key.redop, &p.key.placement] {
                h.str(s);
            }
            h.u64(p.key.size);
            h.u64(p.count);
            h.floats(&[p.time_us, p.alg_bw, p.bus_bw]);
            h.floats(&p.samples_ms);
        }
    }
    RunId(h.0.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// An unambiguous encoding: every variable-length value is preceded by its length, so no two
/// different runs feed the hash the same bytes.
struct Encoder(Sha256);

impl Encoder {
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.update(b);
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn u64(&mut self, n: u64) {
        self.0.update(n.to_le_bytes());
    }

    /// Exact values (their bits), not a decimal rendering.
    fn floats(&mut self, xs: &[f64]) {
        self.u64(xs.len() as u64);
        for x in xs {
            self.u64(x.to_bits());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_testkit::results as fixtures;

    #[test]
    fn the_id_is_stable_and_covers_the_measurement_only() {
        let run = fixtures::run(&[1.0, 2.0, 3.0]);
        let id = run_id(&run);
        assert_eq!(id.full().len(), 64);
        assert!(id.full().bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(id.to_string(), id.full()[..12]);
        // A fixed value, computed independently (Python's hashlib and struct, following the
        // encoding in docs/formats.md): the id must not change between versions, or a retried
        // update would add the same run again.
        assert_eq!(id.full(), "ba726d641d965f7acaf4cb2db0199152c7357e144503be5dce7bc96a19e09d11");

        // Labels, derived figures, descriptions and row order do not make another run…
        let mut same = run.clone();
        same.run_label = "relabelled".into();
        same.decision.reason = "edited".into();
        same.metrics.busbw_gbps = Some(99.0);
        same.hardware.host_cpu = Some("other words".into());
        same.rows.reverse();
        assert_eq!(run_id(&same), id);

        // …but any sample, the time, the profile or the workload does.
        let changes: [fn(&mut RunResult); 8] = [
            |r| r.rows[3].samples_ms[2] = f64::from_bits(3.0f64.to_bits() + 1),
            |r| r.rows[0].rank_mean_ms[0] = 0.5,
            |r| r.created_at = "2026-11-30T00:00:01Z".into(),
            |r| r.environment_profile = "PAR-OTHER".into(),
            |r| r.workload.world_size = 4,
            |r| r.workload.dtype = "float32".into(),
            |r| r.workload.repeats += 1,
            |r| {
                r.rows[3].samples_ms.pop();
            },
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut other = run.clone();
            change(&mut other);
            assert_ne!(run_id(&other), id, "change {i}");
        }
    }

    #[test]
    fn length_prefixes_keep_neighbouring_fields_apart() {
        let mut a = fixtures::run(&[1.0]);
        let mut b = a.clone();
        a.created_at = "ab".into();
        a.environment_profile = "c".into();
        b.created_at = "a".into();
        b.environment_profile = "bc".into();
        assert_ne!(run_id(&a), run_id(&b));
    }
}

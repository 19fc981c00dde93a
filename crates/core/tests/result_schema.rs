//! The result file's schema through its public functions, on result files built by the test kit
//! (an integration test: the kit links this crate's ordinary build).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use commgate_core::result::*;
use commgate_testkit::results as fixtures;

#[test]
fn round_trips_and_validates() {
    let r = fixtures::run(&[1.0, 2.0, 3.0]);
    let text = serde_json::to_string(&r).expect("serialises");
    let back: RunResult = parse_versioned(&text, "result").expect("parses");
    assert_eq!(back, r);
    assert_eq!(validate(&back), Ok(()));
}

#[test]
fn a_stored_fingerprint_cannot_lie_and_v1_files_are_upgraded() {
    let r = fixtures::run(&[1.0, 2.0]);
    let mut v = serde_json::to_value(&r).expect("value");
    v["hardware"]["fingerprint"] = "forged".into();
    let back: RunResult = parse_versioned(&v.to_string(), "result").expect("parses");
    assert_eq!(back.hardware.fingerprint, r.hardware.fingerprint);
    assert_eq!(back.hardware.fingerprint.len(), 16);

    // A version-1 file: software fields inside `hardware`, the old fingerprint.
    let mut v1 = serde_json::to_value(&r).expect("value");
    v1["schema_version"] = 1.into();
    let software = v1.as_object_mut().expect("object").remove("software").expect("software");
    assert_eq!(software["commgate"], "0.1.0");
    v1.as_object_mut().expect("object").remove("provenance");
    v1["hardware"]["nccl"] = "2.21.5".into();
    v1["hardware"]["fingerprint"] = "5fdf6704ed9f0433".into();
    let old: RunResult = parse_versioned(&v1.to_string(), "result").expect("v1 reads");
    assert_eq!(old.schema_version, SCHEMA_VERSION);
    assert_eq!(old.software.nccl.as_deref(), Some("2.21.5"));
    assert_eq!(old.software.commgate, "0.1.0");
    assert_eq!(old.hardware, r.hardware, "the fingerprint is the v2 one, from hardware alone");
}

#[test]
fn undefined_metrics_are_null_and_read_back() {
    let mut r = fixtures::run(&[1.0, 2.0]);
    r.metrics.busbw_gbps = None;
    r.comparison.overlap_efficiency = None;
    let v = serde_json::to_value(&r).expect("value");
    assert!(v["metrics"]["busbw_gbps"].is_null());
    let back: RunResult = parse_versioned(&v.to_string(), "result").expect("nulls read back");
    assert_eq!(back, r);
    // A file written before `overlap_penalty_ms` existed, with every figure a number.
    let mut old = serde_json::to_value(fixtures::run(&[1.0])).expect("value");
    old["comparison"] = serde_json::json!({"saved_ms": 0.5, "overlap_gain_ratio": 0.1, "overlap_efficiency": 0.8});
    let back: RunResult = parse_versioned(&old.to_string(), "result").expect("old files read");
    assert_eq!((back.comparison.saved_ms, back.comparison.overlap_penalty_ms), (Some(0.5), None));
    assert_eq!(back.comparison.penalty(), None);
}

#[test]
fn runs_timed_differently_are_different_workloads() {
    let old = fixtures::run(&[1.0]).workload;
    let gated = Workload { timing: Some("gated".into()), ..old.clone() };
    let ungated = Workload { timing: Some("ungated".into()), ..old.clone() };
    assert_eq!(old.difference(&gated).map(|d| d.0), Some("timing"), "an old CUDA baseline was ungated");
    assert_eq!(gated.difference(&ungated), Some(("timing", "gated".into(), "ungated".into())));
    assert_eq!(gated.difference(&gated.clone()), None);
    let text = serde_json::to_string(&old).expect("json");
    assert!(!text.contains("timing"), "CPU and mock results do not carry it: {text}");
}

/// A dry run measured nothing, and a workload id names a file: neither passes as a result
/// that a gate could judge (or that would fall through to "no baseline yet").
#[test]
fn created_at_must_be_an_rfc3339_time() {
    for good in ["2026-11-30T00:00:00Z", "2026-11-30T00:00:00.123456Z", "2026-11-30T01:02:03+02:00"] {
        assert!(is_rfc3339(good), "{good}");
    }
    for bad in ["", "yesterday", "2026-11-30", "2026-11-30T00:00:00", "2026-11-30T00:00:00.Z", &"9".repeat(200_000)] {
        assert!(!is_rfc3339(bad), "{bad:.40}");
    }
    let mut r = fixtures::run(&[1.0, 2.0]);
    r.created_at = "x".repeat(200_000);
    let e = validate(&r).unwrap_err();
    assert!(e.starts_with("`created_at` (") && e.len() < 200, "{e}");
}

#[test]
fn a_dry_run_and_a_bad_workload_id_are_refused() {
    let mut r = fixtures::run(&[1.0, 2.0]);
    r.evidence_level = EvidenceLevel::DryRun;
    assert!(validate(&r).unwrap_err().contains("is a dry run"));
    for id in ["x".repeat(65), String::new(), "../etc".to_string(), ".hidden".to_string()] {
        let mut r = fixtures::run(&[1.0, 2.0]);
        r.workload.id = id.clone();
        let e = validate(&r).unwrap_err();
        assert!(e.starts_with("`workload.id` is "), "{id:?}: {e}");
    }
}

#[test]
fn errors_name_the_field() {
    let mut v = serde_json::to_value(fixtures::run(&[1.0])).expect("value");
    v["schema_version"] = 3.into();
    assert!(parse_versioned::<RunResult>(&v.to_string(), "result").unwrap_err().contains("`schema_version` is 3"));
    let mut v = serde_json::to_value(fixtures::run(&[1.0])).expect("value");
    v["rows"][3]["samples_ms"][0] = "NaN".into();
    let e = parse_versioned::<RunResult>(&v.to_string(), "result").unwrap_err();
    assert!(e.contains("rows[3].samples_ms[0]"), "{e}");
    let mut r = fixtures::run(&[1.0, 2.0]);
    r.rows[3].samples_ms[1] = -1.0;
    assert!(validate(&r).unwrap_err().contains("rows[3].samples_ms[1]"));
    // Values whose ratios overflow (1e308 / 1) or vanish are no step times.
    for x in [1e308, 2e9, 1e-300] {
        let mut r = fixtures::run(&[1.0, 2.0]);
        r.rows[0].samples_ms[0] = x;
        assert!(validate(&r).unwrap_err().contains("rows[0].samples_ms[0]"), "{x}");
    }
    let mut r = fixtures::run(&[1.0]);
    r.rows.retain(|row| row.schedule != Schedule::Serial);
    assert!(validate(&r).unwrap_err().contains("`serial`"));
    let mut r = fixtures::run(&[1.0]);
    r.rows[3].samples_ms.clear();
    assert!(validate(&r).unwrap_err().contains("empty"));
    assert!(parse_versioned::<RunResult>("", "result").unwrap_err().contains("empty"));
    assert!(parse_versioned::<RunResult>("{}", "result").unwrap_err().contains("schema_version"));
}

#[test]
fn forged_or_dead_rows_are_refused() {
    // A second, faked overlap row in front of the real one.
    let mut r = fixtures::run(&[1.0, 2.0]);
    let mut fake = r.row(Schedule::Overlap).cloned().expect("overlap");
    fake.samples_ms = vec![0.5, 0.6];
    r.rows.insert(0, fake);
    assert!(validate(&r).unwrap_err().contains("repeats the `overlap` row"), "{:?}", validate(&r));
    let mut r = fixtures::run(&[1.0, 2.0]);
    r.rows[0].samples_ms = vec![0.0, 0.0];
    assert!(validate(&r).unwrap_err().contains("step times must lie between"));
    let mut r = fixtures::run(&[1.0, 1.0, 1.0]);
    assert_eq!(validate(&r), Ok(()), "the mock backend's samples may repeat");
    r.workload.backend = "cuda".into();
    assert!(validate(&r).unwrap_err().contains("3 identical step times"));
}

/// The cap on a row's length, in memory: `tests/cli_compare.rs` has the same through a
/// 10M-step file, ignored by default for its time.
#[test]
fn a_row_over_the_sample_cap_is_refused_naming_the_row() {
    let mut r = fixtures::run(&[1.0, 2.0]);
    let i = r.rows.iter().position(|row| row.schedule == Schedule::Overlap).expect("overlap");
    r.rows[i].samples_ms = vec![1.0; MAX_SAMPLES_PER_ROW];
    assert_eq!(validate(&r), Ok(()), "a row at the cap is a measurement");
    r.rows[i].samples_ms.push(1.0);
    let err = validate(&r).unwrap_err();
    assert!(err.contains(&format!("`rows[{i}].samples_ms` (overlap) holds 10000001 step times")), "{err}");
}

//! The public entry points: each renders its content in the format asked for, and the
//! attribution's renderings are snapshotted in every format on the shared fixtures.

use super::attribution::fixtures::{empty, multi_rank, partial, seed};
use super::*;
use commgate_gate::decide::mitigation::Diagnosis;

#[test]
fn render_attribution_dispatches_on_format() {
    let a = seed();
    assert_eq!(render_attribution(&a, Format::Text), attribution::text(&a, Width::Fit));
    assert_eq!(render_attribution(&a, Format::Json), attribution::json(&a));
    assert_eq!(render_attribution(&a, Format::Markdown), attribution::markdown(&a));
}

/// Snapshots `a` in the three formats, as `<name>_text`, `<name>_markdown` and `<name>_json`.
fn assert_snapshots(name: &str, a: Diagnosis) {
    insta::assert_snapshot!(format!("{name}_text"), render_attribution(&a, Format::Text));
    insta::assert_snapshot!(format!("{name}_markdown"), render_attribution(&a, Format::Markdown));
    insta::assert_snapshot!(format!("{name}_json"), render_attribution(&a, Format::Json));
}

#[test]
fn snapshot_seed_events() {
    assert_snapshots("seed", seed());
}

#[test]
fn snapshot_multi_rank_kineto() {
    assert_snapshots("multi_rank", multi_rank());
}

#[test]
fn snapshot_empty_asks_for_more_evidence() {
    assert_snapshots("empty", empty());
}

#[test]
fn snapshot_partial_rank_set_and_ignored_steps() {
    assert_snapshots("partial", partial());
}

#[test]
fn every_rendering_names_the_missing_ranks_and_the_ignored_setting() {
    let a = partial();
    for (format, missing, set_by) in [
        (Format::Text, "ranks 0-1 of 8: 6 missing (2-7)", "steps = 2 (commgate.toml) ignored"),
        (Format::Markdown, "ranks 0-1 of 8: 6 missing \\(2-7\\)", "steps = 2 \\(commgate.toml\\) ignored"),
    ] {
        let out = render_attribution(&a, format);
        assert!(out.contains(missing), "{format:?}: {out}");
        assert!(out.contains(set_by), "{format:?}: {out}");
    }
    let v: serde_json::Value = serde_json::from_str(&attribution::json(&a)).expect("JSON");
    let coverage = &v["source"]["coverage"];
    assert_eq!((coverage["ranks_present"].as_u64(), coverage["world_size"].as_u64()), (Some(2), Some(8)));
    assert_eq!(coverage["missing_ranks"], serde_json::json!([{"first": 2, "last": 7}]));
    assert_eq!(v["source"]["steps_ignored"]["marker_steps"], 4);
    let text = attribution::text(&a, Width::Fit);
    assert!(text.contains("Note: partial rank set: ranks 0-1 of 8: 6 missing (2-7)\n"), "{text}");
    assert!(!attribution::text(&multi_rank(), Width::Fit).contains("Note:"), "a full rank set says nothing");
}

//! The attribution's renderings on hand-picked fixtures: the decisions and notes each format
//! states, cells that say `unknown` or `n/a` instead of zero, hostile names kept inert, and the
//! JSON's round trip.

use super::fixtures::{empty, hostile, multi_rank, seed};
use super::*;

#[test]
fn rank_list_compresses_runs() {
    assert_eq!(rank_list(&[]), "none");
    assert_eq!(rank_list(&[0]), "0");
    assert_eq!(rank_list(&[1, 0]), "0-1");
    assert_eq!(rank_list(&[9, 0, 1, 2, 3, 6, 8, 3]), "0-3, 6, 8-9");
    assert_eq!(rank_list(&[u32::MAX - 1, u32::MAX]), format!("{}-{}", u32::MAX - 1, u32::MAX));
}

#[test]
fn cells_say_unknown_and_not_applicable_instead_of_zero() {
    let a = multi_rank();
    let gather = &a.by_collective["all_gather"];
    assert_eq!(payload(gather), "unknown");
    let send_recv = &a.by_collective["send_recv"];
    assert_eq!(imbalance(send_recv), "n/a");
    assert_eq!(straggler(send_recv), "-");
    let reduce = &a.by_collective["all_reduce"];
    assert_eq!(payload(reduce), "8.0 MiB");
    assert_eq!(imbalance(reduce), "0.27");
    assert_eq!(straggler(reduce), "1");
}

#[test]
fn collectives_sort_by_exposed_time_then_name() {
    let order: Vec<String> = by_exposed_desc(&seed()).iter().map(|h| h.collective.clone()).collect();
    assert_eq!(order, ["all_to_all", "all_reduce", "broadcast"]);

    let mut a = seed();
    for h in a.attribution.by_collective.values_mut() {
        h.exposed_comm_ms = 1.0;
    }
    let order: Vec<String> = by_exposed_desc(&a).iter().map(|h| h.collective.clone()).collect();
    assert_eq!(order, ["all_reduce", "all_to_all", "broadcast"]);
}

#[test]
fn seed_lists_priority_mitigation_and_tune() {
    let out = text(&seed(), crate::Width::Wide);
    assert!(out.starts_with("Source: events, 1 file, ranks none, world size 0, steps 1"), "{out}");
    assert!(out.contains("Priority: all_to_all (20.000 ms exposed per step)"), "{out}");
    assert!(out.contains("Mitigation: reduce_routing_traffic on all_to_all"), "{out}");
    assert!(out.contains("Next measurements: dispatch_payload_bytes, cross_rank_token_ratio"), "{out}");
    assert!(out.contains("Follow-up: tune — all_to_all exposes 20.000 ms"), "{out}");
    assert!(out.contains("64.0 KiB"), "{out}");
    assert!(!out.contains("Per rank"), "{out}");
    assert!(out.chars().all(|c| c.is_ascii() || c == '—'), "{out}");
}

#[test]
fn multi_rank_shows_unknown_payload_imbalance_and_ranks() {
    let out = text(&multi_rank(), crate::Width::Wide);
    let gather = out.lines().find(|l| l.starts_with("all_gather")).expect("an all_gather row");
    assert!(gather.contains("unknown"), "{gather}");
    let send_recv = out.lines().find(|l| l.starts_with("send_recv")).expect("a send_recv row");
    assert!(send_recv.contains("n/a"), "{send_recv}");
    assert!(out.contains("Per rank (ms per step):"), "{out}");
    assert!(out.contains("Mitigation: rebalance_ranks_or_experts on all_reduce"), "{out}");
}

#[test]
fn empty_says_none_and_collect_more_evidence() {
    let out = text(&empty(), crate::Width::Fit);
    assert!(out.contains("No communication kernels found."), "{out}");
    assert!(out.contains("Priority: none"), "{out}");
    assert!(out.contains("Mitigation: collect_trace\n"), "{out}");
    assert!(out.contains("Follow-up: collect_more_evidence — "), "{out}");
}

#[test]
fn hostile_names_are_printed_verbatim_but_without_control_characters() {
    let mut a = hostile();
    let mut h = a.attribution.by_collective.pop_first().expect("one collective").1;
    h.collective = "evil\u{1b}]0;title\u{7}".to_string();
    a.attribution.by_collective.insert(h.collective.clone(), h);
    let out = text(&a, crate::Width::Fit);
    assert!(!out.contains('\u{1b}'), "{out}");
    assert!(out.contains("evil\\u{1b}]0;title\\u{7}"), "{out}");
}

#[test]
fn hostile_collective_and_file_names_render_inert() {
    let out = markdown(&hostile());
    assert!(!out.contains("<script>"), "{out}");
    assert!(!out.contains("**x**"), "{out}");
    assert!(!out.contains("](javascript"), "{out}");
    assert!(out.contains("| &lt;script&gt;\\|\\*\\*x\\*\\* |"), "{out}");
    assert!(out.contains("\\[x\\]\\(javascript:alert\\(1\\)\\).json"), "{out}");
    // The row keeps its 15 cells: the name's pipe is escaped, so it splits nothing.
    let row = out.lines().find(|l| l.starts_with("| &lt;script&gt;")).expect("the hostile row");
    assert_eq!(row.matches(" | ").count(), 14, "{row}");
}

#[test]
fn decision_comes_first_and_reason_is_escaped() {
    let out = markdown(&seed());
    let first = out.lines().next().expect("a heading line");
    assert!(first.starts_with("**commgate attribute: `tune`** — all\\_to\\_all exposes 20.000 ms"), "{first}");
    assert!(out.contains("- **Mitigation:** `reduce_routing_traffic` on all\\_to\\_all"), "{out}");
    assert!(!out.contains("<details>"), "{out}");
}

#[test]
fn ranks_fold_into_details_with_blank_lines_around_the_table() {
    let out = markdown(&multi_rank());
    assert!(out.contains("<details><summary>Per rank</summary>\n\n| rank |"), "{out}");
    assert!(out.contains("|\n\n</details>\n"), "{out}");
    assert!(out.contains("| all\\_gather | 16 |"), "{out}");
}

#[test]
fn file_list_shows_four_names_then_a_count() {
    let files: Vec<String> = (0..6).map(|r| format!("rank_{r}.json")).collect();
    assert_eq!(file_list(&files[..1]), "rank\\_0.json");
    assert_eq!(file_list(&files), "rank\\_0.json, rank\\_1.json, rank\\_2.json, rank\\_3.json, and 2 more");
}

#[test]
fn empty_asks_for_more_evidence() {
    let out = markdown(&empty());
    assert!(out.starts_with("**commgate attribute: `collect_more_evidence`**"), "{out}");
    assert!(out.contains("_No communication kernels found._"), "{out}");
    assert!(out.contains("- **Priority:** none"), "{out}");
}

#[test]
fn round_trips_and_ends_with_a_newline() {
    for a in [seed(), multi_rank(), empty()] {
        let out = json(&a);
        assert!(out.ends_with("}\n"), "{out}");
        let back: Diagnosis = serde_json::from_str(&out).expect("valid JSON");
        assert_eq!(back, a);
    }
}

#[test]
fn unknown_payload_and_unobserved_imbalance_are_null_not_zero() {
    let v: serde_json::Value = serde_json::from_str(&json(&multi_rank())).expect("valid JSON");
    assert_eq!(v["schema_version"], 1);
    let gather = &v["by_collective"]["all_gather"];
    assert!(gather["payload_bytes"].is_null());
    assert_eq!(gather["payload_known"], false);
    let send_recv = &v["by_collective"]["send_recv"];
    assert!(send_recv["rank_imbalance_ratio"].is_null());
    assert_eq!(send_recv["rank_imbalance_observed"], false);
    assert_eq!(v["priority"]["collective"], "all_reduce");
    assert_eq!(v["followup"]["decision"], "tune");
    assert_eq!(v["mitigation"]["strategy"], "rebalance_ranks_or_experts");
}

#[test]
fn non_finite_numbers_become_null() {
    let mut a = seed();
    if let Some(h) = a.attribution.by_collective.get_mut("broadcast") {
        h.overlap_ratio = f64::NAN;
    }
    let v: serde_json::Value = serde_json::from_str(&json(&a)).expect("valid JSON");
    assert!(v["by_collective"]["broadcast"]["overlap_ratio"].is_null());
}

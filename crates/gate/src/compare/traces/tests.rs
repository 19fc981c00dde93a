use super::*;
use commgate_stats::rng::Rng;
use commgate_trace::attribute::StepSeries;
use commgate_trace::attribute::{attribute_events, RankSummary};

/// A trace run of `collectives` (name, exposed, transfer, wait per step in ms), `n` steps of
/// 10 ms, each sample with 1 % noise.
fn run(collectives: &[(&str, f64, f64, f64)], n: usize, seed: u64) -> Attribution {
    let mut a = attribute_events(vec!["t".into()], &[]);
    a.source.world_size = 4;
    let mut rng = Rng::new(seed);
    let mut noisy = |v: f64| -> Vec<f64> { (0..n).map(|_| v * (0.01 * rng.normal()).exp()).collect() };
    for &(name, exposed, transfer, wait) in collectives {
        let mut h = Hotspot::empty(name);
        h.total_comm_ms = transfer + wait;
        h.exposed_comm_ms = exposed;
        h.last_arrival_rank = Some(3);
        h.last_arrival_share = Some(0.9);
        h.steps = Some(StepSeries { exposed_ms: noisy(exposed), transfer_ms: noisy(transfer), wait_ms: noisy(wait) });
        a.by_collective.insert(name.to_string(), h);
    }
    a.ranks = vec![RankSummary {
        rank: 0,
        file: "t".into(),
        steps: n as u64,
        comm_ms: 0.0,
        compute_ms: 0.0,
        overlapped_ms: 0.0,
        exposed_ms: 0.0,
        overlap_pct: 0.0,
        comm_kernels: 0,
        step_ms: noisy(10.0),
    }];
    a
}

fn opts() -> CompareOptions {
    CompareOptions { resamples: 300, ..CompareOptions::default() }
}

fn judged(stored: &[Attribution], current: &Attribution) -> TraceComparison {
    prepare("default", stored, current, &opts()).finish_alone(&opts(), crate::decide::metric_state::RULES)
}

fn history(c: &[(&str, f64, f64, f64)]) -> Vec<Attribution> {
    (0..6).map(|i| run(c, 40, 100 + i)).collect()
}

fn state<'a>(t: &'a TraceComparison, name: &str) -> &'a CollectiveComparison {
    t.collectives.iter().find(|c| c.collective == name).expect("collective")
}

#[test]
fn the_cause_follows_which_of_transfer_and_wait_grew() {
    let base = history(&[("all_to_all", 1.0, 2.0, 0.2)]);
    // (exposed, transfer, wait) now → cause.
    let cases = [
        ((2.5, 2.0, 1.7), CollectiveCause::Wait),
        ((1.5, 2.4, 0.2), CollectiveCause::Transfer),
        ((3.0, 2.4, 1.7), CollectiveCause::Mixed),
        ((2.0, 2.0, 0.2), CollectiveCause::Overlap),
    ];
    for ((exposed, transfer, wait), cause) in cases {
        let t = judged(&base, &run(&[("all_to_all", exposed, transfer, wait)], 40, 7));
        let mut c = state(&t, "all_to_all").clone();
        assert_eq!((c.state, c.cause), (State::Regressed, Some(cause)), "{c:#?}");
        // The comparison keeps the last-arriving rank; the decision names it only when wait is
        // part of the cause.
        assert_eq!(c.last_arrival, Some((3, 0.9)), "{cause:?}");
        crate::decide::late_rank::name(&mut c);
        let late = matches!(cause, CollectiveCause::Wait | CollectiveCause::Mixed);
        assert_eq!(c.late_rank, late.then_some(3), "{cause:?}");
        assert_eq!(c.late_share, late.then_some(0.9), "{cause:?}");
    }
    let same = judged(&base, &run(&[("all_to_all", 1.0, 2.0, 0.2)], 40, 7));
    let c = state(&same, "all_to_all");
    assert_eq!((c.state, c.cause, c.mitigation.as_ref()), (State::Unchanged, None, None), "{c:#?}");
    assert_eq!(same.method, Method::History);
}

#[test]
fn wait_and_exposed_are_shares_of_the_step_and_transfer_a_ratio() {
    let base = history(&[("all_reduce", 0.5, 2.0, 0.1)]);
    let t = judged(&base, &run(&[("all_reduce", 0.5, 2.2, 0.6)], 40, 7));
    let c = state(&t, "all_reduce");
    let ratio = |q: Quantity| c.metrics.iter().find(|m| m.quantity == q).map(|m| m.judged.ratio).expect("metric");
    // Transfer 2.0 → 2.2 ms: +10 %. Wait 0.1 → 0.6 ms of a 10 ms step: +5 % of the step.
    assert!((ratio(Quantity::Transfer) - 1.10).abs() < 0.01, "{c:#?}");
    assert!((ratio(Quantity::Wait) - 1.05).abs() < 0.002, "{c:#?}");
    assert!((t.step_ms.expect("step") - 10.0).abs() < 0.05);
}

#[test]
fn new_and_gone_collectives_are_judged_against_nothing() {
    let base = history(&[("all_reduce", 0.5, 2.0, 0.1)]);
    let t = judged(&base, &run(&[("all_reduce", 0.5, 2.0, 0.1), ("all_gather", 1.0, 1.0, 0.2)], 40, 7));
    let new = state(&t, "all_gather");
    assert_eq!(new.note.as_deref(), Some("new: not in the trace baseline"));
    // 1 ms of new exposed time per 10 ms step: +10 % of the step, regressed; no transfer ratio.
    assert_eq!(new.state, State::Regressed, "{new:#?}");
    assert!(new.metrics.iter().all(|m| m.quantity != Quantity::Transfer));
    let t = judged(&base, &run(&[("all_gather", 0.0, 1.0, 0.0)], 40, 7));
    let gone = state(&t, "all_reduce");
    assert_eq!(gone.note.as_deref(), Some("gone: not in the current traces"));
    assert_ne!(gone.state, State::Regressed);
}

#[test]
fn another_job_size_and_old_summaries_are_not_judged() {
    let base = history(&[("all_reduce", 0.5, 2.0, 0.1)]);
    let mut eight = run(&[("all_reduce", 0.5, 2.0, 0.1)], 40, 7);
    eight.source.world_size = 8;
    let t = judged(&base, &eight);
    assert!(t.collectives.is_empty());
    assert!(t.unusable.as_deref().is_some_and(|u| u.contains("recorded with 4 ranks and the traces have 8")), "{t:#?}");
    // A summary stored before per-step samples existed: every quantity is inconclusive, with why.
    let mut old = run(&[("all_reduce", 0.5, 2.0, 0.1)], 40, 1);
    old.by_collective.values_mut().for_each(|h| h.steps = None);
    old.ranks.clear();
    let t = judged(&[old], &run(&[("all_reduce", 0.5, 2.0, 0.1)], 40, 7));
    let c = state(&t, "all_reduce");
    assert_eq!(c.state, State::Inconclusive);
    assert!(c.metrics.iter().all(|m| m.note.is_some()), "{c:#?}");
    // Undefined values are written as null and read back (a report must load again).
    let json = serde_json::to_string(&t).expect("json");
    assert!(json.contains(r#""ratio":null"#), "{json}");
    let back: TraceComparison = serde_json::from_str(&json).expect("reads back");
    assert_eq!(serde_json::to_string(&back).expect("json"), json);
}

#[test]
fn the_judged_collectives_are_bounded_by_their_time() {
    let names: Vec<String> = (0..MAX_JUDGED_COLLECTIVES + 6).map(|i| format!("c{i:03}")).collect();
    let spec: Vec<(&str, f64, f64, f64)> =
        names.iter().enumerate().map(|(i, n)| (n.as_str(), 0.01, 0.01 * (i + 1) as f64, 0.0)).collect();
    let t = judged(&[run(&spec, 5, 1)], &run(&spec, 5, 2));
    assert_eq!(t.collectives.len(), MAX_JUDGED_COLLECTIVES);
    assert!(t.collectives.iter().all(|c| c.collective.as_str() >= "c006"), "the smallest are left out");
    assert_eq!(t.notes.len(), 1, "{:?}", t.notes);
}

#[test]
fn a_collective_unmatched_now_or_gone_with_time_that_mattered_is_unjudged() {
    let mut b = Hotspot::empty("all_to_all");
    (b.transfer_ms, b.wait_ms, b.exposed_comm_ms_max_rank, b.participants) = (Some(1.0), Some(2.0), 1.5, 4);
    let mut n = b.clone();
    assert_eq!(unjudged("all_to_all", Some(&b), Some(&n), Some(10.0), 0.03), None, "matched on both sides");
    (n.transfer_ms, n.wait_ms, n.unmatched) = (None, None, 30);
    let why = unjudged("all_to_all", Some(&b), Some(&n), Some(10.0), 0.03).expect("unmatched now");
    assert!(why.contains("match none of them (30 unmatched)"), "{why}");
    let why = unjudged("all_to_all", Some(&b), None, Some(10.0), 0.03).expect("gone with 3.5 ms of 10");
    assert!(
        why.contains("(3.500 ms per step exposed or waiting, 35.0 % of the step) but not in these traces"),
        "{why}"
    );
    (b.wait_ms, b.exposed_comm_ms_max_rank) = (Some(0.1), 0.1);
    assert_eq!(unjudged("all_to_all", Some(&b), None, Some(10.0), 0.03), None, "gone, 2 % of the step: below δ");
    assert_eq!(unjudged("all_to_all", None, Some(&n), Some(10.0), 0.03), None, "new is judged, not unjudged");
}

//! What-if predictions held against the truth. The testkit generator writes a job's traces, and
//! can also write the same job (same seed, same draws) with one thing changed: the straggler on
//! time, a collective that costs nothing and that nothing waits for, the all-reduce's transfer
//! at a given bus bandwidth, a collective's buckets released earlier by the compute they wait
//! for. Each prediction replayed from the first job's traces must be within
//! 5 % of the step the changed job's traces show.
//!
//! The jobs: 8 ranks, rank 5 late at every collective, an all-to-all per layer that the forward
//! pass waits for (not overlapped) and a gradient all-reduce per layer overlapped with the
//! backward pass.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;

use commgate_testkit::synth::{write_all_ranks, Perturb, SynthCollective, SynthSpec};
use commgate_trace::attribute::whatif::{Busbw, Scenario, ScenarioKind, WhatIf, WhatIfOptions};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::load::attribute_paths;

/// The tolerance the predictions are held to: 5 % of the true step.
const TOLERANCE: f64 = 0.05;

/// A bus bandwidth well above the synthetic all-reduce's (about 105 GB/s), GB/s.
const FAST_BUSBW: f64 = 300.0;

fn job(seed: u64, imbalance: f64, perturb: Perturb) -> SynthSpec {
    SynthSpec {
        world_size: 8,
        steps: 6,
        layers: 6,
        seed,
        imbalance,
        straggler_rank: 5,
        all_to_all: true,
        fractional_ts: true,
        perturb,
    }
}

/// How much earlier the buckets are released in the `earlier` scenario, µs.
const EARLIER_US: f64 = 150.0;

fn what_if(dir: &Path, name: &str, spec: &SynthSpec, busbw: Option<f64>) -> WhatIf {
    let out = dir.join(name);
    let paths = write_all_ranks(spec, &out, false).expect("traces");
    let busbw = busbw.map(|gbps| Busbw { gbps, set_by: "test".into(), collective: Some("all_reduce".into()) });
    let what_if = WhatIfOptions { busbw, earlier_us: Some(EARLIER_US) };
    let opts = AttributeOptions { what_if, ..AttributeOptions::default() };
    attribute_paths(&paths, &opts).expect("attributes").what_if.expect("a what-if")
}

fn find<'a>(w: &'a WhatIf, kind: ScenarioKind, collective: Option<&str>) -> &'a Scenario {
    w.scenarios
        .iter()
        .find(|s| s.kind == kind && s.collective.as_deref() == collective)
        .unwrap_or_else(|| panic!("no {kind:?} {collective:?} in {:?}", w.scenarios))
}

/// The predicted step against the true one, and the error as a share of the true step.
fn within(label: &str, predicted: &Scenario, truth: &WhatIf, observed: &WhatIf) -> f64 {
    let error = (predicted.step_ms - truth.step_ms).abs() / truth.step_ms;
    eprintln!(
        "{label}: observed {:.3} ms, predicted {:.3} ms, true {:.3} ms, error {:.2} %",
        observed.step_ms,
        predicted.step_ms,
        truth.step_ms,
        100.0 * error
    );
    assert!(
        error <= TOLERANCE,
        "{label}: predicted {:.3} ms, true {:.3} ms ({:.1} % off)",
        predicted.step_ms,
        truth.step_ms,
        100.0 * error
    );
    error
}

#[test]
fn every_prediction_is_within_five_percent_of_the_true_step() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (seed, imbalance) in [(11, 0.25), (12, 0.5)] {
        let observed = what_if(
            tmp.path(),
            &format!("observed-{seed}"),
            &job(seed, imbalance, Perturb::default()),
            Some(FAST_BUSBW),
        );
        assert_eq!(observed.late_rank, Some(5), "the straggler is named");
        let on_time = Perturb { straggler_on_time: true, ..Perturb::default() };
        let truth = what_if(tmp.path(), &format!("on-time-{seed}"), &job(seed, imbalance, on_time), None);
        within("rank 5 on time", find(&observed, ScenarioKind::LateRankOnTime, None), &truth, &observed);
        for (name, kind) in [("all_to_all", SynthCollective::AllToAll), ("all_reduce", SynthCollective::AllReduce)] {
            let hidden = Perturb { hidden: Some(kind), ..Perturb::default() };
            let truth = what_if(tmp.path(), &format!("hidden-{name}-{seed}"), &job(seed, imbalance, hidden), None);
            within(&format!("{name} hidden"), find(&observed, ScenarioKind::Hidden, Some(name)), &truth, &observed);
        }
        let fast = Perturb { all_reduce_busbw_gbps: FAST_BUSBW, ..Perturb::default() };
        let truth = what_if(tmp.path(), &format!("busbw-{seed}"), &job(seed, imbalance, fast), None);
        within(
            "all_reduce at 300 GB/s",
            find(&observed, ScenarioKind::TransferAtBusbw, Some("all_reduce")),
            &truth,
            &observed,
        );
        for (name, kind) in [("all_reduce", SynthCollective::AllReduce), ("all_to_all", SynthCollective::AllToAll)] {
            let sooner = Perturb { released_earlier: Some((kind, (EARLIER_US * 1e3) as u64)), ..Perturb::default() };
            let truth = what_if(tmp.path(), &format!("earlier-{name}-{seed}"), &job(seed, imbalance, sooner), None);
            within(
                &format!("{name} 150 µs earlier"),
                find(&observed, ScenarioKind::Earlier, Some(name)),
                &truth,
                &observed,
            );
        }
    }
}

/// A fix that changes nothing saves nothing: the all-gather is hidden under compute already.
#[test]
fn savings_are_ranked_and_a_hidden_collective_saves_what_it_exposed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = what_if(tmp.path(), "job", &job(21, 0.25, Perturb::default()), None);
    let savings: Vec<f64> = w.scenarios.iter().map(|s| s.saving_ms).collect();
    assert!(savings.windows(2).all(|p| p[0] >= p[1]), "{savings:?}");
    let a2a = find(&w, ScenarioKind::Hidden, Some("all_to_all"));
    assert!(
        a2a.saving_ms > 0.0 && a2a.saving_low_ms <= a2a.saving_ms && a2a.saving_ms <= a2a.saving_high_ms,
        "{a2a:?}"
    );
    assert!((a2a.step_ms + a2a.saving_ms - w.step_ms).abs() < 0.05 * w.step_ms, "{a2a:?} vs {}", w.step_ms);
}

//! The nccl-tests generator's output through the readers, the comparison and the sweep table:
//! tests that need `commgate-testkit`, which the library crates cannot take as a dev-dependency of
//! their own unit tests.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

mod result_nccl_tests {
    use commgate_core::result::nccl_tests::{parse, parse_text, SizeResult, Sweep};
    use commgate_testkit::nccl_tests::{json, text, NcclTestsSpec};

    /// The generator's JSON and text of one run read to the same summary figures, for any seed,
    /// number of processes and slower size.
    #[test]
    fn generated_json_and_text_of_one_run_read_alike() {
        for seed in 1..6 {
            let spec = NcclTestsSpec {
                processes: 1 + seed as usize % 4,
                slower: Some((4096, 1.1)),
                ..NcclTestsSpec::sweep(seed)
            };
            let (from_json, from_text) = (parse(&json(&spec)).expect("json"), parse_text(&text(&spec)).expect("text"));
            let strip = |s: &Sweep| -> Vec<SizeResult> {
                s.results
                    .iter()
                    .map(|r| SizeResult { times_us: Vec::new(), per_process_us: Vec::new(), ..r.clone() })
                    .collect()
            };
            assert_eq!(strip(&from_json), strip(&from_text), "seed {seed}");
            assert_eq!(from_json.results.len(), 16);
            assert!(from_json
                .results
                .iter()
                .all(|r| r.times_us.len() == 20 && r.per_process_us.len() == spec.processes));
            assert_eq!(from_json.devices.len(), spec.processes);
            assert_eq!(from_text.devices, from_json.devices);
        }
    }
}

mod compare_sweep {
    use commgate_core::result::nccl_tests::parse;
    use commgate_core::result::sweep::to_result;
    use commgate_core::result::RunResult;
    use commgate_gate::baseline::Baseline;
    use commgate_gate::compare::sweep::episodic;
    use commgate_gate::compare::{CompareOptions, MetricComparison, State};
    use commgate_gate::decide::comparison::judge;
    use commgate_gate::decide::Decision;
    use commgate_testkit::nccl_tests::{json, NcclTestsSpec};
    use std::path::PathBuf;

    #[expect(clippy::expect_used, reason = "a test's helper fails the test by panicking")]
    fn run(seed: u64, slower: Option<(u64, f64)>) -> RunResult {
        let spec = NcclTestsSpec { iterations: 50, slower, ..NcclTestsSpec::sweep(seed) };
        let mut r = to_result(&parse(&json(&spec)).expect("reads"), "2026-12-01T00:00:00Z");
        r.environment_profile = "H200".into();
        r
    }

    fn store() -> Baseline {
        Baseline { path: PathBuf::from("b.json"), runs: (1..=5).map(|s| run(s, None)).collect() }
    }

    #[test]
    fn one_size_ten_percent_slower_blocks_naming_it_and_an_unchanged_sweep_is_accepted() {
        let opts = CompareOptions::default();
        let c = judge(&store(), &run(9, Some((65_536, 1.1))), &opts);
        assert!(c.regression, "{:?}", c.reasons);
        assert_eq!(c.verdict, Decision::Tune);
        assert!(
            c.headline.starts_with("all_reduce 64.0 KiB out-of-place 9.") && c.headline.ends_with("— blocking"),
            "{}",
            c.headline
        );
        let regressed: Vec<String> =
            c.metrics.iter().filter(|m| m.judged.state == State::Regressed).map(MetricComparison::label).collect();
        assert_eq!(regressed, ["64.0 KiB out-of-place", "64.0 KiB in-place"]);
        assert_eq!(c.metrics.len(), 16, "8 sizes × 2 placements, one family");
        let busbw = c.metrics[0].throughput.as_ref().expect("busbw");
        assert!(busbw.baseline > 0.0 && c.metrics[0].point.as_ref().and_then(|p| p.ceiling_gbps).is_some());

        let same = judge(&store(), &run(9, None), &opts);
        assert_eq!(same.verdict, Decision::Accept, "{:?}", same.reasons);
        assert_eq!(same.headline, "16 of 16 points of all_reduce_perf within ±3 %");
    }

    /// `run` with a slow episode (×1.2) over the last 20 iterations of point 8 and the first 10
    /// of point 9: it runs over from one size into the next.
    fn with_episode(mut r: RunResult) -> RunResult {
        if let Some(s) = r.sweep.as_mut() {
            s.points[8].samples_ms.iter_mut().skip(30).for_each(|x| *x *= 1.2);
            s.points[9].samples_ms.iter_mut().take(10).for_each(|x| *x *= 1.2);
        }
        r
    }

    #[test]
    fn a_baseline_whose_sweeps_show_episodes_lets_no_short_sweep_block_alone() {
        let opts = CompareOptions::default();
        let mut b = store();
        b.runs[2] = with_episode(b.runs[2].clone());
        let c = judge(&b, &run(9, Some((65_536, 1.1))), &opts);
        assert!(!c.regression, "{:?}", c.reasons);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert!(
            c.reasons
                .iter()
                .any(|r| r.contains("the baseline sweeps' iterations come in episodes (baseline run 3 of 5")),
            "{:?}",
            c.reasons
        );
        assert!(c.headline.starts_with("cannot confirm yet: all_reduce 64.0 KiB out-of-place"), "{}", c.headline);
        // A clean baseline, and the current sweep sat in an episode over most of one size: the
        // size looks 30 % slower, and it does not block.
        let mut current = run(9, None);
        if let Some(s) = current.sweep.as_mut() {
            s.points[8].samples_ms.iter_mut().skip(15).for_each(|x| *x *= 1.3);
            s.points[9].samples_ms.iter_mut().take(10).for_each(|x| *x *= 1.3);
        }
        let c = judge(&store(), &current, &opts);
        assert!(!c.regression, "{:?}", c.reasons);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert_eq!(episodic(&[&run(9, None)]), None, "a quiet sweep shows no episode");
        // Two more sweeps of the same slowdown are run-level evidence: they block.
        let three: Vec<RunResult> = (9..12).map(|s| run(s, Some((65_536, 1.1)))).collect();
        assert!(commgate_gate::decide::comparison::judge_runs(&b, &three, &opts).regression);
    }

    /// The 64 KiB points of a sweep whose summary says 10 % slower, their iterations those of
    /// an unchanged sweep (`current`'s per-iteration times swapped in).
    fn contradicted(mut current: RunResult, iterations_of: &RunResult) -> RunResult {
        let unslowed = iterations_of.sweep.as_ref().expect("sweep");
        for p in current.sweep.as_mut().expect("sweep").points.iter_mut().filter(|p| p.key.size == 65_536) {
            let same = unslowed.points.iter().find(|q| q.key == p.key).expect("the same point");
            p.samples_ms = same.samples_ms.clone();
        }
        current
    }

    /// A point whose summary time contradicts its per-iteration times is never accepted: the
    /// sweep is collect_more_evidence with the point and both figures in its headline, its points
    /// still listed; a slowdown elsewhere the iterations confirm still blocks.
    #[test]
    fn a_summary_that_contradicts_the_iterations_is_never_accepted() {
        let opts = CompareOptions::default();
        let current = contradicted(run(9, Some((65_536, 1.1))), &run(9, None));
        let c = judge(&store(), &current, &opts);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence, "{:?}", c.reasons);
        assert!(
            c.headline.starts_with("cannot judge: 64.0 KiB out-of-place: the summary time says +9.")
                && c.headline.contains(" but the per-iteration times say ")
                && c.headline.contains("the file's figures disagree"),
            "{}",
            c.headline
        );
        assert_eq!(c.metrics.len(), 16);
        let open: Vec<String> =
            c.metrics.iter().filter(|m| m.judged.state == State::Inconclusive).map(MetricComparison::label).collect();
        assert_eq!(open, ["64.0 KiB out-of-place", "64.0 KiB in-place"]);
        // Another size slower in its iterations and its summary alike: that blocks, and the
        // contradiction is one more reason.
        let mut both = run(9, Some((65_536, 1.1)));
        let slower_1m = run(9, Some((1_048_576, 1.1)));
        if let (Some(s), Some(t)) = (both.sweep.as_mut(), slower_1m.sweep.as_ref()) {
            for (p, q) in s.points.iter_mut().zip(&t.points).filter(|(p, _)| p.key.size == 1_048_576) {
                *p = q.clone();
            }
        }
        let c = judge(&store(), &contradicted(both, &run(9, None)), &opts);
        assert_eq!(c.verdict, Decision::Tune, "{:?}", c.reasons);
        assert!(c.headline.starts_with("all_reduce 1.0 MiB "), "{}", c.headline);
        assert!(
            c.reasons.iter().any(|r| r.starts_with("64.0 KiB out-of-place: the summary time says")),
            "{:?}",
            c.reasons
        );
        // The summary and the iterations agreeing, as a run writes them: accepted.
        assert_eq!(judge(&store(), &run(9, None), &opts).verdict, Decision::Accept);
    }
}

mod report_sweep {
    use commgate_core::result::nccl_tests::parse;
    use commgate_core::result::sweep::to_result;
    use commgate_core::result::RunResult;
    use commgate_gate::baseline::Baseline;
    use commgate_gate::compare::CompareOptions;
    use commgate_report::sweep::{markdown_table, rows, MARKDOWN_ROWS};
    use commgate_report::table::Context;
    use commgate_testkit::nccl_tests::{json, NcclTestsSpec};

    #[expect(clippy::expect_used, reason = "a test's helper fails the test by panicking")]
    fn run(seed: u64) -> RunResult {
        // 40 sizes × 2 placements: 80 points, more than a comment lists.
        let sizes = (0..40).map(|i| 1024 + 512 * i).collect();
        let spec = NcclTestsSpec { iterations: 30, sizes, ..NcclTestsSpec::sweep(seed) };
        let mut r = to_result(&parse(&json(&spec)).expect("reads"), "2026-12-01T00:00:00Z");
        r.environment_profile = "H200".into();
        r
    }

    #[test]
    fn a_long_sweep_lists_at_most_64_points_in_markdown_and_says_how_many_it_left_out() {
        let b = Baseline { path: "b.json".into(), runs: (1..=3).map(run).collect() };
        let c = commgate_gate::decide::comparison::judge(&b, &run(9), &CompareOptions::default());
        assert_eq!(c.metrics.len(), 80);
        let md = markdown_table(&c);
        assert_eq!(md.lines().filter(|l| l.starts_with("| ")).count(), 1 + MARKDOWN_ROWS, "{md}");
        assert!(md.contains("16 more points are not listed ("), "{md}");
        assert_eq!(rows(&c, Context::Text).len(), 80, "the text lists every point");
    }
}

use super::*;

fn point(metric: &str, change: f64, lo: f64, hi: f64) -> ChartPoint {
    ChartPoint { metric: metric.to_string(), change_pct: change, lo_pct: lo, hi_pct: hi }
}

fn series(workload: &str, shift: f64) -> ChartSeries {
    ChartSeries {
        workload: workload.to_string(),
        points: vec![
            point("overlap median", 1.0 + shift, 0.2 + shift, 1.8 + shift),
            point("overlap P95", -0.5 + shift, -1.9 + shift, 0.9 + shift),
            point("serial median", 0.3 + shift, -0.4 + shift, 1.0 + shift),
            point("exposed comm", 2.0 + shift, 1.1 + shift, 2.9 + shift),
        ],
    }
}

/// The lines of a chart's mermaid block: (name, values).
fn lines(chart: &str) -> Vec<(String, Vec<f64>)> {
    chart
        .lines()
        .filter_map(|l| l.trim().strip_prefix("line "))
        .map(|l| {
            let (name, values) = l.rsplit_once(" [").expect("a line has values");
            let values = values.trim_end_matches(']').split(", ").map(|v| v.parse().expect("a number")).collect();
            (name.to_string(), values)
        })
        .collect()
}

/// The y-axis range of a chart.
fn y_range(chart: &str) -> (f64, f64) {
    let axis = chart.lines().find(|l| l.trim().starts_with("y-axis")).expect("a y-axis");
    let (lo, hi) = axis.rsplit_once('"').expect("a title").1.split_once("-->").expect("a range");
    (lo.trim().parse().expect("lo"), hi.trim().parse().expect("hi"))
}

#[test]
fn one_workload_draws_change_interval_and_the_delta_band() {
    let chart = change_chart(&[series("w", 0.0)], 3.0).expect("a chart");
    let l = lines(&chart);
    assert_eq!(
        l.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["\"+delta\"", "\"-delta\"", "\"CI high\"", "\"CI low\"", "\"w\""]
    );
    assert_eq!(l[0].1, vec![3.0; 4], "+δ is flat");
    assert_eq!(l[1].1, vec![-3.0; 4], "−δ is flat");
    assert_eq!(l[2].1, vec![1.8, 0.9, 1.0, 2.9]);
    assert_eq!(l[3].1, vec![0.2, -1.9, -0.4, 1.1]);
    assert_eq!(l[4].1, vec![1.0, -0.5, 0.3, 2.0]);
    // Every value is small: the floor of 2δ (6, rounded up to 10) decides the axis, symmetric.
    assert_eq!(y_range(&chart), (-10.0, 10.0));
    assert!(chart.contains("\"height\": 250"), "{chart}");
}

#[test]
fn the_axis_holds_every_interval_each_side_scaled_to_its_values() {
    let s =
        ChartSeries { workload: "w".into(), points: vec![point("a", 10.0, 4.0, 17.3), point("b", -2.0, -8.0, 1.0)] };
    let (lo, hi) = y_range(&change_chart(&[s], 3.0).expect("a chart"));
    assert_eq!((lo, hi), (-10.0, 20.0));
    // Changes in the hundreds with intervals of thousands: the intervals are cut, not the axis
    // stretched to ±5000 %.
    let wild = ChartSeries {
        workload: "w".into(),
        points: vec![point("a", 180.0, -50.0, 4800.0), point("b", 60.0, -20.0, 250.0), point("c", -7.0, -9.0, -5.0)],
    };
    let chart = change_chart(&[wild], 3.0).expect("a chart");
    assert_eq!(y_range(&chart), (-100.0, 1000.0), "{chart}");
    assert_eq!(lines(&chart)[2].1, vec![540.0, 250.0, -5.0], "the high ends, cut at 3 × 180");
    assert!(chart.contains("intervals cut at ±540.00 % to keep the changes readable"), "{chart}");
    assert_eq!(axis_top(0.0, 0.0), 1.0, "a zero δ and no change still give an axis");
    assert_eq!(axis_top(4.6, 1.0), 10.0, "4.6 with its 10 % margin is over 5");
}

#[test]
fn nice_ceiling_rounds_up_to_one_two_two_and_a_half_or_five() {
    let cases = [(0.7, 1.0), (1.0, 1.0), (1.2, 2.0), (2.2, 2.5), (3.0, 5.0), (6.0, 10.0), (23.0, 25.0), (251.0, 500.0)];
    for (x, want) in cases {
        assert_eq!(nice_ceiling(x), want, "{x}");
    }
}

#[test]
fn non_finite_points_are_dropped_and_nothing_finite_is_none() {
    let mut s = series("w", 0.0);
    s.points[1].change_pct = f64::NAN;
    s.points[2].hi_pct = f64::INFINITY;
    let chart = change_chart(&[s], 3.0).expect("a chart");
    assert!(chart.contains("x-axis [\"overlap med\", \"exposed\"]"), "{chart}");
    assert!(!chart.contains("NaN") && !chart.contains("inf"), "{chart}");
    let nothing = ChartSeries { workload: "w".into(), points: vec![point("a", f64::NAN, 0.0, 1.0)] };
    assert_eq!(change_chart(&[nothing], 3.0), None);
    assert_eq!(change_chart(&[], 3.0), None);
    assert!(
        change_chart(&[series("w", 0.0)], f64::NAN).is_some(),
        "a δ that is not a number draws no band, not nothing"
    );
}

#[test]
fn several_workloads_get_a_line_each_and_the_band_no_intervals() {
    let all = [series("a", 0.0), series("b", 2.0), series("c", -4.0)];
    let chart = change_chart(&all, 3.0).expect("a chart");
    let l = lines(&chart);
    assert_eq!(l.len(), 5, "±δ and one line per workload: {chart}");
    assert_eq!(l[3].1, vec![3.0, 1.5, 2.3, 4.0]);
    assert!(chart.contains("blue: a · orange: b · green: c · red: ±δ = 3.00 %"), "{chart}");
    // Only the changes set the axis: c's −4.5 with its margin is under the 2δ floor.
    assert_eq!(y_range(&chart), (-10.0, 10.0));
}

#[test]
fn a_metric_missing_from_one_workload_is_left_out_and_named() {
    let mut b = series("b", 0.0);
    b.points.remove(0);
    let chart = change_chart(&[series("a", 0.0), b], 3.0).expect("a chart");
    assert!(chart.contains("x-axis [\"overlap P95\", \"serial med\", \"exposed\"]"), "{chart}");
    assert!(chart.contains("left out (not a number for every workload drawn): overlap median"), "{chart}");
}

#[test]
fn more_workloads_than_colours_draw_the_ones_that_moved_most() {
    let all: Vec<ChartSeries> = (0..10).map(|i| series(&format!("w{i}"), i as f64)).collect();
    let chart = change_chart(&all, 3.0).expect("a chart");
    assert_eq!(lines(&chart).len(), 2 + MAX_WORKLOADS);
    assert!(chart.contains("not drawn: w0, w1"), "the two that moved least: {chart}");
    assert!(chart.contains("blue: w2 ·"), "the drawn keep their order: {chart}");
}

#[test]
fn hostile_workload_and_metric_names_stay_inside_their_strings() {
    for hostile in [
        "a\"b",
        "a\nb",
        "```\n",
        "%%{init: {\"theme\": \"dark\"}}%%",
        "a --> b",
        "]\n    line [1",
        "<img src=x onerror=alert(1)>",
        "@user #1",
    ] {
        let mut one = series(hostile, 0.0);
        one.points[0].metric = hostile.to_string();
        for chart in
            [change_chart(std::slice::from_ref(&one), 3.0), change_chart(&[one.clone(), series("b", 1.0)], 3.0)]
        {
            let chart = chart.expect("a chart");
            let (block, key) = chart.split_once("```\n\n").expect("a block then a key");
            assert_eq!(block.matches("```").count(), 1, "one fence opens, one closes: {chart}");
            assert_eq!(block.matches("%%{").count(), 1, "only our init directive: {chart}");
            let body: Vec<&str> = block.lines().skip(3).collect();
            assert!(body.iter().all(|l| l.starts_with("    ")), "no line of the chart was broken: {chart}");
            assert_eq!(body.iter().filter(|l| l.contains("-->")).count(), 1, "only the y-axis has an arrow: {chart}");
            for l in &body {
                assert_eq!(l.matches('"').count() % 2, 0, "quotes pair up: {l}");
            }
            assert_eq!(key.lines().count(), 1, "the key is one line: {key}");
            assert!(!key.contains('<') && !key.contains("```") && !key.contains(" @"), "{key}");
        }
    }
}

#[test]
fn series_from_a_comparison_reads_ratios_as_percent() {
    use commgate_gate::compare::CompareOptions;
    use commgate_gate::decide::comparison::judge;
    use commgate_testkit::results as fixtures;
    let samples = |level: f64| (0..60).map(|j| level * (1.0 + 0.002 * (j % 7) as f64)).collect::<Vec<f64>>();
    let runs = (0..5).map(|i| fixtures::run(&samples(1.0 + 0.001 * i as f64))).collect();
    let baseline = commgate_gate::baseline::Baseline { path: "b.json".into(), runs };
    let c = judge(&baseline, &fixtures::run(&samples(1.1)), &CompareOptions::default());
    let s = series_from("w", &c);
    assert_eq!(s.points.len(), c.metrics.len());
    let m = &c.metrics[0];
    assert_eq!(s.points[0].metric, m.label());
    assert!((s.points[0].change_pct - (m.judged.ratio - 1.0) * 100.0).abs() < 1e-12);
    assert!((s.points[0].lo_pct - (m.judged.ci[0] - 1.0) * 100.0).abs() < 1e-12);
}

#[test]
fn the_trend_chart_ends_with_the_current_run_and_spans_its_values() {
    let points: Vec<(String, f64)> =
        [("03-01", 1.0), ("03-02", f64::NAN), ("03-03", 1.2)].iter().map(|(l, v)| (l.to_string(), *v)).collect();
    let chart = trend_chart("Overlap median (ms)", &points, Some(1.1)).expect("a chart");
    assert!(chart.contains("x-axis [\"03-01\", \"03-03\", \"current\"]"), "{chart}");
    assert!(chart.contains("line [1.000, 1.200, 1.100]"), "{chart}");
    assert!(chart.contains("y-axis \"ms\" 0.980 --> 1.220"), "{chart}");
    assert!(chart.contains("\"height\": 200"), "{chart}");
    assert_eq!(trend_chart("t", &[], None), None);
    assert_eq!(trend_chart("t", &[("a".into(), f64::INFINITY)], Some(f64::NAN)), None);
    let flat = trend_chart("t", &[("a".into(), 2.0)], None).expect("one point");
    assert!(flat.contains("1.900 --> 2.100"), "{flat}");
    let many: Vec<(String, f64)> = (0..100).map(|i| (format!("d{i}"), i as f64)).collect();
    let chart = trend_chart("t", &many, Some(7.0)).expect("a chart");
    assert!(chart.contains("x-axis [\"d41\","), "the newest points: {chart}");
    assert_eq!(
        chart.matches(", ").count(),
        2 * (MAX_TREND_POINTS - 1) + 3,
        "two lists and the init directive: {chart}"
    );
}

#[test]
fn trend_labels_and_title_are_escaped() {
    let hostile = "a\"]\n```\n%%{init";
    let chart = trend_chart(hostile, &[(hostile.to_string(), 1.0)], None).expect("a chart");
    assert_eq!(chart.matches("```").count(), 2, "{chart}");
    assert_eq!(chart.matches("%%{").count(), 1, "{chart}");
    assert_eq!(chart.lines().count(), 8, "{chart}");
}

#[test]
fn snapshot_one_workload() {
    insta::assert_snapshot!(change_chart(&[series("allreduce-64MiB", 0.0)], 3.0).expect("a chart"));
}

#[test]
fn snapshot_three_workloads() {
    let all = [series("allreduce-64MiB", 0.0), series("allgather-8MiB", 4.5), series("reduce_scatter", -1.0)];
    insta::assert_snapshot!(change_chart(&all, 3.0).expect("a chart"));
}

#[test]
fn snapshot_trend() {
    let points: Vec<(String, f64)> = (1..=6).map(|d| (format!("03-0{d}"), 1.0 + 0.01 * d as f64)).collect();
    insta::assert_snapshot!(trend_chart("Overlap median (ms), oldest to newest", &points, Some(1.09)).expect("a chart"));
}

/// Writes a Markdown comment with a 10-workload change chart and a trend chart to
/// `target/render-check/charts.md`, for `scripts/render-check.sh target/render-check/charts.md`.
#[test]
#[ignore = "writes a file for the browser check"]
fn write_render_check_sample() {
    let all: Vec<ChartSeries> = (0..10).map(|i| series(&format!("workload-{i}"), i as f64 - 4.0)).collect();
    let trend: Vec<(String, f64)> = (1..=20).map(|d| (format!("03-{d:02}"), 1.0 + 0.003 * (d % 7) as f64)).collect();
    let md = format!(
        "<!-- commgate-report -->\n### 🟢 commgate: `accept`\n\n{}\n{}",
        change_chart(&all, 3.0).expect("a chart"),
        trend_chart("Overlap median (ms), oldest to newest", &trend, Some(1.012)).expect("a chart")
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/render-check");
    std::fs::create_dir_all(&dir).expect("create target/render-check");
    std::fs::write(dir.join("charts.md"), md).expect("write charts.md");
}

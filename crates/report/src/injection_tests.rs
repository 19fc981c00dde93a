//! Property tests of the PR comment against hostile strings: a whole check report, with one
//! string put in every untrusted field at once (collective name, reasons, fingerprint, paths,
//! hardware and software names, NCCL settings, failure message, notes), is parsed as Markdown
//! and must keep the block structure of the same report with a benign string, the marker once
//! and first, no HTML, mention, reference or link of its own, and the verdict, the reasons and
//! the hotspot table.

use proptest::prelude::*;
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::check::markdown;
use super::check::tests::{report, run};
use super::escape::is_invisible;
use commgate_core::output::MARKER;
use commgate_gate::check::CheckReport;
use commgate_gate::compare::CompareOptions;
use commgate_gate::decide::comparison::judge;
use commgate_gate::decide::mitigation::{diagnose, Thresholds};
use commgate_gate::decide::{ErrorKind, EvaluationError};
use commgate_trace::attribute::attribute_events;
use commgate_trace::attribute::CommEvent;
use commgate_trace::caveats::StepsIgnored;

const BENIGN: &str = "benign value";

/// A check report with `s` in every field a file or trace supplies.
fn hostile_report(s: &str, could_not_evaluate: bool) -> CheckReport {
    let mut bench = run(2, [1.0, 2.0, 3.0, 2.2], None);
    bench.hardware.gpu_name = Some(s.to_string());
    bench.hardware.topology = Some(s.to_string());
    bench.hardware.fingerprint = s.to_string();
    bench.software.driver = Some(s.to_string());
    bench.software.nccl_env.insert("NCCL_ALGO".into(), s.to_string());
    bench.workload.dtype = s.to_string();
    bench.decision.reason = s.to_string();
    let baseline = commgate_gate::baseline::Baseline {
        path: "b.json".into(),
        runs: (0..3).map(|_| run(2, [1.0, 2.0, 3.0, 2.0], None)).collect(),
    };
    let mut comparison = judge(&baseline, &bench, &CompareOptions { resamples: 50, ..CompareOptions::default() });
    comparison.baseline.path = s.to_string();
    comparison.reasons.push(format!("compared: {s}"));
    // The hostile collective exposes less than the others, so the decisions do not depend on it.
    let events = [
        CommEvent::new("all_reduce", 8.0, 1024.0, 0.6),
        CommEvent::new("all_to_all", 6.0, 2048.0, 0.5),
        CommEvent::new(&format!("x{s}"), 1.0, 512.0, 0.5),
    ];
    let mut attribution = diagnose(attribute_events(vec![s.to_string()], &events), &Thresholds::default());
    attribution.attribution.source.steps_ignored =
        Some(StepsIgnored { requested: 2, set_by: s.to_string(), marker_steps: 4 });
    attribution.mitigation.next_measurements.push(s.to_string());
    let opts = CompareOptions { resamples: 50, ..CompareOptions::default() };
    let mut traces =
        commgate_gate::compare::traces::prepare(s, std::slice::from_ref(&attribution), &attribution, &opts)
            .finish_alone(&opts, commgate_gate::decide::metric_state::RULES);
    traces.notes.push(s.to_string());
    let mut r = CheckReport {
        job: None,
        bench_ceiling: None,
        reasons: vec![format!("first: {s}"), s.to_string(), "third".into()],
        bench: Some(bench),
        comparison: Some(comparison),
        attribution: Some(attribution),
        trace_comparison: Some(traces),
        ..report(0, 0)
    };
    r.baseline.path = s.to_string();
    if could_not_evaluate {
        let error = EvaluationError::new(ErrorKind::BenchFailed, format!("rank 1: {s}"));
        r.reasons.insert(0, error.to_string());
        r.error = Some(error);
    }
    r
}

/// What must not change with the string: headings, tables (rows, cells), code blocks and their
/// text (the chart), lists, HTML, links.
#[derive(Debug, PartialEq)]
struct Shape {
    headings: Vec<String>,
    tables: Vec<Vec<usize>>,
    code_blocks: Vec<String>,
    list_items: usize,
    html: Vec<String>,
    links: usize,
}

/// Parses `md` as GFM, checks every text and code event for what must never appear there, and
/// returns its shape.
fn shape(md: &str) -> Shape {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    options.insert(Options::ENABLE_FOOTNOTES);
    let mut s = Shape { headings: vec![], tables: vec![], code_blocks: vec![], list_items: 0, html: vec![], links: 0 };
    let mut heading: Option<String> = None;
    let mut in_code = false;
    for event in Parser::new_ext(md, options) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => heading = Some(format!("{level:?}")),
            Event::End(TagEnd::Heading(_)) => s.headings.extend(heading.take()),
            Event::Start(Tag::Table(_)) => s.tables.push(Vec::new()),
            Event::Start(Tag::TableHead | Tag::TableRow) => s.tables.last_mut().expect("in a table").push(0),
            Event::Start(Tag::TableCell) => *s.tables.last_mut().and_then(|t| t.last_mut()).expect("in a row") += 1,
            Event::Start(Tag::CodeBlock(_)) => {
                in_code = true;
                s.code_blocks.push(String::new());
            }
            Event::End(TagEnd::CodeBlock) => in_code = false,
            Event::Text(t) if in_code => s.code_blocks.last_mut().expect("in a code block").push_str(&t),
            Event::Start(Tag::Item) => s.list_items += 1,
            Event::Start(Tag::Link { .. } | Tag::Image { .. }) => s.links += 1,
            Event::Html(h) | Event::InlineHtml(h) => s.html.push(h.trim().to_string()),
            Event::Text(t) => {
                if let Some(h) = heading.as_mut() {
                    // Only the head's own words: a fake heading would add one, not rename one.
                    if t.contains("commgate") || t.contains("Hotspots") {
                        h.push_str(" text");
                    }
                }
                let lower = t.to_lowercase();
                assert!(!t.contains('@'), "a mention-able @ in text: {t:?}");
                assert!(!lower.contains("://") && !lower.contains("www."), "a link-able URL in text: {t:?}");
                let bytes = lower.as_bytes();
                let reference = bytes.windows(2).any(|w| w[0] == b'#' && w[1].is_ascii_digit());
                assert!(!reference && !lower.contains("gh-1"), "an issue reference in text: {t:?}");
                assert!(!t.chars().any(|c| c.is_control() || is_invisible(c)), "a hidden character: {t:?}");
            }
            Event::Code(c) => assert!(!c.chars().any(|c| c.is_control() || is_invisible(c)), "{c:?}"),
            _ => {}
        }
    }
    s
}

/// Everything the comment must hold, whatever the string.
fn assert_holds(s: &str, could_not_evaluate: bool) {
    let md = markdown(&hostile_report(s, could_not_evaluate));
    let benign = markdown(&hostile_report(BENIGN, could_not_evaluate));
    assert!(md.chars().count() <= super::check::GITHUB_COMMENT_LIMIT);
    assert!(md.starts_with(MARKER), "{md}");
    assert_eq!(md.matches("<!--").count(), 1, "one comment, the marker: {md}");
    assert!(!md.lines().any(|l| l.trim_start().starts_with("::")), "a workflow command: {md}");
    let (got, want) = (shape(&md), shape(&benign));
    assert_eq!(got, want, "{md}");
    let head = if could_not_evaluate { "could not evaluate" } else { "commgate" };
    assert!(md.lines().nth(1).is_some_and(|l| l.starts_with("### ") && l.contains(head)), "{md}");
    assert!(md.contains("<summary>All reasons</summary>") && md.contains("- third"), "{md}");
    assert!(md.contains("#### Hotspots") && md.contains("| all\\_reduce |"), "{md}");
}

/// Fragments an attacker would combine.
fn hostile_fragment() -> impl Strategy<Value = String> {
    const PIECES: [&str; 43] = [
        "\n",
        "\r\n",
        "\n\n",
        "```",
        "~~~",
        "<!--",
        "-->",
        "<!-- commgate-report -->",
        "@team",
        "@org/team",
        "#12",
        "GH-7",
        "https://evil.example/x",
        "www.evil.example",
        "<img src=x onerror=alert(1)>",
        "<script>",
        "</details>",
        "|",
        "`",
        "*",
        "_",
        "[x](javascript:alert(1))",
        "\u{202E}",
        "\u{2066}",
        "\u{200B}",
        "\u{FEFF}",
        "::warning::",
        "# ✅ accept",
        "    ",
        "1. ",
        "- ",
        "> ",
        "\\",
        "&amp;",
        "$x$",
        "\"",
        "%%",
        "===",
        "[^1]",
        "<https://evil.example>",
        "a@b.example",
        "\u{1b}[31m",
        "\t",
    ];
    prop_oneof![
        3 => proptest::sample::select(&PIECES[..]).prop_map(str::to_string),
        1 => any::<char>().prop_map(|c| c.to_string()),
        1 => "[a-zA-Z0-9 ]{0,6}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn hostile_strings_cannot_change_the_comment(parts in proptest::collection::vec(hostile_fragment(), 0..12)) {
        assert_holds(&parts.concat(), false);
    }

    #[test]
    fn hostile_strings_cannot_change_a_could_not_evaluate_comment(parts in proptest::collection::vec(hostile_fragment(), 0..12)) {
        assert_holds(&parts.concat(), true);
    }
}

#[test]
fn the_red_team_strings_render_inert() {
    for s in [
        "abc\n<img src=x onerror=alert(1)></details><!-- commgate-report -->\n@org/team\n::warning::x",
        "median\"]\n```\n### ✅ accept\n[merge me](https://evil.example)",
        "\u{202E}gnp.exe \u{2066}@org/team #12 https://evil.example",
    ] {
        assert_holds(s, false);
        assert_holds(s, true);
    }
}

#[test]
fn a_200k_character_string_keeps_the_verdict_reasons_and_hotspots() {
    let long = "<img src=x>@team|".repeat(12_000);
    assert!(long.chars().count() > 200_000);
    assert_holds(&long, false);
    assert_holds(&long, true);
    let md = markdown(&hostile_report(&long, false));
    assert!(!md.contains("left out to fit"), "nothing had to be dropped: {}", md.chars().count());
}

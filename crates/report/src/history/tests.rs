//! Snapshots of `baseline list` and `baseline show` in every format, the sparkline, and a store
//! full of hostile strings rendered as Markdown that keeps its structure.

use std::collections::BTreeMap;

use pulldown_cmark::{Event, Options, Parser, Tag};

use super::*;
use commgate_core::result::{RunResult, SCHEMA_VERSION};
use commgate_gate::baseline::history::{summarise, RunSummary};
use commgate_gate::baseline::list::{StoreRow, StoreStats};
use commgate_gate::baseline::BaselineFile;
use commgate_testkit::results as fixtures;

fn run(i: usize) -> RunResult {
    let mut r = fixtures::run(&[1.0, 1.1, 1.2, 1.3]);
    for row in &mut r.rows {
        for x in &mut row.samples_ms {
            *x *= 1.0 + i as f64 / 10.0;
        }
    }
    r.created_at = format!("2026-11-{:02}T00:00:00Z", i + 1);
    r.provenance.commit = Some(format!("{i}0123456789abcdef0123456789abcdef01234567"));
    r.software.driver = Some("580.95.05".into());
    r.software.cuda = Some("12.8".into());
    r.software.nccl = Some("2.21.5".into());
    r.metrics.busbw_gbps = Some(100.0 + i as f64);
    r
}

fn shown_with(f: impl Fn(&mut RunResult)) -> Shown {
    let mut runs: Vec<RunResult> = (0..4).map(run).collect();
    runs.iter_mut().for_each(f);
    let history: Vec<RunSummary> = runs[..2].iter().map(summarise).collect();
    let file = BaselineFile {
        schema_version: SCHEMA_VERSION,
        environment_profile: "PAR-MOCK".into(),
        workload_id: "par-overlap-allreduce-matmul".into(),
        runs: runs[2..].to_vec(),
        history,
        traces: BTreeMap::new(),
        ceilings: Vec::new(),
    };
    Shown {
        path: "baselines/PAR-MOCK/par-overlap-allreduce-matmul.json".into(),
        runs: commgate_gate::baseline::history::entries(&file),
        sweep: Vec::new(),
        environment_profile: file.environment_profile,
        workload_id: file.workload_id,
    }
}

fn listing() -> Listing {
    Listing {
        dir: "baselines".into(),
        stores: vec![
            StoreRow {
                profile: "PAR-MOCK".into(),
                workload: "par-overlap-allreduce-matmul".into(),
                path: "baselines/PAR-MOCK/par-overlap-allreduce-matmul.json".into(),
                stats: Some(StoreStats {
                    runs: 12,
                    judged_runs: 10,
                    newest: "2026-11-30T00:00:00Z".into(),
                    overlap_median_ms: Some(1.25),
                    serial_median_ms: Some(1.5),
                    trace_runs: [("default".to_string(), 5), ("nightly|<b>".to_string(), 2)].into_iter().collect(),
                }),
                error: None,
            },
            StoreRow {
                profile: "PAR-MOCK".into(),
                workload: "broken".into(),
                path: "baselines/PAR-MOCK/broken.json".into(),
                stats: None,
                error: Some("is not valid JSON (line 1, column 2: expected value); expected a baseline file".into()),
            },
        ],
    }
}

#[test]
fn sparklines_span_the_range() {
    assert_eq!(sparkline(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]), "▁▂▃▄▅▆▇█");
    assert_eq!(sparkline(&[2.0, 2.0]), "▄▄", "flat");
    assert_eq!(sparkline(&[1.0, f64::NAN, 3.0]), "▁ █");
    assert_eq!(sparkline(&[]), "");
    assert_eq!(sparkline(&[5.0]), "▄");
}

#[test]
fn list_renders_in_every_format() {
    let l = listing();
    insta::assert_snapshot!("list_text", list(&l, Format::Text));
    insta::assert_snapshot!("list_json", list(&l, Format::Json));
    insta::assert_snapshot!("list_markdown", list(&l, Format::Markdown));
    let empty = Listing { dir: "baselines".into(), stores: vec![] };
    assert_eq!(list(&empty, Format::Text), "No baseline stores in baselines.\n");
}

#[test]
fn show_renders_in_every_format() {
    let s = shown_with(|_| {});
    insta::assert_snapshot!("show_text", show(&s, Format::Text));
    insta::assert_snapshot!("show_json", show(&s, Format::Json));
    insta::assert_snapshot!("show_markdown", show(&s, Format::Markdown));
}

/// Headings, table rows and cells, code blocks' text, HTML and links of `md`.
fn structure(md: &str) -> (usize, Vec<usize>, Vec<String>, usize, usize) {
    let mut opts = Options::empty();
    opts.insert(Options::ENABLE_TABLES);
    let (mut headings, mut cells, mut code, mut html, mut links) = (0, vec![], vec![], 0, 0);
    let mut in_code = false;
    for ev in Parser::new_ext(md, opts) {
        match ev {
            Event::Start(Tag::Heading { .. }) => headings += 1,
            Event::Start(Tag::TableHead | Tag::TableRow) => cells.push(0),
            Event::Start(Tag::TableCell) => *cells.last_mut().expect("row") += 1,
            Event::Start(Tag::CodeBlock(_)) => {
                in_code = true;
                code.push(String::new());
            }
            Event::End(pulldown_cmark::TagEnd::CodeBlock) => in_code = false,
            Event::Text(t) if in_code => code.last_mut().expect("block").push_str(&t),
            Event::Html(_) | Event::InlineHtml(_) => html += 1,
            Event::Start(Tag::Link { .. } | Tag::Image { .. }) => links += 1,
            Event::Text(t) => {
                assert!(!t.contains('@'), "a mention in {t:?}");
                assert!(!t.contains("://"), "a link in {t:?}");
            }
            _ => {}
        }
    }
    (headings, cells, code, html, links)
}

#[test]
fn hostile_store_strings_keep_the_markdown_structure() {
    let hostile = "x\n\n# head\n```\n<!-- commgate-report --> @team | https://evil.example `x`\r\n- item";
    let benign = shown_with(|r| {
        r.provenance.commit = Some("benign".into());
        r.software.driver = Some("benign".into());
        r.created_at = format!("{}-benign", r.created_at);
    });
    let evil = shown_with(|r| {
        r.provenance.commit = Some(hostile.into());
        r.software.driver = Some(hostile.into());
        r.created_at = format!("{}{hostile}", r.created_at);
    });
    let mut evil = evil;
    evil.environment_profile = hostile.into();
    evil.path = hostile.into();
    let md = show(&evil, Format::Markdown);
    assert!(!md.contains("<!--"), "{md}");
    let (h, cells, code, html, links) = structure(&md);
    let (bh, bcells, bcode, _, _) = structure(&show(&benign, Format::Markdown));
    assert_eq!((h, &cells, html, links), (bh, &bcells, 0, 0), "{md}");
    assert_eq!(code.len(), bcode.len());
    assert!(code[0].lines().count() == bcode[0].lines().count(), "the chart keeps its lines: {}", code[0]);

    let mut l = listing();
    l.stores[0].profile = hostile.into();
    l.stores[1].error = Some(hostile.into());
    if let Some(st) = l.stores[0].stats.as_mut() {
        st.trace_runs.insert(hostile.into(), 3);
    }
    let md = list(&l, Format::Markdown);
    let (h, cells, _, html, links) = structure(&md);
    assert_eq!((h, cells, html, links), (1, vec![7, 7, 7], 0, 0), "{md}");
    let text = list(&l, Format::Text);
    assert_eq!(text.lines().count(), 5, "one line per store: {text}");
}

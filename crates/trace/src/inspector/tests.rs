use std::path::Path;

use super::*;

fn line(rank: u32, coll: &str, sn: u64, bytes: u64, us: u64) -> String {
    format!(
        r#"{{"header":{{"id":"0x7f8c496ae9f661","comm_name":"unknown","rank":{rank},"n_ranks":4,"nnodes":1}},"metadata":{{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1748030377748202,"hostname":"h","pid":1}},"coll_perf":{{"coll":"{coll}","coll_sn":{sn},"coll_msg_size_bytes":{bytes},"coll_exec_time_us":{us},"coll_timing_source":"kernel_gpu","coll_algobw_gbs":"nan","coll_busbw_gbs":485.119099}}}}"#
    )
}

fn read(text: &str) -> Result<InspectorFile, InspectorError> {
    read_log(text.as_bytes(), ReadLimits::default(), false)
}

#[test]
fn records_become_back_to_back_comm_kernels_with_exact_durations() {
    let text = [line(2, "AllReduce", 7, 1024, 10), line(2, "AllGather", 8, 256, 3), String::new()].join("\n");
    let f = read(&text).expect("reads");
    assert_eq!(f.version.as_deref(), Some("v4.0"));
    let t = &f.trace;
    assert_eq!((t.rank, t.world_size, t.num_events, t.no_compute), (Some(2), Some(4), 2, true));
    let k: Vec<(i64, i64, &str)> = t.kernels.iter().map(|k| (k.ts, k.dur, t.kernel_name(k))).collect();
    assert_eq!(k, vec![(0, 10_000, "ncclAllReduce"), (10_000, 3_000, "ncclAllGather")]);
    let meta = t.kernels[1].meta.as_deref().expect("meta");
    // AllGather's size is one rank's share: the payload is the whole buffer.
    assert_eq!((meta.in_nelems, meta.seq, meta.pg_name.as_deref()), (Some(1024), Some(8), Some("0x7f8c496ae9f661")));
    assert_eq!(format_name(f.version.as_deref()), "nccl_inspector v4.0");
}

#[test]
fn p2p_records_are_counted_not_attributed() {
    let p2p = r#"{"header":{"id":"0x1","rank":0,"n_ranks":2,"nnodes":1},"metadata":{},"p2p_perf":{"p2p":"Send","p2p_sn":1,"p2p_peer":1,"p2p_msg_size_bytes":8,"p2p_exec_time_us":2}}"#;
    let f = read(&format!("{p2p}\n{}\n", line(0, "AllReduce", 1, 8, 1))).expect("reads");
    assert_eq!((f.trace.num_events, f.trace.kernels.len()), (2, 1));
}

#[test]
fn the_widest_communicator_gives_the_rank() {
    let small = line(1, "AllReduce", 1, 8, 1).replace("\"n_ranks\":4", "\"n_ranks\":2").replace("0x7f", "0x11");
    let f = read(&format!("{small}\n{}\n", line(3, "AllReduce", 1, 8, 1))).expect("reads");
    assert_eq!((f.trace.rank, f.trace.world_size), (Some(3), Some(4)));
}

#[test]
fn bad_lines_name_the_line_and_the_field() {
    let good = line(0, "AllReduce", 1, 8, 1);
    let cases = [
        (format!("{good}\n{}", &good[..good.len() / 2]), "line 2 ends inside its record"),
        (format!("{good}\n{}\n", &good[..good.len() / 2]), "line 2 ends inside its record"),
        (
            good.replace("\"coll_exec_time_us\":1", "\"coll_exec_time_us\":\"abc\""),
            "`coll_perf.coll_exec_time_us` is the string \"abc\"",
        ),
        (good.replace("\"coll_sn\":1,", ""), "line 1: `coll_perf.coll_sn` is missing"),
        (good.replace("\"header\"", "\"head\""), "line 1 has no `header` object"),
        ("[1, 2]\n".to_string(), "line 1 is an array, not a JSON object"),
        ("{nope}\n".to_string(), "line 1 is not valid JSON"),
        (String::new(), "holds no NCCL Inspector records"),
        (format!("{good}\n{}\n", line(1, "AllReduce", 2, 8, 1)), "appears as rank 0 and rank 1"),
        // Ids and names that would multiply memory by the records.
        (good.replace("0x7f8c496ae9f661", &"f".repeat(4096)), "`header.id` is 4096 bytes"),
        (line(0, &"X".repeat(4096), 1, 8, 1), "`coll_perf.coll` is 4096 bytes"),
    ];
    for (text, want) in cases {
        let e = read(&text).expect_err(want).to_string();
        assert!(e.contains(want), "{want}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

/// Past the communicator limit the read stops with a line, not gigabytes of maps.
#[test]
fn too_many_communicators_stop_the_read() {
    let lines: Vec<String> = (0..=MAX_COMMUNICATORS)
        .map(|i| line(0, "AllReduce", 1, 8, 1).replace("0x7f8c496ae9f661", &format!("0x{i:x}")))
        .collect();
    let e = read(&(lines.join("\n") + "\n")).expect_err("too many").to_string();
    assert!(e.contains(&format!("more than {MAX_COMMUNICATORS} communicators")), "{e}");
}

#[test]
fn long_lines_and_too_many_records_stop_the_read() {
    let long = format!("{{\"x\":\"{}\"}}\n", "a".repeat(MAX_LINE_BYTES));
    assert!(read(&long).expect_err("long").0.contains("line 1 is longer than"));
    let two = format!("{}\n{}\n", line(0, "AllReduce", 1, 8, 1), line(0, "AllReduce", 2, 8, 1));
    let e = read_log(two.as_bytes(), ReadLimits { max_events: 1 }, false).expect_err("cap");
    assert!(e.0.contains("more than 1 records"), "{e}");
}

#[test]
fn sniffing_reads_names_and_first_lines_and_loses_nothing() {
    let sniff_text = |name: &str, text: &str| {
        let s = sniff(Path::new(name), Box::new(std::io::Cursor::new(text.as_bytes().to_vec()))).expect("sniffs");
        let mut back = String::new();
        let mut reader = s.reader;
        reader.read_to_string(&mut back).expect("reads back");
        assert_eq!(back, text);
        s.inspector
    };
    let record = format!("\n{}\n", line(0, "AllReduce", 1, 8, 1));
    assert!(sniff_text("trace.json", &record));
    assert!(sniff_text("host-pid12.log", "garbage"));
    assert!(sniff_text("x.jsonl.gz", ""));
    assert!(!sniff_text("rank-0.json", "{\"traceEvents\": []}"));
    assert!(!sniff_text("rank-0.json", "{\n  \"header\": 1,\n  \"coll_perf\": 2\n}"));
    assert!(is_dir_log_name(Path::new("node1-pid438776.log")));
    assert!(is_dir_log_name(Path::new("a.jsonl")));
    assert!(!is_dir_log_name(Path::new("train.log")));
}

#!/usr/bin/env python3
"""Record Holistic Trace Analysis' numbers for the HTA parity fixtures.

Run through scripts/hta-reference.sh, which makes the two virtual environments (HTA 0.5.0 and
0.6.1) and calls this file two ways:

  measure --label 0.5.0 --out m05.json     (inside a venv with HTA installed)
      For every dataset in DATASETS: load its files with HTA's TraceAnalysis (HTA's own step
      window), call get_comm_comp_overlap and get_temporal_breakdown, and record per rank
      HTA's numbers, the merged totals behind the percentage, the communication kernels as HTA
      holds them, and the same without the step window ("no_filter": HTA's parser and rank
      alignment, _filter_irrelevant_gpu_kernels skipped).
  merge m05.json m061.json --reference tests/fixtures/hta/reference.json [--write]
      Check that 0.5.0 and 0.6.1 agree, that the committed datasets' numbers are reproduced
      exactly (the committed entries are never rewritten; the script's own sweep is compared
      with their per_collective_hta_window as a check of this script), and write entries for
      datasets not in reference.json yet (with --write), with per_collective_hta_window: the
      equal-share sweep of docs/attribution.md over HTA's own (filtered, rounded) kernels.

Nothing here changes HTA: the numbers are the ones HTA's own functions return; the merged
totals are recomputed with HTA's own merge_kernel_intervals/get_kernel_type exactly as
hta/analyzers/communication_analysis.py does, and checked against the percentage HTA prints.
"""

import argparse
import gzip
import json
import os
import sys
from fractions import Fraction

# Datasets: name -> files relative to tests/fixtures/hta. The first four are the committed ones.
DATASETS = {
    "nccl_parser_config": ["nccl_parser_config/nccl_data.json.gz"],
    "negative_queue_rank0": ["negative_queue_rank0/rank0.json.gz"],
    "sampled_2rank": ["sampled_2rank/sampled_rank-0.json.gz", "sampled_2rank/sampled_rank-1.json.gz"],
    "trace_diff_control": ["trace_diff_control/control.json.gz"],
    "tracelens_mi300_resnet": ["tracelens_mi300_resnet/resnet_act_checkpoint.json.gz"],
    "modern_synthetic": ["modern_synthetic/rank0.json.gz", "modern_synthetic/rank1.json.gz"],
}

HTA_KEYS = [
    "comp_comm_overlap_pctg", "comm_merged_us", "overlap_us", "exposed_comm_us", "idle_us",
    "compute_us", "non_compute_us", "kernel_time_us", "n_comm_kernels",
]
NO_FILTER_KEYS = ["comp_comm_overlap_pctg", "comm_merged_us", "overlap_us", "exposed_comm_us"]


# --------------------------------------------------------------------------------------------
# measure (runs inside a venv with HTA)
# --------------------------------------------------------------------------------------------

def _num(x):
    """A numpy/pandas scalar as a plain JSON number (ints stay ints)."""
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def _overlap_parts(trace_df, sym_table):
    """HTA's get_comm_comp_overlap_value (hta/analyzers/communication_analysis.py), returning
    its numerator and denominator instead of only their ratio."""
    import pandas as pd
    from hta.utils.utils import get_kernel_type, KernelType, merge_kernel_intervals

    gpu_kernels = trace_df[trace_df["stream"].ne(-1)].copy()
    gpu_kernels["kernel_type"] = gpu_kernels[["name"]].apply(
        lambda x: get_kernel_type(sym_table[x["name"]]), axis=1
    )
    comp_kernels = merge_kernel_intervals(
        gpu_kernels[gpu_kernels["kernel_type"].eq(KernelType.COMPUTATION.name)].copy()
    )
    comm_kernels = merge_kernel_intervals(
        gpu_kernels[gpu_kernels["kernel_type"].eq(KernelType.COMMUNICATION.name)].copy()
    )
    status_df = (
        pd.concat(
            [
                comm_kernels.melt(var_name="status", value_name="time").replace({"ts": 1, "end": -1}),
                comp_kernels.melt(var_name="status", value_name="time").replace({"ts": 2, "end": -2}),
            ]
        )
        .sort_values(by="time")
        .reset_index(drop=True)
    )
    status_df["running"] = status_df["status"].cumsum()
    overlap = status_df[status_df["running"].eq(3)]
    shifted = overlap.merge(status_df.shift(-1).dropna(), left_index=True, right_index=True)
    overlap_us = (shifted["time_y"] - shifted["time_x"]).sum()
    comm_us = (comm_kernels["end"] - comm_kernels["ts"]).sum()
    return gpu_kernels, comm_kernels, overlap_us, comm_us


def _rank_numbers(trace_df, sym_table, printed_pctg):
    gpu_kernels, _, overlap_us, comm_us = _overlap_parts(trace_df, sym_table)
    pctg = round(100 * (overlap_us / comm_us), 2)
    if printed_pctg is not None and abs(pctg - printed_pctg) > 1e-9:
        raise SystemExit(f"recomputed overlap {pctg} differs from HTA's printed {printed_pctg}")
    comm = gpu_kernels[gpu_kernels["kernel_type"].eq("COMMUNICATION")]
    return {
        "comp_comm_overlap_pctg": _num(pctg),
        "comm_merged_us": _num(comm_us),
        "overlap_us": _num(overlap_us),
        "exposed_comm_us": _num(comm_us - overlap_us),
    }, gpu_kernels, comm


def measure_dataset(fixtures, files, want_details):
    import pandas as pd
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    paths = [os.path.join(fixtures, f) for f in files]
    ta = TraceAnalysis(trace_files=paths)
    t = ta.t
    sym = t.symbol_table.get_sym_table()
    overlap_df = ta.get_comm_comp_overlap(visualize=False)
    breakdown_df = ta.get_temporal_breakdown(visualize=False)
    rank_file = {r: os.path.relpath(p, fixtures) for r, p in t.trace_files.items()}

    # The same files without the step window: HTA's parser and alignment, no filtering.
    t2 = Trace(trace_files=paths)
    t2.parse_traces()
    t2._align_all_ranks()
    for rank, df in t2.traces.items():
        df = df.set_index("index", drop=False)
        df.index.names = [None]
        t2.traces[rank] = df
    t2.is_parsed = True
    nf_df = CommunicationAnalysis.get_comm_comp_overlap(t2, visualize=False)
    sym2 = t2.symbol_table.get_sym_table()

    out = {}
    for rank in sorted(t.traces):
        printed = float(overlap_df.loc[overlap_df["rank"] == rank, "comp_comm_overlap_pctg"].iloc[0])
        hta, gpu_kernels, comm = _rank_numbers(t.traces[rank], sym, printed)
        b = breakdown_df.loc[breakdown_df["rank"] == rank].iloc[0]
        hta["idle_us"] = _num(b["idle_time(us)"])
        hta["compute_us"] = _num(b["compute_time(us)"])
        hta["non_compute_us"] = _num(b["non_compute_time(us)"])
        hta["kernel_time_us"] = _num(b["kernel_time(us)"])
        hta["n_comm_kernels"] = int(len(comm))
        nf_printed = float(nf_df.loc[nf_df["rank"] == rank, "comp_comm_overlap_pctg"].iloc[0])
        no_filter, _, _ = _rank_numbers(t2.traces[rank], sym2, nf_printed)
        entry = {"hta": hta, "no_filter": no_filter}
        if want_details:
            comm_sorted = comm.sort_values(by=["ts", "index"], kind="stable")
            # HTA's ts is aligned (minus the earliest rounded ts over all ranks, t.min_ts):
            # add it back so that the kernels read as in the trace file, rounded as HTA does.
            entry["hta_comm_kernels"] = [
                [_num(r.ts + t.min_ts), _num(r.dur)] for r in comm_sorted.itertuples()
            ]
            entry["_kernels"] = [
                {
                    "index": int(r.index),
                    "ts": _num(r.ts + t.min_ts),
                    "dur": _num(r.dur),
                    "type": r.kernel_type,
                    "name": sym[r.name],
                }
                for r in gpu_kernels.itertuples()
                if r.kernel_type in ("COMMUNICATION", "COMPUTATION")
            ]
            entry["_file"] = rank_file[rank]
        out[str(rank)] = entry
    return out


def cmd_measure(args):
    import hta  # noqa: F401  (fails early outside the venv)

    reference = {}
    if os.path.exists(args.reference):
        with open(args.reference) as f:
            reference = json.load(f).get("datasets", {})
    result = {"label": args.label, "datasets": {}}
    for name, files in DATASETS.items():
        missing = [f for f in files if not os.path.exists(os.path.join(args.fixtures, f))]
        if missing:
            print(f"[{args.label}] {name}: skipped, missing {missing}", file=sys.stderr)
            continue
        print(f"[{args.label}] {name}", file=sys.stderr)
        per_rank = measure_dataset(args.fixtures, files, want_details=True)
        result["datasets"][name] = {"files": files, "per_rank": per_rank, "new": name not in reference}
    with open(args.out, "w") as f:
        json.dump(result, f)


# --------------------------------------------------------------------------------------------
# per collective (plain python: runs on the kernels `measure` recorded)
# --------------------------------------------------------------------------------------------

DTYPE_SIZES = {}
for _names, _size in [
    (["float", "float32", "int", "int32", "unsigned int", "uint32", "complexhalf"], 4),
    (["double", "float64", "long", "long int", "int64", "long long", "unsigned long", "uint64",
      "complexfloat"], 8),
    (["half", "float16", "bfloat16", "short", "short int", "int16", "uint16"], 2),
    (["byte", "char", "bool", "unsigned char", "signed char", "uint8", "int8", "float8_e4m3fn",
      "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"], 1),
    (["complexdouble"], 16),
]:
    for _n in _names:
        DTYPE_SIZES[_n] = _size


def dtype_size(d):
    if not isinstance(d, str):
        return None
    d = d.strip()
    if d.startswith("c10::"):
        d = d[len("c10::"):]
    return DTYPE_SIZES.get(d.lower())


def normalize_collective(raw):
    """docs/attribution.md, 'Which collective a communication kernel is' (metadata names)."""
    if not isinstance(raw, str):
        return None
    n = raw.strip().lower()
    if n.startswith("nccl:"):
        n = n[len("nccl:"):]
    n = n.lstrip("_")
    if not n or n == "wait" or n == "init" or n == "barrier" or n.startswith("coalesced"):
        return None
    if n.startswith("allreduce") or n.startswith("all_reduce"):
        return "all_reduce"
    if "allgather" in n or "all_gather" in n:
        return "all_gather"
    if "reduce_scatter" in n or "reducescatter" in n:
        return "reduce_scatter"
    if n.startswith("all_to_all") or n.startswith("alltoall"):
        return "all_to_all"
    if n.startswith("broadcast"):
        return "broadcast"
    if n.startswith("reduce"):
        return "reduce"
    if n in ("send", "recv", "sendrecv", "send_recv"):
        return "send_recv"
    return n


def collective_from_kernel_name(name):
    for pat, coll in [("AllReduce", "all_reduce"), ("AllGather", "all_gather"),
                      ("ReduceScatter", "reduce_scatter"), ("AllToAll", "all_to_all"),
                      ("Broadcast", "broadcast"), ("SendRecv", "send_recv"), ("Reduce", "reduce")]:
        if pat in name:
            return coll
    if "Send" in name or "Recv" in name:
        return "send_recv"
    return None


def _metadata_bytes(args):
    size = dtype_size(args.get("dtype"))
    i, o = args.get("In msg nelems"), args.get("Out msg nelems")
    nel = [v for v in (i, o) if isinstance(v, (int, float))]
    if size is None or not nel:
        return None
    return int(max(nel)) * size


def _input_bytes(args):
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    total, any_known = 0, False
    for d, ty in zip(dims, types):
        size = dtype_size(ty)
        if size is None or not isinstance(d, list):
            continue
        n = 1
        for x in d:
            if not isinstance(x, (int, float)):
                n = None
                break
            n *= int(x)
        if n is None:
            continue
        total += n * size
        any_known = True
    return total if any_known else None


class RawTrace:
    """The raw events of one trace file, to name a kernel's collective and payload."""

    def __init__(self, path):
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            self.events = json.load(f)["traceEvents"]
        self.launch = {}
        self.cpu_ops = {}  # (pid, tid) -> [(ts, end, event)], record_param_comms and nccl:*
        self.gpu_anns = {}  # tid -> [(ts, end, name)]
        for e in self.events:
            cat, args = e.get("cat"), e.get("args") or {}
            if e.get("ph") != "X":
                continue
            if cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
                self.launch.setdefault(args["correlation"], e)
            elif cat in ("cpu_op", "user_annotation") and (
                e.get("name") == "record_param_comms" or str(e.get("name", "")).startswith("nccl:")
            ):
                self.cpu_ops.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e))
            elif cat == "gpu_user_annotation" and str(e.get("name", "")).startswith("nccl:"):
                self.gpu_anns.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))

    def _innermost(self, launch, pred):
        best = None
        for ts, end, e in self.cpu_ops.get((launch["pid"], launch["tid"]), []):
            if pred(e) and ts <= launch["ts"] < end and (best is None or ts >= best[0]):
                best = (ts, e)
        return best[1] if best else None

    def describe(self, index):
        """(collective, payload bytes or None) of the kernel at traceEvents[index]."""
        k = self.events[index]
        args = k.get("args") or {}
        launch = self.launch.get(args.get("correlation"))
        rpc = ncclop = None
        if launch is not None:
            rpc = self._innermost(launch, lambda e: e["name"] == "record_param_comms")
            ncclop = self._innermost(launch, lambda e: e["name"].startswith("nccl:"))
        coll = normalize_collective(args.get("Collective name"))
        if coll is None and rpc is not None:
            coll = normalize_collective((rpc.get("args") or {}).get("Collective name"))
        if coll is None and ncclop is not None:
            coll = normalize_collective(ncclop["name"])
        if coll is None:
            kend = k["ts"] + k["dur"]
            for ts, end, name in self.gpu_anns.get(k.get("tid"), []):
                if ts <= k["ts"] and kend <= end:
                    coll = normalize_collective(name)
                    if coll:
                        break
        if coll is None:
            coll = collective_from_kernel_name(k["name"])
        if coll is None:
            coll = "unknown_collective"
        payload = _metadata_bytes(args)
        if payload is None and rpc is not None:
            payload = _metadata_bytes(rpc.get("args") or {})
        if payload is None and ncclop is not None:
            payload = _input_bytes(ncclop.get("args") or {})
        return coll, payload


def merge_groups(intervals):
    """HTA's merge_kernel_intervals on (ts, end) pairs, ties in ts kept in input order (a stable
    sort). Returns the groups [(ts, end, members)]. The caller checks that the order of ties does
    not matter (it does when a negative-length kernel shares its ts with another)."""
    order = sorted(range(len(intervals)), key=lambda i: intervals[i][0])
    groups, cummax = [], None
    for i in order:
        ts, end = intervals[i]
        if cummax is not None and ts <= cummax:
            g = groups[-1]
            groups[-1] = (g[0], max(g[1], end), g[2] + [i])
        else:
            groups.append((ts, end, [i]))
        cummax = end if cummax is None else max(cummax, end)
    return groups


def per_collective(entry, raw):
    kernels = entry["_kernels"]
    comm = [k for k in kernels if k["type"] == "COMMUNICATION"]
    comp = [k for k in kernels if k["type"] == "COMPUTATION"]
    names = [raw.describe(k["index"]) for k in comm]
    ivs = [(k["ts"], k["ts"] + k["dur"]) for k in comm]
    # tie hazard: a negative-length comm kernel sharing its ts with another comm kernel
    starts = {}
    for ts, end in ivs:
        starts.setdefault(ts, []).append(end - ts)
    for ts, lens in starts.items():
        if len(lens) > 1 and min(lens) < 0:
            raise SystemExit(f"comm kernels tie at ts={ts} with a negative length: HTA's merge depends on sort order")
    out = {}
    for (coll, payload) in names:
        c = out.setdefault(coll, {"sync_count": 0, "payload_bytes": 0, "payload_known": False,
                                  "comm": Fraction(0), "exposed": Fraction(0)})
        c["sync_count"] += 1
        if payload is not None:
            c["payload_bytes"] += payload
            c["payload_known"] = True
    # HTA's negative-length groups (a lone sub-µs kernel, rounded to -1 µs): credited as they are.
    for ts, end, members in merge_groups(ivs):
        if end < ts:
            assert len(members) == 1
            c = out[names[members[0]][0]]
            c["comm"] += end - ts
            c["exposed"] += end - ts
    # The equal-share sweep over positive-length intervals.
    events = []
    for i, (ts, end) in enumerate(ivs):
        if end > ts:
            events.append((ts, 1, ("c", i)))
            events.append((end, -1, ("c", i)))
    for k in comp:
        if k["dur"] > 0:
            events.append((k["ts"], 1, ("k", None)))
            events.append((k["ts"] + k["dur"], -1, ("k", None)))
    events.sort(key=lambda e: e[0])
    active, ncomp, prev, j = set(), 0, None, 0
    while j < len(events):
        t = events[j][0]
        if prev is not None and t > prev and active:
            share = Fraction(t - prev, len(active))
            for i in active:
                c = out[names[i][0]]
                c["comm"] += share
                if ncomp == 0:
                    c["exposed"] += share
        while j < len(events) and events[j][0] == t:
            _, delta, (kind, i) = events[j]
            if kind == "c":
                (active.add if delta > 0 else active.discard)(i)
            else:
                ncomp += delta
            j += 1
        prev = t
    result = {}
    for coll, c in out.items():
        result[coll] = {
            "sync_count": c["sync_count"],
            "payload_bytes": c["payload_bytes"] if c["payload_known"] else None,
            "comm_share_us": float(c["comm"]),
            "exposed_share_us": float(c["exposed"]),
        }
    tot = sum(c["comm"] for c in out.values())
    exp = sum(c["exposed"] for c in out.values())
    return result, tot, exp


# --------------------------------------------------------------------------------------------
# merge
# --------------------------------------------------------------------------------------------

def _same(a, b):
    return a is not None and b is not None and abs(float(a) - float(b)) < 1e-9


def cmd_merge(args):
    runs = []
    for p in args.measurements:
        with open(p) as f:
            runs.append(json.load(f))
    with open(args.reference) as f:
        reference = json.load(f)
    problems, notes = [], []
    base = runs[0]
    for name, ds in base["datasets"].items():
        for other in runs[1:]:
            ods = other["datasets"].get(name)
            if ods is None:
                problems.append(f"{name}: not measured by HTA {other['label']}")
                continue
            for rank, e in ds["per_rank"].items():
                oe = ods["per_rank"].get(rank)
                for part in ("hta", "no_filter", "hta_comm_kernels"):
                    if oe is None or e[part] != oe[part]:
                        problems.append(
                            f"{name} rank {rank} {part}: HTA {base['label']} {e[part]} vs "
                            f"HTA {other['label']} {None if oe is None else oe[part]}"
                        )
    datasets = reference["datasets"]
    fixtures = args.fixtures
    for name, ds in base["datasets"].items():
        if name in datasets:
            want = datasets[name]
            for rank, e in ds["per_rank"].items():
                w = want["per_rank"].get(rank)
                if w is None:
                    problems.append(f"{name}: rank {rank} not in the committed reference")
                    continue
                for part, keys in (("hta", HTA_KEYS), ("no_filter", NO_FILTER_KEYS)):
                    for k in keys:
                        if not _same(e[part].get(k), w[part].get(k)):
                            problems.append(
                                f"{name} rank {rank} {part}.{k}: committed {w[part].get(k)}, HTA now {e[part].get(k)}"
                            )
                # the helper's sweep against the committed one (a check of this script only)
                raw = RawTrace(os.path.join(fixtures, e["_file"]))
                got, _, _ = per_collective(e, raw)
                for coll, wc in w.get("per_collective_hta_window", {}).items():
                    gc = got.get(coll)
                    if gc is None or any(not _same(gc[k], wc[k]) for k in wc):
                        notes.append(f"{name} rank {rank} {coll}: committed {wc}, this script's sweep {gc}")
                for coll in got:
                    if coll not in w.get("per_collective_hta_window", {}):
                        notes.append(f"{name} rank {rank}: this script finds collective {coll} ({got[coll]}), not in the committed entry")
            continue
        entry = {"files": ds["files"], "per_rank": {}}
        for rank in sorted(ds["per_rank"], key=int):
            e = ds["per_rank"][rank]
            raw = RawTrace(os.path.join(fixtures, e["_file"]))
            per, tot, exp = per_collective(e, raw)
            if float(tot) != float(e["hta"]["comm_merged_us"]) or float(exp) != float(e["hta"]["exposed_comm_us"]):
                problems.append(
                    f"{name} rank {rank}: swept shares {float(tot)}/{float(exp)} do not add up to HTA's "
                    f"{e['hta']['comm_merged_us']}/{e['hta']['exposed_comm_us']}"
                )
            for coll, c in per.items():
                if c["payload_bytes"] is None:
                    notes.append(f"{name} rank {rank} {coll}: no payload known")
            entry["per_rank"][rank] = {
                "hta": {k: e["hta"][k] for k in HTA_KEYS},
                "no_filter": {k: e["no_filter"][k] for k in NO_FILTER_KEYS},
                "per_collective_hta_window": per,
                "hta_comm_kernels": e["hta_comm_kernels"],
            }
        if args.write:
            datasets[name] = entry
        print(json.dumps({name: {r: v["hta"] for r, v in entry["per_rank"].items()}}), file=sys.stderr)
    for n in notes:
        print("note:", n, file=sys.stderr)
    for p in problems:
        print("DIFFERENCE:", p, file=sys.stderr)
    if args.write:
        reference["datasets"] = {k: datasets[k] for k in sorted(datasets)}
        with open(args.reference, "w") as f:
            json.dump(reference, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {args.reference}", file=sys.stderr)
    if problems:
        sys.exit(1)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    fixtures = os.path.join(os.path.dirname(here), "tests", "fixtures", "hta")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--label", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--fixtures", default=fixtures)
    m.add_argument("--reference", default=os.path.join(fixtures, "reference.json"))
    g = sub.add_parser("merge")
    g.add_argument("measurements", nargs="+")
    g.add_argument("--fixtures", default=fixtures)
    g.add_argument("--reference", default=os.path.join(fixtures, "reference.json"))
    g.add_argument("--write", action="store_true")
    args = ap.parse_args()
    {"measure": cmd_measure, "merge": cmd_merge}[args.cmd](args)


if __name__ == "__main__":
    main()

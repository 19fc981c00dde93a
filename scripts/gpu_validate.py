#!/usr/bin/env python3
"""The logic of scripts/gpu-validate.sh: reading what the runs wrote, the checks and their
tolerances, the verdict lines, the tally and the exit code.

Everything here but `torch-ref` (and `count-gpus`, which tries torch first) is the Python 3
standard library, so the logic runs and is tested without a GPU:

    python3 scripts/gpu_validate.py selftest tests/fixtures/gpu-validate

Subcommands:
  count-gpus                prints "N<TAB>how it was counted<TAB>GPU name": torch.cuda.device_count()
                            when torch with CUDA imports, else `nvidia-smi -L` filtered by
                            CUDA_VISIBLE_DEVICES; 0 with the reason when there is no GPU
  free-port                 a free TCP port on 127.0.0.1 (for the two-process runs)
  watch-maps PID OUT        until PID is gone, collects the libcublas/libcublasLt/libnccl lines of
                            /proc/PID/maps and of its descendants' into OUT
  torch-ref OUT SPEC...     torch.mm timed as commgate times compute_only (SPEC: bf16:8192, ...),
                            the GPU's memory and count, and torch's own /proc/self/maps lines
  report DIR                one line per check (PASS|FAIL|SKIP name: figures and tolerance), then
                            "N of M checks passed"; exit 0 all ran and passed, 1 one failed, 2 one
                            could not run
  selftest FIXTURES         the report on recorded outputs, passing and failing cases

The directory `report` reads (gpu-validate.sh writes it; tests/fixtures/gpu-validate holds
recorded ones):
  plan.txt         key=value lines: gpus, gpu_source, emulator (1: commgate's emulated GPUs, where
                   the checks against torch and nccl-tests do not apply), primary (the run the schedule, memory,
                   topology and library checks read), gate_ref (the gated run the gate check
                   compares with), busbw_bytes, kill_deadline_s, kill_after_s, all_reduce_perf
  runs.tsv         one line per run: NAME<TAB>STATUS<TAB>SECONDS[<TAB>NOTE]; STATUS is the exit
                   code, `hung` (killed at its deadline) or `not-run` (NOTE says why)
  NAME.json, NAME.stderr   commgate's result file and stderr for each commgate run
  NAME.maps        the library lines of commgate's maps (the primary run)
  torch.json       torch-ref's output; torch.stderr when it failed
  all_reduce_perf.log      nccl-tests' output (2+ GPUs)
"""

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# --- the tolerances ------------------------------------------------------------------------
# GEMM: commgate's compute_only rate at least this share of torch.mm's, timed the same way.
GEMM_MIN_RATIO = 0.95
# Above this share the line notes it (the sizes or the math may differ, e.g. TF32): not a fail.
GEMM_NOTE_RATIO = 1.10
# Gate: an ungated window holds host launch latency, so it may be slower, never faster beyond noise.
GATE_MIN_RATIO = 0.97
# Schedules: serial ~ comm_only + compute_only, and max(comm_only, compute_only) <= overlap <=
# serial, each bound loosened by 10 % of the value it is compared with or 20 us, the larger.
SCHEDULE_REL = 0.10
SCHEDULE_ABS_MS = 0.020
# Memory: the result's gpu_memory_mib within 1 % of torch's total_memory // 2**20.
MEMORY_REL = 0.01
# busbw against nccl-tests: only at 256 MiB per rank or more, where one call's fixed costs (the
# events around one all-reduce, against nccl-tests' average over back-to-back calls) are small.
BUSBW_MIN_BYTES = 256 * 2**20

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
LIBRARIES = ("libcublas", "libcublasLt", "libnccl")
LIBRARY_PATH = re.compile(r"/(libcublasLt|libcublas|libnccl)\.so(\.[0-9][0-9.]*)?$")
MULTI_GPU_CHECKS = ("world-n", "two-process", "killed-peer", "busbw")
TOPOLOGIES_OF_SEVERAL = ("nvlink", "pcie-p2p", "no-p2p", "mixed")
# torch.cuda._sleep's cycles before each timed matmul: about 0.5 ms at H200 clocks, far longer
# than the host takes to queue start event, matmul and stop event.
HOLD_CYCLES = 1_000_000


def busbw_tolerance(nbytes):
    """The busbw check's allowed shortfall: 10 % at 256 MiB, shrinking towards 5 % as the payload
    grows (6.25 % at 1 GiB), since one call's fixed costs weigh less."""
    return 0.05 + 0.05 * min(1.0, BUSBW_MIN_BYTES / nbytes)


def tflops(dim, median_ms):
    return 2 * dim**3 / (median_ms * 1e-3) / 1e12


def median(values):
    """The median with linear interpolation (numpy's default, commgate's median_max_rank_ms)."""
    return statistics.median(values) if values else None


def fmt_ms(value):
    return f"{value:.4f} ms" if value is not None else "-"


# --- reading what the runs wrote ---------------------------------------------------------------


class Run:
    """One line of runs.tsv."""

    def __init__(self, name, status, seconds, note):
        self.name, self.status, self.seconds, self.note = name, status, seconds, note

    @property
    def rc(self):
        return int(self.status) if self.status.lstrip("-").isdigit() else None


def read_plan(out_dir):
    plan = {}
    path = os.path.join(out_dir, "plan.txt")
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                plan[key.strip()] = value.strip()
    return plan


def read_runs(out_dir):
    runs = {}
    path = os.path.join(out_dir, "runs.tsv")
    if not os.path.exists(path):
        return runs
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            fields = line.split("\t")
            fields += [""] * (4 - len(fields))
            name, status, seconds, note = fields[0], fields[1], fields[2], "\t".join(fields[3:]).strip()
            try:
                secs = float(seconds)
            except ValueError:
                secs = None
            runs[name] = Run(name, status.strip(), secs, note)
    return runs


def stderr_reason(out_dir, name):
    """The most telling line of NAME.stderr: commgate's error line, else its last line."""
    path = os.path.join(out_dir, name + ".stderr")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return None
    for line in reversed(lines):
        if "error:" in line:
            return line
    return lines[-1] if lines else None


def stderr_has(out_dir, name, text):
    try:
        with open(os.path.join(out_dir, name + ".stderr"), encoding="utf-8", errors="replace") as f:
            return text in f.read()
    except OSError:
        return False


class Outcome:
    """A commgate run as a check sees it: a finished result, or why there is none. `skip` is true
    when the run was never made (a check that could not run), false when it was made and failed."""

    def __init__(self, result=None, problem=None, skip=False, run=None):
        self.result, self.problem, self.skip, self.run = result, problem, skip, run


def load_result(out_dir, runs, name):
    run = runs.get(name)
    if run is None:
        return Outcome(problem=f"{name} was not run (the script stopped before it)", skip=True)
    if run.status == "not-run":
        return Outcome(problem=f"{name} was not run: {run.note or 'no reason given'}", skip=True, run=run)
    result = None
    path = os.path.join(out_dir, name + ".json")
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            return Outcome(problem=f"{name}.json does not parse: {e}", run=run)
    if run.status == "hung":
        return Outcome(problem=f"{name} was still running at its deadline and was killed", run=run)
    if result is not None and result.get("failure"):
        failure = result["failure"]
        return Outcome(
            problem=f"commgate bench ({name}) failed, {failure.get('kind')}: {failure.get('message')}", run=run
        )
    if run.rc != 0:
        if run.rc == 124:
            why = "killed by the time limit"
        else:
            why = stderr_reason(out_dir, name) or "no message"
        return Outcome(problem=f"commgate bench ({name}) exited {run.status}: {why}", run=run)
    if result is None:
        return Outcome(problem=f"commgate bench ({name}) exited 0 but wrote no {name}.json", run=run)
    if not result.get("rows"):
        return Outcome(problem=f"{name}.json holds no rows", run=run)
    return Outcome(result=result, run=run)


def row_median(result, schedule):
    for row in result.get("rows", []):
        if row.get("schedule") == schedule:
            samples = row.get("samples_ms") or []
            if samples:
                return median(samples)
            return row.get("median_max_rank_ms")
    return None


def timing_of(result):
    """How the windows were timed: `workload.timing` (docs/formats.md), or `hardware.timing`."""
    for block in ("workload", "hardware"):
        value = (result.get(block) or {}).get("timing")
        if value is not None:
            return value
    return None


def load_torch(out_dir, runs):
    """(torch.json's content, None), or (None, why there is none)."""
    path = os.path.join(out_dir, "torch.json")
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f), None
        except (OSError, ValueError) as e:
            return None, f"torch.json does not parse: {e}"
    run = runs.get("torch")
    if run is not None and run.status == "not-run":
        return None, f"no torch reference: {run.note}"
    why = stderr_reason(out_dir, "torch")
    if run is not None:
        return None, f"the torch reference exited {run.status}: {why or 'no message'}"
    return None, "no torch reference was measured"


def without_deleted(path):
    """A maps path without the " (deleted)" the kernel appends for a file since removed."""
    return path[: -len(" (deleted)")] if path.endswith(" (deleted)") else path


def parse_maps(lines):
    """{library: {path: (dev, inode)}} from /proc/PID/maps lines (or excerpts of them)."""
    found = {lib: {} for lib in LIBRARIES}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = without_deleted(parts[5])
        match = LIBRARY_PATH.search(path)
        if match:
            found[match.group(1)].setdefault(path, (parts[3], parts[4]))
    return found


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return None


def parse_all_reduce_perf(text, nbytes):
    """nccl-tests' out-of-place busbw (GB/s) on the row of `nbytes`: the column under the header's
    first `busbw`; None when there is no such row."""
    column = None
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "#" and "busbw" in tokens and "size" in tokens:
            column = tokens.index("busbw") - 1
        elif column is not None and tokens[0] == str(nbytes) and len(tokens) > column:
            try:
                return float(tokens[column])
            except ValueError:
                return None
    return None


# --- the checks -------------------------------------------------------------------------------


class Check:
    # PASS, FAIL, SKIP (applicable but could not run: counted, not passed) or NA (not applicable
    # on this machine: printed as SKIP ... not applicable, not counted).
    def __init__(self, name, status, detail, extra=()):
        self.name, self.status, self.detail, self.extra = name, status, detail, list(extra)

    def line(self):
        status = "SKIP" if self.status == "NA" else self.status
        return f"{status} {self.name}: {self.detail}"


def problem_check(name, outcome):
    return Check(name, "SKIP" if outcome.skip else "FAIL", outcome.problem)


def gemm_spec(name):
    """gemm-bf16-8192 -> ("bfloat16", 8192), or None."""
    match = re.fullmatch(r"gemm-(bf16|fp16|fp32)-([0-9]+)", name)
    return (DTYPES[match.group(1)], int(match.group(2))) if match else None


def check_gemm(out_dir, runs, name, torch_ref, torch_problem):
    dtype, dim = gemm_spec(name)
    outcome = load_result(out_dir, runs, name)
    if outcome.result is None:
        return problem_check(name, outcome)
    workload = outcome.result.get("workload", {})
    if workload.get("dtype") != dtype or workload.get("compute_dim") != dim:
        return Check(
            name,
            "FAIL",
            f"the result measured {workload.get('dtype')} {workload.get('compute_dim')}^3, not {dtype} {dim}^3",
        )
    mine_ms = row_median(outcome.result, "compute_only")
    if mine_ms is None:
        return Check(name, "FAIL", "the result has no compute_only row")
    mine = tflops(dim, mine_ms)
    repeats = len(
        next((r.get("samples_ms", []) for r in outcome.result["rows"] if r["schedule"] == "compute_only"), [])
    )
    if torch_ref is None:
        return Check(name, "SKIP", f"commgate {mine:.1f} TFLOPS ({fmt_ms(mine_ms)}); {torch_problem}")
    ref = (torch_ref.get("gemm") or {}).get(name)
    if not ref or not ref.get("median_ms"):
        return Check(name, "SKIP", f"commgate {mine:.1f} TFLOPS ({fmt_ms(mine_ms)}); torch measured no {dtype} {dim}^3")
    ref_tflops = tflops(dim, ref["median_ms"])
    held = "" if ref.get("held", True) else " (torch.cuda._sleep missing: torch's window holds a launch latency)"
    # A power-bound GEMM's speed depends on how busy the GPU was just before: torch's held
    # window follows an idle gap, commgate's compute_only sits in a rotation of schedules that
    # keeps the GPU busy. So torch brackets it: held after an idle gap and sustained back to
    # back; commgate must reach the lower, and is noted when beyond the higher.
    sustained_ms = ref.get("sustained_median_ms")
    if sustained_ms:
        sustained = tflops(dim, sustained_ms)
        low, high = min(ref_tflops, sustained), max(ref_tflops, sustained)
        versus = (
            f"torch.mm {ref_tflops:.1f} TFLOPS held after an idle gap ({fmt_ms(ref['median_ms'])}{held}), "
            f"{sustained:.1f} back to back ({fmt_ms(sustained_ms)})"
        )
        against = " to the lower"
    else:
        low = high = ref_tflops
        versus = f"torch.mm {ref_tflops:.1f} TFLOPS ({fmt_ms(ref['median_ms'])}{held})"
        against = ""
    ratio = mine / low
    detail = (
        f"commgate {mine:.1f} TFLOPS (compute_only median {fmt_ms(mine_ms)} of {repeats}) vs {versus}: "
        f"ratio {ratio:.3f}{against}, needs >= {GEMM_MIN_RATIO}"
    )
    if mine / high > GEMM_NOTE_RATIO:
        detail += f"; note: more than {GEMM_NOTE_RATIO - 1:.0%} faster than torch: check the sizes and the math (TF32?)"
    return Check(name, "PASS" if ratio >= GEMM_MIN_RATIO else "FAIL", detail)


GATE_RUNS = (("gate-off", "COMMGATE_CUDA_GATE=off"), ("gate-blocking", "CUDA_LAUNCH_BLOCKING=1"))


def check_gate(out_dir, runs, plan):
    """Two checks: what each run recorded as its timing, and the compute_only medians."""
    ref_name = plan.get("gate_ref", "gemm-bf16-2048")
    outcomes = [(ref_name, "default (gated)", "gated", load_result(out_dir, runs, ref_name))]
    outcomes += [(name, label, "ungated", load_result(out_dir, runs, name)) for name, label in GATE_RUNS]
    bad = [o for _, _, _, o in outcomes if o.result is None]
    if bad:
        # A run that was not made makes both checks SKIP; one that failed makes them FAIL.
        status = "FAIL" if any(not o.skip for o in bad) else "SKIP"
        why = "; ".join(o.problem for o in bad)
        return [Check("gate-timing", status, why), Check("gate-medians", status, why)]

    parts, ok = [], True
    for name, label, expected, outcome in outcomes:
        timing = timing_of(outcome.result)
        noted = stderr_has(out_dir, name, "timing windows are not gated")
        mark = "" if timing == expected else f" (expected {expected})"
        ok = ok and timing == expected
        parts.append(f"{label}: {timing}{mark}, note on stderr: {'yes' if noted else 'no'}")
    timing_check = Check("gate-timing", "PASS" if ok else "FAIL", "; ".join(parts))

    medians = [row_median(o.result, "compute_only") for _, _, _, o in outcomes]
    if any(m is None for m in medians):
        return [timing_check, Check("gate-medians", "FAIL", "a run has no compute_only row")]
    gated = medians[0]
    parts, ok = [f"compute_only medians: gated {fmt_ms(gated)}"], True
    for i in range(1, len(outcomes)):
        label, value = outcomes[i][1], medians[i]
        ratio = value / gated
        ok = ok and ratio >= GATE_MIN_RATIO
        parts.append(f"{label} {fmt_ms(value)} (x{ratio:.3f})")
    detail = ", ".join(parts) + f"; ungated needs >= gated x {GATE_MIN_RATIO} (not faster beyond noise)"
    return [timing_check, Check("gate-medians", "PASS" if ok else "FAIL", detail)]


def schedule_problems(result):
    """The schedule medians and what is inconsistent about them (an empty list: consistent)."""
    m = {s: row_median(result, s) for s in ("comm_only", "compute_only", "serial", "overlap")}
    missing = [s for s, v in m.items() if v is None]
    if missing:
        return m, [f"no {', '.join(missing)} row"], None
    comm, compute, serial, overlap = m["comm_only"], m["compute_only"], m["serial"], m["overlap"]

    def slack(value):
        return max(SCHEDULE_REL * value, SCHEDULE_ABS_MS)

    problems = []
    total = comm + compute
    if abs(serial - total) > slack(total):
        problems.append(
            f"serial {serial - total:+.4f} ms off comm_only + compute_only = {total:.4f} ms "
            f"(allowed +-{slack(total):.4f})"
        )
    low = max(comm, compute)
    low_bound, high_bound = low - slack(low), serial + slack(serial)
    if overlap < low_bound:
        problems.append(f"overlap {overlap:.4f} ms below max(comm_only, compute_only) - slack = {low_bound:.4f} ms")
    if overlap > high_bound:
        problems.append(f"overlap {overlap:.4f} ms above serial + slack = {high_bound:.4f} ms")
    return m, problems, (total, low_bound, high_bound)


def check_schedules(out_dir, runs, plan):
    name = plan.get("primary", "gemm-bf16-8192")
    outcome = load_result(out_dir, runs, name)
    if outcome.result is None:
        return problem_check("schedules", outcome)
    m, problems, bounds = schedule_problems(outcome.result)
    figures = ", ".join(f"{s} {fmt_ms(v)}" for s, v in m.items())
    tolerance = f"each bound +-{SCHEDULE_REL:.0%} or {SCHEDULE_ABS_MS * 1000:.0f} us, the larger"
    if problems:
        return Check("schedules", "FAIL", f"{name}: {figures}: " + "; ".join(problems) + f" ({tolerance})")
    total, low, high = bounds
    return Check(
        "schedules",
        "PASS",
        f"{name}: {figures}: serial ~ comm_only + compute_only = {total:.4f} ms, "
        f"overlap in [{low:.4f}, {high:.4f}] ms ({tolerance})",
    )


def check_memory(out_dir, runs, plan, torch_ref, torch_problem):
    outcome = load_result(out_dir, runs, plan.get("primary", "gemm-bf16-8192"))
    if outcome.result is None:
        return problem_check("gpu-memory", outcome)
    mine = (outcome.result.get("hardware") or {}).get("gpu_memory_mib")
    if mine is None:
        return Check("gpu-memory", "FAIL", "the result has no hardware.gpu_memory_mib")
    if torch_ref is None:
        return Check("gpu-memory", "SKIP", f"result {mine} MiB; {torch_problem}")
    ref = torch_ref.get("total_memory_mib")
    off = abs(mine - ref) / ref
    detail = f"result {mine} MiB vs torch {ref} MiB (total_memory // 2**20): {off:.2%} off, allowed {MEMORY_REL:.0%}"
    return Check("gpu-memory", "PASS" if off <= MEMORY_REL else "FAIL", detail)


def check_topology(out_dir, runs, plan, torch_ref):
    outcome = load_result(out_dir, runs, plan.get("primary", "gemm-bf16-8192"))
    if outcome.result is None:
        return problem_check("topology", outcome)
    hw = outcome.result.get("hardware") or {}
    topology, count = hw.get("topology"), hw.get("gpu_count")
    seen = torch_ref.get("device_count") if torch_ref else plan.get("gpus")
    source = "torch" if torch_ref else plan.get("gpu_source", "the GPU count")
    detail = (
        f"one-rank run: topology {topology}, gpu_count {count} (expected single-gpu, 1); {source} sees {seen} GPU(s)"
    )
    ok = topology == "single-gpu" and count == 1
    return Check("topology", "PASS" if ok else "FAIL", detail)


def check_libraries(out_dir, runs, plan, torch_ref, torch_problem):
    name = plan.get("primary", "gemm-bf16-8192")
    lines = read_lines(os.path.join(out_dir, name + ".maps"))
    if lines is None:
        run = runs.get(name)
        return Check(
            "libraries",
            "SKIP" if run is None or run.status == "not-run" else "FAIL",
            f"no {name}.maps: commgate's loaded libraries were not collected",
        )
    mine = parse_maps(lines)
    if torch_ref is None:
        found = "; ".join(f"{lib} {', '.join(mine[lib]) or '(not loaded)'}" for lib in LIBRARIES)
        return Check("libraries", "SKIP", f"commgate loaded: {found}; {torch_problem}")
    theirs = parse_maps(torch_ref.get("maps") or [])
    site = torch_ref.get("site_libraries") or {}
    loader = torch_ref.get("loader_libraries") or {}
    extra, differ, by_loader = [], [], []
    for lib in LIBRARIES:
        ours = sorted(mine[lib])
        refs = sorted(theirs[lib])
        how = "loaded by torch"
        if not refs:
            refs = sorted(site.get(lib) or [])
            how = "not loaded by torch; torch's site-packages copy"
        extra.append(f"{lib}: commgate {', '.join(ours) or '(not loaded)'}")
        extra.append(f"{' ' * len(lib)}  torch    {', '.join(refs) or '(none)'} ({how})")
        if len(ours) != 1 or not refs:
            differ.append(f"{lib}: commgate {', '.join(ours) or '(not loaded)'}, torch {', '.join(refs) or '(none)'}")
            continue
        path = ours[0]
        same = any(
            os.path.realpath(path) == os.path.realpath(ref)
            or (ref in theirs[lib] and mine[lib][path] == theirs[lib][ref] and mine[lib][path][1] != "0")
            for ref in refs
        )
        if same:
            continue
        # The loader's own copy comes first in commgate's search: taking it is right, not torch's.
        system = loader.get(lib) or []
        if os.path.realpath(path) in system:
            by_loader.append(lib)
            extra.append(f"{' ' * len(lib)}  (the dynamic loader's copy, found by name before torch's)")
            continue
        differ.append(f"{lib}: commgate {path}, torch {', '.join(refs)}")
    if differ:
        return Check("libraries", "FAIL", "not the same files: " + "; ".join(differ), extra)
    if by_loader:
        detail = (
            "commgate (without LD_LIBRARY_PATH) loaded torch's files, or the dynamic loader's where it has one "
            f"({', '.join(by_loader)}: found by name in ldconfig's cache, first in commgate's search)"
        )
    else:
        detail = "commgate (without LD_LIBRARY_PATH) loaded the same libcublas, libcublasLt and libnccl files as torch"
    return Check("libraries", "PASS", detail, extra)


def check_world_n(out_dir, runs, plan):
    gpus = int(plan["gpus"])
    outcome = load_result(out_dir, runs, "world-n")
    if outcome.result is None:
        return problem_check("world-n", outcome)
    r = outcome.result
    hw, workload = r.get("hardware") or {}, r.get("workload") or {}
    busbw = (r.get("metrics") or {}).get("busbw_gbps")
    problems = []
    if workload.get("world_size") != gpus:
        problems.append(f"world_size {workload.get('world_size')}, expected {gpus}")
    if hw.get("gpu_count") != gpus:
        problems.append(f"gpu_count {hw.get('gpu_count')}, expected {gpus}")
    if hw.get("topology") not in TOPOLOGIES_OF_SEVERAL:
        problems.append(f"topology {hw.get('topology')}, expected one of {', '.join(TOPOLOGIES_OF_SEVERAL)}")
    if not busbw or busbw <= 0:
        problems.append(f"busbw_gbps {busbw}")
    _, schedule_issues, _ = schedule_problems(r)
    problems += schedule_issues
    detail = (
        f"{gpus} ranks in one process: topology {hw.get('topology')}, gpu_count {hw.get('gpu_count')}, "
        f"busbw {busbw if busbw is None else round(busbw, 1)} GB/s "
        f"at {workload.get('payload_bytes_per_rank')} B per rank"
    )
    if problems:
        return Check("world-n", "FAIL", detail + ": " + "; ".join(problems))
    return Check("world-n", "PASS", detail + ", schedules consistent")


def check_two_process(out_dir, runs, plan):
    outcome = load_result(out_dir, runs, "two-proc")
    peer = runs.get("two-proc-rank1")
    if outcome.result is None:
        return problem_check("two-process", outcome)
    if peer is None or peer.rc != 0:
        status = "not run" if peer is None else f"exited {peer.status}"
        why = stderr_reason(out_dir, "two-proc-rank1") or "no message"
        return Check("two-process", "FAIL", f"rank 0 finished but rank 1 {status}: {why}")
    r = outcome.result
    world = (r.get("workload") or {}).get("world_size")
    busbw = (r.get("metrics") or {}).get("busbw_gbps")
    detail = (
        f"RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT launch, 2 processes: both exited 0, "
        f"world_size {world}, busbw {busbw if busbw is None else round(busbw, 1)} GB/s"
    )
    ok = world == 2 and busbw is not None and busbw > 0
    return Check(
        "two-process", "PASS" if ok else "FAIL", detail + ("" if ok else ": expected world_size 2 and a busbw")
    )


def check_killed_peer(out_dir, runs, plan):
    deadline = float(plan.get("kill_deadline_s", 90))
    run = runs.get("killed-peer")
    if run is None or run.status == "not-run":
        return Check("killed-peer", "SKIP", f"not run: {run.note if run else 'the script stopped before it'}")
    if run.note.startswith("early"):
        return Check(
            "killed-peer",
            "FAIL",
            f"rank 0 exited {run.status} before its peer was killed: {stderr_reason(out_dir, 'killed-peer')}",
        )
    if run.status == "hung":
        return Check(
            "killed-peer", "FAIL", f"rank 0 still ran {deadline:.0f} s after its peer was killed (hung; killed)"
        )
    failure = None
    path = os.path.join(out_dir, "killed-peer.json")
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                failure = json.load(f).get("failure")
        except (OSError, ValueError):
            pass
    said = f"; failure {failure.get('kind')}: {failure.get('message')}" if failure else ""
    if not said:
        reason = stderr_reason(out_dir, "killed-peer")
        said = f"; stderr: {reason}" if reason else ""
    seconds = run.seconds if run.seconds is not None else float("inf")
    detail = f"rank 0 exited {run.status} {seconds:.0f} s after rank 1 was killed (deadline {deadline:.0f} s){said}"
    ok = run.rc not in (None, 0) and seconds <= deadline
    return Check("killed-peer", "PASS" if ok else "FAIL", detail)


def check_busbw(out_dir, runs, plan):
    nbytes = int(plan.get("busbw_bytes", BUSBW_MIN_BYTES))
    if nbytes < BUSBW_MIN_BYTES:
        return Check("busbw", "SKIP", f"compared only at >= {BUSBW_MIN_BYTES} B per rank, not {nbytes}")
    nt = runs.get("all_reduce_perf")
    if nt is None or nt.status == "not-run":
        return Check("busbw", "SKIP", f"no nccl-tests reference: {nt.note if nt else 'all_reduce_perf was not run'}")
    outcome = load_result(out_dir, runs, "world-n")
    if outcome.result is None:
        return problem_check("busbw", outcome)
    text = "\n".join(read_lines(os.path.join(out_dir, "all_reduce_perf.log")) or [])
    ref = parse_all_reduce_perf(text, nbytes)
    if nt.rc != 0 or ref is None:
        return Check(
            "busbw",
            "FAIL",
            f"all_reduce_perf exited {nt.status} with no busbw row for {nbytes} B (all_reduce_perf.log)",
        )
    r = outcome.result
    n = r["workload"]["world_size"]
    comm = row_median(r, "comm_only")
    payload = r["workload"]["payload_bytes_per_rank"]
    if payload != nbytes:
        return Check("busbw", "FAIL", f"commgate's payload is {payload} B per rank, nccl-tests' {nbytes} B")
    mine = payload / (comm * 1e-3) * 2 * (n - 1) / n / 1e9
    tol = busbw_tolerance(nbytes)
    ratio = mine / ref
    detail = (
        f"commgate {mine:.1f} GB/s (comm_only median {fmt_ms(comm)}) vs all_reduce_perf {ref:.1f} GB/s "
        f"(out-of-place, {nbytes} B, {n} GPUs): ratio {ratio:.3f}, needs >= {1 - tol:.3f} "
        f"(tolerance {tol:.1%} at {nbytes / 2**20:.0f} MiB)"
    )
    if ratio > 1 + tol:
        detail += "; note: faster than nccl-tests beyond the tolerance: check the sizes and the bus factor"
    return Check("busbw", "PASS" if ratio >= 1 - tol else "FAIL", detail)


# What the checks against torch and nccl-tests compare: a GPU's speed, memory and libraries,
# which commgate's emulated GPUs (plan.txt emulator=1) do not have.
GPU_ONLY = "not applicable on the emulator (it compares with a GPU's torch or nccl-tests); not counted"


def emulated(plan):
    return plan.get("emulator") == "1"


def evaluate(out_dir):
    plan = read_plan(out_dir)
    runs = read_runs(out_dir)
    gpus = int(plan.get("gpus", "1"))
    torch_ref, torch_problem = load_torch(out_dir, runs)
    on_emulator = emulated(plan)
    checks = []
    gemms = [name for name in runs if gemm_spec(name)]
    for name in gemms:
        if on_emulator:
            checks.append(Check(name, "NA", GPU_ONLY))
        else:
            checks.append(check_gemm(out_dir, runs, name, torch_ref, torch_problem))
    checks += check_gate(out_dir, runs, plan)
    checks.append(check_schedules(out_dir, runs, plan))
    if on_emulator:
        checks.append(Check("gpu-memory", "NA", GPU_ONLY))
    else:
        checks.append(check_memory(out_dir, runs, plan, torch_ref, torch_problem))
    checks.append(check_topology(out_dir, runs, plan, torch_ref))
    if on_emulator:
        checks.append(Check("libraries", "NA", GPU_ONLY))
    else:
        checks.append(check_libraries(out_dir, runs, plan, torch_ref, torch_problem))
    if gpus >= 2:
        checks.append(check_world_n(out_dir, runs, plan))
        checks.append(check_two_process(out_dir, runs, plan))
        checks.append(check_killed_peer(out_dir, runs, plan))
        if on_emulator:
            checks.append(Check("busbw", "NA", GPU_ONLY))
        else:
            checks.append(check_busbw(out_dir, runs, plan))
    else:
        for name in MULTI_GPU_CHECKS:
            checks.append(Check(name, "NA", f"not applicable on {gpus} GPU (needs 2 GPUs); not counted"))
    return plan, checks


def report(out_dir, out=None):
    """Prints the checks and the tally; returns the exit code."""
    out = out or sys.stdout
    plan, checks = evaluate(out_dir)
    on_emulator = emulated(plan)
    if on_emulator:
        print(
            "EMULATOR: these runs used commgate's emulated GPUs (scripts/fake-gpu.sh), not a GPU: they check the "
            "script and the CUDA path's calls, failures and teardown, never a GPU's speed",
            file=out,
        )
    for check in checks:
        print(check.line(), file=out)
        for line in check.extra:
            print("    " + line, file=out)
    counted = [c for c in checks if c.status != "NA"]
    passed = [c for c in counted if c.status == "PASS"]
    failed = [c for c in counted if c.status == "FAIL"]
    skipped = [c for c in counted if c.status == "SKIP"]
    where = " on the emulator (not a GPU)" if on_emulator else ""
    print(f"{len(passed)} of {len(counted)} checks passed{where}", file=out)
    if failed:
        print(f"FAILED: {', '.join(c.name for c in failed)}", file=out)
        return 1
    if skipped:
        print(
            f"not validated: {len(skipped)} of {len(counted)} checks could not run "
            f"({', '.join(c.name for c in skipped)})",
            file=out,
        )
        return 2
    if on_emulator:
        print("validated: the emulator, not a GPU: run this script on a GPU machine to validate a GPU", file=out)
    return 0


# --- measuring and watching (gpu-validate.sh calls these) ------------------------------------


def visible_from_smi(listing, visible):
    """GPUs a CUDA program may use: `nvidia-smi -L`'s GPUs filtered by CUDA_VISIBLE_DEVICES
    (`visible`, None when unset) as CUDA reads it: indices or UUID prefixes, comma-separated,
    up to the first entry that names no GPU (or one named twice)."""
    gpus = []
    for line in listing.splitlines():
        match = re.match(r"\s*GPU (\d+):.*\(UUID: (GPU-[0-9A-Fa-f-]+)\)", line)
        if match:
            gpus.append((int(match.group(1)), match.group(2).lower()))
    if visible is None:
        return len(gpus)
    chosen = []
    for entry in visible.split(","):
        entry = entry.strip().lower()
        if entry.isdigit():
            hits = [g for g in gpus if g[0] == int(entry)]
        elif entry.startswith("gpu-"):
            hits = [g for g in gpus if g[1].startswith(entry)]
        else:
            hits = []
        if len(hits) != 1 or hits[0] in chosen:
            break
        chosen.append(hits[0])
    return len(chosen)


def count_gpus():
    """(count, how it was counted, GPU name or '')."""
    torch_why = None
    try:
        import torch  # noqa: PLC0415  (only where torch may be used)

        if torch.version.cuda is not None:
            n = torch.cuda.device_count()
            name = torch.cuda.get_device_name(0) if n else ""
            return n, f"torch {torch.__version__} (torch.cuda.device_count() is {n})", name
        torch_why = f"torch {torch.__version__} has no CUDA"
    except Exception as e:  # noqa: BLE001  (any failure to import means: no torch here)
        torch_why = f"torch not importable ({type(e).__name__}: {e})"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0, f"nvidia-smi not on PATH and {torch_why}", ""
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return 0, f"nvidia-smi -L failed ({e}) and {torch_why}", ""
    n = visible_from_smi(listing, os.environ.get("CUDA_VISIBLE_DEVICES"))
    first = re.search(r"GPU \d+: (.*?) \(UUID", listing)
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    how = "nvidia-smi -L" + (f" with CUDA_VISIBLE_DEVICES={cvd}" if cvd is not None else "") + f"; {torch_why}"
    return n, how, first.group(1) if first and n else ""


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_state(pid):
    """The state letter of /proc/PID/stat, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def descendants(pid):
    """PID and every process below it (the script's `timeout` wrapper, commgate's re-exec)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def watch_maps(pid, out_path, interval=0.1, limit_s=900):
    seen = {}
    start = time.monotonic()
    while process_state(pid) not in (None, "Z") and time.monotonic() - start < limit_s:
        for p in descendants(pid):
            try:
                with open(f"/proc/{p}/maps", encoding="utf-8", errors="replace") as f:
                    for line in f:
                        parts = line.split(None, 5)
                        if len(parts) == 6 and LIBRARY_PATH.search(without_deleted(parts[5].strip())):
                            seen.setdefault(parts[5].strip(), line.rstrip("\n"))
            except OSError:
                continue
        time.sleep(interval)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(f"# libcublas/libcublasLt/libnccl lines of /proc/PID/maps of pid {pid} and its descendants\n")
        for path in sorted(seen):
            f.write(seen[path] + "\n")


def loader_libraries():
    """What the dynamic loader finds by name without LD_LIBRARY_PATH (`ldconfig -p`, the cache
    of /etc/ld.so.conf's directories): {lib: [real paths]}. commgate asks the loader first and
    falls back to torch's site-packages copies only when it finds none (docs/install.md)."""
    found = {lib: [] for lib in LIBRARIES}
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return found
    for line in listing.splitlines():
        _, arrow, path = line.partition("=>")
        match = LIBRARY_PATH.search(path.strip()) if arrow else None
        if match:
            real = os.path.realpath(path.strip())
            if real not in found[match.group(1)]:
                found[match.group(1)].append(real)
    return found


def site_libraries(extra_dirs):
    """torch's own copies: nvidia/*/lib/{libcublas,libcublasLt,libnccl}.so* under site-packages."""
    import site  # noqa: PLC0415

    roots = list(extra_dirs)
    with contextlib.suppress(Exception):
        roots += site.getsitepackages()
    with contextlib.suppress(Exception):
        roots.append(site.getusersitepackages())
    found = {lib: [] for lib in LIBRARIES}
    for root in dict.fromkeys(roots):
        nvidia = os.path.join(root, "nvidia")
        if not os.path.isdir(nvidia):
            continue
        for sub in sorted(os.listdir(nvidia)):
            libdir = os.path.join(nvidia, sub, "lib")
            if not os.path.isdir(libdir):
                continue
            for entry in sorted(os.listdir(libdir)):
                match = LIBRARY_PATH.search("/" + entry)
                if match:
                    path = os.path.realpath(os.path.join(libdir, entry))
                    if path not in found[match.group(1)]:
                        found[match.group(1)].append(path)
    return found


def time_mm(torch, short, n, warmup, repeats):
    """The windows (ms) of `repeats` single n x n x n matmuls after `warmup` untimed ones: held
    (torch.cuda._sleep first, as commgate's gate holds the GPU), plain (an idle GPU) and sustained
    (back to back, the GPU never idle)."""
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[short]
    a = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
    b = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
    c = torch.empty(n, n, device="cuda", dtype=dt)
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    sleep = getattr(torch.cuda, "_sleep", None)
    for _ in range(warmup):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()

    def window_ms(hold):
        if hold:
            sleep(HOLD_CYCLES)
        start.record()
        torch.mm(a, b, out=c)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    held = [window_ms(sleep is not None) for _ in range(repeats)]
    plain = [window_ms(False) for _ in range(repeats)]
    # Back to back: one event between consecutive matmuls, the GPU never idle. A power-bound
    # GEMM (bf16 8192^3 on an H200) runs 10-15 % slower so than right after an idle gap.
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
    marks[0].record()
    for mark in marks[1:]:
        torch.mm(a, b, out=c)
        mark.record()
    torch.cuda.synchronize()
    sustained = [marks[i].elapsed_time(marks[i + 1]) for i in range(repeats)]
    return held, plain, sustained


def torch_ref(out_path, specs, warmup, repeats):
    """torch.mm timed as commgate's gated compute_only: torch.cuda._sleep keeps the GPU busy while
    the host queues start event, matmul and stop event, so the window opens when the GPU gets to
    it and holds no launch latency; one matmul per window, median over the repeats."""
    import torch  # noqa: PLC0415  (the only place the logic needs torch)

    if not torch.cuda.is_available():
        print("torch.cuda.is_available() is False", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 as cublasSgemm computes it
    with contextlib.suppress(AttributeError):
        torch.set_float32_matmul_precision("highest")
    props = torch.cuda.get_device_properties(0)
    sleep = getattr(torch.cuda, "_sleep", None)
    out = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_name": props.name,
        "device_count": torch.cuda.device_count(),
        "total_memory_bytes": props.total_memory,
        "total_memory_mib": props.total_memory // 2**20,
        "held": sleep is not None,
        "hold_cycles": HOLD_CYCLES,
        "warmup": warmup,
        "repeats": repeats,
        "gemm": {},
    }
    for spec in specs:
        short, dim = spec.split(":")
        held, plain, sustained = time_mm(torch, short, int(dim), warmup, repeats)
        out["gemm"][f"gemm-{short}-{int(dim)}"] = {
            "dtype": DTYPES[short],
            "dim": int(dim),
            "median_ms": median(held),
            "plain_median_ms": median(plain),
            "sustained_median_ms": median(sustained),
            "held": sleep is not None,
            "tf32": torch.backends.cuda.matmul.allow_tf32,
        }
        torch.cuda.empty_cache()
    with contextlib.suppress(Exception):
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # also loads libnccl if lazy
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        lines = {}
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and LIBRARY_PATH.search(without_deleted(parts[5].strip())):
                lines.setdefault(parts[5].strip(), line.rstrip("\n"))
    out["maps"] = [lines[p] for p in sorted(lines)]
    out["site_libraries"] = site_libraries([os.path.dirname(os.path.dirname(torch.__file__))])
    out["loader_libraries"] = loader_libraries()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    return 0


# --- the selftest ---------------------------------------------------------------------------


def build_case(fixtures, case, into):
    """Copies the case's directories (later ones win) into `into`, then applies its changes."""
    for d in case["dirs"]:
        src = os.path.join(fixtures, d)
        for entry in os.listdir(src):
            shutil.copyfile(os.path.join(src, entry), os.path.join(into, entry))
    for src, dst in case.get("copy", {}).items():
        shutil.copyfile(os.path.join(fixtures, src), os.path.join(into, dst))
    for name in case.get("delete", []):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(into, name))
    if "runs" in case:
        # Appended: a later line of a name replaces the earlier one (read_runs keeps its place).
        with open(os.path.join(into, "runs.tsv"), "a", encoding="utf-8") as f:
            for name, line in case["runs"].items():
                f.write(f"{name}\t{line}\n")
    if "plan" in case:
        plan = read_plan(into)
        plan.update(case["plan"])
        with open(os.path.join(into, "plan.txt"), "w", encoding="utf-8") as f:
            for key, value in plan.items():
                f.write(f"{key}={value}\n")


def selftest(fixtures):
    """Runs every case of FIXTURES/cases.json through `report` and checks each named check's
    status, the text its line must hold, the tally line and the exit code; then the helpers on
    recorded nvidia-smi and nccl-tests output. Returns 0 when all hold."""
    failures = []

    def expect(condition, what):
        if not condition:
            failures.append(what)

    with open(os.path.join(fixtures, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="gpu-validate-selftest.") as tmp:
            build_case(fixtures, case, tmp)
            buf = io.StringIO()
            code = report(tmp, buf)
            text = buf.getvalue()
            lines = text.splitlines()
            name = case["name"]
            expect(code == case["exit"], f"{name}: exit {code}, expected {case['exit']}\n{text}")
            expect(case["tally"] in lines, f"{name}: no line {case['tally']!r}\n{text}")
            for check, want in case.get("checks", {}).items():
                status, *fragments = want if isinstance(want, list) else [want]
                line = next((ln for ln in lines if re.match(rf"(PASS|FAIL|SKIP) {re.escape(check)}:", ln)), None)
                expect(line is not None, f"{name}: no line for {check}\n{text}")
                if line is None:
                    continue
                expect(line.startswith(status + " "), f"{name}: {check}: {line!r}, expected {status}")
                for fragment in fragments:
                    expect(fragment in text, f"{name}: {check}: {fragment!r} not in the output\n{text}")
            for fragment in case.get("output", []):
                expect(fragment in text, f"{name}: {fragment!r} not in the output\n{text}")
            for line in lines:
                if not line.startswith("    "):
                    expect(
                        re.match(r"(PASS|FAIL|SKIP) [a-z0-9-]+: ", line)
                        or re.match(r"\d+ of \d+ checks passed$", line)
                        or line.startswith(("FAILED: ", "not validated: ")),
                        f"{name}: a line of unknown shape: {line!r}",
                    )
            if case.get("cli"):
                # The same through the command line: the exit code reaches the shell.
                proc = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "report", tmp], capture_output=True, text=True
                )
                expect(proc.returncode == case["exit"], f"{name}: the CLI exited {proc.returncode}\n{proc.stderr}")
                expect(proc.stdout == text, f"{name}: the CLI printed something else")
            print(f"selftest: {name}: exit {code}: {case['tally']}")

    # CUDA_VISIBLE_DEVICES over a recorded `nvidia-smi -L` of eight H200s.
    with open(os.path.join(fixtures, "nvidia-smi-L.txt"), encoding="utf-8") as f:
        listing = f.read()
    for visible, want in [
        (None, 8),
        ("", 0),
        ("-1", 0),
        ("3", 1),
        ("1,3", 2),
        ("0,9,1", 1),
        ("2,2", 1),
        ("GPU-5f1c0f8e", 1),
        ("GPU-5f1c0f8e,GPU-0b2d", 2),
        ("GPU-", 0),
        ("MIG-1", 0),
    ]:
        got = visible_from_smi(listing, visible)
        expect(got == want, f"CUDA_VISIBLE_DEVICES={visible!r}: {got} GPUs, expected {want}")

    with open(os.path.join(fixtures, "h200x2", "all_reduce_perf.log"), encoding="utf-8") as f:
        log = f.read()
    expect(parse_all_reduce_perf(log, 268435456) == 361.89, "all_reduce_perf: the out-of-place busbw of 256 MiB")
    expect(parse_all_reduce_perf(log, 1234) is None, "all_reduce_perf: a size it has no row for")
    expect(abs(busbw_tolerance(256 * 2**20) - 0.10) < 1e-12, "busbw tolerance at 256 MiB")
    expect(abs(busbw_tolerance(2**30) - 0.0625) < 1e-12, "busbw tolerance at 1 GiB")
    maps = parse_maps(
        [
            "7f00-7f10 r-xp 00000000 fd:01 42 /x/nvidia/cublas/lib/libcublasLt.so.12 (deleted)",
            "7f10-7f20 r-xp 00000000 fd:01 43 /x/nvidia/cublas/lib/libcublas.so.12",
            "7f20-7f30 r-xp 00000000 fd:01 44 /x/nvidia/nccl/lib/libnccl.so.2",
            "7f30-7f40 r-xp 00000000 fd:01 45 /x/libnccl-net.so",
            "7f40-7f50 r-xp 00000000 fd:01 46 /x/libcublas.so.12.txt",
        ]
    )
    expect(
        {lib: list(paths) for lib, paths in maps.items()}
        == {
            "libcublas": ["/x/nvidia/cublas/lib/libcublas.so.12"],
            "libcublasLt": ["/x/nvidia/cublas/lib/libcublasLt.so.12"],
            "libnccl": ["/x/nvidia/nccl/lib/libnccl.so.2"],
        },
        f"parse_maps: {maps}",
    )
    expect(median([3.0, 1.0, 2.0, 10.0]) == 2.5, "median interpolates")

    for failure in failures:
        print("selftest: FAILED: " + failure, file=sys.stderr)
    print(f"selftest: {len(cases)} cases; " + ("all passed" if not failures else f"{len(failures)} failures"))
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("count-gpus")
    sub.add_parser("free-port")
    p = sub.add_parser("watch-maps")
    p.add_argument("pid", type=int)
    p.add_argument("out")
    p = sub.add_parser("torch-ref")
    p.add_argument("out")
    p.add_argument("specs", nargs="+", help="bf16:8192 fp32:2048 ...")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=100)
    p = sub.add_parser("report")
    p.add_argument("dir")
    p = sub.add_parser("selftest")
    p.add_argument("fixtures")
    args = parser.parse_args(argv)
    if args.command == "count-gpus":
        n, how, name = count_gpus()
        print(f"{n}\t{how}\t{name}")
        return 0
    if args.command == "free-port":
        print(free_port())
        return 0
    if args.command == "watch-maps":
        watch_maps(args.pid, args.out)
        return 0
    if args.command == "torch-ref":
        return torch_ref(args.out, args.specs, args.warmup, args.repeats)
    if args.command == "report":
        return report(args.dir)
    return selftest(args.fixtures)


if __name__ == "__main__":
    sys.exit(main())

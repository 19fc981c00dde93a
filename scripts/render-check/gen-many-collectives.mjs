// Writes synthetic Kineto traces (one JSON file per rank) whose communication kernels carry
// COUNT distinct collective names, so that `commgate check --traces` has to fold a huge hotspot
// list into a comment under GitHub's size limit. A handful of names are hostile (Markdown, HTML,
// mermaid and table syntax): the rendered page must still show an intact table.
//
//   node gen-many-collectives.mjs OUT_DIR [COUNT] [RANKS]
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [out, countArg = "3000", ranksArg = "2"] = process.argv.slice(2);
if (!out) {
  console.error("usage: node gen-many-collectives.mjs OUT_DIR [COUNT] [RANKS]");
  process.exit(2);
}
const count = Number(countArg);
const ranks = Number(ranksArg);
const HOSTILE = [
  "<script>alert(1)</script>",
  "a|b|c",
  "**bold** [x](javascript:alert(1))",
  "```mermaid",
  "</details><details open>",
  "@everyone #1",
];
// The hostile names come last, after the compute kernel ends: nothing hides their time.
const hostile = (i) => i >= count - HOSTILE.length;
const name = (i) => (hostile(i) ? HOSTILE[count - 1 - i] : `custom_coll_${String(i).padStart(5, "0")}`);

mkdirSync(out, { recursive: true });
for (let rank = 0; rank < ranks; rank++) {
  const events = [
    { ph: "M", name: "process_name", pid: 0, args: { name: "GPU 0" } },
    { ph: "X", cat: "user_annotation", name: "ProfilerStep#1", pid: 1, tid: 1, ts: 0, dur: count * 15 + 100 },
  ];
  let ts = 10;
  for (let i = 0; i < count; i++) {
    const corr = i + 1;
    // Every collective gets its own duration (the hostile names the longest, so they reach the
    // comment's hotspot table); kernels never overlap one another.
    const dur = (hostile(i) ? 14 : 2 + ((i * 7919) % 997) / 100) + rank * 0.01;
    events.push({
      ph: "X", cat: "kernel", name: "ncclDevKernel_Generic", pid: 0, tid: 7, ts, dur,
      args: { correlation: corr, stream: 7, "Collective name": name(i), "In msg nelems": 1024,
              "Out msg nelems": 1024, dtype: "Float", "Process Group Name": "0", Seq: i },
    });
    events.push({ ph: "X", cat: "cuda_runtime", name: "cudaLaunchKernel", pid: 1, tid: 2, ts: ts - 1, dur: 0.5,
                  args: { correlation: corr } });
    ts += 15;
  }
  // Compute on another stream over the first half, so that overlap is not trivially zero.
  events.push({ ph: "X", cat: "kernel", name: "ampere_bf16_gemm", pid: 0, tid: 8, ts: 5, dur: count * 7,
                args: { correlation: count + 1, stream: 8 } });
  const trace = { schemaVersion: 1, distributedInfo: { rank, world_size: ranks }, traceEvents: events };
  writeFileSync(join(out, `rank-${rank}.json`), JSON.stringify(trace));
}
console.log(`wrote ${ranks} traces with ${count} collectives to ${out}`);

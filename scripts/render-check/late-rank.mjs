// Writes a copy of Kineto traces (one `rank-N.json.gz` per rank) in which every rank but LATE
// spends FACTOR times longer in each all_to_all kernel: the others wait for a late rank, so
// `commgate check --traces` against the originals reports all_to_all regressed with cause `wait`
// and LATE as the late rank. Used by render-check.sh for the trace-regression report.
//
//   node late-rank.mjs IN_DIR OUT_DIR [LATE] [FACTOR]
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";

const [input, out, lateArg = "5", factorArg = "3"] = process.argv.slice(2);
if (!input || !out) {
  console.error("usage: node late-rank.mjs IN_DIR OUT_DIR [LATE] [FACTOR]");
  process.exit(2);
}
const late = Number(lateArg);
const factor = Number(factorArg);
mkdirSync(out, { recursive: true });
for (const file of readdirSync(input).filter((f) => /^rank-\d+\.json\.gz$/.test(f))) {
  const rank = Number(file.match(/\d+/)[0]);
  const doc = JSON.parse(gunzipSync(readFileSync(join(input, file))).toString("utf8"));
  for (const e of doc.traceEvents) {
    if (rank !== late && e.cat === "kernel" && e.args?.["Collective name"] === "all_to_all") {
      e.dur = Number((e.dur * factor).toFixed(3));
    }
  }
  writeFileSync(join(out, file), gzipSync(JSON.stringify(doc)));
}

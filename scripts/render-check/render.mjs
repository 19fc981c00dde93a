// Renders commgate PR comments (Markdown files) the way GitHub shows them, in headless Chromium,
// and fails on what a reader of the pull request would see broken:
//   - a ```mermaid block that mermaid cannot parse or render (GitHub shows an error box instead),
//   - a chart that renders empty (no bars or lines with a non-zero size in its plot group, not
//     one bar per x-axis category, or not one drawn line per line series),
//   - a comment whose top-level structure is off: no marker first, no verdict heading, a metric
//     table without its chart, a table or fence that did not parse (raw `|` or ``` left in text),
//     a `<details>` block that lost its summary or got nested, an element GitHub would strip
//     (script, iframe, img, event handlers, javascript: links) — a sign that a string from a file
//     reached the comment unescaped,
//   - a comment over GitHub's 65,536-character limit.
//
//   node render.mjs --chromium PATH [--screenshot PNG] REPORT.md...
//
// Exit: 0 every report renders; 1 a report failed (one line per problem, naming the report);
// 2 usage or setup error. Nothing is fetched from the network: the page is built in memory,
// mermaid is injected from node_modules, and every request the page makes is refused and
// reported as a problem.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createRequire } from "node:module";
import { Marked } from "marked";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const MERMAID_JS = require.resolve("mermaid/dist/mermaid.min.js");
const MERMAID_VERSION = JSON.parse(readFileSync(join(dirname(MERMAID_JS), "..", "package.json"), "utf8")).version;
const GITHUB_COMMENT_LIMIT = 65_536;
const LAUNCH_FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

function parseArgs(argv) {
  const opts = { chromium: "/usr/bin/chromium", screenshot: null, reports: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--chromium" || a === "--screenshot") {
      const v = argv[++i];
      if (!v) throw new Error(`${a} needs a value`);
      opts[a.slice(2)] = v;
    } else if (a.startsWith("--")) {
      throw new Error(`unknown flag ${a}`);
    } else {
      opts.reports.push(a);
    }
  }
  if (opts.reports.length === 0) throw new Error("no report given");
  return opts;
}

/** GFM to HTML as GitHub does it (tables, raw <details>); mermaid fences become placeholders. */
function toHtml(markdown) {
  const marked = new Marked({ gfm: true });
  marked.use({
    renderer: {
      code(token) {
        if (token.lang !== "mermaid") return false;
        const text = token.text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
        return `<pre class="mermaid-src">${text}</pre>\n`;
      },
    },
  });
  return marked.parse(markdown);
}

/** Checks on the Markdown text itself, before any rendering. */
function sourceProblems(markdown) {
  const problems = [];
  const chars = [...markdown].length;
  if (chars > GITHUB_COMMENT_LIMIT) {
    problems.push(`${chars} characters, over GitHub's ${GITHUB_COMMENT_LIMIT}-character comment limit`);
  }
  if (!markdown.startsWith("<!-- commgate-report -->\n")) {
    problems.push("does not start with the hidden <!-- commgate-report --> marker line (the comment would not be found to update)");
  }
  problems.push(...tableRowProblems(markdown));
  return problems;
}

/**
 * GFM drops a row's extra cells and pads missing ones without a word, so a name whose `|` was
 * not escaped shifts a row silently; the rendered page cannot show it, the source can. Counts
 * the unescaped pipes of every table line outside code fences against its header's.
 */
function tableRowProblems(markdown) {
  const problems = [];
  const pipes = (line) => (line.match(/(?<!\\)\|/g) || []).length;
  let fenced = false;
  let header = null;
  for (const [i, line] of markdown.split("\n").entries()) {
    if (line.startsWith("```")) fenced = !fenced;
    if (fenced || !line.startsWith("|")) {
      header = null;
      continue;
    }
    if (header === null) {
      header = { count: pipes(line), line: i + 1 };
    } else if (pipes(line) !== header.count) {
      problems.push(`line ${i + 1}: a table row with ${pipes(line) - 1} cells under a ${header.count - 1}-cell header (line ${header.line}): an unescaped "|"?`);
    }
  }
  return problems;
}

const PAGE_CSS = `
  body { font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; color: #1f2328;
         margin: 0; padding: 16px; background: #fff; width: 880px; }
  #comment { border: 1px solid #d1d9e0; border-radius: 6px; padding: 16px; }
  table { border-collapse: collapse; margin: 8px 0; display: block; overflow: auto; }
  th, td { border: 1px solid #d1d9e0; padding: 4px 10px; }
  th { background: #f6f8fa; }
  code { background: #eff1f3; border-radius: 4px; padding: 1px 4px; font-size: 85%; }
  details { margin: 8px 0; }
  summary { cursor: pointer; }
  .mermaid-out { margin: 8px 0; }
`;

/** The in-page checks; runs in Chromium, returns problems and figures. */
async function renderInPage() {
  const problems = [];
  const root = document.getElementById("comment");
  const mermaid = window.mermaid;
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "default" });
  // A chart inside a folded <details> is measured as the reader sees it once they open it; the
  // blocks fold again after the checks (the screenshot shows the comment as it arrives).
  const folded = [...root.querySelectorAll("details")].filter((d) => !d.open);
  for (const d of folded) d.open = true;

  // 1. Every mermaid block renders, and draws something.
  const sources = [...root.querySelectorAll("pre.mermaid-src")];
  const charts = [];
  for (const [i, pre] of sources.entries()) {
    const text = pre.textContent;
    const out = document.createElement("div");
    out.className = "mermaid-out";
    pre.replaceWith(out);
    try {
      await mermaid.parse(text);
      const { svg } = await mermaid.render(`chart-${i}`, text);
      out.innerHTML = svg;
    } catch (e) {
      problems.push(`mermaid block ${i + 1}: ${String(e && e.message ? e.message : e).split("\n").join(" ")}`);
      continue;
    }
    const el = out.querySelector("svg");
    const box = el ? el.getBoundingClientRect() : { width: 0, height: 0 };
    const sized = (n) => {
      const b = n.getBBox();
      return b.width > 0 && b.height > 0;
    };
    const plot = el && el.querySelector("g.plot");
    const bars = plot ? [...plot.querySelectorAll("rect")].filter(sized).length : 0;
    // A flat line (the ±δ band) has a zero-height box: a line is drawn when it has a width.
    const lines = plot ? [...plot.querySelectorAll("path")].filter((n) => n.getBBox().width > 0).length : 0;
    const lineSeries = (text.match(/^\s*line\s/gm) || []).length;
    const categories = (text.match(/x-axis\s*\[(.*)\]/) || [null, ""])[1].split(",").filter((s) => s.trim()).length;
    charts.push({ width: Math.round(box.width), height: Math.round(box.height), bars, lines, categories });
    if (!(box.width > 0 && box.height > 0)) problems.push(`mermaid block ${i + 1}: the chart has an empty bounding box`);
    if (/^\s*gantt/m.test(text)) {
      // Every task of a gantt draws a bar a reader can see.
      const tasks = (text.match(/^\s*[^%\s][^:\n]*:\s*(?:(?:crit|done|active),\s*)*b\d+,/gm) || []).length;
      const drawn = el ? [...el.querySelectorAll("rect")].filter((n) => /-b\d+$/.test(n.id) && sized(n)).length : 0;
      if (tasks === 0 || drawn !== tasks) problems.push(`mermaid block ${i + 1}: ${drawn} visible bars for ${tasks} gantt tasks`);
    }
    if (/^\s*xychart/m.test(text)) {
      if (!plot) problems.push(`mermaid block ${i + 1}: no plot group in the rendered chart`);
      if (/^\s*bar\s*\[/m.test(text) && bars !== categories) {
        problems.push(`mermaid block ${i + 1}: ${bars} visible bars for ${categories} x-axis categories`);
      }
      if (lines !== lineSeries) problems.push(`mermaid block ${i + 1}: ${lines} visible lines for ${lineSeries} line series`);
      // The x-axis labels side by side, none over its neighbour (a reader cannot tell which is which).
      const labels = el ? [...el.querySelectorAll("g.bottom-axis text, g[class*='bottom-axis'] text")] : [];
      const boxes = labels.map((n) => n.getBoundingClientRect()).filter((b) => b.width > 0).sort((a, b) => a.left - b.left);
      for (let k = 1; k < boxes.length; k++) {
        if (boxes[k].left < boxes[k - 1].right - 0.5) {
          problems.push(`mermaid block ${i + 1}: x-axis labels ${k} and ${k + 1} overlap (shorten the labels or widen the chart)`);
          break;
        }
      }
    }
  }

  // 2. Top-level structure.
  const first = root.firstElementChild;
  const heading = first && first.tagName === "H3" ? first.textContent : "";
  if (!/^(🟢|🟡|🔴|⛔) commgate( [a-z_]+)?: /u.test(heading)) {
    problems.push(`the first element is not the verdict heading "### <icon> commgate[ <verdict>]: …" (found <${first ? first.tagName.toLowerCase() : "nothing"}> ${JSON.stringify((first ? first.textContent : "").slice(0, 80))})`);
  }
  const tables = [...root.querySelectorAll("table")];
  for (const t of tables) {
    const header = t.querySelectorAll("thead th").length;
    const rows = [...t.querySelectorAll("tbody tr")];
    if (header === 0 || rows.length === 0) problems.push("a table with no header or no rows");
    for (const r of rows) {
      if (r.children.length !== header) {
        problems.push(`table "${t.querySelector("th")?.textContent}": a row has ${r.children.length} cells, not ${header}`);
        break;
      }
    }
  }
  // The metric table's one chart is its xychart; a gantt of the replayed step may sit elsewhere.
  const metricTable = tables.some((t) => t.querySelector("th")?.textContent === "metric");
  const xycharts = sources.filter((s) => /^\s*xychart/m.test(s.textContent)).length;
  if (metricTable && xycharts !== 1) problems.push(`a metric table with ${xycharts} charts next to it, not 1`);
  for (const p of root.querySelectorAll("p, li")) {
    const text = p.textContent;
    if (/^\s*\|.*\|\s*$/m.test(text)) problems.push(`a table left as text: ${JSON.stringify(text.slice(0, 80))}`);
    if (text.includes("```")) problems.push(`a code fence left as text: ${JSON.stringify(text.slice(0, 80))}`);
  }
  for (const d of root.querySelectorAll("details")) {
    if (d.parentElement !== root) problems.push("a <details> block nested inside another element");
    if (d.firstElementChild?.tagName !== "SUMMARY") problems.push("a <details> block without its <summary> first");
  }

  // 3. Nothing GitHub's sanitiser would strip: outside the charts, only the elements the
  //    report's Markdown produces. Anything else came from an unescaped string.
  const allowed = new Set(["P", "H3", "H4", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "UL", "LI", "CODE", "PRE", "STRONG", "EM",
    "DETAILS", "SUMMARY", "BR", "DIV"]);
  for (const el of root.querySelectorAll("*")) {
    if (el.closest(".mermaid-out")) continue;
    if (!allowed.has(el.tagName)) problems.push(`unexpected <${el.tagName.toLowerCase()}> element: ${JSON.stringify(el.outerHTML.slice(0, 80))}`);
    for (const attr of el.attributes) {
      if (/^on/i.test(attr.name) || /javascript:/i.test(attr.value)) problems.push(`unsafe attribute ${attr.name}="${attr.value.slice(0, 40)}"`);
    }
  }
  for (const d of folded) d.open = false;
  return { problems, charts, tables: tables.length, details: root.querySelectorAll("details").length, heading };
}

async function checkReport(context, path, screenshot) {
  let markdown;
  try {
    markdown = readFileSync(path, "utf8");
  } catch (e) {
    return { problems: [`cannot read it (${e.code || e.message})`] };
  }
  const problems = sourceProblems(markdown);
  const page = await context.newPage();
  const requests = [];
  await page.route("**/*", (route) => {
    requests.push(route.request().url());
    return route.abort();
  });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  try {
    const html = `<!doctype html><html><head><meta charset="utf-8"><style>${PAGE_CSS}</style></head>` +
      `<body><div id="comment">${toHtml(markdown)}</div></body></html>`;
    await page.setContent(html, { waitUntil: "load" });
    await page.addScriptTag({ path: MERMAID_JS });
    const result = await page.evaluate(renderInPage);
    problems.push(...result.problems);
    for (const url of requests) problems.push(`the page tried to load ${url} (refused: nothing may be fetched)`);
    for (const e of errors) problems.push(`page error: ${e}`);
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    return { ...result, problems, chars: [...markdown].length };
  } finally {
    await page.close();
  }
}

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`render-check: ${e.message}\nusage: node render.mjs [--chromium PATH] [--screenshot PNG] REPORT.md...`);
    return 2;
  }
  const userDataDir = mkdtempSync(join(tmpdir(), "render-check-profile-"));
  let context;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: opts.chromium,
      headless: true,
      args: LAUNCH_FLAGS,
      viewport: { width: 912, height: 600 },
      deviceScaleFactor: 1,
      offline: true,
    });
  } catch (e) {
    console.error(`render-check: cannot start ${opts.chromium}: ${String(e.message).split("\n")[0]}`);
    rmSync(userDataDir, { recursive: true, force: true });
    return 2;
  }
  let failed = 0;
  try {
    const version = context.browser()?.version() ?? (await chromiumVersion(context));
    console.log(`render-check: mermaid ${MERMAID_VERSION}, Chromium ${version}`);
    for (const [i, path] of opts.reports.entries()) {
      const shot = i === 0 ? opts.screenshot : null;
      const r = await checkReport(context, path, shot);
      if (r.problems.length > 0) {
        failed++;
        for (const p of r.problems) console.log(`render-check: FAIL ${path}: ${p}`);
      } else {
        const charts = r.charts.map((c) => `${c.bars} bars + ${c.lines} lines over ${c.categories} categories, ${c.width}×${c.height} px`);
        console.log(`render-check: ok   ${path}: ${r.chars} chars, ${r.tables} tables, ${r.details} details, ` +
          `${charts.length ? `chart: ${charts.join("; ")}` : "no chart"}${shot ? `, screenshot ${shot}` : ""}`);
      }
    }
  } finally {
    await context.close();
    rmSync(userDataDir, { recursive: true, force: true });
  }
  return failed > 0 ? 1 : 0;
}

async function chromiumVersion(context) {
  const page = await context.newPage();
  const ua = await page.evaluate(() => navigator.userAgent);
  await page.close();
  return (ua.match(/Chrome\/([\d.]+)/) || [null, "unknown"])[1];
}

process.exitCode = await main();

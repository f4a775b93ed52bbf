"""The dashboard page: one HTML document with its CSS and JavaScript inline, nothing fetched
but ``dashboard.json`` and, when it says ``"rlqs": true`` (``--rlqs``), ``rlqs.json`` for the
quota service's panel, hidden otherwise (same origin).

Every value from the server is written with ``textContent`` (request values in
top keys are untrusted text), and ``PAGE_CSP`` allows exactly this page's inline
script and style (by their SHA-256) and requests to its own origin.
"""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import parse_qs

__all__ = ["INTERVAL_MS", "PAGE", "PAGE_CSP", "interval_refused"]

#: ``?interval=`` in milliseconds: the default, and the range a poll may take.
INTERVAL_MS = (1000, 250, 10_000)

_STYLE = """
:root { --bg:#0f1419; --panel:#182029; --line:#2a3441; --text:#d8dee6; --dim:#8a96a3;
  --ok:#3fb950; --near:#d29922; --over:#f85149; --shadow:#a371f7; --idle:#56606b;
  --degraded:#db6d28; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, sans-serif; background:var(--bg); color:var(--text); }
header { display:flex; gap:16px; align-items:baseline; padding:12px 20px;
  border-bottom:1px solid var(--line); }
header h1 { font-size:18px; margin:0; }
#status { color:var(--dim); }
#status[data-state=error] { color:var(--over); }
main { display:grid; grid-template-columns:repeat(auto-fit, minmax(420px, 1fr)); gap:16px;
  padding:16px 20px; }
section { background:var(--panel); border:1px solid var(--line); border-radius:6px;
  padding:10px 12px; overflow-x:auto; }
section.wide { grid-column:1 / -1; }
h2 { font-size:13px; text-transform:uppercase; letter-spacing:.06em; color:var(--dim);
  margin:0 0 8px; }
table { border-collapse:collapse; width:100%; }
th, td { text-align:left; padding:4px 8px; border-bottom:1px solid var(--line);
  white-space:nowrap; }
th { color:var(--dim); font-weight:normal; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.key { white-space:normal; word-break:break-all; font-family:ui-monospace, monospace; }
td.wrap { white-space:normal; overflow-wrap:anywhere; min-width:9em; }
td.graph { width:136px; }
.badge { display:inline-block; min-width:56px; text-align:center; border-radius:10px;
  padding:0 8px; font-size:12px; color:#0f1419; background:var(--idle); }
.badge[data-status=ok] { background:var(--ok); }
.badge[data-status=near] { background:var(--near); }
.badge[data-status=over] { background:var(--over); }
.badge[data-status=shadow] { background:var(--shadow); }
.badge[data-status=degraded] { background:var(--degraded); }
.empty { color:var(--dim); font-style:italic; }
svg.spark { display:block; }
svg.spark .all { fill:none; stroke:var(--ok); stroke-width:1.5; }
svg.spark .bad { fill:none; stroke:var(--over); stroke-width:1.5; }
.figures { display:flex; gap:24px; flex-wrap:wrap; }
.figure b { display:block; font-size:20px; font-variant-numeric:tabular-nums; }
.figure span { color:var(--dim); font-size:12px; }
"""

_SCRIPT = """
"use strict";
const params = new URLSearchParams(location.search);
// The server refused any other ?interval= (interval_refused): whole milliseconds, 250-10000.
const POLL_MS = Number(params.get("interval") || 1000);
const SVG = "http://www.w3.org/2000/svg";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function rate(x) { return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2); }
function seconds(s) {
  if (s === null || s === undefined) return "\\u2013";
  if (s < 0.001) return (s * 1e6).toFixed(0) + " \\u00b5s";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  return s.toFixed(2) + " s";
}
function spark(series, bad) {
  const w = 120, h = 24, svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const top = Math.max(1, ...series, ...(bad || []));
  const line = (values, cls) => {
    if (!values || values.length < 2) return;
    const step = w / (values.length - 1);
    const points = values.map((v, i) =>
      (i * step).toFixed(1) + "," + (h - 1 - (v / top) * (h - 2)).toFixed(1));
    const path = document.createElementNS(SVG, "polyline");
    path.setAttribute("class", cls); path.setAttribute("points", points.join(" "));
    svg.appendChild(path);
  };
  line(series, "all"); line(bad, "bad");
  return svg;
}
function fill(id, headers, rows, empty) {
  const table = document.getElementById(id);
  const head = el("tr");
  for (const [label, cls] of headers) head.appendChild(el("th", label, cls));
  const body = [head];
  for (const cells of rows) {
    const tr = el("tr");
    for (const cell of cells.cells) tr.appendChild(cell);
    for (const [name, value] of Object.entries(cells.data || {})) tr.dataset[name] = value;
    body.push(tr);
  }
  if (!rows.length) {
    const tr = el("tr"), td = el("td", empty, "empty");
    td.colSpan = headers.length; tr.appendChild(td); body.push(tr);
  }
  table.replaceChildren(...body);
}
function num(text) { return el("td", text, "num"); }
function counted(n, one, many) { return n === 1 ? one : many; }
function badge(status) {
  const td = el("td"), span = el("span", status, "badge");
  span.dataset.status = status; td.appendChild(span); return td;
}
function renderRules(data) {
  fill("rules", [["rule"], ["limits"], ["algorithm"], ["status"], ["decisions/s", "num"],
    ["over/s", "num"], ["near/s", "num"], ["degraded/s", "num"], ["over (total)", "num"],
    ["last " + data.history_s + " s"]],
    data.rules.map(r => {
      const graph = el("td", null, "graph");
      graph.appendChild(spark(r.history.decisions, r.history.over));
      return {
        data: { rule: r.path, status: r.status },
        cells: [el("td", r.path + (r.loaded ? "" : " (not loaded)"), "wrap"),
          el("td", r.limits || "", "wrap"),
          el("td", r.algorithm || ""), badge(r.status), num(rate(r.rate.decisions)),
          num(rate(r.over.rate)), num(rate(r.rate.near)), num(rate(r.rate.degraded)),
          num(r.over.total), graph],
      };
    }), "no rules loaded");
}
function renderTop(id, entries) {
  fill(id, [["rule"], ["key"], ["hits", "num"]], entries.map(t => ({
    data: { rule: t.rule, key: t.key },
    cells: [el("td", t.rule, "wrap"), el("td", t.key, "key"),
      num(t.error ? t.hits + " (\\u00b1" + t.error + ")" : t.hits)],
  })), "none in the last minute or two");
}
function renderShadow(data) {
  const rules = data.rules.filter(r => r.shadow_mode || r.totals.shadowed);
  fill("shadow", [["rule"], ["would have blocked", "num"], ["per second", "num"]],
    rules.map(r => ({ data: { rule: r.path },
      cells: [el("td", r.path, "wrap"), num(r.totals.shadowed), num(rate(r.rate.shadowed))] })),
    "no shadow rules");
}
function renderDegraded(data) {
  const rules = data.rules.filter(r => r.totals.degraded);
  fill("degraded", [["rule"], ["failure mode"], ["total", "num"], ["/s", "num"]],
    rules.map(r => ({ data: { rule: r.path }, cells: [el("td", r.path, "wrap"),
      el("td", Object.entries(r.degraded_modes).map(([m, n]) => m + ": " + n).join(", ")),
      num(r.totals.degraded), num(rate(r.rate.degraded))] })),
    "none: the store has answered every call");
}
function renderLatency(data) {
  const lat = data.store_latency, box = document.getElementById("latency");
  const figures = el("div", null, "figures");
  for (const [label, value] of [["calls/s", rate(lat.per_second)], ["p50", seconds(lat.p50_s)],
      ["p99", seconds(lat.p99_s)], ["max", seconds(lat.max_s)]]) {
    const fig = el("div", null, "figure");
    fig.appendChild(el("b", value)); fig.appendChild(el("span", label));
    fig.dataset.figure = label;
    figures.appendChild(fig);
  }
  box.replaceChildren(figures, spark(lat.history));
}
const RLQS_ROWS = 20;
let rlqsPolled = 0;
function renderRlqs(data) {
  const figures = el("div", null, "figures");
  for (const [label, value, one] of [["streams", data.streams, "stream"],
      ["buckets", data.buckets, "bucket"], ["reports", data.stats.reports, "report"],
      ["rounds", data.stats.rounds, "round"], ["no rule", data.stats.unknown_buckets, "no rule"],
      ["abandoned", data.stats.abandoned, "abandoned"]]) {
    const fig = el("div", null, "figure");
    fig.appendChild(el("b", value)); fig.appendChild(el("span", counted(value, one, label)));
    fig.dataset.figure = label;
    figures.appendChild(fig);
  }
  document.getElementById("rlqs-figures").replaceChildren(figures);
  const rows = data.top_buckets.slice(0, RLQS_ROWS).map(b => ({ data: { bucket: b.bucket },
    cells: [el("td", b.domain), el("td", b.bucket, "key"), el("td", b.rule || "none"),
      el("td", b.answer), num(b.streams), num(rate(b.demand_per_s)), num(rate(b.assigned_per_s)),
      num(b.allowed), num(b.denied)] }));
  const rest = data.other_buckets.buckets + Math.max(0, data.top_buckets.length - RLQS_ROWS);
  if (rest) {
    const left = data.top_buckets.slice(RLQS_ROWS), other = data.other_buckets;
    const sum = key => left.reduce((total, b) => total + b[key], other[key]);
    rows.push({ data: { bucket: "other" }, cells: [el("td", ""),
      el("td", "other (" + rest + " " + counted(rest, "bucket", "buckets") + ")"),
      el("td", ""), el("td", ""),
      num(sum("streams")), num(rate(sum("demand_per_s"))), num(rate(sum("assigned_per_s"))),
      num(sum("allowed")), num(sum("denied"))] });
  }
  fill("rlqs", [["domain"], ["bucket"], ["rule"], ["answer"], ["streams", "num"],
    ["demand/s", "num"], ["assigned/s", "num"], ["allowed", "num"], ["denied", "num"]],
    rows, "no bucket reported yet");
}
async function pollRlqs() {
  const reply = await fetch("rlqs.json", { cache: "no-store" });
  if (!reply.ok) throw new Error("rlqs.json: HTTP " + reply.status);
  document.getElementById("rlqs-panel").hidden = false;
  renderRlqs(await reply.json());
}
function render(data) {
  renderRules(data);
  renderTop("top-over", data.top.over);
  renderTop("top-near", data.top.near);
  renderTop("top-shadow", data.top.shadow);
  renderShadow(data);
  renderDegraded(data);
  renderLatency(data);
}
async function poll() {
  const status = document.getElementById("status");
  try {
    const reply = await fetch("dashboard.json", { cache: "no-store" });
    if (!reply.ok) throw new Error("HTTP " + reply.status);
    const data = await reply.json();
    render(data);
    // Envoy reports every 5 s: the quota figures change no faster, and cost a pass over buckets.
    if (data.rlqs && Date.now() - rlqsPolled >= 5000) {
      rlqsPolled = Date.now();
      await pollRlqs();
    }
    status.dataset.state = "live";
    status.textContent = "live \\u00b7 updated " + new Date().toLocaleTimeString() +
      " \\u00b7 " + data.workers + " " + counted(data.workers, "worker", "workers") +
      " \\u00b7 rates over the last " + data.window_s + " s";
  } catch (error) {
    status.dataset.state = "error";
    status.textContent = "cannot reach the server (" + error.message + "); retrying";
  }
  setTimeout(poll, POLL_MS);
}
poll();
"""

_BODY = """
<header><h1>ratewarden</h1><span id="status" data-state="loading">loading\u2026</span></header>
<main>
<section class="wide"><h2>Rules</h2><table id="rules"></table></section>
<section><h2>Top keys over the limit</h2><table id="top-over"></table></section>
<section><h2>Top keys near the limit</h2><table id="top-near"></table></section>
<section><h2>Shadow rules: would have blocked</h2><table id="shadow"></table></section>
<section><h2>Shadow rules: top keys</h2><table id="top-shadow"></table></section>
<section><h2>Degraded decisions (failure mode)</h2><table id="degraded"></table></section>
<section><h2>Store latency (last minute)</h2><div id="latency"></div></section>
<section class="wide" id="rlqs-panel" hidden><h2>Quota service (RLQS): buckets by demand</h2>
<div id="rlqs-figures"></div><table id="rlqs"></table></section>
</main>
"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


#: The page, as served.
PAGE = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    '<title>ratewarden dashboard</title>\n<link rel="icon" href="data:,">\n'
    f"<style>{_STYLE}</style>\n</head><body>{_BODY}<script>{_SCRIPT}</script>\n</body></html>\n"
).encode()

#: Its Content-Security-Policy: its own inline script and style, and fetches to its origin.
PAGE_CSP = (
    f"default-src 'none'; script-src {_sha256(_SCRIPT)}; style-src {_sha256(_STYLE)}; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def interval_refused(query: str) -> str | None:
    """Why ``/dashboard?QUERY``'s ``interval`` cannot be used, or None: whole milliseconds from
    250 to 10,000, given once. A typo (``500ms``, ``abc``, ``100``) is told, not quietly
    replaced by the default or the nearest bound."""
    given = parse_qs(query, keep_blank_values=True).get("interval")
    if given is None:
        return None
    _, low, high = INTERVAL_MS
    text = given[0] if len(given) == 1 else ""
    if text.isascii() and text.isdigit() and len(text) <= 5 and low <= int(text) <= high:
        return None
    said = ", ".join(repr(value[:40]) for value in given)  # request text: bounded, quoted
    return (
        f"interval {said}: give the poll interval once, in whole milliseconds from {low} to "
        f"{high:,}, such as /dashboard?interval=500"
    )

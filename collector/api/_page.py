"""The collector's web page at ``/``: one HTML document with inline CSS and JavaScript.

The page polls the JSON API every 5 s. It first reads ``/api`` (the list of routed paths) and
fetches only endpoints listed there, because Chromium logs every failed load, even a handled
``fetch`` 404, as a console error. Sections and their sources:

* jobs: ``/api/jobs?summary=1`` (one line per job), then for at most 12 of them (alerting
  first) their ranks (``/api/jobs?job=NAME``) and step-time trend (``/api/steps?job=NAME``, one
  line per rank); the other jobs are named in one line, so a refresh costs the same whatever
  the fleet's size;
* each drawn job's life: ``/api/life?job=NAME&since_s=S`` (the last hour by default; buttons for
  6 h and the whole life), one summary series made on the collector (the ranks' median, a band
  from the lowest to the highest), with the settled level and the job's alert episodes shaded
  from their onsets; a click on a rank's row draws that rank's own line over it
  (``&rank=R``), a second click hides it;
* alerts, drawn first: ``/api/alerts``; a card per firing alert (most severe first: severity, name, job and rank, the
  summary, the why, the trace, since when), resolved ones folded below;
* jobs: alerting jobs first (most severe first, marked), then live jobs, then finished ones
  (marked finished);
* runs: ``/api/jobs/{job}/runs?ranks=0`` of each drawn job, its newest five runs folded under its ranks;
* window summary: ``/api/jobs/{job}/windows``, the newest window of any rank of each drawn job (step
  breakdown bar and top kernels);
* traces: ``/api/traces`` (strings starting ``/api/`` become links).

Traces may be a list or an object holding one list; they are drawn as a generic table, so
their exact fields are up to the endpoint. Text from agents is only ever
inserted as DOM text (``append``/``textContent``), never as markup; the Content-Security-Policy
allows only this page's own script and style (by hash) as a second line of defence.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = ["page"]

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d232b;background:#f4f5f7}
header{display:flex;gap:1em;align-items:baseline;padding:.6em 1.2em;background:#1d232b;color:#fff}
header h1{font-size:1.2em;margin:0}header a{color:#9cc3ff}#status{margin-left:auto;color:#c9ced6}
main{padding:0 1.2em 2em;max-width:1200px}h2{font-size:1.1em;margin:1.2em 0 .4em}
.card{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:.6em 1em;margin:.6em 0;overflow-x:auto}
#traces td{overflow-wrap:anywhere}
.card h3{margin:.2em 0;font-size:1.05em;word-break:break-all}.muted{color:#6b7480}
table{border-collapse:collapse;margin:.4em 0;font-size:13px}
th,td{text-align:left;padding:.2em .7em;border-bottom:1px solid #eceef1;vertical-align:top}
th{color:#6b7480;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37}.gone{color:#b42318}svg.trend{width:100%;max-width:760px;height:auto;display:block}
svg text{font-size:11px;fill:#6b7480}svg .grid{stroke:#eceef1}svg polyline{fill:none;stroke-width:1.5}
svg rect.episode{fill-opacity:.15}svg rect.episode.sev-critical{fill:#b42318}svg rect.episode.sev-warning{fill:#c4570c}
svg rect.episode.sev-info{fill:#2f6fb2}svg line.onset{stroke:#b42318;stroke-dasharray:3 2}
svg line.settled{stroke:#374151;stroke-dasharray:6 3}svg polygon.band{fill:#6b7480;fill-opacity:.18;stroke:none}
.lifebar{font-size:12px;margin:.2em 0}.lifebar button{font-size:12px;margin-right:.3em}.lifebar button.on{font-weight:700}
table.ranks tbody tr{cursor:pointer}table.ranks tbody tr.picked{background:#eef4ff}
.legend span{margin-right:1em;font-size:12px}.legend b{font-size:16px}
svg.bar{width:100%;max-width:760px;height:18px;display:block;margin:.4em 0}
.win td:first-child{max-width:560px;overflow-wrap:anywhere}
.job.alerting{border-left:5px solid #b42318}.badge{display:inline-block;padding:0 .5em;border-radius:4px;
margin-left:.6em;font-size:12px;font-weight:600;color:#fff;background:#6b7480;vertical-align:middle}
.sev-critical{background:#b42318}.sev-warning{background:#c4570c}.sev-info{background:#2f6fb2}
.alert{border-left:5px solid #6b7480}.alert.sev-critical{border-left-color:#b42318;background:#fff}
.alert.sev-warning{border-left-color:#c4570c;background:#fff}.alert.sev-info{border-left-color:#2f6fb2;background:#fff}
.alert p{margin:.2em 0;overflow-wrap:anywhere}.alert.resolved{opacity:.75;border-left-style:dashed}details{margin:.4em 0}
"""

_JS = r"""
"use strict";
const REFRESH_MS = 5000, MAX_SERIES = 32, MAX_JOBS = 12;
const $ = (id) => document.getElementById(id);
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  el.append(...kids.flat().filter((k) => k != null).map((k) => (k instanceof Node ? k : String(k))));
  return el;
}
function svg(tag, attrs, text) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text != null) el.textContent = text;
  return el;
}
async function getJSON(path) {
  const resp = await fetch(path, {cache: "no-store"});
  if (!resp.ok) throw new Error(`${path}: HTTP ${resp.status}`);
  return resp.json();
}
const dur = (s) => (s >= 60 ? `${Math.floor(s / 60)} min ${Math.round(s % 60)} s` : `${Math.round(s)} s`);
const ms = (s) => (s == null ? "—" : s >= 1 ? s.toFixed(2) + " s" : (s * 1000).toFixed(s < 0.01 ? 2 : 1) + " ms");
const pct = (r) => (r == null ? "—" : (100 * r).toFixed(0) + " %");
const gib = (b) => (b == null ? "—" : (b / 2 ** 30).toFixed(2) + " GiB");
const color = (i) => `hsl(${(i * 137.5) % 360},65%,40%)`;
function ago(t) {
  if (t == null) return "—";
  const d = Math.max(0, Date.now() / 1000 - t);
  return d < 90 ? `${d.toFixed(0)} s ago` : d < 5400 ? `${(d / 60).toFixed(0)} min ago` : `${(d / 3600).toFixed(1)} h ago`;
}
function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[s.length >> 1] : null;
}

function trend(series, life, episodes, settled, band, label) {
  // life: the job's step time over its life (one point per bin of \`life\` s), else the ranks'
  // last steps; band: [[t, lowest, highest], ...] across the ranks; label: the range's name
  const W = 720, H = life ? 120 : 170, L = 64, R = 8, T = 8, B = 22;
  const box = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "trend" + (life ? " life" : ""), role: "img"});
  const pts = series.flatMap((s) => s.points).concat((band || []).map((b) => [null, b[0], b[2]]));
  if (!pts.length) {
    box.append(svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no steps yet"));
    return box;
  }
  const t0 = Math.min(...pts.map((p) => p[1])), t1 = Math.max(...pts.map((p) => p[1]));
  const durs = pts.map((p) => p[2]), top = Math.max(...durs), typical = 4 * median(durs);
  const ymax = 1.1 * Math.min(top, typical) || 1;  // warm-up steps would flatten the rest
  const x = (t) => (L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - R)).toFixed(1);
  const y = (d) => (T + (1 - Math.min(d, ymax) / ymax) * (H - T - B)).toFixed(1);
  for (const v of [0, ymax / 2, ymax]) {
    box.append(svg("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid"}),
               svg("text", {x: L - 6, y: +y(v) + 4, "text-anchor": "end"}, ms(v)));
  }
  // the job's alert episodes on the chart since the start: shaded from onset to end (or now),
  // the onset marked; times are the agents' data times, as the points' are
  for (const a of life ? episodes || [] : []) {
    const s = unix(a.onset_at || a.starts_at), e = a.ends_at ? unix(a.ends_at) : t1;
    if (s == null || e < t0 || s > t1) continue;
    const a0 = Math.max(s, t0), a1 = Math.min(Math.max(e, s), t1);
    const band = svg("rect", {class: "episode sev-" + (a.severity || "info"), "data-rank": a.rank,
      x: x(a0), y: T, width: Math.max(1, x(a1) - x(a0)).toFixed(1), height: H - T - B});
    band.append(svg("title", {}, `${a.alertname} ${a.severity} rank ${a.rank}: ${a.summary || ""}`));
    box.append(band, svg("line", {class: "onset", x1: x(a0), x2: x(a0), y1: T, y2: H - B}));
  }
  if (band && band.length > 1) {  // the lowest to the highest rank in each bin
    const ordered = [...band].sort((a, b) => a[0] - b[0]);
    box.append(svg("polygon", {class: "band", points: ordered.map((b) => `${x(b[0])},${y(b[2])}`)
      .concat(ordered.reverse().map((b) => `${x(b[0])},${y(b[1])}`)).join(" ")}));
  }
  if (life && typeof settled === "number") {  // the level drift is judged against (the ranks' median)
    box.append(svg("line", {class: "settled", x1: L, x2: W - R, y1: y(settled), y2: y(settled)}),
               svg("text", {x: W - R - 4, y: +y(settled) - 4, "text-anchor": "end", class: "settled"},
                   `settled level ${ms(settled)}`));
  }
  const span = t1 - t0, clipped = top > ymax ? `, slower steps (up to ${ms(top)}) clipped` : "";
  const earlier = life ? `${label || "since the start"}, ${dur(span)} ago (means of ${dur(life)})` : `${span.toFixed(span < 10 ? 1 : 0)} s earlier`;
  box.append(svg("text", {x: L, y: H - 4}, earlier),
             svg("text", {x: W - R, y: H - 4, "text-anchor": "end"}, `${life ? "latest span" : "latest step"}${clipped}`));
  for (const s of series) {
    const line = svg("polyline", {stroke: s.rank === "job" ? "#1d232b" : color(s.rank), "data-rank": s.rank,
      points: [...s.points].sort((a, b) => a[1] - b[1]).map((p) => `${x(p[1])},${y(p[2])}`).join(" ")});
    line.append(svg("title", {}, s.rank === "job" ? "the ranks' median" : `rank ${s.rank}`));
    box.append(line);
  }
  return box;
}

// "armed · +2.1% / +4.0% / +8.0%": the smallest sustained shift each severity raises now
// (info / warning / critical, drift_reach), at this rank's own noise
function detectorCell(r) {
  const reach = r.drift_reach;
  const sev = (k) => reach && typeof reach[k] === "number" ? `+${(100 * reach[k]).toFixed(1)}%` : "?";
  const again = typeof r.drift_settling_again_since === "number"
    ? `settling again: a shift from ${new Date(1000 * r.drift_settling_again_since).toISOString().slice(11, 19)} UTC began before it armed`
    : "";
  const left = typeof r.drift_armed_in_s === "number" ? r.drift_armed_in_s : null;
  const wait = !r.connected ? "ended before arming: slowdowns are judged after a rank's first 3 min (detection.drift.warmup_s + settle_s; lower them for short jobs)"
    : left == null ? "warming up" : `armed in ${dur(left)} of training`;
  const text = r.drift_armed === true ? (reach ? `armed · ${sev("info")} / ${sev("warning")} / ${sev("critical")}` : "armed")
    : r.drift_armed === false ? (again || wait) : "—";
  return h("td", {class: "detector", title: "smallest sustained step-time shift raised as info / warning / critical"}, text);
}

function rankRow(r, job) {
  const gpu = r.gpu_sample || {}, alloc = r.allocator;
  const mem = alloc ? alloc.allocated_bytes : gpu.memory_used_bytes;
  const num = (v) => h("td", {class: "num"}, v);
  const view = lifeView(job), row = h("tr", {"data-rank": r.rank, class: view.rank === r.rank ? "picked" : "",
    title: "click: draw this rank on the life chart"},
    num(r.rank), h("td", {}, r.host), num(r.pid), h("td", {}, r.gpu ? r.gpu.name : "—"),
    h("td", {class: r.connected ? "ok" : "gone"}, r.connected ? "connected" : `gone ${ago(r.disconnected_at)}`),
    detectorCell(r),
    num(r.steps_total), num(ms(r.step_median_s)), num(ago(r.last_step_time)),
    num(pct(r.dataloader_wait_ratio)), num(pct(gpu.utilization_ratio)), num(gib(mem)));
  row.addEventListener("click", () => { view.rank = view.rank === r.rank ? null : r.rank; refresh(); });
  return row;
}

// what the life chart of each job shows: the range (seconds; 0 the whole life) and the rank
// drawn over the job's summary (a click on its row), kept across refreshes
const LIFE_RANGES = [[3600, "last hour"], [6 * 3600, "last 6 h"], [0, "whole life"]];
const lifeViews = new Map();
function lifeView(job) {
  if (!lifeViews.has(job)) lifeViews.set(job, {since: 3600, rank: null});
  return lifeViews.get(job);
}
async function lifeDocs(job) {
  const v = lifeView(job), base = `api/life?job=${encodeURIComponent(job)}&since_s=${v.since}`;
  const [all, one] = await Promise.all([getJSON(base), v.rank == null ? null : getJSON(`${base}&rank=${v.rank}`)]);
  return {all, one};
}
function lifeChart(job, docs, episodes, settled) {
  const v = lifeView(job), all = docs.all, one = docs.one;
  if (!all || all.points.length < 2) return null;
  const series = [{rank: "job", points: all.points.map((p) => [null, p[0], p[1]])}];
  if (one && one.points.length) series.push({rank: v.rank, points: one.points.map((p) => [null, p[0], p[1]])});
  const label = all.whole ? "since the start" : LIFE_RANGES.find((r) => r[0] === v.since)[1];
  const bar = h("div", {class: "lifebar"}, LIFE_RANGES.map(([s, name]) => {
    const b = h("button", {type: "button", class: s === v.since ? "on" : "", "data-since": s}, name);
    b.addEventListener("click", () => { v.since = s; refresh(); });
    return b;
  }), h("span", {class: "muted"}, all.ranks > 1 ? `the ranks' median (band: lowest to highest of ${all.ranks})` : "",
    v.rank == null ? "; click a rank's row to draw it" : `; rank ${v.rank} drawn (click its row again to hide it)`));
  return [bar, trend(series, all.bin_s, episodes, settled, all.ranks > 1 ? all.points.map((p) => [p[0], p[2], p[3]]) : null, label)];
}

const SEVERITY = {critical: 0, warning: 1, info: 2};
const sevRank = (a) => SEVERITY[a.severity] ?? 3;
function badge(text, severity) {
  return h("span", {class: "badge" + (severity ? " sev-" + severity : "")}, text);
}
function alertList(doc) {
  if (doc === undefined) return undefined;
  if (doc && !Array.isArray(doc) && typeof doc === "object") {
    const lists = Object.values(doc).filter(Array.isArray);
    return lists.length === 1 ? lists[0] : [];
  }
  return doc || [];
}
const unix = (iso) => (iso ? Date.parse(iso) / 1000 : null);
function alertCard(a) {
  const name = String(a.alertname || "alert").replace(/^Stepwatch/, "");
  const change = typeof a.ratio === "number" && a.ratio > 0 ? ` ${a.ratio >= 1 ? "+" : ""}${((a.ratio - 1) * 100).toFixed(1)}%` : "";
  const over = a.state === "firing" ? "" : `, resolved ${ago(unix(a.ends_at))}`;
  return h("div", {class: "card alert sev-" + (a.severity || "none") + (over ? " resolved" : ""), "data-job": a.job},
    h("h3", {}, badge(a.severity || "?", a.severity), ` ${name}${change} — ${a.job} rank ${a.rank}`),
    a.state === "firing" ? null : h("p", {class: "muted"}, "resolved: the figures below are those it ended with"),
    a.summary ? h("p", {}, a.summary) : null,
    a.diagnosis ? h("p", {}, h("b", {}, "why: "), a.diagnosis) : null,
    h("p", {class: "muted"}, `since ${a.starts_at || "?"}${over}` + (a.trace ? `, trace ${a.trace}` : "")));
}
function alertsSection(list) {
  if (list === undefined) return [h("p", {class: "muted"}, "not available: this collector has no alerts API yet")];
  const firing = list.filter((a) => a.state === "firing").sort((a, b) => sevRank(a) - sevRank(b));
  const resolved = list.filter((a) => a.state !== "firing");
  // nothing firing: the latest episode to resolve stays drawn whole, why included (a job that
  // ended resolves its slowdown a minute later; whoever looks then still sees what it was)
  const latest = resolved.reduce((x, a) => (x && (unix(x.ends_at) || 0) >= (unix(a.ends_at) || 0) ? x : a), null);
  const out = firing.length ? firing.map(alertCard) : [h("p", {class: "muted"},
    latest ? "No alert firing. The latest to resolve:" : "No alert firing.")];
  if (!firing.length && latest) out.push(alertCard(latest));
  if (resolved.length) {
    out.push(h("details", {}, h("summary", {class: "muted"}, `${resolved.length} resolved recently`),
      table(resolved.map((a) => ({alert: a.alertname, severity: a.severity, job: a.job, rank: a.rank,
        summary: a.summary, ended: a.ends_at})), 0)));
  }
  return out;
}

function runsTable(doc) {
  // the job's runs, newest first (at most 5): when, from which step, the settled level, and how
  // it compared with the run before it (/api/jobs/{job}/runs; stepwatch history JOB has them all)
  if (!doc || !doc.runs || !doc.runs.length) return null;
  const rows = doc.runs.slice(-5).reverse().map((r) => {
    const c = r.compared;
    const hosts = (r.hosts || [...new Set(Object.values(r.ranks || {}).map((x) => x.host))]).join(", ");
    return {run: r.live ? "this run" : "earlier", started: new Date(r.started_at * 1000).toISOString().slice(0, 16).replace("T", " ") + " UTC",
      "from step": r.first_step, "settled step": r.settled_step_s == null ? "settling" : ms(r.settled_step_s),
      "vs run before": c ? `${c.ratio >= 1 ? "+" : ""}${(100 * (c.ratio - 1)).toFixed(1)} %${r.regression ? " (raised)" : ""}` : "—",
      hosts, changed: c ? (c.changed || []).join(", ") || "nothing seen" : "—"};
  });
  return h("details", {class: "runs"}, h("summary", {class: "muted"}, `${doc.runs.length} run${doc.runs.length > 1 ? "s" : ""} of this job`),
    table(rows, 0));
}

function jobCard(job, steps, alerts, runs, episodes, life) {
  const byRank = new Map((steps ? steps.ranks : []).map((s) => [s.rank, s]));
  const series = job.ranks.slice(0, MAX_SERIES).map((r) => ({rank: r.rank, points: (byRank.get(r.rank) || {}).points || []}));
  const up = job.ranks.filter((r) => r.connected).length;
  const settled = median(job.ranks.map((r) => r.drift_level_s).filter((v) => typeof v === "number"));
  const cols = ["rank", "host", "pid", "GPU", "status", "detector", "steps", "median step", "last step",
                "data wait", "GPU util", "memory"];
  const worst = alerts.length ? alerts.reduce((a, b) => (sevRank(b) < sevRank(a) ? b : a)) : null;
  return h("div", {class: "card job" + (worst ? " alerting" : ""), "data-job": job.job},
    h("h3", {}, job.job,
      worst ? badge(`${worst.severity} ${String(worst.alertname).replace(/^Stepwatch/, "")}`, worst.severity) : null,
      up === 0 ? badge("finished") : null),
    h("div", {class: "muted"}, `${job.ranks.length} ranks, ${up} connected`),
    trend(series),
    life ? lifeChart(job.job, life, episodes, settled) : null,
    h("div", {class: "legend"}, series.map((s) => {
      const dot = h("b", {}, "— ");
      dot.style.color = color(s.rank);
      return h("span", {}, dot, `rank ${s.rank}`);
    }), job.ranks.length > MAX_SERIES ? `(first ${MAX_SERIES} ranks drawn)` : null),
    h("table", {class: "ranks"}, h("thead", {}, h("tr", {}, cols.map((c) => h("th", {}, c)))),
      h("tbody", {}, job.ranks.map((r) => rankRow(r, job.job)))), runsTable(runs));
}

const PHASES = ["forward", "backward", "optimizer", "communication", "other"];
const PHASE_COLORS = ["#3b82f6", "#8b5cf6", "#f59e0b", "#ef4444", "#9ca3af"];
function latestWindow(doc) {
  let best = null;
  for (const r of doc.ranks) {
    for (const w of r.windows) if (!best || w.start_time_s > best.w.start_time_s) best = {rank: r.rank, host: r.host, w};
  }
  return best;
}
function windowCard(job, latest) {
  if (!latest) return h("div", {class: "win"}, h("h3", {}, job), h("p", {class: "muted"}, "no profiler window yet"));
  const w = latest.w, b = w.breakdown || {};
  const total = b.step_time_s || PHASES.reduce((sum, p) => sum + (b[p + "_s"] || 0), 0);
  const bar = svg("svg", {viewBox: "0 0 600 18", preserveAspectRatio: "none", class: "bar"});
  let x = 0;
  const legend = PHASES.map((p, i) => {
    const v = b[p + "_s"] || 0, width = total > 0 ? (600 * v) / total : 0;
    const rect = svg("rect", {x: x.toFixed(1), y: 0, width: width.toFixed(1), height: 18, fill: PHASE_COLORS[i]});
    rect.append(svg("title", {}, `${p} ${ms(v)}`));
    bar.append(rect);
    x += width;
    const dot = h("b", {}, "■ ");
    dot.style.color = PHASE_COLORS[i];
    return h("span", {}, dot, `${p} ${ms(v)}${total > 0 ? ` (${pct(v / total)})` : ""}`);
  });
  const kernels = (w.top_kernels || []).slice(0, 10).map((k) => ({"top kernel": k.name, time: ms(k.seconds), calls: k.count}));
  return h("div", {class: "win", "data-job": job}, h("h3", {}, job),
    h("div", {class: "muted"}, `rank ${latest.rank} (${latest.host}), window ${w.window_id}, steps ${w.first_step}–${w.last_step}, ${ago(w.start_time_s)}`),
    h("div", {}, `device step ${ms(total)}, GPU busy ${pct(w.gpu_busy_ratio)}, comm overlap ${pct(w.overlap_ratio)}, ${w.kernel_count} kernels`),
    bar, h("div", {class: "legend"}, legend), kernels.length ? table(kernels, 0) : null);
}

function tracesTable(doc) {
  // one row per rank's trace of each request, newest first: when it was asked, for which job
  // and steps, where it is (a link once uploaded) or why there is none
  const rows = (doc.requests || []).flatMap((r) => (r.traces.length ? r.traces : [{}]).map((t) => ({
    asked: ago(r.time_s), job: r.job, steps: t.first_step != null ? `${t.first_step}–${t.last_step}` : `${r.steps}`,
    rank: t.rank ?? "—", host: t.host ?? "—",
    trace: t.url || t.error || t.upload_error || t.path || "waiting for the ranks",
    size: t.bytes ? `${(t.bytes / 2 ** 20).toFixed(1)} MiB` : "—"})));
  return rows.length ? table(rows, 0) : h("p", {class: "muted"}, "none yet");
}

function cell(v, depth, key) {
  if (v == null) return "—";
  if (typeof v === "number" && v > 1e9 && /time|since|_at$/.test(key)) return ago(v);  // Unix seconds
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(4);
  if (typeof v === "string") return /^\/api\/[^\s]*$/.test(v) ? h("a", {href: "." + v}, v) : v;
  if (depth > 2) return JSON.stringify(v);
  if (Array.isArray(v) && v.every((o) => o && typeof o === "object" && !Array.isArray(o))) return table(v, depth);
  if (Array.isArray(v)) return v.map((o) => (typeof o === "object" ? JSON.stringify(o) : String(o))).join(", ");
  return table(Object.entries(v).map(([name, value]) => ({name, value})), depth);
}
function table(rows, depth) {
  const cols = [...new Set(rows.flatMap(Object.keys))].slice(0, 12);
  return h("table", {}, h("thead", {}, h("tr", {}, cols.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.slice(0, 100).map((r) => h("tr", {}, cols.map((c) => h("td", {}, cell(r[c], depth + 1, c)))))));
}
function optional(id, doc, what) {
  let list = doc;
  if (doc && !Array.isArray(doc) && typeof doc === "object") {
    const lists = Object.values(doc).filter(Array.isArray);
    list = lists.length === 1 ? lists[0] : [doc];
  }
  $(id).replaceChildren(doc === undefined ? h("p", {class: "muted"}, `not available: this collector has no ${what} API yet`)
    : list && list.length ? table(list, 0) : h("p", {class: "muted"}, `none yet`));
}

let timer = null;
async function refresh() {
  clearTimeout(timer);
  try {
    const routes = new Set((await getJSON("api")).routes);
    const has = (p) => routes.has(p);
    const summary = (await getJSON("api/jobs?summary=1")).jobs;
    const alerts = alertList(has("/api/alerts") ? await getJSON("api/alerts") : undefined);
    $("alerts").replaceChildren(...alertsSection(alerts));
    const firing = (alerts || []).filter((a) => a.state === "firing");
    const worst = (j) => Math.min(3, ...firing.filter((a) => a.job === j.job).map(sevRank));
    const live = (j) => j.connected > 0;
    summary.sort((a, b) => worst(a) - worst(b) || live(b) - live(a) || (a.job < b.job ? -1 : a.job > b.job ? 1 : 0));
    // What is wrong first, and at most MAX_JOBS jobs drawn: a refresh costs the same at 10 jobs
    // or 1,000 (each drawn job: its ranks, trend and window; the rest named in one line).
    const shown = summary.slice(0, MAX_JOBS), rest = summary.slice(MAX_JOBS);
    const jobs = await Promise.all(shown.map((j) => getJSON("api/jobs?job=" + encodeURIComponent(j.job))
      .then((d) => d.jobs[0] || {job: j.job, ranks: []})));
    const steps = has("/api/steps") ? await Promise.all(
      jobs.map((j) => getJSON("api/steps?job=" + encodeURIComponent(j.job) + "&ranks=" + MAX_SERIES))) : [];
    const lives = has("/api/life") ? await Promise.all(jobs.map((j) => lifeDocs(j.job).catch(() => null))) : [];
    const runs = has("/api/jobs/{job}/runs") ? await Promise.all(jobs.map((j) =>
      getJSON(`api/jobs/${encodeURIComponent(j.job)}/runs?ranks=0`).catch(() => null))) : [];
    const more = rest.length ? [h("p", {class: "muted more-jobs"},
      `${rest.length} more jobs not drawn (${rest.reduce((n, j) => n + j.ranks, 0)} ranks; /api/jobs has them all): `
      + rest.slice(0, 50).map((j) => j.job).join(", ") + (rest.length > 50 ? ", ..." : ""))] : [];
    $("jobs").replaceChildren(...(jobs.length ? jobs.map((j, i) => jobCard(j, steps[i], firing.filter((a) => a.job === j.job), runs[i],
      (alerts || []).filter((a) => a.job === j.job), lives[i]))
      : [h("p", {class: "muted"}, "No jobs yet: start training with STEPWATCH_COLLECTOR pointing here.")]), ...more);
    if (has("/api/jobs/{job}/windows") && jobs.length) {
      const docs = await Promise.all(jobs.map((j) => getJSON(`api/jobs/${encodeURIComponent(j.job)}/windows`)));
      $("windows").replaceChildren(...docs.map((d, i) => windowCard(jobs[i].job, latestWindow(d))));
    } else {
      optional("windows", has("/api/jobs/{job}/windows") ? [] : undefined, "window summary");
    }
    if (has("/api/traces")) $("traces").replaceChildren(tracesTable(await getJSON("api/traces")));
    else optional("traces", undefined, "trace");
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    $("status").textContent = `update failed (${err.message}); retrying`;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}
refresh();
"""

_HTML = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>stepwatch collector</title><link rel="icon" href="data:,"><style>{_CSS}</style></head>
<body><header><h1>stepwatch</h1><a href="metrics">metrics</a><a href="api/jobs">api/jobs</a>
<span id="status">loading…</span></header>
<main><h2>Alerts</h2><div id="alerts"><p class="muted">loading…</p></div>
<h2>Jobs</h2><div id="jobs"><p class="muted">loading…</p></div>
<h2>Latest window summary</h2><div id="windows" class="card"></div>
<h2>Captured traces</h2><div id="traces" class="card"></div></main>
<script>{_JS}</script></body></html>
"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


_BODY = _HTML.encode()
_HEADERS = (
    "Cache-Control: no-store",
    "X-Content-Type-Options: nosniff",
    "Referrer-Policy: no-referrer",
    f"Content-Security-Policy: default-src 'none'; script-src {_sha256(_JS)}; style-src {_sha256(_CSS)}; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
)


def page():
    """The ``/`` route: ``(200, content type, body, extra headers)``."""
    return 200, "text/html; charset=utf-8", _BODY, _HEADERS

"""One trace as one self-contained HTML file: a waterfall with span details on click.

The page must open anywhere (an e-mail attachment, a CI artifact, an air-gapped
laptop), so it loads nothing: CSS and script are inline, a Content-Security-
Policy forbids every network fetch, and the spans travel as JSON inside the
page. The inline script builds the rows from that JSON; span text is only
ever set through ``textContent``, so a prompt containing markup stays text.

Times are converted to offsets from the trace start here, in Python: epoch
nanoseconds do not fit a JavaScript number without losing precision.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from runnertrace._internal.version import __version__
from runnertrace.store import RunSummary, SpanStore, StoredSpan, agent_accounts, span_tree

__all__ = ["FORMAT_SCRIPT", "render_report", "write_report"]

_PLACEHOLDER = re.compile(r"__(TITLE|STYLE|FORMAT|SCRIPT|DATA)__")


def _report_data(spans: Sequence[StoredSpan], run: RunSummary | None) -> dict[str, Any]:
    ordered = span_tree(spans)
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    with_children = {s.parent_span_id for s in spans}
    rows: list[dict[str, Any]] = []
    for span, depth in ordered:
        row = span.to_json()
        row.update(
            depth=depth,
            has_children=span.span_id in with_children,
            offset_ns=span.start_ns - start,
            duration_ns=span.duration_ns,
            # Epoch nanoseconds as strings: a JS number would round them.
            start_ns=str(span.start_ns),
            end_ns=str(span.end_ns),
            events=[
                {**event, "offset_ns": int(event.get("time_ns") or start) - start}
                for event in span.events
            ],
        )
        rows.append(row)
    summary: dict[str, Any] = {
        "trace_id": spans[0].trace_id,
        "duration_ns": end - start,
        "span_count": len(spans),
        "started": datetime.fromtimestamp(start / 1e9).astimezone().isoformat(timespec="seconds"),
    }
    if run is not None:
        summary.update(
            name=run.name,
            agent=run.agent,
            framework=run.framework,
            mode=run.mode,
            status=run.status,
            error_count=run.error_count,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            session_id=run.session_id,
            cost=run.cost,
            cost_status=run.cost_status,
            unpriced_calls=run.unpriced_calls,
            unpriced_models=list(run.unpriced_models),
            model_calls=run.model_calls,
            tool_calls=run.tool_calls,
            errors=run.errors,
            nested_runs=run.nested_runs,
            derived=run.derived,
        )
    # One row per agent: its own work, and with what it started (the store's run_agents).
    agents = [account.to_json() for account in agent_accounts(spans)]
    return {"version": __version__, "summary": summary, "spans": rows, "agents": agents}


def _script_json(data: object) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</script>`` break-out)."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def render_report(spans: Sequence[StoredSpan], run: RunSummary | None = None) -> str:
    """The HTML page for one trace's ``spans`` (all from the same trace)."""
    if not spans:
        raise ValueError("a report needs at least one span")
    data = _report_data(spans, run)
    label = (run.agent if run is not None and run.agent else None) or data["spans"][0]["name"]
    title = f"{label} · trace {spans[0].trace_id[:8]} · runnertrace"
    parts = {
        "TITLE": html.escape(title),
        "STYLE": _STYLE,
        "FORMAT": FORMAT_SCRIPT,
        "SCRIPT": _SCRIPT,
        "DATA": _script_json(data),
    }
    # One pass, so a span named "__DATA__" is not itself substituted.
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], _PAGE)


def write_report(store: SpanStore, ref: str, out: str | os.PathLike[str]) -> Path:
    """Render the trace ``ref`` (``last``, an id or a prefix) from ``store`` to ``out``."""
    trace_id = store.resolve(ref)
    page = render_report(store.get_trace(trace_id), store.get_run(trace_id))
    path = Path(out)
    if path.parent != Path():
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


FORMAT_SCRIPT = r"""
/* One number format for every page (the report, and the dashboard serves this same text
 * as /static/format.js): durations in human units, tokens with separators, cost to four
 * significant digits, so a figure reads the same wherever it is shown. */
var RT = (function () {
  "use strict";
  function duration(ns) {
    if (typeof ns !== "number" || !isFinite(ns)) return "-";
    if (ns === 0) return "0";
    if (ns < 1e3) return Math.round(ns) + " ns";
    if (ns < 1e6) return (ns / 1e3).toFixed(ns < 1e4 ? 1 : 0) + " \u00b5s";
    if (ns < 1e9) return (ns / 1e6).toFixed(ns < 1e7 ? 2 : 1) + " ms";
    if (ns < 60e9) return (ns / 1e9).toFixed(2) + " s";
    var s = Math.round(ns / 1e9);
    return Math.floor(s / 60) + " min " + (s % 60) + " s";
  }
  function cost(c) {
    if (typeof c !== "number" || !isFinite(c)) return "-";
    if (c === 0) return "$0";
    if (c >= 1) return "$" + c.toFixed(2);
    var digits = Math.min(10, Math.max(2, 3 - Math.floor(Math.log10(c))));
    return "$" + c.toFixed(digits).replace(/0+$/, "").replace(/\.$/, "");
  }
  function tokens(n) {
    return (typeof n === "number" && isFinite(n) ? n : 0).toLocaleString("en-US");
  }
  function seconds(s) { return duration(s * 1e9); }
  function calls(n) { return n + (n === 1 ? " call" : " calls"); }
  // A cost that says when it misses calls: "$0.0002206 (partial: 2 calls unpriced)", or
  // "unpriced" when calls reported tokens and none got a price ("-": no call had tokens).
  function costOf(c, unpriced) {
    var n = typeof unpriced === "number" && unpriced > 0 ? unpriced : 0;
    if (!n) return cost(c);
    if (typeof c !== "number" || !isFinite(c)) return "unpriced";
    return cost(c) + " (partial: " + calls(n) + " unpriced)";
  }
  // What the hover says about those calls: how many, and the models without a price.
  function unpricedNote(unpriced, models) {
    if (!(typeof unpriced === "number" && unpriced > 0)) return "";
    var names = Array.isArray(models) && models.length ? ": " + models.join(", ") : "";
    return calls(unpriced) + " got no price, so the cost leaves them out" +
      (names ? "; no price for" + names : "");
  }
  // The per-agent table (the trace page and a session's): one row per agent, its own work
  // and with what it started, each agent's runs summed. Text only ever via textContent.
  var FIGURES = [["model_calls", "model calls", tokens], ["input_tokens", "tokens in", tokens],
    ["output_tokens", "tokens out", tokens], ["cost", "cost", null],
    ["tool_calls", "tool calls", tokens], ["errors", "errors", tokens],
    ["duration_ns", "time", duration]];
  function node(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function agentTable(agents) {
    var table = node("table", "agents");
    var head = node("thead");
    var groups = node("tr");
    groups.appendChild(node("th"));
    groups.appendChild(node("th"));
    [["own", "own work"], ["total", "with what it started"]].forEach(function (g) {
      var th = node("th", "group", g[1]);
      th.colSpan = FIGURES.length;
      th.setAttribute("data-group", g[0]);
      groups.appendChild(th);
    });
    head.appendChild(groups);
    var names = node("tr");
    names.appendChild(node("th", null, "agent"));
    names.appendChild(node("th", "num", "runs"));
    ["own", "total"].forEach(function () {
      FIGURES.forEach(function (f, i) {
        names.appendChild(node("th", "num" + (i === 0 ? " first" : ""), f[1]));
      });
    });
    head.appendChild(names);
    table.appendChild(head);
    var body = node("tbody");
    agents.forEach(function (agent) {
      var tr = node("tr");
      tr.setAttribute("data-agent", agent.agent);
      var name = node("td", "agent", agent.agent);
      name.style.paddingLeft = (6 + agent.depth * 14) + "px";
      if (agent.started_by.length) name.title = "started by " + agent.started_by.join(", ");
      tr.appendChild(name);
      var runs = node("td", "num", agent.runs);
      runs.setAttribute("data-k", "runs");
      if (agent.cancelled) runs.appendChild(node("span", "cancel", " (" + agent.cancelled +
        " cancelled)"));
      if (agent.failed) runs.appendChild(node("span", "err", " (" + agent.failed + " failed)"));
      tr.appendChild(runs);
      ["own", "total"].forEach(function (g) {
        var u = agent[g];
        FIGURES.forEach(function (f, i) {
          var text = f[0] === "cost" ? costOf(u.cost, u.unpriced_calls) : f[2](u[f[0]]);
          var td = node("td", "num" + (i === 0 ? " first" : ""), text);
          td.setAttribute("data-k", g + "." + f[0]);
          if (f[0] === "cost") {
            td.setAttribute("data-cost-status", u.cost_status || "");
            td.title = unpricedNote(u.unpriced_calls, g === "total" ? agent.unpriced_models
              : null);
          }
          tr.appendChild(td);
        });
      });
      body.appendChild(tr);
    });
    table.appendChild(body);
    return table;
  }
  return { duration: duration, cost: cost, tokens: tokens, seconds: seconds, costOf: costOf,
    unpricedNote: unpricedNote, agentTable: agentTable };
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="runnertrace">
<title>__TITLE__</title>
<style>__STYLE__</style>
</head>
<body>
<header id="summary"></header>
<main>
  <section id="waterfall" aria-label="Span waterfall">
    <div id="axis" aria-hidden="true"></div>
    <div id="rows" role="tree"></div>
  </section>
  <aside id="detail" aria-live="polite">
    <p class="hint">Select a span to see its attributes and events.</p>
  </aside>
</main>
<noscript><p class="hint">This report draws its waterfall with JavaScript; the span data is
embedded in the page source as JSON.</p></noscript>
<script id="runnertrace-data" type="application/json">__DATA__</script>
<script>__FORMAT__
__SCRIPT__</script>
</body>
</html>
"""

_STYLE = """
:root {
  --bg: #f7f8fa; --panel: #ffffff; --fg: #1d2330; --muted: #6b7385; --line: #e3e6ec;
  --grid: #eceef2; --hover: #f1f4fb; --sel: #e5edff; --sel-line: #4c6ef5;
  --run: #5b5bd6; --step: #14a38b; --message: #3b82f6; --reasoning: #a855f7;
  --tool: #f59e0b; --other: #8a94a6; --error: #e5484d; --ok: #2f9e44; --warn: #d97706;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #111318; --panel: #181b22; --fg: #e6e8ee; --muted: #9098aa; --line: #2a2f3a;
    --grid: #22262f; --hover: #1f2430; --sel: #24304d; --sel-line: #7c9cff;
  }
}
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; }
body {
  background: var(--bg); color: var(--fg);
  font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Ubuntu, sans-serif;
  display: flex; flex-direction: column;
}
header#summary {
  padding: 14px 20px 12px; background: var(--panel); border-bottom: 1px solid var(--line);
}
header h1 { margin: 0 0 8px; font-size: 17px; font-weight: 650; display: flex;
  align-items: center; gap: 10px; flex-wrap: wrap; }
header h1 .tid { font: 12px var(--mono); color: var(--muted); font-weight: 400; }
.chips { display: flex; flex-wrap: wrap; gap: 6px 18px; color: var(--muted); }
.chips b { color: var(--fg); font-weight: 600; }
.legend { display: flex; gap: 14px; margin-top: 8px; color: var(--muted); font-size: 12px; }
.legend span { display: inline-flex; align-items: center; gap: 5px; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px;
  font-weight: 600; color: #fff; background: var(--ok); }
.pill.error { background: var(--error); } .pill.unset { background: var(--other); }
.pill.cancelled, .pill.incomplete { background: var(--warn); }
main { flex: 1; display: grid; grid-template-columns: minmax(0, 1fr) minmax(440px, 44%);
  min-height: 0; }
#waterfall { overflow: auto; min-width: 0; }
#waterfall { --name-col: minmax(240px, 34%); }
#axis, .row { display: grid; grid-template-columns: var(--name-col) 150px 1fr; }
#axis .colname.span-col { position: relative; }
.resizer { position: absolute; top: 0; right: -3px; width: 7px; height: 100%; cursor: col-resize;
  z-index: 3; border-right: 2px solid var(--line); }
.resizer:hover, .resizer.dragging { border-right-color: var(--sel-line); }
.row.fail-path .label .name { color: var(--error); }
#axis.narrow .tick:not(:first-child):not(:last-child) { display: none; }
.row.fail-path .dot { box-shadow: 0 0 0 2px var(--error); }
#axis { position: sticky; top: 0; z-index: 2; background: var(--bg); height: 28px;
  border-bottom: 1px solid var(--line); color: var(--muted); font-size: 11px; }
#axis .scale { position: relative; margin-right: 70px; }
#axis .tick { position: absolute; top: 7px; transform: translateX(-50%); white-space: nowrap; }
#axis .tick:first-child { transform: none; }
#axis .colname { padding: 7px 12px; }
.row { height: 30px; align-items: center; cursor: pointer; border-bottom: 1px solid var(--grid);
  outline: none; }
.row:hover { background: var(--hover); }
.row.selected { background: var(--sel); box-shadow: inset 3px 0 0 var(--sel-line); }
.row.hidden { display: none; }
.label { display: flex; align-items: center; gap: 6px; min-width: 0; padding-right: 10px;
  white-space: nowrap; }
.label .name { overflow: hidden; text-overflow: ellipsis; }
.row.error .label .name { color: var(--error); font-weight: 600; }
.caret { width: 16px; height: 16px; border: 0; padding: 0; background: none; color: var(--muted);
  cursor: pointer; font-size: 10px; flex: none; transition: transform .12s; }
.caret.collapsed { transform: rotate(-90deg); }
.caret.none { visibility: hidden; }
.dot { width: 9px; height: 9px; border-radius: 3px; flex: none; background: var(--other); }
.badge { font-size: 10px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted);
  border: 1px solid var(--line); border-radius: 4px; padding: 0 4px; flex: none; }
.track { position: relative; height: 100%; margin-right: 70px;
  background-image: linear-gradient(to right, var(--grid) 1px, transparent 1px);
  background-size: 25% 100%; }
.bar { position: absolute; top: 8px; height: 14px; min-width: 2px; border-radius: 3px;
  background: var(--other); }
.row.error .bar { background: repeating-linear-gradient(135deg, var(--error) 0 6px,
  color-mix(in srgb, var(--error) 75%, #fff) 6px 12px); }
.dur { position: absolute; top: 7px; font: 11px var(--mono); color: var(--muted);
  white-space: nowrap; }
.dur.inside { color: #fff; top: 8px; line-height: 14px; font-weight: 600; }
.t-run { background: var(--run); } .t-step { background: var(--step); }
.t-message { background: var(--message); } .t-reasoning { background: var(--reasoning); }
.t-tool { background: var(--tool); }
#detail { border-left: 1px solid var(--line); background: var(--panel); overflow: auto;
  padding: 16px 18px 40px; }
#detail h2 { margin: 0 0 6px; font-size: 15px; word-break: break-word; }
#detail h3 { margin: 18px 0 6px; font-size: 12px; text-transform: uppercase; letter-spacing: .06em;
  color: var(--muted); }
#detail .status { margin: 4px 0 10px; display: flex; gap: 8px; align-items: center;
  flex-wrap: wrap; }
#detail .desc { color: var(--error); }
.hint { color: var(--muted); padding: 8px 0; }
table.kv { width: 100%; border-collapse: collapse; table-layout: fixed; }
table.kv td { border-top: 1px solid var(--grid); padding: 4px 6px 4px 0; vertical-align: top;
  word-break: break-word; }
table.kv td.k { width: 44%; color: var(--muted); font: 11.5px var(--mono); }
table.kv td.v { font: 12px var(--mono); }
table.kv pre { margin: 0; white-space: pre-wrap; font: inherit; max-height: 320px; overflow: auto; }
ol.events { list-style: none; margin: 0; padding: 0; }
ol.events li { border: 1px solid var(--line); border-radius: 6px; padding: 6px 8px;
  margin-bottom: 6px; }
ol.events .ev-head { display: flex; justify-content: space-between; gap: 8px; font-weight: 600; }
ol.events .ev-head span { font: 11px var(--mono); color: var(--muted); font-weight: 400; }
details summary { cursor: pointer; color: var(--muted); margin-top: 14px; }
.row .meta { display: flex; gap: 8px; justify-content: flex-end; padding-right: 10px;
  font: 11px var(--mono); color: var(--muted); white-space: nowrap; overflow: hidden; }
.row .meta .err { color: var(--error); font-weight: 600; }
.facts { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 2px 0 10px;
  padding: 8px 10px; background: var(--bg); border: 1px solid var(--line); border-radius: 6px; }
.fact { display: flex; flex-direction: column; min-width: 0; }
.err-head .fk { font: 11px var(--mono); color: var(--muted); }
.fact .fk { font-size: 10.5px; text-transform: uppercase; letter-spacing: .05em;
  color: var(--muted); }
.fact b { font-weight: 600; word-break: break-word; }
.tabbar { display: flex; gap: 2px; border-bottom: 1px solid var(--line); margin: 6px 0 10px;
  position: sticky; top: -16px; background: var(--panel); z-index: 1; flex-wrap: wrap; }
.tab { border: 0; background: none; padding: 6px 10px; cursor: pointer; color: var(--muted);
  font: inherit; border-bottom: 2px solid transparent; }
.tab[aria-selected="true"] { color: var(--fg); border-bottom-color: var(--sel-line);
  font-weight: 600; }
.msg { border: 1px solid var(--line); border-left: 3px solid var(--other); border-radius: 6px;
  padding: 6px 10px; margin-bottom: 8px; }
.msg-head { font-size: 11px; text-transform: uppercase; letter-spacing: .06em; font-weight: 700;
  color: var(--muted); margin-bottom: 3px; }
.msg.role-system { border-left-color: var(--run); background: color-mix(in srgb, var(--run) 6%,
  var(--panel)); }
.msg.role-user { border-left-color: var(--message); }
.msg.role-assistant { border-left-color: var(--step); }
.msg.role-tool { border-left-color: var(--tool); }
.msg.output { box-shadow: 0 0 0 1px color-mix(in srgb, var(--step) 35%, transparent); }
.content pre.text { margin: 2px 0; white-space: pre-wrap; word-break: break-word;
  font: 13px/1.45 system-ui, sans-serif; }
.content.mono pre.text { font: 12px/1.4 var(--mono); }
.content .more { border: 0; background: none; color: var(--sel-line); cursor: pointer;
  padding: 0; font: inherit; font-size: 12px; }
.call { border: 1px dashed var(--line); border-radius: 5px; padding: 4px 8px; margin: 4px 0; }
.call-head { display: flex; gap: 8px; align-items: center; }
.call-head .cid { font: 11px var(--mono); color: var(--muted); }
.def { border-top: 1px solid var(--grid); padding: 6px 0; }
.def p { margin: 2px 0; color: var(--muted); }
.toolcall h4 { margin: 8px 0 2px; font-size: 12px; color: var(--muted); }
.errorbox { border: 1px solid var(--error); border-radius: 6px; padding: 8px 10px;
  margin-bottom: 10px; background: color-mix(in srgb, var(--error) 7%, var(--panel)); }
.err-head { display: flex; gap: 8px; align-items: baseline; }
.err-head b { color: var(--error); }
.err-msg { margin: 4px 0; font-weight: 600; word-break: break-word; }
.row.cancelled .label .name { color: var(--warn); }
.row.cancelled .bar { opacity: .5; }
.row .meta .cancel, .agents .cancel { color: var(--warn); font-weight: 600; }
.row .meta .agg { color: var(--fg); }
.agents .err { color: var(--error); font-weight: 600; }
details.agents { margin-top: 8px; }
details.agents summary { margin-top: 0; }
table.agents { border-collapse: collapse; margin-top: 6px; font-size: 12px; }
table.agents th, table.agents td { padding: 2px 8px; border-bottom: 1px solid var(--grid);
  white-space: nowrap; text-align: left; }
table.agents th { color: var(--muted); font-weight: 600; font-size: 11px; }
table.agents th.group { text-align: center; border-bottom: 1px solid var(--line); }
table.agents .num { text-align: right; font-family: var(--mono); }
table.agents .first { border-left: 1px solid var(--line); }
table.agents td.agent { font-weight: 600; }
@media (max-width: 900px) { main { grid-template-columns: 1fr; } #detail { border-left: 0;
  border-top: 1px solid var(--line); } }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("runnertrace-data").textContent);
  var spans = data.spans, summary = data.summary;
  var total = Math.max(1, summary.duration_ns);
  var TYPES = ["run", "step", "message", "reasoning", "tool"];
  var rowsEl = document.getElementById("rows");
  var detailEl = document.getElementById("detail");
  var rowById = {}, spanById = {}, collapsed = {}, selected = null, activeTab = null;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function typeClass(span) {
    return "t-" + (TYPES.indexOf(span.type) >= 0 ? span.type : "other");
  }
  function pct(ns) { return Math.min(100, Math.max(0, ns / total * 100)); }

  function renderSummary() {
    var header = document.getElementById("summary");
    var h1 = el("h1");
    h1.appendChild(el("span", null, summary.name || (spans[0] && spans[0].name) || "trace"));
    var status = summary.status || (spans.some(function (s) {
      return s.status_code === "ERROR"; }) ? "error" : "ok");
    h1.appendChild(el("span", "pill " + status, status));
    h1.appendChild(el("span", "tid", summary.trace_id));
    header.appendChild(h1);
    var chips = el("div", "chips");
    function chip(label, value, key) {
      if (value === undefined || value === null || value === "") return null;
      var c = el("span", null, label + " ");
      c.setAttribute("data-chip", key || label);
      c.appendChild(el("b", null, value));
      chips.appendChild(c);
      return c;
    }
    chip("agent", summary.agent);
    chip("framework", summary.framework);
    chip("mode", summary.mode);
    chip("duration", RT.duration(summary.duration_ns));
    chip("spans", summary.span_count);
    // The run's numbers are its root span's totals: everything it caused, nested runs in.
    if (summary.input_tokens !== undefined) {
      chip("tokens", RT.tokens(summary.input_tokens + summary.output_tokens) + " (" +
        RT.tokens(summary.input_tokens) + " in / " + RT.tokens(summary.output_tokens) + " out)");
    }
    if (typeof summary.cost === "number" || summary.unpriced_calls) {
      var costChip = chip("cost", RT.costOf(summary.cost, summary.unpriced_calls));
      costChip.setAttribute("data-cost-status", summary.cost_status || "");
      costChip.title = RT.unpricedNote(summary.unpriced_calls, summary.unpriced_models);
    }
    if (summary.model_calls !== undefined) {
      chip("model calls", summary.model_calls);
      chip("tool calls", summary.tool_calls);
      if (summary.errors) chip("failed calls", summary.errors);
    }
    if (summary.nested_runs) chip("nested runs", summary.nested_runs);
    if (summary.error_count) chip("error spans", summary.error_count);
    if (summary.derived && summary.model_calls) {
      chip("totals", "summed from the model calls", "derived").title = "The root span " +
        "carries no totals (another app's trace): these are the sums of its model-call spans.";
    }
    chip("session", summary.session_id);
    chip("started", summary.started);
    header.appendChild(chips);
    renderAgents(header);
    var legend = el("div", "legend");
    TYPES.forEach(function (t) {
      var item = el("span");
      item.appendChild(el("i", "dot t-" + t));
      item.appendChild(document.createTextNode(t));
      legend.appendChild(item);
    });
    header.appendChild(legend);
  }

  function renderAgents(header) {
    var agents = data.agents || [];
    if (!agents.length) return;
    var box = el("details", "agents");
    box.id = "agents";
    box.open = agents.length > 1;
    box.appendChild(el("summary", null, "Agents (" + agents.length + "): own work \u00b7 " +
      "with what it started"));
    box.appendChild(RT.agentTable(agents));
    header.appendChild(box);
  }

  function renderAxis() {
    var axis = document.getElementById("axis");
    var nameCol = el("div", "colname span-col", "span");
    nameCol.appendChild(nameResizer());
    axis.appendChild(nameCol);
    axis.appendChild(el("div", "colname", "tokens \u00b7 cost"));
    var scale = el("div", "scale");
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var tick = el("span", "tick", f ? RT.duration(Math.round(total * f)) : "0");
      tick.style.left = (f * 100) + "%";
      scale.appendChild(tick);
    });
    axis.appendChild(scale);
  }

  function nameResizer() {
    // Deep trees cut long names: the name column is dragged wider (double-click: back to the
    // default); every row follows, since all share the one custom property.
    var handle = el("div", "resizer");
    handle.title = "drag to resize the name column";
    var waterfall = document.getElementById("waterfall");
    handle.addEventListener("mousedown", function (e) {
      e.preventDefault();
      handle.classList.add("dragging");
      var left = waterfall.getBoundingClientRect().left;
      function drag(m) {
        // the token column (150 px) and a timeline of 200 px always stay
        var width = Math.max(160, Math.min(m.clientX - left, waterfall.clientWidth - 350));
        waterfall.style.setProperty("--name-col", width + "px");
        // a narrow timeline keeps its first and last tick only, so no labels overlap
        var scale = document.querySelector("#axis .scale");
        document.getElementById("axis").classList.toggle("narrow", scale.clientWidth < 300);
      }
      function drop() {
        handle.classList.remove("dragging");
        document.removeEventListener("mousemove", drag);
        document.removeEventListener("mouseup", drop);
      }
      document.addEventListener("mousemove", drag);
      document.addEventListener("mouseup", drop);
    });
    handle.addEventListener("dblclick", function () {
      waterfall.style.removeProperty("--name-col");
      document.getElementById("axis").classList.remove("narrow");
    });
    return handle;
  }

  function markFailingPaths() {
    // Each failing span's ancestors, up to the root, are marked: a failure three levels down
    // is seen from the top without opening anything.
    spans.forEach(function (span) {
      if (span.status_code !== "ERROR") return;
      var parent = spanById[span.parent_span_id];
      while (parent) {
        var row = rowById[parent.span_id];
        if (row.classList.contains("fail-path")) break;  // the rest of the way is marked
        row.classList.add("fail-path");
        row.title = "a span below this one failed";
        parent = spanById[parent.parent_span_id];
      }
    });
  }

  function rowMeta(span) {
    // What a row costs, at a glance: tokens, price, and the error that ended it.
    var a = span.attributes || {};
    var meta = el("span", "meta");
    var tokens = (a["gen_ai.usage.input_tokens"] || 0) + (a["gen_ai.usage.output_tokens"] || 0);
    if (typeof tokens === "number" && tokens > 0) meta.appendChild(el("span", "tok",
      RT.tokens(tokens) + " tok"));
    if (typeof a["gen_ai.usage.cost"] === "number") meta.appendChild(el("span", "cost",
      RT.cost(a["gen_ai.usage.cost"])));
    if (span.type === "run") {
      // an agent run: what its whole subtree added up to (its nested runs included)
      var sub = (a["gen_ai.aggregated_usage.input_tokens"] || 0) +
        (a["gen_ai.aggregated_usage.output_tokens"] || 0);
      var agg = a["gen_ai.aggregated_usage.cost"], unpriced = a["runnertrace.usage.unpriced_calls"];
      if (sub > 0) meta.appendChild(el("span", "tok agg", "\u03a3 " + RT.tokens(sub) + " tok"));
      if (typeof agg === "number" || unpriced) {
        // compact: a partial sum is "at least" that much (the header spells it out)
        var total = el("span", "cost agg", !unpriced ? RT.cost(agg)
          : typeof agg === "number" ? "\u2265" + RT.cost(agg) : "unpriced");
        total.title = "this run with what it started" + (unpriced ? "; " +
          RT.unpricedNote(unpriced, a["runnertrace.usage.unpriced_models"]) : "");
        meta.appendChild(total);
      }
    }
    // cancelled (a sibling failed, the caller stopped) before error: it ended in
    // CancelledError, but it did not fail
    if (a["runnertrace.cancelled"]) meta.appendChild(el("span", "cancel", "\u2298 cancelled"));
    else if (span.status_code === "ERROR") meta.appendChild(el("span", "err",
      "\u26a0 " + (a["error.type"] || "error")));
    return meta;
  }

  function renderRows() {
    spans.forEach(function (span) {
      spanById[span.span_id] = span;
      var row = el("div", "row" + ((span.attributes || {})["runnertrace.cancelled"] ? " cancelled"
        : span.status_code === "ERROR" ? " error" : ""));
      row.setAttribute("data-span-id", span.span_id);
      row.setAttribute("data-depth", span.depth);
      row.setAttribute("role", "treeitem");
      row.setAttribute("aria-level", span.depth + 1);
      row.tabIndex = -1;
      var label = el("div", "label");
      label.style.paddingLeft = (8 + span.depth * 18) + "px";
      var caret = el("button", "caret" + (span.has_children ? "" : " none"), "\u25bc");
      caret.type = "button";
      caret.setAttribute("aria-label", "collapse or expand");
      caret.addEventListener("click", function (e) {
        e.stopPropagation();
        collapsed[span.span_id] = !collapsed[span.span_id];
        caret.classList.toggle("collapsed", !!collapsed[span.span_id]);
        refreshVisibility();
      });
      label.appendChild(caret);
      label.appendChild(el("span", "dot " + typeClass(span)));
      var name = el("span", "name", span.name);
      name.title = span.name;
      label.appendChild(name);
      if (span.type) label.appendChild(el("span", "badge", span.type));
      var track = el("div", "track");
      var left = pct(span.offset_ns), width = pct(span.duration_ns);
      var bar = el("div", "bar " + typeClass(span));
      bar.style.left = left + "%";
      bar.style.width = width + "%";
      track.appendChild(bar);
      var dur = el("span", "dur", RT.duration(span.duration_ns));
      if (left + width <= 78) {
        dur.style.left = "calc(" + (left + width) + "% + 6px)";
      } else if (left >= 14) {
        dur.style.right = "calc(" + (100 - left) + "% + 6px)";
      } else {
        dur.className = "dur inside";
        dur.style.right = "calc(" + (100 - left - width) + "% + 6px)";
      }
      track.appendChild(dur);
      row.appendChild(label);
      row.appendChild(rowMeta(span));
      row.appendChild(track);
      row.addEventListener("click", function () { select(span.span_id, true); });
      rowById[span.span_id] = row;
      rowsEl.appendChild(row);
    });
  }

  function refreshVisibility() {
    var hideBelow = Infinity;
    spans.forEach(function (span) {
      var row = rowById[span.span_id];
      if (span.depth > hideBelow) { row.classList.add("hidden"); return; }
      hideBelow = collapsed[span.span_id] ? span.depth : Infinity;
      row.classList.remove("hidden");
    });
  }

  function valueNode(value) {
    if (typeof value === "string") {
      var trimmed = value.trim();
      if (trimmed.charAt(0) === "{" || trimmed.charAt(0) === "[") {
        try { return el("pre", null, JSON.stringify(JSON.parse(trimmed), null, 2)); }
        catch (err) { /* not JSON: show as text */ }
      }
      return value.length > 80 || value.indexOf("\n") >= 0 ? el("pre", null, value)
        : el("span", null, value);
    }
    if (value !== null && typeof value === "object") {
      return el("pre", null, JSON.stringify(value, null, 2));
    }
    return el("span", null, String(value));
  }

  function keyCell(key) {
    // Let long dotted keys wrap at the dots, not mid-word.
    var td = el("td", "k");
    key.split(".").forEach(function (part, i, parts) {
      td.appendChild(document.createTextNode(part + (i < parts.length - 1 ? "." : "")));
      if (i < parts.length - 1) td.appendChild(document.createElement("wbr"));
    });
    return td;
  }

  function kvTable(obj, keepOrder) {
    var keys = Object.keys(obj || {});
    if (!keepOrder) keys.sort();
    if (!keys.length) return el("p", "hint", "none");
    var table = el("table", "kv");
    keys.forEach(function (key) {
      var tr = el("tr");
      tr.appendChild(keyCell(key));
      var td = el("td", "v");
      td.appendChild(valueNode(obj[key]));
      tr.appendChild(td);
      table.appendChild(tr);
    });
    return table;
  }

  function collapsible(text, cls) {
    // Long content starts folded: the header and the turn order stay in view.
    var value = String(text);
    var lines = value.split("\n");
    var box = el("div", "content" + (cls ? " " + cls : ""));
    var body = el("pre", "text");
    box.appendChild(body);
    if (value.length <= 900 && lines.length <= 14) { body.textContent = value; return box; }
    var short = lines.length > 14 ? lines.slice(0, 12).join("\n") : value.slice(0, 700);
    body.textContent = short + " \u2026";
    var more = el("button", "more", "show all (" + RT.tokens(value.length) + " chars)");
    more.type = "button";
    more.addEventListener("click", function (e) {
      e.stopPropagation();
      var open = more.getAttribute("data-open") === "1";
      body.textContent = open ? short + " \u2026" : value;
      more.textContent = open ? "show all (" + RT.tokens(value.length) + " chars)" : "show less";
      more.setAttribute("data-open", open ? "0" : "1");
    });
    box.appendChild(more);
    return box;
  }
  function pretty(value) {
    if (typeof value === "string") {
      var t = value.trim();
      if (t.charAt(0) === "{" || t.charAt(0) === "[") {
        try { return JSON.stringify(JSON.parse(t), null, 2); } catch (err) { return value; }
      }
      return value;
    }
    return JSON.stringify(value, null, 2);
  }
  function parsed(value) {
    if (typeof value !== "string") return value;
    try { return JSON.parse(value); } catch (err) { return value; }
  }
  function tabs(panes) {
    // panes: [[name, label, node]]; the last tab picked stays picked from span to span.
    var wrap = el("div", "tabs");
    var bar = el("div", "tabbar");
    bar.setAttribute("role", "tablist");
    wrap.appendChild(bar);
    var names = panes.map(function (p) { return p[0]; });
    var active = names.indexOf(activeTab) >= 0 ? activeTab : names[0];
    panes.forEach(function (p) {
      var b = el("button", "tab", p[1]);
      b.type = "button";
      b.setAttribute("role", "tab");
      b.setAttribute("data-tab", p[0]);
      var pane = el("div", "pane");
      pane.setAttribute("role", "tabpanel");
      pane.setAttribute("data-pane", p[0]);
      pane.appendChild(p[2]);
      function show() {
        bar.querySelectorAll(".tab").forEach(function (x) {
          x.setAttribute("aria-selected", String(x === b));
        });
        wrap.querySelectorAll(".pane").forEach(function (x) { x.hidden = x !== pane; });
      }
      b.addEventListener("click", function () { activeTab = p[0]; show(); });
      bar.appendChild(b);
      wrap.appendChild(pane);
      if (p[0] === active) setTimeout(show, 0);
      pane.hidden = p[0] !== active;
      b.setAttribute("aria-selected", String(p[0] === active));
    });
    return wrap;
  }
  function facts(pairs) {
    var box = el("div", "facts");
    pairs.forEach(function (p) {
      if (p[1] === undefined || p[1] === null || p[1] === "") return;
      var f = el("div", "fact");
      f.appendChild(el("span", "fk", p[0]));
      f.appendChild(el("b", null, p[1]));
      box.appendChild(f);
    });
    return box;
  }
  function first(a, keys) {
    for (var i = 0; i < keys.length; i++) if (a[keys[i]] !== undefined) return a[keys[i]];
    return undefined;
  }

  // -- a model call ----------------------------------------------------------------------------
  function partNode(part) {
    if (typeof part === "string") return collapsible(part);
    var type = part && part.type;
    if (type === "text") return collapsible(part.content === undefined ? "" : part.content);
    if (type === "tool_call") {
      var call = el("div", "call");
      var head = el("div", "call-head");
      head.appendChild(el("span", "badge", "tool call"));
      head.appendChild(el("b", null, part.name || "(unnamed)"));
      if (part.id) head.appendChild(el("span", "cid", part.id));
      call.appendChild(head);
      call.appendChild(collapsible(pretty(part.arguments === undefined ? {} : part.arguments),
        "mono"));
      return call;
    }
    if (type === "tool_call_response") {
      var res = el("div", "call result");
      var rh = el("div", "call-head");
      rh.appendChild(el("span", "badge", "tool result"));
      if (part.id) rh.appendChild(el("span", "cid", part.id));
      res.appendChild(rh);
      res.appendChild(collapsible(pretty(part.response === undefined ? part.result : part.response),
        "mono"));
      return res;
    }
    if (type === "reasoning" || type === "thinking") {
      var r = el("details", "reasoning");
      r.appendChild(el("summary", null, "reasoning"));
      r.appendChild(collapsible(part.content || ""));
      return r;
    }
    return collapsible(pretty(part), "mono");
  }
  function messageNode(msg, where) {
    var role = String((msg && msg.role) || "user");
    var box = el("div", "msg role-" + role.replace(/[^a-z_]/gi, "") + (where ? " " + where : ""));
    box.setAttribute("data-role", role);
    var head = el("div", "msg-head", role);
    if (where === "output") head.appendChild(el("span", "hint", " output"));
    if (msg && msg.finish_reason) {
      head.appendChild(el("span", "hint", " \u00b7 " + msg.finish_reason));
    }
    box.appendChild(head);
    var parts = msg && Array.isArray(msg.parts) ? msg.parts
      : msg && msg.content !== undefined ? [String(msg.content)] : [];
    parts.forEach(function (p) { box.appendChild(partNode(p)); });
    if (!parts.length) box.appendChild(el("p", "hint", "(empty)"));
    return box;
  }
  function chatNode(a) {
    var chat = el("div", "chat");
    var system = parsed(a["gen_ai.system_instructions"]);
    var input = parsed(a["gen_ai.input.messages"]);
    var output = parsed(a["gen_ai.output.messages"]);
    input = Array.isArray(input) ? input : input ? [{ role: "user", parts: [String(input)] }] : [];
    output = Array.isArray(output) ? output
      : output ? [{ role: "assistant", parts: [String(output)] }] : [];
    var systems = input.filter(function (m) { return m && m.role === "system"; });
    if (system !== undefined) {
      chat.appendChild(messageNode({ role: "system",
        parts: Array.isArray(system) ? system : [String(system)] }));
    }
    systems.forEach(function (m) { chat.appendChild(messageNode(m)); });
    input.filter(function (m) { return !(m && m.role === "system"); }).forEach(function (m) {
      chat.appendChild(messageNode(m));
    });
    output.forEach(function (m) { chat.appendChild(messageNode(m, "output")); });
    if (!chat.children.length) chat.appendChild(el("p", "hint",
      "No messages were captured (content capture is off for this run)."));
    return chat;
  }
  function toolDefsNode(a) {
    var defs = parsed(a["gen_ai.tool.definitions"]);
    var box = el("div", "defs");
    if (!Array.isArray(defs) || !defs.length) {
      box.appendChild(el("p", "hint", "none"));
      return box;
    }
    defs.forEach(function (d) {
      var item = el("div", "def");
      var fn = d && d["function"] ? d["function"] : d || {};
      item.appendChild(el("b", null, fn.name || "(unnamed)"));
      if (fn.description) item.appendChild(el("p", null, fn.description));
      var schema = fn.parameters || fn.parameters_json_schema || {};
      item.appendChild(collapsible(pretty(schema), "mono"));
      box.appendChild(item);
    });
    return box;
  }
  function paramsNode(a) {
    var params = {};
    Object.keys(a).forEach(function (k) {
      if (k.indexOf("gen_ai.request.") === 0 || k === "llm.invocation_parameters" ||
        k === "model_request_parameters") params[k] = a[k];
    });
    return kvTable(params);
  }
  function modelHeader(span, a) {
    var tin = a["gen_ai.usage.input_tokens"], tout = a["gen_ai.usage.output_tokens"];
    var ttfc = first(a, ["gen_ai.response.time_to_first_chunk",
      "gen_ai.client.operation.time_to_first_chunk"]);
    var reasons = a["gen_ai.response.finish_reasons"];
    return facts([
      ["model", first(a, ["gen_ai.response.model", "gen_ai.request.model"])],
      ["provider", first(a, ["gen_ai.provider.name", "gen_ai.system"])],
      ["tokens in / out", tin === undefined && tout === undefined ? undefined
        : RT.tokens(tin) + " / " + RT.tokens(tout)],
      ["cost", typeof a["gen_ai.usage.cost"] === "number" ? RT.cost(a["gen_ai.usage.cost"])
        : undefined],
      ["duration", RT.duration(span.duration_ns)],
      ["first chunk", typeof ttfc === "number" ? RT.seconds(ttfc) : undefined],
      ["finish", Array.isArray(reasons) ? reasons.join(", ") : reasons]
    ]);
  }

  // -- a tool call and an error ----------------------------------------------------------------
  function toolNode(a) {
    var box = el("div", "toolcall");
    box.appendChild(el("h4", null, "Arguments"));
    var args = first(a, ["gen_ai.tool.call.arguments", "input.value"]);
    box.appendChild(args === undefined ? el("p", "hint", "not captured")
      : collapsible(pretty(args), "mono"));
    box.appendChild(el("h4", null, "Result"));
    var result = first(a, ["gen_ai.tool.call.result", "output.value"]);
    box.appendChild(result === undefined ? el("p", "hint", "not captured")
      : collapsible(pretty(result), "mono"));
    return box;
  }
  function errorNode(span, a) {
    var exc = (span.events || []).filter(function (e) { return e.name === "exception"; })[0];
    var ea = exc ? exc.attributes || {} : {};
    var box = el("div", "errorbox");
    box.setAttribute("role", "alert");
    var type = a["error.type"] || ea["exception.type"] || "error";
    var head = el("div", "err-head");
    head.appendChild(el("span", "fk", "error.type"));
    head.appendChild(el("b", null, type));
    box.appendChild(head);
    var message = span.status_description || ea["exception.message"];
    if (message) box.appendChild(el("div", "err-msg", message));
    if (ea["exception.stacktrace"]) {
      box.appendChild(collapsible(ea["exception.stacktrace"], "mono stack"));
    }
    return box;
  }

  function eventsNode(span) {
    if (!span.events.length) return el("p", "hint", "none");
    var list = el("ol", "events");
    span.events.forEach(function (event) {
      var li = el("li");
      var head = el("div", "ev-head", event.name);
      head.appendChild(el("span", null, "+" + RT.duration(event.offset_ns)));
      li.appendChild(head);
      if (Object.keys(event.attributes || {}).length) li.appendChild(kvTable(event.attributes));
      list.appendChild(li);
    });
    return list;
  }
  function attributesNode(span) {
    var box = el("div");
    box.appendChild(kvTable({
      "duration": RT.duration(span.duration_ns),
      "starts at": "+" + RT.duration(span.offset_ns),
      "span id": span.span_id,
      "parent span id": span.parent_span_id || "(root)",
      "trace id": span.trace_id,
      "scope": span.scope || ""
    }, true));
    box.appendChild(el("h3", null, "Attributes"));
    box.appendChild(kvTable(span.attributes));
    var resource = el("details");
    resource.appendChild(el("summary", null, "Resource"));
    resource.appendChild(kvTable(span.resource));
    box.appendChild(resource);
    return box;
  }

  function renderDetail(span) {
    detailEl.textContent = "";
    detailEl.setAttribute("data-detail-for", span.span_id);
    var a = span.attributes || {};
    detailEl.setAttribute("data-kind", span.type || "other");
    detailEl.appendChild(el("h2", null, span.name));
    var status = el("div", "status");
    // One vocabulary with the header and `runnertrace traces`: ok, error, cancelled.
    var cancelled = a["runnertrace.cancelled"] && span.status_code === "ERROR";
    var code = cancelled ? "cancelled" : span.status_code === "ERROR" ? "error"
      : a["runnertrace.cancelled"] ? "cancelled" : "ok";
    status.appendChild(el("span", "pill " + code, code));
    if (span.type) status.appendChild(el("span", "badge", span.type));
    status.appendChild(el("span", "badge", span.kind));
    detailEl.appendChild(status);
    var names = Object.keys(a);
    var common = [["attributes", "Attributes (" + names.length + ")", attributesNode(span)],
      ["events", "Events (" + span.events.length + ")", eventsNode(span)]];
    if (span.type === "message") {
      detailEl.appendChild(modelHeader(span, a));
      if (span.status_code === "ERROR") detailEl.appendChild(errorNode(span, a));
      var defs = parsed(a["gen_ai.tool.definitions"]);
      detailEl.appendChild(tabs([["chat", "Chat", chatNode(a)],
        ["tools", "Tools (" + (Array.isArray(defs) ? defs.length : 0) + ")", toolDefsNode(a)],
        ["params", "Parameters", paramsNode(a)]].concat(common)));
      return;
    }
    if (span.type === "tool") {
      detailEl.appendChild(facts([
        ["tool", first(a, ["gen_ai.tool.name", "tool.name"])],
        ["call id", a["gen_ai.tool.call.id"]],
        ["duration", RT.duration(span.duration_ns)]
      ]));
      if (span.status_code === "ERROR") detailEl.appendChild(errorNode(span, a));
      detailEl.appendChild(tabs([["call", "Call", toolNode(a)]].concat(common)));
      return;
    }
    var shown = [["duration", RT.duration(span.duration_ns)]];
    var tin = a["gen_ai.usage.input_tokens"] || a["gen_ai.aggregated_usage.input_tokens"];
    var tout = a["gen_ai.usage.output_tokens"] || a["gen_ai.aggregated_usage.output_tokens"];
    if (tin || tout) shown.push(["tokens in / out", RT.tokens(tin) + " / " + RT.tokens(tout)]);
    var c = first(a, ["gen_ai.aggregated_usage.cost", "gen_ai.usage.cost"]);
    var unpriced = a["runnertrace.usage.unpriced_calls"];
    if (typeof c === "number" || unpriced) shown.push(["cost", RT.costOf(c, unpriced)]);
    if (unpriced) shown.push(["unpriced", RT.unpricedNote(unpriced,
      a["runnertrace.usage.unpriced_models"])]);
    if (a["runnertrace.aggregated.model_calls"] !== undefined) {
      shown.push(["model calls", a["runnertrace.aggregated.model_calls"]]);
      shown.push(["tool calls", a["runnertrace.aggregated.tool_calls"]]);
      shown.push(["failed calls", a["runnertrace.aggregated.errors"]]);
    }
    if (a["runnertrace.nested_runs"]) {
      // its own work, without the runs it started
      shown.push(["nested runs", a["runnertrace.nested_runs"]]);
      shown.push(["own tokens in / out", RT.tokens(a["runnertrace.own.input_tokens"]) + " / " +
        RT.tokens(a["runnertrace.own.output_tokens"])]);
      shown.push(["own cost", RT.costOf(a["runnertrace.own.cost"],
        a["runnertrace.own.unpriced_calls"])]);
      shown.push(["own model calls", a["runnertrace.own.model_calls"]]);
    }
    detailEl.appendChild(facts(shown));
    if (span.status_code === "ERROR") detailEl.appendChild(errorNode(span, a));
    var panes = common.slice();
    if (a["input.value"] !== undefined || a["output.value"] !== undefined ||
      a["gen_ai.input.messages"] !== undefined || a["gen_ai.output.messages"] !== undefined) {
      panes.unshift(["io", "Input / output", chatNode({
        "gen_ai.input.messages": a["gen_ai.input.messages"] || a["input.value"],
        "gen_ai.output.messages": a["gen_ai.output.messages"] || a["output.value"]
      })]);
    }
    detailEl.appendChild(tabs(panes));
  }

  function select(id, updateHash) {
    var span = spanById[id];
    if (!span) return;
    if (selected && rowById[selected]) rowById[selected].classList.remove("selected");
    selected = id;
    var row = rowById[id];
    row.classList.add("selected");
    row.focus({ preventScroll: true });
    renderDetail(span);
    if (updateHash && window.history && history.replaceState) {
      try { history.replaceState(null, "", "#span=" + id); } catch (err) { /* file: URLs */ }
    }
  }

  function move(step) {
    var visible = spans.filter(function (s) {
      return !rowById[s.span_id].classList.contains("hidden"); });
    var index = visible.findIndex(function (s) { return s.span_id === selected; });
    var next = visible[Math.min(visible.length - 1, Math.max(0, index + step))];
    if (!next) return;
    select(next.span_id, true);
    rowById[next.span_id].scrollIntoView({ block: "nearest" });
  }

  renderSummary();
  renderAxis();
  renderRows();
  markFailingPaths();
  document.addEventListener("keydown", function (e) {
    if (e.key === "ArrowDown" || e.key === "j") { move(1); e.preventDefault(); }
    else if (e.key === "ArrowUp" || e.key === "k") { move(-1); e.preventDefault(); }
  });
  var match = /span=([0-9a-f]+)/.exec(window.location.hash);
  if (match && spanById[match[1]]) select(match[1], false);
  else if (spans.length) select(spans[0].span_id, false);
  document.body.setAttribute("data-rendered", String(spans.length));
})();
"""

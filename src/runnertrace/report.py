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

from runnertrace import __version__
from runnertrace.exporters.local_store import RunSummary, SpanStore, StoredSpan, span_tree

__all__ = ["render_report", "write_report"]

_PLACEHOLDER = re.compile(r"__(TITLE|STYLE|SCRIPT|DATA)__")


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
        )
    return {"version": __version__, "summary": summary, "spans": rows}


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
<script>__SCRIPT__</script>
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
main { flex: 1; display: grid; grid-template-columns: minmax(0, 1fr) 440px; min-height: 0; }
#waterfall { overflow: auto; min-width: 0; }
#axis, .row { display: grid; grid-template-columns: minmax(260px, 36%) 1fr; }
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
  var rowById = {}, spanById = {}, collapsed = {}, selected = null;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function fmt(ns) {
    if (ns < 1e3) return ns + " ns";
    if (ns < 1e6) return (ns / 1e3).toFixed(ns < 1e4 ? 1 : 0) + " \u00b5s";
    if (ns < 1e9) return (ns / 1e6).toFixed(ns < 1e7 ? 2 : 1) + " ms";
    return (ns / 1e9).toFixed(2) + " s";
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
    function chip(label, value) {
      if (value === undefined || value === null || value === "") return;
      var c = el("span", null, label + " ");
      c.appendChild(el("b", null, value));
      chips.appendChild(c);
    }
    chip("agent", summary.agent);
    chip("framework", summary.framework);
    chip("mode", summary.mode);
    chip("duration", fmt(summary.duration_ns));
    chip("spans", summary.span_count);
    if (summary.input_tokens || summary.output_tokens) {
      chip("tokens", (summary.input_tokens + summary.output_tokens) + " (" +
        summary.input_tokens + " in / " + summary.output_tokens + " out)");
    }
    if (typeof summary.cost === "number") chip("cost", "$" + summary.cost.toFixed(4));
    if (summary.error_count) chip("error spans", summary.error_count);
    chip("session", summary.session_id);
    chip("started", summary.started);
    header.appendChild(chips);
    var legend = el("div", "legend");
    TYPES.forEach(function (t) {
      var item = el("span");
      item.appendChild(el("i", "dot t-" + t));
      item.appendChild(document.createTextNode(t));
      legend.appendChild(item);
    });
    header.appendChild(legend);
  }

  function renderAxis() {
    var axis = document.getElementById("axis");
    axis.appendChild(el("div", "colname", "span"));
    var scale = el("div", "scale");
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var tick = el("span", "tick", f ? fmt(Math.round(total * f)) : "0");
      tick.style.left = (f * 100) + "%";
      scale.appendChild(tick);
    });
    axis.appendChild(scale);
  }

  function renderRows() {
    spans.forEach(function (span) {
      spanById[span.span_id] = span;
      var row = el("div", "row" + (span.status_code === "ERROR" ? " error" : ""));
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
      var dur = el("span", "dur", fmt(span.duration_ns));
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

  function renderDetail(span) {
    detailEl.textContent = "";
    detailEl.setAttribute("data-detail-for", span.span_id);
    detailEl.appendChild(el("h2", null, span.name));
    var status = el("div", "status");
    // One vocabulary with the header and `runnertrace traces`: ok, error, cancelled.
    var code = span.status_code === "ERROR" ? "error"
      : (span.attributes || {})["runnertrace.cancelled"] ? "cancelled" : "ok";
    status.appendChild(el("span", "pill " + code, code));
    if (span.type) status.appendChild(el("span", "badge", span.type));
    status.appendChild(el("span", "badge", span.kind));
    if (span.status_description) status.appendChild(el("span", "desc", span.status_description));
    detailEl.appendChild(status);
    detailEl.appendChild(kvTable({
      "duration": fmt(span.duration_ns),
      "starts at": "+" + fmt(span.offset_ns),
      "span id": span.span_id,
      "parent span id": span.parent_span_id || "(root)",
      "trace id": span.trace_id,
      "scope": span.scope || ""
    }, true));
    var names = Object.keys(span.attributes || {});
    detailEl.appendChild(el("h3", null, "Attributes (" + names.length + ")"));
    detailEl.appendChild(kvTable(span.attributes));
    detailEl.appendChild(el("h3", null, "Events (" + span.events.length + ")"));
    if (!span.events.length) detailEl.appendChild(el("p", "hint", "none"));
    var list = el("ol", "events");
    span.events.forEach(function (event) {
      var li = el("li");
      var head = el("div", "ev-head", event.name);
      head.appendChild(el("span", null, "+" + fmt(event.offset_ns)));
      li.appendChild(head);
      if (Object.keys(event.attributes || {}).length) li.appendChild(kvTable(event.attributes));
      list.appendChild(li);
    });
    if (span.events.length) detailEl.appendChild(list);
    var resource = el("details");
    resource.appendChild(el("summary", null, "Resource"));
    resource.appendChild(kvTable(span.resource));
    detailEl.appendChild(resource);
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

/* runnertrace ui: a small hash-routed page over the server's JSON APIs.
 * Text from spans is only ever set with textContent (a prompt with markup stays text),
 * and the page fetches from its own origin only. */
(function () {
  "use strict";
  var view = document.getElementById("view");
  var liveEl = document.getElementById("live");
  // 14 colours that stay apart side by side (after Tableau 20's darker half, then Okabe-Ito);
  // "other" gets its own grey.
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#17becf", "#bcbd22", "#003f5c", "#f0a3ff", "#005f2f", "#a05000", "#56b4e9"];
  var OTHER = "#8a94a6";
  var RANGES = [["", "all time"], ["900", "last 15 min"], ["3600", "last hour"],
    ["86400", "last 24 h"], ["604800", "last 7 days"]];
  var current = { page: null, onRuns: null };

  // -- helpers -------------------------------------------------------------------------------
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }
  var fmtNs = RT.duration, fmtCost = RT.cost, fmtTokens = RT.tokens;
  // A cost that says when calls went unpriced, with the count and the models on hover.
  function costCell(tr, cost, unpriced, models, status) {
    var td = cell(tr, RT.costOf(cost, unpriced), "num");
    td.setAttribute("data-cost-status", status || "");
    td.title = RT.unpricedNote(unpriced, models);
    return td;
  }
  function fmtTime(ns) {
    var d = new Date(ns / 1e6);
    var pad = function (n) { return String(n).padStart(2, "0"); };
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function sinceNs(seconds) {
    if (!seconds) return "";
    return String(BigInt(Date.now() - Number(seconds) * 1000) * 1000000n);
  }
  function api(path, params) {
    var query = new URLSearchParams();
    Object.keys(params || {}).forEach(function (k) {
      if (params[k] !== undefined && params[k] !== null && params[k] !== "") query.set(k, params[k]);
    });
    var url = path + (query.toString() ? "?" + query.toString() : "");
    return fetch(url, { headers: { Accept: "application/json" } }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) {
          var err = new Error(body.error || r.statusText);
          err.status = r.status;
          throw err;
        }
        return body;
      });
    });
  }
  // Feedback goes as JSON: a page elsewhere cannot post JSON here without the browser asking
  // first, and the server never says yes.
  function postJson(path, data) {
    return fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(data)
    }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) {
          var err = new Error(body.error || r.statusText);
          err.status = r.status;
          throw err;
        }
        return body;
      });
    });
  }
  // Shapes every font has (an emoji thumb is a blank box where no emoji font is installed).
  var THUMBS = { up: "\u25b2 up", down: "\u25bc down" };
  // A run's feedback in the list: its own thumb (the note on hover), and how many thumbs its
  // spans got besides.
  function feedbackCell(tr, feedback) {
    var td = cell(tr, "", "feedback");
    var f = feedback || {};
    td.setAttribute("data-feedback", f.score || "");
    if (f.score) td.appendChild(el("span", "thumb " + f.score, THUMBS[f.score]));
    var others = (f.up || 0) + (f.down || 0) - (f.score ? 1 : 0);
    if (others > 0) td.appendChild(el("span", "hint", " +" + others));
    td.title = [f.score ? "run: " + f.score + (f.comment ? " \u2013 " + f.comment : "") : "",
      f.up || f.down ? "thumbs up " + (f.up || 0) + ", down " + (f.down || 0) +
        " (the run and its spans)" : ""].filter(Boolean).join("\n");
    return td;
  }
  function pill(status) { return el("span", "pill " + status, status); }
  function table(headers) {
    var t = el("table", "grid");
    var tr = el("tr");
    headers.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    var thead = el("thead");
    thead.appendChild(tr);
    t.appendChild(thead);
    var tbody = el("tbody");
    t.appendChild(tbody);
    return t;
  }
  function cell(tr, text, cls) { var td = el("td", cls, text); tr.appendChild(td); return td; }
  function go(hash) { window.location.hash = hash; }
  function fail(err) {
    view.appendChild(el("p", "error-text", "error: " + err.message));
  }
  function errorText(error) {
    // A message that already starts with its type (Python's "Type: message") says it once.
    var type = error.type || "error", message = error.message || "";
    var bare = type.split(".").pop();  // error.type may be qualified, the message's is not
    var said = [type, bare].some(function (t) { return message.indexOf(t + ":") === 0; });
    return said ? message : type + ": " + message;
  }
  function notFound(what, ref, message) {
    // An id that names nothing is a page that says so (and how to find one), not raw JSON.
    view.textContent = "";
    view.classList.remove("full");
    var box = el("div", "not-found");
    box.id = "not-found";
    box.appendChild(el("h1", null, "No " + what + " " + ref + " in this store"));
    box.appendChild(el("p", "hint", message));
    var back = el("a", null, "\u2190 all runs");
    back.href = "#/runs";
    box.appendChild(back);
    view.appendChild(box);
  }
  function copyBlock(text) {
    var wrap = el("div", "copy-block");
    var pre = el("pre", "code", text);
    var copy = el("button", "copy", "copy");
    copy.type = "button";
    copy.addEventListener("click", function () {
      var done = function () { copy.textContent = "copied"; };
      if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, function () {});
    });
    wrap.appendChild(copy);
    wrap.appendChild(pre);
    return wrap;
  }
  function gettingStarted(hasStore) {
    // What Phoenix shows on an empty project: where to send spans, and the code to paste.
    var snippets = window.RT_SNIPPETS;
    var endpoint = window.location.origin + "/v1/traces";
    var box = el("section", "empty-state");
    box.id = "getting-started";
    box.appendChild(el("h2", null, hasStore ? "No runs yet" : "No trace store yet"));
    var p = el("p", null, "Run ");
    p.appendChild(el("code", null, "runnertrace demo"));
    p.appendChild(document.createTextNode(" for a first traced conversation, or trace your " +
      "own agent: its runs appear here as they arrive. OTLP/HTTP endpoint: "));
    var ep = el("code", null, endpoint);
    ep.id = "otlp-endpoint";
    p.appendChild(ep);
    box.appendChild(p);
    box.appendChild(el("p", "hint", "1. Set these in the app's environment (on this machine " +
      "the first line is enough: runs go to the store this dashboard reads):"));
    box.appendChild(copyBlock(snippets.env.replace("__ENDPOINT__", endpoint)));
    box.appendChild(el("p", "hint", "2. Wrap your agent:"));
    var tabs = el("div", "tabs");
    var code = el("div", "snippet");
    box.appendChild(tabs);
    box.appendChild(code);
    function pick(i) {
      var s = snippets.frameworks[i];
      tabs.querySelectorAll("button").forEach(function (b, j) {
        b.classList.toggle("active", i === j);
      });
      code.textContent = "";
      code.setAttribute("data-framework", s.label);
      code.appendChild(copyBlock(s.install));
      code.appendChild(copyBlock(s.code));
      code.appendChild(el("p", "hint", "The whole program, offline: " + s.example +
        " in the runnertrace repository."));
    }
    snippets.frameworks.forEach(function (s, i) {
      var b = el("button", null, s.label);
      b.type = "button";
      b.addEventListener("click", function () { pick(i); });
      tabs.appendChild(b);
    });
    pick(0);
    return box;
  }
  function parseHash() {
    var hash = window.location.hash.replace(/^#\/?/, "");
    var q = hash.indexOf("?");
    var path = q >= 0 ? hash.slice(0, q) : hash;
    var params = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : "");
    var parts = path.split("/").map(decodeURIComponent);
    return { parts: parts, params: params };
  }
  function setNav(name) {
    document.querySelectorAll("nav a").forEach(function (a) {
      a.classList.toggle("active", a.getAttribute("data-nav") === name);
    });
  }

  // -- runs ------------------------------------------------------------------------------------
  // Every filter, the sort and its direction live in the URL: a view can be shared or reloaded.
  var RUN_FILTERS = ["agent", "any_agent", "framework", "status", "range", "session", "q", "model",
    "provider", "user", "tag", "attr", "errors", "min_ms", "max_ms", "min_cost", "max_cost",
    "feedback", "project", "sort", "dir"];
  var RUN_COLUMNS = [["time", "start"], ["agent"], ["framework"], ["status"], ["input"],
    ["output"], ["duration", "duration"], ["spans", "spans"], ["tokens", "tokens"],
    ["cost", "cost"], ["session"], ["feedback"], ["trace"], ["compare"]];
  var FEEDBACK_COLUMN = 11;

  function runRow(run) {
    var tr = el("tr", "link");
    tr.setAttribute("data-trace-id", run.trace_id);
    tr.setAttribute("data-agent", run.agent || "");
    cell(tr, fmtTime(run.start_ns), "mono");
    cell(tr, run.agent || run.name);
    cell(tr, run.framework || "-");
    var st = el("td");
    st.appendChild(pill(run.status));
    if (run.status === "ok" && run.error_count) {
      // recovered: a span failed and the run went on (the charts count these runs apart)
      var recovered = st.appendChild(el("span", "hint recovered", " " + run.error_count + " err"));
      recovered.title = "recovered: " + run.error_count + " span" + (run.error_count > 1 ? "s" : "")
        + " in error under a run that ended ok; not a failed run";
    }
    tr.appendChild(st);
    var input = cell(tr, run.input_preview || "", "preview");
    input.title = run.input_preview || "";
    var output = cell(tr, run.output_preview || "", "preview");
    output.title = run.output_preview || "";
    cell(tr, fmtNs(run.duration_ns), "num");
    cell(tr, run.span_count, "num");
    var tokens = cell(tr, fmtTokens(run.tokens), "num");
    if (run.derived && run.model_calls) tokens.title = "summed from the model calls (the root " +
      "span carries no totals)";
    costCell(tr, run.cost, run.unpriced_calls, run.unpriced_models, run.cost_status);
    cell(tr, run.session_id || "-", "mono");
    feedbackCell(tr, run.feedback);
    cell(tr, run.trace_id.slice(0, 12), "mono");
    var pick = el("input", "pick");
    pick.type = "checkbox";
    pick.title = "compare";
    pick.setAttribute("aria-label", "pick to compare");
    pick.checked = picked.indexOf(run.trace_id) >= 0;
    pick.addEventListener("click", function (e) {
      e.stopPropagation();
      var at = picked.indexOf(run.trace_id);
      if (at >= 0) picked.splice(at, 1); else picked.push(run.trace_id);
      while (picked.length > 2) picked.shift();
      document.querySelectorAll("#runs input.pick").forEach(function (box) {
        box.checked = picked.indexOf(box.closest("tr").getAttribute("data-trace-id")) >= 0;
      });
      var button = document.getElementById("compare");
      if (button) button.hidden = picked.length !== 2;
    });
    tr.appendChild(el("td")).appendChild(pick);
    tr.addEventListener("click", function () { go("#/trace/" + run.trace_id); });
    return tr;
  }
  var picked = [];

  function matches(run, params) {
    var keys = { agent: "agent", framework: "framework", status: "status", user: "user_id" };
    var plain = ["q", "range", "model", "provider", "tag", "attr", "min_ms", "max_ms", "min_cost",
      "max_cost", "sort", "dir", "any_agent", "feedback"].every(function (k) { return !params.get(k); });
    var project = params.get("project");
    if (project && (run.service_name || "(unknown)") !== project) return false;
    return plain && Object.keys(keys).every(function (k) {
      return !params.get(k) || run[keys[k]] === params.get(k);
    }) && (!params.get("session") ||
      (run.session_id || "").indexOf(params.get("session")) === 0) &&
      (!params.get("errors") || (params.get("errors") === "recovered"
        ? run.status === "ok" && run.error_count > 0
        : run.status === "error" || run.error_count > 0));
  }

  function showRuns(params) {
    setNav("runs");
    view.textContent = "";
    view.appendChild(el("h1", null, "Runs"));
    var form = el("form", "filters");
    form.id = "filters";
    function field(label, input) {
      var l = el("label", null, label);
      l.appendChild(input);
      form.appendChild(l);
      return input;
    }
    function select(name, options) {
      var s = el("select");
      s.name = name;
      options.forEach(function (o) {
        var opt = el("option", null, o[1]);
        opt.value = o[0];
        s.appendChild(opt);
      });
      s.value = params.get(name) || "";
      s.addEventListener("change", submit);
      return s;
    }
    function text(label, name, placeholder, type) {
      var input = field(label, el("input"));
      input.name = name;
      input.type = type || "text";
      if (placeholder) input.placeholder = placeholder;
      input.value = params.get(name) || "";
      return input;
    }
    // The project switcher: the apps (service.name) runs came from, with how many each.
    var project = field("project", select("project", [["", "all projects"]]));
    project.id = "project";
    var agent = field("agent", select("agent", [["", "any"]]));
    var anyAgent = field("agent anywhere", select("any_agent", [["", "any"]]));
    anyAgent.title = "runs with this agent anywhere in their tree, nested runs included";
    var framework = field("framework", select("framework", [["", "any"]]));
    field("status", select("status", [["", "any"], ["ok", "ok"], ["error", "error"],
      ["cancelled", "cancelled"], ["incomplete", "incomplete"]]));
    field("errors", select("errors", [["", "-"], ["any", "any span in error"],
      ["recovered", "recovered (ok, a span in error)"]]));
    field("time", select("range", RANGES));
    field("feedback", select("feedback", [["", "-"], ["up", THUMBS.up],
      ["down", THUMBS.down], ["any", "any"], ["none", "none"]])).title =
      "runs with a thumbs up (or down) on the run or any of its spans, any feedback, or none";
    text("session", "session", "id or its start");
    text("model", "model");
    text("provider", "provider");
    text("user", "user");
    text("tag", "tag");
    // any span's attribute: "key = value" or "key exists"
    text("attribute", "attr", "key = value, key exists").title = "runs with a span whose " +
      "attribute has this value (compared as text), or that has the key";
    text("min ms", "min_ms", "", "number").classList.add("short");
    text("max ms", "max_ms", "", "number").classList.add("short");
    text("min $", "min_cost", "", "number").classList.add("short");
    text("max $", "max_cost", "", "number").classList.add("short");
    form.querySelectorAll('input[type="number"]').forEach(function (i) {
      i.min = "0";
      i.step = "any";
    });
    text("search names and content", "q", "", "search");
    var button = el("button", null, "Apply");
    button.type = "submit";
    form.appendChild(button);
    var compareButton = el("button", "primary", "Compare the 2 picked runs");
    compareButton.type = "button";
    compareButton.id = "compare";
    compareButton.hidden = picked.length !== 2;
    compareButton.addEventListener("click", function () {
      go("#/compare?a=" + picked[0] + "&b=" + picked[1]);
    });
    form.appendChild(compareButton);
    var csvLink = el("a", "export", "CSV");
    csvLink.setAttribute("download", "runs.csv");
    form.appendChild(csvLink);
    form.addEventListener("submit", function (e) { e.preventDefault(); submit(); });
    function state(extra) {
      var next = new URLSearchParams();
      new FormData(form).forEach(function (v, k) { if (v) next.set(k, v); });
      ["sort", "dir"].forEach(function (k) { if (params.get(k)) next.set(k, params.get(k)); });
      Object.keys(extra || {}).forEach(function (k) { next.set(k, extra[k]); });
      return next;
    }
    function submit() {
      var next = state();
      go("#/runs" + (next.toString() ? "?" + next.toString() : ""));
    }
    view.appendChild(form);
    api("/api/facets").then(function (f) {
      [[agent, f.agents, "agent"], [anyAgent, f.agents_anywhere || [], "any_agent"],
        [framework, f.frameworks, "framework"]].forEach(function (x) {
        x[1].forEach(function (v) {
          var opt = el("option", null, v);
          opt.value = v;
          x[0].appendChild(opt);
        });
        x[0].value = params.get(x[2]) || "";
      });
      (f.projects || []).forEach(function (p) {
        var opt = el("option", null, p.name + " (" + p.runs + ")");
        opt.value = p.name;
        project.appendChild(opt);
      });
      project.value = params.get("project") || "";
    });
    var notice = el("div", "notice");
    notice.hidden = true;
    view.appendChild(notice);
    var t = table(RUN_COLUMNS.map(function (c) { return c[0]; }));
    t.id = "runs";
    var sort = params.get("sort") || "start", dir = params.get("dir") || "desc";
    t.querySelectorAll("th").forEach(function (th, i) {
      var key = RUN_COLUMNS[i][1];
      if (!key) return;
      th.classList.add("sortable");
      th.setAttribute("data-sort", key);
      if (key === sort) {
        th.classList.add("sorted");
        th.setAttribute("aria-sort", dir === "asc" ? "ascending" : "descending");
        th.textContent = RUN_COLUMNS[i][0] + (dir === "asc" ? " \u25b2" : " \u25bc");
      }
      th.addEventListener("click", function () {
        var nextDir = key === sort && dir === "desc" ? "asc" : "desc";
        var next = state({ sort: key, dir: nextDir });
        go("#/runs?" + next.toString());
      });
    });
    var tbody = t.tBodies[0];
    view.appendChild(t);
    var more = el("button", "more", "Load more");
    more.hidden = true;
    view.appendChild(more);
    var query = {};
    RUN_FILTERS.forEach(function (k) { if (k !== "range") query[k] = params.get(k); });
    query.since = sinceNs(params.get("range"));
    var csvQuery = new URLSearchParams();
    Object.keys(query).forEach(function (k) {
      if (query[k] && k !== "sort" && k !== "dir") csvQuery.set(k, query[k]);
    });
    csvLink.href = "/api/runs.csv" + (csvQuery.toString() ? "?" + csvQuery.toString() : "");
    var cursor = null;
    function load() {
      api("/api/runs", Object.assign({ cursor: cursor, limit: 50 }, query)).then(function (r) {
        var filtered = RUN_FILTERS.some(function (k) { return params.get(k); });
        if (!r.runs.length && !cursor && !filtered) {
          // nothing at all yet: say where to send spans and how, in place of an empty table
          var hint = tbody.appendChild(el("tr")).appendChild(el("td", "hint",
            "No runs yet: see below."));
          hint.colSpan = RUN_COLUMNS.length;
          view.appendChild(gettingStarted(!!r.store));
        } else if (!r.runs.length && !cursor) tbody.appendChild(el("tr")).appendChild(
          el("td", "hint", "No runs match."));
        r.runs.forEach(function (run) { tbody.appendChild(runRow(run)); });
        cursor = r.next;
        more.hidden = !cursor;
        document.body.setAttribute("data-runs", String(tbody.querySelectorAll("tr.link").length));
      }).catch(fail);
    }
    more.addEventListener("click", load);
    load();
    var fresh = 0;
    current.onRuns = function (runs) {
      runs.forEach(function (run) {
        var existing = tbody.querySelector('tr[data-trace-id="' + run.trace_id + '"]');
        if (existing) {
          var previous = existing.children;
          var row = runRow(run);
          // the live feed carries no previews: keep the ones already shown
          [4, 5].forEach(function (i) {
            if (!row.children[i].textContent) row.children[i].textContent = previous[i].textContent;
          });
          // nor feedback: keep the thumbs already shown
          if (!run.feedback) row.replaceChild(previous[FEEDBACK_COLUMN].cloneNode(true),
            row.children[FEEDBACK_COLUMN]);
          existing.replaceWith(row);
          return;
        }
        if (!matches(run, params)) {
          fresh += 1;
          notice.textContent = fresh + " new run(s) arrived; apply the filters again to see them";
          notice.hidden = false;
          return;
        }
        var hint = tbody.querySelector("td.hint");
        if (hint) hint.parentNode.remove();
        var started = document.getElementById("getting-started");
        if (started) started.remove();
        var added = runRow(run);
        added.classList.add("fresh");
        tbody.insertBefore(added, tbody.firstChild);
      });
      document.body.setAttribute("data-runs", String(tbody.querySelectorAll("tr.link").length));
    };
  }

  // -- feedback on a run or a span ---------------------------------------------------------
  function feedbackPanel(traceId, onFrame) {
    var box = el("div", "feedbackbar");
    box.id = "feedback";
    var target = el("select");
    target.id = "feedback-target";
    target.setAttribute("aria-label", "feedback on");
    var runOption = el("option", null, "the run");
    runOption.value = "";
    target.appendChild(runOption);
    var spanOption = el("option");
    spanOption.hidden = true;
    target.appendChild(spanOption);
    onFrame(function (spanId, name) {
      spanOption.value = spanId;
      spanOption.textContent = "span " + name + " (" + spanId.slice(0, 8) + ")";
      spanOption.hidden = false;
    });
    var label = el("label", null, "Feedback on ");
    label.appendChild(target);
    box.appendChild(label);
    var comment = el("input");
    comment.id = "feedback-comment";
    comment.placeholder = "note (optional)";
    comment.maxLength = 2000;
    var status = el("span", "hint");
    status.id = "feedback-status";
    var list = el("ul", "feedback-list");
    list.id = "feedback-list";
    ["up", "down"].forEach(function (score) {
      var b = el("button", "thumb " + score, THUMBS[score]);
      b.type = "button";
      b.id = "feedback-" + score;
      b.title = "thumbs " + score + " (with the note, if any)";
      b.addEventListener("click", function () {
        var data = { trace_id: traceId, score: score };
        if (target.value) data.span_id = target.value;
        if (comment.value.trim()) data.comment = comment.value;
        status.textContent = "saving\u2026";
        postJson("/api/feedback", data).then(function () {
          status.textContent = "saved";
          comment.value = "";
          load();
        }).catch(function (err) { status.textContent = err.message; });
      });
      box.appendChild(b);
    });
    box.appendChild(comment);
    box.appendChild(status);
    box.appendChild(list);
    function load() {
      api("/api/runs/" + encodeURIComponent(traceId) + "/feedback").then(function (r) {
        list.textContent = "";
        r.feedback.forEach(function (f) {
          var li = el("li");
          li.setAttribute("data-span-id", f.span_id || "");
          li.setAttribute("data-score", f.score);
          li.appendChild(el("span", "thumb " + f.score, THUMBS[f.score]));
          li.appendChild(el("span", null, " " + (f.span_id ? "span " + f.span_id.slice(0, 8)
            : "run")));
          if (f.comment) li.appendChild(el("span", "note", " \u2013 " + f.comment));
          li.appendChild(el("span", "hint", " " + f.source + ", " + fmtTime(f.created_ns)));
          list.appendChild(li);
        });
        box.setAttribute("data-feedback", String(r.feedback.length));
      }).catch(function () { /* the trace's own summary says when it is missing */ });
    }
    load();
    box.refresh = load;  // feedback given elsewhere (another viewer, the API) arrives live
    return box;
  }

  // -- one trace -------------------------------------------------------------------------------
  function showTrace(traceId) {
    setNav("runs");
    var frame = el("iframe", "trace");
    // The span picked in the waterfall (same origin: its document is ours to listen to).
    function frameReady(onSpan) {
      frame.addEventListener("load", function () {
        var doc = frame.contentDocument;
        if (!doc) return;
        var picked = function () {
          var row = doc.querySelector(".row.selected[data-span-id]");
          if (row) onSpan(row.getAttribute("data-span-id"),
            (row.querySelector(".name") || row).textContent);
        };
        doc.addEventListener("click", picked);
        doc.addEventListener("keyup", picked);
        picked();
      });
    }
    view.textContent = "";
    view.classList.add("full");
    var bar = el("div", "tracebar");
    var back = el("a", null, "\u2190 runs");
    back.href = "#/runs";
    bar.appendChild(back);
    var chips = el("div", "chips");
    bar.appendChild(chips);
    var exportLink = el("a", "export", "export OTLP JSON");
    exportLink.href = "/api/runs/" + encodeURIComponent(traceId) + "/otlp";
    exportLink.setAttribute("download", "trace-" + traceId + ".otlp.json");
    bar.appendChild(exportLink);
    var jsonLink = el("a", "export", "export JSON (with feedback)");
    jsonLink.href = "/api/runs/" + encodeURIComponent(traceId) + "/export";
    jsonLink.setAttribute("download", "trace-" + traceId + ".json");
    bar.appendChild(jsonLink);
    view.appendChild(bar);
    var feedback = feedbackPanel(traceId, frameReady);
    view.appendChild(feedback);
    frame.title = "trace waterfall";
    var framed = false;
    // What the waterfall was drawn from: a live change that leaves it alone (feedback bumps
    // the run's seq too) must not reload the frame, which would drop the span picked in it.
    var drawn = null;
    function spansOf(run) { return [run.span_count, run.end_ns, run.status].join("|"); }
    function summary() {
      api("/api/runs/" + encodeURIComponent(traceId)).then(function (run) {
        drawn = spansOf(run);
        if (!framed) {  // the frame only once the trace is known to exist
          framed = true;
          frame.src = "/trace/" + encodeURIComponent(traceId);
          view.appendChild(frame);
        }
        chips.textContent = "";
        function chip(label, value) {
          var c = el("span", null, label + " ");
          c.appendChild(el("b", null, value));
          chips.appendChild(c);
        }
        chips.appendChild(pill(run.status));
        chip("agent", run.agent || run.name);
        chip("duration", fmtNs(run.duration_ns));
        chip("tokens", fmtTokens(run.tokens));
        chip("cost", RT.costOf(run.cost, run.unpriced_calls));
        chips.lastChild.setAttribute("data-cost-status", run.cost_status || "");
        chips.lastChild.title = RT.unpricedNote(run.unpriced_calls, run.unpriced_models);
        chip("model calls", fmtTokens(run.model_calls));
        if (run.session_id) {
          var link = el("a", null, "session " + run.session_id);
          link.href = "#/sessions/" + encodeURIComponent(run.session_id);
          chips.appendChild(link);
        }
      }).catch(function (err) {
        if (err.status === 404 && !framed) {
          notFound("trace", traceId, err.message + ". A trace id (or a unique prefix of one) " +
            "comes from the runs list, `runnertrace traces`, or an app's logs.");
        } else fail(err);
      });
    }
    summary();
    current.onRuns = function (runs) {
      var changed = runs.filter(function (r) { return r.trace_id === traceId; });
      if (!changed.length) return;
      if (framed && spansOf(changed[changed.length - 1]) === drawn) {
        feedback.refresh();
        return;
      }
      var hash = "";
      try { hash = frame.contentWindow.location.hash; } catch (err) { hash = ""; }
      frame.src = "/trace/" + encodeURIComponent(traceId) + "?t=" + Date.now() + hash;
      summary();
    };
  }

  // -- compare two runs ------------------------------------------------------------------------
  function showCompare(params) {
    setNav("runs");
    view.textContent = "";
    var back = el("a", null, "\u2190 runs");
    back.href = "#/runs";
    view.appendChild(back);
    view.appendChild(el("h1", null, "Compare two runs"));
    api("/api/compare", { a: params.get("a"), b: params.get("b") }).then(function (c) {
      var heads = el("div", "cmp-heads");
      [["A", c.a], ["B", c.b]].forEach(function (x) {
        var h = el("div", "cmp-head");
        var link = el("a", null, x[0] + ": " + (x[1].agent || x[1].name) + " \u00b7 " +
          fmtTime(x[1].start_ns) + " \u00b7 " + x[1].trace_id.slice(0, 8));
        link.href = "#/trace/" + x[1].trace_id;
        h.appendChild(link);
        h.appendChild(pill(x[1].status));
        heads.appendChild(h);
      });
      view.appendChild(heads);
      // (the cost comes as shown, partial or unpriced: a text)
      var formats = { latency_ns: fmtNs, "tokens in": fmtTokens, "tokens out": fmtTokens };
      var t = table(["", "A", "B"]);
      t.id = "differences";
      c.differences.forEach(function (d) {
        var tr = el("tr", (d.same ? "same" : "differs") +
          (c.matters.indexOf(d.field) >= 0 ? " matters" : ""));
        tr.setAttribute("data-field", d.field);
        var f = formats[d.field] || function (v) {
          return v === null || v === undefined ? "-" : String(v);
        };
        cell(tr, d.field === "latency_ns" ? "latency" : d.field, "k");
        cell(tr, f(d.a), "wrap");
        cell(tr, f(d.b), "wrap");
        t.tBodies[0].appendChild(tr);
      });
      view.appendChild(el("h2", null, "Differences"));
      // what a reader compares two runs for, first: tokens, cost, latency, errors, output
      var labels = { latency_ns: "latency" };
      var gist = el("p", c.matters.length ? "matters" : "hint", c.matters.length
        ? "Differs where it matters: " + c.matters.map(function (f) {
          return labels[f] || f;
        }).join(", ") + "."
        : "Same tokens, cost, latency, errors and output.");
      gist.id = "matters";
      view.appendChild(gist);
      view.appendChild(t);
      view.appendChild(el("h2", null, "Timelines, on one scale, lined up by place in the tree"));
      var tl = el("div", "cmp-timeline");
      tl.id = "cmp-timeline";
      c.timeline.forEach(function (row) {
        var line = el("div", "cmp-row");
        line.setAttribute("data-key", row.key);
        var any = row.a || row.b;
        var label = el("div", "cmp-label", row.label);
        label.title = row.label;
        label.style.paddingLeft = (4 + any.depth * 14) + "px";
        line.appendChild(label);
        [row.a, row.b].forEach(function (side) {
          var track = el("div", "cmp-track");
          if (side) {
            var bar = el("div", "cmp-bar t-" + (side.type || "other") + (side.error ? " err" : ""));
            bar.style.left = (100 * side.offset_ns / c.scale_ns) + "%";
            bar.style.width = Math.max(0.3, 100 * side.duration_ns / c.scale_ns) + "%";
            bar.title = side.name + ": " + fmtNs(side.duration_ns);
            track.appendChild(bar);
            var figures = fmtNs(side.duration_ns) + (side.tokens ? " \u00b7 " +
              fmtTokens(side.tokens) + " tok" : "") + (side.cost !== null ? " \u00b7 " +
              fmtCost(side.cost) : "");
            track.appendChild(el("span", "cmp-fig", figures));
          } else {
            track.appendChild(el("span", "hint", "(not in this run)"));
          }
          line.appendChild(track);
        });
        tl.appendChild(line);
      });
      view.appendChild(tl);
      document.body.setAttribute("data-compared", "1");
    }).catch(fail);
  }

  // -- sessions --------------------------------------------------------------------------------
  function showSessions() {
    setNav("sessions");
    view.textContent = "";
    view.appendChild(el("h1", null, "Sessions"));
    var t = table(["last activity", "session", "runs", "agents", "first input", "last output",
      "tokens", "cost", "failed runs", "recovered"]);
    t.id = "sessions";
    view.appendChild(t);
    api("/api/sessions").then(function (r) {
      if (!r.sessions.length) view.appendChild(el("p", "hint", "No sessions yet."));
      r.sessions.forEach(function (s) {
        var tr = el("tr", "link");
        tr.setAttribute("data-session-id", s.session_id);
        cell(tr, fmtTime(s.end_ns), "mono");
        cell(tr, s.session_id, "mono");
        cell(tr, s.runs, "num");
        cell(tr, s.agents.join(", "));
        cell(tr, s.first_input || "", "preview").title = s.first_input || "";
        cell(tr, s.last_output || "", "preview").title = s.last_output || "";
        cell(tr, fmtTokens(s.tokens), "num");
        // a sum over runs: partial when any of them missed calls
        costCell(tr, s.cost, s.unpriced_calls, null, s.cost_status);
        cell(tr, s.errors, "num").setAttribute("data-k", "failed");
        var rec = cell(tr, s.recovered, "num");
        rec.setAttribute("data-k", "recovered");
        rec.title = "runs that ended ok with a span in error";
        tr.addEventListener("click", function () {
          go("#/sessions/" + encodeURIComponent(s.session_id));
        });
        t.tBodies[0].appendChild(tr);
      });
    }).catch(fail);
    current.onRuns = function (runs) {
      if (runs.some(function (r) { return r.session_id; })) showSessions();
    };
  }

  function showConversation(sessionId) {
    setNav("sessions");
    view.textContent = "";
    var back = el("a", null, "\u2190 sessions");
    back.href = "#/sessions";
    view.appendChild(back);
    view.appendChild(el("h1", null, "Session " + sessionId));
    var agents = el("div", "session-agents");
    agents.id = "session-agents";
    view.appendChild(agents);
    var list = el("div");
    list.id = "conversation";
    view.appendChild(list);
    api("/api/sessions/" + encodeURIComponent(sessionId)).then(function (r) {
      if (r.agents && r.agents.length) {
        agents.appendChild(el("h2", null, "Agents: own work \u00b7 with what it started"));
        agents.appendChild(RT.agentTable(r.agents));
      }
      r.turns.forEach(function (turn, i) {
        var box = el("div", "turn");
        box.setAttribute("data-trace-id", turn.trace_id);
        var meta = el("div", "meta");
        meta.appendChild(el("b", null, "turn " + (i + 1)));
        meta.appendChild(el("span", "mono", fmtTime(turn.start_ns)));
        meta.appendChild(el("span", null, turn.agent || turn.name));
        meta.appendChild(pill(turn.status));
        meta.appendChild(el("span", null, fmtNs(turn.duration_ns)));
        meta.appendChild(el("span", null, fmtTokens(turn.tokens) + " tokens"));
        if (turn.cost !== null || turn.unpriced_calls) {
          var cost = el("span", "cost", RT.costOf(turn.cost, turn.unpriced_calls));
          cost.title = RT.unpricedNote(turn.unpriced_calls, turn.unpriced_models);
          meta.appendChild(cost);
        }
        var link = el("a", null, "trace " + turn.trace_id.slice(0, 8));
        link.href = "#/trace/" + turn.trace_id;
        meta.appendChild(link);
        box.appendChild(meta);
        [["user", "you", turn.input], ["agent", turn.agent || "agent", turn.output]]
          .forEach(function (b) {
            var bubble = el("div", "bubble " + b[0]);
            bubble.appendChild(el("span", "who", b[1]));
            var missing = b[2] === null || b[2] === undefined;
            if (missing && b[0] === "agent" && turn.error) {
              // a failed turn shows what failed, not an empty reply
              bubble.classList.add("failed");
              bubble.appendChild(el("b", "error-text", errorText(turn.error)));
              bubble.appendChild(document.createTextNode(" (in " + turn.error.span + ")"));
            } else {
              bubble.appendChild(document.createTextNode(missing
                ? "(content not captured)" : String(b[2])));
            }
            box.appendChild(bubble);
          });
        if (turn.output && turn.error) {
          box.appendChild(el("div", "bubble agent failed error-text", errorText(turn.error) +
            " (in " + turn.error.span + ")"));
        }
        list.appendChild(box);
      });
    }).catch(fail);
    current.onRuns = function (runs) {
      if (runs.some(function (r) { return r.session_id === sessionId; })) {
        showConversation(sessionId);
      }
    };
  }

  // -- errors ----------------------------------------------------------------------------------
  function showErrors() {
    setNav("errors");
    view.textContent = "";
    view.appendChild(el("h1", null, "Errors by error.type"));
    var t = table(["error.type", "spans", "traces", "span types", "last seen"]);
    t.id = "errors";
    view.appendChild(t);
    api("/api/errors").then(function (r) {
      if (!r.errors.length) view.appendChild(el("p", "hint", "No errors recorded."));
      r.errors.forEach(function (e) {
        var tr = el("tr", "link");
        tr.setAttribute("data-error-type", e.error_type);
        cell(tr, e.error_type, "mono");
        cell(tr, e.spans, "num");
        cell(tr, e.traces, "num");
        cell(tr, e.span_types.join(", "));
        cell(tr, fmtTime(e.last_ns), "mono");
        tr.addEventListener("click", function () {
          go("#/errors/" + encodeURIComponent(e.error_type));
        });
        t.tBodies[0].appendChild(tr);
      });
    }).catch(fail);
    current.onRuns = function (runs) {
      if (runs.some(function (r) { return r.error_count; })) showErrors();
    };
  }

  function showErrorRuns(errorType) {
    setNav("errors");
    view.textContent = "";
    var back = el("a", null, "\u2190 errors");
    back.href = "#/errors";
    view.appendChild(back);
    view.appendChild(el("h1", null, "Runs with " + errorType));
    var t = table(["time", "agent", "status", "failed span", "message", "trace"]);
    t.id = "error-runs";
    view.appendChild(t);
    api("/api/errors/runs", { type: errorType }).then(function (r) {
      r.runs.forEach(function (run) {
        var tr = el("tr", "link");
        tr.setAttribute("data-trace-id", run.trace_id);
        cell(tr, fmtTime(run.start_ns), "mono");
        cell(tr, run.agent || run.name);
        tr.appendChild(el("td")).appendChild(pill(run.status));
        cell(tr, run.error_span);
        cell(tr, run.error_message || "", "wrap error-text");
        cell(tr, run.trace_id.slice(0, 12), "mono");
        tr.addEventListener("click", function () { go("#/trace/" + run.trace_id); });
        t.tBodies[0].appendChild(tr);
      });
    }).catch(fail);
  }

  // -- charts ----------------------------------------------------------------------------------
  function niceTicks(max, whole) {
    // 0 up to a round number at or above max, in 3 to 6 round steps (1, 2, 2.5 or 5 x 10^k);
    // a count (whole) never steps by less than 1, so its labels never read "0 0 1 1 1"
    var raw = max / 4, power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (m) { return m * power; })
      .filter(function (c) { return c >= raw && (!whole || (c >= 1 && c % 1 === 0)); })[0];
    var ticks = [];
    for (var v = 0; v < max + step * 0.999; v += step) ticks.push(Number(v.toPrecision(12)));
    return ticks;
  }

  function whole(format) { format.whole = true; return format; }  // a format of counts

  function lineChart(title, data, lines, format, colorOf) {
    colorOf = colorOf || function (name, i) {
      return name === "other" ? OTHER : COLORS[i % COLORS.length];
    };
    var box = el("div", "chart");
    box.appendChild(el("h3", null, title));
    var W = 560, H = 220, L = 56, R = 10, T = 10, B = 24;
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title });
    box.appendChild(root);
    var n = Math.max(1, data.buckets);
    var max = 0;
    data.series.forEach(function (s) {
      s.points.forEach(function (p) {
        lines.forEach(function (ln) { var v = p[ln.key]; if (v !== null && v > max) max = v; });
      });
    });
    var empty = max <= 0;
    if (empty) max = 1;
    var ticks = empty ? [0] : niceTicks(max, !!format.whole);
    if (empty) ticks.push(1);  // the frame's top: drawn as a gridline, unlabelled
    max = ticks[ticks.length - 1];
    function x(t) { return L + (W - L - R) * ((t - data.start) / (data.width * n)); }
    function y(v) { return T + (H - T - B) * (1 - v / max); }
    var yAxis = svg("g", { "class": "y-axis" });
    ticks.forEach(function (v) {
      // each label is centred on its own gridline (dominant-baseline), never offset by hand
      yAxis.appendChild(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), "class": "gridline" }));
      if (empty && v) return;  // no data: only 0 is a value worth a label
      var label = svg("text", { x: L - 6, y: y(v), "text-anchor": "end",
        "dominant-baseline": "middle", "data-value": v });
      label.textContent = format(v);
      yAxis.appendChild(label);
    });
    root.appendChild(yAxis);
    var xAxis = svg("g", { "class": "x-axis" });
    // Dates ("MM-DD HH:MM") are twice as wide as times: half as many, so none overlap; a label
    // that would repeat the one before it (a span of minutes) is left out.
    var span = data.width * n, dated = span > 2 * 864e11, steps = dated ? 3 : 6, shown = null;
    for (var k = 0; k <= steps; k++) {
      var at = data.start + span * k / steps;
      var text = dated ? fmtTime(at).slice(5, 16) : fmtTime(at).slice(11, 16);
      if (text !== shown) {
        var label = svg("text", { x: x(at), y: H - 6,
          "text-anchor": k === 0 ? "start" : k === steps ? "end" : "middle" });
        label.textContent = text;
        xAxis.appendChild(label);
        shown = text;
      }
      xAxis.appendChild(svg("line", { x1: x(at), x2: x(at), y1: H - B, y2: H - B + 4,
        "class": "tick" }));
    }
    root.appendChild(xAxis);
    var drawn = 0;
    data.series.forEach(function (s, i) {
      var color = colorOf(s.name, i);
      lines.forEach(function (ln) {
        var pts = s.points.filter(function (p) { return p[ln.key] !== null; });
        if (!pts.length) return;
        var d = pts.map(function (p, j) {
          var px = x(p.t + data.width / 2);
          return (j ? "L" : "M") + px.toFixed(1) + " " + y(p[ln.key]).toFixed(1);
        }).join(" ");
        var path = svg("path", { d: d, fill: "none", stroke: color, "stroke-width": 2,
          "data-series": s.name });
        if (ln.dash) path.setAttribute("stroke-dasharray", "5 4");
        root.appendChild(path);
        pts.forEach(function (p) {
          // a cost that misses unpriced calls is a hollow dot, and its tip says so
          var partial = ln.key === "cost" && p.unpriced_calls > 0;
          var dot = svg("circle", { cx: x(p.t + data.width / 2), cy: y(p[ln.key]), r: 2.5,
            fill: partial ? "none" : color, stroke: color });
          if (partial) dot.setAttribute("data-partial", String(p.unpriced_calls));
          var tip = svg("title");
          tip.textContent = s.name + " " + ln.label + ": " + (ln.key === "cost"
            ? RT.costOf(p[ln.key], p.unpriced_calls) : format(p[ln.key])) + " (" + p.count + ")";
          dot.appendChild(tip);
          root.appendChild(dot);
        });
        drawn += 1;
      });
    });
    box.setAttribute("data-lines", String(drawn));
    if (!drawn) box.appendChild(el("p", "hint", "no data"));
    var legend = el("div", "legend");
    data.series.forEach(function (s, i) {
      var item = el("span");
      var swatch = el("i");
      swatch.style.background = colorOf(s.name, i);
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(s.name));
      legend.appendChild(item);
    });
    if (lines.length > 1) legend.appendChild(el("span", "hint",
      lines.map(function (ln) { return ln.label + (ln.dash ? " dashed" : " solid"); })
        .join(", ")));
    box.appendChild(legend);
    return box;
  }

  function showCharts(params) {
    setNav("charts");
    view.textContent = "";
    var by = params.get("by") || "agent";
    // A day by default: a chart over every run of a big store takes seconds to draw.
    var range = params.has("range") ? params.get("range") : "86400";
    view.appendChild(el("h1", null, "Latency, tokens and cost over time"));
    var bar = el("div", "filters");
    var tabs = el("div", "tabs");
    ["agent", "model", "tool"].forEach(function (g) {
      var b = el("button", g === by ? "active" : "", "per " + g);
      b.type = "button";
      b.setAttribute("data-by", g);
      b.addEventListener("click", function () { go("#/charts?by=" + g + "&range=" + range); });
      tabs.appendChild(b);
    });
    bar.appendChild(tabs);
    var sel = el("select");
    RANGES.forEach(function (r) {
      var o = el("option", null, r[1]);
      o.value = r[0];
      sel.appendChild(o);
    });
    sel.value = range;
    sel.addEventListener("change", function () { go("#/charts?by=" + by + "&range=" + sel.value); });
    bar.appendChild(sel);
    view.appendChild(bar);
    var tiles = el("div", "tiles");
    tiles.id = "tiles";
    view.appendChild(tiles);
    var grid = el("div", "charts");
    grid.id = "charts";
    view.appendChild(grid);
    function draw() {
      api("/api/metrics", { by: by, since: sinceNs(range), buckets: 24 }).then(function (m) {
        grid.textContent = "";
        tiles.textContent = "";
        var sm = m.summary, unit = by === "agent" ? "runs" : by === "model" ? "model calls"
          : "tool calls";
        var shown = [[unit, fmtTokens(sm.count)],
          ["error rate", sm.error_rate === null ? "-" : (100 * sm.error_rate).toFixed(1) + " %"]];
        // per agent: failed runs (status error, as the runs list says); recovered apart
        if (by === "agent") shown.push(["recovered", fmtTokens(sm.recovered) + " runs"]);
        shown.concat([
          ["p50 latency", sm.p50_ms === null ? "-" : fmtNs(sm.p50_ms * 1e6)],
          ["p95 latency", sm.p95_ms === null ? "-" : fmtNs(sm.p95_ms * 1e6)],
          ["tokens", fmtTokens(sm.tokens)], ["cost", RT.costOf(sm.cost, sm.unpriced_calls)]])
          .forEach(function (x) {
          var tile = el("div", "tile");
          tile.setAttribute("data-tile", x[0]);
          tile.appendChild(el("span", "tile-k", x[0]));
          tile.appendChild(el("b", null, x[1]));
          if (x[0] === "cost") tile.title = RT.unpricedNote(sm.unpriced_calls);
          if (x[0] === "error rate") tile.title = by === "agent" ? "failed runs: " + sm.errors +
            " of " + sm.count + " ended in error" : "failed " + unit + ": " + sm.errors + " of " +
            sm.count;
          if (x[0] === "recovered") tile.title = "runs that ended ok with a span in error " +
            "(a failed tool, a failed or cancelled nested agent): not in the error rate";
          tiles.appendChild(tile);
        });
        var data = { start: m.start_ns, width: m.bucket_ns, buckets: 24, series: m.series };
        var ms = function (v) { return fmtNs(v * 1e6); };
        // one colour per name across the charts (the own-cost chart names nested agents too)
        var names = m.series.map(function (s) { return s.name; });
        (m.agent_cost || []).forEach(function (s) {
          if (names.indexOf(s.name) < 0) names.push(s.name);
        });
        var colorOf = function (name) {
          return name === "other" ? OTHER : COLORS[names.indexOf(name) % COLORS.length];
        };
        grid.appendChild(lineChart("Latency per " + by + " (p50, p95)", data,
          [{ key: "p50_ms", label: "p50" }, { key: "p95_ms", label: "p95", dash: true }], ms,
          colorOf));
        if (by !== "tool") {
          grid.appendChild(lineChart("Tokens per " + by, data, [{ key: "tokens", label: "tokens" }],
            whole(function (v) { return fmtTokens(Math.round(v)); }), colorOf));
          grid.appendChild(lineChart("Cost per " + by + (by === "agent" ? " run, with what it "
            + "started" : "") + " (USD)", data, [{ key: "cost", label: "cost" }], fmtCost, colorOf));
        } else {
          grid.appendChild(lineChart("Calls per tool", data, [{ key: "count", label: "calls" }],
            whole(function (v) { return fmtTokens(Math.round(v)); }), colorOf));
        }
        if (by === "agent") {
          // each agent's own calls, wherever it ran (a nested agent too)
          var own = { start: m.start_ns, width: m.bucket_ns, buckets: 24,
            series: m.agent_cost || [] };
          var chart = lineChart("Own cost per agent, nested agents too (USD)", own,
            [{ key: "cost", label: "own cost" }], fmtCost, colorOf);
          chart.id = "agent-cost";
          grid.appendChild(chart);
        }
        grid.appendChild(lineChart("Error rate per " + by + (by === "agent" ? " (failed runs)"
          : " (failed calls)"), data,
          [{ key: "error_rate", label: "error rate" }],
          function (v) { return (100 * v).toFixed(v < 0.1 && v > 0 ? 1 : 0) + " %"; }, colorOf));
        document.body.setAttribute("data-charts", String(grid.children.length));
      }).catch(fail);
    }
    draw();
    var pending = null;
    current.onRuns = function () {
      if (pending) return;
      pending = setTimeout(function () { pending = null; draw(); }, 2000);
    };
  }

  // -- router and live feed --------------------------------------------------------------------
  function route() {
    current.onRuns = null;
    view.classList.remove("full");
    var h = parseHash();
    var page = h.parts[0] || "runs";
    var routes = {
      runs: function () { showRuns(h.params); },
      trace: function () { showTrace(h.parts[1]); },
      sessions: function () {
        if (h.parts[1]) showConversation(h.parts.slice(1).join("/")); else showSessions();
      },
      errors: function () {
        if (h.parts[1]) showErrorRuns(h.parts.slice(1).join("/")); else showErrors();
      },
      charts: function () { showCharts(h.params); },
      compare: function () { showCompare(h.params); }
    };
    (routes[page] || routes.runs)();
  }

  function connect() {
    var source = new EventSource("/api/live");
    source.addEventListener("hello", function () {
      liveEl.textContent = "live";
      liveEl.classList.add("on");
    });
    source.addEventListener("runs", function (e) {
      var data = JSON.parse(e.data);
      if (current.onRuns) current.onRuns(data.runs);
      document.body.setAttribute("data-live-seq", String(data.seq));
    });
    source.onerror = function () {
      liveEl.textContent = "reconnecting";
      liveEl.classList.remove("on");
    };
  }

  window.addEventListener("hashchange", route);
  route();
  connect();
})();

// The prism run viewer. Every text from filings, questions and replies reaches the page through
// textContent (never as markup); data comes in script files, so the pages open from disk too.
(function () {
  "use strict";
  var PRISM = (window.PRISM = window.PRISM || {});
  PRISM.q = PRISM.q || {};
  PRISM.p = PRISM.p || {};
  var PAGE_SIZE = 50;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "cls") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) {
      if (child !== null && child !== undefined) node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }

  function load(src, done) {
    var script = document.createElement("script");
    script.src = src;
    script.onload = done;
    script.onerror = function () { fail("cannot load " + src); };
    document.body.appendChild(script);
  }

  function fail(text) {
    var main = document.getElementById("main");
    main.textContent = "";
    main.appendChild(el("p", { cls: "error", text: text }));
  }

  function usd(value) { return value === null || value === undefined ? "unknown" : "$" + Number(value).toFixed(4); }
  function num(value) { return value === null || value === undefined ? "-" : String(value); }
  function questionHref(entry) { return "question.html?n=" + entry.n + "&id=" + encodeURIComponent(entry.id); }

  function table(head, rows) {
    return el("table", {}, [
      el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", { text: h }); }))]),
      el("tbody", {}, rows.map(function (r) { return el("tr", {}, r.map(function (c) { return el("td", {}, [c === null ? "" : typeof c === "object" ? c : String(c)]); })); }))
    ]);
  }

  function section(title, body) { return el("section", {}, [el("h2", { text: title })].concat(body)); }

  function selectable(items, cls, onEnter) {
    // j / k move the selection among ``items``; Enter opens the selected one.
    var state = { at: 0 };
    function show() {
      items().forEach(function (node, i) { node.classList.toggle(cls, i === state.at); });
      var chosen = items()[state.at];
      if (chosen) chosen.scrollIntoView({ block: "nearest" });
    }
    state.move = function (step) {
      var count = items().length;
      if (!count) return;
      state.at = Math.max(0, Math.min(count - 1, state.at + step));
      show();
    };
    state.reset = function () { state.at = 0; show(); };
    state.enter = function () { var chosen = items()[state.at]; if (chosen && onEnter) onEnter(chosen); };
    return state;
  }

  // -- the run page -----------------------------------------------------------------------------

  function runPage() {
    var data = PRISM.run;
    if (!data) return fail("no run data (data/run.js)");
    document.title = "prism run " + data.run.run_id;
    document.getElementById("run-id").textContent = data.run.run_id;
    var main = document.getElementById("main");
    main.textContent = "";
    main.appendChild(summary(data));
    var list = questionList(data);
    main.appendChild(list.node);
    main.appendChild(costs(data));
    main.appendChild(failures(data));
    main.appendChild(warnings(data));
    if (data.plots.length) {
      main.appendChild(section("Plots", data.plots.map(function (p) { return el("img", { src: p.src, alt: p.name, cls: "plot" }); })));
    }
    document.addEventListener("keydown", function (event) {
      if (event.target && (event.target.tagName === "INPUT" || event.target.tagName === "SELECT")) {
        if (event.key === "Escape") event.target.blur();
        return;
      }
      if (event.key === "j") list.keys.move(1);
      else if (event.key === "k") list.keys.move(-1);
      else if (event.key === "Enter") list.keys.enter();
      else if (event.key === "/") { event.preventDefault(); document.getElementById("search").focus(); }
    });
  }

  function summary(data) {
    var run = data.run, c = run.counts;
    var facts = [
      ["status", run.status + " (exit " + run.exit_code + "): " + run.meaning + (run.error ? "; " + run.error : "")],
      ["questions", num(c.questions) + "; done " + num(c.done) + ", failed " + num(c.failed) + ", pending " + num(c.pending) + ", reused " + num(c.reused) + ", invalid lines " + num(c.invalid_rows)],
      ["corpus", run.corpus || "-"],
      ["question set", run.input],
      ["rankers", run.rankers],
      ["wall time", run.wall_s + " s" + (run.outage_s ? "; " + run.outage_s + " s of it waiting for the LLM provider" : "")],
      ["cost", usd(data.cost.total.usd) + " for " + data.cost.total.calls + " calls"]
    ];
    if (data.metrics) facts.push(["evidence", data.metrics]);
    if (data.against) facts.push(["against run", data.against.run_id + ": " + data.against.changed + " of " + data.against.compared + " questions changed in their top five"]);
    (run.prompt_checks || []).forEach(function (check) { facts.push([check.dropped ? "WARNING" : "system prompt", check.text]); });
    return section("Run " + run.run_id, [el("dl", {}, facts.reduce(function (out, f) {
      return out.concat([el("dt", { text: f[0] }), el("dd", { text: f[1], cls: f[0] === "WARNING" ? "warn" : "" })]);
    }, []))]);
  }

  function questionList(data) {
    var companies = unique(data.questions.map(function (q) { return q.company; }));
    var forms = unique(data.questions.map(function (q) { return q.form; }));
    var search = el("input", { id: "search", type: "search", placeholder: "search questions, ids, companies" });
    var company = choice("company", companies), form = choice("form", forms);
    var flags = [["failed", "failed"], ["no_filing", "no filing in scope"], ["miss", "judged miss"]];
    if (data.against) flags.push(["changed", "changed since " + data.against.run_id]);
    var compared = data.compared || [];
    if (compared.length) flags.push(["changed_previous", "changed since the previous filing"]);
    var boxes = flags.map(function (f) { return [f[0], el("input", { type: "checkbox", id: "only-" + f[0] })]; });
    var count = el("span", { cls: "count" });
    var body = el("ol", { id: "questions", cls: "questions" });
    var pager = el("div", { cls: "pager" });
    var state = { page: 0, shown: data.questions };
    var keys = selectable(function () { return Array.prototype.slice.call(body.children); }, "selected", function (node) {
      window.location.href = node.querySelector("a").getAttribute("href");
    });
    function matches(q) {
      var text = search.value.trim().toLowerCase();
      if (text && (q.id + " " + q.question + " " + q.company).toLowerCase().indexOf(text) < 0) return false;
      if (company.value && q.company !== company.value) return false;
      if (form.value && q.form !== form.value) return false;
      return boxes.every(function (b) { return !b[1].checked || q[b[0]]; });
    }
    function render() {
      state.shown = data.questions.filter(matches);
      var pages = Math.max(1, Math.ceil(state.shown.length / PAGE_SIZE));
      state.page = Math.min(state.page, pages - 1);
      body.textContent = "";
      state.shown.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE).forEach(function (q) { body.appendChild(entry(q)); });
      body.setAttribute("start", String(state.page * PAGE_SIZE + 1));
      count.textContent = state.shown.length + " of " + data.questions.length + " questions";
      pager.textContent = "";
      pager.appendChild(button("previous", state.page > 0, function () { state.page -= 1; render(); }));
      pager.appendChild(el("span", { text: " page " + (state.page + 1) + " of " + pages + " " }));
      pager.appendChild(button("next", state.page < pages - 1, function () { state.page += 1; render(); }));
      keys.reset();
    }
    [search, company, form].concat(boxes.map(function (b) { return b[1]; })).forEach(function (input) {
      input.addEventListener("input", function () { state.page = 0; render(); });
    });
    var controls = el("div", { cls: "filters" }, [search, company, form].concat(boxes.map(function (b, i) {
      return el("label", {}, [b[1], " " + flags[i][1]]);
    })));
    var perCompany = compared.length ? el("p", { cls: "sub", id: "changed-by-company", text: "changed since the previous filing: " + compared.map(function (c) {
      return (c.company || "no company") + " " + c.changed + " of " + c.questions;
    }).join(" \u00b7 ") }) : null;
    var node = section("Questions", [controls, perCompany, count, body, pager]);
    render();
    return { node: node, keys: keys };
  }

  function entry(q) {
    var marks = [];
    if (q.failed) marks.push(el("span", { cls: "tag bad", text: "failed" }));
    if (q.no_filing) marks.push(el("span", { cls: "tag bad", text: "no filing in scope" }));
    if (q.miss) marks.push(el("span", { cls: "tag warn", text: "judged miss" }));
    if (q.changed) marks.push(el("span", { cls: "tag", text: "changed" }));
    if (q.changed_previous) marks.push(el("span", { cls: "tag", text: q.changed_previous + " changed since the previous filing" }));
    return el("li", { "data-id": q.id }, [
      el("a", { href: questionHref(q), text: q.question }),
      el("div", { cls: "sub" }, [q.id + " \u00b7 " + (q.company || "any company") + (q.form ? " \u00b7 " + q.form : "") + (q.top ? " \u00b7 " + q.top : "") + " "].concat(marks))
    ]);
  }

  function unique(values) { return values.filter(function (v, i) { return v && values.indexOf(v) === i; }).sort(); }

  function choice(name, values) {
    return el("select", { id: "only-" + name, "aria-label": name }, [el("option", { value: "", text: "any " + name })].concat(values.map(function (v) {
      return el("option", { value: v, text: v });
    })));
  }

  function button(text, enabled, action) {
    var node = el("button", { type: "button", text: text });
    node.disabled = !enabled;
    node.addEventListener("click", action);
    return node;
  }

  function costs(data) {
    var rows = data.cost.by_stage.map(function (s) {
      return [s.group, s.calls, s.prompt_tokens, s.cached_tokens, s.completion_tokens, usd(s.usd), s.estimate_calls === undefined ? "" : s.estimate_calls, s.estimate_prompt_tokens === undefined ? "" : s.estimate_prompt_tokens];
    });
    var body = rows.length ? [table(["stage or tier", "calls", "prompt tokens", "cached", "completion", "USD", "estimate: calls", "estimate: prompt tokens"], rows)]
      : [el("p", { text: "no LLM call in this run: $0" })];
    if (data.estimate_note) body.push(el("p", { cls: "sub", text: data.estimate_note }));
    return section("Cost", body);
  }

  function failures(data) {
    if (!data.failures.length) return section("Failures", [el("p", { text: "none" })]);
    return section("Failures", data.failures.map(function (group) {
      return el("details", { open: "" }, [el("summary", { text: group.reason + " (" + group.items.length + ")" }),
        el("ul", {}, group.items.map(function (item) { return el("li", { text: item }); }))]);
    }));
  }

  function warnings(data) {
    if (!data.warnings.length) return section("Warnings", [el("p", { text: "none" })]);
    return section("Warnings", [el("ul", {}, data.warnings.map(function (w) { return el("li", { text: w }); }))]);
  }

  // -- a question's page ------------------------------------------------------------------------

  function questionPage() {
    var params = new URLSearchParams(window.location.search);
    var n = params.get("n");
    if (n === null || !/^\d+$/.test(n)) return fail("no question: open it from the run's page");
    load("data/q/" + n + ".js", function () {
      var q = PRISM.q[n];
      if (!q) return fail("no such question");
      if (params.get("id") !== null && params.get("id") !== q.id) return fail("this link names another question");
      var pending = q.page_files.length;
      if (!pending) return renderQuestion(q);
      q.page_files.forEach(function (file) { load(file, function () { pending -= 1; if (!pending) renderQuestion(q); }); });
    });
  }

  function renderQuestion(q) {
    document.title = q.question;
    document.getElementById("run-id").textContent = q.run_id;
    var main = document.getElementById("main");
    main.textContent = "";
    var nav = el("nav", { cls: "pager" }, [
      q.prev ? el("a", { id: "prev", href: questionHref(q.prev), text: "\u2190 previous question" }) : el("span"),
      el("a", { href: "index.html", text: "all questions" }),
      q.next ? el("a", { id: "next", href: questionHref(q.next), text: "next question \u2192" }) : el("span")
    ]);
    main.appendChild(nav);
    main.appendChild(section("Question " + q.id, [el("p", { cls: "question", text: q.question }), scopeList(q)]));
    if (q.error) main.appendChild(el("p", { cls: "error", text: q.error }));
    if (q.answer) main.appendChild(el("p", { cls: "sub", text: "reference answer: " + q.answer }));
    main.appendChild(considered(q));
    if (q.changes) main.appendChild(changes(q.changes));
    var rows = el("ol", { cls: "rows", id: "rows" }, q.rows.map(function (r) { return evidenceRow(r); }));
    main.appendChild(section("Evidence (" + q.rows.length + " rows, best first)", [rows]));
    main.appendChild(section("Calls", [el("p", { text: q.calls.calls + " calls, " + q.calls.prompt_tokens + " prompt and " + q.calls.completion_tokens + " completion tokens, " + usd(q.calls.usd) })]));
    Array.prototype.forEach.call(rows.querySelectorAll("pre.page"), function (box) {
      var mark = box.querySelector("mark");  // each page scrolled to its passage
      if (mark) box.scrollTop = Math.max(0, mark.offsetTop - box.clientHeight / 3);
    });
    var keys = selectable(function () { return Array.prototype.slice.call(rows.children); }, "selected", null);
    keys.reset();
    document.addEventListener("keydown", function (event) {
      if (event.key === "j") keys.move(1);
      else if (event.key === "k") keys.move(-1);
      else if (event.key === "n" && q.next) window.location.href = questionHref(q.next);
      else if (event.key === "p" && q.prev) window.location.href = questionHref(q.prev);
    });
  }

  function scopeList(q) {
    var scope = q.scope || {};
    var parts = ["company: " + (scope.company || "any"), "forms: " + ((scope.form_types || []).join(", ") || "any"), "period: " + (q.period || scope.period || "latest"), "forms ranked by: " + (q.forms_ranked_by || "-")];
    if (q.compare) parts.push("compared with: " + (q.compare === "year_ago" ? "the filing of a year before" : "the previous filing"));
    return el("p", { cls: "sub", text: parts.join(" \u00b7 ") });
  }

  function considered(q) {
    if (!q.considered.length) return section("Filings considered", [el("p", { text: "none in scope" })]);
    var note = el("p", { cls: "sub", text: "score = 2 \u00d7 period fit + form score + recency; the ranked ones were searched" });
    return section("Filings considered", [note, table(["filing", "company", "form", "period", "score", "period fit", "form score", "recency", "ranked"], q.considered.map(function (c) {
      return [c.filing, c.company, c.form, c.period, c.score, c.period_fit, c.form_score, c.recency, c.ranked ? "yes" : "no"];
    }))]);
  }

  function changes(c) {
    var lines = [];
    c.new_pages.forEach(function (p) { lines.push("new: " + p); });
    c.dropped_pages.forEach(function (p) { lines.push("dropped: " + p); });
    c.moved.forEach(function (p) { lines.push("moved: " + p); });
    c.score_changes.forEach(function (p) { lines.push("score: " + p); });
    return section("Changed since run " + c.against, [lines.length ? el("ul", {}, lines.map(function (t) { return el("li", { text: t }); })) : el("p", { text: "no change in the top five" })]);
  }

  function evidenceRow(r) {
    if (r.rank === null) return removedRow(r);
    var bar = el("span", { cls: "bar" }, [el("span", { cls: "fill" })]);
    bar.firstChild.style.width = Math.round(100 * Math.min(1, r.score)) + "%";
    var place = "page " + num(r.page) + (r.printed_page ? " (printed " + r.printed_page + ")" : "") + (r.document ? " \u00b7 " + r.document : "") + (r.heading ? " \u00b7 " + r.heading : "");
    var who = r.company + " \u00b7 " + r.form + " \u00b7 " + r.period + (r.cik ? " \u00b7 CIK " + r.cik : "") + (r.accession ? " \u00b7 " + r.accession : "");
    var links = [];
    if (r.edgar) links.push(el("a", { cls: "edgar", href: r.edgar, rel: "noopener noreferrer", target: "_blank", text: "the filing on EDGAR" }));
    return el("li", { cls: "row", "data-rank": String(r.rank) }, [
      el("div", { cls: "head" }, [el("span", { cls: "rank", text: "#" + r.rank }), bar, el("span", { cls: "score", text: r.score.toFixed(3) }), el("span", { cls: "filing", text: r.filing })]),
      el("div", { cls: "sub", text: who }),
      el("div", { cls: "sub", text: place + " \u00b7 ranked by " + (r.ranker || "-") + (r.grade === null ? "" : " \u00b7 grade " + r.grade) }),
      el("div", { cls: "sub" }, links),
      pageText(r)
    ].concat(sincePrevious(r)));
  }

  function removedRow(r) {
    // a passage the earlier filing's evidence cited that no passage now matches
    return el("li", { cls: "row removed", "data-rank": "" }, [
      el("div", { cls: "head" }, [el("span", { cls: "rank", text: "no longer cited" }), el("span", { cls: "filing", text: r.previous_filing + " page " + num(r.previous_page) })])
    ].concat(sincePrevious(r)));
  }

  function sincePrevious(r) {
    // what changed in the row's passage since the earlier filing: its kind, its redline, the earlier page
    if (!r.change) return [];
    var similar = r.similarity === null ? "" : " \u00b7 similarity " + r.similarity.toFixed(2);
    var out = [el("div", { cls: "sub change" }, [el("span", { cls: "tag change-" + r.change.replace(/ /g, "-"), text: r.change }), similar + (r.previous_filing ? " \u00b7 since " + r.previous_filing : "")])];
    if (r.redline && r.change !== "unchanged") out.push(redline(r.redline));
    var text = r.previous_page_id === null ? undefined : PRISM.p[r.previous_page_id];
    if (typeof text === "string") {
      out.push(el("details", { cls: "previous" }, [
        el("summary", { cls: "previous-link", text: "the previous filing's page " + r.previous_page + " (" + r.previous_filing + ")" }),
        el("pre", { cls: "page", text: text })
      ]));
    }
    return out;
  }

  function redline(text) {
    // "[-gone words-]" and "{+new words+}" as <del> and <ins>, every piece set as text
    var box = el("div", { cls: "redline" });
    var marks = /\[-([\s\S]*?)-\]|\{\+([\s\S]*?)\+\}/g, at = 0, found;
    while ((found = marks.exec(text)) !== null) {
      if (found.index > at) box.appendChild(document.createTextNode(text.slice(at, found.index)));
      box.appendChild(found[1] !== undefined ? el("del", { text: found[1] }) : el("ins", { text: found[2] }));
      at = marks.lastIndex;
    }
    box.appendChild(document.createTextNode(text.slice(at)));
    return box;
  }

  function pageText(r) {
    var text = PRISM.p[r.page_id];
    var box = el("pre", { cls: "page" });
    if (typeof text !== "string") { box.textContent = r.excerpt; return box; }
    var start = r.start, end = r.end;
    if (start === null || end === null || start < 0 || end > text.length || start >= end) {
      box.textContent = text;  // no offsets kept (a result from before): the page, unmarked
      return box;
    }
    box.appendChild(document.createTextNode(text.slice(0, start)));
    box.appendChild(el("mark", { text: text.slice(start, end) }));
    box.appendChild(document.createTextNode(text.slice(end)));
    return box;
  }

  PRISM.page = function (id, text) { PRISM.p[id] = text; };
  PRISM.question = function (n, data) { PRISM.q[n] = data; };

  document.addEventListener("DOMContentLoaded", function () {
    if (document.body.getAttribute("data-page") === "run") runPage();
    else questionPage();
  });
  if (document.readyState !== "loading") {
    if (document.body.getAttribute("data-page") === "run") runPage();
    else questionPage();
  }
})();

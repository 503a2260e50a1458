// agentkit view: the page. Plain JavaScript, no build step; charts.js draws the charts
// (with the Chart.js file shipped in static/vendor/).
// Everything from a run is put in the page as text (textContent), never as HTML.
"use strict";

(() => {
  const app = document.getElementById("app");
  const crumbs = document.getElementById("crumbs");
  const liveBadge = document.getElementById("live");

  // ---------------------------------------------------------------- helpers
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") el.className = value;
      else if (key === "text") el.textContent = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(el.dataset, value);
      else el.setAttribute(key, value === true ? "" : String(value));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  // Replace an element's children (null, false and undefined are left out).
  function fill(el, ...children) {
    return append(clear(el), children);
  }

  const enc = encodeURIComponent;
  const runUrl = (run, query) => `/run/${enc(run)}${query ? "?" + query : ""}`;
  const rolloutUrl = (run, rid) => `/run/${enc(run)}/rollout/${enc(rid)}`;
  const jobUrl = (job) => `/job/${enc(job)}`;
  const compareUrl = (names, query) => `/compare/${names.map(enc).join("/")}${query ? "?" + query : ""}`;
  // A task's rollouts in a run: the run's rollouts tab filtered to that task.
  const taskUrl = (run, task) => runUrl(run, new URLSearchParams({ task }).toString());

  function num(value, digits = 3) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return value.toFixed(digits);
  }

  function fixed(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }

  const mean = (value) => fixed(value, 3);

  function int(value) {
    return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
  }

  function money(value) {
    if (value === null || value === undefined) return "–";
    if (value === 0) return "$0";
    return value < 0.01 ? `$${value.toPrecision(2)}` : `$${value.toFixed(value < 100 ? 4 : 2)}`;
  }

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    if (value < 1) return `${Math.round(value * 1000)} ms`;
    if (value < 120) return `${value.toFixed(value < 10 ? 2 : 1)} s`;
    const m = Math.floor(value / 60);
    return m < 120 ? `${m} min ${Math.round(value % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  function date(ts) {
    if (!ts) return "–";
    const d = new Date(ts * 1000);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function bytes(n) {
    if (n === null || n === undefined) return "";
    if (n < 1024) return `${n} B`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
    return `${(n / 1024 / 1024).toFixed(1)} MB`;
  }

  function passK(pass) {
    const keys = Object.keys(pass || {}).sort((a, b) => Number(a) - Number(b));
    if (!keys.length) return "–";
    return keys.map((k) => `@${k} ${fixed(pass[k], 2)}`).join("  ");
  }

  function preview(value, max = 160) {
    let text = typeof value === "string" ? value : JSON.stringify(value);
    if (text === undefined) return "";
    text = text.replace(/\s+/g, " ").trim();
    return text.length > max ? text.slice(0, max - 1) + "…" : text;
  }

  function textOf(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content
        .map((part) => {
          if (typeof part === "string") return part;
          if (part && typeof part.text === "string") return part.text;
          if (part && part.type === "image_url") return "[image]";
          return JSON.stringify(part);
        })
        .join("\n");
    }
    return JSON.stringify(content, null, 2);
  }

  function pretty(value) {
    if (typeof value === "string") {
      try {
        return JSON.stringify(JSON.parse(value), null, 2);
      } catch (_) {
        return value;
      }
    }
    return JSON.stringify(value, null, 2);
  }

  // A block of text that folds when long.
  function textBlock(text, { lines = 18, cls = "" } = {}) {
    const pre = h("pre", { class: `text ${cls}`, text });
    const count = text.split("\n").length;
    if (count <= lines && text.length <= 2400) return pre;
    pre.classList.add("folded");
    const more = h("button", { class: "link small", type: "button", text: `Show all (${count} lines)` });
    more.addEventListener("click", () => {
      const folded = pre.classList.toggle("folded");
      more.textContent = folded ? `Show all (${count} lines)` : "Show less";
    });
    return h("div", { class: "foldable" }, pre, more);
  }

  function jsonBlock(value, opts) {
    return textBlock(pretty(value), { cls: "json", ...opts });
  }

  function details(summary, body, open = false) {
    return h("details", { open }, h("summary", {}, summary), body);
  }

  function badge(text, kind) {
    return h("span", { class: `badge ${kind || ""}`, text });
  }

  function stateBadge(state) {
    const kinds = { running: "live", complete: "ok", incomplete: "warn", interrupted: "warn", stopped: "warn" };
    return badge(state, kinds[state] || "");
  }

  function rewardClass(row) {
    if (row.status === "running") return "running";
    if (row.status === "interrupted") return "warn";
    if (row.status === "pending") return "pending";
    if (row.infrastructure) return "infra"; // it could not run: no answer, no reward
    if (!row.ok && row.ok !== undefined) return "err";
    if (row.passed === true) return "ok";
    if (row.passed === false) return "bad";
    return "";
  }

  function statusBadge(row) {
    if (row.status === "running") return badge("running", "live");
    if (row.status === "interrupted") return badge("interrupted", "warn");
    if (row.infrastructure) return badge("could not run", "infra");
    if (row.status !== "completed") return badge(row.status, "err");
    if (!row.ok) return badge("scoring error", "err");
    return badge(row.passed ? "passed" : "not passed", row.passed ? "ok" : "bad");
  }

  function nav(href, ...children) {
    return h("a", { href, "data-nav": true }, ...children);
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path) {
    const resp = await fetch(path, { headers: { Accept: "application/json" } });
    let body = null;
    try {
      body = await resp.json();
    } catch (_) {
      body = null;
    }
    if (!resp.ok) throw new ApiError(resp.status, (body && body.error) || `HTTP ${resp.status}`);
    return body;
  }

  function showError(err) {
    clear(app);
    app.append(
      h("div", { class: "card error-card" },
        h("h2", { text: err.status === 404 ? "Not found" : "Cannot show this" }),
        h("p", { text: err.message || String(err) }),
        nav("/", "All runs"))
    );
  }

  function setCrumbs(...given) {
    clear(crumbs);
    const items = given.filter((item) => item !== null && item !== undefined);
    items.forEach((item, i) => {
      if (i) crumbs.append(h("span", { class: "sep", text: "›" }));
      crumbs.append(typeof item === "string" ? h("span", { text: item }) : item);
    });
  }

  function setLive(state) {
    if (state !== "running") {
      liveBadge.hidden = true;
      return;
    }
    liveBadge.hidden = false;
    liveBadge.className = `live ${state}`;
    liveBadge.textContent = state === "running" ? "● live" : state;
  }

  // ------------------------------------------------------------- navigation
  let leaving = [];
  const onLeave = (fn) => leaving.push(fn);

  function navigate(url, { replace = false } = {}) {
    if (replace) history.replaceState(null, "", url);
    else history.pushState(null, "", url);
    route();
  }

  document.addEventListener("click", (event) => {
    const a = event.target.closest("a[data-nav]");
    if (!a || event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(a.getAttribute("href"));
  });
  window.addEventListener("popstate", route);

  function stream(url, handlers) {
    const source = new EventSource(url);
    for (const [name, fn] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => fn(JSON.parse(event.data)));
    }
    onLeave(() => source.close());
    return source;
  }

  // Run fn at most once at a time; a call while it runs schedules one more run.
  function serial(fn) {
    let running = false;
    let again = false;
    return async function go() {
      if (running) {
        again = true;
        return;
      }
      running = true;
      try {
        await fn();
      } catch (err) {
        console.error(err);
      } finally {
        running = false;
        if (again) {
          again = false;
          go();
        }
      }
    };
  }

  function route() {
    for (const fn of leaving) fn();
    leaving = [];
    setLive(null);
    const path = location.pathname;
    const dec = decodeURIComponent;
    let m;
    let page;
    if (path === "/" || path === "/index.html") page = runsPage();
    else if ((m = path.match(/^\/run\/([^/]+)\/?$/))) page = runPage(dec(m[1]));
    else if ((m = path.match(/^\/run\/([^/]+)\/rollout\/([^/]+)\/?$/))) page = rolloutPage(dec(m[1]), dec(m[2]));
    else if ((m = path.match(/^\/job\/([^/]+)\/?$/))) page = jobPage(dec(m[1]));
    else if ((m = path.match(/^\/compare\/((?:[^/]+\/)+[^/]+)\/?$/))) page = comparePage(m[1].split("/").map(dec));
    else page = Promise.reject(new ApiError(404, `no page ${path}`));
    page.catch(showError);
  }

  function query() {
    return new URLSearchParams(location.search);
  }

  function setQuery(params) {
    const text = params.toString();
    history.replaceState(null, "", location.pathname + (text ? "?" + text : "") + location.hash);
  }

  // -------------------------------------------------------------- runs page
  async function runsPage() {
    setCrumbs("Runs");
    document.title = "Runs · agentkit view";
    const selected = new Set();
    const table = h("div", { class: "table-wrap" });
    const compareBtn = h("button", { class: "primary", type: "button", disabled: true, text: "Compare runs", title: "Tick two runs or more" });
    const syncCompare = () => {
      compareBtn.disabled = selected.size < 2;
      compareBtn.textContent = selected.size < 2 ? "Compare runs" : `Compare ${selected.size} runs`;
    };
    const heading = h("h1", { text: "Runs" });
    const sub = h("p", { class: "muted" });
    fill(app, 
      h("section", { class: "page-head" },
        h("div", {}, heading, sub),
        h("div", { class: "actions" }, compareBtn)),
      table
    );
    compareBtn.addEventListener("click", () => navigate(compareUrl([...selected])));

    const columns = [
      ["name", "Run"], ["created_at", "Date"], ["taskset", "Taskset"], ["harness", "Harness"],
      ["model", "Model"], ["finished", "Progress"], ["mean_reward", "Mean reward"],
      ["pass", "pass@k"], ["errors", "Errors"], ["cost", "Cost"],
    ];
    let data = null;

    // A job's cells are listed under its row (folded unless it is the only job).
    const unfolded = new Set();
    let folding = null;

    function render() {
      const q = query();
      const sort = q.get("sort") || "created_at";
      const desc = q.has("desc") ? q.get("desc") === "1" : sort === "created_at";
      const key = (r) => (sort === "pass" ? (r.pass_at_k || {})["1"] : r[sort]);
      const order = (x, y) => {
        const a = key(x);
        const b = key(y);
        if (a === b) return 0;
        if (a === null || a === undefined) return 1;
        if (b === null || b === undefined) return -1;
        const c = typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
        return desc ? -c : c;
      };
      const jobs = data.jobs || [];
      if (folding === null) {
        folding = true;
        if (jobs.length === 1) unfolded.add(jobs[0].name);
      }
      // a job sorts as its best cell's mean reward, its summed progress, errors and cost
      const items = [
        ...data.runs.filter((r) => !r.job).map((r) => ({ row: r })),
        ...jobs.map((j) => ({
          job: j,
          row: { ...j, mean_reward: j.best ? j.best.mean_reward : null, pass_at_k: {}, taskset: null, harness: null, model: null },
          cells: data.runs.filter((r) => r.job === j.name).sort(order),
        })),
      ].sort((x, y) => order(x.row, y.row));
      const nRuns = data.runs.filter((r) => !r.job).length;
      sub.textContent = `${nRuns} run${nRuns === 1 ? "" : "s"}${jobs.length ? ` and ${jobs.length} job${jobs.length === 1 ? "" : "s"}` : ""} in ${data.root}`;
      const head = h("tr", {}, h("th", { class: "narrow" }),
        columns.map(([k, label]) => {
          const th = h("th", { class: `sortable ${k === sort ? (desc ? "desc" : "asc") : ""}`, text: label, title: "Sort" });
          th.addEventListener("click", () => {
            const p = query();
            p.set("sort", k);
            p.set("desc", k === sort && !desc ? "1" : "0");
            setQuery(p);
            render();
          });
          return th;
        }));
      const body = items.map((item) => (item.job ? [jobRow(item.job), unfolded.has(item.job.name) ? item.cells.map((r) => runRow(r, true)) : null] : runRow(item.row, false)));
      const empty = !items.length
        ? h("tr", {}, h("td", { colspan: columns.length + 1, class: "muted", text: "No runs here yet: they appear as soon as agentkit run starts writing one." }))
        : null;
      fill(table, h("table", { class: "grid runs" }, h("thead", {}, head), h("tbody", {}, body, empty)));
      // a run or a job that cannot be read: listed with its error (a run links to its page,
      // which says the same); the others are listed as usual
      for (const b of data.broken || []) {
        table.append(h("p", { class: "err-text small broken", dataset: { name: b.name } },
          b.kind === "run" ? nav(runUrl(b.name), b.name) : h("span", { text: b.name }), `: ${b.error}`));
      }
      syncCompare();
    }

    function progress(r) {
      const pct = r.planned ? Math.min(100, (100 * r.finished) / r.planned) : 0;
      const bar = h("span", { class: "bar" }, h("span", { class: "fill" }));
      bar.firstChild.style.width = `${pct}%`;
      return [bar, ` ${int(r.finished)}/${int(r.planned)} `, stateBadge(r.state),
        r.running ? h("span", { class: "muted small", text: ` ${r.running} running` }) : null];
    }

    function errors(r) {
      return h("td", { class: `num ${r.errors ? "err-text" : ""}` }, int(r.errors),
        r.infra_errors ? h("div", { class: "small infra-text", text: `${int(r.infra_errors)} could not run` }) : null);
    }

    function runRow(r, inJob) {
      const box = h("input", { type: "checkbox", "aria-label": `select ${r.name}` });
      box.checked = selected.has(r.name);
      box.addEventListener("change", () => {
        if (box.checked) selected.add(r.name);
        else selected.delete(r.name);
        syncCompare();
      });
      return h("tr", { class: `run-row ${inJob ? "cell-row" : ""}`, dataset: { run: r.name, job: inJob ? r.job : undefined } },
        h("td", { class: "narrow" }, box),
        h("td", { class: inJob ? "cell-name" : "" }, nav(runUrl(r.name), inJob ? r.cell : r.name)),
        h("td", { class: "nowrap", text: date(r.created_at) }),
        h("td", { class: "clip", text: r.taskset || "–" }),
        h("td", { class: "clip", text: r.harness || "–" }),
        h("td", { class: "clip", text: r.model || "–" }),
        h("td", { class: "nowrap" }, progress(r)),
        h("td", { class: "num", text: mean(r.mean_reward) }),
        h("td", { class: "nowrap small", text: passK(r.pass_at_k) }),
        errors(r),
        h("td", { class: "num", text: money(r.cost) }));
    }

    function jobRow(j) {
      const open = unfolded.has(j.name);
      const fold = h("button", { type: "button", class: "link fold", "aria-expanded": String(open), title: open ? "Hide its cells" : "Show its cells", text: open ? "▾" : "▸" });
      fold.addEventListener("click", () => {
        if (unfolded.has(j.name)) unfolded.delete(j.name);
        else unfolded.add(j.name);
        render();
      });
      const axes = Object.entries(j.axes || {}).filter(([, labels]) => labels.length > 1).map(([axis, labels]) => `${axis}: ${labels.join(", ")}`);
      return h("tr", { class: "job-row", dataset: { job: j.name } },
        h("td", { class: "narrow" }, fold),
        h("td", {}, h("span", { class: "badge job", text: "job" }), " ", nav(jobUrl(j.name), j.name)),
        h("td", { class: "nowrap", text: date(j.created_at) }),
        h("td", { colspan: 3, class: "small" }, `${j.started === j.cells ? j.cells : `${j.started} of ${j.cells}`} cells`, axes.length ? h("span", { class: "muted", text: ` · ${axes.join(" · ")}` }) : null),
        h("td", { class: "nowrap" }, progress(j)),
        h("td", { class: "num", title: j.best ? `best cell: ${j.best.cell}` : "" }, mean(j.best ? j.best.mean_reward : null),
          j.best ? h("div", { class: "small muted", text: `best: ${j.best.cell}` }) : null),
        h("td", {}),
        errors(j),
        h("td", { class: "num", text: money(j.cost) }));
    }

    const load = serial(async () => {
      data = await api("/api/runs");
      for (const name of [...selected]) if (!data.runs.some((r) => r.name === name)) selected.delete(name);
      render();
    });
    await load();
    stream("/api/runs/stream", { runs: (msg) => { if (msg.changed) load(); } });
  }

  // --------------------------------------------------------------- run page
  async function runPage(name) {
    const q = query();
    const tab = q.get("tab") || "rollouts";
    document.title = `${name} · agentkit view`;
    setCrumbs(nav("/", "Runs"), name);
    let run = await api(`/api/run/${enc(name)}`);
    if (run.job) setCrumbs(nav("/", "Runs"), nav(jobUrl(run.job), run.job), run.cell);
    const head = h("section", { class: "run-head" });
    const banner = h("div", { class: "banners" });
    const tabs = h("nav", { class: "tabs" });
    const body = h("section", { class: "tab-body" });
    fill(app, head, banner, tabs, body);

    function renderHead() {
      setLive(run.state);
      const pct = run.planned ? Math.min(100, (100 * run.finished) / run.planned) : 0;
      const bar = h("span", { class: "bar wide" }, h("span", { class: "fill" }));
      bar.firstChild.style.width = `${pct}%`;
      const usage = (run.summary && run.summary.usage) || {};
      fill(head, 
        h("div", { class: "title-row" }, h("h1", { text: run.cell || name }), run.job ? h("span", { class: "muted", text: `cell of job ${run.job}` }) : null, stateBadge(run.state)),
        h("p", { class: "muted" },
          `${run.taskset || "–"} · ${run.harness || "–"}${run.model ? " · " + run.model : ""} · started ${date(run.created_at)}`),
        h("div", { class: "stats" },
          stat("Progress", h("span", {}, `${int(run.finished)} / ${int(run.planned)}`, bar)),
          stat("Mean reward", mean(run.mean_reward)),
          stat("pass@k", passK(run.pass_at_k)),
          stat("Errors", int(run.errors), run.errors ? "err-text" : ""),
          run.infra_errors ? stat("Could not run", int(run.infra_errors), "infra-text") : null,
          stat("Tokens", `${int(usage.input_tokens || 0)} in · ${int(usage.output_tokens || 0)} out`),
          stat("Cost", money(run.cost)),
          run.state === "running" ? stat("Running now", int(run.running)) : null)
      );
      clear(banner);
      if (run.state === "running") {
        banner.append(h("div", { class: "banner live" }, "This run is being written: rows and counts update as rollouts finish."));
      } else if (run.state === "interrupted") {
        banner.append(h("div", { class: "banner warn" },
          `This run was interrupted: ${int(run.finished)} of ${int(run.planned)} rollouts finished. `,
          "Continue it with ", h("code", { text: `agentkit run --resume ${run.path}` })));
      } else if (run.state === "incomplete") {
        const n = run.infra_errors;
        banner.append(h("div", { class: "banner warn" },
          `Every rollout finished, but ${int(n)} could not run (infrastructure failures: no reward, in no mean or pass@k). `,
          "Run them again with ", h("code", { text: `agentkit run --resume ${run.path}` })));
      } else if (run.state === "stopped") {
        banner.append(h("div", { class: "banner warn", text: `This run stopped early: ${run.stopped}` }));
      } else {
        banner.append(h("div", { class: "banner ok", text: `This run is complete: ${int(run.finished)} rollouts.` }));
      }
      if (run.torn_tail) banner.append(h("div", { class: "banner warn", text: run.torn_tail }));
      if (run.options.sandbox_warning) banner.append(h("div", { class: "banner warn", text: run.options.sandbox_warning }));
    }

    function stat(label, value, cls) {
      return h("div", { class: "stat" }, h("div", { class: "label", text: label }), h("div", { class: `value ${cls || ""}` }, value));
    }

    const tabNames = [["rollouts", "Rollouts"], ["tasks", "Tasks × rollouts"], ["charts", "Charts"], ["rubric", "Rubric"], ["options", "Options"]];
    for (const [key, label] of tabNames) {
      const p = new URLSearchParams(key === "rollouts" ? "" : `tab=${key}`);
      tabs.append(h("a", { href: runUrl(name, p.toString()), "data-nav": true, class: key === tab ? "active" : "", text: label }));
    }

    renderHead();
    let refreshTab = async () => {};
    if (tab === "tasks") refreshTab = await tasksTab(name, run, body);
    else if (tab === "charts") refreshTab = await chartsTab(name, body);
    else if (tab === "rubric") rubricTab(run, body);
    else if (tab === "options") optionsTab(run, body);
    else refreshTab = await rolloutsTab(name, run, body);

    const reload = serial(async () => {
      run = await api(`/api/run/${enc(name)}`);
      renderHead();
      await refreshTab();
    });
    stream(`/api/run/${enc(name)}/stream`, {
      run: (snap) => {
        if (snap.finished !== run.finished || snap.state !== run.state || snap.live.length || run.running) reload();
      },
    });
  }

  async function rolloutsTab(name, run, body) {
    const q = query();
    const filters = {
      status: q.get("status") || "",
      failed: q.get("failed") || "",
      errored: q.get("errored") || "",
      could_not_run: q.get("could_not_run") || "",
      error_kind: q.get("error_kind") || "",
      task: q.get("task") || "",
      metric: q.get("metric") || "",
      op: q.get("op") || "lt",
      value: q.get("value") || "",
      sort: q.get("sort") || "task",
      desc: q.get("desc") || "",
      offset: q.get("offset") || "0",
      limit: q.get("limit") || "50",
    };
    const select = (key, options) => {
      const el = h("select", { name: key }, options.map(([v, label]) => h("option", { value: v, text: label })));
      el.value = filters[key];
      el.addEventListener("change", () => update({ [key]: el.value }));
      return el;
    };
    const check = (key, label) => {
      const box = h("input", { type: "checkbox", name: key });
      box.checked = filters[key] === "1";
      box.addEventListener("change", () => update({ [key]: box.checked ? "1" : "" }));
      return h("label", { class: "check" }, box, ` ${label}`);
    };
    const taskInput = h("input", { type: "search", name: "task", placeholder: "task id contains…", value: filters.task });
    let timer = null;
    taskInput.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => update({ task: taskInput.value }), 250);
    });
    const valueInput = h("input", { type: "number", name: "value", step: "any", placeholder: "value", value: filters.value, class: "short" });
    valueInput.addEventListener("change", () => update({ value: valueInput.value }));
    const statuses = ["completed", "failed", "timeout", "cancelled"];
    const bar = h("div", { class: "filters" },
      h("label", {}, "Status ", select("status", [["", "any"], ...statuses.map((s) => [s, s]), ["running", "running now"]])),
      check("failed", "did not pass"),
      check("errored", "errored"),
      check("could_not_run", "could not run"),
      run.error_kinds.length ? h("label", {}, "Error kind ", select("error_kind", [["", "any"], ...run.error_kinds.map((k) => [k, k])])) : null,
      h("label", {}, "Task ", taskInput),
      h("label", {}, "Metric ", select("metric", [["", "–"], ...run.metrics.map((m) => [m.name, m.name])]),
        select("op", [["lt", "<"], ["le", "≤"], ["eq", "="], ["ge", "≥"], ["gt", ">"]]), valueInput),
      h("button", { type: "button", class: "link", text: "Clear", onclick: () => update({ status: "", failed: "", errored: "", could_not_run: "", error_kind: "", task: "", metric: "", value: "" }) })
    );
    const tableWrap = h("div", { class: "table-wrap" });
    const pager = h("div", { class: "pager" });
    fill(body, bar, tableWrap, pager);

    function update(changes) {
      Object.assign(filters, changes);
      if (!("offset" in changes)) filters.offset = "0";
      const p = new URLSearchParams();
      for (const [k, v] of Object.entries(filters)) {
        if (v && !(k === "sort" && v === "task") && !(k === "op" && v === "lt") && !(k === "offset" && v === "0") && !(k === "limit" && v === "50")) p.set(k, v);
      }
      setQuery(p);
      load();
    }

    const columns = [
      ["task", "Task"], [null, "#"], ["reward", "Reward"], ["status", "Status"], [null, "Error kind"],
      ["turns", "Turns"], ["tokens", "Tokens"], ["cost", "Cost"], ["duration", "Duration"],
    ];

    function render(page) {
      const head = h("tr", {}, columns.map(([key, label]) => {
        if (!key) return h("th", { text: label });
        const active = filters.sort === key;
        const th = h("th", { class: `sortable ${active ? (filters.desc ? "desc" : "asc") : ""}`, text: label, title: "Sort" });
        th.addEventListener("click", () => update({ sort: key, desc: active && !filters.desc ? "1" : "" }));
        return th;
      }));
      const live = page.live.map((x) =>
        h("tr", { class: `rollout-row ${x.status}`, dataset: { rollout: x.rollout_id } },
          h("td", {}, nav(rolloutUrl(name, x.rollout_id), x.task_id)),
          h("td", { class: "num", text: x.rollout_index }),
          h("td", { class: "num", text: "…" }),
          h("td", {}, statusBadge(x)),
          h("td", { class: "muted small", text: x.attempt > 1 ? `attempt ${x.attempt}` : "" }),
          h("td", { class: "muted small", colspan: 4, text: `${x.events} event${x.events === 1 ? "" : "s"} so far · started ${date(x.started_at)}` })));
      const rows = page.rows.map((r) =>
        h("tr", { class: `rollout-row ${rewardClass(r)}`, dataset: { rollout: r.rollout_id } },
          h("td", {}, nav(rolloutUrl(name, r.rollout_id), r.task_id)),
          h("td", { class: "num", text: r.rollout_index }),
          h("td", { class: `num reward ${rewardClass(r)}`, text: num(r.reward) }),
          h("td", {}, statusBadge(r)),
          h("td", { class: "small", title: r.reason, text: r.error_kind || (r.ok ? "" : r.reason) }),
          h("td", { class: "num", text: int(r.turns) }),
          h("td", { class: "num", text: int(r.tokens) }),
          h("td", { class: "num", text: money(r.cost) }),
          h("td", { class: "num", text: seconds(r.duration_s) })));
      const none = !live.length && !rows.length
        ? h("tr", {}, h("td", { colspan: columns.length, class: "muted", text: page.finished ? "No rollout matches these filters." : "No rollout has finished yet." }))
        : null;
      fill(tableWrap, h("table", { class: "grid rollouts" }, h("thead", {}, head), h("tbody", {}, live, rows, none)));
      const offset = page.offset;
      const end = Math.min(page.total, offset + page.limit);
      const prev = h("button", { type: "button", text: "‹ Previous", disabled: offset === 0 });
      prev.addEventListener("click", () => update({ offset: String(Math.max(0, offset - page.limit)) }));
      const next = h("button", { type: "button", text: "Next ›", disabled: end >= page.total });
      next.addEventListener("click", () => update({ offset: String(offset + page.limit) }));
      const size = h("select", { name: "limit" }, ["25", "50", "100", "250", "500"].map((v) => h("option", { value: v, text: `${v} per page` })));
      size.value = filters.limit;
      size.addEventListener("change", () => update({ limit: size.value }));
      fill(pager, 
        h("span", { class: "muted", text: page.total ? `${int(offset + 1)}–${int(end)} of ${int(page.total)} finished` + (page.total !== page.finished ? ` (filtered from ${int(page.finished)})` : "") : "" }),
        prev, next, size);
    }

    const params = () => {
      const p = new URLSearchParams();
      for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
      return p.toString();
    };
    const load = serial(async () => render(await api(`/api/run/${enc(name)}/rollouts?${params()}`)));
    await load();
    return load;
  }

  async function tasksTab(name, run, body) {
    const q = query();
    let offset = Number(q.get("offset") || 0);
    const search = h("input", { type: "search", placeholder: "task id contains…", value: q.get("task") || "" });
    const wrap = h("div", { class: "table-wrap" });
    const pager = h("div", { class: "pager" });
    fill(body, h("div", { class: "filters" }, h("label", {}, "Task ", search),
      h("span", { class: "legend" }, legend("ok", "passed"), legend("bad", "failed"), legend("err", "error"), legend("infra", "could not run"), legend("running", "running"), legend("pending", "not yet"))), wrap, pager);
    let timer = null;
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        offset = 0;
        const p = query();
        if (search.value) p.set("task", search.value);
        else p.delete("task");
        p.delete("offset");
        setQuery(p);
        load();
      }, 250);
    });
    const ks = Object.keys(run.pass_at_k || {}).sort((a, b) => Number(a) - Number(b));

    function render(page) {
      const head = h("tr", {}, h("th", { text: "Task" }), h("th", { text: "Done" }), h("th", { text: "Mean reward" }),
        ks.map((k) => h("th", { text: `pass@${k}` })), h("th", { text: "Errors" }), h("th", { text: "Rollouts" }));
      const rows = page.tasks.map((t) => h("tr", { class: "task-row", dataset: { task: t.task_id } },
        h("td", {}, nav(runUrl(name, new URLSearchParams({ task: t.task_id }).toString()), t.task_id)),
        h("td", { class: "num", text: `${t.rollouts}/${t.planned}` }),
        h("td", { class: "num", text: mean(t.mean_reward) }),
        ks.map((k) => h("td", { class: "num", text: fixed((t.pass_at_k || {})[k], 2) })),
        h("td", { class: `num ${t.errors ? "err-text" : ""}`, text: int(t.errors) }),
        h("td", { class: "cells" }, t.cells.map((c) => {
          const title = `#${c.index}: ${c.infrastructure ? "could not run" : c.status}${c.reward !== undefined && c.reward !== null ? " · reward " + num(c.reward) : ""}`;
          const cls = `cell ${rewardClass(c)}`;
          return c.rollout_id ? h("a", { class: cls, href: rolloutUrl(name, c.rollout_id), "data-nav": true, title, "aria-label": title })
            : h("span", { class: cls, title });
        }))));
      fill(wrap, h("table", { class: "grid tasks" }, h("thead", {}, head), h("tbody", {}, rows)));
      const end = Math.min(page.total, page.offset + page.limit);
      const prev = h("button", { type: "button", text: "‹ Previous", disabled: page.offset === 0 });
      prev.addEventListener("click", () => { offset = Math.max(0, page.offset - page.limit); load(); });
      const next = h("button", { type: "button", text: "Next ›", disabled: end >= page.total });
      next.addEventListener("click", () => { offset = page.offset + page.limit; load(); });
      fill(pager, h("span", { class: "muted", text: page.total ? `${page.offset + 1}–${end} of ${int(page.total)} tasks` : "no tasks" }), prev, next);
    }

    function legend(cls, label) {
      return h("span", {}, h("span", { class: `cell ${cls}` }), ` ${label} `);
    }

    const load = serial(async () => {
      const p = new URLSearchParams({ offset: String(offset), limit: "50" });
      if (search.value) p.set("task", search.value);
      render(await api(`/api/run/${enc(name)}/tasks?${p}`));
    });
    await load();
    return load;
  }

  function rubricTab(run, body) {
    const rubric = run.rubric || {};
    const rows = run.metrics.map((m) => h("tr", {},
      h("td", {}, h("code", { text: m.name })),
      h("td", { class: "num", text: num(m.weight) }),
      h("td", { class: "num", text: num(m.mean) }),
      h("td", { text: m.description }),
      h("td", { class: "small muted", text: m.origin })));
    fill(body, 
      h("div", { class: "card" },
        h("h2", { text: "Compiled rubric" }),
        rubric.total ? h("p", {}, "Total: ", rubric.total) : null,
        rubric.order ? h("p", { class: "muted" }, "Compiled in this order: ", rubric.order.join(" → ")) : null,
        h("div", { class: "table-wrap" }, h("table", { class: "grid" },
          h("thead", {}, h("tr", {}, ["Metric", "Weight", "Mean", "Description", "Origin"].map((t) => h("th", { text: t })))),
          h("tbody", {}, rows))),
        details("The manifest's rubric section (JSON)", jsonBlock(rubric, { lines: 40 }))));
  }

  function optionsTab(run, body) {
    const o = run.options;
    const section = (title, obj) => {
      if (!obj || (typeof obj === "object" && !Object.keys(obj).length)) return null;
      const rows = Object.entries(obj).map(([k, v]) => h("tr", {}, h("th", { text: k }),
        h("td", {}, v !== null && typeof v === "object" ? h("code", { text: JSON.stringify(v) }) : h("span", { text: v === null ? "–" : String(v) }))));
      return h("div", { class: "card" }, h("h2", { text: title }), h("table", { class: "kv" }, h("tbody", {}, rows)));
    };
    fill(body, 
      h("div", { class: "cards" },
        section("Model", o.context),
        section("Run options", o.options),
        section("Plan", o.plan),
        section("Taskset", o.taskset),
        section("Harness", o.harness),
        section("Sandbox", o.sandbox),
        section("Pricing", o.pricing),
        section("Software", { agentkit: o.agentkit_version, python: o.python, platform: o.platform, directory: run.path }),
        o.resumes && o.resumes.length ? h("div", { class: "card" }, h("h2", { text: "Resumes" }), jsonBlock(o.resumes)) : null,
        o.plugins ? h("div", { class: "card" }, h("h2", { text: "Plugins" }),
          h("table", { class: "kv" }, h("tbody", {}, o.plugins.map((p) => h("tr", {}, h("th", { text: p.name }), h("td", { text: `${p.distribution} ${p.version}` })))))) : null),
      details("All options (JSON)", jsonBlock(o, { lines: 40 })));
  }

  // ----------------------------------------------------------- rollout page
  async function rolloutPage(name, rid) {
    document.title = `${rid} · agentkit view`;
    let doc = await api(`/api/run/${enc(name)}/rollout/${enc(rid)}`);
    const taskLink = () => doc.task_id ? nav(runUrl(name, new URLSearchParams({ task: doc.task_id }).toString()), doc.task_id) : null;
    setCrumbs(nav("/", "Runs"), nav(runUrl(name), name), taskLink(), rid);
    const timeline = { body: null, events: [], count: null, attempt: 1, lastDur: null };

    function render() {
      setLive(doc.running ? "running" : null);
      clear(app);
      const record = doc.record;
      const row = doc.row || {};
      const head = h("section", { class: "run-head" },
        h("div", { class: "title-row" }, h("h1", { text: rid }),
          doc.running ? h("span", { id: "progress-badge", class: "badge live", text: `in progress · attempt ${doc.live.attempt}` })
            : doc.interrupted ? badge("interrupted", "warn") : statusBadge(row),
          record ? h("span", { class: `big-reward ${rewardClass(row)}`, text: `reward ${num(record.reward)}` }) : null),
        h("p", { class: "muted" }, `task ${doc.task_id || "?"} · rollout #${record ? record.rollout_index : doc.live.rollout_index}`,
          record && record.timings ? ` · ${date(record.timings.started_at)} · ${seconds(record.timings.duration_s)}` : ""),
        doc.siblings.length > 1 ? h("div", { class: "siblings" }, h("span", { class: "muted small", text: "Rollouts of this task: " }),
          doc.siblings.map((s) => h("a", { href: rolloutUrl(name, s.rollout_id), "data-nav": true,
            class: `chip ${s.rollout_id === rid ? "current" : ""} ${s.infrastructure ? "infra" : s.ok ? (s.reward !== null && s.reward >= 1 ? "ok" : "bad") : "err"}`,
            text: `#${s.index} ${num(s.reward, 2)}` }))) : null,
        doc.branches ? h("div", { class: "siblings branches" },
          doc.branches.parent ? [h("span", { class: "muted small", text: `Forked at step ${doc.branches.branch_step} from ` }),
            h("a", { href: rolloutUrl(name, doc.branches.parent), "data-nav": true, class: "chip", text: doc.branches.parent })] : null,
          doc.branches.children.length ? [h("span", { class: "muted small", text: " Branches: " }),
            doc.branches.children.map((c) => h("a", { href: rolloutUrl(name, c), "data-nav": true, class: "chip", text: c }))] : null) : null);
      app.append(head);
      if (doc.running) app.append(h("div", { class: "banner live" }, "This rollout is running: its events appear below as they happen."));
      if (doc.previous) app.append(h("div", { class: "banner warn", text: `It is run again (agentkit run --resume); its earlier result: ${doc.previous.status}, reward ${num(doc.previous.reward)}${doc.previous.reason ? " (" + doc.previous.reason + ")" : ""}.` }));
      if (doc.interrupted) app.append(h("div", { class: "banner warn" }, "This rollout was running when its run was interrupted; ", h("code", { text: "agentkit run --resume" }), " runs it again."));
      const why = record ? whyCard(doc) : null;
      if (why) app.append(why);
      const cols = h("div", { class: "columns" });
      const main = h("div", { class: "col-main" });
      const side = h("div", { class: "col-side" });
      cols.append(main, side);
      app.append(cols);
      if (doc.task) main.append(taskCard(doc.task));
      if (record) main.append(transcriptCard(record, doc.events));
      if (record && (doc.calls_total || (doc.calls && doc.calls.length))) main.append(callsCard(name, rid, doc));
      main.append(timelineCard());
      if (record) {
        side.append(rewardCard(doc));
        if (doc.steps.length) side.append(stepsCard(doc));
        side.append(verifierCard(doc));
        side.append(usageCard(record));
      }
      side.append(filesCard(name, doc));
      if (record) main.append(h("div", { class: "card" }, h("h2", { text: "Record" }), details("The rollout's line in rollouts.jsonl (JSON)", jsonBlock(record, { lines: 30 }))));
      focusHash();
    }

    function focusHash() {
      const id = location.hash.slice(1);
      if (!id) return;
      const el = document.getElementById(id);
      if (!el) return;
      el.classList.add("target");
      if (el.tagName === "TR" && el.nextSibling && el.nextSibling.classList.contains("detail")) el.nextSibling.hidden = false;
      el.scrollIntoView({ block: "center" });
    }

    function timelineCard() {
      const card = h("div", { class: "card", id: "timeline" });
      const count = h("span", { class: "muted small" });
      timeline.count = count;
      timeline.body = h("tbody", {});
      timeline.events = [];
      timeline.attempt = 1;
      timeline.lastDur = null;
      card.append(h("h2", {}, "Events ", count),
        h("div", { class: "table-wrap" }, h("table", { class: "grid events" },
          h("thead", {}, h("tr", {}, ["#", "Time", "Took", "Type", "What"].map((t) => h("th", { text: t })))), timeline.body)));
      if (doc.events_error) card.append(h("p", { class: "err-text", text: doc.events_error }));
      addEvents(doc.events);
      if (doc.events_total > doc.events.length) card.append(h("p", { class: "muted small", text: `${doc.events_total - doc.events.length} more events are not shown.` }));
      return card;
    }

    // Append events to the timeline; only the previous last row changes (its duration).
    function addEvents(events) {
      const all = timeline.events;
      for (const e of events) {
        if (e.type === "rollout.start" && all.length) {
          all.length = 0; // the live file was started again
          timeline.attempt = 1;
          timeline.lastDur = null;
          clear(timeline.body);
        }
        if (e.type === "rollout.retry") {
          timeline.attempt = e.data.attempt;
          const progress = document.getElementById("progress-badge");
          if (progress) progress.textContent = `in progress · attempt ${e.data.attempt}`;
        }
        const prev = all[all.length - 1];
        if (prev && timeline.lastDur && !explicitDuration(prev)) timeline.lastDur.textContent = seconds(e.timestamp - prev.timestamp);
        all.push(e);
        const first = all[0].timestamp;
        const took = explicitDuration(e);
        const marker = e.seq < 0;
        const suffix = timeline.attempt > 1 ? `-a${timeline.attempt}` : "";
        const id = marker ? `attempt-${e.data.attempt}` : `event-${e.seq}${suffix}`;
        const detail = h("tr", { class: "detail", hidden: true }, h("td", { colspan: 5 }, jsonBlock(e.data, { lines: 40 })));
        const durCell = h("td", { class: "nowrap small", text: took === null ? "" : seconds(took) });
        const tr = h("tr", { id, class: `event ${eventClass(e)}` },
          h("td", { class: "num" }, h("a", { href: `#${id}`, class: "anchor", title: "Link to this event", text: marker ? "" : e.seq })),
          h("td", { class: "nowrap small", title: date(e.timestamp), text: `+${(e.timestamp - first).toFixed(3)} s` }),
          durCell,
          h("td", { class: "nowrap" }, h("code", { text: e.type })),
          h("td", { class: "what", text: describe(e) }));
        tr.addEventListener("click", (ev) => {
          if (ev.target.closest("a")) return;
          detail.hidden = !detail.hidden;
        });
        timeline.body.append(tr, detail);
        timeline.lastDur = durCell;
      }
      const n = all.filter((e) => e.seq >= 0).length;
      timeline.count.textContent = `${n} event${n === 1 ? "" : "s"}`;
    }

    function explicitDuration(e) {
      const took = e.data && (e.data.duration_sec ?? e.data.latency_sec);
      return typeof took === "number" ? took : null;
    }

    function eventClass(e) {
      if (e.type === "rollout.retry" || e.type === "error" || (e.data && e.data.level === "error")) return "err";
      if (e.type === "harbor.step") return "step";
      if (e.type.startsWith("model.")) return "model";
      if (e.type.startsWith("tool.")) return "tool";
      if (e.type === "sandbox.exec") return "exec";
      return "";
    }

    render();

    if (doc.running) {
      stream(`/api/run/${enc(name)}/rollout/${enc(rid)}/stream?offset=${doc.offset}`, {
        events: (msg) => addEvents(msg.events),
        finished: async () => {
          doc = await api(`/api/run/${enc(name)}/rollout/${enc(rid)}`);
          setCrumbs(nav("/", "Runs"), nav(runUrl(name), name), taskLink(), rid);
          render();
          app.prepend(h("div", { class: "banner ok" }, "This rollout has just finished."));
        },
        ended: (msg) => {
          doc.running = false;
          doc.interrupted = true;
          setLive(null);
          app.prepend(h("div", { class: "banner warn", text: `The run is no longer running (${msg.state}); this rollout did not finish.` }));
        },
      });
    }
  }

  function describe(e) {
    const d = e.data || {};
    switch (e.type) {
      case "rollout.start": return `attempt ${d.attempt} started`;
      case "rollout.retry": return `attempt ${d.attempt - 1} failed (${d.error_kind}): ${preview(d.error || "", 200)}; retrying in ${d.delay_s} s`;
      case "harness.start": return `${d.harness || "harness"}${d.model ? " · model " + d.model : ""}`;
      case "harness.end": return `${d.status || ""}${d.error ? " · " + preview(d.error) : ""}`;
      case "model.request": return `turn ${d.turn ?? "?"} · ${d.n_messages ?? "?"} messages${d.last_message ? " · last: " + preview(textOf(d.last_message.content), 120) : ""}`;
      case "model.response": {
        const m = d.message || {};
        const calls = (m.tool_calls || []).map((c) => (c.function || {}).name || c.name).join(", ");
        const u = d.usage || {};
        return `${calls ? "tool calls: " + calls : preview(textOf(m.content), 140)}${d.finish_reason ? " · " + d.finish_reason : ""}${u.output_tokens !== undefined ? ` · ${u.input_tokens} in / ${u.output_tokens} out` : ""}`;
      }
      case "tool.call": return `${d.name || d.tool || "tool"}(${preview(d.arguments ?? d.args ?? d.input ?? "", 120)})`;
      case "tool.result": return preview(d.output ?? d.result ?? d.content ?? d, 160);
      case "sandbox.exec": return `${d.purpose ? d.purpose + ": " : ""}${preview(d.command, 120)} → exit ${d.exit_code}${d.timed_out ? " (timed out)" : ""}`;
      case "error": return `${d.kind ? d.kind + ": " : ""}${preview(d.message ?? d.error ?? d, 220)}`;
      case "log": return `${d.level ? d.level + ": " : ""}${preview(d.message ?? d, 200)}`;
      case "harbor.step": return `step ${d.step} ${d.phase}${d.rewards ? " · " + preview(d.rewards, 80) : ""}`;
      default: return preview(d, 160);
    }
  }

  function whyCard(doc) {
    const record = doc.record;
    if (doc.ok && record.passed !== false) return null;
    const items = [];
    if (record.error) {
      items.push(h("p", {}, h("strong", { text: record.error_kind || record.status }), doc.infrastructure ? " — it could not run; agentkit run --resume runs it again" : ""));
      items.push(textBlock(record.error, { lines: 12, cls: "error-text" }));
    } else if (record.status !== "completed") {
      items.push(h("p", {}, h("strong", { text: record.status })));
    }
    for (const s of record.scoring_errors || []) {
      items.push(h("p", {}, h("strong", { text: `${s.metric} raised: ` }), s.error));
    }
    if (!items.length) items.push(h("p", {}, `It ran and was scored ${num(record.reward)}`, record.passed === false ? " (below the pass threshold)." : "."));
    for (const r of record.retries || []) {
      items.push(h("p", { class: "small muted" }, `Earlier attempt failed (${r.error_kind}): ${preview(r.error || "", 240)}`));
    }
    return h("div", { class: `card why ${doc.infrastructure ? "infra" : ""}` }, h("h2", { text: doc.infrastructure ? "Why it could not run" : "Why it did not pass" }), items);
  }

  function taskCard(task) {
    const input = task.input;
    let body;
    if (Array.isArray(input) && input.every((m) => m && typeof m === "object" && "role" in m)) {
      body = details(`${input.length} message${input.length === 1 ? "" : "s"} (the transcript below starts with them)`, conversation(input, "task-message"));
    }
    else body = textBlock(typeof input === "string" ? input : pretty(input), { lines: 14 });
    return h("div", { class: "card", id: "task" },
      h("h2", { text: "Task" }), body,
      task.target !== null && task.target !== undefined ? h("p", { class: "target" }, h("strong", { text: "Target: " }), typeof task.target === "string" ? task.target : JSON.stringify(task.target)) : null,
      task.metadata && Object.keys(task.metadata).length ? details("Metadata", jsonBlock(task.metadata)) : null);
  }

  function transcriptCard(record, events) {
    // reasoning the harness recorded on its model.response events, by the reply's text
    const reasoning = new Map();
    for (const e of events || []) {
      const d = e.data || {};
      if (e.type === "model.response" && d.reasoning && d.message) reasoning.set(textOf(d.message.content), d.reasoning);
    }
    const msgs = (record.messages || []).map((m) =>
      m.role === "assistant" && !m.reasoning_content && !m.reasoning && reasoning.has(textOf(m.content))
        ? { ...m, reasoning: reasoning.get(textOf(m.content)) } : m);
    const count = msgs.length ? `${msgs.length} message${msgs.length === 1 ? "" : "s"}` : "";
    const card = h("div", { class: "card", id: "transcript" }, h("h2", {}, "Transcript ", h("span", { class: "muted small", text: count })));
    if (msgs.length) card.append(conversation(msgs));
    else card.append(h("p", { class: "muted", text: "No messages (this harness keeps none): the events below show what it did." }));
    if (record.output !== null && record.output !== undefined && record.output !== "") {
      card.append(h("h3", { text: "Final output" }), textBlock(String(record.output), { lines: 14 }));
    }
    return card;
  }

  function conversation(messages, anchor = "message") {
    const names = {};
    for (const m of messages) for (const c of m.tool_calls || []) names[c.id] = (c.function || {}).name || c.name;
    return h("div", { class: "conversation" }, messages.map((m, i) => {
      const role = m.role || "?";
      const header = h("div", { class: "msg-head" }, h("span", { class: "role", text: role }),
        m.name ? h("span", { class: "muted small", text: ` ${m.name}` }) : null,
        m.tool_call_id ? h("span", { class: "muted small", text: ` result of ${names[m.tool_call_id] || "call"} (${m.tool_call_id})` }) : null,
        h("a", { class: "anchor small", href: `#${anchor}-${i}`, text: "#" }));
      const text = textOf(m.content);
      const reasoning = m.reasoning_content || m.reasoning;
      return h("div", { class: `msg ${role}`, id: `${anchor}-${i}` }, header,
        reasoning ? details("Reasoning", textBlock(textOf(reasoning), { lines: 10 })) : null,
        text ? textBlock(text, { lines: role === "system" ? 6 : 24 }) : null,
        (m.tool_calls || []).map((c) => {
          const fn = c.function || {};
          return h("div", { class: "tool-call" }, h("div", {}, h("span", { class: "arrow", text: "→ " }), h("code", { text: fn.name || c.name || "tool" }), h("span", { class: "muted small", text: c.id ? `  ${c.id}` : "" })),
            textBlock(pretty(fn.arguments ?? c.arguments ?? ""), { lines: 12, cls: "json" }));
        }));
    }));
  }

  function rewardCard(doc) {
    const record = doc.record;
    const weights = Object.fromEntries(doc.metrics.map((m) => [m.name, m]));
    const names = [...new Set([...doc.metrics.map((m) => m.name), ...Object.keys(record.rewards || {})])];
    const rows = names.map((n) => {
      const v = (record.rewards || {})[n];
      const w = weights[n] ? weights[n].weight : null;
      return h("tr", { title: weights[n] ? weights[n].description : "" },
        h("td", {}, h("code", { text: n })),
        h("td", { class: "num", text: v === undefined ? "–" : num(v) }),
        h("td", { class: "num muted", text: w === null ? "" : `× ${num(w)}` }));
    });
    return h("div", { class: "card", id: "reward" },
      h("h2", {}, "Reward ", h("span", { class: `big-reward ${rewardClass(doc.row)}`, text: num(record.reward) })),
      h("table", { class: "grid compact" }, h("thead", {}, h("tr", {}, ["Metric", "Value", "Weight"].map((t) => h("th", { text: t })))), h("tbody", {}, rows)),
      record.advantage !== null && record.advantage !== undefined ? h("p", { class: "small muted", text: `advantage ${num(record.advantage)}` }) : null);
  }

  // The rollout's model calls, as the model proxy recorded them: one row each, its JSON
  // fetched when the row is opened.
  function callsCard(name, rid, doc) {
    const calls = doc.calls || [];
    const card = h("div", { class: "card", id: "calls" },
      h("h2", {}, "Model calls ", h("span", { class: "muted small", text: `${int(doc.calls_total)}` })));
    const gaps = doc.calls_without_tokens || [];
    if (gaps.length) {
      const missing = gaps.reduce((n, g) => n + (g.calls || []).length, 0);
      card.append(h("div", { class: "tokens-gap" },
        h("p", { class: "small", text: `Token ids incomplete: ${missing} of ${doc.calls_total} calls have none.` }),
        h("ul", { class: "small" }, gaps.map((g) => h("li", { text: `calls ${(g.calls || []).join(", ")}: ${g.note}` })))));
    } else if (calls.length) {
      card.append(h("p", { class: "small muted tokens-ok", text: "Every call carries the server's token ids." }));
    }
    if (doc.calls_error) card.append(h("p", { class: "err-text", text: doc.calls_error }));
    const ms = (v) => (typeof v === "number" ? `${(v * 1000).toFixed(0)} ms` : "–");
    const body = h("tbody", {});
    for (const c of calls) {
      const id = `call-${c.index}`;
      const holder = h("td", { colspan: 7 }, h("span", { class: "muted small", text: "loading…" }));
      const detail = h("tr", { class: "detail", hidden: true }, holder);
      let loaded = false;
      const ids = c.prompt_ids === null ? (c.token_note || "none")
        : `${int(c.prompt_ids)} + ${int(c.completion_ids)}${c.logprobs ? ", logprobs" : ""}`;
      const tr = h("tr", { id, class: `call ${c.error || (c.status && c.status >= 400) ? "err" : ""}` },
        h("td", { class: "num" }, h("a", { href: `#${id}`, class: "anchor", text: c.index })),
        h("td", { class: "nowrap" }, h("code", { text: `${c.protocol}${c.stream ? " stream" : ""}` })),
        h("td", { class: "nowrap", text: `${c.status ?? "no answer"}${c.finish_reason ? " " + c.finish_reason : ""}` }),
        h("td", { class: "nowrap small", text: ms(c.ttft_s) }),
        h("td", { class: "nowrap small", text: ms(c.duration_s) }),
        h("td", { class: "nowrap small", text: c.input_tokens === null ? "–" : `${int(c.input_tokens)} / ${int(c.output_tokens)}` }),
        h("td", { class: "small what", text: c.error ? `${ids} · ${c.error}` : ids }));
      tr.addEventListener("click", async (ev) => {
        if (ev.target.closest("a")) return;
        detail.hidden = !detail.hidden;
        if (loaded || detail.hidden) return;
        loaded = true;
        try {
          const whole = await api(`/api/run/${enc(name)}/rollout/${enc(rid)}/call/${c.index}`);
          clear(holder);
          holder.append(jsonBlock(whole, { lines: 40 }));
        } catch (err) {
          clear(holder);
          holder.append(h("span", { class: "err-text", text: String(err.message || err) }));
        }
      });
      body.append(tr, detail);
    }
    card.append(h("div", { class: "table-wrap" }, h("table", { class: "grid calls" },
      h("thead", {}, h("tr", {}, ["#", "Protocol", "Status", "First token", "Took", "Tokens in / out", "Token ids"].map((t) => h("th", { text: t })))),
      body)));
    if (doc.calls_total > calls.length) card.append(h("p", { class: "muted small", text: `${doc.calls_total - calls.length} more calls are not shown.` }));
    return card;
  }

  function stepsCard(doc) {
    return h("div", { class: "card", id: "steps" }, h("h2", { text: "Steps" }),
      h("table", { class: "grid compact" }, h("thead", {}, h("tr", {}, ["Step", "Agent", "Rewards"].map((t) => h("th", { text: t })))),
        h("tbody", {}, doc.steps.map((s) => h("tr", {},
          h("td", {}, h("code", { text: s.name })),
          h("td", { text: s.status || "–" }),
          h("td", { class: "small", text: Object.entries(s.rewards).map(([k, v]) => `${k} ${num(v)}`).join(", ") || "–" }))))));
  }

  function verifierCard(doc) {
    const card = h("div", { class: "card", id: "verifier" }, h("h2", { text: "Verifier" }));
    if (!doc.verifier.length) {
      card.append(h("p", { class: "muted", text: doc.infrastructure ? "Not scored: it could not run." : "No verifier output recorded (the reward functions above scored it)." }));
      return card;
    }
    for (const v of doc.verifier) {
      const d = v.data || {};
      const facts = [];
      if (d.exit_code !== undefined) facts.push(`exit ${d.exit_code}`);
      if (d.duration_sec !== undefined) facts.push(seconds(d.duration_sec));
      if (d.reward_file) facts.push(d.reward_file);
      if (d.rewards) facts.push(Object.entries(d.rewards).map(([k, x]) => `${k}=${num(x)}`).join(" "));
      const shown = new Set(["exit_code", "duration_sec", "reward_file", "rewards", "stdout", "stderr", "notes", "error"]);
      for (const [k, x] of Object.entries(d)) {
        if (!shown.has(k) && x !== null && typeof x !== "object") facts.push(`${k} ${preview(String(x), 60)}`);
      }
      card.append(h("div", { class: "verifier" },
        h("h3", {}, v.label, h("span", { class: "muted small", text: facts.length ? "  " + facts.join(" · ") : "" })),
        d.error ? textBlock(String(d.error), { lines: 8, cls: "error-text" }) : null,
        d.stdout ? textBlock(String(d.stdout), { lines: 12 }) : null,
        d.stderr ? textBlock(String(d.stderr), { lines: 8, cls: "error-text" }) : null,
        (d.notes || []).map((n) => h("p", { class: "small muted", text: typeof n === "string" ? n : JSON.stringify(n) })),
        details("All fields", jsonBlock(d))));
    }
    return card;
  }

  function usageCard(record) {
    const u = record.usage || {};
    const t = record.timings || {};
    const rows = [
      ["Input tokens", int(u.input_tokens)], ["cached", int(u.cached_tokens)],
      ["Output tokens", int(u.output_tokens)], ["reasoning", int(u.reasoning_tokens)],
      ["Model calls", int(u.requests)], ["Cost", money(u.cost)],
      ["Started", date(t.started_at)], ["Finished", date(t.finished_at)],
      ["Duration", seconds(t.duration_s)], ["harness", seconds(t.harness_s)], ["scoring", seconds(t.scoring_s)],
      ["Attempts", int(record.attempts)],
    ];
    return h("div", { class: "card", id: "usage" }, h("h2", { text: "Usage and timings" }),
      h("table", { class: "kv" }, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", { text: k }), h("td", { class: "num", text: v }))))));
  }

  function filesCard(name, doc) {
    const card = h("div", { class: "card", id: "files" }, h("h2", {}, "Files ", h("span", { class: "muted small", text: doc.files.length ? String(doc.files.length) : "" })));
    if (!doc.files.length) {
      card.append(h("p", { class: "muted", text: "No files kept for this rollout." }));
      return card;
    }
    const viewer = h("div", { class: "file-view", hidden: true });
    const list = h("ul", { class: "files" }, doc.files.map((f) => {
      const url = `/files/${enc(name)}/${f.path.split("/").map(enc).join("/")}`;
      const short = f.path.split("/").slice(2).join("/");
      if (f.symlink) return h("li", { class: "muted" }, h("span", { text: short }), h("span", { class: "small", text: " symlink, not followed" }));
      const view = h("button", { type: "button", class: "link", text: short, title: f.path });
      view.addEventListener("click", () => showFile(viewer, url, f));
      return h("li", { class: f.kind }, view, h("span", { class: "muted small", text: ` ${bytes(f.size)}` }), " ",
        h("a", { href: `${url}?download=1`, class: "small", text: "download", download: "" }));
    }));
    card.append(list, viewer);
    if (doc.files_truncated) card.append(h("p", { class: "small muted", text: "More files are not listed." }));
    return card;
  }

  async function showFile(viewer, url, f) {
    viewer.hidden = false;
    fill(viewer, h("div", { class: "file-head" }, h("code", { text: f.path }), " ",
      h("a", { href: url, target: "_blank", rel: "noopener", class: "small", text: "open" })));
    if (/\.(png|jpe?g|gif|webp)$/i.test(f.path)) {
      viewer.append(h("img", { src: url, alt: f.path }));
      return;
    }
    if (f.size > 2 * 1024 * 1024) {
      viewer.append(h("p", { class: "muted", text: "Too large to show here: download it." }));
      return;
    }
    const resp = await fetch(url);
    const type = resp.headers.get("Content-Type") || "";
    if (!resp.ok) viewer.append(h("p", { class: "err-text", text: `HTTP ${resp.status}` }));
    else if (!type.startsWith("text/")) viewer.append(h("p", { class: "muted", text: "A binary file: download it." }));
    else viewer.append(textBlock(await resp.text(), { lines: 30 }));
  }

  // ------------------------------------------------------ statistics and charts
  const Charts = window.AgentkitCharts;

  // A canvas in a box of its own: Chart.js sizes a chart to its parent.
  function chartBox(key) {
    const canvas = h("canvas", { dataset: { chart: key }, role: "img", "aria-label": key });
    return [h("div", { class: "chart-box" }, canvas), canvas];
  }

  // Draw a chart; a failure is shown in place of it (and logged), the page stays.
  function draw(canvas, promise) {
    return promise.catch((err) => {
      console.error(err);
      canvas.parentElement.replaceWith(h("p", { class: "err-text small", text: `Cannot draw this chart: ${err.message || err}` }));
    });
  }

  function interval(low, high, signed = false) {
    if (low === null || low === undefined) return "–";
    const f = (v) => (signed && v > 0 ? "+" : "") + v.toFixed(3);
    return `[${f(low)}, ${f(high)}]`;
  }

  function signed(value) {
    if (value === null || value === undefined) return "–";
    return (value > 0 ? "+" : "") + value.toFixed(3);
  }

  function pValue(p) {
    if (p === null || p === undefined) return "–";
    return p < 0.0001 ? "< 0.0001" : p.toPrecision(2);
  }

  // The leaderboard: each row's mean reward with its 95% interval drawn, then the table.
  // records: agentkit.stats leaderboard records, ranked, each with `run`.
  // axes: a job's axes (each row's label on each of them is a column), else the runs'
  // taskset (when they differ), harness and model.
  function leaderboardCard(records, { name = (r) => nav(runUrl(r.run), r.label), colours = {}, title = "Leaderboard", extra = null, axes = null } = {}) {
    const [box, canvas] = chartBox("leaderboard");
    const ks = Object.keys(records[0] || {}).filter((k) => k.startsWith("pass@"));
    const level = records.length ? `${Math.round(100 * records[0].confidence)}%` : "95%";
    const tasksets = new Set(records.map((r) => r.taskset));
    const described = axes
      ? axes.map((axis) => [axis, (r) => (r.axes || {})[axis]])
      : [...(tasksets.size > 1 ? [["Taskset", (r) => r.taskset]] : []), ["Harness", (r) => r.harness], ["Model", (r) => r.model]];
    const rows = records.map((r) => h("tr", { class: "board-row", dataset: { run: r.run } },
      h("td", { class: "num", text: r.rank === null ? "–" : String(r.rank) }),
      h("td", {}, h("span", { class: "swatch", dataset: { colour: colours[r.run] || "" } }), name(r)),
      described.map(([, value]) => h("td", { class: "clip", text: value(r) || "–" })),
      h("td", { class: "num", text: int(r.tasks) }),
      h("td", { class: "num", text: int(r.scored) }),
      h("td", { class: `num ${r.could_not_run + r.unscored ? "infra-text" : ""}`, text: int(r.could_not_run + r.unscored) }),
      h("td", { class: "num strong", text: mean(r.mean_reward) }),
      h("td", { class: "num ci", text: interval(r.ci_low, r.ci_high) }),
      ks.map((k) => h("td", { class: "num", text: fixed(r[k], 3) })),
      h("td", { class: "num", text: r.tokens_per_rollout === null ? "–" : Math.round(r.tokens_per_rollout).toLocaleString("en-US") }),
      h("td", { class: "num", text: money(r.cost) }),
      h("td", { class: "num", text: seconds(r.seconds_per_rollout) })));
    const head = h("tr", {}, ["#", axes ? "Cell" : "Run", ...described.map(([label]) => label),
      "Tasks", "Scored", "Left out", "Mean reward", `${level} CI`, ...ks, "Tokens/rollout", "Cost", "s/rollout"].map((t) => h("th", { text: t })));
    const card = h("div", { class: "card", id: "leaderboard" },
      h("h2", {}, title, h("span", { class: "muted small", text: `  mean reward with its ${level} interval (clustered by task); left out: could not run or not scored` })),
      extra,
      box,
      h("div", { class: "table-wrap" }, h("table", { class: "grid board" }, h("thead", {}, head), h("tbody", {}, rows))));
    for (const swatch of card.querySelectorAll(".swatch")) if (swatch.dataset.colour) swatch.style.background = swatch.dataset.colour;
    draw(canvas, Charts.forest(canvas, records.map((r) => ({ label: r.label, mean: r.mean_reward, low: r.ci_low, high: r.ci_high, colour: colours[r.run] })), { title: `mean reward, ${level} interval`, level }));
    return card;
  }

  // Each run against the baseline, paired on the tasks both scored: the difference of the
  // means with its interval drawn, the paired t-test's p-value, wins, ties and losses, and
  // the tasks that differ most (with links to their rollouts in both runs).
  function againstCard(pairs, { label = (n) => n, colours = {}, chooser = null } = {}) {
    const card = h("div", { class: "card", id: "paired" });
    const base = pairs.length ? pairs[0].baseline : "";
    append(card, [h("h2", {}, "Against the baseline ", h("span", { class: "muted small", text: "  paired t-test on the per-task mean rewards of the tasks both scored; in the notes A is the run, B the baseline" })), chooser]);
    if (!pairs.length) return card;
    const [box, canvas] = chartBox("paired");
    const level = `${Math.round(100 * pairs[0].difference.confidence)}%`;
    const rows = pairs.map((p) => {
      const d = p.difference;
      const top = p.top.length ? details(`Tasks that differ most (${p.top.length} of ${p.differing})`,
        h("table", { class: "grid compact top-tasks" },
          h("thead", {}, h("tr", {}, ["Task", label(p.run), label(p.baseline), "Difference"].map((t) => h("th", { text: t })))),
          h("tbody", {}, p.top.map((t) => h("tr", { class: "top-task", dataset: { task: t.task_id } },
            h("td", { text: t.task_id }),
            h("td", { class: "num" }, nav(taskUrl(p.run, t.task_id), mean(t.a_mean))),
            h("td", { class: "num" }, nav(taskUrl(p.baseline, t.task_id), mean(t.b_mean))),
            h("td", { class: `num ${t.difference > 0 ? "ok-text" : "err-text"}`, text: signed(t.difference) })))))) : null;
      return h("tr", { class: "pair-row", dataset: { run: p.run } },
        h("td", {}, h("span", { class: "swatch", dataset: { colour: colours[p.run] || "" } }), nav(runUrl(p.run), label(p.run))),
        h("td", { class: "num", text: int(p.shared_tasks) }),
        h("td", { class: "num", text: `${mean(p.a_mean)} vs ${mean(p.b_mean)}` }),
        h("td", { class: `num strong ${d.mean > 0 ? "ok-text" : d.mean < 0 ? "err-text" : ""}`, text: signed(d.mean) }),
        h("td", { class: "num ci", text: interval(d.ci_low, d.ci_high, true) }),
        h("td", { class: "num p-value", text: pValue(d.p_value) }),
        h("td", { class: "num wtl", text: `${p.wins_a} / ${p.ties} / ${p.wins_b}` }),
        h("td", { class: "small" }, p.notes.map((n) => h("div", { class: "muted", text: n })), top));
    });
    card.append(box, h("div", { class: "table-wrap" }, h("table", { class: "grid pairs" },
      h("thead", {}, h("tr", {}, ["Run", "Shared tasks", "Means (run vs baseline)", "Difference", `${level} CI`, "p-value", "Higher / tied / lower", ""].map((t) => h("th", { text: t })))),
      h("tbody", {}, rows))));
    for (const swatch of card.querySelectorAll(".swatch")) if (swatch.dataset.colour) swatch.style.background = swatch.dataset.colour;
    draw(canvas, Charts.forest(canvas, pairs.map((p) => ({ label: `${label(p.run)} − ${label(base)}`, mean: p.difference.mean, low: p.difference.ci_low, high: p.difference.ci_high, colour: colours[p.run] })), { zero: true, title: `difference of mean reward from ${label(base)}, ${level} interval`, level }));
    return card;
  }

  // Tasks × runs: each task's mean reward in each run on a colour scale, each cell a link to
  // that task's rollouts in that run. Sorted by task, by spread or by mean; 100 tasks a page.
  function heatmapCard(hm, { label = (n) => n, title = "Tasks × runs" } = {}) {
    const PAGE = 100;
    const q = query();
    let order = q.get("order") || "task";
    let offset = 0;
    const all = hm.mean.flat().filter((v) => v !== null);
    const low = Math.min(0, ...all);
    const high = Math.max(1, ...all);
    const spread = hm.mean.map((row) => {
      const known = row.filter((v) => v !== null);
      return known.length ? Math.max(...known) - Math.min(...known) : -1;
    });
    const average = hm.mean.map((row) => {
      const known = row.filter((v) => v !== null);
      return known.length ? known.reduce((a, b) => a + b, 0) / known.length : Infinity;
    });
    const sorter = h("select", { name: "order" },
      [["task", "task order"], ["spread", "most different first"], ["hardest", "lowest mean first"]].map(([v, t]) => h("option", { value: v, text: t })));
    sorter.value = order;
    const wrap = h("div", { class: "table-wrap heat-wrap" });
    const pager = h("div", { class: "pager" });
    const legend = h("span", { class: "legend" }, `${num(low)} `, h("span", { class: "heat-scale" }), ` ${num(high)} mean reward · – none scored`);
    const card = h("div", { class: "card", id: "heatmap" },
      h("h2", {}, title, h("span", { class: "muted small", text: `  ${int(hm.tasks.length)} tasks; a cell links to that task's rollouts` })),
      h("div", { class: "filters" }, h("label", {}, "Sort ", sorter), legend), wrap, pager);
    sorter.addEventListener("change", () => {
      order = sorter.value;
      offset = 0;
      const p = query();
      if (order === "task") p.delete("order");
      else p.set("order", order);
      setQuery(p);
      render();
    });

    function render() {
      const index = hm.tasks.map((_, i) => i);
      if (order === "spread") index.sort((a, b) => spread[b] - spread[a] || a - b);
      else if (order === "hardest") index.sort((a, b) => average[a] - average[b] || a - b);
      const shown = index.slice(offset, offset + PAGE);
      const head = h("tr", {}, h("th", { text: "Task" }), hm.runs.map((r) => h("th", { class: "heat-head", title: label(r) }, nav(runUrl(r), label(r)))));
      const rows = shown.map((i) => h("tr", { class: "heat-row", dataset: { task: hm.tasks[i] } },
        h("td", { class: "task-id", text: hm.tasks[i] }),
        hm.runs.map((r, j) => {
          const m = hm.mean[i][j];
          if (!hm.rollouts[i][j]) return h("td", { class: "heat none", text: "" });
          const title = `${hm.tasks[i]} in ${label(r)}: mean reward ${num(m)} over ${hm.scored[i][j]} scored of ${hm.rollouts[i][j]} rollouts`;
          const cell = h("a", { class: "heat", href: taskUrl(r, hm.tasks[i]), "data-nav": true, title, dataset: { run: r, mean: m === null ? "" : String(m) }, text: m === null ? "–" : fixed(m, 2) });
          const colour = Charts.heat(m, low, high);
          if (colour) cell.style.background = colour;
          return h("td", { class: "heat-cell" }, cell);
        })));
      fill(wrap, h("table", { class: "grid heatmap" }, h("thead", {}, head), h("tbody", {}, rows)));
      const end = Math.min(index.length, offset + PAGE);
      const prev = h("button", { type: "button", text: "‹ Previous", disabled: offset === 0 });
      prev.addEventListener("click", () => { offset = Math.max(0, offset - PAGE); render(); });
      const next = h("button", { type: "button", text: "Next ›", disabled: end >= index.length });
      next.addEventListener("click", () => { offset += PAGE; render(); });
      fill(pager, index.length > PAGE ? [h("span", { class: "muted", text: `${offset + 1}–${end} of ${int(index.length)} tasks` }), prev, next] : null);
    }
    render();
    return card;
  }

  // The distributions of reward, duration, tokens and cost of some runs (binned by the
  // server): a histogram per metric for one run; for several, the reward's histogram and
  // box plots of the others, each switchable to the other kind.
  async function chartsSection(names, { label = (n) => n } = {}) {
    const data = await api(`/api/charts?runs=${names.map(enc).join(",")}`);
    const labels = data.runs.map(label);
    const single = names.length === 1;
    const cards = data.charts.map((chart) => {
      const card = h("div", { class: "card chart-card", dataset: { metric: chart.key } });
      const [box, canvas] = chartBox(chart.key);
      const about = single && chart.series[0].summary
        ? h("p", { class: "muted small", text: summaryText(chart, chart.series[0]) }) : null;
      if (chart.kind === "empty") {
        card.append(h("h2", { text: chart.label }), h("p", { class: "muted", text: chart.key === "cost" ? "No rollout has a price." : "No rollout has one." }));
        return card;
      }
      let kind = chart.key === "reward" || single ? "histogram" : "box";
      const toggle = single ? null : h("button", { type: "button", class: "link small" });
      const render = () => {
        canvas.dataset.kind = kind;
        if (toggle) toggle.textContent = kind === "box" ? "show histograms" : "show box plots";
        draw(canvas, kind === "box" ? Charts.boxplot(canvas, chart, labels) : Charts.histogram(canvas, chart, labels));
      };
      if (toggle) toggle.addEventListener("click", () => { kind = kind === "box" ? "histogram" : "box"; render(); });
      append(card, [h("div", { class: "chart-head" }, h("h2", { text: chart.label }), toggle), about, box,
        single ? null : h("p", { class: "muted small", text: `${chart.key === "reward" ? "scored rollouts" : "finished rollouts"}: ${chart.series.map((s, i) => `${labels[i]} ${int(s.n)}`).join(" · ")}` })]);
      render();
      return card;
    });
    return h("section", { class: "charts", id: "charts" }, cards);
  }

  function summaryText(chart, s) {
    const q = s.summary;
    const f = (v) => Charts.format(v, chart.unit);
    return `${int(s.n)} ${chart.key === "reward" ? "scored" : ""} rollouts · mean ${f(q.mean)} · median ${f(q.median)} · 25th–75th ${f(q.q1)}–${f(q.q3)} · 95th ${f(q.p95)} · most ${f(q.max)}`;
  }

  async function chartsTab(name, body) {
    const load = serial(async () => fill(body, await chartsSection([name])));
    fill(body, h("p", { class: "muted", text: "Reading the rollouts…" }));
    await load();
    return load;
  }

  // --------------------------------------------------------------- job page
  function statBox(label, value, cls) {
    return h("div", { class: "stat" }, h("div", { class: "label", text: label }), h("div", { class: `value ${cls || ""}` }, value));
  }

  // Load the charting library while the page's data is computed (a failure shows where
  // a chart would be).
  const preloadCharts = () => Charts.ready().catch(() => {});

  async function jobPage(name) {
    preloadCharts();
    document.title = `${name} · agentkit view`;
    setCrumbs(nav("/", "Runs"), `job ${name}`);
    const top = h("div", {});
    const charts = h("div", {});
    let shown = null; // the cells whose charts are drawn
    fill(app, top, h("h2", { class: "section", text: "Distributions" }), charts);

    const load = serial(async () => {
      const job = await api(`/api/job/${enc(name)}`);
      renderJob(job);
      const runs = job.cell_list.filter((c) => c.run).map((c) => c.run);
      const key = JSON.stringify([runs, job.finished]);
      if (!runs.length) fill(charts, h("p", { class: "muted", text: "No cell has started yet." }));
      else if (key !== shown) {
        if (shown === null) fill(charts, h("p", { class: "muted", text: `Reading the ${int(job.finished)} rollouts for the charts…` }));
        shown = key;
        fill(charts, await chartsSection(runs, { label: (r) => job.labels[r] || r }));
      }
    });

    function renderJob(job) {
      setLive(job.state);
      const label = (r) => job.labels[r] || r;
      const colours = Object.fromEntries(job.cell_list.filter((c) => c.run).map((c, i) => [c.run, Charts.colour(i)]));
      const varying = Object.entries(job.axes).filter(([, labels]) => labels.length > 1).map(([axis]) => axis);
      const axes = Object.entries(job.axes).map(([axis, labels]) => `${axis}: ${labels.join(", ")}`).join(" · ");
      const pct = job.planned ? Math.min(100, (100 * job.finished) / job.planned) : 0;
      const bar = h("span", { class: "bar wide" }, h("span", { class: "fill" }));
      bar.firstChild.style.width = `${pct}%`;
      const ranked = job.leaderboard.filter((r) => r.rank !== null).map((r) => r.run);
      const compareAll = ranked.length > 1
        ? h("p", { class: "small" }, nav(compareUrl(ranked, `baseline=${enc(ranked[0])}`), `Compare the ${ranked.length} cells, each against the best`))
        : null;
      const cellRows = job.cell_list.map((c) => {
        const l = c.listing;
        return h("tr", { class: "job-cell", dataset: { cell: c.name } },
          h("td", {}, c.run ? nav(runUrl(c.run), c.name) : h("span", { text: c.name })),
          Object.keys(job.axes).map((axis) => h("td", { class: "clip", text: c.axes[axis] || "–" })),
          h("td", { class: "nowrap" }, l ? [`${int(l.finished)}/${int(l.planned)} `, stateBadge(l.state)]
            : c.error ? [badge("cannot read", "bad"), h("div", { class: "small err-text", text: c.error })] : badge("not started", "")),
          h("td", { class: "num", text: l ? mean(l.mean_reward) : "–" }),
          h("td", { class: `num ${l && l.errors ? "err-text" : ""}`, text: l ? int(l.errors) : "–" }),
          h("td", { class: "num", text: l ? money(l.cost) : "–" }));
      });
      fill(top,
        h("section", { class: "run-head" },
          h("div", { class: "title-row" }, h("h1", { text: job.job_name }), badge("job", "job"), stateBadge(job.state)),
          h("p", { class: "muted" }, `${job.cells} cells · ${axes}${job.concurrency ? ` · ${job.concurrency} rollouts at a time` : ""} · started ${date(job.created_at)}`),
          h("div", { class: "stats" },
            statBox("Cells", job.started === job.cells ? int(job.cells) : `${int(job.started)} of ${int(job.cells)} started`),
            statBox("Progress", h("span", {}, `${int(job.finished)} / ${int(job.planned)}`, bar)),
            statBox("Best cell", job.best ? `${job.best.cell} ${mean(job.best.mean_reward)}` : "–"),
            statBox("Errors", int(job.errors), job.errors ? "err-text" : ""),
            job.infra_errors ? statBox("Could not run", int(job.infra_errors), "infra-text") : null,
            statBox("Cost", money(job.cost)))),
        job.state === "running" ? h("div", { class: "banner live", text: "This job is running: its cells update as their rollouts finish." }) : null,
        job.leaderboard.length
          ? leaderboardCard(job.leaderboard, { name: (r) => nav(runUrl(r.run), r.label), colours, title: "Leaderboard of the cells", extra: compareAll, axes: varying })
          : null,
        job.heatmap.tasks.length ? heatmapCard(job.heatmap, { label, title: "Tasks × cells" }) : null,
        h("div", { class: "card", id: "cells" }, h("h2", { text: "Cells" }),
          h("div", { class: "table-wrap" }, h("table", { class: "grid cells-table" },
            h("thead", {}, h("tr", {}, ["Cell", ...Object.keys(job.axes), "Progress", "Mean reward", "Errors", "Cost"].map((t) => h("th", { text: t })))),
            h("tbody", {}, cellRows)))));
    }

    await load();
    stream("/api/runs/stream", { runs: (msg) => { if (msg.changed) load(); } });
  }

  // ----------------------------------------------------------- compare page
  async function comparePage(names) {
    preloadCharts();
    const q = query();
    const baseline = q.get("baseline") || "";
    document.title = `Compare ${names.join(", ")} · agentkit view`;
    setCrumbs(nav("/", "Runs"), `Compare ${names.join(", ")}`);
    const data = await api(`/api/compare/${names.map(enc).join("/")}${baseline ? "?baseline=" + enc(baseline) : ""}`);
    const label = (r) => data.labels[r] || r;
    const jobs = [...new Set(data.runs.map((r) => r.job))];
    const title = `Compare ${names.map(label).join(", ")}`;
    document.title = `${title} · agentkit view`;
    setCrumbs(nav("/", "Runs"), jobs.length === 1 && jobs[0] ? nav(jobUrl(jobs[0]), jobs[0]) : null, title);
    const colours = Object.fromEntries(data.runs.map((r, i) => [r.name, Charts.colour(i)]));
    const chooser = h("label", { class: "baseline" }, "Baseline ",
      h("select", { name: "baseline" }, data.runs.map((r) => h("option", { value: r.name, text: label(r.name) }))));
    const select = chooser.querySelector("select");
    select.value = data.baseline;
    select.addEventListener("change", () => {
      const p = query();
      p.set("baseline", select.value);
      navigate(compareUrl(names, p.toString()), { replace: true });
    });
    const charts = h("div", {}, h("p", { class: "muted", text: "Reading the rollouts for the charts…" }));
    fill(app,
      h("h1", { text: names.length === 2 ? "Compare two runs" : `Compare ${names.length} runs` }),
      data.same_taskset ? null : h("div", { class: "banner warn", text: "These runs are of different tasksets: only the tasks they share compare." }),
      leaderboardCard(data.leaderboard, { colours }),
      againstCard(data.against, { colours, chooser, label }),
      names.length === 2 ? verdictCard(data) : heatmapCard(data.heatmap, { label }),
      h("h2", { class: "section", text: "Distributions" }),
      charts);
    fill(charts, await chartsSection(names, { label }));
  }

  // Two runs per task: which tasks one passes and the other does not.
  function verdictCard(data) {
    const [a, b] = [data.a.name, data.b.name];
    const q = query();
    let only = q.get("only") || "";
    const c = data.counts;
    const filterBtn = (key, label) => {
      const btn = h("button", { type: "button", class: "toggle", text: label, dataset: { key } });
      btn.addEventListener("click", () => {
        only = only === key ? "" : key;
        const p = query();
        if (only) p.set("only", only);
        else p.delete("only");
        setQuery(p);
        renderTable();
      });
      return btn;
    };
    const wrap = h("div", { class: "table-wrap" });
    const card = h("div", { class: "card", id: "verdicts" },
      h("h2", { text: "Per task" }),
      h("div", { class: "filters" },
        filterBtn("a_only", `only A passes: ${c.a_only}`), filterBtn("b_only", `only B passes: ${c.b_only}`),
        filterBtn("both", `both pass: ${c.both}`), filterBtn("neither", `neither: ${c.neither}`),
        c.missing ? filterBtn("missing", `not in both: ${c.missing}`) : null,
        h("span", { class: "muted small", text: "A task passes when most of its scored rollouts passed." })),
      wrap);

    function side(run, s) {
      if (!s) return [h("td", { class: "muted", text: "–" }), h("td", {}), h("td", {})];
      return [
        h("td", { class: "num", text: mean(s.mean_reward) }),
        h("td", { class: "num", text: fixed(s.pass_at_1, 2) }),
        h("td", { class: "cells" }, s.rollouts.map((r) => h("a", { class: `cell ${rewardClass(r)}`, href: rolloutUrl(run, r.rollout_id), "data-nav": true, title: r.infrastructure ? `${r.rollout_id}: could not run` : `${r.rollout_id}: reward ${num(r.reward)}` }))),
      ];
    }

    function renderTable() {
      for (const btn of card.querySelectorAll(".toggle")) btn.classList.toggle("on", btn.dataset.key === only);
      const verdicts = { both: ["both pass", "ok"], a_only: ["only A passes", "warn"], b_only: ["only B passes", "warn"], neither: ["neither passes", "bad"], missing: ["not in both", ""] };
      const rows = data.tasks.filter((t) => !only || t.verdict === only).map((t) => h("tr", { class: `cmp ${t.verdict}` },
        h("td", { text: t.task_id }), side(a, t.a), side(b, t.b), h("td", {}, badge(...verdicts[t.verdict]))));
      fill(wrap, h("table", { class: "grid compare" },
        h("thead", {},
          h("tr", {}, h("th", { text: "" }), h("th", { colspan: 3, text: `A: ${a}` }), h("th", { colspan: 3, text: `B: ${b}` }), h("th", {})),
          h("tr", {}, ["Task", "Mean", "pass@1", "Rollouts", "Mean", "pass@1", "Rollouts", "Verdict"].map((x) => h("th", { text: x })))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted", text: "No task here." })))));
    }
    renderTable();
    return card;
  }

  route();
})();

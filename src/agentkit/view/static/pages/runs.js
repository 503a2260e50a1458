// The runs page (/): every run and job in the folder, live; tick runs to compare them.
import { api, serial, stream } from "../lib/api.js";
import { fill, h, nav } from "../lib/dom.js";
import { date, int, mean, money, passK, plural } from "../lib/format.js";
import { app, navigate, query, setCrumbs, setQuery } from "../lib/page.js";
import { stateBadge } from "../lib/status.js";
import { compareUrl, jobUrl, runUrl } from "../lib/urls.js";

const COLUMNS = [
  ["name", "Run"],
  ["created_at", "Date"],
  ["taskset", "Taskset"],
  ["harness", "Harness"],
  ["model", "Model"],
  ["finished", "Progress"],
  ["mean_reward", "Mean reward"],
  ["pass", "pass@k"],
  ["errors", "Errors"],
  ["cost", "Cost"],
];

export async function runsPage() {
  setCrumbs("Runs");
  document.title = "Runs · agentkit view";
  const compareBtn = h("button", {
    class: "primary",
    type: "button",
    disabled: true,
    text: "Compare runs",
    title: "Tick two runs or more",
  });
  const page = {
    data: null,
    // the runs ticked to compare
    selected: new Set(),
    // a job's cells are listed under its row (folded unless it is the only job)
    unfolded: new Set(),
    folding: null,
    table: h("div", { class: "table-wrap" }),
    sub: h("p", { class: "muted" }),
    syncCompare: () => {
      const n = page.selected.size;
      compareBtn.disabled = n < 2;
      compareBtn.textContent = n < 2 ? "Compare runs" : `Compare ${n} runs`;
    },
    render: () => render(page),
  };
  fill(
    app,
    h(
      "section",
      { class: "page-head" },
      h("div", {}, h("h1", { text: "Runs" }), page.sub),
      h("div", { class: "actions" }, compareBtn),
    ),
    page.table,
  );
  compareBtn.addEventListener("click", () => navigate(compareUrl([...page.selected])));
  const load = serial(async () => {
    page.data = await api("/api/runs");
    for (const name of [...page.selected])
      if (!page.data.runs.some((r) => r.name === name)) page.selected.delete(name);
    render(page);
  });
  await load();
  stream("/api/runs/stream", {
    runs: (msg) => {
      if (msg.changed) load();
    },
  });
}

// The table of runs and jobs, sorted as the URL says, and what cannot be read below it.
function render(page) {
  const { data, unfolded } = page;
  const q = query();
  const sort = q.get("sort") || "created_at";
  const desc = q.has("desc") ? q.get("desc") === "1" : sort === "created_at";
  const jobs = data.jobs || [];
  if (page.folding === null) {
    page.folding = true;
    if (jobs.length === 1) unfolded.add(jobs[0].name);
  }
  const items = sortedItems(data, sort, desc);
  const nRuns = data.runs.filter((r) => !r.job).length;
  const ofJobs = jobs.length ? ` and ${plural(jobs.length, "job")}` : "";
  page.sub.textContent = `${plural(nRuns, "run")}${ofJobs} in ${data.root}`;
  const body = items.map((item) =>
    item.job
      ? [
          jobRow(page, item.job),
          unfolded.has(item.job.name) ? item.cells.map((r) => runRow(page, r, true)) : null,
        ]
      : runRow(page, item.row, false),
  );
  const empty = !items.length
    ? h(
        "tr",
        {},
        h("td", {
          colspan: COLUMNS.length + 1,
          class: "muted",
          text: "No runs here yet: they appear as soon as agentkit run starts writing one.",
        }),
      )
    : null;
  fill(
    page.table,
    h(
      "table",
      { class: "grid runs" },
      h("thead", {}, tableHead(page, sort, desc)),
      h("tbody", {}, body, empty),
    ),
  );
  // a run or a job that cannot be read: listed with its error (a run links to its page,
  // which says the same); the others are listed as usual
  for (const b of data.broken || []) {
    page.table.append(
      h(
        "p",
        { class: "err-text small broken", dataset: { name: b.name } },
        b.kind === "run" ? nav(runUrl(b.name), b.name) : h("span", { text: b.name }),
        `: ${b.error}`,
      ),
    );
  }
  page.syncCompare();
}

// The runs of no job and the jobs (with their cells), sorted by a column; a job sorts as
// its best cell's mean reward, its summed progress, errors and cost.
function sortedItems(data, sort, desc) {
  const key = (r) => (sort === "pass" ? r.pass_at_k?.["1"] : r[sort]);
  const order = (x, y) => {
    const a = key(x);
    const b = key(y);
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    const c =
      typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
    return desc ? -c : c;
  };
  return [
    ...data.runs.filter((r) => !r.job).map((r) => ({ row: r })),
    ...(data.jobs || []).map((j) => ({
      job: j,
      row: {
        ...j,
        mean_reward: j.best ? j.best.mean_reward : null,
        pass_at_k: {},
        taskset: null,
        harness: null,
        model: null,
      },
      cells: data.runs.filter((r) => r.job === j.name).sort(order),
    })),
  ].sort((x, y) => order(x.row, y.row));
}

// The columns' heads: a click sorts by the column (again: the other way).
function tableHead(page, sort, desc) {
  return h(
    "tr",
    {},
    h("th", { class: "narrow" }),
    COLUMNS.map(([k, label]) => {
      const th = h("th", {
        class: `sortable ${k === sort ? (desc ? "desc" : "asc") : ""}`,
        text: label,
        title: "Sort",
      });
      th.addEventListener("click", () => {
        const p = query();
        p.set("sort", k);
        p.set("desc", k === sort && !desc ? "1" : "0");
        setQuery(p);
        page.render();
      });
      return th;
    }),
  );
}

function progress(r) {
  const pct = r.planned ? Math.min(100, (100 * r.finished) / r.planned) : 0;
  const bar = h("span", { class: "bar" }, h("span", { class: "fill" }));
  bar.firstChild.style.width = `${pct}%`;
  return [
    bar,
    ` ${int(r.finished)}/${int(r.planned)} `,
    stateBadge(r.state),
    r.running ? h("span", { class: "muted small", text: ` ${r.running} running` }) : null,
  ];
}

function errors(r) {
  return h(
    "td",
    { class: `num ${r.errors ? "err-text" : ""}` },
    int(r.errors),
    r.infra_errors
      ? h("div", { class: "small infra-text", text: `${int(r.infra_errors)} could not run` })
      : null,
  );
}

// A run's row (a job's cell under its job's row), with its box to tick.
function runRow(page, r, inJob) {
  const box = h("input", { type: "checkbox", "aria-label": `select ${r.name}` });
  box.checked = page.selected.has(r.name);
  box.addEventListener("change", () => {
    if (box.checked) page.selected.add(r.name);
    else page.selected.delete(r.name);
    page.syncCompare();
  });
  return h(
    "tr",
    {
      class: `run-row ${inJob ? "cell-row" : ""}`,
      dataset: { run: r.name, job: inJob ? r.job : undefined },
    },
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
    h("td", { class: "num", text: money(r.cost) }),
  );
}

// A job's row, with its button that folds its cells.
function jobRow(page, j) {
  const open = page.unfolded.has(j.name);
  const fold = h("button", {
    type: "button",
    class: "link fold",
    "aria-expanded": String(open),
    title: open ? "Hide its cells" : "Show its cells",
    text: open ? "▾" : "▸",
  });
  fold.addEventListener("click", () => {
    if (page.unfolded.has(j.name)) page.unfolded.delete(j.name);
    else page.unfolded.add(j.name);
    page.render();
  });
  const axes = Object.entries(j.axes || {})
    .filter(([, labels]) => labels.length > 1)
    .map(([axis, labels]) => `${axis}: ${labels.join(", ")}`);
  return h(
    "tr",
    { class: "job-row", dataset: { job: j.name } },
    h("td", { class: "narrow" }, fold),
    h("td", {}, h("span", { class: "badge job", text: "job" }), " ", nav(jobUrl(j.name), j.name)),
    h("td", { class: "nowrap", text: date(j.created_at) }),
    h(
      "td",
      { colspan: 3, class: "small" },
      `${j.started === j.cells ? j.cells : `${j.started} of ${j.cells}`} cells`,
      axes.length ? h("span", { class: "muted", text: ` · ${axes.join(" · ")}` }) : null,
    ),
    h("td", { class: "nowrap" }, progress(j)),
    h(
      "td",
      { class: "num", title: j.best ? `best cell: ${j.best.cell}` : "" },
      mean(j.best ? j.best.mean_reward : null),
      j.best ? h("div", { class: "small muted", text: `best: ${j.best.cell}` }) : null,
    ),
    h("td", {}),
    errors(j),
    h("td", { class: "num", text: money(j.cost) }),
  );
}

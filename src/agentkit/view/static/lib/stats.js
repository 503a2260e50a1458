// The statistics the run, job and compare pages share: the leaderboard, each run against a
// baseline, the tasks × runs heat map and the distributions' charts.
import * as Charts from "../charts.js";
import { api } from "./api.js";
import { append, card, details, fill, h, nav, noted, table } from "./dom.js";
import { fixed, int, interval, mean, money, num, pValue, seconds, signed } from "./format.js";
import { query, setQuery } from "./page.js";
import { enc, runUrl, taskUrl } from "./urls.js";

// A canvas in a box of its own: Chart.js sizes a chart to its parent.
export function chartBox(key) {
  const canvas = h("canvas", { dataset: { chart: key }, role: "img", "aria-label": key });
  return [h("div", { class: "chart-box" }, canvas), canvas];
}

// Draw a chart; a failure is shown in place of it (and logged), the page stays.
export function draw(canvas, promise) {
  return promise.catch((err) => {
    console.error(err);
    canvas.parentElement.replaceWith(
      h("p", { class: "err-text small", text: `Cannot draw this chart: ${err.message || err}` }),
    );
  });
}

// records: agentkit.stats leaderboard records, ranked, each with `run`.
// axes: a job's axes (each row's label on each of them is a column), else the runs'
// taskset (when they differ), harness and model.
export function leaderboardCard(
  records,
  {
    name = (r) => nav(runUrl(r.run), r.label),
    colours = {},
    title = "Leaderboard",
    extra = null,
    axes = null,
  } = {},
) {
  const [box, canvas] = chartBox("leaderboard");
  const ks = Object.keys(records[0] || {}).filter((k) => k.startsWith("pass@"));
  const level = records.length ? `${Math.round(100 * records[0].confidence)}%` : "95%";
  const tasksets = new Set(records.map((r) => r.taskset));
  const described = axes
    ? axes.map((axis) => [axis, (r) => r.axes?.[axis]])
    : [
        ...(tasksets.size > 1 ? [["Taskset", (r) => r.taskset]] : []),
        ["Harness", (r) => r.harness],
        ["Model", (r) => r.model],
      ];
  const rows = records.map((r) => boardRow(r, { name, colours, described, ks }));
  const names = [
    "#",
    axes ? "Cell" : "Run",
    ...described.map(([label]) => label),
    "Tasks",
    "Scored",
    "Left out",
    "Mean reward",
    `${level} CI`,
    ...ks,
    "Tokens/rollout",
    "Cost",
    "s/rollout",
  ];
  const board = card(
    "leaderboard",
    noted(
      title,
      `  mean reward with its ${level} interval (clustered by task); ` +
        "left out: could not run or not scored",
    ),
    extra,
    box,
    h("div", { class: "table-wrap" }, table("grid board", names, rows)),
  );
  drawForest(
    board,
    canvas,
    records.map((r) => estimate(r.label, r.mean_reward, r, colours[r.run])),
    { title: `mean reward, ${level} interval`, level },
  );
  return board;
}

// A card's forest chart of estimates, its rows' colour swatches painted to match.
function drawForest(card, canvas, estimates, opts) {
  for (const swatch of card.querySelectorAll(".swatch"))
    if (swatch.dataset.colour) swatch.style.background = swatch.dataset.colour;
  draw(canvas, Charts.forest(canvas, estimates, opts));
}

// One row of a forest chart: its label, mean, the interval of `ci` and its colour.
function estimate(label, mean, ci, colour) {
  return { label, mean, low: ci.ci_low, high: ci.ci_high, colour };
}

// A leaderboard's row: rank, name (with its colour), what it runs, its figures.
function boardRow(r, { name, colours, described, ks }) {
  return h(
    "tr",
    { class: "board-row", dataset: { run: r.run } },
    h("td", { class: "num", text: r.rank === null ? "–" : String(r.rank) }),
    h("td", {}, h("span", { class: "swatch", dataset: { colour: colours[r.run] || "" } }), name(r)),
    described.map(([, value]) => h("td", { class: "clip", text: value(r) || "–" })),
    h("td", { class: "num", text: int(r.tasks) }),
    h("td", { class: "num", text: int(r.scored) }),
    h("td", {
      class: `num ${r.could_not_run + r.unscored ? "infra-text" : ""}`,
      text: int(r.could_not_run + r.unscored),
    }),
    h("td", { class: "num strong", text: mean(r.mean_reward) }),
    h("td", { class: "num ci", text: interval(r.ci_low, r.ci_high) }),
    ks.map((k) => h("td", { class: "num", text: fixed(r[k], 3) })),
    h("td", {
      class: "num",
      text:
        r.tokens_per_rollout === null
          ? "–"
          : Math.round(r.tokens_per_rollout).toLocaleString("en-US"),
    }),
    h("td", { class: "num", text: money(r.cost) }),
    h("td", { class: "num", text: seconds(r.seconds_per_rollout) }),
  );
}

// Each run against the baseline, paired on the tasks both scored: the difference of the
// means with its interval drawn, the paired t-test's p-value, wins, ties and losses, and
// the tasks that differ most (with links to their rollouts in both runs).
export function againstCard(pairs, { label = (n) => n, colours = {}, chooser = null } = {}) {
  const card = h("div", { class: "card", id: "paired" });
  const base = pairs.length ? pairs[0].baseline : "";
  append(card, [
    h(
      "h2",
      {},
      "Against the baseline ",
      h("span", {
        class: "muted small",
        text:
          "  paired t-test on the per-task mean rewards of the tasks both scored; " +
          "in the notes A is the run, B the baseline",
      }),
    ),
    chooser,
  ]);
  if (!pairs.length) return card;
  const [box, canvas] = chartBox("paired");
  const level = `${Math.round(100 * pairs[0].difference.confidence)}%`;
  const rows = pairs.map((p) => {
    const d = p.difference;
    const top = p.top.length ? topTasks(p, label) : null;
    return h(
      "tr",
      { class: "pair-row", dataset: { run: p.run } },
      h(
        "td",
        {},
        h("span", { class: "swatch", dataset: { colour: colours[p.run] || "" } }),
        nav(runUrl(p.run), label(p.run)),
      ),
      h("td", { class: "num", text: int(p.shared_tasks) }),
      h("td", { class: "num", text: `${mean(p.a_mean)} vs ${mean(p.b_mean)}` }),
      h("td", {
        class: `num strong ${d.mean > 0 ? "ok-text" : d.mean < 0 ? "err-text" : ""}`,
        text: signed(d.mean),
      }),
      h("td", { class: "num ci", text: interval(d.ci_low, d.ci_high, true) }),
      h("td", { class: "num p-value", text: pValue(d.p_value) }),
      h("td", { class: "num wtl", text: `${p.wins_a} / ${p.ties} / ${p.wins_b}` }),
      h(
        "td",
        { class: "small" },
        p.notes.map((n) => h("div", { class: "muted", text: n })),
        top,
      ),
    );
  });
  card.append(
    box,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "grid pairs" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            [
              "Run",
              "Shared tasks",
              "Means (run vs baseline)",
              "Difference",
              `${level} CI`,
              "p-value",
              "Higher / tied / lower",
              "",
            ].map((t) => h("th", { text: t })),
          ),
        ),
        h("tbody", {}, rows),
      ),
    ),
  );
  const named = (p) => `${label(p.run)} − ${label(base)}`;
  drawForest(
    card,
    canvas,
    pairs.map((p) => estimate(named(p), p.difference.mean, p.difference, colours[p.run])),
    {
      zero: true,
      title: `difference of mean reward from ${label(base)}, ${level} interval`,
      level,
    },
  );
  return card;
}

// The tasks on which a run and the baseline differ most, with links to their rollouts.
function topTasks(p, label) {
  return details(
    `Tasks that differ most (${p.top.length} of ${p.differing})`,
    h(
      "table",
      { class: "grid compact top-tasks" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Task", label(p.run), label(p.baseline), "Difference"].map((t) => h("th", { text: t })),
        ),
      ),
      h(
        "tbody",
        {},
        p.top.map((t) =>
          h(
            "tr",
            { class: "top-task", dataset: { task: t.task_id } },
            h("td", { text: t.task_id }),
            h("td", { class: "num" }, nav(taskUrl(p.run, t.task_id), mean(t.a_mean))),
            h("td", { class: "num" }, nav(taskUrl(p.baseline, t.task_id), mean(t.b_mean))),
            h("td", {
              class: `num ${t.difference > 0 ? "ok-text" : "err-text"}`,
              text: signed(t.difference),
            }),
          ),
        ),
      ),
    ),
  );
}

// Tasks × runs: each task's mean reward in each run on a colour scale, each cell a link to
// that task's rollouts in that run. Sorted by task, by spread or by mean; 100 tasks a page.
export function heatmapCard(hm, { label = (n) => n, title = "Tasks × runs" } = {}) {
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
  const sorter = h(
    "select",
    { name: "order" },
    [
      ["task", "task order"],
      ["spread", "most different first"],
      ["hardest", "lowest mean first"],
    ].map(([v, t]) => h("option", { value: v, text: t })),
  );
  sorter.value = order;
  const wrap = h("div", { class: "table-wrap heat-wrap" });
  const pager = h("div", { class: "pager" });
  const legend = h(
    "span",
    { class: "legend" },
    `${num(low)} `,
    h("span", { class: "heat-scale" }),
    ` ${num(high)} mean reward · – none scored`,
  );
  const heatmap = card(
    "heatmap",
    noted(title, `  ${int(hm.tasks.length)} tasks; a cell links to that task's rollouts`),
    h("div", { class: "filters" }, h("label", {}, "Sort ", sorter), legend),
    wrap,
    pager,
  );
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
    fill(wrap, heatTable(hm, shown, { label, low, high }));
    const end = Math.min(index.length, offset + PAGE);
    const prev = h("button", { type: "button", text: "‹ Previous", disabled: offset === 0 });
    prev.addEventListener("click", () => {
      offset = Math.max(0, offset - PAGE);
      render();
    });
    const next = h("button", { type: "button", text: "Next ›", disabled: end >= index.length });
    next.addEventListener("click", () => {
      offset += PAGE;
      render();
    });
    fill(
      pager,
      index.length > PAGE
        ? [
            h("span", {
              class: "muted",
              text: `${offset + 1}–${end} of ${int(index.length)} tasks`,
            }),
            prev,
            next,
          ]
        : null,
    );
  }
  render();
  return heatmap;
}

// The heat map's table of the tasks shown (their indices in hm.tasks).
function heatTable(hm, shown, { label, low, high }) {
  const head = h(
    "tr",
    {},
    h("th", { text: "Task" }),
    hm.runs.map((r) => h("th", { class: "heat-head", title: label(r) }, nav(runUrl(r), label(r)))),
  );
  const rows = shown.map((i) =>
    h(
      "tr",
      { class: "heat-row", dataset: { task: hm.tasks[i] } },
      h("td", { class: "task-id", text: hm.tasks[i] }),
      hm.runs.map((r, j) => {
        const m = hm.mean[i][j];
        if (!hm.rollouts[i][j]) return h("td", { class: "heat none", text: "" });
        const counts = `${hm.scored[i][j]} scored of ${hm.rollouts[i][j]} rollouts`;
        const title = `${hm.tasks[i]} in ${label(r)}: mean reward ${num(m)} over ${counts}`;
        const cell = h("a", {
          class: "heat",
          href: taskUrl(r, hm.tasks[i]),
          "data-nav": true,
          title,
          dataset: { run: r, mean: m === null ? "" : String(m) },
          text: m === null ? "–" : fixed(m, 2),
        });
        const colour = Charts.heat(m, low, high);
        if (colour) cell.style.background = colour;
        return h("td", { class: "heat-cell" }, cell);
      }),
    ),
  );
  return h("table", { class: "grid heatmap" }, h("thead", {}, head), h("tbody", {}, rows));
}

// The distributions of reward, duration, tokens and cost of some runs (binned by the
// server): a histogram per metric for one run; for several, the reward's histogram and
// box plots of the others, each switchable to the other kind.
export async function chartsSection(names, { label = (n) => n } = {}) {
  const data = await api(`/api/charts?runs=${names.map(enc).join(",")}`);
  const labels = data.runs.map(label);
  const single = names.length === 1;
  const cards = data.charts.map((chart) => {
    const card = h("div", { class: "card chart-card", dataset: { metric: chart.key } });
    const [box, canvas] = chartBox(chart.key);
    const about =
      single && chart.series[0].summary
        ? h("p", { class: "muted small", text: summaryText(chart, chart.series[0]) })
        : null;
    if (chart.kind === "empty") {
      card.append(
        h("h2", { text: chart.label }),
        h("p", {
          class: "muted",
          text: chart.key === "cost" ? "No rollout has a price." : "No rollout has one.",
        }),
      );
      return card;
    }
    let kind = chart.key === "reward" || single ? "histogram" : "box";
    const toggle = single ? null : h("button", { type: "button", class: "link small" });
    const render = () => {
      canvas.dataset.kind = kind;
      if (toggle) toggle.textContent = kind === "box" ? "show histograms" : "show box plots";
      draw(
        canvas,
        kind === "box"
          ? Charts.boxplot(canvas, chart, labels)
          : Charts.histogram(canvas, chart, labels),
      );
    };
    if (toggle)
      toggle.addEventListener("click", () => {
        kind = kind === "box" ? "histogram" : "box";
        render();
      });
    append(card, [
      h("div", { class: "chart-head" }, h("h2", { text: chart.label }), toggle),
      about,
      box,
      single
        ? null
        : h("p", {
            class: "muted small",
            text: `${chart.key === "reward" ? "scored" : "finished"} rollouts: ${chart.series
              .map((s, i) => `${labels[i]} ${int(s.n)}`)
              .join(" · ")}`,
          }),
    ]);
    render();
    return card;
  });
  return h("section", { class: "charts", id: "charts" }, cards);
}

function summaryText(chart, s) {
  const q = s.summary;
  const f = (v) => Charts.format(v, chart.unit);
  return [
    `${int(s.n)} ${chart.key === "reward" ? "scored" : ""} rollouts`,
    `mean ${f(q.mean)}`,
    `median ${f(q.median)}`,
    `25th–75th ${f(q.q1)}–${f(q.q3)}`,
    `95th ${f(q.p95)}`,
    `most ${f(q.max)}`,
  ].join(" · ");
}

// Load the charting library while the page's data is computed (a failure shows where
// a chart would be).
export const preloadCharts = () => Charts.ready().catch(() => {});

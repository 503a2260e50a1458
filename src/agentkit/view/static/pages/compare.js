// Runs compared (/compare/A/B/...): the leaderboard, each against the baseline, per task
// (two runs) or the heat map, and the distributions.
import * as Charts from "../charts.js";
import { api } from "../lib/api.js";
import { badge, fill, h, nav } from "../lib/dom.js";
import { fixed, mean, num } from "../lib/format.js";
import { app, navigate, query, setCrumbs, setQuery } from "../lib/page.js";
import {
  againstCard,
  chartsSection,
  heatmapCard,
  leaderboardCard,
  preloadCharts,
} from "../lib/stats.js";
import { rewardClass } from "../lib/status.js";
import { compareUrl, enc, jobUrl, rolloutUrl } from "../lib/urls.js";

export async function comparePage(names) {
  preloadCharts();
  const q = query();
  const baseline = q.get("baseline") || "";
  document.title = `Compare ${names.join(", ")} · agentkit view`;
  setCrumbs(nav("/", "Runs"), `Compare ${names.join(", ")}`);
  const data = await api(
    `/api/compare/${names.map(enc).join("/")}${baseline ? `?baseline=${enc(baseline)}` : ""}`,
  );
  const label = (r) => data.labels[r] || r;
  const jobs = [...new Set(data.runs.map((r) => r.job))];
  const title = `Compare ${names.map(label).join(", ")}`;
  document.title = `${title} · agentkit view`;
  setCrumbs(
    nav("/", "Runs"),
    jobs.length === 1 && jobs[0] ? nav(jobUrl(jobs[0]), jobs[0]) : null,
    title,
  );
  const colours = Object.fromEntries(data.runs.map((r, i) => [r.name, Charts.colour(i)]));
  const chooser = h(
    "label",
    { class: "baseline" },
    "Baseline ",
    h(
      "select",
      { name: "baseline" },
      data.runs.map((r) => h("option", { value: r.name, text: label(r.name) })),
    ),
  );
  const select = chooser.querySelector("select");
  select.value = data.baseline;
  select.addEventListener("change", () => {
    const p = query();
    p.set("baseline", select.value);
    navigate(compareUrl(names, p.toString()), { replace: true });
  });
  const charts = h(
    "div",
    {},
    h("p", { class: "muted", text: "Reading the rollouts for the charts…" }),
  );
  fill(
    app,
    h("h1", { text: names.length === 2 ? "Compare two runs" : `Compare ${names.length} runs` }),
    data.same_taskset
      ? null
      : h("div", {
          class: "banner warn",
          text: "These runs are of different tasksets: only the tasks they share compare.",
        }),
    leaderboardCard(data.leaderboard, { colours }),
    againstCard(data.against, { colours, chooser, label }),
    names.length === 2 ? verdictCard(data) : heatmapCard(data.heatmap, { label }),
    h("h2", { class: "section", text: "Distributions" }),
    charts,
  );
  fill(charts, await chartsSection(names, { label }));
}

// Two runs per task: which tasks one passes and the other does not.
function verdictCard(data) {
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
  const card = h(
    "div",
    { class: "card", id: "verdicts" },
    h("h2", { text: "Per task" }),
    h(
      "div",
      { class: "filters" },
      filterBtn("a_only", `only A passes: ${c.a_only}`),
      filterBtn("b_only", `only B passes: ${c.b_only}`),
      filterBtn("both", `both pass: ${c.both}`),
      filterBtn("neither", `neither: ${c.neither}`),
      c.missing ? filterBtn("missing", `not in both: ${c.missing}`) : null,
      h("span", {
        class: "muted small",
        text: "A task passes when most of its scored rollouts passed.",
      }),
    ),
    wrap,
  );
  const renderTable = () => {
    for (const btn of card.querySelectorAll(".toggle"))
      btn.classList.toggle("on", btn.dataset.key === only);
    fill(wrap, verdictTable(data, only));
  };
  renderTable();
  return card;
}

const VERDICTS = {
  both: ["both pass", "ok"],
  a_only: ["only A passes", "warn"],
  b_only: ["only B passes", "warn"],
  neither: ["neither passes", "bad"],
  missing: ["not in both", ""],
};

// The tasks of one verdict (all when only is ""), each with both runs' side.
function verdictTable(data, only) {
  const [a, b] = [data.a.name, data.b.name];
  const rows = data.tasks
    .filter((t) => !only || t.verdict === only)
    .map((t) =>
      h(
        "tr",
        { class: `cmp ${t.verdict}` },
        h("td", { text: t.task_id }),
        side(a, t.a),
        side(b, t.b),
        h("td", {}, badge(...VERDICTS[t.verdict])),
      ),
    );
  const names = ["Task", "Mean", "pass@1", "Rollouts", "Mean", "pass@1", "Rollouts", "Verdict"];
  return h(
    "table",
    { class: "grid compare" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", { text: "" }),
        h("th", { colspan: 3, text: `A: ${a}` }),
        h("th", { colspan: 3, text: `B: ${b}` }),
        h("th", {}),
      ),
      h(
        "tr",
        {},
        names.map((x) => h("th", { text: x })),
      ),
    ),
    h(
      "tbody",
      {},
      rows.length
        ? rows
        : h("tr", {}, h("td", { colspan: 8, class: "muted", text: "No task here." })),
    ),
  );
}

// One run's side of a task: its mean reward, pass@1 and rollouts.
function side(run, s) {
  if (!s) return [h("td", { class: "muted", text: "–" }), h("td", {}), h("td", {})];
  return [
    h("td", { class: "num", text: mean(s.mean_reward) }),
    h("td", { class: "num", text: fixed(s.pass_at_1, 2) }),
    h(
      "td",
      { class: "cells" },
      s.rollouts.map((r) =>
        h("a", {
          class: `cell ${rewardClass(r)}`,
          href: rolloutUrl(run, r.rollout_id),
          "data-nav": true,
          title: r.infrastructure
            ? `${r.rollout_id}: could not run`
            : `${r.rollout_id}: reward ${num(r.reward)}`,
        }),
      ),
    ),
  ];
}

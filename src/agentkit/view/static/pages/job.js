// A job's page (/job/JOB): its cells, their leaderboard, the tasks × cells heat map and
// the cells' charts, live.
import * as Charts from "../charts.js";
import { api, serial, stream } from "../lib/api.js";
import { badge, card, fill, h, nav, table } from "../lib/dom.js";
import { date, int, mean, money } from "../lib/format.js";
import { app, setCrumbs, setLive, statBox } from "../lib/page.js";
import { chartsSection, heatmapCard, leaderboardCard, preloadCharts } from "../lib/stats.js";
import { stateBadge } from "../lib/status.js";
import { compareUrl, enc, runUrl } from "../lib/urls.js";

export async function jobPage(name) {
  preloadCharts();
  document.title = `${name} · agentkit view`;
  setCrumbs(nav("/", "Runs"), `job ${name}`);
  const top = h("div", {});
  const charts = h("div", {});
  let shown = null; // the cells whose charts are drawn
  fill(app, top, h("h2", { class: "section", text: "Distributions" }), charts);

  const load = serial(async () => {
    const job = await api(`/api/job/${enc(name)}`);
    setLive(job.state);
    fill(top, jobParts(job));
    const runs = job.cell_list.filter((c) => c.run).map((c) => c.run);
    const key = JSON.stringify([runs, job.finished]);
    if (!runs.length) fill(charts, h("p", { class: "muted", text: "No cell has started yet." }));
    else if (key !== shown) {
      if (shown === null)
        fill(
          charts,
          h("p", {
            class: "muted",
            text: `Reading the ${int(job.finished)} rollouts for the charts…`,
          }),
        );
      shown = key;
      fill(charts, await chartsSection(runs, { label: (r) => job.labels[r] || r }));
    }
  });
  await load();
  stream("/api/runs/stream", {
    runs: (msg) => {
      if (msg.changed) load();
    },
  });
}

// Everything above the charts: the header, the leaderboard, the heat map, the cells.
function jobParts(job) {
  const label = (r) => job.labels[r] || r;
  const colours = Object.fromEntries(
    job.cell_list.filter((c) => c.run).map((c, i) => [c.run, Charts.colour(i)]),
  );
  const varying = Object.entries(job.axes)
    .filter(([, labels]) => labels.length > 1)
    .map(([axis]) => axis);
  const ranked = job.leaderboard.filter((r) => r.rank !== null).map((r) => r.run);
  const compareAll =
    ranked.length > 1
      ? h(
          "p",
          { class: "small" },
          nav(
            compareUrl(ranked, `baseline=${enc(ranked[0])}`),
            `Compare the ${ranked.length} cells, each against the best`,
          ),
        )
      : null;
  return [
    jobHead(job),
    job.state === "running"
      ? h("div", {
          class: "banner live",
          text: "This job is running: its cells update as their rollouts finish.",
        })
      : null,
    job.leaderboard.length
      ? leaderboardCard(job.leaderboard, {
          name: (r) => nav(runUrl(r.run), r.label),
          colours,
          title: "Leaderboard of the cells",
          extra: compareAll,
          axes: varying,
        })
      : null,
    job.heatmap.tasks.length ? heatmapCard(job.heatmap, { label, title: "Tasks × cells" }) : null,
    cellsCard(job),
  ];
}

// The header: the job's name and state, its cells and axes, its figures.
function jobHead(job) {
  const axes = Object.entries(job.axes)
    .map(([axis, labels]) => `${axis}: ${labels.join(", ")}`)
    .join(" · ");
  const pct = job.planned ? Math.min(100, (100 * job.finished) / job.planned) : 0;
  const bar = h("span", { class: "bar wide" }, h("span", { class: "fill" }));
  bar.firstChild.style.width = `${pct}%`;
  const cells =
    job.started === job.cells ? int(job.cells) : `${int(job.started)} of ${int(job.cells)} started`;
  return h(
    "section",
    { class: "run-head" },
    h(
      "div",
      { class: "title-row" },
      h("h1", { text: job.job_name }),
      badge("job", "job"),
      stateBadge(job.state),
    ),
    h(
      "p",
      { class: "muted" },
      `${job.cells} cells · ${axes}`,
      job.concurrency ? ` · ${job.concurrency} rollouts at a time` : "",
      ` · started ${date(job.created_at)}`,
    ),
    h(
      "div",
      { class: "stats" },
      statBox("Cells", cells),
      statBox("Progress", h("span", {}, `${int(job.finished)} / ${int(job.planned)}`, bar)),
      statBox("Best cell", job.best ? `${job.best.cell} ${mean(job.best.mean_reward)}` : "–"),
      statBox("Errors", int(job.errors), job.errors ? "err-text" : ""),
      job.infra_errors ? statBox("Could not run", int(job.infra_errors), "infra-text") : null,
      statBox("Cost", money(job.cost)),
    ),
  );
}

// Every cell of the job, started or not: its labels, progress, mean reward, errors, cost.
function cellsCard(job) {
  const names = ["Cell", ...Object.keys(job.axes), "Progress", "Mean reward", "Errors", "Cost"];
  const rows = job.cell_list.map((c) => {
    const l = c.listing;
    return h(
      "tr",
      { class: "job-cell", dataset: { cell: c.name } },
      h("td", {}, c.run ? nav(runUrl(c.run), c.name) : h("span", { text: c.name })),
      Object.keys(job.axes).map((a) => h("td", { class: "clip", text: c.axes[a] || "–" })),
      h(
        "td",
        { class: "nowrap" },
        l
          ? [`${int(l.finished)}/${int(l.planned)} `, stateBadge(l.state)]
          : c.error
            ? [badge("cannot read", "bad"), h("div", { class: "small err-text", text: c.error })]
            : badge("not started", ""),
      ),
      h("td", { class: "num", text: l ? mean(l.mean_reward) : "–" }),
      h("td", { class: `num ${l?.errors ? "err-text" : ""}`, text: l ? int(l.errors) : "–" }),
      h("td", { class: "num", text: l ? money(l.cost) : "–" }),
    );
  });
  return card(
    "cells",
    "Cells",
    h("div", { class: "table-wrap" }, table("grid cells-table", names, rows)),
  );
}

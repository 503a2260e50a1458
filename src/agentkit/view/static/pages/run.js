// A run's page (/run/RUN): its header, live, and its tabs.
import { api, serial, stream } from "../lib/api.js";
import { fill, h, nav } from "../lib/dom.js";
import { date, int, mean, money, passK } from "../lib/format.js";
import { app, query, setCrumbs, setLive, statBox } from "../lib/page.js";
import { chartsSection } from "../lib/stats.js";
import { stateBadge } from "../lib/status.js";
import { enc, jobUrl, runUrl } from "../lib/urls.js";
import { optionsTab, rubricTab } from "./run-about.js";
import { rolloutsTab } from "./run-rollouts.js";
import { tasksTab } from "./run-tasks.js";

const TABS = [
  ["rollouts", "Rollouts"],
  ["tasks", "Tasks × rollouts"],
  ["charts", "Charts"],
  ["rubric", "Rubric"],
  ["options", "Options"],
];

export async function runPage(name) {
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
  for (const [key, label] of TABS) {
    const p = new URLSearchParams(key === "rollouts" ? "" : `tab=${key}`);
    tabs.append(
      h("a", {
        href: runUrl(name, p.toString()),
        "data-nav": true,
        class: key === tab ? "active" : "",
        text: label,
      }),
    );
  }
  const renderHead = () => {
    setLive(run.state);
    fill(head, headParts(name, run));
    fill(banner, banners(run));
  };
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
      if (
        snap.finished !== run.finished ||
        snap.state !== run.state ||
        snap.live.length ||
        run.running
      )
        reload();
    },
  });
}

// The header: the run's (or cell's) name and state, what it runs, its figures.
function headParts(name, run) {
  const pct = run.planned ? Math.min(100, (100 * run.finished) / run.planned) : 0;
  const bar = h("span", { class: "bar wide" }, h("span", { class: "fill" }));
  bar.firstChild.style.width = `${pct}%`;
  const usage = run.summary?.usage || {};
  return [
    h(
      "div",
      { class: "title-row" },
      h("h1", { text: run.cell || name }),
      run.job ? h("span", { class: "muted", text: `cell of job ${run.job}` }) : null,
      stateBadge(run.state),
    ),
    h(
      "p",
      { class: "muted" },
      `${run.taskset || "–"} · ${run.harness || "–"}`,
      run.model ? ` · ${run.model}` : "",
      ` · started ${date(run.created_at)}`,
    ),
    h(
      "div",
      { class: "stats" },
      statBox("Progress", h("span", {}, `${int(run.finished)} / ${int(run.planned)}`, bar)),
      statBox("Mean reward", mean(run.mean_reward)),
      statBox("pass@k", passK(run.pass_at_k)),
      statBox("Errors", int(run.errors), run.errors ? "err-text" : ""),
      run.infra_errors ? statBox("Could not run", int(run.infra_errors), "infra-text") : null,
      statBox(
        "Tokens",
        `${int(usage.input_tokens || 0)} in · ${int(usage.output_tokens || 0)} out`,
      ),
      statBox("Cost", money(run.cost)),
      run.state === "running" ? statBox("Running now", int(run.running)) : null,
    ),
  ];
}

// What the run's state says (being written, interrupted, incomplete, stopped, complete),
// and its warnings.
function banners(run) {
  const out = [];
  const resume = () => h("code", { text: `agentkit run --resume ${run.path}` });
  if (run.state === "running") {
    out.push(
      h(
        "div",
        { class: "banner live" },
        "This run is being written: rows and counts update as rollouts finish.",
      ),
    );
  } else if (run.state === "interrupted") {
    out.push(
      h(
        "div",
        { class: "banner warn" },
        `This run was interrupted: ${int(run.finished)} of ${int(run.planned)} rollouts `,
        "finished. ",
        "Continue it with ",
        resume(),
      ),
    );
  } else if (run.state === "incomplete") {
    out.push(
      h(
        "div",
        { class: "banner warn" },
        `Every rollout finished, but ${int(run.infra_errors)} could not run `,
        "(infrastructure failures: no reward, in no mean or pass@k). ",
        "Run them again with ",
        resume(),
      ),
    );
  } else if (run.state === "stopped") {
    out.push(h("div", { class: "banner warn", text: `This run stopped early: ${run.stopped}` }));
  } else {
    out.push(
      h("div", {
        class: "banner ok",
        text: `This run is complete: ${int(run.finished)} rollouts.`,
      }),
    );
  }
  if (run.torn_tail) out.push(h("div", { class: "banner warn", text: run.torn_tail }));
  if (run.options.sandbox_warning)
    out.push(h("div", { class: "banner warn", text: run.options.sandbox_warning }));
  return out;
}

async function chartsTab(name, body) {
  const load = serial(async () => fill(body, await chartsSection([name])));
  fill(body, h("p", { class: "muted", text: "Reading the rollouts…" }));
  await load();
  return load;
}

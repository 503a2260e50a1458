// A run's Tasks × rollouts tab: each task with its rollouts as coloured cells.
import { api, serial } from "../lib/api.js";
import { fill, h, nav } from "../lib/dom.js";
import { fixed, int, mean, num } from "../lib/format.js";
import { query, setQuery } from "../lib/page.js";
import { rewardClass } from "../lib/status.js";
import { enc, rolloutUrl, runUrl } from "../lib/urls.js";

export async function tasksTab(name, run, body) {
  const q = query();
  let offset = Number(q.get("offset") || 0);
  const search = h("input", {
    type: "search",
    placeholder: "task id contains…",
    value: q.get("task") || "",
  });
  const wrap = h("div", { class: "table-wrap" });
  const pager = h("div", { class: "pager" });
  fill(
    body,
    h(
      "div",
      { class: "filters" },
      h("label", {}, "Task ", search),
      h(
        "span",
        { class: "legend" },
        legend("ok", "passed"),
        legend("bad", "failed"),
        legend("err", "error"),
        legend("infra", "could not run"),
        legend("running", "running"),
        legend("pending", "not yet"),
      ),
    ),
    wrap,
    pager,
  );
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
  const goTo = (to) => {
    offset = to;
    load();
  };
  const load = serial(async () => {
    const p = new URLSearchParams({ offset: String(offset), limit: "50" });
    if (search.value) p.set("task", search.value);
    const page = await api(`/api/run/${enc(name)}/tasks?${p}`);
    fill(wrap, table(name, page, ks));
    fill(pager, pagerParts(page, goTo));
  });
  await load();
  return load;
}

function legend(cls, label) {
  return h("span", {}, h("span", { class: `cell ${cls}` }), ` ${label} `);
}

// One page of tasks: each with its statistics and its rollouts as coloured cells.
function table(name, page, ks) {
  const head = h(
    "tr",
    {},
    h("th", { text: "Task" }),
    h("th", { text: "Done" }),
    h("th", { text: "Mean reward" }),
    ks.map((k) => h("th", { text: `pass@${k}` })),
    h("th", { text: "Errors" }),
    h("th", { text: "Rollouts" }),
  );
  const rows = page.tasks.map((t) =>
    h(
      "tr",
      { class: "task-row", dataset: { task: t.task_id } },
      h(
        "td",
        {},
        nav(runUrl(name, new URLSearchParams({ task: t.task_id }).toString()), t.task_id),
      ),
      h("td", { class: "num", text: `${t.rollouts}/${t.planned}` }),
      h("td", { class: "num", text: mean(t.mean_reward) }),
      ks.map((k) => h("td", { class: "num", text: fixed(t.pass_at_k?.[k], 2) })),
      h("td", { class: `num ${t.errors ? "err-text" : ""}`, text: int(t.errors) }),
      h(
        "td",
        { class: "cells" },
        t.cells.map((c) => cell(name, c)),
      ),
    ),
  );
  return h("table", { class: "grid tasks" }, h("thead", {}, head), h("tbody", {}, rows));
}

// One rollout of a task: a link to it, coloured by how it went (a cell of nothing yet when
// it has not started).
function cell(name, c) {
  const scored = c.reward !== undefined && c.reward !== null;
  const what = c.infrastructure ? "could not run" : c.status;
  const title = `#${c.index}: ${what}${scored ? ` · reward ${num(c.reward)}` : ""}`;
  const cls = `cell ${rewardClass(c)}`;
  return c.rollout_id
    ? h("a", {
        class: cls,
        href: rolloutUrl(name, c.rollout_id),
        "data-nav": true,
        title,
        "aria-label": title,
      })
    : h("span", { class: cls, title });
}

// Where the page is among the tasks, and the buttons to page (goTo(offset) loads one).
function pagerParts(page, goTo) {
  const end = Math.min(page.total, page.offset + page.limit);
  const prev = h("button", { type: "button", text: "‹ Previous", disabled: page.offset === 0 });
  prev.addEventListener("click", () => goTo(Math.max(0, page.offset - page.limit)));
  const next = h("button", { type: "button", text: "Next ›", disabled: end >= page.total });
  next.addEventListener("click", () => goTo(page.offset + page.limit));
  return [
    h("span", {
      class: "muted",
      text: page.total ? `${page.offset + 1}–${end} of ${int(page.total)} tasks` : "no tasks",
    }),
    prev,
    next,
  ];
}

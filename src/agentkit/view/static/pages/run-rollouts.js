// A run's Rollouts tab: its rollouts filtered, sorted and paged, the running ones first.
import { api, serial } from "../lib/api.js";
import { fill, h, nav } from "../lib/dom.js";
import { date, int, money, num, plural, seconds } from "../lib/format.js";
import { query, setQuery } from "../lib/page.js";
import { rewardClass, statusBadge } from "../lib/status.js";
import { enc, rolloutUrl } from "../lib/urls.js";

// The query parameters of the tab, and their defaults (left out of the URL).
const DEFAULTS = {
  status: "",
  failed: "",
  errored: "",
  could_not_run: "",
  error_kind: "",
  task: "",
  metric: "",
  op: "lt",
  value: "",
  sort: "task",
  desc: "",
  offset: "0",
  limit: "50",
};

const COLUMNS = [
  ["task", "Task"],
  [null, "#"],
  ["reward", "Reward"],
  ["status", "Status"],
  [null, "Error kind"],
  ["turns", "Turns"],
  ["tokens", "Tokens"],
  ["cost", "Cost"],
  ["duration", "Duration"],
];

export async function rolloutsTab(name, run, body) {
  const q = query();
  const filters = Object.fromEntries(Object.entries(DEFAULTS).map(([k, v]) => [k, q.get(k) || v]));
  const tableWrap = h("div", { class: "table-wrap" });
  const pager = h("div", { class: "pager" });
  // Change some filters (back to the first page, unless the page is what changes).
  const update = (changes) => {
    Object.assign(filters, changes);
    if (!("offset" in changes)) filters.offset = "0";
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v && v !== DEFAULTS[k]) p.set(k, v);
    setQuery(p);
    load();
  };
  fill(body, filterBar(run, filters, update), tableWrap, pager);
  const params = () => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
    return p.toString();
  };
  const load = serial(async () => {
    const page = await api(`/api/run/${enc(name)}/rollouts?${params()}`);
    fill(tableWrap, table(name, page, filters, update));
    fill(pager, pagerParts(page, filters, update));
  });
  await load();
  return load;
}

// The filters: status, did not pass, errored, could not run, error kind, task, a metric.
function filterBar(run, filters, update) {
  const select = (key, options) => {
    const el = h(
      "select",
      { name: key },
      options.map(([v, label]) => h("option", { value: v, text: label })),
    );
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
  const taskInput = h("input", {
    type: "search",
    name: "task",
    placeholder: "task id contains…",
    value: filters.task,
  });
  let timer = null;
  taskInput.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => update({ task: taskInput.value }), 250);
  });
  const valueInput = h("input", {
    type: "number",
    name: "value",
    step: "any",
    placeholder: "value",
    value: filters.value,
    class: "short",
  });
  valueInput.addEventListener("change", () => update({ value: valueInput.value }));
  const statuses = ["completed", "failed", "timeout", "cancelled"].map((s) => [s, s]);
  const ops = [
    ["lt", "<"],
    ["le", "≤"],
    ["eq", "="],
    ["ge", "≥"],
    ["gt", ">"],
  ];
  const kinds = [["", "any"], ...run.error_kinds.map((k) => [k, k])];
  const cleared = Object.fromEntries(
    ["status", "failed", "errored", "could_not_run", "error_kind", "task", "metric", "value"].map(
      (k) => [k, ""],
    ),
  );
  return h(
    "div",
    { class: "filters" },
    h(
      "label",
      {},
      "Status ",
      select("status", [["", "any"], ...statuses, ["running", "running now"]]),
    ),
    check("failed", "did not pass"),
    check("errored", "errored"),
    check("could_not_run", "could not run"),
    run.error_kinds.length ? h("label", {}, "Error kind ", select("error_kind", kinds)) : null,
    h("label", {}, "Task ", taskInput),
    h(
      "label",
      {},
      "Metric ",
      select("metric", [["", "–"], ...run.metrics.map((m) => [m.name, m.name])]),
      select("op", ops),
      valueInput,
    ),
    h("button", { type: "button", class: "link", text: "Clear", onclick: () => update(cleared) }),
  );
}

// The table of one page: the rollouts running now first, then the finished ones.
function table(name, page, filters, update) {
  const head = h(
    "tr",
    {},
    COLUMNS.map(([key, label]) => {
      if (!key) return h("th", { text: label });
      const active = filters.sort === key;
      const th = h("th", {
        class: `sortable ${active ? (filters.desc ? "desc" : "asc") : ""}`,
        text: label,
        title: "Sort",
      });
      th.addEventListener("click", () =>
        update({ sort: key, desc: active && !filters.desc ? "1" : "" }),
      );
      return th;
    }),
  );
  const live = page.live.map((x) => liveRow(name, x));
  const rows = page.rows.map((r) => finishedRow(name, r));
  const none =
    !live.length && !rows.length
      ? h(
          "tr",
          {},
          h("td", {
            colspan: COLUMNS.length,
            class: "muted",
            text: page.finished
              ? "No rollout matches these filters."
              : "No rollout has finished yet.",
          }),
        )
      : null;
  return h(
    "table",
    { class: "grid rollouts" },
    h("thead", {}, head),
    h("tbody", {}, live, rows, none),
  );
}

function liveRow(name, x) {
  return h(
    "tr",
    { class: `rollout-row ${x.status}`, dataset: { rollout: x.rollout_id } },
    h("td", {}, nav(rolloutUrl(name, x.rollout_id), x.task_id)),
    h("td", { class: "num", text: x.rollout_index }),
    h("td", { class: "num", text: "…" }),
    h("td", {}, statusBadge(x)),
    h("td", { class: "muted small", text: x.attempt > 1 ? `attempt ${x.attempt}` : "" }),
    h("td", {
      class: "muted small",
      colspan: 4,
      text: `${plural(x.events, "event")} so far · started ${date(x.started_at)}`,
    }),
  );
}

function finishedRow(name, r) {
  return h(
    "tr",
    { class: `rollout-row ${rewardClass(r)}`, dataset: { rollout: r.rollout_id } },
    h("td", {}, nav(rolloutUrl(name, r.rollout_id), r.task_id)),
    h("td", { class: "num", text: r.rollout_index }),
    h("td", { class: `num reward ${rewardClass(r)}`, text: num(r.reward) }),
    h("td", {}, statusBadge(r)),
    h("td", { class: "small", title: r.reason, text: r.error_kind || (r.ok ? "" : r.reason) }),
    h("td", { class: "num", text: int(r.turns) }),
    h("td", { class: "num", text: int(r.tokens) }),
    h("td", { class: "num", text: money(r.cost) }),
    h("td", { class: "num", text: seconds(r.duration_s) }),
  );
}

// Where the page is among the finished rollouts, the buttons to page, the page's size.
function pagerParts(page, filters, update) {
  const offset = page.offset;
  const end = Math.min(page.total, offset + page.limit);
  const prev = h("button", { type: "button", text: "‹ Previous", disabled: offset === 0 });
  prev.addEventListener("click", () =>
    update({ offset: String(Math.max(0, offset - page.limit)) }),
  );
  const next = h("button", { type: "button", text: "Next ›", disabled: end >= page.total });
  next.addEventListener("click", () => update({ offset: String(offset + page.limit) }));
  const size = h(
    "select",
    { name: "limit" },
    ["25", "50", "100", "250", "500"].map((v) => h("option", { value: v, text: `${v} per page` })),
  );
  size.value = filters.limit;
  size.addEventListener("change", () => update({ limit: size.value }));
  const filtered = page.total !== page.finished ? ` (filtered from ${int(page.finished)})` : "";
  return [
    h("span", {
      class: "muted",
      text: page.total
        ? `${int(offset + 1)}–${int(end)} of ${int(page.total)} finished${filtered}`
        : "",
    }),
    prev,
    next,
    size,
  ];
}

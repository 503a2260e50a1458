// A run's Rollouts tab: its rollouts filtered, sorted and paged, the running ones first.
import { api, serial } from "../lib/api.js";
import { fill, h, nav } from "../lib/dom.js";
import { date, int, money, num, plural, seconds } from "../lib/format.js";
import { query, setQuery } from "../lib/page.js";
import { rewardClass, statusBadge } from "../lib/status.js";
import { enc, rolloutUrl } from "../lib/urls.js";

export async function rolloutsTab(name, run, body) {
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
  const statuses = ["completed", "failed", "timeout", "cancelled"];
  const bar = h(
    "div",
    { class: "filters" },
    h(
      "label",
      {},
      "Status ",
      select("status", [["", "any"], ...statuses.map((s) => [s, s]), ["running", "running now"]]),
    ),
    check("failed", "did not pass"),
    check("errored", "errored"),
    check("could_not_run", "could not run"),
    run.error_kinds.length
      ? h(
          "label",
          {},
          "Error kind ",
          select("error_kind", [["", "any"], ...run.error_kinds.map((k) => [k, k])]),
        )
      : null,
    h("label", {}, "Task ", taskInput),
    h(
      "label",
      {},
      "Metric ",
      select("metric", [["", "–"], ...run.metrics.map((m) => [m.name, m.name])]),
      select("op", [
        ["lt", "<"],
        ["le", "≤"],
        ["eq", "="],
        ["ge", "≥"],
        ["gt", ">"],
      ]),
      valueInput,
    ),
    h("button", {
      type: "button",
      class: "link",
      text: "Clear",
      onclick: () =>
        update({
          status: "",
          failed: "",
          errored: "",
          could_not_run: "",
          error_kind: "",
          task: "",
          metric: "",
          value: "",
        }),
    }),
  );
  const tableWrap = h("div", { class: "table-wrap" });
  const pager = h("div", { class: "pager" });
  fill(body, bar, tableWrap, pager);

  function update(changes) {
    Object.assign(filters, changes);
    if (!("offset" in changes)) filters.offset = "0";
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) {
      if (
        v &&
        !(k === "sort" && v === "task") &&
        !(k === "op" && v === "lt") &&
        !(k === "offset" && v === "0") &&
        !(k === "limit" && v === "50")
      )
        p.set(k, v);
    }
    setQuery(p);
    load();
  }

  const columns = [
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

  function render(page) {
    const head = h(
      "tr",
      {},
      columns.map(([key, label]) => {
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
    const live = page.live.map((x) =>
      h(
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
      ),
    );
    const rows = page.rows.map((r) =>
      h(
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
      ),
    );
    const none =
      !live.length && !rows.length
        ? h(
            "tr",
            {},
            h("td", {
              colspan: columns.length,
              class: "muted",
              text: page.finished
                ? "No rollout matches these filters."
                : "No rollout has finished yet.",
            }),
          )
        : null;
    fill(
      tableWrap,
      h(
        "table",
        { class: "grid rollouts" },
        h("thead", {}, head),
        h("tbody", {}, live, rows, none),
      ),
    );
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
      ["25", "50", "100", "250", "500"].map((v) =>
        h("option", { value: v, text: `${v} per page` }),
      ),
    );
    size.value = filters.limit;
    size.addEventListener("change", () => update({ limit: size.value }));
    fill(
      pager,
      h("span", {
        class: "muted",
        text: page.total
          ? `${int(offset + 1)}–${int(end)} of ${int(page.total)} finished` +
            (page.total !== page.finished ? ` (filtered from ${int(page.finished)})` : "")
          : "",
      }),
      prev,
      next,
      size,
    );
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

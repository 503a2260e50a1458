// A run's Rubric and Options tabs: what the manifest says of it.
import { details, fill, h, jsonBlock } from "../lib/dom.js";
import { num } from "../lib/format.js";

export function rubricTab(run, body) {
  const rubric = run.rubric || {};
  const rows = run.metrics.map((m) =>
    h(
      "tr",
      {},
      h("td", {}, h("code", { text: m.name })),
      h("td", { class: "num", text: num(m.weight) }),
      h("td", { class: "num", text: num(m.mean) }),
      h("td", { text: m.description }),
      h("td", { class: "small muted", text: m.origin }),
    ),
  );
  fill(
    body,
    h(
      "div",
      { class: "card" },
      h("h2", { text: "Compiled rubric" }),
      rubric.total ? h("p", {}, "Total: ", rubric.total) : null,
      rubric.order
        ? h("p", { class: "muted" }, "Compiled in this order: ", rubric.order.join(" → "))
        : null,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "grid" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Metric", "Weight", "Mean", "Description", "Origin"].map((t) =>
                h("th", { text: t }),
              ),
            ),
          ),
          h("tbody", {}, rows),
        ),
      ),
      details("The manifest's rubric section (JSON)", jsonBlock(rubric, { lines: 40 })),
    ),
  );
}

export function optionsTab(run, body) {
  const o = run.options;
  const section = (title, obj) => {
    if (!obj || (typeof obj === "object" && !Object.keys(obj).length)) return null;
    const rows = Object.entries(obj).map(([k, v]) =>
      h(
        "tr",
        {},
        h("th", { text: k }),
        h(
          "td",
          {},
          v !== null && typeof v === "object"
            ? h("code", { text: JSON.stringify(v) })
            : h("span", { text: v === null ? "–" : String(v) }),
        ),
      ),
    );
    return h(
      "div",
      { class: "card" },
      h("h2", { text: title }),
      h("table", { class: "kv" }, h("tbody", {}, rows)),
    );
  };
  fill(
    body,
    h(
      "div",
      { class: "cards" },
      section("Model", o.context),
      section("Run options", o.options),
      section("Plan", o.plan),
      section("Taskset", o.taskset),
      section("Harness", o.harness),
      section("Sandbox", o.sandbox),
      section("Pricing", o.pricing),
      section("Software", {
        agentkit: o.agentkit_version,
        python: o.python,
        platform: o.platform,
        directory: run.path,
      }),
      o.resumes?.length
        ? h("div", { class: "card" }, h("h2", { text: "Resumes" }), jsonBlock(o.resumes))
        : null,
      o.plugins
        ? h(
            "div",
            { class: "card" },
            h("h2", { text: "Plugins" }),
            h(
              "table",
              { class: "kv" },
              h(
                "tbody",
                {},
                o.plugins.map((p) =>
                  h(
                    "tr",
                    {},
                    h("th", { text: p.name }),
                    h("td", { text: `${p.distribution} ${p.version}` }),
                  ),
                ),
              ),
            ),
          )
        : null,
    ),
    details("All options (JSON)", jsonBlock(o, { lines: 40 })),
  );
}

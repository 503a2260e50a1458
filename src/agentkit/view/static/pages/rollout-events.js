// A rollout's events: the timeline card, which grows as a running rollout's events arrive.
import { clear, h, jsonBlock } from "../lib/dom.js";
import { date, plural, preview, seconds, textOf } from "../lib/format.js";

// The Events card of a rollout: a row per event with the time since the start and how long
// it took; add() appends events as they come (a new attempt starts the table again).
export class Timeline {
  constructor() {
    this.body = h("tbody", {});
    this.count = h("span", { class: "muted small" });
    this.events = [];
    this.attempt = 1;
    this.lastDur = null;
  }

  // The card, with the rollout's events so far.
  card(doc) {
    const card = h("div", { class: "card", id: "timeline" });
    const names = ["#", "Time", "Took", "Type", "What"].map((t) => h("th", { text: t }));
    card.append(
      h("h2", {}, "Events ", this.count),
      h(
        "div",
        { class: "table-wrap" },
        h("table", { class: "grid events" }, h("thead", {}, h("tr", {}, names)), this.body),
      ),
    );
    if (doc.events_error) card.append(h("p", { class: "err-text", text: doc.events_error }));
    this.add(doc.events);
    if (doc.events_total > doc.events.length)
      card.append(
        h("p", {
          class: "muted small",
          text: `${doc.events_total - doc.events.length} more events are not shown.`,
        }),
      );
    return card;
  }

  // Append events; only the previous last row changes (its duration).
  add(events) {
    const all = this.events;
    for (const e of events) {
      if (e.type === "rollout.start" && all.length) {
        all.length = 0; // the live file was started again
        this.attempt = 1;
        this.lastDur = null;
        clear(this.body);
      }
      if (e.type === "rollout.retry") {
        this.attempt = e.data.attempt;
        const progress = document.getElementById("progress-badge");
        if (progress) progress.textContent = `in progress · attempt ${e.data.attempt}`;
      }
      const prev = all[all.length - 1];
      if (prev && this.lastDur && !explicitDuration(prev))
        this.lastDur.textContent = seconds(e.timestamp - prev.timestamp);
      all.push(e);
      this.row(e, all[0].timestamp);
    }
    const n = all.filter((e) => e.seq >= 0).length;
    this.count.textContent = plural(n, "event");
  }

  // One event's row, and the row of its data that a click unfolds.
  row(e, first) {
    const took = explicitDuration(e);
    const marker = e.seq < 0;
    const suffix = this.attempt > 1 ? `-a${this.attempt}` : "";
    const id = marker ? `attempt-${e.data.attempt}` : `event-${e.seq}${suffix}`;
    const detail = h(
      "tr",
      { class: "detail", hidden: true },
      h("td", { colspan: 5 }, jsonBlock(e.data, { lines: 40 })),
    );
    const durCell = h("td", { class: "nowrap small", text: took === null ? "" : seconds(took) });
    const link = { href: `#${id}`, class: "anchor", title: "Link to this event" };
    const tr = h(
      "tr",
      { id, class: `event ${eventClass(e)}` },
      h("td", { class: "num" }, h("a", { ...link, text: marker ? "" : e.seq })),
      h("td", {
        class: "nowrap small",
        title: date(e.timestamp),
        text: `+${(e.timestamp - first).toFixed(3)} s`,
      }),
      durCell,
      h("td", { class: "nowrap" }, h("code", { text: e.type })),
      h("td", { class: "what", text: describe(e) }),
    );
    tr.addEventListener("click", (ev) => {
      if (ev.target.closest("a")) return;
      detail.hidden = !detail.hidden;
    });
    this.body.append(tr, detail);
    this.lastDur = durCell;
  }
}

function explicitDuration(e) {
  const took = e.data && (e.data.duration_sec ?? e.data.latency_sec);
  return typeof took === "number" ? took : null;
}

function eventClass(e) {
  if (e.type === "rollout.retry" || e.type === "error" || (e.data && e.data.level === "error"))
    return "err";
  if (e.type === "harbor.step") return "step";
  if (e.type.startsWith("model.")) return "model";
  if (e.type.startsWith("tool.")) return "tool";
  if (e.type === "sandbox.exec") return "exec";
  return "";
}

// What an event says, in one line.
function describe(e) {
  const d = e.data || {};
  switch (e.type) {
    case "rollout.start":
      return `attempt ${d.attempt} started`;
    case "rollout.retry":
      return (
        `attempt ${d.attempt - 1} failed (${d.error_kind}): ${preview(d.error || "", 200)}; ` +
        `retrying in ${d.delay_s} s`
      );
    case "harness.start":
      return `${d.harness || "harness"}${d.model ? ` · model ${d.model}` : ""}`;
    case "harness.end":
      return `${d.status || ""}${d.error ? ` · ${preview(d.error)}` : ""}`;
    case "model.request": {
      const last = d.last_message ? ` · last: ${preview(textOf(d.last_message.content), 120)}` : "";
      return `turn ${d.turn ?? "?"} · ${d.n_messages ?? "?"} messages${last}`;
    }
    case "model.response": {
      const m = d.message || {};
      const calls = (m.tool_calls || []).map((c) => c.function?.name || c.name).join(", ");
      const u = d.usage || {};
      const what = calls ? `tool calls: ${calls}` : preview(textOf(m.content), 140);
      const tokens = u.output_tokens !== undefined;
      return [
        what,
        d.finish_reason ? ` · ${d.finish_reason}` : "",
        tokens ? ` · ${u.input_tokens} in / ${u.output_tokens} out` : "",
      ].join("");
    }
    case "tool.call": {
      const args = preview(d.arguments ?? d.args ?? d.input ?? "", 120);
      return `${d.name || d.tool || "tool"}(${args})`;
    }
    case "tool.result":
      return preview(d.output ?? d.result ?? d.content ?? d, 160);
    case "sandbox.exec":
      return [
        d.purpose ? `${d.purpose}: ` : "",
        `${preview(d.command, 120)} → exit ${d.exit_code}`,
        d.timed_out ? " (timed out)" : "",
      ].join("");
    case "error":
      return `${d.kind ? `${d.kind}: ` : ""}${preview(d.message ?? d.error ?? d, 220)}`;
    case "log":
      return `${d.level ? `${d.level}: ` : ""}${preview(d.message ?? d, 200)}`;
    case "harbor.step":
      return `step ${d.step} ${d.phase}${d.rewards ? ` · ${preview(d.rewards, 80)}` : ""}`;
    default:
      return preview(d, 160);
  }
}

// A rollout's page (/run/RUN/rollout/ID): its cards, and its events as they happen.
import { api, stream } from "../lib/api.js";
import { badge, clear, details, h, jsonBlock, nav } from "../lib/dom.js";
import { date, num, preview, seconds, textOf } from "../lib/format.js";
import { app, setCrumbs, setLive } from "../lib/page.js";
import { rewardClass, statusBadge } from "../lib/status.js";
import { enc, rolloutUrl, runUrl } from "../lib/urls.js";
import {
  callsCard,
  filesCard,
  rewardCard,
  stepsCard,
  taskCard,
  transcriptCard,
  usageCard,
  verifierCard,
  whyCard,
} from "./rollout-cards.js";

export async function rolloutPage(name, rid) {
  document.title = `${rid} · agentkit view`;
  let doc = await api(`/api/run/${enc(name)}/rollout/${enc(rid)}`);
  const taskLink = () =>
    doc.task_id
      ? nav(runUrl(name, new URLSearchParams({ task: doc.task_id }).toString()), doc.task_id)
      : null;
  setCrumbs(nav("/", "Runs"), nav(runUrl(name), name), taskLink(), rid);
  const timeline = { body: null, events: [], count: null, attempt: 1, lastDur: null };

  function render() {
    setLive(doc.running ? "running" : null);
    clear(app);
    const record = doc.record;
    const row = doc.row || {};
    const head = h(
      "section",
      { class: "run-head" },
      h(
        "div",
        { class: "title-row" },
        h("h1", { text: rid }),
        doc.running
          ? h("span", {
              id: "progress-badge",
              class: "badge live",
              text: `in progress · attempt ${doc.live.attempt}`,
            })
          : doc.interrupted
            ? badge("interrupted", "warn")
            : statusBadge(row),
        record
          ? h("span", {
              class: `big-reward ${rewardClass(row)}`,
              text: `reward ${num(record.reward)}`,
            })
          : null,
      ),
      h(
        "p",
        { class: "muted" },
        `task ${doc.task_id || "?"} · `,
        `rollout #${record ? record.rollout_index : doc.live.rollout_index}`,
        record?.timings
          ? ` · ${date(record.timings.started_at)} · ${seconds(record.timings.duration_s)}`
          : "",
      ),
      doc.siblings.length > 1
        ? h(
            "div",
            { class: "siblings" },
            h("span", { class: "muted small", text: "Rollouts of this task: " }),
            doc.siblings.map((s) =>
              h("a", {
                href: rolloutUrl(name, s.rollout_id),
                "data-nav": true,
                class: `chip ${s.rollout_id === rid ? "current" : ""} ${siblingClass(s)}`,
                text: `#${s.index} ${num(s.reward, 2)}`,
              }),
            ),
          )
        : null,
      doc.branches
        ? h(
            "div",
            { class: "siblings branches" },
            doc.branches.parent
              ? [
                  h("span", {
                    class: "muted small",
                    text: `Forked at step ${doc.branches.branch_step} from `,
                  }),
                  h("a", {
                    href: rolloutUrl(name, doc.branches.parent),
                    "data-nav": true,
                    class: "chip",
                    text: doc.branches.parent,
                  }),
                ]
              : null,
            doc.branches.children.length
              ? [
                  h("span", { class: "muted small", text: " Branches: " }),
                  doc.branches.children.map((c) =>
                    h("a", { href: rolloutUrl(name, c), "data-nav": true, class: "chip", text: c }),
                  ),
                ]
              : null,
          )
        : null,
    );
    app.append(head);
    if (doc.running)
      app.append(
        h(
          "div",
          { class: "banner live" },
          "This rollout is running: its events appear below as they happen.",
        ),
      );
    if (doc.previous)
      app.append(
        h("div", {
          class: "banner warn",
          text: previousText(doc.previous),
        }),
      );
    if (doc.interrupted)
      app.append(
        h(
          "div",
          { class: "banner warn" },
          "This rollout was running when its run was interrupted; ",
          h("code", { text: "agentkit run --resume" }),
          " runs it again.",
        ),
      );
    const why = record ? whyCard(doc) : null;
    if (why) app.append(why);
    const cols = h("div", { class: "columns" });
    const main = h("div", { class: "col-main" });
    const side = h("div", { class: "col-side" });
    cols.append(main, side);
    app.append(cols);
    if (doc.task) main.append(taskCard(doc.task));
    if (record) main.append(transcriptCard(record, doc.events));
    if (record && (doc.calls_total || doc.calls?.length)) main.append(callsCard(name, rid, doc));
    main.append(timelineCard());
    if (record) {
      side.append(rewardCard(doc));
      if (doc.steps.length) side.append(stepsCard(doc));
      side.append(verifierCard(doc));
      side.append(usageCard(record));
    }
    side.append(filesCard(name, doc));
    if (record)
      main.append(
        h(
          "div",
          { class: "card" },
          h("h2", { text: "Record" }),
          details("The rollout's line in rollouts.jsonl (JSON)", jsonBlock(record, { lines: 30 })),
        ),
      );
    focusHash();
  }

  function focusHash() {
    const id = location.hash.slice(1);
    if (!id) return;
    const el = document.getElementById(id);
    if (!el) return;
    el.classList.add("target");
    if (el.tagName === "TR" && el.nextSibling && el.nextSibling.classList.contains("detail"))
      el.nextSibling.hidden = false;
    el.scrollIntoView({ block: "center" });
  }

  function timelineCard() {
    const card = h("div", { class: "card", id: "timeline" });
    const count = h("span", { class: "muted small" });
    timeline.count = count;
    timeline.body = h("tbody", {});
    timeline.events = [];
    timeline.attempt = 1;
    timeline.lastDur = null;
    card.append(
      h("h2", {}, "Events ", count),
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "grid events" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["#", "Time", "Took", "Type", "What"].map((t) => h("th", { text: t })),
            ),
          ),
          timeline.body,
        ),
      ),
    );
    if (doc.events_error) card.append(h("p", { class: "err-text", text: doc.events_error }));
    addEvents(doc.events);
    if (doc.events_total > doc.events.length)
      card.append(
        h("p", {
          class: "muted small",
          text: `${doc.events_total - doc.events.length} more events are not shown.`,
        }),
      );
    return card;
  }

  // Append events to the timeline; only the previous last row changes (its duration).
  function addEvents(events) {
    const all = timeline.events;
    for (const e of events) {
      if (e.type === "rollout.start" && all.length) {
        all.length = 0; // the live file was started again
        timeline.attempt = 1;
        timeline.lastDur = null;
        clear(timeline.body);
      }
      if (e.type === "rollout.retry") {
        timeline.attempt = e.data.attempt;
        const progress = document.getElementById("progress-badge");
        if (progress) progress.textContent = `in progress · attempt ${e.data.attempt}`;
      }
      const prev = all[all.length - 1];
      if (prev && timeline.lastDur && !explicitDuration(prev))
        timeline.lastDur.textContent = seconds(e.timestamp - prev.timestamp);
      all.push(e);
      const first = all[0].timestamp;
      const took = explicitDuration(e);
      const marker = e.seq < 0;
      const suffix = timeline.attempt > 1 ? `-a${timeline.attempt}` : "";
      const id = marker ? `attempt-${e.data.attempt}` : `event-${e.seq}${suffix}`;
      const detail = h(
        "tr",
        { class: "detail", hidden: true },
        h("td", { colspan: 5 }, jsonBlock(e.data, { lines: 40 })),
      );
      const durCell = h("td", { class: "nowrap small", text: took === null ? "" : seconds(took) });
      const tr = h(
        "tr",
        { id, class: `event ${eventClass(e)}` },
        h(
          "td",
          { class: "num" },
          h("a", {
            href: `#${id}`,
            class: "anchor",
            title: "Link to this event",
            text: marker ? "" : e.seq,
          }),
        ),
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
      timeline.body.append(tr, detail);
      timeline.lastDur = durCell;
    }
    const n = all.filter((e) => e.seq >= 0).length;
    timeline.count.textContent = `${n} event${n === 1 ? "" : "s"}`;
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

  render();

  if (doc.running) {
    stream(`/api/run/${enc(name)}/rollout/${enc(rid)}/stream?offset=${doc.offset}`, {
      events: (msg) => addEvents(msg.events),
      finished: async () => {
        doc = await api(`/api/run/${enc(name)}/rollout/${enc(rid)}`);
        setCrumbs(nav("/", "Runs"), nav(runUrl(name), name), taskLink(), rid);
        render();
        app.prepend(h("div", { class: "banner ok" }, "This rollout has just finished."));
      },
      ended: (msg) => {
        doc.running = false;
        doc.interrupted = true;
        setLive(null);
        app.prepend(
          h("div", {
            class: "banner warn",
            text: `The run is no longer running (${msg.state}); this rollout did not finish.`,
          }),
        );
      },
    });
  }
}

// A chip's colour among a task's rollouts: could not run, passed (reward 1), did not, error.
function siblingClass(s) {
  if (s.infrastructure) return "infra";
  if (!s.ok) return "err";
  return s.reward !== null && s.reward >= 1 ? "ok" : "bad";
}

// The earlier result of a rollout that --resume runs again.
function previousText(p) {
  const reason = p.reason ? ` (${p.reason})` : "";
  return (
    "It is run again (agentkit run --resume); its earlier result: " +
    `${p.status}, reward ${num(p.reward)}${reason}.`
  );
}

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

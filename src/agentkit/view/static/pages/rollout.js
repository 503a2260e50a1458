// A rollout's page (/run/RUN/rollout/ID): its cards, and its events as they happen.
import { api, stream } from "../lib/api.js";
import { badge, clear, details, h, jsonBlock, nav } from "../lib/dom.js";
import { date, num, seconds } from "../lib/format.js";
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
import { Timeline } from "./rollout-events.js";

export async function rolloutPage(name, rid) {
  document.title = `${rid} · agentkit view`;
  const url = `/api/run/${enc(name)}/rollout/${enc(rid)}`;
  let doc = await api(url);
  const crumbs = () =>
    setCrumbs(nav("/", "Runs"), nav(runUrl(name), name), taskLink(name, doc), rid);
  crumbs();
  let timeline = render(name, rid, doc);
  if (!doc.running) return;
  stream(`${url}/stream?offset=${doc.offset}`, {
    events: (msg) => timeline.add(msg.events),
    finished: async () => {
      doc = await api(url);
      crumbs();
      timeline = render(name, rid, doc);
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

// A link to the rollouts of the rollout's task in its run.
function taskLink(name, doc) {
  if (!doc.task_id) return null;
  return nav(runUrl(name, new URLSearchParams({ task: doc.task_id }).toString()), doc.task_id);
}

// Draw the page from the rollout's document; returns its events' timeline.
function render(name, rid, doc) {
  setLive(doc.running ? "running" : null);
  clear(app);
  const record = doc.record;
  app.append(head(name, rid, doc));
  for (const banner of banners(doc)) app.append(banner);
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
  const timeline = new Timeline();
  main.append(timeline.card(doc));
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
  return timeline;
}

// The header: the rollout's id, status and reward, its task, its siblings and branches.
function head(name, rid, doc) {
  const record = doc.record;
  const row = doc.row || {};
  return h(
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
    doc.siblings.length > 1 ? siblings(name, rid, doc.siblings) : null,
    doc.branches ? branches(name, doc.branches) : null,
  );
}

// The rollouts of the same task, as chips (this one marked).
function siblings(name, rid, all) {
  return h(
    "div",
    { class: "siblings" },
    h("span", { class: "muted small", text: "Rollouts of this task: " }),
    all.map((s) =>
      h("a", {
        href: rolloutUrl(name, s.rollout_id),
        "data-nav": true,
        class: `chip ${s.rollout_id === rid ? "current" : ""} ${siblingClass(s)}`,
        text: `#${s.index} ${num(s.reward, 2)}`,
      }),
    ),
  );
}

// A branching run's tree around the rollout: the rollout it was forked from, its children.
function branches(name, b) {
  const chip = (id) =>
    h("a", { href: rolloutUrl(name, id), "data-nav": true, class: "chip", text: id });
  return h(
    "div",
    { class: "siblings branches" },
    b.parent
      ? [
          h("span", { class: "muted small", text: `Forked at step ${b.branch_step} from ` }),
          chip(b.parent),
        ]
      : null,
    b.children.length
      ? [h("span", { class: "muted small", text: " Branches: " }), b.children.map(chip)]
      : null,
  );
}

// What the page says above the cards: running, run again, interrupted.
function banners(doc) {
  const out = [];
  if (doc.running)
    out.push(
      h(
        "div",
        { class: "banner live" },
        "This rollout is running: its events appear below as they happen.",
      ),
    );
  if (doc.previous) out.push(h("div", { class: "banner warn", text: previousText(doc.previous) }));
  if (doc.interrupted)
    out.push(
      h(
        "div",
        { class: "banner warn" },
        "This rollout was running when its run was interrupted; ",
        h("code", { text: "agentkit run --resume" }),
        " runs it again.",
      ),
    );
  return out;
}

// Show the event or message the URL's #fragment names.
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

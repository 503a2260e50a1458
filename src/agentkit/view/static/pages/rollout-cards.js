// The cards of a rollout's page: why it did not pass, its task, transcript, reward, model
// calls, steps, verifier output, usage and files.
import { api } from "../lib/api.js";
import { card, clear, details, fill, h, jsonBlock, noted, table, textBlock } from "../lib/dom.js";
import {
  bytes,
  date,
  int,
  money,
  num,
  plural,
  pretty,
  preview,
  seconds,
  textOf,
} from "../lib/format.js";
import { rewardClass } from "../lib/status.js";
import { enc } from "../lib/urls.js";

export function whyCard(doc) {
  const record = doc.record;
  if (doc.ok && record.passed !== false) return null;
  const items = [];
  if (record.error) {
    items.push(
      h(
        "p",
        {},
        h("strong", { text: record.error_kind || record.status }),
        doc.infrastructure ? " — it could not run; agentkit run --resume runs it again" : "",
      ),
    );
    items.push(textBlock(record.error, { lines: 12, cls: "error-text" }));
  } else if (record.status !== "completed") {
    items.push(h("p", {}, h("strong", { text: record.status })));
  }
  for (const s of record.scoring_errors || []) {
    items.push(h("p", {}, h("strong", { text: `${s.metric} raised: ` }), s.error));
  }
  if (!items.length)
    items.push(
      h(
        "p",
        {},
        `It ran and was scored ${num(record.reward)}`,
        record.passed === false ? " (below the pass threshold)." : ".",
      ),
    );
  for (const r of record.retries || []) {
    items.push(
      h(
        "p",
        { class: "small muted" },
        `Earlier attempt failed (${r.error_kind}): ${preview(r.error || "", 240)}`,
      ),
    );
  }
  return h(
    "div",
    { class: `card why ${doc.infrastructure ? "infra" : ""}` },
    h("h2", { text: doc.infrastructure ? "Why it could not run" : "Why it did not pass" }),
    items,
  );
}

export function taskCard(task) {
  const input = task.input;
  let body;
  if (Array.isArray(input) && input.every((m) => m && typeof m === "object" && "role" in m)) {
    body = details(
      `${plural(input.length, "message")} (the transcript below starts with them)`,
      conversation(input, "task-message"),
    );
  } else body = textBlock(typeof input === "string" ? input : pretty(input), { lines: 14 });
  return h(
    "div",
    { class: "card", id: "task" },
    h("h2", { text: "Task" }),
    body,
    task.target !== null && task.target !== undefined
      ? h(
          "p",
          { class: "target" },
          h("strong", { text: "Target: " }),
          typeof task.target === "string" ? task.target : JSON.stringify(task.target),
        )
      : null,
    task.metadata && Object.keys(task.metadata).length
      ? details("Metadata", jsonBlock(task.metadata))
      : null,
  );
}

export function transcriptCard(record, events) {
  // reasoning the harness recorded on its model.response events, by the reply's text
  const reasoning = new Map();
  for (const e of events || []) {
    const d = e.data || {};
    if (e.type === "model.response" && d.reasoning && d.message)
      reasoning.set(textOf(d.message.content), d.reasoning);
  }
  const msgs = (record.messages || []).map((m) =>
    m.role === "assistant" &&
    !m.reasoning_content &&
    !m.reasoning &&
    reasoning.has(textOf(m.content))
      ? { ...m, reasoning: reasoning.get(textOf(m.content)) }
      : m,
  );
  const count = msgs.length ? `${msgs.length} message${msgs.length === 1 ? "" : "s"}` : "";
  const card = h(
    "div",
    { class: "card", id: "transcript" },
    h("h2", {}, "Transcript ", h("span", { class: "muted small", text: count })),
  );
  if (msgs.length) card.append(conversation(msgs));
  else
    card.append(
      h("p", {
        class: "muted",
        text: "No messages (this harness keeps none): the events below show what it did.",
      }),
    );
  if (record.output !== null && record.output !== undefined && record.output !== "") {
    card.append(h("h3", { text: "Final output" }), textBlock(String(record.output), { lines: 14 }));
  }
  return card;
}

function conversation(messages, anchor = "message") {
  const names = {};
  for (const m of messages)
    for (const c of m.tool_calls || []) names[c.id] = c.function?.name || c.name;
  return h(
    "div",
    { class: "conversation" },
    messages.map((m, i) => {
      const role = m.role || "?";
      const header = h(
        "div",
        { class: "msg-head" },
        h("span", { class: "role", text: role }),
        m.name ? h("span", { class: "muted small", text: ` ${m.name}` }) : null,
        m.tool_call_id
          ? h("span", {
              class: "muted small",
              text: ` result of ${names[m.tool_call_id] || "call"} (${m.tool_call_id})`,
            })
          : null,
        h("a", { class: "anchor small", href: `#${anchor}-${i}`, text: "#" }),
      );
      const text = textOf(m.content);
      const reasoning = m.reasoning_content || m.reasoning;
      return h(
        "div",
        { class: `msg ${role}`, id: `${anchor}-${i}` },
        header,
        reasoning ? details("Reasoning", textBlock(textOf(reasoning), { lines: 10 })) : null,
        text ? textBlock(text, { lines: role === "system" ? 6 : 24 }) : null,
        (m.tool_calls || []).map((c) => {
          const fn = c.function || {};
          return h(
            "div",
            { class: "tool-call" },
            h(
              "div",
              {},
              h("span", { class: "arrow", text: "→ " }),
              h("code", { text: fn.name || c.name || "tool" }),
              h("span", { class: "muted small", text: c.id ? `  ${c.id}` : "" }),
            ),
            textBlock(pretty(fn.arguments ?? c.arguments ?? ""), { lines: 12, cls: "json" }),
          );
        }),
      );
    }),
  );
}

export function rewardCard(doc) {
  const record = doc.record;
  const weights = Object.fromEntries(doc.metrics.map((m) => [m.name, m]));
  const names = [
    ...new Set([...doc.metrics.map((m) => m.name), ...Object.keys(record.rewards || {})]),
  ];
  const rows = names.map((n) => {
    const v = record.rewards?.[n];
    const w = weights[n] ? weights[n].weight : null;
    return h(
      "tr",
      { title: weights[n] ? weights[n].description : "" },
      h("td", {}, h("code", { text: n })),
      h("td", { class: "num", text: v === undefined ? "–" : num(v) }),
      h("td", { class: "num muted", text: w === null ? "" : `× ${num(w)}` }),
    );
  });
  return h(
    "div",
    { class: "card", id: "reward" },
    h(
      "h2",
      {},
      "Reward ",
      h("span", { class: `big-reward ${rewardClass(doc.row)}`, text: num(record.reward) }),
    ),
    h(
      "table",
      { class: "grid compact" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Metric", "Value", "Weight"].map((t) => h("th", { text: t })),
        ),
      ),
      h("tbody", {}, rows),
    ),
    record.advantage !== null && record.advantage !== undefined
      ? h("p", { class: "small muted", text: `advantage ${num(record.advantage)}` })
      : null,
  );
}

// The rollout's model calls, as the model proxy recorded them: one row each, its JSON
// fetched when the row is opened.
export function callsCard(name, rid, doc) {
  const calls = doc.calls || [];
  const card = h(
    "div",
    { class: "card", id: "calls" },
    h(
      "h2",
      {},
      "Model calls ",
      h("span", { class: "muted small", text: `${int(doc.calls_total)}` }),
    ),
  );
  const gaps = doc.calls_without_tokens || [];
  if (gaps.length) {
    const missing = gaps.reduce((n, g) => n + (g.calls || []).length, 0);
    card.append(
      h(
        "div",
        { class: "tokens-gap" },
        h("p", {
          class: "small",
          text: `Token ids incomplete: ${missing} of ${doc.calls_total} calls have none.`,
        }),
        h(
          "ul",
          { class: "small" },
          gaps.map((g) => h("li", { text: `calls ${(g.calls || []).join(", ")}: ${g.note}` })),
        ),
      ),
    );
  } else if (calls.length) {
    card.append(
      h("p", {
        class: "small muted tokens-ok",
        text: "Every call carries the server's token ids.",
      }),
    );
  }
  if (doc.calls_error) card.append(h("p", { class: "err-text", text: doc.calls_error }));
  const ms = (v) => (typeof v === "number" ? `${(v * 1000).toFixed(0)} ms` : "–");
  const body = h("tbody", {});
  for (const c of calls) {
    const id = `call-${c.index}`;
    const holder = h("td", { colspan: 7 }, h("span", { class: "muted small", text: "loading…" }));
    const detail = h("tr", { class: "detail", hidden: true }, holder);
    let loaded = false;
    const ids =
      c.prompt_ids === null
        ? c.token_note || "none"
        : `${int(c.prompt_ids)} + ${int(c.completion_ids)}${c.logprobs ? ", logprobs" : ""}`;
    const tr = h(
      "tr",
      { id, class: `call ${c.error || (c.status && c.status >= 400) ? "err" : ""}` },
      h("td", { class: "num" }, h("a", { href: `#${id}`, class: "anchor", text: c.index })),
      h(
        "td",
        { class: "nowrap" },
        h("code", { text: `${c.protocol}${c.stream ? " stream" : ""}` }),
      ),
      h("td", {
        class: "nowrap",
        text: `${c.status ?? "no answer"}${c.finish_reason ? ` ${c.finish_reason}` : ""}`,
      }),
      h("td", { class: "nowrap small", text: ms(c.ttft_s) }),
      h("td", { class: "nowrap small", text: ms(c.duration_s) }),
      h("td", {
        class: "nowrap small",
        text: c.input_tokens === null ? "–" : `${int(c.input_tokens)} / ${int(c.output_tokens)}`,
      }),
      h("td", { class: "small what", text: c.error ? `${ids} · ${c.error}` : ids }),
    );
    tr.addEventListener("click", async (ev) => {
      if (ev.target.closest("a")) return;
      detail.hidden = !detail.hidden;
      if (loaded || detail.hidden) return;
      loaded = true;
      try {
        const whole = await api(`/api/run/${enc(name)}/rollout/${enc(rid)}/call/${c.index}`);
        clear(holder);
        holder.append(jsonBlock(whole, { lines: 40 }));
      } catch (err) {
        clear(holder);
        holder.append(h("span", { class: "err-text", text: String(err.message || err) }));
      }
    });
    body.append(tr, detail);
  }
  card.append(
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "grid calls" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["#", "Protocol", "Status", "First token", "Took", "Tokens in / out", "Token ids"].map(
              (t) => h("th", { text: t }),
            ),
          ),
        ),
        body,
      ),
    ),
  );
  if (doc.calls_total > calls.length)
    card.append(
      h("p", {
        class: "muted small",
        text: `${doc.calls_total - calls.length} more calls are not shown.`,
      }),
    );
  return card;
}

export function stepsCard(doc) {
  return card(
    "steps",
    "Steps",
    table(
      "grid compact",
      ["Step", "Agent", "Rewards"],
      doc.steps.map((s) =>
        h(
          "tr",
          {},
          h("td", {}, h("code", { text: s.name })),
          h("td", { text: s.status || "–" }),
          h("td", {
            class: "small",
            text:
              Object.entries(s.rewards)
                .map(([k, v]) => `${k} ${num(v)}`)
                .join(", ") || "–",
          }),
        ),
      ),
    ),
  );
}

export function verifierCard(doc) {
  const card = h("div", { class: "card", id: "verifier" }, h("h2", { text: "Verifier" }));
  if (!doc.verifier.length) {
    card.append(
      h("p", {
        class: "muted",
        text: doc.infrastructure
          ? "Not scored: it could not run."
          : "No verifier output recorded (the reward functions above scored it).",
      }),
    );
    return card;
  }
  for (const v of doc.verifier) {
    const d = v.data || {};
    const facts = [];
    if (d.exit_code !== undefined) facts.push(`exit ${d.exit_code}`);
    if (d.duration_sec !== undefined) facts.push(seconds(d.duration_sec));
    if (d.reward_file) facts.push(d.reward_file);
    if (d.rewards)
      facts.push(
        Object.entries(d.rewards)
          .map(([k, x]) => `${k}=${num(x)}`)
          .join(" "),
      );
    const shown = new Set([
      "exit_code",
      "duration_sec",
      "reward_file",
      "rewards",
      "stdout",
      "stderr",
      "notes",
      "error",
    ]);
    for (const [k, x] of Object.entries(d)) {
      if (!shown.has(k) && x !== null && typeof x !== "object")
        facts.push(`${k} ${preview(String(x), 60)}`);
    }
    card.append(
      h(
        "div",
        { class: "verifier" },
        h(
          "h3",
          {},
          v.label,
          h("span", { class: "muted small", text: facts.length ? `  ${facts.join(" · ")}` : "" }),
        ),
        d.error ? textBlock(String(d.error), { lines: 8, cls: "error-text" }) : null,
        d.stdout ? textBlock(String(d.stdout), { lines: 12 }) : null,
        d.stderr ? textBlock(String(d.stderr), { lines: 8, cls: "error-text" }) : null,
        (d.notes || []).map((n) =>
          h("p", { class: "small muted", text: typeof n === "string" ? n : JSON.stringify(n) }),
        ),
        details("All fields", jsonBlock(d)),
      ),
    );
  }
  return card;
}

export function usageCard(record) {
  const u = record.usage || {};
  const t = record.timings || {};
  const rows = [
    ["Input tokens", int(u.input_tokens)],
    ["cached", int(u.cached_tokens)],
    ["Output tokens", int(u.output_tokens)],
    ["reasoning", int(u.reasoning_tokens)],
    ["Model calls", int(u.requests)],
    ["Cost", money(u.cost)],
    ["Started", date(t.started_at)],
    ["Finished", date(t.finished_at)],
    ["Duration", seconds(t.duration_s)],
    ["harness", seconds(t.harness_s)],
    ["scoring", seconds(t.scoring_s)],
    ["Attempts", int(record.attempts)],
  ];
  return card(
    "usage",
    "Usage and timings",
    h(
      "table",
      { class: "kv" },
      h(
        "tbody",
        {},
        rows.map(([k, v]) => h("tr", {}, h("th", { text: k }), h("td", { class: "num", text: v }))),
      ),
    ),
  );
}

export function filesCard(name, doc) {
  const files = card("files", noted("Files ", doc.files.length ? String(doc.files.length) : ""));
  if (!doc.files.length) {
    files.append(h("p", { class: "muted", text: "No files kept for this rollout." }));
    return files;
  }
  const viewer = h("div", { class: "file-view", hidden: true });
  const list = h(
    "ul",
    { class: "files" },
    doc.files.map((f) => {
      const url = `/files/${enc(name)}/${f.path.split("/").map(enc).join("/")}`;
      const short = f.path.split("/").slice(2).join("/");
      if (f.symlink)
        return h(
          "li",
          { class: "muted" },
          h("span", { text: short }),
          h("span", { class: "small", text: " symlink, not followed" }),
        );
      const view = h("button", { type: "button", class: "link", text: short, title: f.path });
      view.addEventListener("click", () => showFile(viewer, url, f));
      return h(
        "li",
        { class: f.kind },
        view,
        h("span", { class: "muted small", text: ` ${bytes(f.size)}` }),
        " ",
        h("a", { href: `${url}?download=1`, class: "small", text: "download", download: "" }),
      );
    }),
  );
  files.append(list, viewer);
  if (doc.files_truncated)
    files.append(h("p", { class: "small muted", text: "More files are not listed." }));
  return files;
}

async function showFile(viewer, url, f) {
  viewer.hidden = false;
  fill(
    viewer,
    h(
      "div",
      { class: "file-head" },
      h("code", { text: f.path }),
      " ",
      h("a", { href: url, target: "_blank", rel: "noopener", class: "small", text: "open" }),
    ),
  );
  if (/\.(png|jpe?g|gif|webp)$/i.test(f.path)) {
    viewer.append(h("img", { src: url, alt: f.path }));
    return;
  }
  if (f.size > 2 * 1024 * 1024) {
    viewer.append(h("p", { class: "muted", text: "Too large to show here: download it." }));
    return;
  }
  const resp = await fetch(url);
  const type = resp.headers.get("Content-Type") || "";
  if (!resp.ok) viewer.append(h("p", { class: "err-text", text: `HTTP ${resp.status}` }));
  else if (!type.startsWith("text/"))
    viewer.append(h("p", { class: "muted", text: "A binary file: download it." }));
  else viewer.append(textBlock(await resp.text(), { lines: 30 }));
}

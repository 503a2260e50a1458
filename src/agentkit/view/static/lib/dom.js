// Building the page: elements from a tag, attributes and children, and the blocks every
// page uses. Everything from a run goes in as text (textContent), never as HTML.
import { pretty } from "./format.js";

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// A card of the page: its id, its heading (text, or text and what follows it), then
// what it holds.
export function card(id, title, ...children) {
  return h("div", { class: "card", id }, h("h2", {}, title), ...children);
}

// A card's heading with a muted note after it.
export function noted(title, note) {
  return [title, h("span", { class: "muted small", text: note })];
}

// A table: its class, its column names and its rows.
export function table(cls, names, rows) {
  const head = h(
    "tr",
    {},
    names.map((t) => h("th", { text: t })),
  );
  return h("table", { class: cls }, h("thead", {}, head), h("tbody", {}, rows));
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// Replace an element's children (null, false and undefined are left out).
export function fill(el, ...children) {
  return append(clear(el), children);
}

// A block of text that folds when long.
export function textBlock(text, { lines = 18, cls = "" } = {}) {
  const pre = h("pre", { class: `text ${cls}`, text });
  const count = text.split("\n").length;
  if (count <= lines && text.length <= 2400) return pre;
  pre.classList.add("folded");
  const more = h("button", {
    class: "link small",
    type: "button",
    text: `Show all (${count} lines)`,
  });
  more.addEventListener("click", () => {
    const folded = pre.classList.toggle("folded");
    more.textContent = folded ? `Show all (${count} lines)` : "Show less";
  });
  return h("div", { class: "foldable" }, pre, more);
}

export function jsonBlock(value, opts) {
  return textBlock(pretty(value), { cls: "json", ...opts });
}

export function details(summary, body, open = false) {
  return h("details", { open }, h("summary", {}, summary), body);
}

export function badge(text, kind) {
  return h("span", { class: `badge ${kind || ""}`, text });
}

export function nav(href, ...children) {
  return h("a", { href, "data-nav": true }, ...children);
}

// The page around every view: its main element, breadcrumbs, live badge, error card, the
// query string, and navigation without reload.
import { clear, h, nav } from "./dom.js";

export const app = document.getElementById("app");
const crumbs = document.getElementById("crumbs");
const liveBadge = document.getElementById("live");

export function showError(err) {
  clear(app);
  app.append(
    h(
      "div",
      { class: "card error-card" },
      h("h2", { text: err.status === 404 ? "Not found" : "Cannot show this" }),
      h("p", { text: err.message || String(err) }),
      nav("/", "All runs"),
    ),
  );
}

export function setCrumbs(...given) {
  clear(crumbs);
  const items = given.filter((item) => item !== null && item !== undefined);
  items.forEach((item, i) => {
    if (i) crumbs.append(h("span", { class: "sep", text: "›" }));
    crumbs.append(typeof item === "string" ? h("span", { text: item }) : item);
  });
}

export function setLive(state) {
  if (state !== "running") {
    liveBadge.hidden = true;
    return;
  }
  liveBadge.hidden = false;
  liveBadge.className = `live ${state}`;
  liveBadge.textContent = state === "running" ? "● live" : state;
}

let router = () => {};

// The function that draws the page of the current URL (app.js sets it).
export function setRouter(fn) {
  router = fn;
}

export function navigate(url, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  router();
}

export function query() {
  return new URLSearchParams(location.search);
}

export function setQuery(params) {
  const text = params.toString();
  history.replaceState(null, "", location.pathname + (text ? `?${text}` : "") + location.hash);
}

// A figure in a page's header: its label and value.
export function statBox(label, value, cls) {
  return h(
    "div",
    { class: "stat" },
    h("div", { class: "label", text: label }),
    h("div", { class: `value ${cls || ""}` }, value),
  );
}

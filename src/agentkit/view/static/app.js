// agentkit view: the page. Plain JavaScript modules, no build step: this one routes each
// URL to its page (pages/), which draw with the shared modules (lib/) and the charts
// (charts.js, with the Chart.js file shipped in vendor/).
// Everything from a run is put in the page as text (textContent), never as HTML.
import { ApiError, leave } from "./lib/api.js";
import { navigate, setLive, setRouter, showError } from "./lib/page.js";
import { comparePage } from "./pages/compare.js";
import { jobPage } from "./pages/job.js";
import { rolloutPage } from "./pages/rollout.js";
import { runPage } from "./pages/run.js";
import { runsPage } from "./pages/runs.js";

const dec = decodeURIComponent;

// Each page's URL, and how to draw it from what the URL holds.
const PAGES = [
  [/^\/(?:index\.html)?$/, () => runsPage()],
  [/^\/run\/([^/]+)\/?$/, (m) => runPage(dec(m[1]))],
  [/^\/run\/([^/]+)\/rollout\/([^/]+)\/?$/, (m) => rolloutPage(dec(m[1]), dec(m[2]))],
  [/^\/job\/([^/]+)\/?$/, (m) => jobPage(dec(m[1]))],
  [/^\/compare\/((?:[^/]+\/)+[^/]+)\/?$/, (m) => comparePage(m[1].split("/").map(dec))],
];

// Leave the page shown (its streams closed) and draw the one of the current URL.
function route() {
  leave();
  setLive(null);
  const path = location.pathname;
  const found = PAGES.map(([pattern, page]) => [path.match(pattern), page]).find(([m]) => m);
  const page = found ? found[1](found[0]) : Promise.reject(new ApiError(404, `no page ${path}`));
  page.catch(showError);
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a[data-nav]");
  if (!a || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", route);

setRouter(route);
route();

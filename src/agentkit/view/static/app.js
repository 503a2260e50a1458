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

function route() {
  leave();
  setLive(null);
  const path = location.pathname;
  const dec = decodeURIComponent;
  let m;
  let page;
  if (path === "/" || path === "/index.html") page = runsPage();
  else if ((m = path.match(/^\/run\/([^/]+)\/?$/))) page = runPage(dec(m[1]));
  else if ((m = path.match(/^\/run\/([^/]+)\/rollout\/([^/]+)\/?$/))) page = rolloutPage(dec(m[1]), dec(m[2]));
  else if ((m = path.match(/^\/job\/([^/]+)\/?$/))) page = jobPage(dec(m[1]));
  else if ((m = path.match(/^\/compare\/((?:[^/]+\/)+[^/]+)\/?$/))) page = comparePage(m[1].split("/").map(dec));
  else page = Promise.reject(new ApiError(404, `no page ${path}`));
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

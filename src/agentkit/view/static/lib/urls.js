// The page's own URLs: a run, a rollout, a job, a comparison, a task's rollouts in a run.

export const enc = encodeURIComponent;
export const runUrl = (run, query) => `/run/${enc(run)}${query ? `?${query}` : ""}`;
export const rolloutUrl = (run, rid) => `/run/${enc(run)}/rollout/${enc(rid)}`;
export const jobUrl = (job) => `/job/${enc(job)}`;
export const compareUrl = (names, query) =>
  `/compare/${names.map(enc).join("/")}${query ? `?${query}` : ""}`;
// A task's rollouts in a run: the run's rollouts tab filtered to that task.
export const taskUrl = (run, task) => runUrl(run, new URLSearchParams({ task }).toString());

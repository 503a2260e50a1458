// The viewer's JSON API and live streams: errors as ApiError, each stream closed when the
// page is left.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function api(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await resp.json();
  } catch (_) {
    body = null;
  }
  if (!resp.ok) throw new ApiError(resp.status, body?.error || `HTTP ${resp.status}`);
  return body;
}

let leaving = [];

// What to do when the page is left (close its streams).
export const onLeave = (fn) => leaving.push(fn);

// Leave the page: everything onLeave asked for is done.
export function leave() {
  for (const fn of leaving) fn();
  leaving = [];
}

export function stream(url, handlers) {
  const source = new EventSource(url);
  for (const [name, fn] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => fn(JSON.parse(event.data)));
  }
  onLeave(() => source.close());
  return source;
}

// Run fn at most once at a time; a call while it runs schedules one more run.
export function serial(fn) {
  let running = false;
  let again = false;
  return async function go() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await fn();
    } catch (err) {
      console.error(err);
    } finally {
      running = false;
      if (again) {
        again = false;
        go();
      }
    }
  };
}

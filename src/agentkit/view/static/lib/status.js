// A run's state and a rollout's status as badges and colour classes.
import { badge } from "./dom.js";

export function stateBadge(state) {
  const kinds = {
    running: "live",
    complete: "ok",
    incomplete: "warn",
    interrupted: "warn",
    stopped: "warn",
  };
  return badge(state, kinds[state] || "");
}

export function rewardClass(row) {
  if (row.status === "running") return "running";
  if (row.status === "interrupted") return "warn";
  if (row.status === "pending") return "pending";
  if (row.infrastructure) return "infra"; // it could not run: no answer, no reward
  if (!row.ok && row.ok !== undefined) return "err";
  if (row.passed === true) return "ok";
  if (row.passed === false) return "bad";
  return "";
}

export function statusBadge(row) {
  if (row.status === "running") return badge("running", "live");
  if (row.status === "interrupted") return badge("interrupted", "warn");
  if (row.infrastructure) return badge("could not run", "infra");
  if (row.status !== "completed") return badge(row.status, "err");
  if (!row.ok) return badge("scoring error", "err");
  return badge(row.passed ? "passed" : "not passed", row.passed ? "ok" : "bad");
}

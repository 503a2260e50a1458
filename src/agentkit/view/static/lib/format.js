// Numbers, times, sizes and values as the pages show them ("–" for none).

export function num(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  return value.toFixed(digits);
}

export function fixed(value, digits) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

export const mean = (value) => fixed(value, 3);

export function int(value) {
  return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
}

// "1 run", "2 runs": a count and its word, plural unless it is one.
export const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

export function money(value) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "$0";
  return value < 0.01 ? `$${value.toPrecision(2)}` : `$${value.toFixed(value < 100 ? 4 : 2)}`;
}

export function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${value.toFixed(value < 10 ? 2 : 1)} s`;
  const m = Math.floor(value / 60);
  return m < 120 ? `${m} min ${Math.round(value % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function date(ts) {
  if (!ts) return "–";
  const d = new Date(ts * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  return `${day} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function passK(pass) {
  const keys = Object.keys(pass || {}).sort((a, b) => Number(a) - Number(b));
  if (!keys.length) return "–";
  return keys.map((k) => `@${k} ${fixed(pass[k], 2)}`).join("  ");
}

export function preview(value, max = 160) {
  let text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) return "";
  text = text.replace(/\s+/g, " ").trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function textOf(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => {
        if (typeof part === "string") return part;
        if (part && typeof part.text === "string") return part.text;
        if (part && part.type === "image_url") return "[image]";
        return JSON.stringify(part);
      })
      .join("\n");
  }
  return JSON.stringify(content, null, 2);
}

export function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch (_) {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

export function interval(low, high, signed = false) {
  if (low === null || low === undefined) return "–";
  const f = (v) => (signed && v > 0 ? "+" : "") + v.toFixed(3);
  return `[${f(low)}, ${f(high)}]`;
}

export function signed(value) {
  if (value === null || value === undefined) return "–";
  return (value > 0 ? "+" : "") + value.toFixed(3);
}

export function pValue(p) {
  if (p === null || p === undefined) return "–";
  return p < 0.0001 ? "< 0.0001" : p.toPrecision(2);
}

// The leaderboard: each row's mean reward with its 95% interval drawn, then the table.

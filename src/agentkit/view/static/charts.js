// agentkit view: the charts. Drawn by Chart.js (static/vendor/, shipped in the wheel and
// loaded from this server the first time a page draws a chart: nothing comes from elsewhere).
// The numbers come binned from the server (/api/charts, /api/compare, /api/job).

const LIBRARY = "/static/vendor/chart.umd.min.js";
let loading = null;

// Chart.js, loaded once (a <script> of this origin: the page's CSP allows it).
export function ready() {
  if (window.Chart) return Promise.resolve(window.Chart);
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = LIBRARY;
      script.onload = () => {
        configure(window.Chart);
        resolve(window.Chart);
      };
      script.onerror = () => {
        loading = null;
        reject(new Error(`cannot load the charting library (${LIBRARY})`));
      };
      document.head.append(script);
    });
  }
  return loading;
}

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function configure(Chart) {
  Chart.defaults.color = css("--muted");
  Chart.defaults.borderColor = css("--line");
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  Chart.defaults.animation = false; // drawn at once: what is on screen is the data
  Chart.defaults.maintainAspectRatio = false;
}

// One colour per run or cell, in order.
const COLOURS = [
  "#3b5bdb",
  "#e8590c",
  "#2b8a3e",
  "#ae3ec9",
  "#1098ad",
  "#c92a2a",
  "#f59f00",
  "#5c940d",
  "#d6336c",
  "#495057",
];
export const colour = (i) => COLOURS[i % COLOURS.length];

function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}

// A mean reward's colour on the heat map: red (low) through yellow to green (high).
export function heat(value, low = 0, high = 1) {
  if (value === null || value === undefined) return null;
  const span = high - low || 1;
  const t = Math.max(0, Math.min(1, (value - low) / span));
  const dark = matchMedia("(prefers-color-scheme: dark)").matches;
  return `hsl(${Math.round(t * 120)}, ${dark ? 45 : 65}%, ${dark ? 32 : 72}%)`;
}

export function format(value, unit) {
  if (value === null || value === undefined) return "–";
  if (unit === "$")
    return value < 0.01 && value !== 0 ? `$${value.toPrecision(2)}` : `$${value.toFixed(4)}`;
  if (unit === "s")
    return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(value < 10 ? 2 : 1)} s`;
  if (unit === "tokens") return Math.round(value).toLocaleString("en-US");
  return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(3)));
}

// Size a canvas's box (Chart.js fills its parent) and make the chart.
function make(Chart, canvas, height, config) {
  const box = canvas.parentElement;
  box.style.height = `${height}px`;
  const old = Chart.getChart(canvas);
  if (old) old.destroy();
  return new Chart(canvas, config);
}

// A vertical line at x = 0 (a difference of nothing), under the data.
const zeroLine = {
  id: "agentkitZero",
  beforeDatasetsDraw(chart, _args, opts) {
    if (!opts?.show) return;
    const x = chart.scales.x.getPixelForValue(0);
    const { top, bottom } = chart.chartArea;
    const ctx = chart.ctx;
    ctx.save();
    ctx.strokeStyle = css("--muted");
    ctx.setLineDash([4, 4]);
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, bottom);
    ctx.stroke();
    ctx.restore();
  },
};

// Means with their intervals, one row each (a forest plot): the leaderboard's rows,
// or each run's difference from a baseline (zero: true draws the line of no difference).
export async function forest(canvas, rows, { zero = false, title = "", level = "95%" } = {}) {
  const Chart = await ready();
  const labels = rows.map((r) => r.label);
  const text = css("--text");
  const accent = css("--accent");
  return make(Chart, canvas, 46 + 30 * rows.length, {
    type: "bar",
    data: {
      labels,
      datasets: [
        {
          type: "bar",
          label: `${level} interval`,
          data: rows.map((r) => (r.low === null || r.low === undefined ? null : [r.low, r.high])),
          backgroundColor: rows.map((r, i) => alpha(r.colour || colour(i), 0.35)),
          borderColor: rows.map((r, i) => r.colour || colour(i)),
          borderWidth: 1,
          borderSkipped: false,
          barPercentage: 0.45,
          categoryPercentage: 1,
          grouped: false,
        },
        {
          type: "scatter",
          label: "mean",
          data: rows.map((r) => ({ x: r.mean, y: r.label })),
          backgroundColor: text,
          borderColor: text,
          pointRadius: 4.5,
          pointHoverRadius: 6,
        },
      ],
    },
    options: {
      indexAxis: "y",
      scales: {
        x: {
          type: "linear",
          title: { display: !!title, text: title },
          grid: { color: css("--line") },
        },
        y: { type: "category", labels, grid: { display: false }, ticks: { color: css("--text") } },
      },
      plugins: {
        legend: { display: false },
        agentkitZero: { show: zero },
        tooltip: {
          callbacks: {
            label: (item) => {
              const r = rows[item.dataIndex];
              const ci =
                r.low === null || r.low === undefined
                  ? "no interval"
                  : `${level} CI [${sign(r.low, zero)}, ${sign(r.high, zero)}]`;
              return `${sign(r.mean, zero)}  ${ci}`;
            },
          },
        },
      },
      color: accent,
    },
    plugins: [zeroLine],
  });
}

// Durations and costs carry their unit on every tick; tokens say it once.
const axisTitle = (chart) =>
  chart.unit === "tokens" ? chart.label.replace(/ \(.*/, "") : chart.label;

function sign(value, signed) {
  if (value === null || value === undefined) return "–";
  return (signed && value > 0 ? "+" : "") + value.toFixed(3);
}

// A bar per reward value, or per bin labelled by its lower edge (its tooltip: the range).
function binLabels(chart) {
  if (chart.kind === "discrete") return chart.values.map((v) => format(v, chart.unit));
  return chart.edges.slice(0, -1).map((v) => format(v, chart.unit));
}

function binRange(chart, i) {
  if (chart.kind === "discrete") return `reward ${format(chart.values[i], chart.unit)}`;
  const last = i === chart.edges.length - 2;
  const [low, high] = [format(chart.edges[i], chart.unit), format(chart.edges[i + 1], chart.unit)];
  return `${low} to ${high}${last ? " (inclusive)" : ""}`;
}

// A histogram of one metric: a bar per bin (or per reward value), a series per run,
// each as its share of the run's rollouts so that runs of any size compare.
export async function histogram(canvas, chart, names) {
  const Chart = await ready();
  const labels = binLabels(chart);
  return make(Chart, canvas, 240, {
    type: "bar",
    data: {
      labels,
      datasets: chart.series.map((s, i) => ({
        label: names ? names[i] : s.run,
        data: s.counts.map((c) => (s.n ? (100 * c) / s.n : 0)),
        counts: s.counts,
        backgroundColor: alpha(colour(i), 0.75),
        borderColor: colour(i),
        borderWidth: 1,
      })),
    },
    options: {
      scales: {
        x: {
          title: { display: true, text: axisTitle(chart) },
          grid: { display: false },
          ticks: { maxRotation: 0, autoSkipPadding: 12 },
        },
        y: { beginAtZero: true, title: { display: true, text: "% of rollouts" } },
      },
      plugins: {
        legend: { display: chart.series.length > 1 },
        tooltip: {
          callbacks: {
            title: (items) => binRange(chart, items[0].dataIndex),
            label: (item) => {
              const s = chart.series[item.datasetIndex];
              const share = `${item.parsed.y.toFixed(1)}%`;
              return `${item.dataset.label}: ${s.counts[item.dataIndex]} of ${s.n} (${share})`;
            },
          },
        },
      },
    },
  });
}

// Box plots of one metric, a row per run: the box from the 25th to the 75th percentile,
// the whiskers from the 5th to the 95th, a bar at the median and a dot at the mean.
export async function boxplot(canvas, chart, names) {
  const Chart = await ready();
  const labels = chart.series.map((s, i) => (names ? names[i] : s.run));
  const rows = chart.series.map((s) => s.summary);
  const text = css("--text");
  const range = (lo, hi) => rows.map((q) => (q ? [q[lo], q[hi]] : null));
  return make(Chart, canvas, 46 + 34 * labels.length, {
    type: "bar",
    data: {
      labels,
      datasets: [
        {
          type: "bar",
          label: "5th–95th percentile",
          data: range("p5", "p95"),
          backgroundColor: chart.series.map((_, i) => colour(i)),
          barPercentage: 0.06,
          categoryPercentage: 1,
          grouped: false,
        },
        {
          type: "bar",
          label: "25th–75th percentile",
          data: range("q1", "q3"),
          backgroundColor: chart.series.map((_, i) => alpha(colour(i), 0.4)),
          borderColor: chart.series.map((_, i) => colour(i)),
          borderWidth: 1.5,
          borderSkipped: false,
          barPercentage: 0.6,
          categoryPercentage: 1,
          grouped: false,
        },
        {
          type: "scatter",
          label: "median",
          data: rows.map((q, i) => (q ? { x: q.median, y: labels[i] } : null)),
          pointStyle: "line",
          rotation: 90,
          pointRadius: 10,
          borderWidth: 2.5,
          borderColor: text,
        },
        {
          type: "scatter",
          label: "mean",
          data: rows.map((q, i) => (q ? { x: q.mean, y: labels[i] } : null)),
          pointRadius: 3.5,
          backgroundColor: css("--card"),
          borderColor: text,
          borderWidth: 1.5,
        },
      ],
    },
    options: {
      indexAxis: "y",
      scales: {
        x: { type: "linear", title: { display: true, text: axisTitle(chart) } },
        y: { type: "category", labels, grid: { display: false }, ticks: { color: text } },
      },
      plugins: {
        legend: { display: false },
        tooltip: {
          callbacks: {
            title: (items) => labels[items[0].dataIndex],
            label: (item) => {
              const q = rows[item.dataIndex];
              const s = chart.series[item.dataIndex];
              if (!q) return "none";
              const f = (v) => format(v, chart.unit);
              return [
                `n ${s.n}  mean ${f(q.mean)}  median ${f(q.median)}`,
                `25th–75th ${f(q.q1)}–${f(q.q3)}`,
                `5th–95th ${f(q.p5)}–${f(q.p95)}`,
                `least ${f(q.min)}  most ${f(q.max)}`,
              ];
            },
          },
        },
      },
    },
  });
}

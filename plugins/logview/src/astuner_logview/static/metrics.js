// astuner logview: the Metrics, Config and Log tabs. Loaded before app.js.
"use strict";

// -------------------------------------------------------------- other tabs

function chart(key, points) {
  const W = 320, H = 140, P = 28;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = (x) => P + ((x - x0) / (x1 - x0 || 1)) * (W - 2 * P);
  const sy = (y) => H - P - ((y - y0) / (y1 - y0 || 1)) * (H - 2 * P);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "chart-svg");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
  };
  add("line", { x1: P, y1: H - P, x2: W - P, y2: H - P, class: "axis" });
  add("line", { x1: P, y1: P, x2: P, y2: H - P, class: "axis" });
  add("polyline", { points: points.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" "), class: "series" });
  for (const p of points) {
    // Each point opens its step's trajectories.
    const dot = document.createElementNS(ns, "circle");
    for (const [k, v] of Object.entries({ cx: sx(p[0]), cy: sy(p[1]), r: 3, class: "dot", "data-step": p[0] })) dot.setAttribute(k, v);
    const tip = document.createElementNS(ns, "title");
    tip.textContent = `step ${p[0]}: ${fmt(p[1], 4)} (click: this step's trajectories)`;
    dot.append(tip);
    dot.addEventListener("click", () => showStep(p[0]));
    svg.append(dot);
  }
  add("text", { x: 2, y: P + 4, class: "tick" }, fmt(y1, 3));
  add("text", { x: 2, y: H - P, class: "tick" }, fmt(y0, 3));
  add("text", { x: P, y: H - 8, class: "tick" }, `step ${x0}`);
  add("text", { x: W - P, y: H - 8, class: "tick", "text-anchor": "end" }, `${x1}`);
  const caption = el("figcaption", { title: key },
    el("span", { text: `${metricName(key)} (last ${fmt(ys[ys.length - 1], 4)})` }), el("span", { class: "key", text: key }));
  return el("figure", { class: "chart", data: { key } }, caption, svg);
}

// What a metric is, in words; the key stays under it.
const METRIC_NAMES = {
  "train/reward_mean": "mean judge reward", "reward/mean": "mean judge reward",
  "train/reward_std": "judge reward spread (std)", "train/success_rate": "share of successful rollouts",
  "success/rate": "share of successful rollouts", "train/error_rate": "share of rollouts that raised",
  "train/madness_rate": "share of rollouts flagged by madness checks",
  "train/zero_adv_group_frac": "share of groups with equal rewards (no signal)",
  "train/response_tokens_mean": "mean reply tokens per call", "train/trained_tokens": "tokens trained",
  "train/turns_mean": "mean model calls per rollout", "train/tool_call_rate": "share of rollouts calling a tool",
  "train/tool_parse_failures": "tool calls that did not parse", "train/truncation_rate": "share of replies cut at the token limit",
  "actor/entropy": "mean token entropy", "actor/grad_norm": "gradient norm (before clipping)",
  "actor/clip_frac": "share of tokens clipped by PPO", "actor/logprob_gap": "|trainer - sampler| log-prob",
  "actor/lr": "learning rate", "actor/loss": "loss", "actor/pg_loss": "policy-gradient loss",
  "timing/step_s": "seconds per step", "timing/rollout_s": "seconds of rollouts", "timing/update_s": "seconds of update",
  "rollout/prompt_tokens_reused_frac": "share of prompt tokens from stored keys and values",
};

function metricName(key) {
  if (METRIC_NAMES[key]) return METRIC_NAMES[key];
  const val = key.match(/^val(?:idation)?\/(.*)$/);
  return val && METRIC_NAMES[`train/${val[1]}`] ? `validation: ${METRIC_NAMES[`train/${val[1]}`]}` : key;
}

async function showStep(step) {
  // The step's rollout file, in the trajectory list (filter "step").
  const select = document.getElementById("filters").elements.step;
  if (![...select.options].some((o) => o.value === String(step))) {
    setStatus(`no rollouts recorded for step ${step}`, true);
    return;
  }
  select.value = String(step);
  state.offset = 0;
  await loadTrajectories();
}

const CHART_ORDER = [/reward/, /success/, /token|length|len/, /time|_s$|sec/];

function chartRank(key) {
  const i = CHART_ORDER.findIndex((re) => re.test(key));
  return i < 0 ? CHART_ORDER.length : i;
}

async function renderMetrics() {
  const { rows, health } = await api("metrics", { run: state.run });
  const box = el("div", { class: "metrics" }, el("h3", { text: "Metrics" }));
  if (health.length) {
    box.append(el("div", { class: "health" }, el("strong", { text: "Health warnings" }),
      el("ul", {}, health.map((h) => el("li", { text: `step ${h.step}: ${h.text}` })))));
  }
  const series = new Map();
  rows.forEach((row, i) => {
    const step = typeof row.step === "number" ? row.step : i;
    for (const [key, value] of Object.entries(row)) {
      if (key === "step" || typeof value !== "number") continue;
      if (!series.has(key)) series.set(key, []);
      series.get(key).push([step, value]);
    }
  });
  if (!series.size) {
    box.append(el("p", { class: "muted", text: "No metrics.jsonl in this run (debug runs write none)." }));
    return box;
  }
  const keys = [...series.keys()].sort((a, b) => chartRank(a) - chartRank(b) || a.localeCompare(b));
  box.append(el("div", { class: "charts" }, keys.map((key) => chart(key, series.get(key)))));
  return box;
}

async function renderFile(name) {
  const text = await fetchText({ run: state.run, name });
  return el("div", {}, el("h3", { text: name }), text === null ? el("p", { class: "muted", text: `No ${name} in this run.` }) : el("pre", { class: "file", text }));
}


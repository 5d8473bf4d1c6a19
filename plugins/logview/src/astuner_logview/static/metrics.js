// astuner logview: the Metrics, Config and Log tabs. Loaded before app.js.
"use strict";

// -------------------------------------------------------------- other tabs

function chart(key, points, meta) {
  const W = 320, H = 140, P = 28;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  // A flat series (an untrained agent's reward, a constant count) is drawn mid-height between two
  // distinct ticks, not on the x axis under one value printed twice.
  const [low, high] = [Math.min(...ys), Math.max(...ys)];
  const pad = high > low ? 0 : Math.abs(low) / 10 || 1;
  const [y0, y1] = [low - pad, high + pad];
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
  // The caption is the metric's declared label (a judge metric's: its name) and unit, the key under it;
  // hovering it tells what the metric measures and which way is better.
  return el("figure", { class: "chart", data: { key } }, caption(key, meta, ys[ys.length - 1]), svg);
}

function caption(key, meta, last) {
  if (!meta) {
    return el("figcaption", { title: key },
      el("span", { text: `${key} (last ${fmt(last, 4)})` }), el("span", { class: "key", text: key }));
  }
  const split = meta.split && meta.split !== "train" ? `${SPLIT_NAMES[meta.split] || meta.split}: ` : "";
  const unit = meta.unit ? ` ${meta.unit}` : "";
  const better = { up: " (higher is better)", down: " (lower is better)" }[meta.good] || "";
  return el("figcaption", { title: `${meta.description}${better}\n${key}` },
    el("span", { text: `${split}${meta.label} (last ${fmt(last, 4)}${unit})` }), el("span", { class: "key", text: key }));
}

const SPLIT_NAMES = { val: "validation", validation: "validation", eval: "eval", debug: "debug" };

// A section per declared group, in the declarations' order; the judge's numbers as their own.
const GROUP_TITLES = { judge: "judge metrics" };

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

function groupCharts(series, declarations) {
  const meta = new Map(declarations.map((d) => [d.key, d]));
  // group -> label -> keys: the splits of one metric side by side (train, then validation), also
  // where one declaration names several metrics (an agent's judge numbers, `agent: wolf`).
  const groups = new Map();
  const place = (group, label, key) => {
    if (!groups.has(group)) groups.set(group, new Map());
    const labels = groups.get(group);
    if (!labels.has(label)) labels.set(label, []);
    labels.get(label).push(key);
  };
  for (const d of declarations) if (series.has(d.key)) place(d.group || "other", d.label, d.key);
  for (const key of series.keys()) if (!meta.has(key)) place("other", key, key);
  return [...groups.entries()].map(([group, labels]) =>
    el("section", { class: "chart-group", data: { group } },
      el("h4", { text: GROUP_TITLES[group] || group }),
      el("div", { class: "charts" },
        [...labels.values()].flat().map((key) => chart(key, series.get(key), meta.get(key))))));
}

function healthLine(h) {
  const acknowledged = h.acknowledged ? " (acknowledged in the config)" : "";
  return `${h.check}${acknowledged}, on ${h.steps} of ${h.of} steps; first at step ${h.step}: ${h.text}`;
}

async function renderMetrics() {
  const { rows, metrics, health } = await api("metrics", { run: state.run });
  const box = el("div", { class: "metrics" }, el("h3", { text: "Metrics" }));
  if (health.length) {
    box.append(el("div", { class: "health" }, el("strong", { text: "Health warnings" }),
      el("ul", {}, health.map((h) => el("li", { text: healthLine(h) })))));
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
  box.append(...groupCharts(series, metrics));
  return box;
}

async function renderFile(name) {
  const text = await fetchText({ run: state.run, name });
  return el("div", {}, el("h3", { text: name }), text === null ? el("p", { class: "muted", text: `No ${name} in this run.` }) : el("pre", { class: "file", text }));
}


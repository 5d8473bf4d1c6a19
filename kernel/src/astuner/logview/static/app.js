// astuner logview: runs -> trajectories -> one trajectory (conversation and training tokens).
//
// Every piece of text from a log reaches the page through textContent or a
// text node, never as markup, so model output such as "<script>" shows as
// written. State lives in the URL hash (run, file, line, tab) so views can be
// linked and reloaded.
"use strict";

const BLUE = "#09ABCF"; // loss mask 1: the token is trained on
const ORANGE = "#D98510"; // loss mask 0: prompt, tool output, template tokens
const LOGPROB_FLOOR = -7; // log-probs at or below this get the palest shade
const TOKEN_CHUNK = 1000; // tokens per block; blocks off screen are not laid out
const PAGE = 50;

const state = { run: null, file: null, line: null, tab: "trajectory", offset: 0, view: null };

// ------------------------------------------------------------------ helpers

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else if (key === "data") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  if (Array.isArray(value)) return "[" + value.map((v) => fmt(v, digits)).join(", ") + "]";
  return String(value);
}

function setStatus(text, isError = false) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.classList.toggle("error", isError);
}

async function api(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") query.set(k, v);
  const response = await fetch(`/api/${path}?${query}`);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.detail || `${response.status} ${response.statusText}`);
  return body;
}

async function fetchText(params) {
  const response = await fetch(`/api/file?${new URLSearchParams(params)}`);
  if (!response.ok) return null;
  return response.text();
}

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  state.run = params.get("run");
  state.file = params.get("file");
  state.line = params.has("line") ? Number(params.get("line")) : null;
  state.tab = params.get("tab") || "trajectory";
}

function writeHash() {
  const params = new URLSearchParams();
  if (state.run !== null) params.set("run", state.run);
  if (state.file !== null) params.set("file", state.file);
  if (state.line !== null) params.set("line", state.line);
  if (state.tab !== "trajectory") params.set("tab", state.tab);
  history.replaceState(null, "", "#" + params);
}

// ----------------------------------------------------------------- colours

function hexToHsl(hex) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
  const max = Math.max(r, g, b), min = Math.min(r, g, b), l = (max + min) / 2;
  if (max === min) return [0, 0, l];
  const d = max - min;
  const s = l > 0.5 ? d / (2 - max - min) : d / (max + min);
  const h = max === r ? (g - b) / d + (g < b ? 6 : 0) : max === g ? (b - r) / d + 2 : (r - g) / d + 4;
  return [h / 6, s, l];
}

function hslToRgb(h, s, l) {
  const hue = (p, q, t) => {
    t = (t + 1) % 1;
    if (t < 1 / 6) return p + (q - p) * 6 * t;
    if (t < 1 / 2) return q;
    if (t < 2 / 3) return p + (q - p) * (2 / 3 - t) * 6;
    return p;
  };
  if (s === 0) return [l, l, l].map((v) => Math.round(v * 255));
  const q = l < 0.5 ? l * (1 + s) : l + s - l * s, p = 2 * l - q;
  return [hue(p, q, h + 1 / 3), hue(p, q, h), hue(p, q, h - 1 / 3)].map((v) => Math.round(v * 255));
}

const BASE = { 1: hexToHsl(BLUE), 0: hexToHsl(ORANGE) };
const colourCache = new Map();

// Blue for trained tokens, orange otherwise; the saturation falls from full
// (log-prob 0) to a third (log-prob -7 or lower), so unlikely samples look pale.
function tokenColour(mask, logprob) {
  const clipped = logprob === null ? 0 : Math.max(LOGPROB_FLOOR, Math.min(0, logprob));
  const key = `${mask}:${clipped.toFixed(3)}`;
  if (!colourCache.has(key)) {
    const factor = 1 / 3 + (2 / 3) * (1 - clipped / LOGPROB_FLOOR);
    const [h, s, l] = BASE[mask ? 1 : 0];
    colourCache.set(key, `rgb(${hslToRgb(h, s * factor, l).join(", ")})`);
  }
  return colourCache.get(key);
}

// --------------------------------------------------------------------- runs

async function loadRuns() {
  const data = await api("runs");
  document.getElementById("root").textContent = data.root;
  const box = document.getElementById("runs");
  box.replaceChildren();
  if (!data.runs.length) {
    box.append(el("p", { class: "muted", text: "No runs here yet (a run folder holds config.yaml or rollouts/)." }));
    return;
  }
  const table = el("table", { class: "grid" },
    el("thead", {}, el("tr", {}, ["experiment", "started", "status", "steps", "mean judge reward"]
      .map((h) => el("th", { text: h })))));
  const body = el("tbody");
  for (const run of data.runs) {  // newest first
    const reward = run.mean_reward;
    const why = run.status_reason ? `\n${run.status}: ${run.status_reason}` : "";
    const row = el("tr", { class: `run-row state-${run.status}`, data: { run: run.id },
      title: `${run.id}\n${run.time}\nbackbone: ${run.backbone}\nmodel: ${run.model}${why}`,
      on: { click: () => selectRun(run.id) } },
      // Month, day and minute are enough to tell runs apart; the full time is in the tooltip.
      el("td", { text: run.experiment }), el("td", { text: run.time.slice(5, 16) }),
      el("td", { class: "run-status", text: run.status === "unknown" ? "–" : run.status }),
      el("td", { class: "num", text: run.steps }), el("td", { class: "num", text: fmt(reward) }));
    body.append(row);
  }
  table.append(body);
  box.append(table);
  const known = data.runs.map((r) => r.id);
  if (state.run !== null && known.includes(state.run)) await selectRun(state.run, true);
  else if (known.length === 1) await selectRun(known[0]);
}

async function selectRun(id, keepSelection = false) {
  if (!keepSelection) {
    state.file = null;
    state.line = null;
  }
  state.run = id;
  state.offset = 0;
  for (const row of document.querySelectorAll(".run-row")) row.classList.toggle("selected", row.dataset.run === id);
  writeHash();
  await loadTrajectories();
  if (state.file !== null && state.line !== null) await selectTrajectory(state.file, state.line);
  else await showTab(state.tab === "trajectory" ? "metrics" : state.tab);
}

// ------------------------------------------------------------- trajectories

function filterParams() {
  const form = document.getElementById("filters");
  const params = {};
  for (const [key, value] of new FormData(form)) params[key] = value;
  return params;
}

function fillSelect(select, values) {
  const current = select.value;
  select.replaceChildren(el("option", { value: "", text: "any" }), ...values.map((v) => el("option", { value: v, text: v })));
  select.value = values.includes(current) ? current : "";
}

async function loadTrajectories() {
  if (state.run === null) return;
  setStatus("loading trajectories…");
  const page = await api("trajectories", { run: state.run, offset: state.offset, limit: PAGE, ...filterParams() });
  const form = document.getElementById("filters");
  fillSelect(form.elements.step, page.steps);
  fillSelect(form.elements.agent, page.agents);
  const box = document.getElementById("trajectories");
  const table = el("table", { class: "grid" }, el("thead", {}, el("tr", {},
    ["step", "task", "reward", "success", "turns", "agents", "flags"].map((h) => el("th", { text: h })))));
  const body = el("tbody");
  for (const item of page.items) {
    const flags = [];
    if (item.madness.length) flags.push(el("span", { class: "flag madness", title: item.madness.join("\n"), text: "madness" }));
    if (item.error) flags.push(el("span", { class: "flag error", title: item.error, text: "error" }));
    const row = el("tr", { class: "trajectory-row", data: { file: item.file, line: item.line },
      title: item.trajectory_id, on: { click: () => selectTrajectory(item.file, item.line) } },
      el("td", { text: item.step }), el("td", { text: item.task_id }), el("td", { class: "num", text: fmt(item.reward) }),
      el("td", { text: item.is_success === null ? "–" : item.is_success ? "yes" : "no" }),
      el("td", { class: "num", text: item.turns }), el("td", { text: item.agents.join(", ") }), el("td", {}, flags));
    body.append(row);
  }
  table.append(body);
  box.replaceChildren(page.items.length ? table : el("p", { class: "muted", text: "No trajectory matches." }));
  markSelectedRow();
  renderPager(page);
  setStatus(`${page.trajectories} trajectories` + (page.bad_lines ? `, ${page.bad_lines} unreadable lines` : ""));
}

function renderPager(page) {
  const pager = document.getElementById("pager");
  const end = Math.min(page.offset + page.limit, page.total);
  const prev = el("button", { type: "button", text: "‹ prev", on: { click: () => movePage(-PAGE) } });
  const next = el("button", { type: "button", text: "next ›", on: { click: () => movePage(PAGE) } });
  prev.disabled = page.offset === 0;
  next.disabled = end >= page.total;
  pager.replaceChildren(prev, el("span", { text: page.total ? `${page.offset + 1}–${end} of ${page.total}` : "0" }), next);
}

async function movePage(delta) {
  state.offset = Math.max(0, state.offset + delta);
  await loadTrajectories();
}

function markSelectedRow() {
  for (const row of document.querySelectorAll(".trajectory-row"))
    row.classList.toggle("selected", row.dataset.file === state.file && Number(row.dataset.line) === state.line);
}

async function selectTrajectory(file, line) {
  state.file = file;
  state.line = line;
  state.tab = "trajectory";
  writeHash();
  markSelectedRow();
  setStatus("loading trajectory…");
  try {
    state.view = await api("trajectory", { run: state.run, file, line });
  } catch (err) {
    setStatus(err.message, true);
    return;
  }
  await showTab("trajectory");
  setStatus(`${state.view.trajectory_id}`);
}

// --------------------------------------------------------- detail: header

function keyValues(pairs) {
  return el("dl", { class: "kv" }, pairs.filter(([, v]) => v !== undefined).map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
}

function jsonBlock(summary, value, open = false) {
  const details = el("details", {}, el("summary", { text: summary }), el("pre", { text: JSON.stringify(value, null, 2) }));
  details.open = open;
  return details;
}

function renderSummary(view) {
  const adv = view.advantage;
  const advText = adv.error ? `not computed: ${adv.error}`
    : adv.steps === null || adv.steps === undefined ? "– (not trained)"
    : `${fmt(adv.steps, 4)} (${adv.estimator}, group of ${adv.group_size}${adv.zero_variance ? ", zero variance" : ""})`;
  const outcome = view.metadata.workflow_output || null;
  const box = el("div", { class: "summary" },
    el("h3", { text: `Trajectory ${view.trajectory_id}` }),
    keyValues([
      ["task", view.task_id], ["step", view.step], ["reward", el("span", { class: "reward", text: fmt(view.reward, 4) })],
      ["success", view.is_success === null ? "–" : view.is_success ? "yes" : "no"],
      ["advantage", el("span", { class: "advantage", text: advText })],
      ["madness", view.madness.length ? view.madness.join("; ") : "none"],
      ["samples", `${view.merge.samples} from ${view.merge.calls} trainable calls: ${view.merge.tokens} tokens (${view.merge.tokens_unmerged} unmerged)` +
        ` · ${view.merge.breaks.length} prefix break${view.merge.breaks.length === 1 ? "" : "s"} · ${view.merge.drifts} drifted`],
      ["judge metrics", Object.keys(view.metrics).length ? Object.entries(view.metrics).map(([k, v]) => `${k}=${fmt(v)}`).join("  ") : "–"],
      ["timings", Object.entries(view.timings).map(([k, v]) => `${k}=${fmt(v, 2)}`).join("  ") || "–"],
    ]));
  if (view.error) box.append(el("div", { class: "error-box" }, el("strong", { text: "The workflow raised:" }), el("pre", { class: "traceback", text: view.error })));
  if (outcome) box.append(jsonBlock("workflow output", outcome));
  if (view.metadata.task) box.append(jsonBlock("task", view.metadata.task));
  return box;
}

// ---------------------------------------------------- detail: conversation

function toolCallBox(call) {
  let args = call.arguments;
  try { args = JSON.stringify(JSON.parse(call.arguments), null, 2); } catch { /* shown as written */ }
  return el("div", { class: "tool-call" }, el("span", { class: "tool-name", text: `→ ${call.name}` }),
    el("span", { class: "muted", text: ` ${call.id}` }), el("pre", { text: args }));
}

function messageBox(message) {
  const role = message.role || "?";
  const content = typeof message.content === "string" ? message.content : JSON.stringify(message.content, null, 2);
  const box = el("div", { class: `message role-${role}` }, el("div", { class: "role", text: role + (message.tool_call_id ? ` (${message.tool_call_id})` : "") }));
  if (message.reasoning_content) box.append(el("details", {}, el("summary", { text: "reasoning" }), el("pre", { text: message.reasoning_content })));
  if (content) box.append(el("pre", { class: "content", text: content }));
  for (const call of message.tool_calls || []) {
    const fn = call.function || call;
    box.append(toolCallBox({ id: call.id || "", name: fn.name, arguments: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments) }));
  }
  return box;
}

function renderConversation(view) {
  const box = el("div", { class: "conversation" }, el("h3", { text: "Conversation" }));
  const breaks = new Map(view.merge.breaks.map((b) => [b.call, b]));
  for (const turn of view.turns) {
    const r = turn.response;
    const brk = breaks.get(turn.call);
    const head = el("div", { class: "turn-head" },
      `call ${turn.call} · ${turn.agent} · ${r.prompt_tokens} prompt + ${r.response_tokens} generated tokens · ${r.finish_reason}` +
      (r.policy_version == null ? "" : ` · policy v${r.policy_version}`) +
      (r.trainable ? "" : " · not trained") + (turn.tools.length ? ` · tools: ${turn.tools.join(", ")}` : ""),
      brk && el("span", { class: "flag break", title: brk.note, text: `new sample: ${brk.reason}` }));
    const reply = el("div", { class: "message role-assistant generated" }, el("div", { class: "role", text: "assistant (generated)" }));
    if (r.reasoning) reply.append(el("details", {}, el("summary", { text: "reasoning" }), el("pre", { text: r.reasoning })));
    if (r.content) reply.append(el("pre", { class: "content", text: r.content }));
    for (const call of r.tool_calls) reply.append(toolCallBox(call));
    for (const bad of r.tool_call_errors) reply.append(el("div", { class: "tool-error" }, el("strong", { text: `tool call not parsed (the agent got the text): ${bad.error}` }), el("pre", { text: bad.raw })));
    if (r.madness.length) reply.append(el("div", { class: "flag madness", text: r.madness.join("; ") }));
    box.append(el("section", { class: "turn" }, head, turn.messages.map(messageBox), reply));
  }
  return box;
}

// ---------------------------------------------------------- detail: tokens

function tokenLabel(text, id) {
  if (text === null) return `#${id}`;
  return text.replace(/\n/g, "↵\n").replace(/\t/g, "→\t");
}

function renderSample(sample, number, withText) {
  const n = sample.ids.length;
  const boundaries = new Map();
  let promptStart = 0;
  for (const [start, end, call] of sample.spans) {
    boundaries.set(promptStart, `call ${call}`);
    if (start !== promptStart) boundaries.set(start, "▸ reply");
    promptStart = end;
  }
  // Prefix breaks: where this sample's prompt parts from an earlier sample ("starts"),
  // or where a later call's prompt parts from this one ("parted"), at the first differing token.
  const breaks = new Map();
  for (const b of sample.breaks) {
    const text = b.kind === "starts" ? `✂ ${b.reason} · sample ${b.sample} differs from here`
      : `✂ call ${b.call} parts here · ${b.reason}`;
    const marker = el("span", { class: `break-marker ${b.kind}`, title: b.note, text });
    breaks.set(b.position, [...(breaks.get(b.position) || []), marker]);
  }
  const tokens = el("div", { class: "tokens", data: { sample: number } });
  let chunk = null;
  for (let i = 0; i < n; i++) {
    if (i % TOKEN_CHUNK === 0) {
      chunk = el("div", { class: "token-chunk" });
      tokens.append(chunk);
    }
    if (boundaries.has(i)) chunk.append(el("span", { class: "boundary", text: boundaries.get(i) }));
    if (breaks.has(i)) chunk.append(...breaks.get(i));
    const mask = sample.mask[i];
    const span = document.createElement("span");
    span.className = mask ? "tok trained" : "tok untrained";
    span.dataset.i = i;
    span.textContent = tokenLabel(withText ? sample.text[i] : null, sample.ids[i]);
    span.style.backgroundColor = tokenColour(mask, sample.logprobs[i]);
    chunk.append(span);
  }
  tokens.addEventListener("mouseover", (event) => showTokenTip(event, sample));
  tokens.addEventListener("mouseleave", hideTip);
  const trained = sample.trained_tokens;
  const notes = sample.breaks.filter((b) => b.kind === "starts")
    .map((b) => el("div", { class: "break-note", text: `New sample after a prefix break: ${b.note}` }));
  return el("section", { class: "sample" },
    el("div", { class: "sample-head", text: `sample ${number} · agent ${sample.agent} · ${n} tokens · ${trained} trained · calls ${sample.calls.join(", ")}` }),
    notes, tokens);
}

function showTokenTip(event, sample) {
  const span = event.target.closest(".tok");
  if (!span) return;
  const i = Number(span.dataset.i);
  const lp = sample.logprobs[i];
  const tip = document.getElementById("tooltip");
  const lines = [
    `token ${i} · id ${sample.ids[i]}`,
    `logprob ${lp === null ? "N/A" : lp.toFixed(4)}` + (lp === null ? "" : ` (p=${Math.exp(lp).toFixed(3)})`),
    `loss mask ${sample.mask[i]}` + (sample.mask[i] ? ` · advantage ${fmt(sample.advantages[i], 4)}` : ""),
  ];
  if (sample.text) lines.push(`text ${JSON.stringify(sample.text[i])}`);
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  const rect = span.getBoundingClientRect();
  tip.style.left = `${Math.min(rect.left, window.innerWidth - 320)}px`;
  tip.style.top = `${rect.bottom + 6}px`;
}

function hideTip() {
  document.getElementById("tooltip").hidden = true;
}

function renderTokens(view) {
  const box = el("div", { class: "token-view" }, el("h3", { text: "Training tokens" }),
    el("p", { class: "legend" }, el("span", { class: "swatch trained-swatch", text: "trained (loss mask 1)" }), " ",
      el("span", { class: "swatch untrained-swatch", text: "not trained (mask 0)" }),
      " · paler = lower log-prob · hover a token for its id and log-prob"));
  box.querySelector(".trained-swatch").style.backgroundColor = BLUE;
  box.querySelector(".untrained-swatch").style.backgroundColor = ORANGE;
  if (view.tokenizer.error) box.append(el("p", { class: "warning", text: `Tokenizer ${view.tokenizer.path || "(none)"} could not be loaded (${view.tokenizer.error}); showing token ids.` }));
  if (!view.samples.length) box.append(el("p", { class: "muted", text: view.error ? "No training samples: the workflow raised, so this trajectory is not trained." : "No training samples (no trainable call generated tokens)." }));
  view.samples.forEach((sample, k) => box.append(renderSample(sample, k, sample.text !== null)));
  return box;
}

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

async function showTab(tab) {
  state.tab = tab;
  writeHash();
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === tab);
  const detail = document.getElementById("detail");
  hideTip();
  if (state.run === null) return;
  let content;
  try {
    if (tab === "trajectory") {
      content = state.view && state.file !== null
        ? el("div", {}, renderSummary(state.view), renderConversation(state.view), renderTokens(state.view))
        : el("p", { class: "muted", text: "Pick a trajectory." });
    } else if (tab === "metrics") content = await renderMetrics();
    else if (tab === "config") content = await renderFile("config.yaml");
    else content = await renderFile("astuner.log");
  } catch (err) {
    setStatus(err.message, true);
    return;
  }
  detail.replaceChildren(content);
}

// -------------------------------------------------------------------- start

function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

function start() {
  readHash();
  const form = document.getElementById("filters");
  const reload = () => {
    state.offset = 0;
    loadTrajectories().catch((err) => setStatus(err.message, true));
  };
  // Selects reload at once; typed fields once typing pauses.
  form.addEventListener("change", (event) => { if (event.target.tagName === "SELECT") reload(); });
  form.addEventListener("input", debounce((event) => { if (event.target.tagName === "INPUT") reload(); }, 300));
  form.addEventListener("submit", (event) => event.preventDefault());
  for (const button of document.querySelectorAll("#tabs button"))
    button.addEventListener("click", () => showTab(button.dataset.tab));
  loadRuns().catch((err) => setStatus(err.message, true));
}

start();

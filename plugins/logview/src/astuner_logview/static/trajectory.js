// astuner logview: one trajectory (summary, agents, conversation, training tokens).
// Loaded before app.js, whose helpers (el, fmt, state) it uses once the page starts.
"use strict";

const BLUE = "#09ABCF"; // loss mask 1: the token is trained on
const ORANGE = "#D98510"; // loss mask 0: prompt, tool output, template tokens
const LOGPROB_FLOOR = -7; // log-probs at or below this get the palest shade
const TOKEN_CHUNK = 1000; // tokens per block; blocks off screen are not laid out

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

// --------------------------------------------------------- detail: header

// The whole trajectory tab, showing only `state.agent`'s calls and samples when it names one of its agents.
function renderTrajectory(view) {
  const box = el("div", {}, renderSummary(view), renderAgents(view), renderConversation(view), renderTokens(view));
  showAgent(box, view.agents.some((a) => a.name === state.agent) ? state.agent : null);
  return box;
}

function adapterText(adapter) {
  return adapter === null ? "no adapter" : `adapter ${adapter}`;
}

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

// ------------------------------------------------------ detail: agents

// One row per agent (its adapters, calls, samples, own reward, advantage); a click shows only its
// calls and samples, "all agents" every one. Shown when there is more than one agent or a per-agent reward.
function renderAgents(view) {
  if (view.agents.length < 2 && !Object.keys(view.agent_rewards).length) return null;
  const row = (name, cells, title) => el("tr", { class: "agent-row", data: { agent: name }, title,
    on: { click: () => showAgent(document.getElementById("detail"), name || null) } },
  cells.map((text, i) => el("td", { class: i > 1 ? "num" : null, text })));
  const body = el("tbody", {}, row("", ["all agents", "", view.turns.length, view.samples.length, fmt(view.reward, 4), ""],
    "show every agent's calls"));
  for (const a of view.agents) {
    const advs = [...new Set(a.advantages)];
    const adv = advs.length === 1 ? fmt(advs[0], 4) : advs.length ? fmt(a.advantages, 3) : "–";
    body.append(row(a.name, [a.name, a.adapters.map((x) => x ?? "none").join(", "), a.calls, a.samples, fmt(a.reward, 4),
      adv + (a.zero_variance ? " (zero variance)" : "")], `show only ${a.name}'s calls and samples`));
  }
  const head = el("tr", {}, ["agent", "adapter", "calls", "samples", "reward", "advantage"].map((h) => el("th", { text: h })));
  return el("div", { class: "agents-box" }, el("h3", { text: "Agents" }),
    el("table", { class: "grid agents-table" }, el("thead", {}, head), body));
}

// Shows only `agent`'s turns and samples inside `box` (null: all), and says how many are hidden.
function showAgent(box, agent) {
  state.agent = agent;
  writeHash();
  const hidden = { turn: 0, sample: 0 };
  for (const node of box.querySelectorAll(".turn, .sample")) {
    node.hidden = agent !== null && node.dataset.agent !== agent;
    hidden[node.classList.contains("turn") ? "turn" : "sample"] += node.hidden;
  }
  for (const row of box.querySelectorAll(".agent-row")) row.classList.toggle("selected", row.dataset.agent === (agent || ""));
  const note = agent === null ? ""
    : `showing ${agent} only: ${hidden.turn} calls and ${hidden.sample} samples of other agents hidden`;
  for (const p of box.querySelectorAll(".agent-note")) p.textContent = note;
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

// A context overflow keeps at most max_model_len ids of its prompt, none when its text was too long to encode.
function tokenCounts(r) {
  const omitted = r.prompt_ids_omitted;
  const n = (x) => x.toLocaleString("en");
  const prompt = omitted === null ? "prompt too long to encode (not kept)"
    : omitted ? `${n(r.prompt_tokens)} of ${n(r.prompt_tokens + omitted)} prompt tokens kept`
    : `${r.prompt_tokens} prompt`;
  return `${prompt} + ${r.response_tokens} generated tokens`;
}

function renderConversation(view) {
  const box = el("div", { class: "conversation" }, el("h3", { text: "Conversation" }), el("p", { class: "agent-note muted" }));
  if (view.clipped_characters) box.append(el("p", { class: "warning clipped-note", text: `Shortened in the record: ${view.clipped_characters.toLocaleString("en")} characters of long texts are not kept (each cut is marked in place); the token ids of every call that was sent hold them whole.` }));
  const breaks = new Map(view.merge.breaks.map((b) => [b.call, b]));
  for (const turn of view.turns) {
    const r = turn.response;
    const brk = breaks.get(turn.call);
    const head = el("div", { class: "turn-head" },
      `call ${turn.call} · `, el("span", { class: "agent-tag", text: turn.agent }), ` · ${adapterText(turn.adapter)}` +
      ` · ${tokenCounts(r)} · ${r.finish_reason}` +
      (r.policy_version == null ? "" : ` · policy v${r.policy_version}`) +
      (turn.advantage === null ? "" : ` · advantage ${fmt(turn.advantage, 4)}`) +
      (r.trainable ? "" : " · not trained") + (turn.tools.length ? ` · tools: ${turn.tools.join(", ")}` : ""),
      brk && el("span", { class: "flag break", title: brk.note, text: `new sample: ${brk.reason}` }));
    const reply = el("div", { class: "message role-assistant generated" }, el("div", { class: "role", text: "assistant (generated)" }));
    if (r.reasoning) reply.append(el("details", {}, el("summary", { text: "reasoning" }), el("pre", { text: r.reasoning })));
    if (r.content) reply.append(el("pre", { class: "content", text: r.content }));
    for (const call of r.tool_calls) reply.append(toolCallBox(call));
    for (const bad of r.tool_call_errors) reply.append(el("div", { class: "tool-error" }, el("strong", { text: `tool call not parsed (the agent got the text): ${bad.error}` }), el("pre", { text: bad.raw })));
    if (r.madness.length) reply.append(el("div", { class: "flag madness", text: r.madness.join("; ") }));
    box.append(el("section", { class: "turn", data: { agent: turn.agent } }, head, turn.messages.map(messageBox), reply));
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
  return el("section", { class: "sample", data: { agent: sample.agent } },
    el("div", { class: "sample-head", text: `sample ${number} · agent ${sample.agent} · ${sample.adapters.map(adapterText).join(", ")} · ${n} tokens · ${trained} trained · calls ${sample.calls.join(", ")}` }),
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
      " · paler = lower log-prob · hover a token for its id and log-prob"), el("p", { class: "agent-note muted" }));
  box.querySelector(".trained-swatch").style.backgroundColor = BLUE;
  box.querySelector(".untrained-swatch").style.backgroundColor = ORANGE;
  if (view.tokenizer.error) box.append(el("p", { class: "warning", text: `Tokenizer ${view.tokenizer.path || "(none)"} could not be loaded (${view.tokenizer.error}); showing token ids.` }));
  if (!view.samples.length) box.append(el("p", { class: "muted", text: view.error ? "No training samples: the workflow raised, so this trajectory is not trained." : "No training samples (no trainable call generated tokens)." }));
  view.samples.forEach((sample, k) => box.append(renderSample(sample, k, sample.text !== null)));
  return box;
}


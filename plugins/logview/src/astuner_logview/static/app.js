// astuner logview: runs -> trajectories -> one trajectory (conversation and training tokens).
//
// This file holds the shared helpers, the run and trajectory lists, the tabs
// and the start; trajectory.js draws one trajectory, metrics.js the charts.
// Every piece of text from a log reaches the page through textContent or a
// text node, never as markup, so model output such as "<script>" shows as
// written. State lives in the URL hash (run, file, line, tab, agent) so views
// can be linked and reloaded.
"use strict";

const PAGE = 50;

// `agent`: the one agent whose calls and samples the trajectory view shows (null: all of them).
const state = { run: null, file: null, line: null, tab: "trajectory", offset: 0, view: null, agent: null };

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

// A reward as "1.10": two decimals, whole numbers included.
function fixed(value) {
  return typeof value === "number" ? value.toFixed(2) : "–";
}

// A pane draws only the answer to its latest request. Answers can come back out of order (a slow
// fetch on a busy machine), and an older one drawn last would replace what the user opened since,
// e.g. the Metrics tab a run opens on replacing the trajectory clicked before its metrics came.
// `const fresh = listTurn()` at a request, then after its await: `if (!fresh()) return;`.
function latestOnly() {
  let latest = 0;
  return () => {
    const mine = ++latest;
    return () => mine === latest;
  };
}

const listTurn = latestOnly(); // the trajectory list
const detailTurn = latestOnly(); // the detail pane: a trajectory or a tab

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
  state.agent = params.get("agent");
}

function writeHash() {
  const params = new URLSearchParams();
  if (state.run !== null) params.set("run", state.run);
  if (state.file !== null) params.set("file", state.file);
  if (state.line !== null) params.set("line", state.line);
  if (state.tab !== "trajectory") params.set("tab", state.tab);
  if (state.agent !== null) params.set("agent", state.agent);
  history.replaceState(null, "", "#" + params);
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
    el("thead", {}, el("tr", {}, ["experiment", "started", "status", "backbone", "steps", "mean judge reward"]
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
      // A command other than `astuner run` (sft, eval) says so after the backbone it ran on.
      el("td", { class: "run-backbone", text: [run.backbone, ["", "run"].includes(run.command) ? "" : run.command].join(" ").trim() || "–" }),
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
    state.agent = null;
  }
  state.run = id;
  state.offset = 0;
  for (const row of document.querySelectorAll(".run-row")) row.classList.toggle("selected", row.dataset.run === id);
  writeHash();
  if (!(await loadTrajectories())) return; // another run or filter was picked meanwhile
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

// Draws the list; false when a newer list request made this one stale (nothing drawn).
async function loadTrajectories() {
  if (state.run === null) return false;
  const fresh = listTurn();
  setStatus("loading trajectories…");
  let page;
  try {
    page = await api("trajectories", { run: state.run, offset: state.offset, limit: PAGE, ...filterParams() });
  } catch (err) {
    if (fresh()) throw err;
    return false;
  }
  if (!fresh()) return false;
  const form = document.getElementById("filters");
  fillSelect(form.elements.step, page.steps);
  fillSelect(form.elements.agent, page.agents);
  const box = document.getElementById("trajectories");
  const table = el("table", { class: "grid" }, el("thead", {}, el("tr", {},
    ["step", "task", "reward", "success", "turns", "agents"].map((h) => el("th", { text: h })))));
  const body = el("tbody");
  for (const item of page.items) {
    const flags = [];
    if (item.madness.length) flags.push(el("span", { class: "flag madness", title: item.madness.join("\n"), text: "madness" }));
    if (item.error) flags.push(el("span", { class: "flag error", title: item.error, text: "error" }));
    const row = el("tr", { class: "trajectory-row", data: { file: item.file, line: item.line },
      title: item.trajectory_id, on: { click: () => openFromList(item.file, item.line) } },
      el("td", { text: item.step }), el("td", { text: item.task_id }), el("td", { class: "num", text: fmt(item.reward) }),
      // The madness and error flags follow the verdict in its cell: one column fewer, so the list fits.
      el("td", { class: "verdict" }, item.is_success === null ? "–" : item.is_success ? "yes" : "no", flags.length ? " " : "", flags),
      el("td", { class: "num", text: item.turns }), agentsCell(item, form.elements.agent.value));
    body.append(row);
  }
  table.append(body);
  box.replaceChildren(page.items.length ? table : el("p", { class: "muted", text: "No trajectory matches." }));
  markSelectedRow();
  renderPager(page);
  setStatus(`${page.trajectories} trajectories` + (page.bad_lines ? `, ${page.bad_lines} unreadable lines` : ""));
  return true;
}

// "wolf 1.10 · seer 0.00 · villager": each agent that made calls (then any other the judge scored),
// with its own reward when the judge scored agents; the agent filtered on is marked.
function agentsCell(item, chosen) {
  const rewards = item.agent_rewards;
  const names = [...item.agents, ...Object.keys(rewards).filter((name) => !item.agents.includes(name))];
  const parts = names.map((name) => el("span", { class: name === chosen ? "agent chosen" : "agent",
    text: Object.hasOwn(rewards, name) ? `${name} ${fixed(rewards[name])}` : name }));
  return el("td", { class: "agents", title: names.join("\n") }, parts.map((part, i) => (i ? [" · ", part] : part)));
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

// A trajectory opened from a list filtered by agent shows that agent's calls first.
async function openFromList(file, line) {
  state.agent = filterParams().agent || null;
  await selectTrajectory(file, line);
}

async function selectTrajectory(file, line) {
  const run = state.run;
  const picked = () => state.run === run && state.file === file && state.line === line;
  state.file = file;
  state.line = line;
  state.tab = "trajectory";
  state.view = null;
  detailTurn(); // tab answers still on their way are dropped: the user has moved on
  markTab();
  writeHash();
  markSelectedRow();
  setStatus("loading trajectory…");
  let view;
  try {
    view = await api("trajectory", { run, file, line });
  } catch (err) {
    if (picked()) setStatus(err.message, true);
    return;
  }
  if (!picked()) return; // another trajectory was picked meanwhile
  state.view = view;
  if (state.tab !== "trajectory") return; // another tab was opened meanwhile: it shows the view when reopened
  await showTab("trajectory");
  setStatus(`${view.trajectory_id}`);
}

function markTab() {
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === state.tab);
}

async function showTab(tab) {
  const fresh = detailTurn();
  state.tab = tab;
  markTab();
  writeHash();
  const detail = document.getElementById("detail");
  hideTip();
  if (state.run === null) return;
  let content;
  try {
    if (tab === "trajectory") {
      content = state.view && state.file !== null
        ? renderTrajectory(state.view)
        : el("p", { class: "muted", text: "Pick a trajectory." });
    } else if (tab === "metrics") content = await renderMetrics();
    else if (tab === "config") content = await renderFile("config.yaml");
    else content = await renderFile("astuner.log");
  } catch (err) {
    if (fresh()) setStatus(err.message, true);
    return;
  }
  if (fresh()) detail.replaceChildren(content);
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

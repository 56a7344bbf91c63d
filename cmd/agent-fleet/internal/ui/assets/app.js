// agent-fleet ui: the page. Plain JavaScript, no libraries: it renders the
// server's snapshot (the "state" event of /api/events) and, on a worker's
// page, follows its log (/api/log). Everything shown is set as text, never
// as HTML.
"use strict";

const STATE_COLORS = { provisioning: "#ca8a04", running: "#16a34a", paused: "#65a30d", stopping: "#ea580c", stopped: "#9ca3af",
  exited: "#0891b2", failed: "#dc2626", lost: "#7c3aed" };
// Fields of a worker record the fleet table shows in columns of its own;
// every other field shows on the worker's page, and those named in EXTRAS
// also in the table's "more" column when a record has them.
const EXTRAS = ["needsInput", "worktree", "profile", "profileDegraded", "limits", "resources", "role", "pausedAt", "pausedUntil", "liveState"];
const ACTIONS = { stop: "Stop", renew: "Renew", pause: "Pause", resume: "Resume", adopt: "Adopt" };

let snap = null;
let logSource = null;
let logFor = "";

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function replace(parent, ...children) { parent.replaceChildren(...children.flat().filter(Boolean)); }

function ago(ms) {
  const s = Math.round((Date.now() - ms) / 1000);
  const a = Math.abs(s);
  const span = a < 60 ? a + "s" : a < 3600 ? Math.round(a / 60) + "m" : a < 86400 ? Math.round(a / 3600) + "h" : Math.round(a / 86400) + "d";
  return s >= 0 ? span + " ago" : "in " + span;
}

function clock(ms) { return new Date(ms).toLocaleTimeString(); }

function leaseText(w) {
  if (!w.leaseDeadline) return w.state && isLive(w.state) ? "none" : "";
  const t = Date.parse(w.leaseDeadline);
  const left = t - Date.now();
  return left > 0 ? Math.ceil(left / 60000) + "m left" : "expired " + ago(t);
}

// paused: frozen by pause, still live (the output layer's state for it).
function isLive(state) { return state === "provisioning" || state === "running" || state === "paused" || state === "stopping"; }

function turnText(w) {
  const t = w.turn;
  if (!t) return "";
  if (t.current) return "turn " + t.current.n + " (" + t.current.reason + ")";
  if (t.paused) return "paused: " + t.paused;
  if (t.last) return t.turns + " turns, last " + (t.last.ok ? "ok" : "failed");
  return t.turns ? t.turns + " turns" : "no turn yet";
}

function usageText(w) {
  const u = w.usage;
  if (!u) return "";
  const parts = [];
  const tokens = (u.inputTokens || 0) + (u.outputTokens || 0);
  if (tokens) parts.push(tokens.toLocaleString() + " tok");
  if (u.costUsd) parts.push("$" + Number(u.costUsd).toFixed(4));
  return parts.join(" · ") || "—";
}

function stateCell(w) {
  let text = w.state;
  if (w.exitKind === "exited" && w.exitStatus !== undefined) text += " (exit " + w.exitStatus + ")";
  else if (w.exitKind) text += " (" + w.exitKind + " by signal " + w.exitStatus + ")";
  if (w.liveState === "unknown") text += "?";
  return el("td", { class: "state " + w.state }, text,
    w.presence ? el("span", { class: "presence" }, w.presence) : null,
    w.stateReason ? el("span", { class: "presence" }, w.stateReason) : null);
}

function whatText(w) {
  if (w.kind && w.kind !== "exec") return w.kind + (w.model ? " (" + w.model + ")" : "");
  const argv = w.command || [];
  const cmd = argv.map((a, i) => (i === 0 ? a.split("/").pop() : a)).join(" ");
  return cmd.length > 48 ? cmd.slice(0, 47) + "…" : cmd;
}

function extrasText(w) {
  return EXTRAS.filter((k) => w[k] !== undefined && w[k] !== "")
    .map((k) => k + ": " + (typeof w[k] === "object" ? JSON.stringify(w[k]) : w[k])).join(" · ");
}

function actionButtons(w) {
  const out = [];
  if (isLive(w.state)) {
    if (w.manager === snap.caller) {
      out.push(button("stop", w), button("renew", w));
      if (w.state === "paused") out.push(button("resume", w));
      else if (w.state === "running") out.push(button("pause", w));
    } else {
      out.push(button("adopt", w));
    }
  }
  return out;
}

function button(action, w) {
  return el("button", { "data-action": action, "data-id": w.id, class: action === "stop" ? "danger" : "",
    onclick: () => confirmAction(action, w) }, ACTIONS[action]);
}

function confirmAction(action, w) {
  const d = $("#confirm");
  const what = { stop: "Stop worker " + w.id + "? Its processes get SIGTERM, then SIGKILL after the grace, and its cgroup is checked empty.",
    renew: "Renew the lease of " + w.id + "?",
    pause: "Pause " + w.id + "? Its processes are frozen (no CPU, memory kept) and its lease holds until you resume it.",
    resume: "Resume " + w.id + "? Its processes are thawed and its lease runs again.",
    adopt: "Adopt " + w.id + " from " + w.manager + "? You become its manager." }[action];
  $("#confirm-text").textContent = what;
  d.returnValue = "";
  d.onclose = () => { if (d.returnValue === "ok") act(action, w.id); };
  d.showModal();
}

async function act(action, id) {
  toast(ACTIONS[action] + " " + id + "…", false);
  try {
    const res = await fetch("/api/action", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ action, id }) });
    const body = await res.json();
    if (body.ok) toast(body.text || action + " done", false);
    else toast(body.error || res.statusText, true);
  } catch (e) {
    toast(String(e), true);
  }
}

function toast(text, error) {
  const t = $("#toast");
  t.textContent = text;
  t.className = error ? "error" : "";
  t.hidden = false;
  t.dataset.done = text.endsWith("…") ? "" : "1";
}

// The fleet as a tree: managers that are not workers themselves are
// roots; a worker that manages others has them below it.
function renderFleet() {
  const showEnded = $("#show-ended").checked;
  const hour = Date.now() - 3600e3;
  const ws = snap.workers.filter((w) => showEnded || isLive(w.state) || Date.parse(w.endedAt || w.createdAt) > hour);
  const liveIds = new Set(ws.filter((w) => isLive(w.state)).map((w) => w.id));
  const byManager = new Map();
  for (const w of ws) {
    if (!byManager.has(w.manager)) byManager.set(w.manager, []);
    byManager.get(w.manager).push(w);
  }
  const connected = new Set(snap.sessions.map((s) => s.id));
  const rows = [];
  const seen = new Set();
  const addWorkers = (manager, depth) => {
    for (const w of byManager.get(manager) || []) {
      const key = w.id + "/" + w.runId;
      if (seen.has(key)) continue;
      seen.add(key);
      rows.push(el("tr", { "data-worker": w.id, "data-run": w.runId, "data-state": w.state, class: isLive(w.state) ? "" : "ended" },
        el("td", { class: "indent" + Math.min(depth, 3) }, el("a", { href: "#/worker/" + encodeURIComponent(w.id) }, w.id)),
        stateCell(w), el("td", {}, whatText(w)), el("td", {}, leaseText(w)), el("td", {}, turnText(w)),
        el("td", {}, usageText(w)), el("td", { class: "small" }, extrasText(w)), el("td", {}, actionButtons(w))));
      if (isLive(w.state) && byManager.has(w.id)) addWorkers(w.id, depth + 1);
    }
  };
  const roots = [...byManager.keys()].filter((m) => !liveIds.has(m)).sort((a, b) => (a === snap.caller ? -1 : b === snap.caller ? 1 : a.localeCompare(b)));
  for (const m of roots) {
    const label = [m, m === snap.caller ? "(you)" : "", connected.has(m) ? "connected" : "not connected"].filter(Boolean).join(" ");
    rows.push(el("tr", { class: "manager", "data-manager": m }, el("td", { colspan: 8 }, "manager " + label)));
    addWorkers(m, 1);
  }
  replace($("#fleet tbody"), rows);
  $("#fleet-empty").hidden = rows.length > 0;
}

function renderSessions() {
  replace($("#sessions tbody"), snap.sessions.map((s) => el("tr", { "data-session": s.id },
    el("td", {}, s.name && s.name !== s.id ? s.name + " (" + s.id + ")" : s.id, s.self ? " (this dashboard)" : ""),
    el("td", {}, s.model), el("td", {}, s.status || ""), el("td", { class: "small" }, s.cwd),
    el("td", {}, s.lastActivity ? ago(s.lastActivity) : ""))));
  replace($("#teams tbody"), snap.teams.map((t) => el("tr", { "data-team": t.name },
    el("td", {}, t.name), el("td", {}, t.manager), el("td", {}, (t.members || []).join(", ")))));
  $("#teams-empty").hidden = snap.teams.length > 0;
  const asks = snap.asks.map((a) => el("li", {}, "ask from " + (a.from.name || a.from.id) + ", " + a.elapsedSeconds + "s ago: " + a.preview));
  if (snap.unread) asks.push(el("li", {}, snap.unread + " unread message" + (snap.unread === 1 ? "" : "s") + " (agent-fleet intercom pending)"));
  replace($("#asks"), asks.length ? asks : [el("li", { class: "muted" }, "nothing")]);
}

function renderActivity() {
  const items = snap.activity.slice().reverse().map((a) => el("li", { "data-kind": a.kind },
    el("time", { datetime: new Date(a.at).toISOString() }, clock(a.at)), a.text));
  replace($("#activity"), items);
}

// The chart: messages delivered per second (line, left) over stacked bars
// of the workers in each state, one per sample.
function renderChart() {
  const c = $("#chart");
  const samples = snap.chart.samples;
  const W = 640, H = 190, left = 36, top = 8, mid = 80, bottom = 170;
  const span = 3600e3, end = Date.now(), start = end - span;
  const x = (t) => left + ((t - start) / span) * (W - left - 8);
  const nodes = [];
  nodes.push(svg("rect", { x: left, y: top, width: W - left - 8, height: bottom - top, fill: "#fff", stroke: "#e5e7eb" }));
  const rates = samples.map((s) => s.perSecond).filter((r) => r >= 0);
  const maxRate = Math.max(1, ...rates);
  const pts = samples.filter((s) => s.perSecond >= 0).map((s) => x(s.at).toFixed(1) + "," + (mid - (s.perSecond / maxRate) * (mid - top - 4)).toFixed(1));
  if (pts.length) nodes.push(svg("polyline", { points: pts.join(" "), fill: "none", stroke: "#2563eb", "stroke-width": 1.5 }));
  const t1 = svg("text", { x: 2, y: top + 10, "font-size": 10, fill: "#6b7280" }); t1.textContent = maxRate.toFixed(maxRate < 10 ? 1 : 0) + "/s";
  const t2 = svg("text", { x: 2, y: mid, "font-size": 10, fill: "#6b7280" }); t2.textContent = "0/s";
  nodes.push(t1, t2, svg("line", { x1: left, x2: W - 8, y1: mid + 4, y2: mid + 4, stroke: "#e5e7eb" }));
  const maxWorkers = Math.max(1, ...samples.map((s) => Object.values(s.states).reduce((a, b) => a + b, 0)));
  const barW = Math.max(2, ((W - left - 8) * snap.chart.intervalMs) / span - 1);
  for (const s of samples) {
    let y = bottom;
    for (const st of snap.states) {
      const n = s.states[st] || 0;
      if (!n) continue;
      const h = (n / maxWorkers) * (bottom - mid - 10);
      y -= h;
      nodes.push(svg("rect", { x: (x(s.at) - barW).toFixed(1), y: y.toFixed(1), width: barW.toFixed(1), height: h.toFixed(1), fill: STATE_COLORS[st] || "#999", "data-state": st }));
    }
  }
  const t3 = svg("text", { x: 2, y: mid + 18, "font-size": 10, fill: "#6b7280" }); t3.textContent = maxWorkers + " w";
  const t4 = svg("text", { x: left, y: H - 4, "font-size": 10, fill: "#6b7280" }); t4.textContent = "−60 min";
  const t5 = svg("text", { x: W - 40, y: H - 4, "font-size": 10, fill: "#6b7280" }); t5.textContent = "now";
  nodes.push(t3, t4, t5);
  c.replaceChildren(...nodes);
  const legend = [el("span", {}, el("i", { class: "swatch-rate" }), "messages/s")].concat(
    snap.states.map((st) => el("span", {}, el("i", { "data-color": st }), st)));
  replace($("#chart-legend"), legend);
  for (const i of $("#chart-legend").querySelectorAll("i")) i.style.background = STATE_COLORS[i.dataset.color] || "#2563eb";
}

function renderHeader() {
  $("#caller").textContent = "as " + snap.caller;
  const ic = snap.intercom;
  $("#intercom").textContent = ic.error ? "intercom: " + ic.error : ic.held ? "intercom: holding " + ic.session : "intercom: through " + ic.session + "'s holder";
  const off = $("#offline");
  off.hidden = !snap.offline;
  off.textContent = snap.offline ? "No systemd user manager answers (" + snap.offline + "): these are the registry's last known states." : "";
}

function route() {
  const m = location.hash.match(/^#\/worker\/(.+)$/);
  return m ? { worker: decodeURIComponent(m[1]) } : {};
}

function render() {
  if (!snap) return;
  renderHeader();
  const r = route();
  $("#home").hidden = !!r.worker;
  $("#worker-page").hidden = !r.worker;
  if (r.worker) {
    renderWorker(r.worker);
  } else {
    stopLog();
    renderFleet();
    renderSessions();
    renderActivity();
    renderChart();
  }
}

function kvRows(obj, skip) {
  return Object.entries(obj).filter(([k]) => !(skip || []).includes(k)).map(([k, v]) =>
    el("tr", { "data-field": k }, el("th", {}, k), el("td", {}, typeof v === "object" ? JSON.stringify(v) : String(v))));
}

let detailBusy = false;
let detailAgain = false;

function renderWorker(id) {
  const w = snap.workers.find((x) => x.id === id);
  $("#w-id").textContent = id;
  const st = $("#w-state");
  st.textContent = w ? w.state + (w.presence ? " · " + w.presence : "") : "not found";
  st.className = "state " + (w ? w.state : "");
  st.dataset.state = w ? w.state : "";
  replace($("#w-actions"), w ? actionButtons(w) : []);
  if (w) replace($("#w-record tbody"), kvRows(w, ["turn"]));
  followLog(id);
  loadDetail(id);
}

// loadDetail reads the worker's status and messages, once at a time: a
// change while a read is under way reads again after it.
async function loadDetail(id) {
  if (detailBusy) { detailAgain = true; return; }
  detailBusy = true;
  try {
    const res = await fetch("/api/worker?id=" + encodeURIComponent(id));
    const d = await res.json();
    if (route().worker !== id) return;
    if (!res.ok) { replace($("#w-unit tbody"), kvRows({ error: d.error })); return; }
    const s = d.status;
    replace($("#w-unit tbody"), kvRows({ unit: s.worker.unit, active: s.unitActiveState + (s.unitSubState ? " (" + s.unitSubState + ")" : ""),
      processes: s.processCount + (s.processes.length ? ": " + s.processes.map((p) => p.pid + " " + p.name).join(", ") : ""),
      cgroup: s.worker.controlGroup || "", leaseActivity: s.leaseActivity || "" }));
    const t = s.turns;
    replace($("#w-turns tbody"), t ? kvRows({ turns: t.turns, failures: t.failures, current: t.current ? "turn " + t.current.n + " since " + t.current.startedAt : "none",
      last: t.last ? "turn " + t.last.n + (t.last.ok ? " ok" : " failed: " + (t.last.error || "")) : "none", pause: t.pause ? t.pause.reason : "" }) : kvRows({ turns: "not a coding agent" }));
    replace($("#w-messages"), d.messages.slice().reverse().map((m) => el("li", {}, el("time", {}, clock(m.at)), m.text)));
    $("#w-asks-note").textContent = d.asksNote || "";
    replace($("#w-asks"), (d.asks || []).map((a) => el("li", {}, "ask from " + a.from.id + ": " + a.preview)));
  } finally {
    detailBusy = false;
    if (detailAgain) {
      detailAgain = false;
      if (route().worker) loadDetail(route().worker);
    }
  }
}

function stopLog() {
  if (logSource) logSource.close();
  logSource = null;
  logFor = "";
}

function followLog(id) {
  if (logFor === id) return;
  stopLog();
  logFor = id;
  const pre = $("#log");
  pre.replaceChildren();
  $("#log-end").hidden = true;
  $("#log-state").textContent = "following";
  logSource = new EventSource("/api/log?id=" + encodeURIComponent(id));
  logSource.addEventListener("line", (e) => {
    const l = JSON.parse(e.data);
    const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(el("div", { class: "line" }, el("span", { class: "at" }, l.at ? new Date(l.at).toLocaleTimeString() : "?"), l.text));
    while (pre.childElementCount > 2000) pre.firstElementChild.remove();
    if (stick) pre.scrollTop = pre.scrollHeight;
  });
  logSource.addEventListener("end", (e) => {
    const end = JSON.parse(e.data);
    logSource.close();
    const p = $("#log-end");
    p.textContent = end.error ? "log: " + end.error : "the worker ended: " + end.state;
    p.hidden = false;
    $("#log-state").textContent = "ended";
  });
}

function connect() {
  const es = new EventSource("/api/events");
  es.addEventListener("state", (e) => {
    snap = JSON.parse(e.data);
    $("#live").textContent = "live";
    $("#live").className = "live";
    render();
  });
  es.onerror = () => {
    $("#live").textContent = "reconnecting…";
    $("#live").className = "live off";
  };
}

window.addEventListener("hashchange", render);
document.addEventListener("DOMContentLoaded", () => {
  $("#show-ended").addEventListener("change", render);
  connect();
});

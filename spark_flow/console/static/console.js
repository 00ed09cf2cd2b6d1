// The spark-flow console: polls the home's overview, draws the queues, the pipeline graph and
// the selected queue's depth chart, and posts the operator's actions after a confirmation.
// Every value from the server goes into the page as text (never as markup).
"use strict";

const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
const CSRF = meta("csrf-token");
const READ_ONLY = meta("read-only") === "true";
const TOKEN_NEEDED = meta("token-needed") === "true";
const SVG = "http://www.w3.org/2000/svg";
const REFRESH_MS = 2000;

let token = "";
let selected = null;   // the queue whose chart and explanation are shown
let live = [];         // the selected queue's depth as polled, for a chart without a controller
let lastChart = null;
let lastData = null;   // the last overview drawn
// Which rows the list shows (the server filters, orders and pages: a page is drawn whatever the
// home's size) and the digest of the answer drawn: the server answers "same" while it holds.
const list = { search: "", show: "all", page: 0 };
let seen = "";
let asked = 0;         // refreshes asked for; an answer to an older one is dropped

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Every time an operator reads is in one form, UTC with its zone, as `why` and the CLI give it.
const clock = (seconds) => (seconds ? new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z") : "-");
const ago = (seconds) => (seconds ? `${Math.max(0, Math.round(Date.now() / 1000 - seconds))}s ago` : "never");

function limits(t) {
  const parts = [];
  if (t.stop_count) parts.push(`${t.stop_count} / ${t.resume_count}`);
  if (t.stop_size) parts.push(`${t.stop_size} / ${t.resume_size} B`);
  if (t.stop_age) parts.push(`${t.stop_age}s / ${t.resume_age}s age`);
  return parts.join(", ") || "none";
}

function say(text, ok) {
  const box = document.getElementById("message");
  box.className = ok ? "ok" : "error";
  box.textContent = text;
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function refresh() {
  const ask = ++asked;
  const params = new URLSearchParams({ ...list, seen });
  if (selected) params.set("selected", selected);
  try {
    const data = await getJSON(`/api/overview?${params}`);
    if (ask !== asked) return;
    if (data.same) {  // the rows as drawn; the selected queue's chart still gets the look's point
      document.getElementById("updated").textContent = readAt(data);
      if (lastData) chartNow({ ...lastData, at: data.at });
      return;
    }
    seen = data.digest;
    render(data);
  } catch (error) {
    if (ask === asked) document.getElementById("updated").textContent = `cannot read the home: ${error.message}`;
  }
}

// Ask again now with other rows (a search, a filter, a page, a queue selected): nothing seen yet.
function reload() {
  seen = "";
  refresh();
}

// When the figures were read: serve's own look, or during its first the controller's last.
function readAt(data) {
  return data.read_from === "status"
    ? `the controller's look of ${clock(data.at)} (serve is reading the home; chains once it has)`
    : `read at ${clock(data.at)}`;
}

function render(data) {
  lastData = data;
  document.getElementById("updated").textContent = readAt(data);
  document.getElementById("controller").textContent = data.status_updated
    ? `controller status written ${ago(data.status_updated)}` : "no controller status yet";
  document.getElementById("mode").textContent = data.read_only ? "read-only" : "";
  renderTable(data.queues);
  renderList(data.list);
  renderHome(data);
  renderPipeline(data.graph);
  chartNow(data);
}

// The selected queue's depth at the look `data` is of (once a look), on its chart.
function chartNow(data) {
  const current = data.queues.find((q) => q.name === selected);
  if (!current) return;
  const sub = current.subscriptions.find((s) => s.name === charted(current));
  if (sub && (!live.length || live[live.length - 1].t !== data.at)) {  // a new look: its point, drawn
    live.push({ t: data.at, depth: sub.depth.count, stop: current.thresholds.stop_count,
                resume: current.thresholds.resume_count, held: current.held, from: "page" });
    drawChart();
  }
}

function renderList(where) {
  Object.assign(list, { page: where.page });
  const last = Math.min(where.first + where.size, where.matching);
  document.getElementById("page-info").textContent = where.matching
    ? `${where.first + 1}–${last} of ${where.matching}${where.matching !== where.total ? ` (${where.total} in the home)` : ""}`
      + `, page ${where.page + 1} of ${where.pages}` : `none of ${where.total}`;
  document.getElementById("previous").toggleAttribute("aria-disabled", where.page === 0);
  document.getElementById("next").toggleAttribute("aria-disabled", where.page + 1 >= where.pages);
  for (const option of document.querySelectorAll("#show option")) {
    option.textContent = `${option.textContent.replace(/ \(\d+\)$/, "")} (${where.counts[option.value]})`;
  }
}

function renderTable(queues) {
  patchRows(document.querySelector("#queues tbody"), queues.map((q) => {
    const subs = q.subscriptions.map((s) => el("div", { class: "subscription", "data-subscription": s.name,
                                                       title: s.drain_rate === null ? "drain not measured yet"
                                                         : `drains ${s.drain_rate.toFixed(1)} messages/s` },
      `${s.name}: ${s.depth.count}`, s.flow_stopped ? " (flow-stopped)" : "",
      s.stalled ? el("span", { class: "badge stalled" }, "stalled") : null,
      s.backpressured ? el("span", { class: "badge backpressured" }, `backpressured by ${s.downstream.join(", ")}`) : null));
    const paces = q.subscriptions.filter((s) => s.admitted_rate !== null).map((s) => s.admitted_rate);
    const flow = q.error ? "unreadable" : q.held
      ? `held${q.producers_stopped ? " (operator)" : ""}${q.home_stopped ? " (home)" : ""}`
      : paces.length ? `flowing, paced at ${Math.min(...paces).toFixed(1)}/s` : "flowing";
    const row = el("tr", { class: `queue${q.held ? " held" : ""}${q.name === selected ? " selected" : ""}`,
                           "data-queue": q.name, "data-held": q.held },
      el("td", { class: "name" }, q.name, q.root_cause.length ? el("span", { class: "badge root" }, "root cause") : null,
         q.error ? el("span", { class: "badge error", title: q.error }, "error") : null),
      el("td", { class: "depth" }, q.depth.count), el("td", {}, q.depth.size),
      el("td", {}, `${Math.max(0, ...q.subscriptions.map((s) => s.age)).toFixed(0)}s`),
      el("td", { class: "thresholds" }, limits(q.thresholds)),
      el("td", { class: "flow" }, flow), el("td", {}, clock(q.held_since)), el("td", {}, subs),
      READ_ONLY ? null : el("td", { class: "actions" }, ...actionButtons(q.name)));
    row.addEventListener("click", (event) => { if (event.target.tagName !== "BUTTON") select(q.name); });
    return row;
  }));
}

// Put `rows` in `body`, keeping each row and cell that has not changed: an unchanged page is left
// alone between refreshes, so an operator's text selection (and the row clicked) survives them.
function patchRows(body, rows) {
  const kept = new Map([...body.children].map((row) => [row.dataset.queue, row]));
  rows.forEach((row, i) => {
    const old = kept.get(row.dataset.queue);
    kept.delete(row.dataset.queue);
    let placed = row;
    if (old && old.cells.length === row.cells.length) {
      for (const name of ["class", "data-held"]) {
        if (row.hasAttribute(name)) old.setAttribute(name, row.getAttribute(name)); else old.removeAttribute(name);
      }
      [...row.cells].forEach((cell, c) => { if (!old.cells[c].isEqualNode(cell)) old.replaceChild(cell, old.cells[c]); });
      placed = old;
    } else if (old) {
      old.remove();
    }
    if (body.children[i] !== placed) body.insertBefore(placed, body.children[i] || null);
  });
  for (const row of kept.values()) row.remove();
}

function renderHome(data) {
  const box = document.getElementById("home-limits");
  box.textContent = data.home_limits
    ? `home-wide limits ${limits(data.home_limits)}: home depth ${data.home_depth.count}, ` +
      `${data.home_flow_stopped ? "flow-stopped (every producer held)" : "flowing"}, ` +
      `flowStoppedCount ${data.home_flow_stopped_count}` : "";
}

// The chains that matter, as the server laid them out in layers (a column per layer).
function renderPipeline(graph) {
  const svg = document.getElementById("pipeline");
  const at = Object.fromEntries(graph.nodes.map((n) => [n.name, { x: 10 + n.column * 200, y: 10 + n.row * 80 }]));
  // its height follows its width (the viewBox's shape): the graph is drawn whole, scaled to the panel
  svg.setAttribute("viewBox", `0 0 ${Math.max(600, 20 + 200 * graph.columns)} ${30 + 80 * Math.max(1, graph.rows)}`);
  document.getElementById("pipeline-note").textContent = (graph.nodes.length ? "" : "no chain, nothing held") +
    (graph.hidden_chains ? `${graph.hidden_chains} more chains that matter (${graph.hidden_queues} queues) ` +
      "not drawn: search or filter the list, select a queue to draw its chain" : "");
  const arrow = el("svg:defs", {}, el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" }, el("svg:path", { d: "M 0 0 L 10 5 L 0 10 z" })));
  const lines = graph.edges.map((e) => el("svg:line", {
    class: `edge${e.backpressure ? " backpressure" : ""}`, "data-from": e.from, "data-to": e.to,
    x1: at[e.from].x + 160, y1: at[e.from].y + 25, x2: at[e.to].x, y2: at[e.to].y + 25, "marker-end": "url(#arrow)" }));
  const boxes = graph.nodes.map((q) => {
    const cause = q.root_cause.length > 0;
    const label = q.name.length > 24 ? `…${q.name.slice(-23)}` : q.name;
    const group = el("svg:g", { class: `node${q.held ? " held" : ""}${cause ? " root-cause" : ""}`
                                + `${q.name === selected ? " selected" : ""}`,
                                "data-queue": q.name, transform: `translate(${at[q.name].x},${at[q.name].y})` },
      el("svg:title", {}, cause ? `${q.name}: root cause: ${q.root_cause.join("; ")}` : q.name),
      el("svg:rect", { width: 160, height: 50 }),
      el("svg:text", { x: 8, y: 18 }, label),
      el("svg:text", { x: 8, y: 36 }, q.error ? "unreadable" : `depth ${q.depth}${q.held ? " · held" : ""}`),
      cause ? el("svg:text", { class: "cause", x: 8, y: 64 }, "root cause") : null);
    group.addEventListener("click", () => { if (!q.outside) select(q.name); });
    return group;
  });
  svg.replaceChildren(arrow, ...lines, ...boxes);
}

function select(name) {
  const changed = selected !== name;
  if (changed) { selected = name; live = []; lastChart = null; }
  document.querySelectorAll("tr.queue").forEach((row) => row.classList.toggle("selected", row.dataset.queue === name));
  const queue = lastData && lastData.queues.find((q) => q.name === name);
  document.getElementById("detail-title").textContent = `queue ${name}` + (queue && queue.subscriptions.length > 1
    ? `, subscription ${charted(queue)}` : "");
  loadDetail();
  const drawn = lastData && lastData.graph.nodes.some((n) => n.name === name);
  if (changed && !drawn) reload();  // the graph draws the selected queue's chain
}

// The subscription a queue's chart shows: its default one, else its first.
function charted(queue) {
  const names = queue.subscriptions.map((s) => s.name);
  return names.includes("default") ? "default" : names[0];
}

async function loadDetail() {
  if (!selected) return;
  const name = selected;
  const queue = lastData && lastData.queues.find((q) => q.name === name);
  const subscription = queue ? `&subscription=${encodeURIComponent(charted(queue))}` : "";  // else the server's choice
  try {
    const chartUrl = `/api/chart?queue=${encodeURIComponent(name)}${subscription}`;
    const [graph, why] = await Promise.all([getJSON(chartUrl),
                                            getJSON(`/api/why?queue=${encodeURIComponent(name)}`)]);
    if (name !== selected) return;
    lastChart = graph;
    document.getElementById("why").replaceChildren(...why.map((stage) =>
      el("li", { class: stage.causes.length ? "root" : "", "data-queue": stage.queue }, stage.line)));
    drawChart(null);
  } catch (error) {
    document.getElementById("why").replaceChildren(el("li", {}, error.message));
  }
}

function drawChart() {
  const svg = document.getElementById("chart");
  const points = [...(lastChart ? lastChart.points : []), ...live].sort((a, b) => a.t - b.t);
  if (!points.length) { svg.replaceChildren(); return; }
  const width = 600, height = 220, left = 45, bottom = 20;  // the time labels below, in UTC
  const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1);
  const top = Math.max(1, ...points.map((p) => Math.max(p.depth, p.stop || 0))) * 1.1;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - 5);
  const y = (v) => height - bottom - (v / top) * (height - bottom - 5);
  const step = (key) => points.filter((p) => p[key] !== null && p[key] !== undefined && (key === "depth" || p[key] > 0))
    .map((p, i) => `${i ? "H" : "M"}${x(p.t).toFixed(1)} ${i ? `V${y(p[key]).toFixed(1)}` : y(p[key]).toFixed(1)}`).join(" ");
  const held = [];
  let start = null;
  for (const p of points) {
    if (p.held && start === null) start = p.t;
    if (!p.held && start !== null) { held.push([start, p.t]); start = null; }
  }
  if (start !== null) held.push([start, t1]);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren(
    ...held.map(([a, b]) => el("svg:rect", { class: "held", x: x(a), y: 0, width: Math.max(1, x(b) - x(a)), height: height - bottom })),
    el("svg:path", { class: "stop", d: step("stop") }), el("svg:path", { class: "resume", d: step("resume") }),
    el("svg:path", { class: "depth", d: step("depth") }),
    el("svg:text", { x: 2, y: 12 }, Math.round(top)), el("svg:text", { x: 2, y: height - bottom }, "0"),
    el("svg:text", { class: "unit", x: 2, y: 26 }, "messages"),
    el("svg:text", { class: "time", x: left, y: height - 4 }, clock(t0)),
    el("svg:text", { class: "time", x: width - 2, y: height - 4, "text-anchor": "end" }, clock(t1)));
}

function actionButtons(queue) {
  const make = (action, label) => {
    const button = el("button", { type: "button", class: "action", "data-action": action, "data-queue": queue }, label);
    button.addEventListener("click", () => confirmAction(action, queue));
    return button;
  };
  return [make("stop-producers", "stop producers"), make("start-producers", "start producers"),
          make("set", "set…"), make("unset", "unset…")];
}

function confirmAction(action, queue) {
  const dialog = document.getElementById("confirm");
  const fields = document.getElementById("confirm-fields");
  const texts = {
    "stop-producers": `Stop every producer of queue ${queue}, whatever its depth?`,
    "start-producers": `Start the producers of queue ${queue} again (its thresholds decide)?`,
    set: `Change a setting of queue ${queue} (in force from its producers' next look):`,
    unset: `Remove a run-time setting of queue ${queue} (back to its recorded value):`,
  };
  document.getElementById("confirm-text").textContent = texts[action];
  fields.replaceChildren(...(action === "set"
    ? [el("label", {}, "setting ", el("input", { id: "setting-key", placeholder: "stopCount" })),
       el("label", {}, " value ", el("input", { id: "setting-value", placeholder: "900" }))]
    : action === "unset" ? [el("label", {}, "setting ", el("input", { id: "setting-key", placeholder: "stopCount" }))] : []));
  document.getElementById("token-field").hidden = !TOKEN_NEEDED;
  document.getElementById("token").value = token;
  dialog.dataset.action = action;
  dialog.dataset.queue = queue;
  dialog.showModal();
}

async function post(request) {
  const headers = { "Content-Type": "application/json", "X-CSRF-Token": CSRF };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch("/api/action", { method: "POST", headers, body: JSON.stringify(request) });
  const body = await response.json();
  // applied, or pending for a controller (said in the message, shown as a warning)
  say(response.ok ? body.message : `refused: ${body.error}`, response.ok && !Object.keys(body.pending || {}).length);
  return response.ok;
}

function confirmed() {
  const dialog = document.getElementById("confirm");
  const request = { action: dialog.dataset.action, target: dialog.dataset.queue };
  const key = document.getElementById("setting-key");
  if (request.action === "set") request.settings = { [key.value.trim()]: document.getElementById("setting-value").value.trim() };
  if (request.action === "unset") request.keys = [key.value.trim()];
  token = document.getElementById("token").value.trim();
  dialog.close();
  post(request).then(refresh);
}

document.addEventListener("DOMContentLoaded", () => {
  if (!READ_ONLY) {
    document.getElementById("confirm-yes").addEventListener("click", confirmed);
    document.getElementById("confirm-no").addEventListener("click", () => document.getElementById("confirm").close());
  }
  // the search box is an editable span (a searchbox, one line): the page's only inputs are an action's
  const search = document.getElementById("search");
  let typing = null;
  search.addEventListener("keydown", (event) => { if (event.key === "Enter") event.preventDefault(); });
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { Object.assign(list, { search: search.textContent.trim().slice(0, 200), page: 0 }); reload(); }, 200);
  });
  document.getElementById("show").addEventListener("change", (event) => {
    Object.assign(list, { show: event.target.value, page: 0 });
    reload();
  });
  const turn = (by) => (event) => {
    event.preventDefault();
    if (event.currentTarget.hasAttribute("aria-disabled")) return;
    list.page = Math.max(0, list.page + by);
    reload();
  };
  document.getElementById("previous").addEventListener("click", turn(-1));
  document.getElementById("next").addEventListener("click", turn(1));
  refresh();
  setInterval(refresh, REFRESH_MS);
  setInterval(loadDetail, 5 * REFRESH_MS);
});

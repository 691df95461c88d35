// The dashboard: polls the admin API once a second (same origin: the login session's
// cookie, or the browser's Basic credentials) and draws the last HISTORY samples on
// canvases; no library, no build step.
"use strict";

const HISTORY = 300; // samples kept: five minutes at one a second
const samples = []; // {time, nodes, connections, received, sent, dropped}
let clientSearch = "";
let bridges = false; // any configured: the first answer says (they change only on restart)
let csrfToken = null; // the login session's, from /api/v1/session; null with Basic credentials

async function api(path, options) {
  // State-changing requests must declare a JSON body: the broker refuses form-shaped ones
  // (another site's page could send those with the operator's credentials). A login
  // session's must also carry its CSRF token, which no other site's page can read.
  const headers = { "Content-Type": "application/json" };
  if (csrfToken !== null) headers["X-CSRF-Token"] = csrfToken;
  const response = await fetch(path, { credentials: "same-origin", headers, ...options });
  if (response.status === 401 && csrfToken !== null) {
    window.location.replace("/"); // the session has ended: back to the login page
  }
  if (!response.ok && response.status !== 204) {
    const answer = await response.json().catch(() => ({}));
    throw new Error(`${path}: ${response.status}${answer.error ? " " + answer.error : ""}`);
  }
  return response.status === 204 ? null : response.json();
}

function text(value) {
  return value === null || value === undefined ? "" : String(value);
}

function setStatus(ok, message) {
  const element = document.getElementById("status");
  element.textContent = message;
  element.className = "status " + (ok ? "ok" : "error");
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    if (cell instanceof Node) td.appendChild(cell);
    else td.textContent = text(cell);
    tr.appendChild(td);
  }
  return tr;
}

function fill(tableId, rows) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren(...rows);
}

function duration(seconds) {
  const s = Math.floor(seconds);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
}

function rates() {
  // messages per second between consecutive samples
  const result = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i];
    const dt = Math.max(b.time - a.time, 0.001);
    result.push({
      in: (b.received - a.received) / dt,
      out: (b.sent - a.sent) / dt,
      dropped: (b.dropped - a.dropped) / dt,
    });
  }
  return result;
}

function draw(canvasId, series) {
  // series: [{values: [...], color}], drawn on a shared y scale from 0
  const canvas = document.getElementById(canvasId);
  const ctx = canvas.getContext("2d");
  const width = canvas.width, height = canvas.height, left = 44, bottom = 16;
  ctx.clearRect(0, 0, width, height);
  const max = Math.max(1, ...series.flatMap((s) => s.values));
  ctx.fillStyle = "#667";
  ctx.font = "11px sans-serif";
  ctx.strokeStyle = "#e4e6ea";
  for (let i = 0; i <= 4; i++) {
    const y = (height - bottom) * (1 - i / 4);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(width, y); ctx.stroke();
    const label = (max * i) / 4;
    ctx.fillText(label >= 100 ? label.toFixed(0) : label.toFixed(1), 2, Math.max(y, 10));
  }
  // The x axis spans the samples held, at least a minute, at most HISTORY seconds.
  const span = Math.min(HISTORY, Math.max(60, samples.length));
  ctx.fillText(span >= 120 ? `last ${Math.round(span / 60)} min` : `last ${span} s`, left, height - 2);
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    s.values.forEach((value, i) => {
      const x = left + ((width - left) * (i + span - s.values.length)) / span;
      const y = (height - bottom) * (1 - value / max);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

let missingWorkers = [];  // a pool's workers that did not answer the last stats request

async function refreshStats() {
  const stats = await api("/api/v1/stats");
  missingWorkers = stats.missing_workers || [];
  // In a cluster the figures, charts and top topics are the cluster's, added up over the
  // nodes that answered (the header names them); else this node's.
  const whole = stats.cluster || stats;
  const nodes = stats.cluster ? stats.cluster.nodes.join(", ") : stats.node;
  let heading = stats.node;
  if (stats.cluster) {
    heading += ` · cluster: ${nodes}`;
    if (stats.cluster.missing_nodes.length) {
      heading += ` (not answering: ${stats.cluster.missing_nodes.join(", ")})`;
    }
  }
  document.getElementById("node").textContent = heading;
  const dropped = whole.messages_dropped + whole.deliveries_dropped;
  const figures = {
    connections: whole.connections, sessions: whole.sessions,
    subscriptions: whole.subscriptions, retained: whole.retained,
    received: whole.messages_received, sent: whole.messages_sent, dropped,
    uptime: duration(whole.uptime),
  };
  for (const [name, value] of Object.entries(figures)) {
    document.getElementById(`f-${name}`).textContent = text(value);
  }
  // Counts of another set of nodes are not comparable: the charts start again.
  if (samples.length && samples[samples.length - 1].nodes !== nodes) samples.length = 0;
  samples.push({
    time: stats.time, nodes, connections: whole.connections,
    received: whole.messages_received, sent: whole.messages_sent, dropped,
  });
  if (samples.length > HISTORY) samples.shift();
  draw("chart-connections", [{ values: samples.map((s) => s.connections), color: "#6a1b9a" }]);
  const r = rates();
  draw("chart-rates", [
    { values: r.map((x) => x.in), color: "#1565c0" },
    { values: r.map((x) => x.out), color: "#2e7d32" },
    { values: r.map((x) => x.dropped), color: "#c62828" },
  ]);
  fill("topics", whole.top_topics.map((t) => row([t.topic, t.messages])));
}

async function kick(clientId) {
  await api(`/api/v1/clients/${encodeURIComponent(clientId)}`, { method: "DELETE" });
  await refreshClients();
}

async function refreshClients() {
  const query = new URLSearchParams({ limit: "100", clientid: clientSearch });
  const page = await api(`/api/v1/clients?${query}`);
  fill("clients", page.data.map((c) => {
    const button = document.createElement("button");
    button.className = "kick";
    button.textContent = "kick";
    button.dataset.clientid = c.clientid;
    button.addEventListener("click", () => kick(c.clientid).catch(showError));
    return row([c.clientid, c.node, c.username, c.peer, c.listener, c.proto_ver, c.keepalive,
      c.inflight, c.queue, c.subscriptions, button]);
  }));
  const missingNodes = page.missing_nodes || [];  // a cluster's nodes that did not answer
  const left = missingNodes.length ? ` (nodes ${missingNodes.join(", ")} not answering)` : "";
  document.getElementById("clients-count").textContent =
    `${page.data.length} of ${page.meta.count} connected clients${left}`;
}

async function refreshRetained() {
  // "#" leaves out the $SYS topics [MQTT-4.7.2-1]: the figures above show those.
  const page = await api("/api/v1/retained?limit=50&topic=%23");
  fill("retained", page.data.map((m) => {
    const tr = row([m.topic, m.qos, m.payload_encoding === "plain" ? m.payload : "(binary)"]);
    tr.lastChild.className = "payload";
    return tr;
  }));
}

async function refreshBridges() {
  const answer = await api("/api/v1/bridges");
  bridges = answer.data.length > 0;
  document.getElementById("bridges-panel").hidden = !bridges;
  fill("bridges", answer.data.map((b) => row([b.name, b.connected ? "yes" : "no", b.address,
    b.worker, b.sent, b.received, b.queued, b.dropped, b.last_error])));
}

async function loadConfig() {
  const config = await api("/api/v1/config");
  const list = document.getElementById("config");
  const entries = [
    ["node", config.node_name], ["listeners", config.listeners.join(", ")],
    ["store", `${config.store.kind} (${config.store.data_dir})`],
    ["plugins", config.plugins.join(", ") || "none"],
    ["max packet size", config.limits.max_packet_size],
    ["max in-flight", config.limits.max_inflight],
    ["max queued", config.limits.max_queued_messages],
    ["anonymous", config.auth.allow_anonymous],
    ["$SYS interval", `${config.sys.interval} s`],
    ["flapping", config.flapping.max_connects
      ? `${config.flapping.max_connects} in ${config.flapping.window} s` : "off"],
  ];
  list.replaceChildren(...entries.flatMap(([name, value]) => {
    const dt = document.createElement("dt"); dt.textContent = name;
    const dd = document.createElement("dd"); dd.textContent = text(value);
    return [dt, dd];
  }));
}

function showError(error) {
  setStatus(false, `error: ${error.message}`);
}

async function tick() {
  try {
    const bridgeRows = bridges ? [refreshBridges()] : [];
    await Promise.all([refreshStats(), refreshClients(), refreshRetained(), ...bridgeRows]);
    const left = missingWorkers.length ? ` · workers ${missingWorkers.join(", ")} not answering` : "";
    setStatus(true, `live · ${new Date().toLocaleTimeString()}${left}`);
  } catch (error) {
    showError(error);
  }
}

async function loadSession() {
  const session = await api("/api/v1/session");
  csrfToken = session.csrf_token;
  document.getElementById("user").textContent = session.user;
  document.getElementById("logout").hidden = csrfToken === null;
  document.getElementById("change-password").hidden = !session.can_change_password;
}

async function logout() {
  await api("/api/v1/logout", { method: "POST" });
  window.location.replace("/");
}

async function changePassword(event) {
  event.preventDefault();
  const message = document.getElementById("password-message");
  const current = document.getElementById("password-current").value;
  const fresh = document.getElementById("password-new").value;
  if (fresh !== document.getElementById("password-repeat").value) {
    message.textContent = "the new passwords differ";
    return;
  }
  try {
    await api("/api/v1/password", {
      method: "POST", body: JSON.stringify({ current, new: fresh }),
    });
    event.target.reset();
    message.textContent = "password changed";
  } catch (error) {
    message.textContent = error.message;
  }
}

document.getElementById("logout").addEventListener("click", () => logout().catch(showError));
document.getElementById("change-password").addEventListener("click", () => {
  const form = document.getElementById("password-form");
  form.hidden = !form.hidden;
});
document.getElementById("password-form").addEventListener("submit", changePassword);
document.getElementById("client-search").addEventListener("input", (event) => {
  clientSearch = event.target.value;
  refreshClients().catch(showError);
});
loadSession().then(() => {
  loadConfig().catch(showError);
  refreshBridges().catch(showError);
  tick();
  setInterval(tick, 1000);
}).catch(showError);

// The live league page: polls api/state (seedleague/league/page.py) and redraws with plotly.js.
// Every chart is a Plotly figure; this file only maps the league's JSON onto figures and tables.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token");
const ROLE_COLOURS = { main: "#1f77b4", main_exploiter: "#d62728", league_exploiter: "#2ca02c", anchor: "#7f7f7f",
                       human: "#9467bd" };
const FIXED = new Set(["anchor", "human"]);  // members that never train: marked apart in the standings
const PLOT_CONFIG = { displaylogo: false, responsive: true };
const MARGIN = { l: 55, r: 15, t: 10, b: 40 };
let updates = 0;
let lastOk = 0;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function fill(tbody, rows, rowClass) {
  tbody.replaceChildren(...rows.map((cells, i) => {
    const tr = el("tr");
    if (rowClass && rowClass[i]) tr.className = rowClass[i];
    cells.forEach(([text, cls]) => tr.appendChild(el("td", text, cls)));
    return tr;
  }));
}

function draw(id, traces, layout) {
  const div = document.getElementById(id);
  Plotly.react(div, traces, Object.assign({ margin: MARGIN, showlegend: true, legend: { font: { size: 10 } } }, layout),
               PLOT_CONFIG);
  div.dataset.traces = traces.length;
  div.dataset.points = traces.reduce((n, t) => n + ((t.z || t.y || []).length), 0);
}

function standings(state) {
  fill(document.querySelector("#standings tbody"), state.standings.map((s, i) => [
    [String(i + 1)], [s.key, "text"], [s.role, "text"], [s.elo.toFixed(1)],
    [`${s.mu.toFixed(1)} [${(s.mu - 2 * s.sigma).toFixed(1)}, ${(s.mu + 2 * s.sigma).toFixed(1)}]`],
    [s.games.toFixed(1)], [s.win_rate.toFixed(3)],
  ]), state.standings.map((s) => (FIXED.has(s.role) ? `fixed ${s.role}` : "")));
  document.getElementById("standings-notes").textContent = state.standings_notes.join("; ");
  const top = state.standings.slice(0, 20).reverse();
  draw("intervals", [{
    type: "scatter", mode: "markers", x: top.map((s) => s.mu), y: top.map((s) => s.key),
    error_x: { type: "data", array: top.map((s) => 2 * s.sigma), visible: true },
    marker: { color: top.map((s) => ROLE_COLOURS[s.role] || "#555") }, name: "μ ± 2σ",
    hovertemplate: "%{y}: μ %{x:.1f} ± %{error_x.array:.1f}<extra></extra>",
  }], { showlegend: false, xaxis: { title: "TrueSkill μ" }, yaxis: { dtick: 1 }, margin: Object.assign({}, MARGIN, { l: 120 }) });
}

function eloCurves(state) {
  const times = state.wall.t.map((t) => new Date(t * 1000));
  const fixed = new Set((state.fixed || []).map((m) => m.key));
  const dashed = (key) => (fixed.has(key) ? { dash: "dot", width: 3 } : {});
  draw("elo-wall", Object.entries(state.wall.elo).map(([key, ys]) => ({
    type: "scatter", mode: "lines", name: key, x: times, y: ys, connectgaps: false, line: dashed(key),
  })), { xaxis: { title: "wall-clock" }, yaxis: { title: "Elo" } });

  const byPlayer = {};
  state.snapshots.forEach((s) => (byPlayer[s.player] = byPlayer[s.player] || []).push(s));
  draw("elo-steps", state.players.map((p) => {
    const snaps = (byPlayer[p.name] || []).slice().sort((a, b) => a.step - b.step);
    return {
      type: "scatter", mode: "lines+markers", name: `${p.name} (${p.role})`,
      x: snaps.map((s) => s.step), y: snaps.map((s) => state.snapshot_elo[s.key]), text: snaps.map((s) => s.key),
      line: { color: ROLE_COLOURS[p.role] }, hovertemplate: "%{text}: Elo %{y:.1f}<extra></extra>",
    };
  }), { xaxis: { title: "learner step" }, yaxis: { title: "Elo" } });

  draw("elo-results", Object.entries(state.elo_history).map(([key, points]) => ({
    type: "scatter", mode: "lines", line: Object.assign({ shape: "hv" }, dashed(key)), name: key,
    x: points.map((p) => p[0]), y: points.map((p) => p[1]),
  })), { xaxis: { title: "results counted" }, yaxis: { title: "Elo" } });
}

function payoffHeatmap(state) {
  const p = state.payoff;
  const custom = p.games.map((row, i) => row.map((g, j) => [g, p.low[i][j], p.high[i][j]]));
  draw("payoff", [{
    type: "heatmap", x: p.keys, y: p.keys, z: p.win_rate, customdata: custom, zmin: 0, zmax: 1,
    colorscale: "RdBu", reversescale: false, colorbar: { title: "P" },
    hovertemplate: "%{y} vs %{x}<br>P[row wins] %{z:.2f}, 95% CI %{customdata[1]:.2f}–%{customdata[2]:.2f}" +
                   "<br>games %{customdata[0]:.1f} (decayed)<extra></extra>",
  }], { showlegend: false, yaxis: { autorange: "reversed" }, margin: { l: 110, r: 10, t: 10, b: 110 } });
  document.getElementById("payoff-note").textContent = p.left_out ?
    `${p.keys.length} keys shown (live players and the best rated); ${p.left_out} more left out` : "";
}

function learners(state) {
  fill(document.querySelector("#learners tbody"), state.players.map((p) => [
    [p.name, "text"], [p.role, "text"], [String(p.learner_step)],
    [p.steps_per_s === undefined ? "–" : p.steps_per_s.toFixed(1)], [String(p.snapshots)], [String(p.resets)],
    [String(p.last_snapshot_step)],
  ]));
  const times = state.wall.t.map((t) => new Date(t * 1000));
  draw("steps-wall", Object.entries(state.wall.steps).map(([name, ys]) => ({
    type: "scatter", mode: "lines", name, x: times, y: ys,
  })), { xaxis: { title: "wall-clock" }, yaxis: { title: "learner step" } });
}

function timeline(state) {
  const roles = [...new Set(state.snapshots.map((s) => s.role))];
  draw("timeline", roles.map((role) => {
    const snaps = state.snapshots.filter((s) => s.role === role);
    return {
      type: "scatter", mode: "markers", name: role, x: snaps.map((s) => s.step), y: snaps.map((s) => s.player),
      text: snaps.map((s) => s.key + (state.first_seen[s.key] ?
        " (seen " + new Date(state.first_seen[s.key] * 1000).toLocaleTimeString() + ")" : "")),
      marker: { color: ROLE_COLOURS[role], size: 9, symbol: "line-ns-open", line: { width: 2 } },
      hovertemplate: "%{text}<extra></extra>",
    };
  }), { xaxis: { title: "learner step" }, yaxis: { type: "category" } });
}

function draws(state) {
  const box = document.getElementById("draws");
  box.replaceChildren(...state.players.map((p) => {
    const div = el("div");
    div.appendChild(el("h2", `${p.name} (${p.role})`));
    const table = el("table");
    const shares = state.draws[p.name] || [];
    shares.forEach((d) => {
      const tr = el("tr");
      tr.appendChild(el("td", d.opponent === p.name ? `${d.opponent} (self-play)` : d.opponent, "text"));
      tr.appendChild(el("td", `${(100 * d.share).toFixed(1)}%`));
      table.appendChild(tr);
    });
    div.appendChild(table);
    return div;
  }));
}

function fixedMembers(state) {
  const members = state.fixed || [];
  fill(document.querySelector("#fixed tbody"), members.map((m) => [
    [m.key, "text"], [m.role, "text"], [String((state.snapshot_elo[m.key] || 0).toFixed(1))], [m.plays, "text"],
  ]), members.map((m) => `fixed ${m.role}`));
  document.getElementById("fixed").dataset.members = String(members.length);
  const play = state.play || {};
  document.getElementById("play-command").textContent = play.command || "";
  const link = document.getElementById("play-link");
  link.hidden = !play.url;
  link.href = play.url || "#";
}

function status(state) {
  const line = document.getElementById("status");
  const rate = state.results_per_s === null || state.results_per_s === undefined ? "" :
    `, ${state.results_per_s.toFixed(1)} results/s`;
  const count = (n, what) => `${n} ${what}${n === 1 ? "" : "s"}`;
  line.textContent = `mode ${state.mode} · ${count(state.players.length, "player")} · ` +
    `${count(state.snapshots.length, "snapshot")} · ` +
    `${state.results} results counted${rate} · updated ${new Date(state.time * 1000).toLocaleTimeString()}`;
  line.className = "";
  document.body.dataset.updates = String(++updates);
  document.body.dataset.results = String(state.results);
}

async function poll() {
  let every = 2;
  try {
    const response = await fetch("api/state", {
      cache: "no-store", headers: TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {},
    });
    if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
    const state = await response.json();
    every = state.every_s || every;
    standings(state);
    eloCurves(state);
    payoffHeatmap(state);
    learners(state);
    timeline(state);
    draws(state);
    fixedMembers(state);
    status(state);
    lastOk = Date.now();
  } catch (error) {
    const line = document.getElementById("status");
    line.textContent = `the league did not answer (${error.message}); retrying` +
      (lastOk ? `; last update ${new Date(lastOk).toLocaleTimeString()}` : "");
    line.className = "stale";
  }
  setTimeout(poll, every * 1000);
}

poll();

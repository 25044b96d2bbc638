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
    [s.games.toFixed(1)], [s.win_rate.toFixed(3)], [s.pbt || "", "text"],
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

// The x axes a curve can be drawn over: each maps a point's [env steps, time, learner step] to x (null: unplaced).
const AXES = {
  env: { title: "env steps", x: (p) => p[0] },
  wall: { title: "wall-clock", x: (p) => (p[1] === null || p[1] === undefined ? null : new Date(p[1] * 1000)) },
  learner: { title: "learner step", x: (p) => p[2] },
};

function axisOf(select, fallback) {
  // The axis a switch names; before the person chose one, `fallback` (set each poll, e.g. env steps once known).
  const node = document.getElementById(select);
  if (!node.dataset.chosen) node.value = fallback;
  return node.value;
}

function eloCurves(state) {
  const fixed = new Set((state.fixed || []).map((m) => m.key));
  const dashed = (key) => (fixed.has(key) ? { dash: "dot", width: 3 } : {});
  const overEnv = axisOf("wall-axis", "wall") === "env";
  const times = state.wall.t.map((t) => new Date(t * 1000));
  const envSteps = state.wall_env_steps || {};
  const wallKeys = Object.keys(state.wall.elo).filter((key) => !overEnv || envSteps[key]);
  draw("elo-wall", wallKeys.map((key) => ({
    type: "scatter", mode: "lines", name: key, x: overEnv ? envSteps[key] : times, y: state.wall.elo[key],
    connectgaps: false, line: dashed(key),
  })), { xaxis: { title: overEnv ? "env steps (of the player)" : "wall-clock" }, yaxis: { title: "Elo" } });
  document.getElementById("elo-wall").dataset.axis = overEnv ? "env" : "wall";
  document.getElementById("elo-wall-note").textContent = overEnv ?
    (wallKeys.length ? "each learner's live Elo at its own env steps, from its host's progress file" :
      "no host progress file found beside the league (RUN/progress.jsonl, RUN/players/NAME/progress.jsonl)") :
    "sampled by this league service since it started";

  const at = state.snapshot_at || {};
  const placed = state.snapshots.some((s) => at[s.key] && at[s.key][0] !== null);
  const axis = AXES[axisOf("snap-axis", placed ? "env" : "learner")];
  const byPlayer = {};
  state.snapshots.forEach((s) => (byPlayer[s.player] = byPlayer[s.player] || []).push(s));
  draw("elo-steps", state.players.map((p) => {
    const snaps = (byPlayer[p.name] || []).map((s) => [axis.x([...(at[s.key] || [null, null]), s.step]), s])
      .filter(([x]) => x !== null && x !== undefined).sort((a, b) => a[1].step - b[1].step);
    return {
      type: "scatter", mode: "lines+markers", name: `${p.name} (${p.role})`,
      x: snaps.map(([x]) => x), y: snaps.map(([, s]) => state.snapshot_elo[s.key]), text: snaps.map(([, s]) => s.key),
      line: { color: ROLE_COLOURS[p.role] }, hovertemplate: "%{text}: Elo %{y:.1f}<extra></extra>",
    };
  }), { xaxis: { title: axis.title }, yaxis: { title: "Elo" } });
  document.getElementById("elo-steps").dataset.axis = document.getElementById("snap-axis").value;

  draw("elo-results", Object.entries(state.elo_history).map(([key, points]) => ({
    type: "scatter", mode: "lines", line: Object.assign({ shape: "hv" }, dashed(key)), name: key,
    x: points.map((p) => p[0]), y: points.map((p) => p[1]),
  })), { xaxis: { title: "results counted" }, yaxis: { title: "Elo" } });
}

function exploitability(state) {
  // The run's evaluations (seedleague eval: exact, NashConv / 2) over the chosen axis, and each best response
  // (seedleague exploit) as its learning curve with its estimate: a lower bound on the output's exploitability.
  const evaluations = state.evaluations || {};
  const responses = state.best_responses || [];
  const chosen = axisOf("exploit-axis", "env");  // an evaluation point: [env steps, training s, learner step, value]
  const axis = chosen === "seconds" ? { title: "seconds of training", x: (p) => p[1] } : AXES[chosen];
  document.getElementById("exploit").dataset.axis = chosen;
  const traces = Object.entries(evaluations).map(([field, points]) => {
    const shown = points.map((p) => [axis.x([p[0], p[1], p[2]]), p[3]]).filter(([x]) => x !== null);
    return { type: "scatter", mode: "lines+markers", name: field.replace(/_/g, " "),
             x: shown.map(([x]) => x), y: shown.map(([, y]) => y) };
  });
  draw("exploit", traces, { xaxis: { title: axis.title }, yaxis: { title: "exploitability", rangemode: "tozero" } });
  draw("best-response", responses.map((r) => ({
    type: "scatter", mode: "lines", name: r.name + (r.finished ? "" : " (training)"),
    x: r.curve.map((p) => p[0]), y: r.curve.map((p) => p[1]),
  })).concat(responses.filter((r) => r.finished && r.estimate !== null && r.estimate !== undefined).map((r) => ({
    type: "scatter", mode: "markers", name: `${r.name}: estimate`, marker: { size: 10, symbol: "diamond" },
    x: [r.curve.length ? r.curve[r.curve.length - 1][0] : 0], y: [r.estimate],
    error_y: { type: "data", array: [r.ci95 || 0], visible: true },
  }))), { xaxis: { title: "seconds of the best response's training" }, yaxis: { title: "its mean return vs the output" } });
  fill(document.querySelector("#responses tbody"), responses.map((r) => [
    [r.name, "text"],
    [r.finished ? (r.estimate === null || r.estimate === undefined ? "–" : `${r.estimate.toFixed(4)} ± ${(r.ci95 || 0).toFixed(4)}`) : "training"],
    [r.games ? String(r.games) : "–"],
    [r.finished ? (r.error ? r.error : (r.read_out ? "greedy read-out" : "closing window") +
      (r.still_rising ? "; still rising" : "")) : "", "text"],
  ]));
  const none = !traces.length && !responses.length;
  document.getElementById("exploit-note").textContent = none ?
    `none measured yet: seedleague eval --run-dir ${state.run_dir || "RUN"} (exact, small OpenSpiel games) or ` +
    `seedleague exploit --run-dir ${state.run_dir || "RUN"} (a learned best response) writes one` : "";
  document.getElementById("exploitability").dataset.series = String(traces.length + responses.length);
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

function envRate(progress, now) {
  // [env steps, env steps/s over the last few ticks] of one host's progress ("–" for a rate whose host has
  // written no tick for 30 s: stopped), or ["–", "–"] without it
  if (!progress || !progress.t.length) return ["–", "–"];
  const n = progress.t.length - 1, first = Math.max(0, n - 5), span = progress.t[n] - progress.t[first];
  const live = now - progress.t[n] < 30;
  const rate = span > 0 && live ? ((progress.env_steps[n] - progress.env_steps[first]) / span).toFixed(0) : "–";
  return [String(progress.env_steps[n]), rate];
}

function learners(state) {
  fill(document.querySelector("#learners tbody"), state.players.map((p) => [
    [p.name, "text"], [p.role, "text"], [String(p.learner_step)],
    [p.steps_per_s === undefined ? "–" : p.steps_per_s.toFixed(1)],
    ...envRate((state.progress || {})[p.name], state.time).map((text) => [text]), [String(p.snapshots)], [String(p.resets)],
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
    lastState = state;
    every = state.every_s || every;
    standings(state);
    eloCurves(state);
    payoffHeatmap(state);
    exploitability(state);
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

let lastState = null;
for (const id of ["wall-axis", "snap-axis", "exploit-axis"]) {
  document.getElementById(id).addEventListener("change", (event) => {
    event.target.dataset.chosen = "true";  // the person's choice stays over the polls
    if (lastState) { eloCurves(lastState); exploitability(lastState); }
  });
}
poll();

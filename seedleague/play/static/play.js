// The play page: GET api/info and api/standings, POST api/new and api/move (seedleague/play/server.py).
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token");
const HEADERS = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};
let table = null;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

async function call(path, body) {
  const options = body === undefined ? { headers: HEADERS, cache: "no-store" } :
    { method: "POST", headers: Object.assign({ "Content-Type": "application/json" }, HEADERS), body: JSON.stringify(body) };
  const response = await fetch(path, options);
  const text = await response.text();
  if (!response.ok) throw new Error(text.trim());
  return JSON.parse(text);
}

function row(cells) {
  const tr = el("tr");
  cells.forEach(([text, cls]) => tr.appendChild(el("td", text, cls)));
  return tr;
}

function agentMoves(moves) {
  const tbody = document.querySelector("#agent tbody");
  tbody.replaceChildren();
  moves.forEach((m, i) => {
    const head = row([[`move ${i + 1}: ${m.move}`, "text"], [""], [""]]);
    head.className = "agent-move";
    tbody.appendChild(head);
    m.probabilities.forEach((p) => {
      const tr = row([[p.move, "text"], [p.p.toFixed(3)], [""]]);
      const bar = el("span", "", "bar");
      bar.style.width = `${Math.round(120 * p.p)}px`;
      tr.lastChild.appendChild(bar);
      tbody.appendChild(tr);
    });
  });
}

function show(answer) {
  table = answer.table;
  const v = answer.view;
  document.getElementById("state").textContent = v.state;
  const legal = document.getElementById("legal");
  legal.replaceChildren(...v.legal.map((m) => {
    const button = el("button", m.text, "move");
    button.dataset.action = String(m.action);
    button.onclick = () => move(m.action);
    return button;
  }));
  agentMoves(v.agent_moves);
  document.getElementById("history").replaceChildren(...v.history.map((h) => el("li", `${h.who}: ${h.move}`)));
  const s = answer.score;
  document.getElementById("score").textContent =
    `score: ${s.wins} won, ${s.draws} drawn, ${s.losses} lost of ${s.games} (total return ${s.total_return})`;
  const outcome = v.finished ? { 1: "you won", 0.5: "a draw", 0: "you lost" }[v.outcome] : "";
  document.getElementById("result").textContent = v.finished ?
    `${outcome} (returns ${v.returns.join(" / ")}); start a new game` : "your move";
  document.getElementById("recorded").textContent = answer.recorded;
  document.body.dataset.games = String(s.games);
  document.body.dataset.finished = String(v.finished);
  document.body.dataset.outcome = v.finished ? String(v.outcome) : "";
  document.getElementById("error").textContent = "";
  if (v.finished) standings();
}

async function guarded(work) {
  try {
    show(await work());
  } catch (error) {
    document.getElementById("error").textContent = error.message;
  }
}

function newGame() {
  const seat = Number(document.getElementById("seat").value);
  const greedy = document.getElementById("greedy").checked;
  return guarded(() => call("api/new", { seat, greedy, table }));
}

function move(action) {
  return guarded(() => call("api/move", { table, action }));
}

async function standings() {
  try {
    const answer = await call("api/standings");
    document.querySelector("#standings tbody").replaceChildren(...answer.standings.map((r) =>
      row([[r.key, "text"], [r.role, "text"], [r.elo.toFixed(1)], [r.games.toFixed(1)], [r.win_rate.toFixed(3)]])));
    document.getElementById("standings-note").textContent = answer.error || "";
    document.getElementById("standings").dataset.rows = String(answer.standings.length);
  } catch (error) {
    document.getElementById("standings-note").textContent = error.message;
  }
}

async function start() {
  try {
    const info = await call("api/info");
    document.getElementById("greedy").checked = info.greedy;
    document.getElementById("about").textContent =
      `${info.game}: you play as "${info.member}" against ${info.anchor}, the output of ${info.run_dir} ` +
      `(${info.output.kind}, learner step ${info.output.step}); each finished game is a result in its league`;
    document.body.dataset.game = info.game;
  } catch (error) {
    document.getElementById("about").textContent = error.message;
    return;
  }
  document.getElementById("new").onclick = newGame;
  standings();
  await newGame();
  document.body.dataset.ready = "true";
}

start();

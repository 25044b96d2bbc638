'use strict';
// `numEnvs` copies of one two-seat turn-based game, stepped together, in the
// protocol's [env, seat, ...] layout (docs/protocol.md sections 2-5).
//
//   const envs = new VectorGame(() => new Nim([1, 3, 5, 7]), 16, seed);
//   envs.resetAll();                    // fresh games; rewards and flags cleared
//   envs.step(actions);                 // Int32Array [E * 2]; the acting seat's entry is played
//   envs.obs, envs.reward, envs.terminated, envs.truncated, envs.legalMask, envs.acting
//
// The buffers are typed arrays whose bytes are the wire bytes (little-endian
// hosts). Rewards are zero-sum: +1 to the winner and -1 to the loser on the
// winning move. Same-step autoreset: a finished game is reset at once, so the
// next message carries its final reward, terminated = 1 and the first
// observation of the next game. The first seat to move is random per env for
// the first game, then alternates game by game.
//
// With `vsRandom`, seat `e % 2` of env e plays uniformly random legal moves
// chosen here, whatever the host sends for it, and `results` counts the host's
// wins, losses and draws against it: an evaluation against `seedleague serve`,
// never for training (the host would learn from moves it did not choose).

const { makeRng } = require('./rng');

const SEATS = 2;

class VectorGame {
  constructor(makeGame, numEnvs, seed, vsRandom = false) {
    if (!Number.isInteger(numEnvs) || numEnvs < 1) throw new Error(`numEnvs must be >= 1, got ${numEnvs}`);
    this.games = Array.from({ length: numEnvs }, makeGame);
    const g = this.games[0];
    this.numEnvs = numEnvs;
    this.numActions = g.numActions;
    this.obsSize = g.obsSize;
    const rng = makeRng(seed);
    this.nextFirst = this.games.map(() => (rng() < 0.5 ? 0 : 1));
    const agents = numEnvs * SEATS;
    this.obs = new Float32Array(agents * this.obsSize);
    this.reward = new Float32Array(agents);
    this.terminated = new Uint8Array(numEnvs);
    this.truncated = new Uint8Array(numEnvs); // Nim always ends: never truncated
    this.legalMask = new Uint8Array(agents * this.numActions);
    this.acting = new Uint8Array(agents);
    this.episodes = 0;
    this.illegal = 0;
    this.vsRandom = vsRandom;
    this.randomMove = makeRng(Number(seed) + 1);
    this.scratchMask = new Uint8Array(this.numActions);
    this.results = { wins: 0, losses: 0, draws: 0 }; // the host's, with vsRandom
  }

  resetAll() {
    for (let e = 0; e < this.numEnvs; e++) this.resetOne(e);
    this.reward.fill(0);
    this.terminated.fill(0);
    this.truncated.fill(0);
    this.render();
  }

  // actions: [E, 2] int32. Returns the number of illegal actions for acting
  // seats, each replaced by the game's first legal action.
  step(actions) {
    let illegal = 0;
    this.reward.fill(0);
    this.terminated.fill(0);
    for (let e = 0; e < this.numEnvs; e++) {
      const game = this.games[e];
      const seat = game.toMove;
      const randomSeat = this.vsRandom && seat === e % SEATS;
      let a = randomSeat ? this.randomLegal(game) : actions[e * SEATS + seat];
      if (!game.isLegal(a)) {
        illegal++;
        a = game.firstLegal();
      }
      const { done, winner } = game.play(a);
      if (!done) continue;
      if (winner >= 0) {
        this.reward[e * SEATS + winner] = 1;
        this.reward[e * SEATS + (SEATS - 1 - winner)] = -1;
      }
      this.terminated[e] = 1;
      this.episodes++;
      if (this.vsRandom) this.count(winner, e % SEATS);
      this.resetOne(e); // same-step autoreset
    }
    this.illegal += illegal;
    this.render();
    return illegal;
  }

  // A uniformly random legal action of the seat to move.
  randomLegal(game) {
    game.legalMask(this.scratchMask);
    let legal = 0;
    for (const m of this.scratchMask) legal += m;
    let pick = Math.floor(this.randomMove() * legal);
    for (let a = 0; a < this.numActions; a++) {
      if (this.scratchMask[a] && pick-- === 0) return a;
    }
    return game.firstLegal();
  }

  count(winner, randomSeat) {
    if (winner < 0) this.results.draws++;
    else if (winner === randomSeat) this.results.losses++;
    else this.results.wins++;
  }

  resetOne(e) {
    this.games[e].reset(this.nextFirst[e]);
    this.nextFirst[e] = SEATS - 1 - this.nextFirst[e];
  }

  // Observations for both seats; legal mask and acting only for the seat to
  // move (the other seat's mask row is all 0: it has no move to make).
  render() {
    const A = this.numActions;
    const O = this.obsSize;
    for (let e = 0; e < this.numEnvs; e++) {
      const game = this.games[e];
      for (let s = 0; s < SEATS; s++) {
        const row = e * SEATS + s;
        game.observe(s, this.obs.subarray(row * O, (row + 1) * O));
        const mask = this.legalMask.subarray(row * A, (row + 1) * A);
        if (game.toMove === s) game.legalMask(mask);
        else mask.fill(0);
        this.acting[row] = game.toMove === s ? 1 : 0;
      }
    }
  }
}

module.exports = { VectorGame, SEATS };

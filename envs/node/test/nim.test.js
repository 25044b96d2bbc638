'use strict';
// The game and its vector form, by hand: moves, masks, zero-sum rewards, autoreset.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Nim } = require('../src/nim');
const { VectorGame } = require('../src/vector_game');

test('actions decode to (heap, stones) and only legal takes are allowed', () => {
  const g = new Nim([1, 3]);
  g.reset(0);
  assert.equal(g.numActions, 6); // 2 heaps x up to 3 stones
  const mask = new Uint8Array(6);
  g.legalMask(mask);
  assert.deepEqual([...mask], [1, 0, 0, 1, 1, 1]); // heap 0: take 1; heap 1: take 1..3
  assert.equal(g.isLegal(1), false);
  assert.throws(() => g.play(1), /illegal action 1/);
});

test('whoever takes the last stone wins', () => {
  const g = new Nim([1, 2]);
  g.reset(1);
  assert.deepEqual(g.play(2), { done: false, winner: -1 }); // seat 1 takes 1 from heap 1 (a = 1*2 + 0)
  assert.equal(g.toMove, 0);
  assert.deepEqual(g.play(0), { done: false, winner: -1 }); // seat 0 empties heap 0
  assert.deepEqual(g.play(2), { done: true, winner: 1 }); // seat 1 takes the last stone
});

test('observation: a thermometer per heap, then 3 binary digits per heap', () => {
  const g = new Nim([1, 3]);
  g.reset(0);
  g.play(3); // heap 1: 3 -> 2
  const out = new Float32Array(g.obsSize);
  g.observe(0, out);
  assert.deepEqual([...out], [1, 1, 1, 0, 1, 0, 0, 0, 1, 0]);
  assert.equal(g.nimSum(), 1 ^ 2);
});

test('bad heaps are refused naming the flag', () => {
  assert.throws(() => new Nim([0, 3]), /--heaps/);
  assert.throws(() => new Nim([8]), /--heaps/);
});

test('vector game: zero-sum rewards, terminated, same-step autoreset, alternating first seat', () => {
  const envs = new VectorGame(() => new Nim([2]), 1, 0);
  envs.resetAll();
  const first = envs.acting[0] ? 0 : 1;
  assert.equal(envs.acting[first], 1);
  assert.equal(envs.acting[1 - first], 0);
  assert.deepEqual([...envs.legalMask.subarray(2 * (1 - first), 2 * (2 - first))], [0, 0]); // no move, no mask
  const actions = new Int32Array(2);
  actions[first] = 1; // take both stones: win
  actions[1 - first] = 0;
  envs.step(actions);
  assert.equal(envs.terminated[0], 1);
  assert.equal(envs.reward[first], 1);
  assert.equal(envs.reward[1 - first], -1);
  assert.equal(envs.episodes, 1);
  // Already the next game's first observation, with the other seat to move.
  assert.deepEqual([...envs.obs.subarray(0, 2)], [1, 1]);
  assert.equal(envs.acting[1 - first], 1);
  envs.step(new Int32Array([0, 0]));
  assert.equal(envs.terminated[0], 0);
  assert.deepEqual([...envs.reward], [0, 0]);
});

test('vector game: an illegal action is counted and replaced by the first legal one', () => {
  const envs = new VectorGame(() => new Nim([1, 3, 5, 7]), 2, 3);
  envs.resetAll();
  assert.equal(envs.step(new Int32Array([99, 99, -1, -1])), 2);
  assert.equal(envs.illegal, 2);
});

test('vs random: seat e % 2 moves at random, and every finished game is counted for the host', () => {
  const envs = new VectorGame(() => new Nim([1, 3, 5, 7]), 4, 0, true);
  envs.resetAll();
  const firstLegal = new Int32Array(8);
  for (let t = 0; t < 500; t++) {
    for (let e = 0; e < 4; e++) {
      const game = envs.games[e];
      firstLegal[e * 2 + game.toMove] = game.firstLegal();
    }
    envs.step(firstLegal);
  }
  const { wins, losses, draws } = envs.results;
  assert.equal(wins + losses + draws, envs.episodes);
  assert.equal(draws, 0); // Nim has no draws
  assert.ok(wins > 0 && losses > 0, JSON.stringify(envs.results));
  assert.equal(envs.illegal, 0); // random moves are legal
});

'use strict';
// A small seeded random stream (mulberry32): reproducible first seats and
// backoff jitter from --seed, without a dependency.

function makeRng(seed) {
  let state = (Number(seed) >>> 0) ^ 0x9e3779b9;
  // Uniform float in [0, 1).
  return function next() {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

module.exports = { makeRng };

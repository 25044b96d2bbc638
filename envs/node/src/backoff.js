'use strict';
// Capped exponential backoff with jitter (docs/protocol.md section 7), as the
// Python SDK's Backoff: initial * 2^attempt, capped at max, times U(0.5, 1.5).

class Backoff {
  constructor(initialS, maxS, rng) {
    this.initialS = initialS;
    this.maxS = maxS;
    this.rng = rng;
    this.attempt = 0;
  }

  // Seconds to wait before the next attempt.
  next() {
    const base = Math.min(this.maxS, this.initialS * 2 ** this.attempt);
    this.attempt++;
    return Math.min(this.maxS, base * (0.5 + this.rng()));
  }

  // After a successful step: the next failure waits `initialS` again.
  reset() {
    this.attempt = 0;
  }
}

module.exports = { Backoff };

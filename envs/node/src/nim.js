'use strict';
// Nim, the game itself: heaps of stones, two players take turns; a move takes
// 1..k stones from one heap; whoever takes the last stone wins (normal play).
// No gRPC here: this is the file a game team replaces with its own game.
//
//   const game = new Nim([1, 3, 5, 7]);
//   game.reset(0);                       // seat 0 moves first
//   game.legalMask(mask);                // mask[a] = 1 where action a is legal
//   const { done, winner } = game.play(action);
//
// Optimal play (Bouton, 1901): move to a position whose nim-sum (XOR of the
// heap sizes) is 0; from a nim-sum-0 position every move loses the invariant.
// [1, 3, 5, 7] has nim-sum 0, so the first mover loses against perfect play,
// but one careless move hands the win to the other side.
//
// The interface a two-seat turn-based game offers `VectorGame` (vector_game.js):
//   numActions, obsSize, toMove, reset(firstSeat), play(action) -> {done, winner},
//   isLegal(action), firstLegal(), legalMask(out), observe(seat, out).

const NUM_SEATS = 2;
const BITS = 3; // binary features per heap: heap sizes up to 7

class Nim {
  // heaps: initial heap sizes, each in [1, 2^BITS - 1].
  constructor(heaps) {
    if (!Array.isArray(heaps) || heaps.length < 1) {
      throw new Error(`Nim needs at least one heap, got ${JSON.stringify(heaps)}`);
    }
    for (const h of heaps) {
      if (!Number.isInteger(h) || h < 1 || h >= 1 << BITS) {
        throw new Error(`Nim heap sizes must be integers in [1, ${(1 << BITS) - 1}], got ${h} (change --heaps)`);
      }
    }
    this.initial = heaps.slice();
    this.maxTake = Math.max(...heaps);
    // Action a = heap * maxTake + (stones - 1): take `stones` from `heap`.
    this.numActions = heaps.length * this.maxTake;
    // Thermometer per heap (one slot per initial stone) then BITS binary digits per heap.
    this.obsSize = heaps.reduce((a, b) => a + b, 0) + heaps.length * BITS;
    this.heaps = heaps.slice();
    this.toMove = 0;
  }

  reset(firstSeat) {
    this.heaps = this.initial.slice();
    this.toMove = firstSeat;
  }

  // Heap and stone count of action `a`.
  decode(a) {
    return { heap: Math.floor(a / this.maxTake), stones: (a % this.maxTake) + 1 };
  }

  isLegal(a) {
    if (!Number.isInteger(a) || a < 0 || a >= this.numActions) return false;
    const { heap, stones } = this.decode(a);
    return stones <= this.heaps[heap];
  }

  firstLegal() {
    for (let a = 0; a < this.numActions; a++) if (this.isLegal(a)) return a;
    throw new Error('Nim: no legal action in a finished game (reset it first)');
  }

  // out[a] = 1 where action a is legal for the player to move, else 0.
  legalMask(out) {
    for (let a = 0; a < this.numActions; a++) out[a] = this.isLegal(a) ? 1 : 0;
  }

  // The player to move plays `a` (must be legal). winner is the seat that took
  // the last stone, or -1 while the game goes on.
  play(a) {
    if (!this.isLegal(a)) throw new Error(`Nim: illegal action ${a} for heaps [${this.heaps}]`);
    const { heap, stones } = this.decode(a);
    this.heaps[heap] -= stones;
    const mover = this.toMove;
    this.toMove = NUM_SEATS - 1 - mover;
    const done = this.heaps.every((h) => h === 0);
    return { done, winner: done ? mover : -1 };
  }

  // Nim is impartial: both seats see the same features (whose turn it is
  // travels in StepBatch.acting). out: Float32Array view of obsSize floats.
  observe(seat, out) {
    let i = 0;
    this.initial.forEach((size, h) => {
      for (let k = 0; k < size; k++) out[i++] = k < this.heaps[h] ? 1 : 0;
    });
    for (const h of this.heaps) {
      for (let b = 0; b < BITS; b++) out[i++] = (h >> b) & 1;
    }
  }

  nimSum() {
    return this.heaps.reduce((a, b) => a ^ b, 0);
  }
}

module.exports = { Nim, NUM_SEATS };

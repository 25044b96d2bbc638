'use strict';
// Tensors on the wire (docs/protocol.md section 2): dtype + shape + the raw
// array bytes in C order, little-endian. Typed arrays already hold exactly
// those bytes on a little-endian CPU, so encoding is a zero-copy view.

const os = require('os');

// Refuses to start on a big-endian CPU, where typed-array bytes are not the wire bytes.
function checkLittleEndian() {
  if (os.endianness() !== 'LE') {
    throw new Error('this worker sends typed-array bytes as they are and needs a little-endian CPU (x86, ARM)');
  }
}

// A Tensor message (proto-loader object form) viewing `typed` with `shape`.
function tensor(dtype, shape, typed) {
  const count = shape.reduce((a, b) => a * b, 1);
  if (typed.length !== count) {
    throw new Error(`${dtype} tensor of shape [${shape}] needs ${count} elements, got ${typed.length}`);
  }
  return { dtype, shape, data: Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength) };
}

// Copies an ActionBatch's action tensor into `out` (Int32Array [E * seats]).
// Throws naming what the host sent when it is not INT32 [numEnvs, seats].
function readActions(message, numEnvs, seats, out) {
  const t = message.action;
  const want = numEnvs * seats;
  const shape = t ? (t.shape || []).map(Number) : [];
  if (!t || t.dtype !== 'INT32' || shape.length !== 2 || shape[0] !== numEnvs || shape[1] !== seats ||
      !t.data || t.data.length !== want * 4) {
    const got = t ? `${t.dtype} [${shape}] with ${t.data ? t.data.length : 0} bytes` : 'no action tensor';
    throw new Error(`host sent ${got}, expected INT32 [${numEnvs}, ${seats}] (${want * 4} bytes)`);
  }
  for (let i = 0; i < want; i++) out[i] = t.data.readInt32LE(4 * i);
  return out;
}

module.exports = { checkLittleEndian, tensor, readActions };

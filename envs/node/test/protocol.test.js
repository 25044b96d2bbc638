'use strict';
// The section 6 rule, tensors on the wire, flags and backoff.
const test = require('node:test');
const assert = require('node:assert/strict');
const { classify, grpc, loadEnvService } = require('../src/protocol');
const { tensor, readActions } = require('../src/tensors');
const { parseFlags, FlagError } = require('../src/flags');
const { Backoff } = require('../src/backoff');

test('refusals are exactly the codes a host sends on purpose; everything else reconnects', () => {
  const s = grpc.status;
  for (const code of [s.INVALID_ARGUMENT, s.RESOURCE_EXHAUSTED, s.UNAUTHENTICATED, s.PERMISSION_DENIED,
    s.UNIMPLEMENTED, s.NOT_FOUND, s.ALREADY_EXISTS, s.OUT_OF_RANGE]) {
    assert.equal(classify(code, 'handshake'), 'refused');
    assert.equal(classify(code, 'stream'), 'refused');
  }
  for (const code of [s.UNAVAILABLE, s.CANCELLED, s.DEADLINE_EXCEEDED, s.INTERNAL, s.UNKNOWN, s.ABORTED,
    s.DATA_LOSS]) {
    assert.equal(classify(code, 'handshake'), 'reconnect');
    assert.equal(classify(code, 'stream'), 'reconnect');
  }
  assert.equal(classify(s.FAILED_PRECONDITION, 'handshake'), 'refused');
  assert.equal(classify(s.FAILED_PRECONDITION, 'stream'), 'reconnect');
});

test('tensors are little-endian views in C order and round-trip through the proto', () => {
  const EnvService = loadEnvService();
  const t = tensor('FLOAT32', [1, 2], new Float32Array([1.5, -2]));
  assert.deepEqual([...t.data], [0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0]);
  assert.throws(() => tensor('BOOL', [3], new Uint8Array(2)), /needs 3 elements, got 2/);
  const bytes = EnvService.service.Stream.requestSerialize({ session_id: 's', sequence: 7, reward: t });
  const back = EnvService.service.Stream.requestDeserialize(bytes);
  assert.equal(back.sequence, 7);
  assert.equal(back.reward.dtype, 'FLOAT32');
  assert.deepEqual(back.reward.shape, [1, 2]);
});

test('actions must be INT32 [E, 2]; anything else is named', () => {
  const data = Buffer.alloc(8);
  data.writeInt32LE(5, 0);
  data.writeInt32LE(-1, 4);
  const out = readActions({ action: { dtype: 'INT32', shape: [1, 2], data } }, 1, 2, new Int32Array(2));
  assert.deepEqual([...out], [5, -1]);
  assert.throws(() => readActions({ action: { dtype: 'INT64', shape: [1, 2], data } }, 1, 2, new Int32Array(2)),
    /host sent INT64 \[1,2\] with 8 bytes, expected INT32 \[1, 2\]/);
});

test('flags: defaults, aliases, and errors that name the flag', () => {
  const f = parseFlags(['--address', 'h:1', '--num-envs=3', '--heaps', '2,2']);
  assert.equal(f.envs, 3);
  assert.deepEqual(f.heaps, [2, 2]);
  assert.throws(() => parseFlags(['--address', 'h:1', '--envs', 'x']), /bad value for --envs/);
  assert.throws(() => parseFlags(['--address', 'h:1', '--bogus', '1']), FlagError);
  assert.throws(() => parseFlags(['--address', 'nohostport']), /--address must be HOST:PORT/);
});

test('backoff doubles up to the cap, with jitter in [0.5, 1.5], and resets', () => {
  const b = new Backoff(0.1, 0.4, () => 0.5); // jitter factor exactly 1
  assert.deepEqual([b.next(), b.next(), b.next(), b.next()], [0.1, 0.2, 0.4, 0.4]);
  b.reset();
  assert.equal(b.next(), 0.1);
});

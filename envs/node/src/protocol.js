'use strict';
// The seedleague v1 protocol from Node: the EnvService client loaded from
// proto/seedleague/v1/env.proto at run time, its credentials, and the rule
// that sorts a failed call into "reconnect" or "refused" (docs/protocol.md section 6).

const fs = require('fs');
const os = require('os');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const DEFAULT_PROTO_DIR = path.resolve(__dirname, '..', '..', '..', 'proto');
const PROTO_FILE = path.join('seedleague', 'v1', 'env.proto');
const KEEPALIVE_TIME_MS = 20000; // as seedleague/protocol/channel.py, so the host never answers too_many_pings

// The EnvService client constructor. Messages are plain objects with the
// .proto's field names; enums as strings ('FLOAT32'), 64-bit ints as Numbers,
// bytes as Buffers.
function loadEnvService(protoDir) {
  const dir = protoDir || DEFAULT_PROTO_DIR;
  if (!fs.existsSync(path.join(dir, PROTO_FILE))) {
    throw new Error(`no ${PROTO_FILE} under ${dir}: pass --proto-dir pointing at seedleague's proto/ directory`);
  }
  const definition = protoLoader.loadSync(PROTO_FILE, {
    includeDirs: [dir], keepCase: true, longs: Number, enums: String, defaults: true,
  });
  return grpc.loadPackageDefinition(definition).seedleague.v1.EnvService;
}

// A fresh client (its own channel) for one session.
function newClient(EnvService, flags) {
  const options = {
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
    'grpc.max_send_message_length': -1,
    'grpc.keepalive_time_ms': KEEPALIVE_TIME_MS,
    'grpc.keepalive_timeout_ms': 10000,
    'grpc.keepalive_permit_without_calls': 1,
    // Short reconnects inside grpc-js; the worker's own backoff paces retries.
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 2000,
  };
  let credentials = grpc.credentials.createInsecure();
  if (flags.tlsCa) {
    credentials = grpc.credentials.createSsl(fs.readFileSync(flags.tlsCa));
    if (flags.tlsServerName) options['grpc.ssl_target_name_override'] = flags.tlsServerName;
  }
  return new EnvService(flags.address, credentials, options);
}

// Metadata for every call: `authorization: Bearer <token>` when a token is set.
function callMetadata(token) {
  const metadata = new grpc.Metadata();
  if (token) metadata.set('authorization', `Bearer ${token}`);
  return metadata;
}

function defaultWorkerName() {
  return `${os.hostname()}:${process.pid}`;
}

// Statuses a host sends on purpose to say "this worker or its data is wrong":
// retrying would get the same answer.
const REFUSED = new Set([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.RESOURCE_EXHAUSTED,
  grpc.status.UNAUTHENTICATED,
  grpc.status.PERMISSION_DENIED,
  grpc.status.UNIMPLEMENTED,
  grpc.status.NOT_FOUND,
  grpc.status.ALREADY_EXISTS,
  grpc.status.OUT_OF_RANGE,
]);

// 'refused' or 'reconnect' for a failed call (docs/protocol.md section 6).
// `during` is 'handshake' or 'stream'. FAILED_PRECONDITION refuses a handshake
// (spec does not fit the model, wrong version) but on the stream means
// "unknown session": a restarted host, so handshake again. Every other code
// (UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, ABORTED, INTERNAL, UNKNOWN,
// DATA_LOSS) is a broken transport: grpc-js reports a host killed mid-stream
// as INTERNAL "Received RST_STREAM", so INTERNAL must mean reconnect.
function classify(code, during) {
  if (REFUSED.has(code)) return 'refused';
  if (code === grpc.status.FAILED_PRECONDITION && during === 'handshake') return 'refused';
  return 'reconnect';
}

function codeName(code) {
  return grpc.status[code] || `code ${code}`; // grpc.status maps numbers back to names
}

module.exports = { loadEnvService, newClient, callMetadata, classify, codeName, defaultWorkerName, grpc };

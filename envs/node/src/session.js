'use strict';
// One session (docs/protocol.md sections 1 and 7): a fresh channel, a
// Handshake, fresh games in every env, then the lockstep Stream (write one
// StepBatch, read one ActionBatch, step the envs) until it breaks or we stop.
//
//   const outcome = await runSession(ctx);   // {kind: 'stopped'|'done'|'reconnect'|'refused', message}

const { newClient, callMetadata, classify, codeName, grpc } = require('./protocol');
const { tensor, readActions } = require('./tensors');
const { SEATS } = require('./vector_game');

const PROTOCOL_VERSION = 1;

// ctx: { EnvService, flags, envs (VectorGame), stop (Stop), backoff, stats, spec, workerName, log }
async function runSession(ctx) {
  const client = newClient(ctx.EnvService, ctx.flags);
  try {
    const hello = await handshake(client, ctx);
    if (hello.error) return failed(hello.error, 'handshake', ctx);
    const reply = hello.reply;
    if (reply.protocol_version !== PROTOCOL_VERSION) {
      return refused(`host speaks protocol version ${reply.protocol_version}, this worker speaks ${PROTOCOL_VERSION}`);
    }
    ctx.stats.sessions++;
    ctx.log(`connected to ${ctx.flags.address} as ${ctx.workerName}: session ${reply.session_id} ` +
      `(${ctx.envs.numEnvs} envs x ${SEATS} seats)`);
    return await stream(client, reply, ctx);
  } finally {
    client.close();
  }
}

function handshake(client, ctx) {
  const request = { protocol_version: PROTOCOL_VERSION, spec: ctx.spec, worker_name: ctx.workerName };
  const deadline = Date.now() + ctx.flags.connectTimeout * 1000;
  return new Promise((resolve) => {
    const call = client.Handshake(request, callMetadata(ctx.flags.token), { deadline }, (error, reply) => {
      ctx.stop.setLiveCall(null);
      resolve(error ? { error } : { reply });
    });
    ctx.stop.setLiveCall(call);
  });
}

// The StepBatch whose tensors view the envs' buffers: stepping the envs
// updates the message; only `sequence` is set per step.
function stepBatch(sessionId, envs) {
  const E = envs.numEnvs;
  return {
    session_id: sessionId,
    sequence: 0,
    observation: tensor('FLOAT32', [E, SEATS, envs.obsSize], envs.obs),
    reward: tensor('FLOAT32', [E, SEATS], envs.reward),
    terminated: tensor('BOOL', [E], envs.terminated),
    truncated: tensor('BOOL', [E], envs.truncated),
    legal_mask: tensor('BOOL', [E, SEATS, envs.numActions], envs.legalMask),
    acting: tensor('BOOL', [E, SEATS], envs.acting),
  };
}

async function stream(client, reply, ctx) {
  const { envs, stop, stats, flags } = ctx;
  envs.resetAll(); // fresh episodes on every session
  const batch = stepBatch(reply.session_id, envs);
  const bytes = ctx.EnvService.service.Stream.requestSerialize(batch).length;
  if (reply.max_message_bytes > 0 && bytes > reply.max_message_bytes) {
    const limit = reply.max_message_bytes;
    return refused(`one step is ${bytes} bytes but the host accepts at most ${limit}; use fewer --envs`);
  }
  const call = client.Stream(callMetadata(flags.token));
  const replies = new Replies(call);
  stop.setLiveCall(call);
  const actions = new Int32Array(envs.numEnvs * SEATS);
  try {
    for (let seq = 0; ; seq++) {
      if (stop.stopped) return { kind: 'stopped' };
      if (budgetSpent(ctx)) return closeStream(call, 'done');
      batch.sequence = seq;
      call.write(batch);
      const next = await replies.next();
      if (next.error) return failed(next.error, 'stream', ctx);
      if (next.ended) return { kind: 'reconnect', message: 'stream: the host ended the stream without an answer' };
      if (next.message.sequence !== seq) {
        return closeStream(call, 'refused', `host answered sequence ${next.message.sequence} to step ${seq}`);
      }
      try {
        readActions(next.message, envs.numEnvs, SEATS, actions);
      } catch (err) {
        return closeStream(call, 'refused', err.message);
      }
      ctx.backoff.reset(); // a successful step resets the backoff
      stats.policyVersion = next.message.policy_version;
      const illegal = envs.step(actions);
      if (illegal > 0 && !stats.warnedIllegal) {
        ctx.log(`host sent ${illegal} illegal action(s); played the first legal move instead`);
        stats.warnedIllegal = true;
      }
      stats.steps++;
      stats.envSteps += envs.numEnvs;
    }
  } finally {
    stop.setLiveCall(null);
  }
}

function budgetSpent(ctx) {
  return ctx.flags.maxSteps > 0 && ctx.stats.envSteps >= ctx.flags.maxSteps;
}

// Half-closes and cancels our stream; the outcome is `kind`.
function closeStream(call, kind, message) {
  call.end();
  call.cancel();
  return { kind, message };
}

function refused(message) {
  return { kind: 'refused', message };
}

// A failed call as an outcome: stop wins, then the section 6 rule.
function failed(error, during, ctx) {
  if (ctx.stop.stopped) return { kind: 'stopped' };
  const kind = classify(error.code, during);
  const what = kind === 'refused' ? 'host refused' : 'lost the host';
  const message = `${during}: ${what} (${codeName(error.code)}: ${error.details || error.message})`;
  return { kind, message: message + tlsHint(error.code, during, ctx.flags) };
}

// From the worker's side a TLS mismatch looks like an unreachable host: say what to check.
function tlsHint(code, during, flags) {
  if (during !== 'handshake' || code !== grpc.status.UNAVAILABLE) return '';
  return flags.tlsCa
    ? ' (check that the host serves TLS with a certificate signed by --tls-ca for this address)'
    : ' (if the host serves TLS, pass its CA with --tls-ca)';
}

// The stream's answers, one at a time: {message}, {error} or {ended}.
class Replies {
  constructor(call) {
    this.queue = [];
    this.waiting = null;
    call.on('data', (message) => this.push({ message }));
    call.on('error', (error) => this.push({ error }));
    call.on('end', () => this.push({ ended: true }));
  }

  push(item) {
    if (this.waiting) {
      const resolve = this.waiting;
      this.waiting = null;
      resolve(item);
    } else {
      this.queue.push(item);
    }
  }

  next() {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    return new Promise((resolve) => { this.waiting = resolve; });
  }
}

module.exports = { runSession, stepBatch };

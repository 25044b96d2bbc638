#!/usr/bin/env node
'use strict';
// seedleague env worker in Node.js: `--envs` games of Nim stepped together,
// two seats, turn-based, legal masks, zero-sum rewards, same-step autoreset.
//
//   node envs/node/src/worker.js --address 127.0.0.1:50051 [--envs 16] [--seed 0]
//
// SEEDLEAGUE_TOKEN set => every call carries "authorization: Bearer <token>".
// This file wires flags, game, signals and the reconnect loop; the protocol is
// in session.js and protocol.js, the game in nim.js and vector_game.js.

const { parseFlags, FlagError, USAGE } = require('./flags');
const { Nim } = require('./nim');
const { VectorGame, SEATS } = require('./vector_game');
const { loadEnvService, defaultWorkerName } = require('./protocol');
const { checkLittleEndian } = require('./tensors');
const { runSession } = require('./session');
const { Backoff } = require('./backoff');
const { makeRng } = require('./rng');
const { Stop } = require('./stop');

const EXIT_STOPPED = 0;
const EXIT_REFUSED = 2;

function log(message) {
  process.stderr.write(`nim_worker: ${message}\n`);
}

// The EnvSpec this worker declares at every handshake (docs/protocol.md section 2).
function envSpec(envs, heaps) {
  return {
    env_name: `Nim-node(${heaps.join(',')})`,
    observation: { dtype: 'FLOAT32', shape: [envs.obsSize] },
    action: { num_actions: envs.numActions },
    num_envs: envs.numEnvs,
    num_seats: SEATS,
    has_legal_mask: true,
    return_bound: 1, // a game won or lost
  };
}

// Everything a session needs; throws on a bad setup (exit 2).
function setUp(flags) {
  checkLittleEndian();
  const envs = new VectorGame(() => new Nim(flags.heaps), flags.envs, flags.seed, flags.vsRandom);
  const rng = makeRng(flags.seed ^ 0x5eed);
  return {
    EnvService: loadEnvService(flags.protoDir),
    flags,
    envs,
    spec: envSpec(envs, flags.heaps),
    stop: new Stop(),
    backoff: new Backoff(flags.backoffInitial, flags.backoffMax, rng),
    stats: { sessions: 0, reconnects: 0, steps: 0, envSteps: 0, policyVersion: 0, warnedIllegal: false },
    workerName: flags.workerName || defaultWorkerName(),
    log,
  };
}

// Sessions until stopped, the step budget is spent, or the host refuses us.
async function run(ctx) {
  ctx.stop.installSignalHandlers(log);
  for (;;) {
    const outcome = await runSession(ctx);
    if (outcome.kind === 'stopped' || outcome.kind === 'done') return EXIT_STOPPED;
    if (outcome.kind === 'refused') {
      log(`${outcome.message}; giving up`);
      return EXIT_REFUSED;
    }
    if (ctx.stop.stopped) return EXIT_STOPPED;
    const delay = ctx.backoff.next();
    ctx.stats.reconnects++;
    log(`${outcome.message}; reconnecting to ${ctx.flags.address} in ${delay.toFixed(2)} s`);
    await ctx.stop.sleep(delay);
    if (ctx.stop.stopped) return EXIT_STOPPED;
  }
}

function summary(ctx) {
  const s = ctx.stats;
  const line = `stopped: ${s.steps} steps, ${s.envSteps} env steps, ${ctx.envs.episodes} episodes, ` +
    `${s.sessions} sessions, ${s.reconnects} reconnects, policy version ${s.policyVersion}`;
  if (!ctx.envs.vsRandom) return line;
  const { wins, losses, draws } = ctx.envs.results;
  const games = wins + losses + draws;
  const rate = games ? ((100 * wins) / games).toFixed(1) : 'n/a';
  return `${line}\nnim_worker: vs random: the host won ${wins}, lost ${losses}, drew ${draws} of ${games} games ` +
    `(${rate}% won, seats alternating)`;
}

async function main(argv) {
  let ctx;
  try {
    const flags = parseFlags(argv);
    if (flags.help) {
      process.stdout.write(`${USAGE}\n`);
      return EXIT_STOPPED;
    }
    ctx = setUp(flags);
  } catch (err) {
    log(err instanceof FlagError ? `${err.message}\n${USAGE}` : err.message);
    return EXIT_REFUSED;
  }
  const code = await run(ctx);
  log(summary(ctx));
  return code;
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      log(`crashed: ${err.stack || err}`);
      process.exit(1);
    },
  );
}

module.exports = { main, envSpec };

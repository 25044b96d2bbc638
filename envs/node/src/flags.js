'use strict';
// Command-line flags of the Node worker, parsed and checked in one place.
// `--name value` and `--name=value` both work; errors name the flag to change.

const USAGE = `usage: node envs/node/src/worker.js --address HOST:PORT [options]

  --address HOST:PORT     host to connect to (default: $SEEDLEAGUE_ADDRESS)
  --envs N                games stepped together, one message per step (default 16; alias --num-envs)
  --seed S                seed of the first seats and the backoff jitter (default 0)
  --heaps 1,3,5,7         initial Nim heap sizes, each 1..7 (default 1,3,5,7)
  --max-steps N           exit 0 after N env steps, all envs together (default 0 = no limit)
  --vs-random             evaluation: seat (env % 2) plays uniformly random moves made here, and the
                          exit summary gives the host's wins/losses/draws against it (for seedleague
                          serve; never train with it)
  --tls-ca PEM            trust this CA and connect with TLS (default: plaintext)
  --tls-server-name NAME  name to check the host certificate against (default: the address's host)
  --token T               bearer token (default: $SEEDLEAGUE_TOKEN; prefer the variable, ps shows flags)
  --worker-name NAME      name in the host's logs (default hostname:pid)
  --backoff-initial S     first reconnect wait in seconds (default 0.1)
  --backoff-max S         longest reconnect wait in seconds (default 5)
  --connect-timeout S     handshake deadline in seconds (default 10)
  --proto-dir DIR         directory holding seedleague/v1/env.proto (default: the repository's proto/)

Exit status: 0 stopped (SIGTERM/SIGINT or --max-steps), 2 refused by the host or bad flags.`;

const DEFAULTS = {
  address: process.env.SEEDLEAGUE_ADDRESS || '',
  envs: 16,
  seed: 0,
  heaps: [1, 3, 5, 7],
  maxSteps: 0,
  tlsCa: '',
  tlsServerName: '',
  token: process.env.SEEDLEAGUE_TOKEN || '',
  workerName: '',
  backoffInitial: 0.1,
  backoffMax: 5.0,
  connectTimeout: 10.0,
  protoDir: '',
  vsRandom: false,
};

// flag name -> [key in the result, parser]
const FLAGS = {
  '--address': ['address', String],
  '--envs': ['envs', integer],
  '--num-envs': ['envs', integer],
  '--seed': ['seed', integer],
  '--heaps': ['heaps', heapList],
  '--max-steps': ['maxSteps', integer],
  '--tls-ca': ['tlsCa', String],
  '--tls-server-name': ['tlsServerName', String],
  '--token': ['token', String],
  '--worker-name': ['workerName', String],
  '--backoff-initial': ['backoffInitial', number],
  '--backoff-max': ['backoffMax', number],
  '--connect-timeout': ['connectTimeout', number],
  '--proto-dir': ['protoDir', String],
};

// flags without a value -> key set to true
const SWITCHES = { '--vs-random': 'vsRandom' };

class FlagError extends Error {}

function integer(text) {
  if (!/^-?\d+$/.test(text)) throw new Error(`expected an integer, got ${JSON.stringify(text)}`);
  return Number(text);
}

function number(text) {
  const value = Number(text);
  if (text === '' || !Number.isFinite(value)) throw new Error(`expected a number, got ${JSON.stringify(text)}`);
  return value;
}

function heapList(text) {
  return text.split(',').map((part) => integer(part.trim()));
}

// argv without the node binary and script. Returns the flags, or
// { help: true }; throws FlagError naming the flag to change.
function parseFlags(argv) {
  const flags = { ...DEFAULTS, heaps: DEFAULTS.heaps.slice() };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i];
    if (arg === '-h' || arg === '--help') return { help: true };
    let value;
    const eq = arg.indexOf('=');
    if (arg.startsWith('--') && eq > 0) {
      value = arg.slice(eq + 1);
      arg = arg.slice(0, eq);
    }
    if (SWITCHES[arg] && value === undefined) {
      flags[SWITCHES[arg]] = true;
      continue;
    }
    const known = FLAGS[arg];
    if (!known) throw new FlagError(`unknown flag ${arg} (see --help)`);
    if (value === undefined) {
      if (i + 1 >= argv.length) throw new FlagError(`${arg} needs a value`);
      value = argv[++i];
    }
    const [key, parse] = known;
    try {
      flags[key] = parse(value);
    } catch (err) {
      throw new FlagError(`bad value for ${arg}: ${err.message}`);
    }
  }
  checkFlags(flags);
  return flags;
}

function checkFlags(flags) {
  const problems = [];
  if (!flags.address) problems.push('--address HOST:PORT is required (or set SEEDLEAGUE_ADDRESS)');
  else if (!flags.address.includes(':')) problems.push(`--address must be HOST:PORT, got ${flags.address}`);
  if (flags.envs < 1) problems.push(`--envs must be >= 1, got ${flags.envs}`); // the host refuses too many
  if (flags.seed < 0) problems.push(`--seed must be >= 0, got ${flags.seed}`);
  if (flags.maxSteps < 0) problems.push(`--max-steps must be >= 0, got ${flags.maxSteps}`);
  if (!(flags.backoffInitial > 0 && flags.backoffInitial <= flags.backoffMax)) {
    problems.push(`need 0 < --backoff-initial <= --backoff-max, got ${flags.backoffInitial} and ${flags.backoffMax}`);
  }
  if (!(flags.connectTimeout > 0)) problems.push(`--connect-timeout must be > 0, got ${flags.connectTimeout}`);
  if (flags.tlsServerName && !flags.tlsCa) problems.push('--tls-server-name needs --tls-ca');
  if (problems.length) throw new FlagError(problems.join('; '));
}

module.exports = { parseFlags, FlagError, USAGE };

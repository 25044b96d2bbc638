#!/usr/bin/env bash
# The launch commands of a run across machines on Ray (docs/cluster.md walks through them):
#
#   launch/cluster.sh head                      # on the first machine: start Ray's head node (port 6379)
#   launch/cluster.sh join HEAD_IP:6379         # on every other machine: join it
#   launch/cluster.sh run [ray-launch flags]    # on the head: `seedleague ray-launch --address auto ...`
#   launch/cluster.sh stop                      # on each machine: stop its Ray node
#
# Every machine needs the same checkout, installed with Ray (`make install && .venv/bin/pip install -e '.[ray]'`);
# VENV (default .venv) names the virtualenv, as for the Makefile.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
usage="usage: launch/cluster.sh head | join HEAD_IP:PORT | run [seedleague ray-launch flags] | stop"
if [ ! -x "$VENV/bin/ray" ]; then
  echo "launch/cluster.sh: no Ray in $VENV: install it with 'make install && $VENV/bin/pip install -e .[ray]'" >&2
  exit 2
fi
case "${1:-}" in
  head) exec "$VENV/bin/ray" start --head --port 6379 ;;
  join)
    [ -n "${2:-}" ] || { echo "launch/cluster.sh join: give the head's address, e.g. 10.0.0.1:6379" >&2; exit 2; }
    exec "$VENV/bin/ray" start --address "$2" ;;
  run) shift; exec "$VENV/bin/seedleague" ray-launch --address auto "$@" ;;
  stop) exec "$VENV/bin/ray" stop ;;
  *) echo "launch/cluster.sh: unknown command '${1:-}'; $usage" >&2; exit 2 ;;
esac

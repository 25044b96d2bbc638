#!/usr/bin/env bash
# The launch command on one GPU box: install with JAX's CUDA plugin, generate the protos, check that JAX sees
# the GPU, then train. Every argument goes to `seedleague train` (docs/usage.md lists them):
#
#   launch/gpu_box.sh                                          # the default run (Kuhn poker league, 10 minutes)
#   launch/gpu_box.sh --env ALE/Pong-v5 --max-seconds 900      # any env id or --worker-cmd of your own
#
# VENV (default .venv) is the virtualenv it installs into, as for the Makefile.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "launch/gpu_box.sh: no nvidia-smi on PATH, so no NVIDIA driver here: install the driver (>= 525), or run 'make run' on a machine without a GPU" >&2
  exit 2
fi
make --no-print-directory VENV="$VENV" install-gpu proto
"$VENV/bin/python" - <<'PY'
import sys
import jax
if not any(device.platform == "gpu" for device in jax.devices()):
    sys.exit(f"launch/gpu_box.sh: JAX sees no GPU ({jax.devices()}): check that the driver is >= 525 and that "
             "nvidia-smi lists the GPU, then run again")
PY
exec "$VENV/bin/seedleague" train "$@"

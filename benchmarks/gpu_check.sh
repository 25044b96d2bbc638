#!/usr/bin/env bash
# The GPU checks in one command, for a CUDA machine (`make gpu-check` after `make install-gpu`):
#   1. the tests marked `gpu` (host inference, replay and learner on the GPU; no implicit host-device copy);
#   2. benchmarks/gpu_pong.py: Atari Pong through the full gRPC path, frames/s beside SEED RL's;
#   3. benchmarks/host_ceiling.py: the host's CPU per env step with its forward pass on the GPU, host pinned to CPU 0
#      and the synthetic workers to the rest; first the target row (CartPole, 16 workers x 256 envs, or
#      $CEILING_ARGS), then Atari-sized messages (16 x 64, or $CEILING_ATARI_ARGS) as a step of its own: each row
#      compiles the network for every batch bucket it can meet, so a longer grid under one limit lost its later rows;
#   4. benchmarks/transfer_cost.py --forward: a forward pass with its copies one per array and packed into one buffer
#      each way (seedleague/host/packing.py), CartPole- and Atari-sized, in one process.
# Each step writes its output to $1 (default: gpu_check/) and has its own time limit, so one that hangs
# leaves the others' results. PYTHON overrides the interpreter (default: .venv/bin/python).
set -u
out=${1:-gpu_check}
py=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
cpus=$(nproc)
export PYTHONUNBUFFERED=1

step() {  # step NAME SECONDS COMMAND...: run, tee to $out/NAME.txt, report the exit status
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit} s): $*"
  # SIGINT, not timeout's SIGTERM: Python then runs the benchmark's `finally`, which stops its worker processes,
  # so a step cut off at its limit leaves no workers loading the CPUs of the steps after it.
  timeout -s INT -k 20 "$limit" "$@" 2>&1 | tee "$out/$name.txt"
  echo "== $name: exit ${PIPESTATUS[0]}"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "CPUs: $cpus"
  "$py" -c 'import jax, flax, optax, grpc, google.protobuf as pb; print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, "grpcio", grpc.__version__, "protobuf", pb.__version__); print(jax.devices())'
} 2>&1 | tee "$out/machine.txt"

step gpu_tests "${GPU_TESTS_S:-150}" "$py" -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_transfers.py tests/test_packing.py tests/test_replay.py
step gpu_pong "${GPU_PONG_S:-200}" "$py" -m benchmarks.gpu_pong --workers $((cpus > 3 ? cpus - 2 : 1)) \
  --envs-per-worker 32 --seconds "${WINDOW_S:-15}" --warmup 10
procs=$((cpus > 9 ? 8 : cpus - 1))
step host_ceiling "${CEILING_S:-120}" taskset -c 0 "$py" -m benchmarks.host_ceiling \
  ${CEILING_ARGS:---workloads cartpole --workers 16 --envs 256} --worker-cpus "1-$((cpus - 1))" --procs $procs
step host_ceiling_atari "${CEILING_ATARI_S:-120}" taskset -c 0 "$py" -m benchmarks.host_ceiling \
  ${CEILING_ATARI_ARGS:---workloads atari --workers 16 --envs 64} --worker-cpus "1-$((cpus - 1))" --procs $procs
step forward_copies "${FORWARD_S:-100}" "$py" -m benchmarks.transfer_cost --calls 300 \
  --forward "${FORWARD:-cartpole:256,cartpole:1024,atari:64}"

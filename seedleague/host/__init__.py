"""The learner-inference host, in data-path order:

servicer (gRPC in/out) -> sessions (per-worker state) -> batcher (dynamic
batches) -> policy (jitted forward pass) -> unroll_store (fixed-length
trajectories) -> replay (on-device ring buffer, rate limited) -> learner
(update loop). `host.py` wires them together.
"""

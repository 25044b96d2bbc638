"""seedleague: distributed self-play training with SEED-style centralised inference.

Data path: env worker (envs/) -> host (seedleague.host: server -> batcher ->
policy -> unroll store -> replay -> learner) <- league.
"""

__version__ = "0.1.0"

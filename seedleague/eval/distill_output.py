"""A run's population_nash mixture as one network: the `distilled` output.

The evaluation games that estimate the population's meta-game (`seedleague exploit --choose`, seedleague.eval.
sampled_metagame) record a uniform sample of their moves, each with every member's policy and own reach there
(seedleague.host.population_samples). Once the meta-game's Nash mixture is known, that gives the mixture's own
behaviour policy at every recorded state; `distil` fits the run's network to it (seedleague.artifacts.distill),
starting from the run's param average, and saves it as checkpoint `<run_dir>/distilled/<step>` (the step of the
mixture's newest member; a population-based training run's in its best member's directory) in the learner's
checkpoint format, so `seedleague.api.load_trained(run, source="distilled")`, `serve` and `export` read it as they
read any network:

    path = distil(run_dir, "<evaluation games>/population_samples.npz")   # -> "<run_dir>/distilled", or ValueError
"""

from __future__ import annotations

import os
from typing import Optional

from seedleague import output
from seedleague.artifacts import distill
from seedleague.artifacts.output_config import DISTILLED_DIR
from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.eval import sampled_metagame
from seedleague.host import population_samples

MIXTURE = "population_nash"  # the mixture whose play is distilled
FIT_STEPS = 4000  # Adam steps of distill.BATCH samples: about 20 epochs of a 100K-row sample; seconds on a CPU


def distil(run_dir: str, samples_path: str, seed: int = 0, max_seconds: Optional[float] = None) -> str:
    """Fit and save the distilled network (see the module docstring) in FIT_STEPS Adam steps, or fewer where
    `max_seconds` runs out first (a large network on a slow machine); returns its directory. ValueError where the
    samples are too few or do not score the mixture's networks."""
    nash = sampled_metagame.read(run_dir, MIXTURE)
    samples = population_samples.load(samples_path).behaviour(nash.seat_weights)
    player = output.recorded(run_dir).player
    mixture = output.resolve(run_dir, output.OutputConfig(MIXTURE, player))
    start = output.resolve(run_dir, output.OutputConfig("param_average", player)).load(seed)  # flat or named
    fitted = distill.fit(start.network, start.params, samples, steps=FIT_STEPS, seed=seed, max_seconds=max_seconds)
    directory = os.path.join(output.output_member(run_dir, player)[1], DISTILLED_DIR)  # a PBT run: its best member's
    meta = {key: value for key, value in start.meta.items() if key != "average"}
    meta["distilled"] = dict(mixture=[m.key for m in mixture.members], samples=fitted.samples, steps=fitted.steps,
                             held_out_cross_entropy=round(fitted.cross_entropy, 5),
                             held_out_target_entropy=round(fitted.target_entropy, 5))
    checkpointer = Checkpointer(CheckpointConfig(directory=directory), writer=True)
    try:
        checkpointer.save(mixture.step, {"params": fitted.params}, meta)
    finally:
        checkpointer.close()
    cut = (f" (of {FIT_STEPS:,}: its {max_seconds:g} s ran out first)" if fitted.steps < FIT_STEPS else "")
    print(f"distilled {MIXTURE} ({len(mixture.members)} networks) into one network from {fitted.samples:,} recorded "
          f"moves of its evaluation games in {fitted.steps:,} steps{cut}: held-out cross-entropy "
          f"{fitted.cross_entropy:.4f} nats against the mixture's own entropy {fitted.target_entropy:.4f}; "
          f"{directory}", flush=True)
    return directory

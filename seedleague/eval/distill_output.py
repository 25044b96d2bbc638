"""A run's population_nash mixture as one network: the `distilled` output.

A best response to the population's Nash mixture (`seedleague exploit --choose`) records the mixture's own moves,
the states its members played and their policies there (seedleague.host.output_samples). `distil` fits the run's
network to them (seedleague.artifacts.distill: the mixture's realization-equivalent behaviour policy), starting from
the run's param average, and saves it as checkpoint `<run_dir>/distilled/<step>` (the step of the mixture's newest
member) in the learner's checkpoint format, so `seedleague.api.load_trained(run, source="distilled")`, `serve` and
`export` read it as they read any network:

    path = distil(run_dir, "<response run>/output_samples.npz")   # -> "<run_dir>/distilled", or ValueError
"""

from __future__ import annotations

import os

from seedleague import output
from seedleague.artifacts import distill
from seedleague.artifacts.output_config import DISTILLED_DIR
from seedleague.artifacts.policy import Policy
from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.host import output_samples

MIXTURE = "population_nash"  # the mixture whose play is distilled
FIT_STEPS = 4000  # Adam steps of BATCH samples: about 2 epochs of a 100K-row sample; seconds on a CPU


def distil(run_dir: str, samples_path: str, seed: int = 0) -> str:
    """Fit and save the distilled network (see the module docstring); returns its directory. ValueError where the
    run's network is not a flat feed-forward one or the samples are too few."""
    samples = output_samples.load(samples_path)
    player = output.recorded(run_dir).player
    mixture = output.resolve(run_dir, output.OutputConfig(MIXTURE, player))
    start = output.resolve(run_dir, output.OutputConfig("param_average", player)).load(seed)
    if not isinstance(start, Policy):
        raise ValueError(f"{run_dir}'s network takes named observations or actions (protocol v2): distilling its "
                         "mixture into one network is built for the flat network only")
    fitted = distill.fit(start.network, start.params, samples, steps=FIT_STEPS, seed=seed)
    directory = os.path.join(run_dir, DISTILLED_DIR)
    meta = {key: value for key, value in start.meta.items() if key != "average"}
    meta["distilled"] = dict(mixture=[m.key for m in mixture.members], samples=fitted.samples, steps=FIT_STEPS,
                             held_out_cross_entropy=round(fitted.cross_entropy, 5),
                             held_out_target_entropy=round(fitted.target_entropy, 5))
    checkpointer = Checkpointer(CheckpointConfig(directory=directory), writer=True)
    try:
        checkpointer.save(mixture.step, {"params": fitted.params}, meta)
    finally:
        checkpointer.close()
    print(f"distilled {MIXTURE} ({len(mixture.members)} networks) into one network from {fitted.samples:,} of its "
          f"recorded moves: held-out cross-entropy {fitted.cross_entropy:.4f} nats against the members' own entropy "
          f"{fitted.target_entropy:.4f}; {directory}", flush=True)
    return directory

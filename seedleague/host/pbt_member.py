"""A host's side of population-based training: what a PBT member does with the league's answer.

    link.pbt_handler = PbtMember(pipeline.learner, pool, pipeline.initial_state)
    # at a check-in the link calls it with the league's `PbtAnswer`:
    #   copy_from set: the learner takes that snapshot's params, optimiser state, magnet and param average
    #   (its step count goes on, so its snapshots and anneal continue); then the settings apply from the
    #   next update on, as traced multipliers (seedleague.rl.learner.Scales): no recompile.

The league decides (seedleague.league.pbt); this module only applies, on the learner thread between two updates.
"""

from __future__ import annotations

import logging
from typing import Any

import jax

from seedleague.league.types import PbtAnswer
from seedleague.rl.learner import Scales

log = logging.getLogger(__name__)

COPIED = ("params", "opt_state", "magnet", "average")  # what an exploit takes from the snapshot copied


class PbtMember:
    """Applies a `PbtAnswer` to a running `LearnerLoop`; `copies` counts the snapshots taken over."""

    def __init__(self, learner: Any, pool: Any, initial_state: Any):
        """`learner`: the host's LearnerLoop; `pool`: its ModelPool; `initial_state`: the template snapshots
        are read into."""
        self._learner, self._pool, self._template = learner, pool, initial_state
        self.copies = 0

    def __call__(self, answer: PbtAnswer) -> None:
        if answer.copy_from:
            state, _ = self._pool.restore(answer.copy_from, self._template)
            taken = {name: getattr(state, name) for name in COPIED}
            self._learner.call(lambda mine: mine._replace(**jax.tree.map(jax.numpy.copy, taken)))
            self.copies += 1
            log.info("pbt: %s", answer.note)
        scales = Scales(answer.entropy_cost, answer.learning_rate, answer.kl_cost)
        if scales != self._learner.scales:
            self._learner.set_scales(scales)
            log.info("pbt: settings %s", " ".join(f"{k} x{v:.3f}" for k, v in scales._asdict().items()))

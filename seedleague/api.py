"""The Python API for using a trained policy outside seedleague: load it, query it.

The public face of `seedleague.artifacts` (which owns reading checkpoints and the policy types) and of
`seedleague.output` (a run's output); every name a user imports is here:

    from seedleague.api import load_policy, load_snapshot

    policy = load_policy("runs/kuhn")                      # newest learner checkpoint
    policy = load_policy("runs/leduc", average=True)       # its running mean of the params
    policy = load_snapshot("runs/kuhn", "main:000512")     # a league snapshot
    average = load_average_policy("runs/leduc")            # a PolicyMixture: draw() one member per game
    trained = load_trained("runs/kuhn")                    # the run's --output: a Policy or a PolicyMixture
    probs = policy.action_probabilities(observation, legal_mask)   # [B, A]; illegal exactly 0
    action = policy.act(observation, legal_mask, greedy=True)      # [B] int

Only the params are read (the optimiser state is skipped), so a checkpoint of
any optimiser or learner config loads. They are checked against the checksum the
checkpointer recorded for them at save, and must be finite: a damaged checkpoint is
never loaded (`seedleague.checkpoint.DamagedCheckpoint`, one line naming it and the
newest good step; without a step the newest good one is loaded, with a warning). Observations are what the env worker
sent to the host; for OpenSpiel games that is `seedleague.games.openspiel.encode`.
See docs/api.md.
"""

from __future__ import annotations

from typing import Union

from seedleague import output
from seedleague.artifacts.load import (NoParamAverageError, checkpoint_steps, load_policies, load_policy,
                                       load_snapshot, param_average_count)
from seedleague.artifacts.mixture import PolicyMixture, mixture_weights, seat_mixture_weights
from seedleague.artifacts.policy import Policy, PolicySpec, RecurrentPolicyError, Rng, recurrent_error
from seedleague.artifacts.named import NamedPolicy

__all__ = ["NoParamAverageError", "Policy", "PolicyMixture", "PolicySpec", "RecurrentPolicyError", "Rng",
           "NamedPolicy", "checkpoint_steps", "load_average_policy", "load_policies", "load_policy",
           "load_snapshot", "load_trained", "mixture_weights", "param_average_count", "recurrent_error",
           "seat_mixture_weights"]


def load_average_policy(run_dir: str, fraction: float = 1 / 3, player: str = "main",
                        param_average: bool = True, seed: int = 0) -> PolicyMixture:
    """The run's average policy, as the end of `seedleague train` reports it.

    The uniform mixture of the newest `fraction` of `player`'s league snapshots ("average
    policy"); with `param_average`, when the newest learner checkpoint of `run_dir` keeps the
    learner's param average, that network joins with half the weight ("average + param average":
    Leduc's least exploitable output, see benchmarks/README.md). Raises ValueError for a fraction
    outside (0, 1], FileNotFoundError when the player has no snapshots.
    """
    return output.average_policy(run_dir, fraction, player, param_average).load(seed)


def load_trained(run_dir: str, seed: int = 0) -> Union[Policy, PolicyMixture]:
    """The run's output: what its `--output` source (recorded in `<run_dir>/output.json` when the
    run started; `final` for older runs) names, resolved from what is on disk now, so a run that
    was stopped or killed mid-way gives its newest checkpoint and the snapshots it has written.

        final           Policy: the newest checkpoint's params
        param_average   Policy: that checkpoint's param average (the final params, with a logged
                        note, where it keeps none)
        average_policy  PolicyMixture: as load_average_policy(run_dir)
        league_nash     PolicyMixture: the Nash mixture over the player's snapshots, solved from
                        the league's payoff table

    A mixture is played one member per whole episode (`draw()`). Raises FileNotFoundError when
    the run has no output yet (no checkpoint, or no snapshots for a mixture), saying why.
    """
    return output.resolve(run_dir).load(seed)

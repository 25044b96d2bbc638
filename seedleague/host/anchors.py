"""The params of the league's anchors, as a learning host loads them to play them.

An anchor (seedleague.league.types: a fixed member that never trains) is named by a key without a
step; the league's snapshot record of it (`league.snapshots(name)`) says what it plays: "uniform",
the host's own network with its policy heads zeroed (`seedleague.host.exploit.uniform_params`), or
a path, whose output (`seedleague.output.resolve`; a mixture plays its heaviest member) must have
been trained on the same spec with the same network. An anchor this host cannot play raises
`AnchorUnavailable`, a FileNotFoundError: the league link skips its matches (warned once) as it
does a snapshot missing from the pool, and the reason is kept so it is not loaded again.

    load = AnchorLoader(league, initial_params, fits, device)
    params = load("uniform")
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import jax
import numpy as np

from seedleague import output
from seedleague.host.exploit import uniform_params
from seedleague.league.types import UNIFORM_ANCHOR, LeagueAPI

log = logging.getLogger(__name__)


class AnchorUnavailable(FileNotFoundError):
    """This host cannot play the anchor (another game or network, no policy head, no output at its path)."""


class AnchorLoader:
    """`loader(key)`: the params of anchor `key` on `device`, shaped like the host's `initial_params`."""

    def __init__(self, league: LeagueAPI, initial_params: Any, fits: Callable[[Any], Optional[str]], device: Any):
        self._league = league
        self._initial = initial_params
        self._fits = fits  # spec -> None, or what differs from the host's model
        self._device = device
        self._refused: dict[str, str] = {}

    def __call__(self, key: str) -> Any:
        if key in self._refused:
            raise AnchorUnavailable(self._refused[key])
        try:
            params = self._load(key)
        except AnchorUnavailable as error:
            self._refused[key] = str(error)
            raise
        except (OSError, ValueError, NotImplementedError) as error:  # no output there, a recurrent network, ...
            self._refused[key] = f"anchor {key}: {type(error).__name__}: {error}"
            raise AnchorUnavailable(self._refused[key]) from None
        return jax.device_put(params, self._device)

    def _load(self, key: str) -> Any:
        path = next((s.path for s in self._league.snapshots(key) if s.key == key), None)
        if path is None:
            raise AnchorUnavailable(f"the league has no anchor {key!r}")
        if path == UNIFORM_ANCHOR:
            return uniform_params(self._initial)
        params, spec = _output_params(path)
        problem = self._fits(spec) or _shape_difference(params, self._initial)
        if problem:
            raise AnchorUnavailable(f"anchor {key} ({path}) cannot play in this host: {problem}; an anchor by path "
                                    "must be a run of the same game with the same network")
        log.info("anchor %s plays the output of %s", key, path)
        return params


def _output_params(path: str) -> tuple[Any, Any]:
    """(params, spec) of the output at `path`: one network, the heaviest member of a mixture."""
    resolved = output.resolve(path)
    trained = resolved.load(0)
    if resolved.kind == "mixture":
        heaviest = int(np.argmax(trained.weights))
        log.info("anchor %s: its output is a mixture of %d; the anchor plays its heaviest member, %s",
                 path, len(trained.members), resolved.members[heaviest].key)
        trained = trained.members[heaviest]
    return trained.params, trained.model_spec


def _shape_difference(params: Any, mine: Any) -> Optional[str]:
    """None when `params` has `mine`'s tree and leaf shapes, else what differs."""
    if jax.tree.structure(params) != jax.tree.structure(mine):
        return "its network's layers differ from the host's"
    for theirs, ours in zip(jax.tree.leaves(params), jax.tree.leaves(mine)):
        if np.shape(theirs) != np.shape(ours):
            return f"a layer of shape {np.shape(theirs)} where the host's has {np.shape(ours)}"
    return None

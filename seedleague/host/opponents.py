"""Opponent inference: every league opponent's rows of a batch in one forward pass, with the
opponents' params kept on the inference device between batches.

This file owns the opponent table: a stacked params tree of `capacity` slots on the device, a
key -> slot map (least recently used slots are reused), and the grouping of a batch's rows
into [K, W] inputs for the K opponents seated in it. Only a snapshot new to the table crosses
to the device (written into a free slot); the forward pass gathers the K slots it needs on
the device, inside the same jitted call that also acts for the learner's rows, so a batch with
opponents costs one call over the learner's rows and K x W opponent rows, however often the set
of opponents changes. A named network's (protocol v2) observations, legal masks, actions and
behaviour params are dicts of such arrays and go the same way:

    table = OpponentTable()
    version = table.act_with_learner(policy, learner_rows, groups, params_of, observation, first, core, legal,
                                     put, bucket)
    # groups: {snapshot key: [row, ...]}; params_of: {key: params}, read only for keys new to the table;
    # put(rows, Actions) receives the learner's and each opponent's actions, logits and core state
    table.act(policy, groups, params_of, observation, first, core, legal, put, bucket)   # opponents only
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable

import jax
import numpy as np

from seedleague.buckets import power_of_two
from seedleague.host.policy import Actions, InferencePolicy, stack_params

MIN_CAPACITY = 8  # slots; the table doubles when one batch seats more opponents


@functools.partial(jax.jit, donate_argnums=0)
def _write_slot(table: Any, slot: jax.Array, params: Any) -> Any:
    """`table` with slot `slot` set to `params` (the old table's buffers are reused)."""
    return jax.tree.map(lambda stacked, leaf: stacked.at[slot].set(leaf), table, params)


def take_rows(tree: Any, index: np.ndarray) -> Any:
    """Every array of `tree` (observations, legal masks, core state: arrays or dicts of them) at rows `index`."""
    return jax.tree.map(lambda x: x[index], tree)


class OpponentTable:
    """Snapshots' params resident on the device, a slot each, and the batched pass over them."""

    def __init__(self, capacity: int = MIN_CAPACITY):
        self.capacity = power_of_two(capacity)
        self._table: Any = None  # stacked params, [capacity, ...] per leaf
        self._slot_of: "collections.OrderedDict[str, int]" = collections.OrderedDict()  # oldest use first
        self.writes = 0  # params trees copied into the table (a snapshot's first use, or after eviction)

    def slots(self, keys: list[str], params_of: dict[str, Any]) -> np.ndarray:
        """The slot of each key, writing the params of keys not yet in the table."""
        if self._table is None or len(keys) > self.capacity:
            self._rebuild(keys, params_of)
        wanted = set(keys)
        for key in keys:
            if key in self._slot_of:
                self._slot_of.move_to_end(key)
                continue
            slot = self._free_slot(wanted)
            self._table = _write_slot(self._table, np.int32(slot), params_of[key])
            self._slot_of[key] = slot
            self.writes += 1
        return np.array([self._slot_of[key] for key in keys], np.int32)

    def _free_slot(self, wanted: set[str]) -> int:
        used = set(self._slot_of.values())
        for slot in range(self.capacity):
            if slot not in used:
                return slot
        victim = next(key for key in self._slot_of if key not in wanted)  # capacity >= len(wanted): one exists
        return self._slot_of.pop(victim)

    def _rebuild(self, keys: list[str], params_of: dict[str, Any]) -> None:
        """A new table big enough for `keys` (the first call, or a batch with more opponents than slots)."""
        self.capacity = max(self.capacity, power_of_two(len(keys)))
        first = params_of[keys[0]]
        self._table = stack_params([first] * self.capacity)
        self._slot_of.clear()

    def layout(self, groups: dict[str, list[int]], params_of: dict[str, Any], bucket: Callable[[int], int]
               ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(keys, slot ids [K], row index [K, W]) of a batch's opponents: K padded to a power of two (padding
        repeats a seated opponent) and W = bucket(most rows of one opponent) (padding repeats a real row)."""
        keys = sorted(groups)
        slots = self.slots(keys, params_of)
        count = power_of_two(len(keys))
        width = bucket(max(len(rows) for rows in groups.values()))
        slot_ids = np.concatenate([slots, np.full(count - len(keys), slots[0], np.int32)])
        index = np.zeros((count, width), np.int64)
        for i, key in enumerate(keys):
            rows = groups[key]
            index[i, :len(rows)] = rows
            index[i, len(rows):] = rows[0]
        return keys, slot_ids, index

    @staticmethod
    def scatter(out: Actions, keys: list[str], groups: dict[str, list[int]],
                put: Callable[[np.ndarray, Actions], None]) -> None:
        """Hand each opponent's rows of a [K, W] pass to `put(rows, Actions)`."""
        for i, key in enumerate(keys):
            n = len(groups[key])
            rows = lambda tree: jax.tree.map(lambda x: x[i, :n], tree)
            put(np.asarray(groups[key]), Actions(rows(out.action), rows(out.logits), rows(out.core_state),
                                                 out.policy_version))

    def act(self, policy: InferencePolicy, groups: dict[str, list[int]], params_of: dict[str, Any], observation,
            first, core, legal, put: Callable[[np.ndarray, Actions], None], bucket: Callable[[int], int]) -> None:
        """Every opponent's rows in one pass (`layout`), each handed to `put`."""
        keys, slot_ids, index = self.layout(groups, params_of, bucket)
        out = policy.act_table(self._table, slot_ids, *take_rows((observation, first, core, legal), index))
        self.scatter(out, keys, groups, put)

    def act_with_learner(self, policy: InferencePolicy, learner_rows: np.ndarray, groups: dict[str, list[int]],
                         params_of: dict[str, Any], observation, first, core, legal,
                         put: Callable[[np.ndarray, Actions], None], bucket: Callable[[int], int]) -> int:
        """The learner's rows (padded to `bucket`) and every opponent's rows in one jitted call; returns
        the learner params' version."""
        keys, slot_ids, index = self.layout(groups, params_of, bucket)
        count = len(learner_rows)
        padded = np.concatenate([learner_rows, np.full(bucket(count) - count, learner_rows[0])])
        inputs = (observation, first, core, legal)
        learner, opponents = policy.act_with_table(take_rows(inputs, padded), self._table, slot_ids,
                                                   take_rows(inputs, index))
        cut = lambda tree: jax.tree.map(lambda x: x[:count], tree)
        put(learner_rows, Actions(cut(learner.action), cut(learner.logits), cut(learner.core_state),
                                  learner.policy_version))
        self.scatter(opponents, keys, groups, put)
        return learner.policy_version

"""A two-player OpenSpiel game's whole tree, walked once into flat arrays, for exact evaluation.

Exact exploitability, each policy's own reach of each information state, the meta-game's payoffs
and the sequence-form LP all need the whole game tree. OpenSpiel's Python helpers walk it with
state objects (TabularPolicy's enumeration keeps every state alive; its best response walks it again
per policy), which takes minutes and gigabytes past a few hundred thousand histories. This module
walks the tree once, keeps a few numbers per history, and answers reach, best responses and the
terminal table with numpy, one depth at a time (OpenSpiel's own C++ `exploitability` stays at hand as
the reference for a run's final score):

    tree = game_tree.of(game)                     # cached per game
    probs = tree.probabilities(policy)            # [S, A]: one batched forward pass per chunk
    tree.exploitability(probs)                    # NashConv / 2, two vectorised best responses
    tree.openspiel_exploitability(probs)          # the same, by pyspiel.exploitability
    tree.own_reach(np.stack([probs]))             # [K, S]
    tree.terminal_table()                         # metagame.TerminalTable

Rows are information states in the order the walk first meets them; `keys[row]` is the acting
seat's information-state string, the key OpenSpiel's tabular policies use.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pyspiel
import scipy.sparse

from seedleague.games.openspiel import Encoder

CHANCE, TERMINAL = -1, -2  # GameTree.player at chance and terminal histories
FORWARD_CHUNK = 65_536  # information states per forward pass: bounds the network's activations
REACH_BYTES = 1 << 28  # own_reach's per-depth arrays: policies are taken in groups that fit this


@dataclasses.dataclass(frozen=True)
class TerminalTable:
    """Every terminal history of a game, in the coordinates of its game_tree rows."""

    weight: np.ndarray  # [H] chance probability x utility of seat 0
    decisions: tuple[scipy.sparse.csr_matrix, scipy.sparse.csr_matrix]  # per seat: [H, S*A] counts
    # The sequence form (Koller, Megiddo and von Stengel 1994), for best responses as linear programs.
    # A seat's sequence is its last decision (column row * A + action) on a path, -1 before its first.
    last: tuple[np.ndarray, np.ndarray]  # per seat: [H] the seat's sequence at each terminal history
    parent: dict  # infostate row -> (its seat, the seat's sequence that leads to it)
    columns: tuple[np.ndarray, np.ndarray]  # per seat: every sequence of the seat but the empty one, sorted


@dataclasses.dataclass(frozen=True, eq=False)
class GameTree:
    """Every history of `game` (ordered by depth, each parent before its children) and every
    information state of both seats."""

    game: pyspiel.Game
    keys: tuple[str, ...]  # [S] information-state strings
    seat: np.ndarray  # [S] int8: who acts there
    observations: np.ndarray  # [S, ...] float32: what the acting seat sees, as the env worker encodes it
    masks: np.ndarray  # [S, A] bool: legal actions
    parent: np.ndarray  # [N] int64: the parent history, -1 at the root
    player: np.ndarray  # [N] int8: acting seat, CHANCE or TERMINAL
    row: np.ndarray  # [N] int64: the information state at decision histories, -1 elsewhere
    action: np.ndarray  # [N] int64: the action that leads here from the parent, -1 at the root
    chance: np.ndarray  # [N] float64: the product of chance probabilities on the way here
    utility: np.ndarray  # [N] float64: seat 0's return at terminal histories, 0 elsewhere
    depth_starts: np.ndarray  # [D + 1]: histories of depth d are [depth_starts[d], depth_starts[d + 1])

    @property
    def num_actions(self) -> int:
        return self.masks.shape[1]

    def depths(self):
        """(start, stop) of each depth's histories, root first."""
        return zip(self.depth_starts[:-1], self.depth_starts[1:])

    def probabilities(self, policy) -> np.ndarray:
        """[S, A] float64 action probabilities of a `seedleague.api.Policy` at every information state,
        zero off the legal actions and each row summing to 1."""
        parts = [np.asarray(policy.action_probabilities(self.observations[i:i + FORWARD_CHUNK],
                                                        self.masks[i:i + FORWARD_CHUNK]), np.float64)
                 for i in range(0, len(self.keys), FORWARD_CHUNK)]
        probs = np.concatenate(parts) * self.masks
        return probs / probs.sum(axis=-1, keepdims=True)

    def exploitability(self, probs: np.ndarray) -> float:
        """NashConv / 2 of the behaviour strategy `probs` [S, A] playing both seats: the mean of what a best
        response earns against it in each seat (zero-sum: the strategy's own values cancel)."""
        return (self.best_response_value(probs, 0) + self.best_response_value(probs, 1)) / 2.0

    def openspiel_exploitability(self, probs: np.ndarray) -> float:
        """The same number from OpenSpiel's own C++ best response (`pyspiel.exploitability`), the reference
        for a run's final score; it builds string-keyed maps, so about 30 s on 1.4M histories."""
        policy = {}
        for key, mask, row in zip(self.keys, self.masks, probs):
            legal = np.flatnonzero(mask)
            policy[key] = list(zip(legal.tolist(), row[legal].tolist()))
        return float(pyspiel.exploitability(self.game, policy))

    def best_response_value(self, probs: np.ndarray, responder: int) -> float:
        """What a best response in seat `responder` earns against `probs` [S, A] in the other seat."""
        reach = self._node_reach(probs, 1 - responder)[self.terminals]
        return self.best_response(self.chance[self.terminals] * reach, responder)[0]

    def best_response(self, weight: np.ndarray, responder: int) -> tuple[float, np.ndarray]:
        """(value, choice [S]) of the best response in seat `responder` when terminal history `terminals[t]`
        is reached by chance and the opponent with probability weight[t]: choice[row] is its action at each
        of its information states (-1 at the other seat's).

        Counterfactual values, bottom up: cv(z) = weight(z) * u(z) at terminal histories, the sum over
        children at chance and opponent histories, and at the responder's information state I the action
        maximising sum_{h in I} cv(h a), which needs every history of I valued first. Where each information
        state's histories share one depth (poker, oshi_zumo, most games), a single bottom-up pass decides
        each depth's information states as it reaches them. Otherwise the histories of I may lie at
        different depths, but by perfect recall they share the responder's count of earlier decisions (its
        level), and everything below a level-L decision is of a higher level. So the levels are decided
        deepest first, one bottom-up pass each, and a last pass gives the root's value."""
        leaf = np.zeros(len(self.parent))
        leaf[self.terminals] = (1.0 if responder == 0 else -1.0) * self.utility[self.terminals] * weight
        by_depth = self._deciders_by_depth[responder]
        if by_depth is not None:
            return self._best_response_by_depth(leaf, responder, by_depth)
        return self._best_response_by_level(leaf, responder)

    def _best_response_by_depth(self, leaf: np.ndarray, responder: int, deciders: list[np.ndarray]
                                ) -> tuple[float, np.ndarray]:
        """One bottom-up pass; deciders[d] are the responder's information states at depth d."""
        states, actions = self.masks.shape
        choice = np.full(states, -1, np.int64)
        cv = leaf.copy()
        for depth in range(len(self.depth_starts) - 2, 0, -1):
            start, stop = self.depth_starts[depth], self.depth_starts[depth + 1]
            above, child_cv = self.parent[start:stop], cv[start:stop]
            rows, moves = self.row[above], self.action[start:stop]
            by_responder = self.player[above] == responder
            deciding = deciders[depth - 1]
            if len(deciding):
                local = np.searchsorted(deciding, rows[by_responder])  # deciding is sorted
                values = np.bincount(local * actions + moves[by_responder], weights=child_cv[by_responder],
                                     minlength=len(deciding) * actions).reshape(len(deciding), actions)
                choice[deciding] = np.argmax(np.where(self.masks[deciding], values, -np.inf), axis=1)
            counts = ~by_responder | (moves == choice[np.where(by_responder, rows, 0)])
            self._add_to_parents(cv, depth, counts)
        return float(cv[0]), choice

    def _best_response_by_level(self, leaf: np.ndarray, responder: int) -> tuple[float, np.ndarray]:
        """One bottom-up pass per level of the responder's decisions, deepest first, and a last one."""
        level, deciders = self._levels[responder]
        states, actions = self.masks.shape
        choice = np.full(states, -1, np.int64)
        for deciding in range(len(deciders) - 1, -2, -1):  # -1: the last pass, every choice made
            values = np.zeros(states * actions)
            cv = leaf.copy()
            for depth in range(len(self.depth_starts) - 2, 0, -1):
                start, stop = self.depth_starts[depth], self.depth_starts[depth + 1]
                above = self.parent[start:stop]
                child_cv, rows, moves = cv[start:stop], self.row[above], self.action[start:stop]
                by_responder = self.player[above] == responder
                fixed = by_responder & (level[above] > deciding)
                counts = ~by_responder | (fixed & (moves == choice[np.where(fixed, rows, 0)]))
                self._add_to_parents(cv, depth, counts)
                now = by_responder & (level[above] == deciding)
                values += np.bincount(rows[now] * actions + moves[now], weights=child_cv[now],
                                      minlength=states * actions)
            if deciding >= 0:
                states_now = deciders[deciding]
                values = values.reshape(states, actions)[states_now]
                choice[states_now] = np.argmax(np.where(self.masks[states_now], values, -np.inf), axis=1)
        return float(cv[0]), choice

    def _add_to_parents(self, cv: np.ndarray, depth: int, counts: np.ndarray) -> None:
        """Adds cv of each history at `depth` where `counts` (one flag per such history) holds to its parent's."""
        start, stop, previous = self.depth_starts[depth], self.depth_starts[depth + 1], self.depth_starts[depth - 1]
        above = self.parent[start:stop][counts]
        cv[previous:start] += np.bincount(above - previous, weights=cv[start:stop][counts], minlength=start - previous)

    def _node_reach(self, probs: np.ndarray, seat: int) -> np.ndarray:
        """[N]: `seat`'s own reach of every history under `probs` [S, A]."""
        reach = np.ones(len(self.parent))
        for start, stop in list(self.depths())[1:]:
            above = self.parent[start:stop]
            moved = self.player[above] == seat
            factor = probs[np.where(moved, self.row[above], 0), np.where(moved, self.action[start:stop], 0)]
            reach[start:stop] = reach[above] * np.where(moved, factor, 1.0)
        return reach

    @functools.cached_property
    def _levels(self) -> tuple[tuple[np.ndarray, list[np.ndarray]], ...]:
        """Per seat: (how many decisions the seat took before each history [N], the seat's information states
        at each such count), computed once for every best response."""
        out = []
        for seat in (0, 1):
            level = np.zeros(len(self.parent), np.int64)
            for start, stop in list(self.depths())[1:]:
                above = self.parent[start:stop]
                level[start:stop] = level[above] + (self.player[above] == seat)
            mine = self.player == seat
            out.append((level, [np.unique(self.row[mine & (level == n)])
                                for n in range(int(level[mine].max(initial=-1)) + 1)]))
        return tuple(out)

    @functools.cached_property
    def _deciders_by_depth(self) -> tuple[list[np.ndarray] | None, ...]:
        """Per seat: its information states at each depth, or None where one of them has histories at two
        depths (then best responses go level by level)."""
        depth = np.repeat(np.arange(len(self.depth_starts) - 1), np.diff(self.depth_starts))
        out = []
        for seat in (0, 1):
            mine = np.flatnonzero(self.player == seat)
            pairs = np.unique(np.stack([self.row[mine], depth[mine]]), axis=1)
            if len(np.unique(pairs[0])) < pairs.shape[1]:
                out.append(None)
                continue
            out.append([pairs[0][pairs[1] == d] for d in range(len(self.depth_starts) - 1)])
        return tuple(out)

    def own_reach(self, probs: np.ndarray) -> np.ndarray:
        """[K, S]: for each of the K tables `probs` [K, S, A], the acting seat's own reach probability of
        each information state (the product of its own probabilities on the way; the same for every
        history of the information state, by perfect recall)."""
        count, states = probs.shape[:2]
        widest = int(np.diff(self.depth_starts).max())
        group = max(1, REACH_BYTES // (16 * widest))
        out = np.zeros((count, states))
        for first in range(0, count, group):
            self._own_reach_into(probs[first:first + group], out[first:first + group])
        return out

    def _own_reach_into(self, probs: np.ndarray, out: np.ndarray) -> None:
        """Fills out [k, S] from probs [k, S, A], one depth at a time: reach [seats, k, histories of the depth]."""
        reach = np.ones((2, len(probs), 1))
        self._record(0, 1, reach, out)
        for depth, (start, stop) in enumerate(self.depths()):
            if depth == 0:
                continue
            parents = self.parent[start:stop]
            reach = reach[:, :, parents - self.depth_starts[depth - 1]]  # the parents' reach, then the mover's factor
            acting = self.player[parents]
            for seat in (0, 1):
                taken = np.flatnonzero(acting == seat)
                if len(taken):
                    reach[seat][:, taken] *= probs[:, self.row[parents[taken]], self.action[start:stop][taken]]
            self._record(start, stop, reach, out)

    def _record(self, start: int, stop: int, reach: np.ndarray, out: np.ndarray) -> None:
        acting = self.player[start:stop]
        for seat in (0, 1):
            here = np.flatnonzero(acting == seat)
            if len(here):
                out[:, self.row[start:stop][here]] = reach[seat][:, here]

    def sequences(self) -> tuple[np.ndarray, np.ndarray]:
        """Per seat, [N]: the seat's last decision before each history, as a column row * A + action of the
        sequence form (Koller, Megiddo and von Stengel 1994), -1 before the seat's first decision."""
        last = np.full((2, len(self.parent)), -1, np.int64)
        for start, stop in list(self.depths())[1:]:
            parents = self.parent[start:stop]
            last[:, start:stop] = last[:, parents]
            acting = self.player[parents]
            column = self.row[parents] * self.num_actions + self.action[start:stop]
            for seat in (0, 1):
                mine = acting == seat
                last[seat, start:stop][mine] = column[mine]
        return last[0], last[1]

    @functools.cached_property
    def terminals(self) -> np.ndarray:
        return np.flatnonzero(self.player == TERMINAL)

    def terminal_table(self):
        """The game's TerminalTable: every terminal history with its chance-weighted utility, each
        seat's decisions on the way, and the sequence form's structure."""
        actions, terminals = self.num_actions, self.terminals
        rows: tuple[list, list] = ([], [])
        cols: tuple[list, list] = ([], [])
        history, above = np.arange(len(terminals)), terminals.copy()
        while len(above):  # climb from every terminal history at once, one level per pass
            parents = self.parent[above]
            acting = self.player[parents]
            for seat in (0, 1):
                mine = acting == seat
                rows[seat].append(history[mine])
                cols[seat].append(self.row[parents[mine]] * actions + self.action[above[mine]])
            keep = self.parent[parents] >= 0
            history, above = history[keep], parents[keep]
        shape = (len(terminals), len(self.keys) * actions)
        decisions = tuple(scipy.sparse.csr_matrix((np.ones(sum(len(r) for r in rows[s])),
                                                   (np.concatenate(rows[s]), np.concatenate(cols[s]))), shape=shape)
                          for s in (0, 1))
        last = self.sequences()
        decision = np.flatnonzero(self.player >= 0)
        first = np.unique(self.row[decision], return_index=True)[1]  # one history per information state
        parent = {int(self.row[h]): (int(self.player[h]), int(last[self.player[h]][h])) for h in decision[first]}
        columns = tuple(np.flatnonzero((self.masks & (self.seat == s)[:, None]).reshape(-1)).astype(np.int64)
                        for s in (0, 1))
        return TerminalTable(self.chance[terminals] * self.utility[terminals], decisions,
                             (last[0][terminals], last[1][terminals]), parent, columns)


def walk(game: pyspiel.Game) -> GameTree:
    """Enumerate `game`'s tree (depth first, so only one path of states is alive) into a GameTree."""
    encoder, actions = Encoder(game), game.num_distinct_actions()
    lookup: dict[str, int] = {}
    keys: list[str] = []
    seats: list[int] = []
    observations: list[np.ndarray] = []
    legal: list[list[int]] = []
    parent, player, row, action, chance, utility, depth = ([] for _ in range(7))

    stack = [(game.new_initial_state(), -1, -1, 1.0, 0)]
    while stack:
        state, above, taken, probability, level = stack.pop()
        here = len(parent)
        parent.append(above)
        action.append(taken)
        chance.append(probability)
        depth.append(level)
        if state.is_terminal():
            player.append(TERMINAL)
            row.append(-1)
            utility.append(state.returns()[0])
            continue
        utility.append(0.0)
        if state.is_chance_node():
            player.append(CHANCE)
            row.append(-1)
            for outcome, p in state.chance_outcomes():
                stack.append((state.child(outcome), here, outcome, probability * p, level + 1))
            continue
        seat = state.current_player()
        key = state.information_state_string(seat)
        index = lookup.get(key)
        moves = state.legal_actions()
        if index is None:
            index = lookup[key] = len(keys)
            keys.append(key)
            seats.append(seat)
            observation = np.empty(encoder.shape, np.float32)
            encoder.observation(state, seat, observation)
            observations.append(observation)
            legal.append(moves)
        player.append(seat)
        row.append(index)
        for move in moves:
            stack.append((state.child(move), here, move, probability, level + 1))

    depth_of = np.asarray(depth, np.int64)
    order = np.argsort(depth_of, kind="stable")  # by depth; a parent's depth is below its children's
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    parents = np.asarray(parent, np.int64)[order]
    parents = np.where(parents >= 0, position[np.maximum(parents, 0)], -1)
    masks = np.zeros((len(keys), actions), bool)
    for index, moves in enumerate(legal):
        masks[index, moves] = True
    return GameTree(
        game=game, keys=tuple(keys), seat=np.asarray(seats, np.int8),
        observations=np.stack(observations) if observations else np.zeros((0, *encoder.shape), np.float32),
        masks=masks, parent=parents, player=np.asarray(player, np.int8)[order],
        row=np.asarray(row, np.int64)[order], action=np.asarray(action, np.int64)[order],
        chance=np.asarray(chance, np.float64)[order], utility=np.asarray(utility, np.float64)[order],
        depth_starts=np.searchsorted(depth_of[order], np.arange(depth_of.max() + 2)))


_TREES: dict[str, GameTree] = {}  # the most recent game's tree, by its OpenSpiel string


def of(game: pyspiel.Game) -> GameTree:
    """The game's tree, walked once per game (the most recent game's is kept)."""
    name = str(game)
    if name not in _TREES:
        _TREES.clear()
        _TREES[name] = walk(game)
    return _TREES[name]

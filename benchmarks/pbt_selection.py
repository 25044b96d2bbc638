"""What PBT's ranking picks on Kuhn poker, exactly: the member best by its worst-case mean return (chips) or by its
worst-case win score, against the member's true exploitability; and the per-game power of each pair test.

    python -m benchmarks.pbt_selection                         # sigma 0.25 0.5 1 2, exact scores and 1k-100k games
    python -m benchmarks.pbt_selection --sigma 1 --trials 400 --check

Policies are Kuhn's behaviour policies (12 probabilities of bet/call: seat 0 at "" and "pb", seat 1 at "p" and "b",
one per card), drawn near the Nash family (Kuhn 1950: seat 0 bets a jack with alpha, a king with 3 alpha, calls a
queen at "pb" with alpha + 1/3; alpha uniform in [0, 1/3]), every probability moved in logit space by N(0, sigma).
A trial draws `members` such policies and `opponents` more (the population's snapshots), computes each member's
exact per-game distribution of returns against each opponent, seats alternating, and ranks the members as
`seedleague.league.pbt.rank` does (the worst case over the opponents) by mean return and by win score. Kuhn has no
draws, so the win score is the win probability. Exploitability is exact (a best response per seat; `--check`
compares it with OpenSpiel's). No training and no sampling of games: `--games N` adds the sampling error of N games
a pair to each score (normal approximation), to show what a round's games can resolve.

Power: for two members A and B against one opponent, the standardized per-game effect of each test,
d = |mean_A - mean_B| / sqrt(var_A + var_B) (the z after n games each is d sqrt(n)).
Measurements: benchmarks/README.md ("PBT scored by the game's return").
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

CARDS = (0, 1, 2)  # jack, queen, king
ROOTS = ((0, ""), (1, "p"), (1, "b"), (0, "pb"))  # (seat, history) of the information states, per card


def nash(alpha: float) -> dict:
    """A Nash equilibrium of Kuhn poker: P(bet or call) per card at each (seat, history)."""
    return {(0, ""): np.array([alpha, 0, 3 * alpha]), (1, "p"): np.array([1 / 3, 0, 1]),
            (1, "b"): np.array([0, 1 / 3, 1]), (0, "pb"): np.array([0, alpha + 1 / 3, 1])}


def perturb(policy: dict, sigma: float, rng: np.random.Generator) -> dict:
    """Every probability moved by N(0, sigma) in logit space (clipped to [0.001, 0.999] first)."""
    out = {}
    for key, p in policy.items():
        p = np.clip(p, 1e-3, 1 - 1e-3)
        out[key] = 1 / (1 + np.exp(-(np.log(p / (1 - p)) + rng.normal(0, sigma, len(CARDS)))))
    return out


def returns(p0: dict, p1: dict) -> dict:
    """{seat 0's return: probability} with p0 in seat 0 and p1 in seat 1 (antes 1, bets 1)."""
    dist: dict = {}

    def add(value, probability):
        dist[value] = dist.get(value, 0.0) + probability

    for c0, c1 in itertools.permutations(CARDS, 2):
        deal, win = 1 / 6, (1 if c0 > c1 else -1)
        bet, bet_after_check = p0[(0, "")][c0], p1[(1, "p")][c1]
        call_after_bet, call0 = p1[(1, "b")][c1], p0[(0, "pb")][c0]
        add(win, deal * (1 - bet) * (1 - bet_after_check))  # check, check: showdown for 1
        add(-1, deal * (1 - bet) * bet_after_check * (1 - call0))  # check, bet, fold
        add(2 * win, deal * (1 - bet) * bet_after_check * call0)  # check, bet, call: showdown for 2
        add(1, deal * bet * (1 - call_after_bet))  # bet, fold
        add(2 * win, deal * bet * call_after_bet)  # bet, call: showdown for 2
    return dist


def moments(a: dict, o: dict) -> tuple[float, float, float]:
    """Member a against opponent o, half its games in each seat: (mean return, its variance, win probability)."""
    dist: dict = {}
    for value, p in returns(a, o).items():
        dist[value] = dist.get(value, 0.0) + p / 2
    for value, p in returns(o, a).items():
        dist[-value] = dist.get(-value, 0.0) + p / 2
    values, probs = np.array(list(dist)), np.array(list(dist.values()))
    mean = float(values @ probs)
    return mean, float(values ** 2 @ probs) - mean ** 2, float(probs[values > 0].sum())


def exploitability(policy: dict) -> float:
    """(best response value against seat 0's policy + against seat 1's) / 2: OpenSpiel's exploitability."""
    total = 0.0
    for card in CARDS:
        others = [c for c in CARDS if c != card]
        # a best response in seat 1, holding `card`, at "p" (bet or check) and at "b" (call or fold)
        bet = check = call = fold = 0.0
        for c0 in others:
            win, b, call0 = (1 if card > c0 else -1), policy[(0, "")][c0], policy[(0, "pb")][c0]
            check += (1 - b) * win / 6
            bet += (1 - b) * (call0 * 2 * win + (1 - call0)) / 6
            call += b * 2 * win / 6
            fold -= b / 6
        total += max(bet, check) + max(call, fold)
        # a best response in seat 0, holding `card`: bet, or check then fold or call
        bet = check_fold = check_call = 0.0
        for c1 in others:
            win, b1, c = (1 if card > c1 else -1), policy[(1, "p")][c1], policy[(1, "b")][c1]
            bet += (c * 2 * win + (1 - c)) / 6
            check_fold += ((1 - b1) * win - b1) / 6
            check_call += ((1 - b1) * win + b1 * 2 * win) / 6
        total += max(bet, check_fold, check_call)
    return total / 2  # the two best responses' values sum to NashConv (the game's value cancels)


def draw(sigma: float, count: int, rng: np.random.Generator) -> list[dict]:
    return [perturb(nash(rng.uniform(0, 1 / 3)), sigma, rng) for _ in range(count)]


def selection(sigma: float, games: float, members: int, opponents: int, trials: int, seed: int) -> dict:
    """Mean exploitability of the member picked by each scoring (`games` inf: exact scores), of the best member
    and of a random one, over `trials` populations."""
    rng, sampling = np.random.default_rng(seed), np.random.default_rng([seed, 1])  # the same populations at any games
    picked = {"return": [], "win": [], "best": [], "random": []}
    for _ in range(trials):
        pop, opp = draw(sigma, members, rng), draw(sigma, opponents, rng)
        table = [[moments(a, o) for o in opp] for a in pop]
        noise = (lambda var: 0.0) if np.isinf(games) else (lambda var: sampling.normal(0, np.sqrt(var / games)))
        by_return = [min(m + noise(v) for m, v, _ in row) for row in table]
        by_win = [min(w + noise(w * (1 - w)) for _, _, w in row) for row in table]
        ex = [exploitability(a) for a in pop]
        picked["return"].append(ex[int(np.argmax(by_return))])
        picked["win"].append(ex[int(np.argmax(by_win))])
        picked["best"].append(min(ex))
        picked["random"].append(float(np.mean(ex)))
    return {k: float(np.mean(v)) for k, v in picked.items()}


def power(sigma: float, pairs: int, seed: int) -> dict:
    """Median per-game effect d of each test, and the share of pairs where the return test's d is larger."""
    rng = np.random.default_rng(seed)
    d_return, d_win = [], []
    for _ in range(pairs):
        a, b, o = draw(sigma, 3, rng)
        (ma, va, wa), (mb, vb, wb) = moments(a, o), moments(b, o)
        d_return.append(abs(ma - mb) / np.sqrt(va + vb))
        d_win.append(abs(wa - wb) / np.sqrt(wa * (1 - wa) + wb * (1 - wb)))
    d_return, d_win = np.array(d_return), np.array(d_win)
    return {"d_return": float(np.median(d_return)), "d_win": float(np.median(d_win)),
            "return_stronger": float((d_return > d_win).mean())}


def check_against_openspiel(seed: int) -> None:
    """Exploitability of a few drawn policies by this module and by OpenSpiel (needs open_spiel)."""
    import pyspiel  # optional: only for --check
    from open_spiel.python import policy as tabular
    from open_spiel.python.algorithms import exploitability as spiel_exploitability

    game, rng = pyspiel.load_game("kuhn_poker"), np.random.default_rng(seed)
    for policy in draw(1.0, 3, rng):
        table = tabular.TabularPolicy(game)
        for state in table.states:
            key = state.information_state_string()  # e.g. "0pb": the card, then the history
            p = policy[(state.current_player(), key[1:])][int(key[0])]
            table.policy_for_key(key)[:] = [1 - p, p]
        print(f"exploitability: here {exploitability(policy):.6f}, OpenSpiel "
              f"{spiel_exploitability.exploitability(game, table):.6f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sigma", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0])
    parser.add_argument("--games", type=float, nargs="+", default=[float("inf"), 1000, 10000, 100000])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--opponents", type=int, default=6)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="compare the exploitability with OpenSpiel's")
    args = parser.parse_args()
    if args.check:
        check_against_openspiel(args.seed)
    print("sigma | games a pair | picked by worst-case mean return | by worst-case win score | best member | random")
    for sigma in args.sigma:
        for games in args.games:
            r = selection(sigma, games, args.members, args.opponents, args.trials, args.seed)
            print(f"{sigma:g} | {games:g} | {r['return']:.4f} | {r['win']:.4f} | {r['best']:.4f} | {r['random']:.4f}")
    print("sigma | median d, return | median d, win/loss | return test's d larger")
    for sigma in args.sigma:
        p = power(sigma, args.trials, args.seed)
        print(f"{sigma:g} | {p['d_return']:.4f} | {p['d_win']:.4f} | {p['return_stronger']:.0%}")


if __name__ == "__main__":
    main()

"""Evaluation of trained policies, outside training.

    openspiel_eval  exact exploitability of a policy, or of a league's mixture, in an
                    OpenSpiel imperfect-information game (one batched forward pass)
    board           win/draw/loss matches against uniform random, OpenSpiel's MCTS
                    bot, or another policy, in any two-player OpenSpiel game
    measure         what `seedleague eval` measures (one history entry) and the run's
                    eval history
    report          the league report: leaderboard, payoff heatmap, rating and
                    exploitability curves
    cli             `seedleague eval` and `seedleague report`: parse and print

Policies come from `seedleague.artifacts` (`load.load_policy`, `load.load_snapshot`); anything with
the same `spec`, `action_probabilities` and `act` works, e.g. a test stand-in.
"""

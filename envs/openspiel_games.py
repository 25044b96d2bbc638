"""The OpenSpiel encoding now lives in the package (seedleague.games.openspiel), which evaluates games with it;
this name stays for scripts that import it from here."""

from seedleague.games.openspiel import (Encoder, UnsupportedGame, encode, legal_mask, load_game,  # noqa: F401
                                        observation_shape, payoff_bound, shows_the_clock)

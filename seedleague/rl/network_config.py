"""NetworkConfig: the shape of the actor-critic network, checked when made.

Kept apart from seedleague.rl.networks, which builds the model with flax, so that building the command line
(`seedleague train --help`, a refused flag) and reading a checkpoint's metadata need no jax.
"""

from __future__ import annotations

import dataclasses

_TORSOS = ("auto", "mlp", "conv", "board")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Shape of the actor-critic network.

    torso: "mlp" flattens the observation into tanh dense layers; "conv" is the
        Nature CNN for [H, W, C] frames followed by relu dense layers; "board" is
        two 3x3 stride-1 convolutions for small [C, H, W] board planes (OpenSpiel's
        observation tensors of board games, channels first) followed by relu dense
        layers; "auto" picks "conv" for rank-3 observations and "mlp" otherwise.
    hidden_sizes: dense layer sizes of the MLP torso, or after the convolutions.
        The exact Nature CNN is `NATURE_CNN` (torso="conv", hidden_sizes=(512,)).
    lstm_size: 0 for a feed-forward network; > 0 adds an LSTM core of that size
        between the torso and the heads.
    shared_torso: whether the value head reads the policy's torso (True) or a
        torso of its own (False). None picks: separate for a feed-forward MLP
        (Andrychowicz et al. 2021 found separate policy and value networks
        learn better on-policy; here it roughly halves the steps CartPole-v1
        needs), shared for the conv and board torsos (IMPALA/SEED practice; a second CNN
        doubles the cost) and whenever there is an LSTM core, whose memory the
        value needs too.
    squash_inputs: float inputs outside [-1, 1] enter as sign(x) (1 + ln|x|)
        (`squash_beyond_unit`), those inside unchanged: a raw count of 1,200
        chips enters as 8.1, where a unit-scale init would see it at a thousand
        times the scale of a one-hot. After DreamerV3's symlog (Hafner et al.
        2023), which squashes every input; this one leaves unit-range features
        (one-hots, board planes) exactly as they are. uint8 frames are scaled to
        [0, 1] first, so it never touches them.
    """

    torso: str = "auto"
    hidden_sizes: tuple[int, ...] = (64, 64)
    lstm_size: int = 0
    shared_torso: bool | None = None
    squash_inputs: bool = False

    def __post_init__(self):
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        if self.torso not in _TORSOS:
            raise ValueError(f"NetworkConfig.torso must be one of {_TORSOS}, got {self.torso!r}")
        if any(not isinstance(h, int) or h <= 0 for h in self.hidden_sizes):
            raise ValueError(
                f"NetworkConfig.hidden_sizes must be positive ints, got {self.hidden_sizes}"
            )
        if self.torso == "mlp" and not self.hidden_sizes:
            raise ValueError(
                "NetworkConfig.hidden_sizes must name at least one layer for torso='mlp'"
            )
        if not isinstance(self.lstm_size, int) or self.lstm_size < 0:
            raise ValueError(
                "NetworkConfig.lstm_size must be 0 (no core) or a positive int, "
                f"got {self.lstm_size}"
            )
        if self.shared_torso is False and self.lstm_size:
            raise ValueError(
                "NetworkConfig.shared_torso=False needs lstm_size=0: the value head must "
                "read the LSTM core; use shared_torso=True or None with an LSTM"
            )

    def shares_torso(self, torso: str) -> bool:
        """Whether policy and value share a torso, for the resolved torso kind."""
        if self.shared_torso is not None:
            return self.shared_torso
        return torso in ("conv", "board") or self.lstm_size > 0


NATURE_CNN = NetworkConfig(torso="conv", hidden_sizes=(512,))

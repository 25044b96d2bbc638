"""How seedleague's heavy jitted calls are compiled for XLA:CPU, where its defaults are the slow choice.

Two choices, both only on a CPU backend and only for a network that convolves (the measurements behind them:
benchmarks/README.md, "Learner updates/s and samples/s"):

- A loop over minibatch steps is unrolled (seedleague.rl.learner): XLA:CPU runs a convolution inside a loop body
  several times slower than the same convolution outside one.
- The learner's update and the forward passes (the host's, and the loaded policies' through
  `jit_choosing_fusions`) compile with XLA:CPU's library fusions off (`library_fusions_off`): its default YNNPACK
  fusions are slow wherever a convolution's output is kept, as every one is in a gradient. An MLP keeps them:
  its forward pass is faster with them, and so is its update in a full run, whose cores are busy.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.extend import core as jax_core

log = logging.getLogger(__name__)

# XLA's DebugOptions field: the YNNPACK fusion kinds enabled; empty means none.
_LIBRARY_FUSIONS_OFF = {"xla_cpu_experimental_ynn_fusion_type": ""}


def library_fusions_off() -> dict[str, str]:
    """Compile options (`jax.jit(compiler_options=...)`) that keep XLA:CPU's library fusions out of a call: {} where
    the default backend is not a CPU, or where this jaxlib does not know the option (it then compiles as it would
    without them; checked once, on a one-op function). A fresh dict each call: callers may keep or change it."""
    return dict(_LIBRARY_FUSIONS_OFF) if _takes_library_fusions_off() else {}


@functools.cache
def _takes_library_fusions_off() -> bool:
    """Whether the default backend is a CPU and this jaxlib takes `_LIBRARY_FUSIONS_OFF`."""
    if jax.default_backend() != "cpu":
        return False
    try:
        jax.jit(lambda x: x + 1, compiler_options=_LIBRARY_FUSIONS_OFF).lower(np.float32(0)).compile()
    except Exception as error:  # noqa: BLE001 (a jaxlib without the option: keep its defaults)
        log.info("XLA:CPU's library fusions stay on (this jaxlib does not take %s): %s", _LIBRARY_FUSIONS_OFF, error)
        return False
    return True


def jit_choosing_fusions(fn: Callable, static_argnames: Sequence[str] = ()) -> Callable:
    """`jax.jit(fn, static_argnames=...)` that, at its first call for each value of the static arguments (a network,
    a flag), traces `fn` once and compiles it with `library_fusions_off` where it convolves, with XLA's defaults
    where it does not: for the forward passes outside the host (`seedleague.api`, `seedleague.artifacts`),
    which the host's `Transfers` and the learner's update already choose for themselves."""
    static_argnames = tuple(static_argnames)
    signature = inspect.signature(fn)
    default = jax.jit(fn, static_argnames=static_argnames)
    fusions_off = functools.cache(lambda: jax.jit(fn, static_argnames=static_argnames,
                                                  compiler_options=library_fusions_off()))
    chosen: dict[tuple, bool] = {}  # static argument values -> whether that trace convolves

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        arguments = signature.bind(*args, **kwargs).arguments
        key = tuple(arguments.get(name) for name in static_argnames)
        if key not in chosen:
            statics = {name: arguments[name] for name in static_argnames if name in arguments}
            dynamic = {name: value for name, value in arguments.items() if name not in statics}
            chosen[key] = bool(library_fusions_off()) and convolves(functools.partial(fn, **statics), **dynamic)
        return (fusions_off() if chosen[key] else default)(*args, **kwargs)

    call.choices = chosen  # for tests and diagnostics: which static values compile with the fusions off
    return call


def convolves(fn: Callable, *args: Any, **kwargs: Any) -> bool:
    """Whether `fn(*args, **kwargs)` convolves anywhere (arrays or `jax.ShapeDtypeStruct`s; traced, not run)."""
    return has_convolution(jax.make_jaxpr(fn)(*args, **kwargs).jaxpr)


def has_convolution(jaxpr: jax_core.Jaxpr) -> bool:
    """Whether `jaxpr` or any jaxpr nested in its equations (scans, calls) convolves."""
    for equation in jaxpr.eqns:
        if equation.primitive.name == "conv_general_dilated":
            return True
        for value in equation.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr holds its Jaxpr
                if isinstance(inner, jax_core.Jaxpr) and has_convolution(inner):
                    return True
    return False

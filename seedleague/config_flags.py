"""Command-line flags generated from frozen config dataclasses.

`add_flags(parser, HostConfig)` adds one flag per leaf field, nested configs
prefixed by their field name (`--replay.capacity`, `--learner.learning_rate`);
`build(HostConfig, args, base)` returns `base` with every flag the user gave
applied, so presets stay defaults and the command line overrides them.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Optional


def _is_config(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def _parser_for(tp: Any):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:  # Optional[X] or X | None
        inner = _parser_for(next(a for a in args if a is not type(None)))
        return lambda text: None if text.lower() in ("none", "") else inner(text)
    if origin is tuple:
        item = _parser_for(args[0])
        return lambda text: tuple(item(part) for part in text.split(",") if part.strip())
    if tp is bool:
        return _parse_bool
    return tp


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_flags(parser: argparse.ArgumentParser, config_type: type, prefix: str = "") -> None:
    """Add `--<prefix><field>` flags for every leaf field of `config_type` (default: keep preset)."""
    hints = typing.get_type_hints(config_type)
    for field in dataclasses.fields(config_type):
        tp = hints[field.name]
        if _is_config(tp):
            add_flags(parser, tp, f"{prefix}{field.name}.")
            continue
        default = field.default if field.default is not dataclasses.MISSING else None
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        parser.add_argument(
            f"--{prefix}{field.name}", dest=f"{prefix}{field.name}", type=_parser_for(tp), default=None,
            metavar=getattr(tp, "__name__", "VALUE").upper(), help=f"(default: {shown})",
        )


def build(config_type: type, args: argparse.Namespace, base: Optional[Any] = None, prefix: str = "") -> Any:
    """`base` (or the type's defaults) with every flag given on the command line applied."""
    base = config_type() if base is None else base
    hints = typing.get_type_hints(config_type)
    changes = {}
    for field in dataclasses.fields(config_type):
        tp = hints[field.name]
        if _is_config(tp):
            changes[field.name] = build(tp, args, getattr(base, field.name), f"{prefix}{field.name}.")
            continue
        value = getattr(args, f"{prefix}{field.name}", None)
        if value is not None:
            changes[field.name] = value
    return dataclasses.replace(base, **changes)

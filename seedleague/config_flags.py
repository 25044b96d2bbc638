"""Command-line flags generated from frozen config dataclasses.

`add_flags(parser, HostConfig)` adds one flag per leaf field, nested configs
prefixed by their field name (`--replay.capacity`, `--learner.learning-rate`);
`build(HostConfig, args, base)` returns `base` with every flag the user gave
applied, so presets stay defaults and the command line overrides them.

    add_flags(parser, HostConfig, base=preset.host)   # --help shows the preset's values, not the dataclass's
    host = build(HostConfig, parser.parse_args(), preset.host)

Each flag's help is the field's own comment in its dataclass (`lr: float = 3e-4  # the learning rate`)
and the default that applies. An enum field lists its choices in its help and in the error for a
bad value. A flag that is not given keeps the base's value; `none` given to an optional field sets
it to None (so a preset's value can be cleared).

Flags are spelled with dashes, as every other flag of the command line (`--unroll-length`,
`--max-seconds`); the field's own spelling with underscores (`--unroll_length`) is accepted too,
and not listed in the help.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import inspect
import io
import re
import tokenize
import types
import typing
from typing import Any, Optional


class _NotGiven:
    """The default of every generated flag: the user did not give it (None is a value a flag may set)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __bool__(self) -> bool:  # `getattr(args, "league.address", None)` reads as "not given"
        return False


NOT_GIVEN = _NotGiven()


def _is_config(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


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
    if _is_enum(tp):
        return functools.partial(_parse_enum, tp)
    return tp


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _choices(tp: type) -> str:
    return ", ".join(str(member.value) for member in tp)


def _parse_enum(tp: type, text: str) -> enum.Enum:
    for member in tp:
        if text in (str(member.value), member.name, member.name.lower()):
            return member
    raise argparse.ArgumentTypeError(f"{text!r} is not one of {_choices(tp)}")


@functools.lru_cache(maxsize=None)
def field_comments(config_type: type) -> dict[str, str]:
    """{field: its comment in the class body}: the trailing `# comment` on the field's line, else the
    comment lines right above the field."""
    try:
        source = inspect.getsource(config_type)
    except (OSError, TypeError):
        return {}
    names = {f.name for f in dataclasses.fields(config_type)}
    trailing: dict[str, str] = {}
    above: dict[str, str] = {}
    line_field: dict[int, str] = {}
    pending: list[str] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        row, col = token.start
        if token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            if row in line_field:
                trailing.setdefault(line_field[row], text)
            elif col == 4:  # a comment line of its own at class-body indentation
                pending.append(text)
        elif token.type == tokenize.NAME and col == 4:  # a statement of the class body
            if token.string in names:
                line_field[row] = token.string
                if pending:
                    above[token.string] = " ".join(pending)
            pending = []
    described = docstring_entries(config_type.__doc__ or "", names)
    return {name: trailing.get(name) or above.get(name) or described[name]
            for name in names if name in trailing or name in above or name in described}


_DOC_ENTRY = re.compile(r"^([a-z_][a-z0-9_]*(?:, *[a-z_][a-z0-9_]*)*): (.*)$")


def docstring_entries(doc: str, names: set[str]) -> dict[str, str]:
    """{field: its first sentence} from a class docstring's `name: text` entries (several names before one
    colon share the text; indented lines continue it), for fields with no comment of their own."""
    entries: dict[str, str] = {}
    current: list[str] = []
    for line in inspect.cleandoc(doc).splitlines():
        match = _DOC_ENTRY.match(line)
        if match and all(name.strip() in names for name in match.group(1).split(",")):
            current = [match.group(2).strip()]
            for name in match.group(1).split(","):
                entries[name.strip()] = current
        elif current and line.startswith(" ") and line.strip():
            current.append(line.strip())
        else:
            current = []
    return {name: _first_sentence(" ".join(parts)) for name, parts in entries.items()}


def _first_sentence(text: str) -> str:
    end = re.search(r"\. (?=[A-Z0-9(`\"])", text)
    return text[:end.start() + 1] if end else text


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def add_flags(parser: argparse.ArgumentParser, config_type: type, prefix: str = "", base: Optional[Any] = None) -> None:
    """Add `--<prefix><field>` flags for every leaf field of `config_type`; the help shows `base`'s
    value (the preset that applies) as the default, else the dataclass's."""
    hints = typing.get_type_hints(config_type)
    comments = field_comments(config_type)
    for field in dataclasses.fields(config_type):
        tp = hints[field.name]
        current = getattr(base, field.name) if base is not None else (
            field.default if field.default is not dataclasses.MISSING else
            field.default_factory() if field.default_factory is not dataclasses.MISSING else None)
        if _is_config(tp):
            add_flags(parser, tp, f"{prefix}{field.name}.", current)
            continue
        inner = next((a for a in typing.get_args(tp) if a is not type(None)), tp)
        help_text = comments.get(field.name, "")
        if _is_enum(inner):
            help_text = f"{help_text}; one of {_choices(inner)}" if help_text else f"one of {_choices(inner)}"
        help_text = f"{help_text} (default: {_shown(current)})" if help_text else f"(default: {_shown(current)})"
        dest = f"{prefix}{field.name}"
        parse = _parser_for(tp)
        parser.add_argument(flag_name(dest), dest=dest, type=parse, default=NOT_GIVEN,
                            metavar=getattr(inner, "__name__", "VALUE").upper(), help=help_text.replace("%", "%%"))
        if flag_name(dest) != f"--{dest}":  # the field's own spelling, accepted without a line in --help
            parser.add_argument(f"--{dest}", dest=dest, type=parse, default=NOT_GIVEN, help=argparse.SUPPRESS)


def flag_name(dest: str) -> str:
    """The flag of a config field's dotted path: `learner.learning_rate` -> `--learner.learning-rate`
    (`learner.lambda_`, a name kept off a Python keyword, -> `--learner.lambda`)."""
    return "--" + dest.rstrip("_").replace("_", "-")


def canonical(flag: str) -> str:
    """One spelling for comparing flags a user may write with dashes or underscores."""
    return flag_name(flag[2:]) if flag.startswith("--") else flag


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
        value = getattr(args, f"{prefix}{field.name}", NOT_GIVEN)
        if value is not NOT_GIVEN:
            changes[field.name] = value
    return dataclasses.replace(base, **changes)

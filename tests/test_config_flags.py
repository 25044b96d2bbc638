"""config_flags: one flag per config field, help from the field's comment and the default that applies,
enum choices in help and errors, `none` clears an optional field, and a flag not given keeps the base."""

import argparse
import dataclasses
import enum
from typing import Optional

import pytest

from seedleague import config_flags
from seedleague.host.host import HostConfig
from seedleague.league.config import LeagueConfig
from seedleague.league.types import Mode


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Inner:
    size: int = 3  # how many, at most
    sizes: tuple[int, ...] = (4, 5)


@dataclasses.dataclass(frozen=True)
class Outer:
    rate: float = 0.5  # the step size; 100% is 1.0
    start: Optional[int] = None  # where averaging starts (none: never)
    colour: Colour = Colour.RED
    fast: bool = False
    inner: Inner = Inner()


def parser_for(base=None):
    parser = argparse.ArgumentParser(prog="t")
    config_flags.add_flags(parser, Outer, base=base)
    return parser


def help_of(parser, flag):
    return next(a.help for a in parser._actions if flag in a.option_strings)


def test_flags_not_given_keep_the_base_and_given_ones_replace_it():
    base = Outer(rate=0.1, start=7, inner=Inner(size=9))
    args = parser_for().parse_args(["--inner.sizes", "1,2", "--fast", "yes", "--colour", "blue"])
    built = config_flags.build(Outer, args, base)
    assert built == Outer(rate=0.1, start=7, colour=Colour.BLUE, fast=True, inner=Inner(size=9, sizes=(1, 2)))


def test_none_clears_an_optional_field_that_the_base_sets():
    args = parser_for().parse_args(["--start", "none"])
    assert config_flags.build(Outer, args, Outer(start=7)).start is None


def test_help_shows_the_fields_comment_and_the_default_that_applies():
    plain, preset = parser_for(), parser_for(Outer(rate=0.25, inner=Inner(size=8)))
    assert help_of(plain, "--rate") == "the step size; 100%% is 1.0 (default: 0.5)"  # argparse prints one %
    assert help_of(preset, "--rate").endswith("(default: 0.25)")
    assert help_of(preset, "--inner.size") == "how many, at most (default: 8)"
    assert help_of(plain, "--inner.sizes") == "(default: 4,5)"
    assert "100% is 1.0" in plain.format_help()


def test_an_enum_lists_its_choices_in_help_and_in_the_error(capsys):
    parser = parser_for()
    assert help_of(parser, "--colour") == "one of red, blue (default: red)"
    with pytest.raises(SystemExit):
        parser.parse_args(["--colour", "bogus"])
    assert "'bogus' is not one of red, blue" in capsys.readouterr().err


def test_the_league_mode_flag_names_its_modes(capsys):
    parser = argparse.ArgumentParser(prog="t")
    config_flags.add_flags(parser, LeagueConfig, prefix="league_config.", base=LeagueConfig(mode=Mode.PSRO))
    text = help_of(parser, "--league-config.mode")
    assert all(mode.value in text for mode in Mode) and text.endswith(f"(default: {Mode.PSRO.value})")
    with pytest.raises(SystemExit):
        parser.parse_args(["--league_config.mode", "bogus"])
    assert "is not one of" in capsys.readouterr().err


def test_every_host_flag_builds_back_to_the_base_when_none_is_given():
    parser = argparse.ArgumentParser(prog="t")
    config_flags.add_flags(parser, HostConfig)
    base = HostConfig(batch_size=8)
    assert config_flags.build(HostConfig, parser.parse_args([]), base) == base
    assert not getattr(parser.parse_args([]), "league.address")  # a flag not given reads as false


@dataclasses.dataclass(frozen=True)
class Commented:
    # what the first field is for,
    # over two lines
    first: int = 1
    second: int = 2  # its own line wins
    # a note that belongs to no field

    def method(self):
        # not a field's comment
        return self.first


def test_comment_lines_above_a_field_are_its_help_too():
    assert config_flags.field_comments(Commented) == {"first": "what the first field is for, over two lines",
                                                      "second": "its own line wins"}


@dataclasses.dataclass(frozen=True)
class Described:
    """A config documented in its docstring.

    rate: how fast it goes. More detail that
        the help leaves out.
    low, high: the bounds, shared by two fields
        over two lines.
    commented: the docstring's words lose to the field's comment.
    """

    rate: float = 0.1
    low: int = 0
    high: int = 9
    commented: int = 1  # the comment wins
    bare: int = 2


def test_a_fields_entry_in_the_class_docstring_is_its_help_when_it_has_no_comment():
    assert config_flags.field_comments(Described) == {
        "rate": "how fast it goes.", "low": "the bounds, shared by two fields over two lines.",
        "high": "the bounds, shared by two fields over two lines.", "commented": "the comment wins"}
    parser = argparse.ArgumentParser(prog="t")
    config_flags.add_flags(parser, Described)
    assert "how fast it goes. (default: 0.1)" in " ".join(parser.format_help().split())


@dataclasses.dataclass(frozen=True)
class Spelled:
    unroll_length: int = 8
    lambda_: float = 0.95
    inner: Inner = Inner()


def test_flags_are_spelled_with_dashes_and_the_field_spelling_is_accepted_but_not_listed():
    parser = argparse.ArgumentParser(prog="t")
    config_flags.add_flags(parser, Spelled)
    dashed = config_flags.build(Spelled, parser.parse_args(["--unroll-length", "4", "--lambda", "1"]))
    underscored = config_flags.build(Spelled, parser.parse_args(["--unroll_length", "4", "--lambda_", "1"]))
    assert dashed == underscored == Spelled(unroll_length=4, lambda_=1.0)
    help_text = parser.format_help()
    assert "--unroll-length" in help_text and "--lambda " in help_text
    assert "--unroll_length" not in help_text and "--lambda_" not in help_text


def test_one_spelling_for_comparing_flags():
    assert config_flags.flag_name("learner.learning_rate") == "--learner.learning-rate"
    assert config_flags.flag_name("learner.lambda_") == "--learner.lambda"
    assert config_flags.canonical("--league_config.mode") == config_flags.canonical("--league-config.mode")
    assert config_flags.canonical("--learner.lambda_") == "--learner.lambda"
    assert config_flags.canonical("plain") == "plain"


@pytest.mark.parametrize("with_workers", [True, False], ids=["train", "host"])
def test_every_flag_of_train_and_host_says_what_it_is_for(with_workers):
    # A flag whose help is only "(default: ...)" leaves the user guessing: each config field needs a comment
    # or an entry in its class docstring.
    from seedleague import cli

    parser = argparse.ArgumentParser(prog="seedleague")
    cli._add_run_flags(parser, with_workers=with_workers)
    bare = [action.option_strings[0] for action in parser._actions
            if action.help not in (None, argparse.SUPPRESS) and action.help.startswith("(default")]
    assert bare == []

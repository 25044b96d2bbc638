"""The `seedleague` command: train (host + workers), host (host only), worker (one env worker).

Host settings are flags generated from HostConfig (`--replay.capacity 1024`,
`--learner.loss ppo`, ...) applied over the game's preset (seedleague.presets).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import signal
import sys
from typing import Optional

from seedleague import checkpoint_config, compile_cache, config_flags, games, object_store, presets
from seedleague.artifacts import output_config, run_files
from seedleague.host.config import HostConfig
from seedleague.launch.run_config import Budget, RunConfig, WorkerSpec
from seedleague.league.config import LeagueConfig
from seedleague.league.pool_paths import root_of
from seedleague.league.types import Mode, Role, parse_key
from seedleague.protocol.errors import ProtocolError
from seedleague.protocol.named import NamedEnvSpec
from seedleague.security import add_security_flags, server_security_from_args
from seedleague.storage import StorageError, check_writable


STANDALONE_ADDRESS = "127.0.0.1:50051"  # where `host` and `serve` listen without --address: a port workers can find


def _env_given(argv: list[str]) -> Optional[str]:
    """The value of --env in `argv`, if any (read before parsing, so --help can show that env's defaults)."""
    for i, arg in enumerate(argv):
        if arg == "--env" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--env="):
            return arg.partition("=")[2]
    return None


def _help_preset(env: str) -> Optional[presets.Preset]:
    try:
        return presets.preset_for(env)
    except Exception:  # a bad --env is refused, with its reason, once the arguments are parsed
        return None


def _add_run_flags(parser: argparse.ArgumentParser, with_workers: bool, env: Optional[str] = None,
                   shows_help: bool = True) -> None:
    # Without --env, `host` and `train --worker-cmd` take the preset from the first worker's spec (seedleague.launch.probe).
    # --help shows the defaults of the preset that applies: --env's, else train's default env (host: the dataclasses').
    # The preset only writes the help text (the run takes its own in _run_config), so without --help none is built:
    # building a game's preset can load its game library and jax, which parsing and refusing flags do not need.
    preset = _help_preset(env or presets.DEFAULT_ENV) if shows_help and (env or with_workers) else None
    parser.add_argument("--env", default=None,
                        help="gymnasium env id, openspiel:<game>, pettingzoo:<atari game>, "
                             "pettingzoo:classic/<game> or pettingzoo:mpe/<game>, whose preset the run uses "
                             + (f"(default: {presets.DEFAULT_ENV}, and its built-in worker; with --worker-cmd: none, "
                                "the settings come from the worker's spec)" if with_workers else
                                "(default: none: the host waits for the first worker from any machine and takes "
                                "its settings from that worker's spec; two or more seats train in a league with "
                                "the game recipe, see docs/protocol.md section 12)"))
    parser.add_argument("--run-dir", default=None,
                        help="outputs go here (default: runs/<env>-<time>, or runs/worker-<time> without --env)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --run-dir from its newest good checkpoint; refused when it has none")
    parser.add_argument("--resume-or-start", action="store_true",
                        help="--resume when --run-dir holds a checkpoint, else start a new run there (for supervisors "
                             "that restart a run whether or not it got as far as its first checkpoint)")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many env steps (0: no limit)")
    parser.add_argument("--max-learner-steps", type=int, default=None,
                        help="stop once the learner has made this many updates in all (counts across --resume; "
                             "default: the preset's, 0: no limit)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop training after this many seconds (0: no limit); a league run's last "
                             "--choose-share of them chooses its output by best responses; a `selected` output is "
                             "chosen after them, which takes seconds to minutes and is printed with how long it took")
    parser.add_argument("--target-return", type=float, default=None,
                        help="stop when the mean return of the last 100 episodes reaches this")
    if with_workers:
        parser.add_argument("--choose-share", type=float, default=None, metavar="F",
                            help="the share of --max-seconds spent after training on choosing the output without a game "
                                 "tree: evaluation games among the newest snapshots estimate the population's Nash "
                                 "mixture, which is distilled into one network, then a best response to it and one to "
                                 "the param average decide which is the output (`seedleague exploit --choose`, "
                                 "docs/league.md). Default "
                                 f"{output_config.CHOICE_SHARE:g} for a one-player league run whose output is the "
                                 "param average and whose budget is --max-seconds alone; 0: train for the whole budget")
    add_security_flags(parser, "server")
    if with_workers:
        parser.add_argument("--worker-cmd", action="append", default=None, metavar="CMD",
                            help="start this command line as an env worker, in place of a built-in one: any binary "
                                 "that speaks docs/protocol.md, e.g. 'build/cpp/connect_four_worker --address "
                                 "{address} --seed {seed}' ({address}: the host's host:port, also in "
                                 "$SEEDLEAGUE_ADDRESS; {seed}: distinct per worker and restart). Repeat it for "
                                 "different workers, or give one with --workers N for N copies. The run's settings "
                                 "come from the first worker's spec: two or more seats train in a league with the "
                                 "game recipe. Its exit status 2 (it refuses its game) stops the run")
        parser.add_argument("--workers", type=int, default=None,
                            help="env worker processes (default: the preset's on a CPU-only machine; when the host "
                                 "runs on an accelerator, every usable CPU but 2 runs a worker, at least the "
                                 "preset's" + (f" {preset.workers}" if preset else "") + ")")
        parser.add_argument("--envs-per-worker", type=int, default=None, help="envs each worker steps (default: preset)")
    league = parser.add_argument_group(
        "league (two-player games: openspiel:<game>, pettingzoo:pong_v3, pettingzoo:classic/tictactoe_v3)",
        "Without --league.address the run starts its own league service; --league-config.* flags configure it.",
    )
    league.add_argument("--players", default=None,
                        help="learning players NAME[:ROLE],... (default: preset); the first runs in this process, "
                             "each other one as its own host process with its own workers")
    league.add_argument("--pbt", type=int, default=0, metavar="N",
                        help="population-based training (docs/pbt.md): N copies of the first player (role main), "
                             "each with its own entropy cost, learning rate and kl_cost; every "
                             "--league-config.pbt-interval updates (default 200 with --pbt) the bottom share copies "
                             "a better member's snapshot and settings, perturbed (0: off)")
    league.add_argument("--league-page", default="127.0.0.1:0", metavar="HOST:PORT",
                        help="where the run's league serves its live page (docs/league_page.md); port 0 picks a free "
                             "one, 'off' serves none (default: %(default)s)")
    league.add_argument("--no-eval", action="store_true", help="skip the evaluation printed at the end of a league run")
    league.add_argument("--output", default=None, choices=tuple(output_config.SOURCES), metavar="SOURCE",
                        help="the run's output, recorded in <run-dir>/output.json when the run starts and loaded by "
                             "seedleague.api.load_trained and `seedleague serve --checkpoint RUN_DIR`: "
                             f"{output_config.choices_text()} (default: {preset.output if preset else 'final'})")
    config_flags.add_flags(league, LeagueConfig, prefix="league_config.", base=preset.league if preset else None)
    host = preset.host if preset else HostConfig()
    config_flags.add_flags(parser, HostConfig, base=host if with_workers else _standalone(host))


def _league_spec(args: argparse.Namespace, preset: presets.Preset, argv: list[str], multiplayer: bool, name: str):
    """The league of a two-player run (None for single-agent envs), from the flags and the preset."""
    from seedleague.launch.league import LeagueSpec, PlayerSpec

    if not multiplayer:
        if args.players or args.pbt or getattr(args, "league.address", None):
            raise ValueError(f"--players, --pbt and --league.* need a two-player game; {name} is single-agent")
        return None
    players = tuple(PlayerSpec.parse(p) for p in (args.players or preset.players).split(",") if p.strip())
    league_config = config_flags.build(LeagueConfig, args, preset.league, prefix="league_config.")
    if args.pbt:
        players, league_config = _pbt_players(args.pbt, players, league_config)
    if len({p.name for p in players}) != len(players):
        raise ValueError(f"--players names must be unique, got {','.join(p.name for p in players)}")
    service_flags = presets.league_flags(league_config)
    # The extra players' hosts get this command line's host flags (same network, learner, budget).
    player_args = tuple(_forwarded_flags(argv))
    page = "" if args.league_page == "off" else args.league_page
    try:
        return LeagueSpec(service_flags=service_flags, players=players, player_args=player_args, page_address=page,
                          player_workers=preset.workers if args.env else 0)
    except ValueError as error:
        raise ValueError(f"--league-page: {error}") from None


PBT_INTERVAL = 200  # learner updates per PBT round when --pbt is given without --league-config.pbt-interval


def _pbt_players(count: int, players: tuple, config: LeagueConfig) -> tuple[tuple, LeagueConfig]:
    """--pbt N: the first player (role main) as N members NAME, NAME-1, ..., the other players after them."""
    from seedleague.launch.league import PlayerSpec

    first = players[0]
    if count < 2:
        raise ValueError(f"--pbt {count}: population-based training needs at least 2 members (0: off)")
    if first.role != Role.MAIN:
        raise ValueError(f"--pbt copies the first player, which is {first.name}:{first.role.value}; PBT members are "
                         "main agents: put a NAME:main player first in --players")
    members = (first,) + tuple(PlayerSpec(f"{first.name}-{k}", Role.MAIN) for k in range(1, count))
    if config.pbt_interval == 0:
        config = dataclasses.replace(config, pbt_interval=PBT_INTERVAL)
    return members + players[1:], config


# Per-player flags, and the token: it reaches the extra players' hosts through the environment
# (seedleague.launch.league), never a command line, which every user of the machine can read.
_NOT_FORWARDED = {"--env", "--run-dir", "--players", "--resume", "--resume-or-start", "--workers", "--seed", "--no-eval", "--token",
                  "--league-page", "--pbt",
                  "--league.address", "--league.player", "--league.role", "--league.pool-dir"}


def _forwarded_flags(argv: list[str]) -> list[str]:
    """Host and budget flags of this command line for the extra players (minus per-player ones)."""
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name = config_flags.canonical(arg.split("=", 1)[0])
        if name in _NOT_FORWARDED or name.startswith("--league-config."):
            skip = "=" not in arg and name not in ("--resume", "--resume-or-start", "--no-eval") and i + 1 < len(argv)
            continue
        if arg.startswith("--"):
            out.append(arg)
        elif out:
            out.append(arg)
    return out


def _check_game(env_id: str) -> None:
    """A game its built-in worker cannot play (an OpenSpiel or classic PettingZoo game, a PettingZoo family it does
    not step) is refused by name before any process starts (ValueError: `main` prints it to stderr and exits 2).
    Reading the spec makes one env here; an Atari game's ROM is checked by its worker, and a gymnasium id's env by
    the preset and its worker."""
    if ":" not in env_id:
        return
    try:
        games.spec_of(env_id)
    except games.UnsupportedGame as error:
        raise ValueError(f"--env {env_id} is refused: {error}") from None


def _output_config(args: argparse.Namespace, preset: presets.Preset, host: HostConfig, league,
                   name: str) -> output_config.OutputConfig:
    """The run's output source (--output, else the preset's) and the player whose snapshots it mixes."""
    source = args.output or preset.output
    if source == "distilled":
        raise ValueError("--output distilled is fitted after training, to the population's Nash mixture, by the output "
                         "choice: a league run with a --max-seconds budget and the default --output makes it in its "
                         "--choose-share, or `seedleague exploit --run-dir RUN --choose distilled` on a finished run")
    if source in output_config.MIXTURES and league is None:
        raise ValueError(f"--output {source} mixes a league's snapshots, and {name} is single-agent (no league): "
                         "use --output final or param_average")
    if source == "league_nash" and not host.league.address:
        mode = config_flags.build(LeagueConfig, args, preset.league, prefix="league_config.").mode
        if mode == Mode.SELF_PLAY:
            raise ValueError("--output league_nash solves the league's payoff table, which self-play leaves empty (its "
                             "learner never plays a snapshot): add --league-config.mode pfsp (or last_n, psro, "
                             "alphastar), or choose another --output")
    player = host.league.player if host.league.address else league.players[0].name if league else "main"
    return output_config.OutputConfig(source, player)


def _worker_templates(args: argparse.Namespace) -> tuple[tuple[str, ...], ...]:
    """--worker-cmd command lines as argv templates, one per worker (--workers N copies one command)."""
    import shlex

    commands = tuple(tuple(shlex.split(command)) for command in args.worker_cmd)
    if not all(commands):
        raise ValueError("--worker-cmd is empty: give the worker's command line, e.g. "
                         "--worker-cmd 'build/cpp/connect_four_worker --address {address}'")
    if args.env is not None:
        raise ValueError(f"--env {args.env} and --worker-cmd: choose one. --worker-cmd takes the run's settings from "
                         "the worker's own spec; --env starts a built-in worker")
    if args.envs_per_worker is not None:
        raise ValueError("--envs-per-worker sets built-in workers' envs: give a --worker-cmd's envs in its own command")
    count = len(commands) if args.workers is None else args.workers
    if len(commands) > 1 and count != len(commands):
        raise ValueError(f"{len(commands)} --worker-cmd give {len(commands)} workers, but --workers says {count}: "
                         "repeat --worker-cmd once per worker, or give one --worker-cmd with --workers N")
    if count < 1:
        raise ValueError(f"--worker-cmd needs --workers >= 1, got {count}")
    return commands * count if len(commands) == 1 else commands


def _spec_preset(args: argparse.Namespace, workers) -> tuple[presets.Preset, NamedEnvSpec]:
    """The preset for the game the first worker declares (seedleague.launch.probe), or ValueError: `train
    --worker-cmd` starts that worker; `host` without --env waits for one to connect."""
    from seedleague.launch import probe
    from seedleague.tools.fake_host import describe_spec

    security = server_security_from_args(args)
    if workers.count:
        bind_host = (args.address or HostConfig().address).rpartition(":")[0]
        print(f"starting worker 0 to read its spec: {' '.join(workers.templates[0])}", flush=True)
        spec = probe.probe_spec(workers, bind_host, os.path.join(args.run_dir, "logs"), security)
    else:
        spec, args.address = probe.await_spec(args.address, security)
    print(f"the worker's game: {describe_spec(spec)}", flush=True)
    return presets.preset_for_spec(spec), spec


def _run_config(args: argparse.Namespace, with_workers: bool, argv: Optional[list[str]] = None) -> RunConfig:
    custom = with_workers and bool(args.worker_cmd)
    from_spec = custom or (not with_workers and args.env is None)  # the first worker's spec picks the preset
    workers = WorkerSpec()
    if custom:
        templates = _worker_templates(args)
        workers = WorkerSpec(len(templates), templates=templates)
    elif args.env is None and with_workers:
        args.env = presets.DEFAULT_ENV
    # The budget's flags are refused before anything starts or waits for a worker (the preset fills those not given).
    Budget(max_env_steps=args.max_steps, max_learner_steps=args.max_learner_steps or 0,
           max_seconds=args.max_seconds or 0)
    resume = args.resume or args.resume_or_start
    if resume and not args.run_dir:
        raise ValueError(f"{'--resume' if args.resume else '--resume-or-start'} needs --run-dir: the run directory "
                         "to continue")
    if from_spec:
        if not custom and (len((args.players or "").split(",")) > 1 or args.pbt):
            raise ValueError("--players and --pbt: a host that learns its game from its first worker plays one player; start "
                             "each other player as its own `seedleague host --league.address ...`, or give --env")
        run_dir = args.run_dir = args.run_dir or _default_run_dir("worker")
        preset, spec = _spec_preset(args, workers)
        multiplayer, name = presets.plays_in_league(spec), f"the worker's game {spec.env_name!r}"
    else:
        _check_game(args.env)
        preset, multiplayer, name = presets.preset_for(args.env), presets.is_multiplayer(args.env), args.env
        spec = None  # what the built-in worker will declare: games.spec_of, asked only where it matters
        run_dir = args.run_dir or _default_run_dir(args.env)
    problem = checkpoint_config.path_problem(run_dir)
    if problem:
        raise ValueError(f"--run-dir {problem}")
    preset = presets.for_output(preset, args.output)
    host = config_flags.build(HostConfig, args, preset.host)
    if from_spec:
        presets.check_trainable(spec, host.batcher.max_batch_size, host.max_message_bytes)
    elif with_workers:
        count = preset.workers if args.workers is None else args.workers
        envs = preset.envs_per_worker if args.envs_per_worker is None else args.envs_per_worker
        if count < 0 or envs < 1:
            raise ValueError(f"--workers must be >= 0 and --envs-per-worker >= 1, got {count} and {envs}")
        # With no --workers, the host fits the preset's count to its machine once its devices are known (launch.local).
        workers = WorkerSpec(count, games.worker_command(args.env, envs), fit_machine=args.workers is None)
    budget = Budget(
        max_env_steps=args.max_steps,
        max_learner_steps=preset.max_learner_steps if args.max_learner_steps is None else args.max_learner_steps,
        max_seconds=preset.max_seconds if args.max_seconds is None else args.max_seconds,
        target_return=preset.target_return if args.target_return is None else args.target_return,
    )
    league = _league_spec(args, preset, argv or [], multiplayer, name)
    chosen_output = _output_config(args, preset, host, league, name)
    choose_s = _choice_seconds(args, budget, league, chosen_output, host, spec) if with_workers else 0.0
    budget = dataclasses.replace(budget, max_seconds=budget.max_seconds - choose_s)  # training's share
    if choose_s:  # PBT members train for the same share, so their anneal and param average fit in it as main's do
        league = dataclasses.replace(league, player_args=league.player_args + ("--max-seconds", f"{budget.max_seconds:g}"))
    if preset.anneal_over_budget and not host.learner.anneal_steps:  # --learner.anneal-steps N: over N updates
        host = dataclasses.replace(host, learner=presets.anneal_over_budget(host.learner, budget.max_seconds))
    # Last of the refusals, since it creates the directory: a file, a read-only or full directory is refused before
    # any process starts.
    check_writable(run_dir)
    return RunConfig(run_dir=run_dir, host=host, workers=workers, budget=budget, resume=resume,
                     start_if_none=args.resume_or_start and not args.resume,
                     security=server_security_from_args(args), league=league, env_id=args.env or "",
                     output=chosen_output, choose_output_s=choose_s)


def _choice_seconds(args: argparse.Namespace, budget: Budget, league, chosen: output_config.OutputConfig,
                    host: HostConfig, spec: Optional[NamedEnvSpec]) -> float:
    """Seconds of the budget that choosing the output takes after training (--choose-share): the default share where
    the choice applies, 0 where it does not, ValueError where --choose-share asks for it there. `spec`: the first
    worker's, or None for a built-in game's (asked of games.spec_of once the rest allows the choice)."""
    share = output_config.CHOICE_SHARE if args.choose_share is None else args.choose_share
    if not 0.0 <= share < 1.0:
        raise ValueError(f"--choose-share must be in [0, 1), got {share:g}: the share of --max-seconds spent choosing "
                         "the output after training (0: none)")
    why_not = None
    if league is None or host.league.address:
        why_not = "it chooses among a league's snapshots, in a league this run starts itself"
    elif len(league.players) - max(args.pbt - 1, 0) > 1:  # a PBT population's output is its best member's, chosen
        why_not = "it chooses one player's output, and this run trains several (--players)"
    elif chosen.source != "param_average":
        why_not = (f"it chooses between the param average and the population's Nash distilled into one network, and "
                   f"--output is {chosen.source}")
    elif not budget.max_seconds or budget.max_env_steps or budget.max_learner_steps or budget.target_return is not None:
        why_not = "its share is of a budget in seconds alone (no --max-steps, --max-learner-steps or --target-return)"
    elif host.network.lstm_size:
        why_not = "the population's evaluation games score feed-forward networks, and this one is recurrent"
    elif _has_continuous_head(spec, args.env):
        why_not = "the population's evaluation games score discrete actions, and this game has a continuous head"
    if why_not is None:
        return share * budget.max_seconds
    if args.choose_share:
        raise ValueError(f"--choose-share {share:g} does not apply to this run: {why_not}; drop --choose-share")
    return 0.0


def _choose_output(config: RunConfig, args: argparse.Namespace) -> None:
    """After training: the run's share of its budget for the output choice (`seedleague exploit --choose` among
    output_config.TRAIN_CHOICE), in equal parts for each round of evaluation games and each best response; the
    distilled network's fit is bounded by one part too, and takes seconds where its network is small."""
    from seedleague.eval import exploit_args

    rounds = output_config.evaluation_rounds(output_config.TRAIN_CHOICE)
    responses = len(output_config.TRAIN_CHOICE)
    seconds = config.choose_output_s / (rounds + responses)
    games = "evaluation games" if rounds == 1 else f"{rounds} rounds of evaluation games"
    print(f"\nchoosing the output without a game tree: the last {config.choose_output_s:.0f} s of the budget "
          f"(--choose-share), {seconds:.0f} s each for {games} and {responses} best responses (and at most "
          f"{seconds:.0f} s fitting the distilled network between them)", flush=True)
    argv = ["--run-dir", config.run_dir, "--choose", *output_config.TRAIN_CHOICE, "--max-seconds", f"{seconds:g}",
            "--seed", str(config.host.seed)]
    for command in args.worker_cmd or ():
        argv += ["--worker-cmd", command]
    if args.workers is not None:
        argv += ["--workers", str(args.workers)]
    parser = argparse.ArgumentParser(prog="seedleague exploit")
    exploit_args.add_arguments(parser)
    try:
        exploit_args.run(parser.parse_args(argv))
    except ValueError as error:  # the trained run stands: its end is still evaluated, its output is the one recorded
        print(f"seedleague train: the output choice stopped: {error}; the output stays "
              f"{output_config.recorded(config.run_dir).source}", file=sys.stderr, flush=True)


def _has_continuous_head(spec: Optional[NamedEnvSpec], env_id: Optional[str]) -> bool:
    """Whether the game's action has a continuous head: `spec`'s, else the built-in worker's for `env_id` where that
    is known without starting it."""
    if spec is None and env_id:
        try:
            spec = games.spec_of(env_id)
        except games.UnsupportedGame:
            return False  # the worker refuses the name itself, with its own message
    return spec is not None and presets.has_continuous_actions(spec)


def _default_run_dir(name: str) -> str:
    return os.path.join("runs", f"{checkpoint_config.safe_path_part(name)}-{datetime.datetime.now():%Y%m%d-%H%M%S}")


def _train(args: argparse.Namespace, with_workers: bool = True, argv: Optional[list[str]] = None) -> int:
    config = _run_config(args, with_workers, argv)
    # The host and the compile cache load jax: only once the command line is accepted (a refusal needs neither).
    from seedleague.launch import local

    compile_cache.enable()
    summary = local.run(config)
    if "games" in summary:  # two or more seats: say who wins, not a zero-sum return that averages to 0
        score = f"games {summary['games']} ({summary['league_games']} against league snapshots"
        score += (f", recent win rate {summary['league_win_rate']:.3f})" if "league_win_rate" in summary else ")")
    else:
        score = f"episodes {summary['episodes']}, mean return (last 100) {summary['mean_return']}"
    print(
        f"\nrun ended: {summary['reason']}\n"
        f"  env steps {summary['env_steps']}, {score}, learner steps {summary['learner_steps']}, {summary['wall_s']} s\n"
        f"  checkpoints: {summary['checkpoints']}\n  tensorboard: {summary['tensorboard']}\n"
        f"  worker logs: {summary['logs']}\n  summary:     {summary['run_dir']}/summary.json"
    )
    if summary.get("output"):
        print(f"  output:      {_output_line(summary['output'])}")
    if summary.get("standings"):
        from seedleague.league.tables import standings_table

        print("\nleague standings:\n" + standings_table([_standing(s) for s in summary["standings"]], top=10))
    # From here on SIGTERM stops the output choice and the evaluation as Ctrl-C does (local.run put back what it found)
    signal.signal(signal.SIGTERM, local.interrupt)
    stage = "choosing the output"
    try:
        if config.choose_output_s and summary.get("budget_reached") and summary.get("learner_step", 0) > 0:
            _choose_output(config, args)
        stage = "evaluating the run"
        if config.league is not None and not args.no_eval and summary.get("learner_step", 0) > 0:
            from seedleague.eval import cli as eval_cli

            print("\nevaluation:")
            eval_cli.evaluate_run(summary["run_dir"], quick=True)
    except KeyboardInterrupt:
        run_dir = summary["run_dir"]
        again = (f" (`seedleague exploit --run-dir {run_dir} --choose` chooses again)" if stage == "choosing the output"
                 else f" (`seedleague eval --run-dir {run_dir}` evaluates it)")
        print(f"\nseedleague train: interrupted while {stage}; the trained run stands, its checkpoints written, and its "
              f"output is {output_config.recorded(run_dir).source}{again}", file=sys.stderr, flush=True)
        return 130
    return 0


def _output_line(described: dict) -> str:
    """summary.json's "output" in one line: what load_trained gives, and how long choosing it took."""
    if "error" in described:
        return f"none yet ({described['error']})"
    members = described.get("members")
    what = (f"a mixture of {len(members)} networks" if members else "one network") + f" ({described['source']}"
    what += f", step {described['step']})" if described.get("step") is not None else ")"
    if described.get("seconds", 0) >= 1:
        what += f", chosen in {described['seconds']:.0f} s after the budget"
    return what + (f"; {described['note']}" if described.get("note") else "")


def _standing(data: dict):
    from seedleague.league.types import Role, Standing

    return Standing(**dict(data, role=Role(data["role"])))


def _add_serve_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="a run directory: its output (the run's --output, as seedleague.api.load_trained gives "
                             "it; a mixture draws one member per env per episode) is served; or a checkpoints/ "
                             "directory: its newest checkpoint")
    parser.add_argument("--snapshot", default=None,
                        help="serve this league snapshot (player:step) from the model pool of the --checkpoint run "
                             "directory instead, e.g. main:000512")
    parser.add_argument("--run-dir", default=None, help="logs go here (default: runs/serve-<time>)")
    parser.add_argument("--max-seconds", type=float, default=0.0, help="stop after this many seconds (0: no limit)")
    add_security_flags(parser, "server")
    config_flags.add_flags(parser, HostConfig, base=_standalone(HostConfig()))


def _standalone(host: HostConfig) -> HostConfig:
    """`host`'s settings as `host` and `serve` apply them: listening on STANDALONE_ADDRESS unless --address says
    otherwise (`main`), which their --help shows."""
    return dataclasses.replace(host, address=STANDALONE_ADDRESS)


def _checkpoint_dir(path: str) -> str:
    """The checkpoints directory for `path` (a run directory or the directory itself), or SystemExit."""
    from seedleague.checkpoint import Checkpointer  # loads jax: only a command that runs imports it (see main)
    from seedleague.checkpoint_config import CheckpointConfig

    for candidate in (os.path.join(path, "checkpoints"), path):
        if os.path.isdir(candidate) and Checkpointer(CheckpointConfig(directory=candidate)).latest_step() is not None:
            return os.path.abspath(candidate)
    raise SystemExit(_no_checkpoint(path))


def _no_checkpoint(path: str) -> str:
    return f"seedleague serve: no checkpoint found in {path!r} or {os.path.join(path, 'checkpoints')!r}"


def _no_snapshot(key: str, root: str, player: str, known: list[str]) -> str:
    """`serve --snapshot KEY`'s refusal: no such snapshot in the pool at `root`, whose `player` has `known`."""
    return f"seedleague serve: no snapshot {key!r} in {root} (latest of {player}: {', '.join(known[-5:]) or 'none'})"


def _snapshot_dir(run_dir: str, key: str) -> tuple[str, int]:
    """(pool player directory, step) of league snapshot `key` in `run_dir`'s model pool, or SystemExit."""
    from seedleague.league.model_pool import ModelPool  # loads jax: only a command that runs imports it (see main)

    try:
        player, step = parse_key(key)
    except ValueError as error:
        raise SystemExit(f"seedleague serve: {error}") from None
    pool = ModelPool(root_of(run_dir))
    if step is None or key not in pool.keys(player):
        raise SystemExit(_no_snapshot(key, pool.root, player, pool.keys(player)))
    return pool.player_dir(player), step


def _serve_refusal(args: argparse.Namespace) -> Optional[str]:
    """What `_serve_target` would refuse where the run's file names show it (seedleague.artifacts.run_files), in its
    words, or None: checked before the compile cache and the checkpoint reader load jax."""
    path = args.checkpoint
    if args.snapshot:
        try:
            player, _ = parse_key(args.snapshot)
        except ValueError as error:
            return f"seedleague serve: {error}"
        root = root_of(path)
        player_dir = os.path.join(root, player)
        if (object_store.is_url(root) or not run_files.holds_no_step(player_dir)
                or (os.path.isdir(player_dir) and checkpoint_config.path_problem(player_dir))):
            return None  # the pool's steps are orbax's to list (and an unreadable path a Checkpointer's to refuse)
        return _no_snapshot(args.snapshot, os.path.abspath(root), player, [])
    if os.path.isdir(os.path.join(path, "checkpoints")) or os.path.exists(os.path.join(path, output_config.FILE)):
        problem = run_files.output_problem(path)  # seedleague.output.resolve's "no output yet"
        return f"seedleague serve: {problem}" if problem else None
    if os.path.isdir(path) and (checkpoint_config.path_problem(path) or not run_files.holds_no_step(path)):
        return None  # a Checkpointer's to refuse or read
    return _no_checkpoint(path)


def _serve_target(args: argparse.Namespace) -> tuple[str, Optional[int], bool, str]:
    """(checkpoint directory, step, param average?, run dir of a served mixture) for `seedleague serve`:
    a --snapshot; a run directory's output (seedleague.api.load_trained: one network is restored as a
    checkpoint, a mixture is served by the host per env and episode); or a checkpoints directory."""
    if args.snapshot:
        directory, step = _snapshot_dir(args.checkpoint, args.snapshot)
        return directory, step, False, ""
    path = args.checkpoint
    if not (os.path.isdir(os.path.join(path, "checkpoints")) or os.path.exists(os.path.join(path, output_config.FILE))):
        return _checkpoint_dir(path), None, False, ""
    from seedleague import output  # loads jax: only a command that runs imports it (see main)

    try:
        resolved = output.resolve(path)
    except FileNotFoundError as error:
        raise SystemExit(f"seedleague serve: {error}") from None
    print(f"serving the output of {path}: {resolved.describe()}", flush=True)
    if resolved.kind == "mixture":
        return "", None, False, os.path.abspath(path)
    member = resolved.members[0]  # a learner checkpoint, or one snapshot (a Nash mixture with one member)
    directory = os.path.join(path, "checkpoints") if os.path.abspath(member.path) == os.path.abspath(path) else member.path
    return os.path.abspath(directory), member.step, member.average, ""


def _serve(args: argparse.Namespace) -> int:
    """Inference only: same protocol and batching as training, params from a checkpoint, no learning."""
    refusal = _serve_refusal(args)  # before the compile cache or the checkpoint reader loads jax
    if refusal:
        raise SystemExit(refusal)
    compile_cache.enable()
    from seedleague.launch import local  # loads jax: imported once the command line is accepted
    from seedleague import checkpoint_meta, output

    directory, step, average, mixture = _serve_target(args)
    if mixture:
        first = output.resolve(mixture).members[0]
        meta = checkpoint_meta.read(first.path, first.step)
    else:
        meta = checkpoint_meta.read(directory, step)
    preset = presets.preset_for(meta.spec.env_name)
    host = config_flags.build(HostConfig, args, preset.host)
    host = dataclasses.replace(host, learn=False, league=dataclasses.replace(host.league, address=""),
                               serve_param_average=host.serve_param_average or average, serve_output=mixture,
                               checkpoint=dataclasses.replace(host.checkpoint, directory=directory, restore_step=step))
    run_dir = args.run_dir or os.path.join("runs", f"serve-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    budget = Budget(max_seconds=args.max_seconds)
    summary = local.run(RunConfig(run_dir=run_dir, host=host, budget=budget, resume=True,
                                  security=server_security_from_args(args)))
    print(f"\nserving ended: {summary['reason']}; {summary['env_steps']} env steps answered, "
          f"{summary['episodes']} episodes, mean return (last 100) {summary['mean_return']}")
    return 0


def _worker(argv: list[str]) -> int:
    """`seedleague worker`: the gymnasium worker (the default game family), in this process."""
    try:
        family = games.default_family()
    except games.UnsupportedGame as error:
        print(f"seedleague worker: {error}", file=sys.stderr)
        return 2
    return family.main(argv)


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to `sys.stderr` as it is when a record is logged, not as it was when `main` ran:
    a caller that swaps stderr for a while (pytest's capture, a tool) and closes it afterwards
    would otherwise leave the root logger writing to a closed file ("Logging error")."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass  # StreamHandler.__init__ sets it; the property always answers the current stderr


# The commands whose parser and run live in modules of their own: each adds its flags with `add_parser(sub)` in a
# jax-free module (_parser_module) and runs with `run(args)` (_command_module: for most the same module); "report" is
# added and run by the modules of "eval".
_COMMANDS = ("fake-host", "check-worker", "league", "play", "eval", "report", "exploit", "export")
_OWN_COMMANDS = ("train", "host", "serve", "worker", "ray-launch")  # parsed (or handed on) in this module
# The commands whose run loads jax: their flags' module also says what is wrong with a command line that needs no
# model to see (`refusal(args)`), so that such a refusal loads no jax either.
_CHECKED_FIRST = ("eval", "report", "exploit", "export")


def _command_given(argv: list[str]) -> Optional[str]:
    """The command word of `argv` (None when there is none, e.g. `seedleague --help`)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _parser_module(name: str):
    """The module that adds the flags of the command `name` (one of _COMMANDS). Each loads neither jax nor scipy, so
    that `seedleague --help`, a command's --help and a refused flag need neither; imported for the command given
    only, or all of them for `seedleague --help`, since train's and host's help and refusals need none of them."""
    if name == "fake-host":
        from seedleague.tools import fake_host

        return fake_host
    if name == "check-worker":
        from seedleague.tools import check_worker

        return check_worker
    if name in ("eval", "report"):
        from seedleague.eval import cli_args as eval_args

        return eval_args
    if name == "exploit":
        from seedleague.eval import exploit_args

        return exploit_args
    if name == "export":
        from seedleague.export import cli_args as export_args

        return export_args
    if name == "league":
        from seedleague.league import cli as league_cli

        return league_cli
    from seedleague.play import cli as play_cli

    return play_cli


def _command_module(name: str):
    """The module that runs the command `name` (one of _COMMANDS), imported once its command line has parsed: eval's,
    exploit's and export's load jax, so their flags live apart (_parser_module)."""
    if name in ("eval", "report"):
        from seedleague.eval import cli as eval_cli  # loads jax: imported only to run the command

        return eval_cli
    if name == "exploit":
        from seedleague.eval import exploit as exploit_cli  # loads jax: imported only to run the command

        return exploit_cli
    if name == "export":
        from seedleague.export import cli as export_cli  # loads jax: imported only to run the command

        return export_cli
    return _parser_module(name)


def _run_faults() -> tuple[type[BaseException], ...]:
    """The faults that stop a run with one console line. Looked up when an exception reaches `main`'s handler, not at
    import: the learner loop that defines NonFiniteUpdate loads jax, which a refused command line does not need."""
    from seedleague.host.learner_loop import NonFiniteUpdate  # loads jax: only once a run has raised

    return StorageError, NonFiniteUpdate, ProtocolError


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="seedleague", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="WARNING", help="Python logging level (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", metavar="{train,host,serve,worker,fake-host,check-worker,league,play,eval,report,exploit,export,ray-launch}")
    train = sub.add_parser("train", help="train: host plus env worker processes on this machine (built-in "
                           "workers for --env, or any worker binary with --worker-cmd)")
    given = _command_given(argv)
    shows_help = given in ("train", "host") and ("-h" in argv or "--help" in argv)
    _add_run_flags(train, with_workers=True, env=_env_given(argv), shows_help=shows_help)
    host = sub.add_parser("host", help="run only the host; connect your own env workers to it, from any machine",
                          description="Run only the host; env workers connect to --address from any machine. "
                                      "Without --env the host waits for the first worker and takes the run's "
                                      "settings from its spec: two or more seats train in a league with the game "
                                      "recipe (docs/protocol.md section 12). The defaults below are then the "
                                      "config classes' own, which that preset replaces; `seedleague host --env ENV "
                                      "--help` shows ENV's.")
    _add_run_flags(host, with_workers=False, env=_env_given(argv), shows_help=shows_help)
    serve = sub.add_parser("serve", help="inference only from a checkpoint: same protocol, same workers, no learning")
    _add_serve_flags(serve)
    sub.add_parser("worker", help="run one Python gymnasium env worker (see `seedleague worker --help`)", add_help=False)
    sub.add_parser("ray-launch", help="train on a Ray cluster: league, host, workers as Ray actors (needs .[ray]; "
                   "see docs/cluster.md)", add_help=False)
    given = "eval" if given == "report" else given
    for name in ("fake-host", "check-worker", "league", "play", "eval", "exploit", "export"):
        if given in (None, name) or given not in _COMMANDS + _OWN_COMMANDS:  # all for `seedleague --help` or a typo
            _parser_module(name).add_parser(sub)
    if argv[:1] == ["worker"]:
        return _worker(argv[1:])
    if argv[:1] == ["ray-launch"]:  # its flags go on to the host: parsed by seedleague.launch.ray_cluster
        from seedleague.launch import ray_cluster

        return ray_cluster.main(argv[1:])
    args = parser.parse_args(argv or ["train"])
    # force: an imported library may already have put a handler on the root logger, which would make this a no-op
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=[_CurrentStderrHandler()], force=True)
    if args.command in _CHECKED_FIRST:  # before the cache or the command's module loads jax
        refusal = _parser_module(args.command).refusal(args)
        if refusal:
            print(f"seedleague {args.command}: {refusal}", file=sys.stderr)
            return 2
    if args.command in ("eval", "report", "exploit", "export", "play"):  # they compile (train, host, serve: their own)
        compile_cache.enable()
    try:
        if args.command in ("host", "serve") and args.address is config_flags.NOT_GIVEN:
            args.address = STANDALONE_ADDRESS
        if args.command == "serve":
            return _serve(args)
        if args.command in _COMMANDS:
            return _command_module(args.command).run(args)
        if args.command == "host":
            return _train(args, with_workers=False, argv=argv[1:])
        return _train(args, argv=argv[1:])
    except (ValueError, FileExistsError) as error:
        print(f"seedleague: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command in ("train", "host", "serve"):
            print("seedleague: interrupted before the host was serving", file=sys.stderr)
        else:  # exploit --choose: a stage stopped by the signal; nothing is recorded, the output stays as it was
            print(f"seedleague {args.command}: interrupted; nothing more was recorded", file=sys.stderr)
        return 130
    except SystemExit:
        raise  # a refusal that says its own line: not a run fault (the next clause's lookup loads jax)
    except _run_faults() as error:  # a fault stopped the run (seedleague.launch.local.RUN_FAULTS)
        print(f"seedleague: the run stopped: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

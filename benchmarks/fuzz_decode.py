"""Fuzz soak: every decode-path property of tests/test_fuzz_decode.py (env tensors, handshake,
StepBatch + check_step, raw and truncated bytes) and tests/test_fuzz_league.py (league requests
through the servicer guards, codec and League checks), with many more examples than the suite.

    .venv/bin/python -m benchmarks.fuzz_decode --examples 100000        # hours on 2 cores
    .venv/bin/python -m benchmarks.fuzz_decode --examples 2000 --only league

Prints one row per property: examples asked for (hypothesis stops sooner when it has tried every
input a strategy can make), seconds, and PASS or the error; hypothesis prints the falsifying
example above it. Exits 1 if any property failed. No example database is kept (nothing is
written to the tree): paste a falsifying example into a test to keep it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import sys
import time
import types

TESTS = pathlib.Path(__file__).resolve().parents[1] / "tests"
TARGETS = {"decode": TESTS / "test_fuzz_decode.py", "league": TESTS / "test_fuzz_league.py"}


def load(path: pathlib.Path, examples: int) -> types.ModuleType:
    """The test module, its properties set to `examples` each (the modules read the variable on import)."""
    os.environ["SEEDLEAGUE_FUZZ_EXAMPLES"] = str(examples)
    spec = importlib.util.spec_from_file_location(f"fuzz_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def properties(module: types.ModuleType) -> list[tuple[str, object]]:
    """The module's hypothesis tests (`test_*` functions built by @given), in file order."""
    return [(name, fn) for name, fn in vars(module).items()
            if name.startswith("test_") and hasattr(fn, "hypothesis")]


def run(test) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        test()
        verdict = "PASS"
    except Exception as error:  # the falsifying example is printed by hypothesis above
        verdict = f"FAIL: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    return time.perf_counter() - start, verdict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10_000, help="examples per property (default 10000)")
    parser.add_argument("--only", choices=sorted(TARGETS), help="one group of properties")
    args = parser.parse_args(argv)
    rows, failed = [], 0
    for group, path in TARGETS.items():
        if args.only and group != args.only:
            continue
        for name, test in properties(load(path, args.examples)):
            seconds, verdict = run(test)
            failed += verdict != "PASS"
            rows.append((group, name, seconds, verdict))
            print(f"{group:7s} {name:58s} {args.examples:>8d} {seconds:9.1f}s  {verdict}", flush=True)
    print("\n| group | property | examples | seconds | result |\n|---|---|---:|---:|---|")
    for group, name, seconds, verdict in rows:
        print(f"| {group} | {name} | {args.examples} | {seconds:.1f} | {verdict} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The progress file, <run_dir>/progress.jsonl: ticks as written, and what a reader makes of a file whose writer
was killed mid-line or is still writing. (A real run writing it: tests/test_e2e.py.)"""

import json

import numpy as np

from seedleague import progress

REPORT = dict(env_steps=1200, episodes=40, learner_steps=7, env_steps_per_s=600.0, learner_steps_per_s=3.5,
              mean_return=float("nan"), wall_s=2.0, replay_size=np.int64(12), total_loss=np.float32(0.25))


def test_a_tick_holds_the_report_the_learner_step_and_the_resumed_step_as_plain_json(tmp_path):
    with progress.ProgressFile(str(tmp_path), resumed_from=40) as ticks:
        written = ticks.append(REPORT, learner_step=47)
    line = (tmp_path / "progress.jsonl").read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record == written
    assert list(record)[:8] == ["time", "wall_s", "env_steps", "episodes", "learner_step", "learner_steps",
                                "resumed_from", "mean_return"]
    assert record["learner_step"] == 47 and record["learner_steps"] == 7 and record["resumed_from"] == 40
    assert record["mean_return"] is None  # NaN (no episode yet) is null, not the NaN token JSON lacks
    assert record["replay_size"] == 12 and record["total_loss"] == 0.25  # numpy scalars as numbers
    assert record["env_steps_per_s"] == 600.0 and record["time"] > 0


def test_a_reader_leaves_out_a_last_line_still_being_written(tmp_path):
    with progress.ProgressFile(str(tmp_path)) as ticks:
        ticks.append(REPORT, learner_step=7)
        ticks.append(dict(REPORT, env_steps=2400), learner_step=9)
    path = tmp_path / "progress.jsonl"
    whole = path.read_text()
    with open(path, "a") as f:
        f.write(whole.splitlines()[0])  # a third tick, all but its newline: it parses, but is not whole yet
    ticks = progress.read(str(tmp_path))
    assert [t["env_steps"] for t in ticks] == [1200, 2400] and ticks[0]["resumed_from"] is None
    with open(path, "a") as f:
        f.write("\n" + whole.splitlines()[1][:25])  # ... now whole, and a fourth cut off mid-line
    assert [t["env_steps"] for t in progress.read(str(tmp_path))] == [1200, 2400, 1200]
    assert progress.read(str(path)) == progress.read(str(tmp_path))  # the file's path works as well as its run directory
    assert progress.read(str(tmp_path / "nothing-yet")) == []


def test_a_resumed_writer_ends_a_killed_writers_torn_line_and_appends(tmp_path):
    with progress.ProgressFile(str(tmp_path)) as ticks:
        ticks.append(REPORT, learner_step=7)
    with open(tmp_path / "progress.jsonl", "a") as f:
        f.write('{"time": 17')  # the first writer was SIGKILLed inside its second tick
    with progress.ProgressFile(str(tmp_path), resumed_from=7) as ticks:
        ticks.append(dict(REPORT, env_steps=3000, learner_steps=2), learner_step=9)
    read = progress.read(str(tmp_path))
    assert [(t["env_steps"], t["learner_step"], t["resumed_from"]) for t in read] == [(1200, 7, None), (3000, 9, 7)]
    assert len((tmp_path / "progress.jsonl").read_text().splitlines()) == 3  # the torn line stays, on its own

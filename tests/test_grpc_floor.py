"""benchmarks.grpc_floor: a real echo server and client processes; one row per answer path and client."""

import pytest

from benchmarks import grpc_floor


def test_prints_one_row_per_answer_path_and_client(capsys):
    assert grpc_floor.main(["--round-trips", "20", "--warmup", "2", "--repeats", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| on") or line.startswith("| via")]
    assert [row.split("|")[1:3] for row in rows] == [
        [" on the event loop ", " sync "], [" on the event loop ", " aio "],
        [" via a second thread ", " sync "], [" via a second thread ", " aio "]]
    assert all(float(row.split("|")[3].replace(",", "")) > 0 for row in rows)


@pytest.mark.parametrize("argv, problem", [(["--clients", "grpc"], "--clients takes sync and/or aio"),
                                           (["--round-trips", "0"], "must be >= 1")])
def test_bad_arguments_are_refused_by_name(argv, problem, capsys):
    with pytest.raises(SystemExit):
        grpc_floor.main(argv)
    assert problem in capsys.readouterr().err

"""benchmarks/host_ceiling.py's --worker-cpus takes taskset-style lists, as a GPU box with many cores needs."""

import pytest

from benchmarks.host_ceiling import cpu_list, main


def test_cpu_lists_read_like_tasksets():
    assert cpu_list("1") == {1}
    assert cpu_list("1-3") == {1, 2, 3}
    assert cpu_list("0,2-4,7") == {0, 2, 3, 4, 7}
    for bad in ("", "a", "3-1", "1-", "1,,2"):
        with pytest.raises(ValueError, match="is not a CPU number or a range like 1-15"):
            cpu_list(bad)


def test_a_bad_worker_cpu_list_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit):
        main(["--worker-cpus", "1-x"])
    assert "--worker-cpus '1-x': '1-x' is not a CPU number or a range like 1-15" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--worker-cpus", "100000"])
    assert "names CPUs this machine does not have: [100000]" in capsys.readouterr().err

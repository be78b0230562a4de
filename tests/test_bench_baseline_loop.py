"""scripts/bench_baseline_loop.py: each pair does the same work, a pair that does not is caught and left untimed,
and only a bad argument ends with a non-zero status. No timing is asserted (convention 8)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_baseline_loop.py"
SMALL = ["--backbone", "mlp", "--samples", "12", "--tau", "2", "--repeats", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def bench():
    """The script as a module (its import sets OMP_WAIT_POLICY for torch's first load: put back as it was)."""
    policy = os.environ.get("OMP_WAIT_POLICY")
    spec = importlib.util.spec_from_file_location("bench_baseline_loop", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if policy is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = policy
    return module


@pytest.fixture(autouse=True)
def torch_threads():
    """The script sets torch's threads: each test leaves them as it found them."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def rows(out: str, names) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in names}


def test_every_pair_computes_the_same_weights_and_is_timed(bench, capsys):
    bench.main(SMALL)

    got = rows(capsys.readouterr().out, bench.ALGOS)
    assert set(got) == set(bench.ALGOS)
    for name, line in got.items():
        assert "DIFFERENT" not in line, line
        assert line.split()[3].endswith("x"), line  # a ratio was measured


@pytest.mark.parametrize("name, plain, wrong", [
    ("fedbabu", "plain_fedbabu", lambda orig: lambda *a: orig(*a[:-1], 0.0)),  # momentum left out
    ("fedprox", "plain_fedavg", lambda orig: lambda m, w, x, y, tau, mu=0.0: orig(m, w, x, y, tau)),  # no mu term
    ("ditto", "plain_ditto", lambda orig: lambda *a: orig(*a[:-1], 0.0)),  # no lambda term
    ("fedrep", "plain_alternating", lambda orig: lambda *a: orig(*a[:-1], a[-1] + 1)),  # one body step too many
])
def test_a_pair_doing_other_work_is_reported_and_not_timed(bench, capsys, monkeypatch, name, plain, wrong):
    monkeypatch.setattr(bench, plain, wrong(getattr(bench, plain)))

    bench.main([*SMALL, "--tau", "5", "--algos", name])

    line = rows(capsys.readouterr().out, [name])[name]
    assert "DIFFERENT" in line and "not timed" in line
    assert line.split()[1:4] == ["-", "-", "-"]


@pytest.mark.parametrize("bad", [["--algos", "fedavg,pflego"], ["--algos", ","], ["--tau", "0"],
                                 ["--backbone", "no-such-net"], ["--device", "tpu"]])
def test_a_bad_argument_is_one_line_and_exit_status_2(bench, capsys, bad):
    with pytest.raises(SystemExit) as stop:
        bench.main([*SMALL, *bad])

    assert stop.value.code == 2
    assert "error:" in capsys.readouterr().err

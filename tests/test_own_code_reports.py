"""Reports of your own code (``edgeprof.monitor``) read back as such: ``edgeprof trace`` picks any window kind, by
name and round, and its advice for an untraced report is the monitor's; ``edgeprof summary`` speaks of windows and
eval windows, names the data and the run's labels and the windows that raised; the dashboard shows all of them.

One real monitor run (the CPU estimate as its meter, a real power trace at 200 Hz) is read by the real commands.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgeprof.cli import app


def _busy(a: np.ndarray, reps: int) -> np.ndarray:
    for _ in range(reps):
        a = np.tanh(a @ a / a.shape[0])
    return a


def _own_code_run(out: Path, trace_hz: float) -> str:
    """A monitor run as a training loop is measured: a ``load`` window, three ``epoch`` windows (rounds 1-3, phase
    ``forward``) of which the second does twice the work, an eval window after each epoch that labels its accuracy,
    and a ``checkpoint`` window that raises; the report's path."""
    import edgeprof

    a = np.random.default_rng(2).random((64, 64))
    labels = {"model": "mlp", "dataset": "digits", "lr": 0.1}
    with edgeprof.monitor(out, run_id="own", trace_hz=trace_hz, cpu_watts=2.0, labels=labels) as mon:
        with mon.window("load"):
            a = _busy(a, 10)
        for epoch in (1, 2, 3):
            with mon.window("epoch", round=epoch):
                with mon.phase("forward"):
                    a = _busy(a, 40 * (2 if epoch == 2 else 1))
            with mon.window("evaluate", kind="eval", round=epoch, test_accuracy=0.5 + 0.1 * epoch):
                a = _busy(a, 10)
        with pytest.raises(OSError):
            with mon.window("checkpoint"):
                raise OSError("disk full")
    return str(out / "own.csv")


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> str:
    return _own_code_run(tmp_path_factory.mktemp("traced"), trace_hz=200)


def _run(*args) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(app, [*map(str, args)], terminal_width=200)
    return result.exit_code, [ln for ln in result.stderr.splitlines() if ln.strip()], result.stdout


# --- edgeprof trace ----------------------------------------------------------------------------------------
def _trace(*args) -> tuple[int, list[str], str]:
    return _run("trace", *args)


def test_trace_picks_a_window_of_your_own_code_by_name_kind_and_round(traced):
    report = traced

    _, _, default = _trace(report)
    _, _, second = _trace(report, "--window", "epoch", "--round", "2")
    _, _, load = _trace(report, "--window", "load")
    _, _, evals = _trace(report, "--kind", "eval", "--round", "3")
    code, errors, _ = _trace(report, "--window", "step")

    # the name traced most often (epoch: 3, and evaluate is of kind eval), its median-energy window: epoch 1 or 3,
    # never the doubled epoch 2 nor the load
    assert "the median-energy own-code window named 'epoch' of the 3 traced; other names traced: checkpoint, load" \
        in default
    assert "window: window epoch, round 1" in default or "window: window epoch, round 3" in default
    assert "window: window epoch, round 2, run own: the only traced own-code window named 'epoch' in round 2" \
        in second and "forward" in second
    assert "window: window load, run own: the only traced own-code window named 'load'" in load
    assert "window: eval window evaluate, round 3, run own: the only traced eval window in round 3" in evals
    assert code == 2 and errors == ["edgeprof: error: no traced window named 'step' in this report; names traced: "
                                    "checkpoint, epoch, evaluate, load"]


def test_an_untraced_report_of_your_own_code_says_how_to_trace_it(tmp_path):
    report = _own_code_run(tmp_path, trace_hz=0)

    code, errors, out = _trace(report)

    assert code == 7 and out == "" and len(errors) == 1
    assert "was run without a power trace" in errors[0] and "edgeprof.monitor(..., trace_hz=50)" in errors[0]
    assert "--trace" not in errors[0]



# --- edgeprof summary --------------------------------------------------------------------------------------
def test_summary_speaks_of_windows_and_eval_windows_and_names_the_data_labels_and_errors(traced):
    code, errors, out = _run("summary", traced)
    table = [ln for ln in out.splitlines() if ln.count("│") > 3]
    parts = [ln.split("│")[1].strip() for ln in table]
    heads = next(ln for ln in out.splitlines() if ln.count("┃") > 3)

    assert code == 0 and errors == []
    assert "median per window" in out and "client round" not in out and "evaluate message" not in out
    assert parts == ["window load", "window epoch", "forward", "window checkpoint", "eval window evaluate"]
    assert "algo" not in heads  # no algorithm in a report of one's own code: no empty column for it
    assert "data: digits" in out and "labels: model=mlp, dataset=digits, lr=0.1" in out
    assert "raised: 1 window ended by an exception (checkpoint: OSError); their rows are kept, labelled error" in out

"""Energy to a target accuracy on constructed report rows, and `edgeprof train` end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.report.writer import Report, read_report
from edgeprof.rounds.train import energy_to_target

COLUMNS = ("algo", "round", "kind", "energy_j", "energy_method", "carbon_g", "train_loss", "test_accuracy")


def _rows(algo: str, accuracies, client_joules, *, carbon_per_j=0.001):
    """Per round: one eval row with its accuracy and one client row per joule figure, plus a server row."""
    rows = []
    for t, (acc, joules) in enumerate(zip(accuracies, client_joules), start=1):
        for j in joules:
            rows.append(dict(algo=algo, round=str(t), kind="client", energy_j=str(j), energy_method="estimate",
                             carbon_g=str(j * carbon_per_j), train_loss="", test_accuracy=""))
        rows.append(dict(algo=algo, round=str(t), kind="server", energy_j="100", energy_method="estimate",
                         carbon_g="0.1", train_loss="", test_accuracy=""))
        rows.append(dict(algo=algo, round=str(t), kind="eval", energy_j="", energy_method="", carbon_g="",
                         train_loss=str(1.0 / t), test_accuracy=str(acc)))
    return rows


def _report(rows) -> Report:
    return Report(Path("constructed.csv"), COLUMNS, rows)


def test_energy_to_target_sums_client_rows_up_to_the_first_round_reaching_it():
    rows = _rows("fast", [0.5, 0.92, 0.88, 0.95], [[1.0, 2.0], [3.0, 4.5], [10.0], [20.0]])
    rows += _rows("slow", [0.2, 0.4, 0.6, 0.8], [[1.0], [1.0], [1.0], [1.0]])

    fast, slow = energy_to_target(_report(rows), 0.9)

    assert fast.algo == "fast" and fast.reached_round == 2
    assert fast.energy_j == pytest.approx(10.5)  # rounds 1-2 client rows only, server rows left out
    assert fast.carbon_g == pytest.approx(0.0105)
    assert fast.final_accuracy == pytest.approx(0.95) and fast.final_loss == pytest.approx(0.25)
    assert fast.median_client_round_j == pytest.approx(3.75) and fast.energy_method == "estimate"
    assert slow.reached_round is None and slow.energy_j is None and slow.carbon_g is None
    assert slow.rounds == 4


def test_energy_to_target_is_unknown_when_a_client_row_was_not_measured():
    rows = _rows("a", [0.95], [[1.0, 2.0]])
    rows[1]["energy_j"] = ""

    (result,) = energy_to_target(_report(rows), 0.9)

    assert result.reached_round == 1 and result.energy_j is None
    assert result.carbon_g == pytest.approx(0.003)


def test_train_runs_every_algorithm_and_prints_the_energy_to_target(tmp_path):
    args = ["train", "--algos", "pflego,fedper", "--rounds", "2", "--clients", "4", "--tau", "2",
            "--participation", "0.5", "--dataset", "synthetic", "--synthetic-samples", "160", "--synthetic-classes", "4",
            "--out", str(tmp_path), "--run-name", "t", "--target-accuracy", "0.01", "--threads", "1",
            "--no-progress"]

    result = CliRunner().invoke(app, args)

    assert result.exit_code == 0, result.output
    for algo in ("pflego", "fedper"):
        report = read_report(tmp_path / f"t-{algo}.csv")
        assert len(report.where(kind="eval")) == 2 and len(report.where(kind="client")) == 4
        assert report.sidecar["config"]["evaluate"] is True
        assert algo in result.stdout
    assert "training outcome" in result.stdout and f"report: {tmp_path}" in result.stdout.replace("\n", "")
    assert "not reached" not in result.stdout


def test_train_rejects_an_unknown_algorithm_before_running(tmp_path):
    result = CliRunner().invoke(app, ["train", "--algos", "pflego,nope", "--out", str(tmp_path), "--no-progress"])

    assert result.exit_code == 2
    assert "unknown algorithm 'nope'" in result.output and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())

"""``--hold-seconds``: a client window repeats the client's round until it has lasted that long, and its row is the
mean of one round, so that rounds shorter than a meter's update period (a GPU round against NVML's 100 ms
counter) still get joules the meter resolves."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.config import EnergySettings, RunConfig
from edgeprof.errors import ConfigError
from edgeprof.report import read_report
from edgeprof.report.trace_file import read_trace
from edgeprof.rounds.federation import Federation
from edgeprof.rounds.sweep import SweepConfig, run_sweep

SMALL = dict(dataset="synthetic", synthetic_samples=240, synthetic_classes=4, backbone="mlp", clients=1,
             participation=1.0, progress=False)
HOLD_S = 0.08


def test_a_held_sweep_writes_one_rounds_mean_for_each_window_that_lasted_the_hold(tmp_path, monkeypatch):
    """Every client round the sweep runs is counted: the rows' held_rounds add up to them (after the unrecorded
    warm-up), each window lasted at least the hold (held_rounds x one round's mean >= hold), the rounds before
    its last did not (the loop stops at the first round past it), and the trace of a held window sums to the
    row's joules times its held rounds."""
    calls = []
    original = Federation.client_round

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Federation, "client_round", counted)
    base = RunConfig(**SMALL, out=tmp_path, run_name="held", hold_seconds=HOLD_S,
                     energy=EnergySettings(trace_hz=200.0, meters={"cpu_watts": 5.0}))
    cfg = SweepConfig(base=base, algos=("pflego", "fedavg"), taus=(1, 4), repeats=2, samples_per_client=30)

    result = run_sweep(cfg)

    report = read_report(result.csv_path)
    clients = report.where(kind="client")
    held = [int(r["held_rounds"]) for r in clients]
    warm_up = len(cfg.variants())  # one unrecorded round per variant, one client
    assert len(clients) == 8 and sum(held) == len(calls) - warm_up and min(held) >= 2
    for r, k in zip(clients, held):
        assert k * float(r["wall_s"]) >= HOLD_S * (1 - 1e-6)  # the window (k rounds and its edges) lasted the hold
    assert all(r["held_rounds"] == "" for r in report.where(kind="server")), "the server step is not held"
    sidecar = json.loads(result.sidecar_path.read_text())
    assert sidecar["config"]["hold_seconds"] == HOLD_S
    rows = read_trace(tmp_path / sidecar["trace"]["file"])
    everything = report.where()
    for index, row in enumerate(everything):
        if row["kind"] != "client":
            continue
        traced = sum(t["w"] * t["dt_s"] for t in rows if t["row"] == index)
        # the trace is the whole window's: k rounds; the row's 6 printed digits bound the comparison
        assert traced == pytest.approx(float(row["energy_j"]) * int(row["held_rounds"]), rel=2e-5)


def test_the_trace_view_of_a_held_window_says_it_holds_several_rounds(tmp_path):
    cfg = RunConfig(**{**SMALL, "clients": 2}, algo="pflego", tau=2, rounds=1, out=tmp_path, run_name="t",
                    hold_seconds=0.05, energy=EnergySettings(trace_hz=200.0))
    from edgeprof.rounds.simulate import run

    from edgeprof.report.trace_view import view

    run(cfg)
    done = CliRunner().invoke(app, ["trace", str(tmp_path / "t.csv")])
    shown = view(tmp_path / "t.csv")  # the window the command shows: the median-energy client window

    assert done.exit_code == 0, done.output
    row = read_report(tmp_path / "t.csv").rows[shown.window.row]
    assert row["kind"] == "client" and shown.held_rounds == int(row["held_rounds"]) >= 1
    assert (f"held: the window repeated the client's round {row['held_rounds']} times (--hold-seconds)"
            in " ".join(done.stdout.split()))


def test_measure_holds_its_client_windows_from_the_command_line(tmp_path):
    result = CliRunner().invoke(app, ["measure", "--dataset", "synthetic", "--synthetic-samples", "240",
                                      "--backbone", "mlp", "--clients", "4", "--rounds", "2", "--tau", "2",
                                      "--hold-seconds", "0.05", "--no-progress", "--run-name", "m", "--out",
                                      str(tmp_path)])

    assert result.exit_code == 0, result.output
    clients = read_report(tmp_path / "m.csv").where(kind="client")
    assert clients and all(int(r["held_rounds"]) >= 1 for r in clients)
    assert "held: each client window repeated its round" in " ".join(result.stdout.split())


@pytest.mark.parametrize("args,message", [
    (["--hold-seconds", "0.1", "--evaluate"], "does not go with --evaluate"),
    (["--hold-seconds", "-1"], "hold seconds must be in 0..600"),
    (["--hold-seconds", "601"], "hold seconds must be in 0..600")])
def test_a_hold_that_cannot_be_is_one_line_before_anything_runs(tmp_path, args, message):
    result = CliRunner().invoke(app, ["measure", "--no-progress", "--out", str(tmp_path / "out"), *args])

    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_the_config_refuses_a_hold_that_is_no_number():
    with pytest.raises(ConfigError, match="hold seconds must be in 0..600"):
        RunConfig(hold_seconds="1")

"""Flower's simulation engine (Ray) runs the same apps: theta matches the in-process loop and the sidecar
says that per-client energy is attribution; and the app folder the CLI writes is a valid Flower app."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("flwr")


@pytest.mark.slow
@pytest.mark.parametrize("algo, seed, beta", [
    ("pflego", 5, None),
    # a personal-head baseline: its heads live in the Contexts of Flower's simulation engine; seed 4 samples
    # [0, 1] then [0, 2], so client 0 reuses its head and client 2 starts from the in-process first head;
    # a large step so that a head lost between rounds shows in the backbone beyond the tolerance
    ("fedper", 4, 0.5),
])
def test_simulation_matches_in_process_and_notes_attribution(tmp_path, monkeypatch, algo, seed, beta):
    # Prepare
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    from edgeprof.config import RunConfig
    from edgeprof.flower.config import FlowerSettings
    from edgeprof.flower.simulation import simulate
    from edgeprof.algorithms.participants import participant_rng, sample_participants
    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = RunConfig(algo=algo, tau=2, rounds=2, clients=3, participation=0.67, dataset="synthetic",
                    backbone="mlp", synthetic_samples=150, synthetic_classes=4, seed=seed, threads=1, out=tmp_path,
                    run_name="sim", beta=beta, progress=False).resolved()
    # Execute
    simulate(cfg, FlowerSettings(round_timeout_s=120), client_cpus=1, total_cpus=2)
    # Assert
    sidecar = json.loads((tmp_path / "sim.json").read_text())
    assert sidecar["status"] == "complete" and sidecar["flower"]["simulation"]
    assert "attribution, not a measurement" in sidecar["flower"]["energy_note"]
    algorithm = build_federation(cfg, load_clients(cfg))
    rng = participant_rng(cfg)
    for _ in range(cfg.rounds):
        algorithm.server_step([algorithm.client_round(c) for c in sample_participants(rng, 3, 0.67, "fixed")])
    got = np.load(tmp_path / "sim.theta.npz")
    shared = algorithm.global_arrays  # PFLEGO's theta; FedPer shares the backbone only
    assert len(got.files) == len(shared)
    for i, want in enumerate(shared):
        np.testing.assert_allclose(got[f"arr_{i}"], want, atol=1e-5, rtol=0)


def test_flower_app_dir_writes_a_valid_flower_app(tmp_path):
    # Prepare
    from flwr.common.config import validate_config
    from typer.testing import CliRunner

    from edgeprof.cli import app
    from edgeprof.flower.config import from_run_config

    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    # Execute
    result = CliRunner().invoke(app, ["flower-app-dir", str(tmp_path / "app"), "--clients", "4", "--tau", "7",
                                      "--total-samples", "900", "--out", str(tmp_path / "reports")])
    # Assert: Flower accepts the pyproject and edgeprof reads its run config back
    assert result.exit_code == 0, result.output
    config = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    ok, errors, _ = validate_config(config, check_module=True, project_dir=tmp_path / "app")
    assert ok, errors
    cfg, settings = from_run_config(config["tool"]["flwr"]["app"]["config"])
    assert (cfg.clients, cfg.tau, settings.total_samples, cfg.out) == (4, 7, 900, tmp_path / "reports")
    assert "num-partitions=4" in result.output


@pytest.mark.parametrize("device, asked, reserved", [
    ("cuda", None, 1.0), ("cuda:0", None, 1.0), ("cuda", 0.25, 0.25), ("cuda", 2, 2.0),
    ("cpu", None, 0.0), ("cpu", 0, 0.0),
])
def test_each_simulated_client_reserves_the_gpus_its_rounds_need(device, asked, reserved):
    from edgeprof.flower.simulation import client_gpus_for

    assert client_gpus_for(device, asked) == reserved


@pytest.mark.parametrize("argv, expected", [
    (["--device", "cuda", "--client-gpus", "0"], "Ray hides every GPU from a client that reserves none"),
    (["--device", "cuda:1"], "only the GPU it reserves, as cuda:0"),
    (["--device", "cpu", "--client-gpus", "1"], "reserves GPUs, but the rounds run on cpu"),
    (["--device", "cuda", "--client-gpus", "-1"], "--client-gpus must be a number >= 0"),
    (["--device", "cuda", "--client-gpus", "inf"], "--client-gpus must be a number >= 0"),
    (["--client-gpus", "nan"], "--client-gpus must be a number >= 0"),
    (["--client-cpus", "0"], "--client-cpus must be a number above 0"),
    (["--client-cpus", "inf"], "--client-cpus must be a number above 0"),
    (["--round-timeout", "nan"], "round-timeout must be a number of seconds above 0"),
])
def test_what_ray_would_break_is_refused_before_it_starts(tmp_path, monkeypatch, argv, expected):
    """Checked in the driver, where no torch CUDA is needed: one line, exit 2, no Ray, nothing written."""
    from typer.testing import CliRunner

    from edgeprof.cli import app
    import flwr.simulation

    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **kw: pytest.fail("Ray was started"))

    result = CliRunner().invoke(app, ["flower-simulate", *argv, "--out", str(tmp_path / "out")])

    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_auto_on_a_gpu_machine_is_decided_before_ray_hides_the_gpu(tmp_path, monkeypatch):
    """With a GPU visible here (torch's CUDA faked available), the clients are told ``cuda``, not ``auto``
    (which they would resolve with only what Ray shows them), and each reserves one GPU."""
    import flwr.simulation

    from edgeprof.config import RunConfig
    from edgeprof.flower import simulation
    from edgeprof.nn import compute

    monkeypatch.setattr(compute.kind_of("cuda"), "unavailable", lambda device: None)
    told, ray = [], []
    real = simulation.to_run_config
    monkeypatch.setattr(simulation, "to_run_config", lambda cfg, s: told.append(cfg.device) or real(cfg, s))
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **kw: ray.append(kw["backend_config"]))

    simulation.simulate(RunConfig(device="auto", out=tmp_path, progress=False).resolved())

    assert told == ["cuda"]
    assert ray == [{"client_resources": {"num_cpus": 1.0, "num_gpus": 1.0}}]


@pytest.mark.slow
@pytest.mark.parametrize("signum, to_group", [
    (__import__("signal").SIGTERM, False),  # timeout, docker stop, systemd: the process alone
    (__import__("signal").SIGINT, True),  # Ctrl-C in a terminal: the whole foreground group, Ray's processes too
])
def test_a_stopped_simulation_keeps_its_finished_rounds_and_says_so(tmp_path, signum, to_group):
    """Flower runs the ServerApp in a thread: the stop reaches it there, its report ends ``interrupted`` with
    every finished round, and the process exits at once with one line and 128 + the signal (before: the
    sidecar stayed ``running``; SIGTERM crashed Ray, exit 134; Ctrl-C left the process waiting for the round
    timeout)."""
    import os
    import subprocess
    import sys
    import time

    from edgeprof.report.writer import read_report

    out, err_path = tmp_path / "out", tmp_path / "stderr.txt"
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home"), "RAY_DEDUP_LOGS": "0"}
    with open(err_path, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "edgeprof", "flower-simulate", "--clients", "2", "--rounds",
                                 "1000", "--participation", "1", "--tau", "2", "--backbone", "mlp", "--dataset",
                                 "synthetic", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=stderr,
                                env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            reports = list(out.glob("*.csv"))
            if reports and len(reports[0].read_text().splitlines()) > 6:  # two rounds' rows, at least
                break
            time.sleep(0.2)
        assert proc.poll() is None, err_path.read_text()[-2000:]
        (os.killpg(proc.pid, signum) if to_group else proc.send_signal(signum))
        code = proc.wait(timeout=120)  # a hang, not a speed: the ServerApp sees the stop within 0.1 s
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    lines = [ln for ln in err_path.read_text().splitlines() if ln.startswith("edgeprof:")]
    [csv_path] = out.glob("*.csv")
    sidecar = json.loads(csv_path.with_suffix(".json").read_text())

    assert code == 128 + signum, err_path.read_text()[-3000:]
    assert "run_simulation" not in err_path.read_text()  # Flower's notice on edgeprof's own call is not shown
    name = __import__("signal").Signals(signum).name
    assert lines == [f"edgeprof: interrupted ({name}); the report keeps every round that finished ({csv_path})"]
    assert sidecar["status"] == "interrupted" and sidecar["reason"] == f"interrupted ({name})"
    assert 2 <= sidecar["rounds_completed"] < 1000
    assert len(read_report(csv_path).rows) == sidecar["rows"] == 3 * sidecar["rounds_completed"]


def test_a_stop_after_the_server_finished_names_the_whole_report(tmp_path, monkeypatch):
    """A stop that comes once the ServerApp has closed its report complete: the main thread's stop names that
    report as whole (``<out>/<run id>.csv``), so the CLI's line says the run completed."""
    import signal

    from edgeprof.flower import server_app

    monkeypatch.setattr(server_app, "run_server", lambda grid, run_config, defaults: "the-run")
    stop = server_app.StopRequest(tmp_path)
    app = server_app.make_server_app({}, stop)

    grid = type("Grid", (), {"pull_messages": lambda self, ids: [], "get_node_ids": lambda self: []})()
    app._main(grid=grid, context=type("Context", (), {"run_config": {}})())
    stop.ask(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt) as raised:
        stop.raise_asked()
    assert raised.value.report == tmp_path / "the-run.csv" and raised.value.report_complete

"""Flower's simulation runtime (``flwr run`` against a SuperLink that edgeprof starts in simulation mode) runs the app
a deployment runs: theta matches the in-process loop and the sidecar says that per-client energy is attribution; a
stop goes through ``flwr stop`` and keeps the finished rounds as interrupted; a failed run ends the command with one
line; nothing of the runtime is left behind (process, port, temporary folder); and the app folder the CLI writes is a
valid Flower app."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

#: the environment variable these tests mark a command with: every process it starts, however deep, inherits it
TEST_MARK = "EDGEPROF_TEST_SIMULATION"


class RuntimeWatch:
    """What a command leaves behind: every process that carries this watch's mark in its environment (the
    command's runtime: the SuperLink, Flower's and Ray's processes), seen while the command runs, with the ports
    they listen on; and the temporary folder the command is given (``TMPDIR``, short: Ray's sockets live under it).
    """

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.tmp = Path(tempfile.mkdtemp(prefix="ep", dir="/tmp"))
        self.env = {TEST_MARK: self.token, "TMPDIR": str(self.tmp)}
        # every command line a marked process showed: a child caught between its fork and its exec shows an empty
        # line or its parent's (the command's, for the SuperLink), and its own at a later look
        self.seen: set[str] = set()
        self.ports: set[int] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def marked(self) -> list:
        import psutil

        found = []
        for process in psutil.process_iter():
            try:
                if process.pid != os.getpid() and process.environ().get(TEST_MARK) == self.token and \
                        process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def _watch(self) -> None:
        import psutil

        while not self._done.wait(0.5):
            for process in self.marked():
                try:
                    self.seen.add(" ".join(process.cmdline()))
                    self.ports |= {c.laddr.port for c in process.net_connections("inet")
                                   if c.status == psutil.CONN_LISTEN}
                except psutil.Error:
                    continue

    def assert_nothing_left(self) -> None:
        """The runtime ran (a SuperLink and a simulation process were seen) and nothing of it is left: no marked
        process, every port it listened on free again, the temporary folder empty."""
        self._done.set()
        self._thread.join(10)
        commands = sorted(self.seen)
        assert any("flower-superlink" in c for c in commands) and any("flwr-simulation" in c for c in commands), \
            "\n".join(commands)
        left = [(p.pid, " ".join(p.cmdline())) for p in self.marked()]
        assert not left, left
        assert self.ports, "no port seen: the watch missed the SuperLink"
        for port in sorted(self.ports):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))  # raises while anything still listens there
                s.listen()
        assert not list(self.tmp.iterdir()), list(self.tmp.iterdir())
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture
def watch(monkeypatch):
    """A :class:`RuntimeWatch` whose mark and TMPDIR this test process (and so what it starts) carries."""
    watched = RuntimeWatch()
    for key, value in watched.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    yield watched
    shutil.rmtree(watched.tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("algo, seed, beta", [
    ("pflego", 5, None),
    # a personal-head baseline: its heads live in the Contexts of Flower's simulation runtime; seed 4 samples
    # [0, 1] then [0, 2], so client 0 reuses its head and client 2 starts from the in-process first head;
    # a large step so that a head lost between rounds shows in the backbone beyond the tolerance
    ("fedper", 4, 0.5),
])
def test_simulation_matches_in_process_and_notes_attribution(tmp_path, monkeypatch, watch, algo, seed, beta):
    """The app of a deployment, run on Flower's simulation runtime; the runtime is gone when ``simulate`` returns
    (no process, port or temporary folder of it left) and the user's ``FLWR_HOME`` was never touched."""
    # Prepare
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    from edgeprof.config import RunConfig
    from edgeprof.flower.config import FlowerSettings
    from edgeprof.flower.simulation import simulate
    from edgeprof.algorithms.participants import participant_rng, sample_participants
    from edgeprof.rounds.simulate import build_federation, load_clients

    from edgeprof.config import EnergySettings

    traced = algo == "pflego"  # --trace on the new runtime: each client window's trace written beside the report
    cfg = RunConfig(algo=algo, tau=2, rounds=2, clients=3, participation=0.67, dataset="synthetic",
                    backbone="mlp", synthetic_samples=150, synthetic_classes=4, seed=seed, threads=1, out=tmp_path,
                    run_name="sim", beta=beta, progress=False,
                    energy=EnergySettings(trace_hz=200 if traced else 0.0)).resolved()
    # Execute
    csv_path = simulate(cfg, FlowerSettings(round_timeout_s=120), client_cpus=1, total_cpus=2)
    # Assert
    watch.assert_nothing_left()
    assert not (tmp_path / "flwr-home").exists()
    assert csv_path == tmp_path / "sim.csv"
    logs = tmp_path / "sim.flower"
    assert "Starting Flower SuperLink" in (logs / "superlink.log").read_text()
    assert "edgeprof report: " in (logs / "run.log").read_text()  # the run's log stream, the ServerApp's lines
    sidecar = json.loads((tmp_path / "sim.json").read_text())
    assert sidecar["status"] == "complete" and sidecar["flower"]["simulation"]
    assert "attribution, not a measurement" in sidecar["flower"]["energy_note"]
    if traced:
        from edgeprof.report.trace_file import read_trace
        from edgeprof.report.writer import read_report

        report = read_report(csv_path).rows
        trace = read_trace(tmp_path / sidecar["trace"]["file"])
        clients = [i for i, r in enumerate(report) if r["kind"] == "client"]
        assert clients and {r["row"] for r in trace if r["kind"] != "server"} >= set(clients)
        for index in clients:  # each client window's trace integrates to its row's joules (9 digits against 6)
            total = sum(r["w"] * r["dt_s"] for r in trace if r["row"] == index)
            assert total == pytest.approx(float(report[index]["energy_j"]), rel=5e-6 + 1e-8), index
    else:
        assert "trace" not in sidecar
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
    (["--client-cpus", "0"], "--client-cpus must be a whole number of CPUs >= 1"),
    (["--client-cpus", "inf"], "--client-cpus must be a whole number of CPUs >= 1"),
    (["--client-cpus", "0.5"], "Flower's simulation reserves whole CPUs per client"),
    (["--client-cpus", "1.5"], "Flower's simulation reserves whole CPUs per client"),
    (["--client-cpus", str((os.cpu_count() or 1) + 1)], "CPUs Ray has here, so no client could ever be scheduled"),
    (["--round-timeout", "nan"], "round-timeout must be a number of seconds above 0"),
])
def test_what_the_runtime_would_break_is_refused_before_it_starts(tmp_path, monkeypatch, argv, expected):
    """Checked in the driver, where no torch CUDA is needed: one line, exit 2, no SuperLink, nothing written."""
    from typer.testing import CliRunner

    from edgeprof.cli import app
    from edgeprof.flower.superlink import LocalSuperLink

    monkeypatch.setattr(LocalSuperLink, "start", lambda self: pytest.fail("the SuperLink was started"))

    result = CliRunner().invoke(app, ["flower-simulate", *argv, "--out", str(tmp_path / "out")])

    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "code", "expected"), [
    (["--dataset", "mnist", "--data-dir", "/nonexistent/mnist"], 3, "/nonexistent/mnist"),
    (["--backbone", "custom_backbones:batch_norm_training"], 6, "stays in training mode after .eval()"),
])
def test_bad_data_or_a_refused_backbone_is_one_line_before_the_runtime_starts(tmp_path, monkeypatch, argv, code,
                                                                               expected):
    """What every node's set-up would refuse, once the runtime had started (minutes later, as a failed run, exit 7),
    is refused here first with its own line and exit code."""
    from typer.testing import CliRunner

    from edgeprof.cli import app
    from edgeprof.flower.superlink import LocalSuperLink

    monkeypatch.setattr(LocalSuperLink, "start", lambda self: pytest.fail("the SuperLink was started"))

    result = CliRunner().invoke(app, ["flower-simulate", *argv, "--out", str(tmp_path / "out")])

    assert result.exit_code == code, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_auto_on_a_gpu_machine_is_decided_before_the_runtime_hides_the_gpu(tmp_path, monkeypatch):
    """With a GPU visible here (torch's CUDA faked available), the clients are told ``cuda``, not ``auto``
    (which they would resolve with only what Ray shows them), and each reserves one GPU in the federation config."""
    from edgeprof.config import RunConfig
    from edgeprof.flower import simulation
    from edgeprof.nn import compute

    monkeypatch.setattr(compute.kind_of("cuda"), "unavailable", lambda device: None)
    told, runtime = [], []
    real = simulation.to_run_config
    monkeypatch.setattr(simulation, "to_run_config", lambda cfg, s: told.append(cfg.device) or real(cfg, s))
    monkeypatch.setattr(simulation, "run_federation", lambda run_config, federation, csv_path: runtime.append(
        (run_config, federation, csv_path)))

    simulation.simulate(RunConfig(device="auto", out=tmp_path, run_name="gpu", progress=False).resolved())

    assert told == ["cuda"]
    [(run_config, federation, csv_path)] = runtime
    assert federation == {"num-supernodes": 10, "backend": "ray", "client-resources-num-cpus": 1,
                          "client-resources-num-gpus": 1.0}
    assert run_config["device"] == "cuda" and run_config["simulation"] is True
    assert csv_path == tmp_path / "gpu.csv"


def test_the_federation_config_is_flowers_own():
    """Each key is a field of Flower's SimulationConfig, with a value it takes (whole CPUs, a share of a GPU)."""
    from flwr.proto.federation_config_pb2 import SimulationConfig

    from edgeprof.flower.simulation import federation_config

    config = federation_config(4, 2, 0.25, 8)

    SimulationConfig(**{k.replace("-", "_"): v for k, v in config.items()})  # raises on a wrong key or type
    assert config == {"num-supernodes": 4, "backend": "ray", "client-resources-num-cpus": 2,
                      "client-resources-num-gpus": 0.25, "init-args-num-cpus": 8}


def _stop_a_simulation(tmp_path, signum, to_group, env=None):
    """Start a long ``flower-simulate``, send ``signum`` (to the command, or to its whole process group) once two
    rounds are in its report, and wait for the command to end: (exit code, seconds it took after the signal, its
    ``edgeprof:`` lines, the report, its sidecar, its stderr, the runtime's watch)."""
    import subprocess
    import sys
    import time

    watch = RuntimeWatch()
    out, err_path = tmp_path / "out", tmp_path / "stderr.txt"
    env = {**os.environ, **watch.env, "FLWR_HOME": str(tmp_path / "flwr-home"), "RAY_DEDUP_LOGS": "0", **(env or {})}
    with open(err_path, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "edgeprof", "flower-simulate", "--clients", "2", "--rounds",
                                 "1000", "--participation", "1", "--tau", "2", "--backbone", "mlp", "--dataset",
                                 "synthetic", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=stderr,
                                env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            reports = list(out.glob("*.csv"))
            if reports and len(reports[0].read_text().splitlines()) > 6:  # two rounds' rows, at least
                break
            time.sleep(0.2)
        assert proc.poll() is None, err_path.read_text()[-2000:]
        (os.killpg(proc.pid, signum) if to_group else proc.send_signal(signum))
        stopped = time.monotonic()
        code = proc.wait(timeout=120)  # a hang, not a speed: flwr stop, the ServerApp's close, the runtime's end
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    err = err_path.read_text()
    lines = [ln for ln in err.splitlines() if ln.startswith("edgeprof:")]
    [csv_path] = out.glob("*.csv")
    sidecar = json.loads(csv_path.with_suffix(".json").read_text())
    return code, took, lines, csv_path, sidecar, err, watch


def _runtime_logs(csv_path: Path) -> str:
    """The last lines of the run's log stream and of the SuperLink's log, for a failing assertion."""
    logs = csv_path.with_suffix(".flower")
    return "\n".join(f"--- {name}:\n" + "\n".join((logs / name).read_text(errors="replace").splitlines()[-15:])
                     for name in ("run.log", "superlink.log") if (logs / name).is_file())


@pytest.mark.slow
@pytest.mark.parametrize("signum, to_group", [
    (__import__("signal").SIGTERM, False),  # timeout, docker stop, systemd: the process alone
    (__import__("signal").SIGINT, True),  # Ctrl-C in a terminal: the whole foreground group
    (__import__("signal").SIGHUP, False),  # a closed terminal
])
def test_a_stopped_simulation_keeps_its_finished_rounds_and_leaves_nothing(tmp_path, signum, to_group):
    """The stop is Flower's own, ``flwr stop``: the ServerApp, in a thread of the simulation's process, closes its
    report as interrupted with every finished round (before: the sidecar stayed ``running``), the runtime is ended
    (no process, port or temporary folder left), and the command exits with one line and 128 + the signal."""
    import signal

    from edgeprof.report.writer import read_report

    code, took, lines, csv_path, sidecar, err, watch = _stop_a_simulation(tmp_path, signum, to_group)

    name = signal.Signals(signum).name
    print(f"{name}: exit {code} {took:.1f} s after the signal")
    assert code == 128 + signum, err[-3000:]
    assert lines == [f"edgeprof: interrupted ({name}); the report keeps every round that finished ({csv_path})"]
    # the stop reached the ServerApp as Flower's runtime's exit, as `flwr stop` reaches a deployed one
    assert sidecar["status"] == "interrupted", (took, sidecar.get("reason"), _runtime_logs(csv_path))
    assert sidecar["reason"] == "interrupted (the process was asked to exit: SystemExit 0)"
    assert 2 <= sidecar["rounds_completed"] < 1000
    assert len(read_report(csv_path).rows) == sidecar["rows"] == 3 * sidecar["rounds_completed"]
    assert "Stopping run ID" in (csv_path.with_suffix(".flower") / "run.log").read_text()  # flwr stop's own line
    assert "run_simulation" not in err  # Flower's deprecated Python entry point is not used
    watch.assert_nothing_left()


#: loaded by every Python process of the runtime (PYTHONPATH): in the simulation's process, a second SIGINT lands
#: as Flower's runtime starts its exit, after it has put the default handlers back and before its exit handlers
#: run, as ``flwr stop``'s own SIGINT (sent at the runtime's next heartbeat) did in CI when it landed beside the
#: command's
SECOND_SIGINT = """
import os, sys
if sys.argv and os.path.basename(sys.argv[0]) == "flwr-simulation":
    import signal
    from flwr.supercore.exit import signal_handler

    _flwr_exit = signal_handler.flwr_exit

    def flwr_exit(*args, **kwargs):
        open(os.environ["EDGEPROF_TEST_SECOND_SIGINT"], "w").close()
        signal.raise_signal(signal.SIGINT)  # Python's default handler: a KeyboardInterrupt, here
        return _flwr_exit(*args, **kwargs)

    signal_handler.flwr_exit = flwr_exit
"""

#: how the sidecar of a stopped simulation ends: closed by its ServerApp, or by the command after the simulation's
#: process ended without (:func:`edgeprof.flower.simulation.close_abandoned`)
BY_THE_SERVERAPP = "interrupted (the process was asked to exit: SystemExit 0)"
BY_THE_COMMAND = ("interrupted (SIGINT); Flower's simulation process ended before its ServerApp closed the report, "
                  "which this command then closed with the rows it holds")


@pytest.mark.slow
def test_a_second_stop_signal_in_the_simulation_still_ends_the_report_as_interrupted(tmp_path):
    """Flower's runtime puts the default handlers back at the first stop signal; a second one before its exit
    handlers run ends the simulation's main thread with a KeyboardInterrupt, Flower's exit handlers never run,
    and Ray's shutdown under it may end the process at once (in CI the report then stayed ``running``, 67 s after
    the signal). The report still ends ``interrupted`` with every finished round: closed by the ServerApp (the
    interpreter's thread-exit call, or the main thread seen gone) or, when the process was ended under it, by the
    command."""
    from edgeprof.report.writer import read_report

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SECOND_SIGINT)
    landed = tmp_path / "second-sigint"
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    code, took, lines, csv_path, sidecar, err, watch = _stop_a_simulation(
        tmp_path, __import__("signal").SIGINT, True, {"PYTHONPATH": path, "EDGEPROF_TEST_SECOND_SIGINT": str(landed)})

    print(f"exit {code} {took:.1f} s after the signal; {sidecar.get('reason')}")
    assert landed.exists(), "the second SIGINT was never sent: Flower's exit is no longer where the test puts it"
    assert code == 130, err[-3000:]
    assert lines == [f"edgeprof: interrupted (SIGINT); the report keeps every round that finished ({csv_path})"]
    assert sidecar["status"] == "interrupted", (took, sidecar.get("reason"), _runtime_logs(csv_path))
    assert sidecar["reason"] in (BY_THE_SERVERAPP, BY_THE_COMMAND)
    rows = read_report(csv_path).rows
    assert len(rows) == sidecar["rows"] and sidecar["rounds_completed"] >= 2
    assert sum(row["kind"] == "server" for row in rows) == sidecar["rounds_completed"]
    watch.assert_nothing_left()


def test_a_stopped_runs_report_left_running_is_closed_by_the_command(tmp_path, monkeypatch):
    """The runtime ended under a stop with the ServerApp's report still ``running`` (its process ended before it
    could close it): the command closes it as interrupted, saying so, with the rows and rounds the CSV holds, and
    its one line names the report; a report the ServerApp closed is left as it wrote it."""
    import signal

    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.flower import simulation
    from edgeprof.flower.superlink import LocalSuperLink
    from edgeprof.report.schema import columns_for
    from edgeprof.report.writer import ReportWriter, read_sidecar, write_sidecar
    from edgeprof.signals import Terminated

    csv_path = tmp_path / "run.csv"
    with ReportWriter(csv_path, columns_for(ALGORITHMS["pflego"].phases)) as writer:
        for r in (1, 2, 3):
            writer.write_rows([{"run_id": "run", "round": r, "kind": "client", "client": c} for c in (0, 1)])
            if r < 3:  # the third round's server step never ended
                writer.write({"run_id": "run", "round": r, "kind": "server"})
    running = {"run_id": "run", "status": "running", "config": {"rounds": 1000}}
    write_sidecar(csv_path.with_suffix(".json"), running, reserve=True)

    def stopped(self):  # the SIGTERM lands as the runtime starts; the real runtime's end is not needed here
        raise Terminated(signal.SIGTERM)

    monkeypatch.setattr(LocalSuperLink, "start", stopped)
    monkeypatch.setattr(LocalSuperLink, "close", lambda self: None)
    with pytest.raises(Terminated) as stop:
        simulation.run_federation({}, {}, csv_path)

    data, _ = read_sidecar(csv_path.with_suffix(".json"))
    assert data["status"] == "interrupted" and data["rows"] == 8 and data["rounds_completed"] == 2
    assert data["reason"] == ("interrupted (SIGTERM); Flower's simulation process ended before its ServerApp "
                              "closed the report, which this command then closed with the rows it holds")
    assert data["config"] == running["config"]  # the rest of the sidecar as the ServerApp wrote it
    assert stop.value.report == csv_path and stop.value.report_complete is False

    closed = {**running, "status": "interrupted", "reason": "interrupted (the process was asked to exit: SystemExit 0)",
              "rows": 8, "rounds_completed": 2}
    write_sidecar(csv_path.with_suffix(".json"), closed)
    with pytest.raises(Terminated):
        simulation.run_federation({}, {}, csv_path)
    assert read_sidecar(csv_path.with_suffix(".json"))[0] == closed


@pytest.mark.parametrize("sidecar, expected", [
    ({"status": "failed", "reason": "no node serves any of the 2 partitions after node-wait 5 s"},
     "the run failed: no node serves any of the 2 partitions after node-wait 5 s; report {csv}"),
    ({"status": "running"}, "the ServerApp ended without closing its report ({json} says 'running'"),
    ({"status": "interrupted", "reason": "interrupted (SIGKILL)"}, "the run ended interrupted (SIGKILL); report"),
    (None, "the simulation ended without a report: ERROR : ServerApp failed: edgeprof: ConfigError: bad"),
])
def test_a_run_that_did_not_complete_ends_the_command_with_one_line_and_exit_7(tmp_path, monkeypatch, sidecar,
                                                                             expected):
    """The command ends as the ServerApp's sidecar says the run ended (a failed run: its reason), with Flower's
    log's last error when there is no report at all; the runtime is replaced by what it left on disk."""
    from typer.testing import CliRunner

    from edgeprof.cli import app
    from edgeprof.flower import simulation

    def runtime(run_config, federation, csv_path):
        logs = csv_path.with_suffix(".flower")
        logs.mkdir(parents=True)
        (logs / "run.log").write_text("INFO : roll call\nERROR : ServerApp failed: edgeprof: ConfigError: bad\n"
                                      "INFO : done\n")
        if sidecar is not None:
            csv_path.with_suffix(".json").write_text(json.dumps(sidecar))
        return simulation.run_outcome(csv_path, logs)

    monkeypatch.setattr(simulation, "run_federation", runtime)

    result = CliRunner().invoke(app, ["flower-simulate", "--run-name", "r", "--out", str(tmp_path)])

    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 7, result.output
    csv = tmp_path / "r.csv"
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error: "), lines
    assert expected.format(csv=csv, json=csv.with_suffix(".json")) in lines[0], lines[0]
    assert f"Flower's logs in {tmp_path / 'r.flower'}" in lines[0]


@pytest.mark.slow
def test_a_run_no_node_serves_fails_with_its_reason(tmp_path, watch, monkeypatch):
    """Every virtual node refuses (its partition's data files are missing): the ServerApp ends the run ``failed``
    with the reason, and ``simulate`` raises that reason in one line (exit 7); the runtime is gone. (The driver's
    own look at the data, which refuses this before the runtime starts, is left out: the nodes' path is the one
    under test, as a node whose files differ from the driver's meets it.)"""
    from edgeprof.config import RunConfig
    from edgeprof.errors import ReportError
    from edgeprof.flower import simulation
    from edgeprof.flower.config import FlowerSettings
    from edgeprof.flower.simulation import simulate

    monkeypatch.setattr(simulation, "_check_data_and_backbone", lambda cfg: None)

    (tmp_path / "empty").mkdir()
    cfg = RunConfig(tau=1, rounds=1, clients=2, dataset="mnist", data_dir=tmp_path / "empty", backbone="mlp",
                    threads=1, out=tmp_path / "out", run_name="none", progress=False).resolved()

    with pytest.raises(ReportError) as failed:
        simulate(cfg, FlowerSettings(round_timeout_s=60, node_wait_s=10), total_cpus=2)

    sidecar = json.loads((tmp_path / "out" / "none.json").read_text())
    assert sidecar["status"] == "failed" and "no node serves" in sidecar["reason"]
    assert failed.value.exit_code == 7 and str(failed.value).startswith(f"the run failed: {sidecar['reason']}")
    watch.assert_nothing_left()


def test_a_stop_from_flowers_runtime_reaches_a_server_app_in_a_thread(tmp_path, monkeypatch):
    """Flower's exit handlers (run from the simulation's main thread on ``flwr stop``) carry the stop to the
    ServerApp in its thread: it raises the runtime's ``SystemExit(0)`` at its next look at the grid, the thread
    ends as after its last round, and the exit handler returns only once the server has let go of its report."""
    import threading
    import time

    from flwr.supercore.exit.exit_handler import trigger_exit_handlers

    from edgeprof.flower import server_app

    polls, let_go = [], []

    def run_server(grid, run_config):
        try:
            while True:  # a server waiting for its replies
                grid.get_node_ids()
                polls.append(1)
                time.sleep(0.05)
        finally:
            time.sleep(0.3)  # closing the report
            let_go.append(time.monotonic())

    monkeypatch.setattr(server_app, "run_server", run_server)
    app = server_app.make_server_app()
    grid = type("Grid", (), {"pull_messages": lambda self, ids: [], "get_node_ids": lambda self: []})()
    errors = []
    thread = threading.Thread(target=lambda: errors.append(app._main(grid=grid, context=type(
        "Context", (), {"run_config": {}})())))
    thread.start()
    while not polls:
        time.sleep(0.01)

    trigger_exit_handlers(run_before_force_exit=True)  # what flwr_exit runs first, in the main thread
    returned = time.monotonic()
    thread.join(5)

    assert not thread.is_alive() and errors == [None]  # ended as after its last round, no exception
    assert let_go and let_go[0] <= returned  # the exit waited for the report to be let go of

"""Real processes on loopback: a SuperLink and three SuperNodes (separate process groups on 127.0.0.1),
runs submitted with ``flwr run``; theta compared with the in-process loop of :mod:`edgeprof.rounds.simulate`.

The tests share one federation (module fixture), except the last, which starts its own; the one that kills a
SuperNode runs after every test that needs all three. Every process group is killed by a finalizer registered as
soon as the process starts. A test that waits on the federation and times out fails with the tail of every
process's log, so that a stalled runtime (a SuperLink that logs nothing for minutes) shows in CI's output.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.flower.config import FlowerSettings, to_run_config, write_app_dir  # noqa: E402
from edgeprof.flower.loopback import free_ports, wait_for_port  # noqa: E402

pytestmark = pytest.mark.slow

NUM_NODES = 3
BIN = Path(sys.executable).parent


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left of it."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            # the group may outlive its leader (superexec, clientapp children): kill it too
            os.killpg(proc.pid, signal.SIGKILL)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            continue
        return


@dataclass
class Federation:
    root: Path
    env: dict
    nodes: dict  # partition id -> Popen
    logs: Path
    run_id: str = ""  # Flower's id of the run submitted last
    link: subprocess.Popen | None = None  # the SuperLink

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-2500:] for p in sorted(self.logs.glob("*.log")))

    def submit(self, name: str, cfg: RunConfig, settings: FlowerSettings) -> tuple[Path, Path]:
        """Write the app folder, ``flwr run`` it, and return (report csv, sidecar) paths."""
        self.run_app(write_app_dir(self.root / f"app-{name}", to_run_config(cfg, settings)))
        return Path(cfg.out) / f"{cfg.run_name}.csv", Path(cfg.out) / f"{cfg.run_name}.json"

    def run_app(self, app: Path) -> str:
        """``flwr run`` the app whose ``pyproject.toml`` is ``app``; return Flower's run id (kept for `flwr stop`)."""
        out = self.flwr("run", str(app.parent), "loopback", timeout=90)
        assert "Successfully started run" in out.stdout, out.stdout + out.stderr
        self.run_id = out.stdout.split("Successfully started run")[1].split()[0]
        return self.run_id

    def wait_round(self, csv_path: Path, t: int, timeout: float) -> None:
        """Wait until the report holds round ``t``'s server row; fail with the logs' tails when it does not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if csv_path.is_file() and any(r["round"] == str(t) and r["kind"] == "server"
                                          for r in csv.DictReader(csv_path.read_text().splitlines())):
                return
            time.sleep(0.2)
        pytest.fail(f"round {t} did not finish in {timeout} s\n{self.log_tail()}")

    def flwr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``flwr ARGS...``; fail with the logs' tails when it does not return in ``timeout`` s."""
        try:
            return subprocess.run([str(BIN / "flwr"), *args], env=self.env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`flwr {' '.join(args)}` did not return in {timeout} s\n{self.log_tail()}")

    def wait_done(self, sidecar: Path, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sidecar.is_file():
                data = json.loads(sidecar.read_text())
                if data["status"] != "running":
                    return data
            time.sleep(0.5)
        pytest.fail(f"the federation did not finish in {timeout} s\n{self.log_tail()}")


@pytest.fixture(scope="module")
def federation(request, tmp_path_factory):
    return start_federation(request, tmp_path_factory, [f"partition-id={pid} num-partitions={NUM_NODES}"
                                                        for pid in range(NUM_NODES)])


def start_federation(request, tmp_path_factory, node_configs: list[str], extra_env: dict | None = None):
    """A SuperLink and one SuperNode per ``--node-config`` on loopback, stopped when the requester ends."""
    if shutil.which("flower-superlink", path=str(BIN)) is None:
        pytest.skip("flower-superlink is not installed")
    root = tmp_path_factory.mktemp("flower")
    logs = root / "logs"
    logs.mkdir()
    link, *node_ports = free_ports(1 + len(node_configs))
    # the SuperLink and SuperNodes start flower-superexec / clientapp processes through PATH: put this
    # environment's bin first, as an activated virtual environment would (CI does not activate it)
    env = {**os.environ, "FLWR_HOME": str(root / "flwr-home"), "PYTHONUNBUFFERED": "1",
           "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]), **(extra_env or {})}
    env.pop("EDGEPROF_HOST", None), env.pop("EDGEPROF_DEVICE", None)
    Path(env["FLWR_HOME"]).mkdir()
    (Path(env["FLWR_HOME"]) / "config.toml").write_text(
        f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{link}"\ninsecure = true\n')

    def start(name: str, args: list[str]) -> subprocess.Popen:
        log = open(logs / f"{name}.log", "w")
        proc = subprocess.Popen([str(BIN / args[0]), *args[1:]], stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=root, start_new_session=True)
        request.addfinalizer(lambda: (kill_group(proc), log.close()))
        return proc

    superlink = start("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(link),
                                    "--disable-runtime-dependency-installation"])
    try:
        wait_for_port(link, 60)
    except TimeoutError as err:
        pytest.fail(f"{err}\n" + "\n".join(p.read_text(errors="replace")[-2000:] for p in logs.glob("*.log")))
    nodes = {pid: start(f"supernode-{pid}", [
        "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link}", "--host", "127.0.0.1",
        "--port", str(port), "--node-config", node_config])
        for pid, (port, node_config) in enumerate(zip(node_ports, node_configs))}
    return Federation(root, env, nodes, logs, link=superlink)


def tiny_cfg(out: Path, name: str, **kw) -> RunConfig:
    return RunConfig(algo="pflego", tau=2, rounds=3, clients=NUM_NODES, dataset="synthetic", backbone="mlp",
                     synthetic_samples=150, synthetic_classes=4, seed=3, threads=1, out=out, run_name=name,
                     server_optimizer="adam", progress=False, **kw).resolved()


def load_theta(run_dir: Path, name: str) -> list[np.ndarray]:
    data = np.load(run_dir / f"{name}.theta.npz")
    return [data[f"arr_{i}"] for i in range(len(data.files))]


def in_process(cfg: RunConfig, accepted: dict | None = None) -> list[np.ndarray]:
    """theta of the in-process loop; with ``accepted`` (round -> partitions), the other replies are dropped."""
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.measure.profiler import Profiler
    from edgeprof.report.writer import ReportWriter
    from edgeprof.algorithms.participants import participant_rng, sample_participants
    from edgeprof.session.run import Energy, RunContext
    from edgeprof.rounds.simulate import build_federation, load_clients, run_rounds

    algorithm = build_federation(cfg, load_clients(cfg))
    if accepted is None:  # the very loop of `edgeprof measure`
        out = Path(cfg.out) / "in-process"
        out.mkdir(exist_ok=True)
        with ReportWriter(out / "r.csv", _columns(cfg)) as writer:
            run_rounds(RunContext("r", "here", writer, Profiler(MeterSet([])), Energy()), cfg, algorithm)
        return algorithm.global_arrays
    rng = participant_rng(cfg)
    for t in range(1, cfg.rounds + 1):
        updates = [algorithm.client_round(c) for c in
                   sample_participants(rng, cfg.clients, cfg.participation, cfg.participation_mode)]
        algorithm.server_step([u for u in updates if u.client_id in accepted[t]])
    return algorithm.global_arrays


def _columns(cfg: RunConfig):
    from edgeprof.algorithms import phases_of
    from edgeprof.report.schema import columns_for

    return columns_for(phases_of([cfg.algo]))


def test_pflego_on_flower_matches_the_in_process_run(federation, tmp_path):
    # Prepare: 3 clients, r = 2 sampled per round, so the sampling sequence matters
    cfg = tiny_cfg(tmp_path, "match", participation=0.67)
    # Execute
    csv_path, sidecar = federation.submit("match", cfg, FlowerSettings(round_timeout_s=90, node_wait_s=60))
    data = federation.wait_done(sidecar, 150)
    # Assert: the run completed, every sampled client replied, theta equals the in-process theta
    assert data["status"] == "complete", federation.log_tail()
    rounds = data["flower"]["rounds"]
    assert all(r["accepted"] == r["sampled"] and len(r["sampled"]) == 2 for r in rounds.values())
    for got, want in zip(load_theta(tmp_path, "match"), in_process(cfg), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # one report: a row per sampled client per round with its device, one server row per round
    from edgeprof.report import read_report

    report = read_report(csv_path)
    for t, r in rounds.items():
        clients = sorted(int(row["client"]) for row in report.where(round=t, kind="client"))
        assert clients == r["sampled"]
        assert len(report.where(round=t, kind="server")) == 1
    assert all(row["host"] and row["energy_method"] and row["cache_forward_s"] for row in report.where(kind="client"))
    assert data["flower"]["shared_machine"] and "attribution" in data["flower"]["energy_note"]


def test_a_deployed_round_window_holds_its_phases_and_reports_set_up_beside_it(federation, tmp_path):
    """Set-up (process start, data, model, ONNX session, warm-up) is measured beside the round, not in it.

    What the window costs against the same round in-process, and its share outside the phases, are timings:
    ``scripts/bench_flower_setup.py`` measures them side by side (docs: Benchmarks), not this test.
    """
    from edgeprof.report import read_report

    cfg = tiny_cfg(tmp_path, "rounds", participation=0.34)
    csv_path, sidecar = federation.submit("rounds", cfg, FlowerSettings(round_timeout_s=120, node_wait_s=60))
    data = federation.wait_done(sidecar, 300)
    assert data["status"] == "complete", federation.log_tail()
    rows = read_report(csv_path).where(kind="client")
    assert len(rows) == cfg.rounds  # one client per round
    for row in rows:
        phases = [float(row[f"{p}_s"]) for p in ("cache_forward", "head_steps", "joint_grad")]
        # the window is the round: its phases lie inside it, each measured; set-up has columns of its own
        assert all(t > 0 for t in phases) and sum(phases) <= float(row["wall_s"]), row
        assert float(row["setup_s"]) > 0 and float(row["startup_s"]) > 0  # flwr-clientapp process per message
        assert float(row["setup_j"]) > 0 and row["energy_method"] in ("counter", "integrated_power", "estimate")


def test_a_run_stopped_with_flwr_stop_keeps_its_finished_rounds_as_interrupted(federation, tmp_path):
    """``flwr stop`` ends the ServerApp's process with ``sys.exit(0)`` under the rounds (Flower's runtime): the
    report keeps every finished round and says ``interrupted`` (before: ``failed``, reason "0")."""
    # Prepare: more rounds than the test waits for
    cfg = dataclasses.replace(tiny_cfg(tmp_path, "stop"), rounds=1000)
    csv_path, sidecar = federation.submit("stop", cfg, FlowerSettings(round_timeout_s=60, node_wait_s=60))
    federation.wait_round(csv_path, 2, 120)
    # Execute
    stop = federation.flwr("stop", federation.run_id, "loopback")
    data = federation.wait_done(sidecar, 60)
    # Assert
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert data["status"] == "interrupted", (data, federation.log_tail())
    assert data["reason"] == "interrupted (the process was asked to exit: SystemExit 0)"
    assert 2 <= data["rounds_completed"] < cfg.rounds
    from edgeprof.report import read_report

    report = read_report(csv_path)
    assert len(report.rows) == data["rows"] and len(report.where(kind="server")) == data["rounds_completed"]
    # the ServerApp's log stream has said where the partial report is and that a stop keeps it as interrupted (after
    # `flwr stop` the SuperLink takes no more log lines of the run)
    server_log = federation.flwr("log", federation.run_id, "loopback", "--show").stdout
    assert (f"edgeprof: report {csv_path}: a row is written as each round ends; a stop (flwr stop, a signal) keeps "
            "every finished round, the sidecar recorded interrupted") in server_log, server_log[-3000:]


def test_a_client_killed_mid_run_does_not_stop_the_federation(federation, tmp_path):
    # Prepare: every client in every round; a short round timeout so the dead client costs little time
    victim = NUM_NODES - 1
    assert federation.nodes[victim].poll() is None, "the victim node must be alive at the start"
    cfg = tiny_cfg(tmp_path, "kill", participation=1.0)
    csv_path, sidecar = federation.submit("kill", cfg, FlowerSettings(round_timeout_s=25, node_wait_s=60))
    # Execute: kill the victim's whole process group as soon as round 1 is on disk
    federation.wait_round(csv_path, 1, 90)
    kill_group(federation.nodes[victim])
    data = federation.wait_done(sidecar, 120)
    # Assert: the run completed; the victim is missing from the last round; the others lost no row
    assert data["status"] == "complete", federation.log_tail()
    rounds = data["flower"]["rounds"]
    assert victim not in rounds[str(cfg.rounds)]["accepted"]
    from edgeprof.report import read_report

    report = read_report(csv_path)
    for t in range(1, cfg.rounds + 1):
        replied = sorted(int(r["client"]) for r in report.where(round=t, kind="client"))
        assert [c for c in range(NUM_NODES) if c != victim] == [c for c in replied if c != victim]
        assert sorted(rounds[str(t)]["accepted"]) == replied
    # theta = the paper's aggregation with the missing gradient set to zero: alpha_i of the clients that
    # replied, scale I/r of the sampled r (the in-process loop, the victim's update dropped where it was)
    accepted = {int(t): r["accepted"] for t, r in rounds.items()}
    for got, want in zip(load_theta(tmp_path, "kill"), in_process(cfg, accepted), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_a_device_trains_on_its_own_folder_and_a_device_that_refuses_the_backbone_stops_nothing(
        request, tmp_path_factory, tmp_path):
    """A real deployment on loopback: the run config names backbone code (tests/custom_backbones.py:small_cnn)
    and a data-dir on the server. Device 0 allows that code and trains on the MNIST-format files of its own
    folder; device 1 allows no backbone code and refuses, in one line in its node's log, which leaves it out of the
    federation; the federation runs on without it, complete, and device 0's rows name the data set it trained on."""
    from test_data_files import write_idx_set

    own = tmp_path / "device0-data"
    files = write_idx_set(own, seed=5, num_classes=3)
    tests = Path(__file__).resolve().parent
    fed = start_federation(request, tmp_path_factory, [
        f"partition-id=0 num-partitions=2 data-dir='{own}' allow-backbones='custom_backbones:*'",
        "partition-id=1 num-partitions=2"], extra_env={"PYTHONPATH": os.pathsep.join([
            str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")])})
    cfg = RunConfig(algo="pflego", tau=2, rounds=2, clients=2, participation=1.0, dataset="mnist",
                    data_dir=tmp_path / "the-servers-path", backbone="custom_backbones:small_cnn", seed=3,
                    threads=1, out=tmp_path / "out", run_name="trust", progress=False).resolved()

    csv_path, sidecar_path = fed.submit("trust", cfg, FlowerSettings(round_timeout_s=60.0, node_wait_s=20.0))
    sidecar = fed.wait_done(sidecar_path, timeout=240)

    assert sidecar["status"] == "complete", fed.log_tail()
    rows = list(csv.DictReader(csv_path.open()))
    clients = [r for r in rows if r["kind"] == "client"]
    assert {r["client"] for r in clients} == {"0"} and len(clients) == cfg.rounds, fed.log_tail()
    labels = np.concatenate([files["train_y"], files["t10k_y"]])
    assert int(clients[0]["n_samples"]) < len(labels) == 8  # its own 8 images, part of them held out for test
    assert {r["dataset"] for r in clients} == {"mnist"}
    data = sidecar["flower"]["alpha"]["nodes"]["0"]["data"]
    assert (data["source"], data["folder"], data["n_test"]) == ("own", str(own), 8 - int(clients[0]["n_samples"]))
    node_log = (fed.logs / "supernode-0.log").read_text(errors="replace")
    assert f"edgeprof: partition 0 trains on its own data: mnist in {own}" in node_log, node_log[-3000:]
    assert "imports no backbone code a run config names" in fed.log_tail()


@pytest.mark.parametrize("reaped", [False, True], ids=["left-a-zombie", "reaped"])
def test_a_superlink_that_goes_away_mid_run_ends_the_report_failed_with_its_rounds(request, tmp_path_factory,
                                                                                  tmp_path, reaped):
    """The SuperLink's process is killed under a run (a crash, or an operator's ``kill`` of it alone).

    Left a zombie (its parent has not reaped it), it still looks alive to the ServerApp's watch on its parent, and
    Flower's grid retries its connection for ever, which left the ServerApp's process waiting and the sidecar
    ``running`` (seen: over 5 minutes): the ServerApp gives up once the SuperLink has not answered for
    --round-timeout seconds. Reaped (a SuperLink started from a shell, or by systemd), it is seen gone within
    0.2 s, and Flower's runtime stops the ServerApp with a SIGINT whose exit handlers (pushing logs to the dead
    SuperLink) outlast Flower's 5 s force exit: the process was killed before the stop reached the run, and the
    sidecar stayed ``running``; and that SIGINT, raised in Flower's watch thread, waited for the main thread's wait
    to end (Flower's push of a round's messages, retrying the lost SuperLink: 20 to 27 s on a loaded runner) until
    the main thread was woken for it (server_app.wake_main_thread). Either way the report keeps every finished round, says ``failed`` and why, and the
    ServerApp's process ends."""
    fed = start_federation(request, tmp_path_factory, [f"partition-id={pid} num-partitions=2" for pid in range(2)])
    cfg = RunConfig(algo="pflego", tau=2, rounds=1000, clients=2, dataset="synthetic", backbone="mlp",
                    synthetic_samples=100, synthetic_classes=4, seed=3, threads=1, out=tmp_path, run_name="lost",
                    server_optimizer="adam", progress=False).resolved()
    csv_path, sidecar = fed.submit("lost", cfg, FlowerSettings(round_timeout_s=20.0, node_wait_s=60))
    fed.wait_round(csv_path, 2, 120)
    children = _descendants(fed.link.pid)
    request.addfinalizer(lambda: [os.kill(pid, signal.SIGKILL) for pid in _serverapps(children)])
    # Execute: the SuperLink's process alone is killed; its children (the ServerApp's among them) are left running
    os.kill(fed.link.pid, signal.SIGKILL)
    lost_at = time.monotonic()
    if reaped:
        fed.link.wait(timeout=30)
    data = fed.wait_done(sidecar, 90)
    # Assert
    assert data["status"] == "failed", (data, fed.log_tail())
    assert ("the SuperLink went away" if reaped else "the SuperLink stopped answering") in data["reason"], data
    assert 2 <= data["rounds_completed"] < cfg.rounds and time.monotonic() - lost_at < (10 if reaped else 75)
    from edgeprof.report import read_report

    report = read_report(csv_path)
    assert len(report.rows) == data["rows"] and len(report.where(kind="server")) == data["rounds_completed"]
    deadline = time.monotonic() + 30
    while _serverapps(children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert children and not _serverapps(children), "the ServerApp's process has ended"


def _descendants(pid: int) -> list[int]:
    """The pids of every process below ``pid`` (read from /proc's parent links)."""
    parents = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        kids = [p for p, parent in parents.items() if parent == here]
        found += kids
        todo += kids
    return found


def _serverapps(pids: list[int]) -> list[int]:
    """Those of ``pids`` that are still a running flwr-serverapp."""
    alive = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"flwr-serverapp" in cmdline and state != "Z":
            alive.append(pid)
    return alive

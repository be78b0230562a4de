"""The CSV schema, the sidecar, and what a killed or interrupted run leaves behind."""

from __future__ import annotations

import csv
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgeprof.algorithms import ALGORITHMS
from edgeprof.cli import app
from edgeprof.config import EnergySettings, RunConfig
from edgeprof.host import host_label
from edgeprof.meters.registry import report_columns
from edgeprof.report import columns_for, read_report
from edgeprof.report.schema import CORE_COLUMNS
from edgeprof.report.summary import gpu_lines, gpu_summary
from edgeprof.report.writer import ReportWriter
from edgeprof.rounds.simulate import run

from docs_text import page
from test_analysis import CLAIM_HOLDS, GPU_REPORTS, IDLE_W, gpu_reference, idle_section, rows_for

SMALL = dict(dataset="synthetic", synthetic_samples=240, synthetic_classes=4, backbone="mlp", clients=4,
             participation=0.5, rounds=2, tau=3, progress=False)
REPORT_PAGE = "docs/report.md"  # the documented schema


@pytest.mark.parametrize("algo", ["pflego", "fedavg"])
def test_report_rows_follow_the_schema(tmp_path, algo):
    result = run(RunConfig(algo=algo, out=tmp_path, run_name=f"r-{algo}", **SMALL))
    report = read_report(result.csv_path)

    assert report.columns == columns_for(ALGORITHMS[algo].phases)
    clients, servers = report.where(kind="client"), report.where(kind="server")
    assert len(clients) == 2 * 2 and len(servers) == 2
    for row in clients:
        assert float(row["wall_s"]) > 0 and float(row["cpu_s"]) >= 0
        assert row["energy_method"] == "estimate" and float(row["energy_j"]) >= 0
        assert row["cpu_estimate_method"] == "estimate" and row["cpu_package_j"] == ""
        assert int(row["n_samples"]) > 0 and float(row["train_loss"]) > 0
        phase_sum = sum(float(row[f"{p}_s"]) for p in ALGORITHMS[algo].phases)
        assert phase_sum <= float(row["wall_s"])
    sidecar = report.sidecar
    assert sidecar["status"] == "complete" and sidecar["rounds_completed"] == 2
    assert sidecar["config"]["algo"] == algo and sidecar["config"]["tau"] == 3
    assert sidecar["host"]["cpu_cores_logical"] >= 1 and "memory_gib" in sidecar["host"]
    assert sidecar["libraries"]["torch"] and sidecar["libraries"]["onnxruntime"]
    assert sidecar["meters"]["meters"][0]["domains"][0]["method"] == "estimate"
    # the estimate is the row's own CPU seconds times the watts, in the window and every phase (cells have
    # 6 significant digits: each is within 5e-6 of its value)
    watts = sidecar["meters"]["meters"][0]["watts_per_core"]
    for row in clients + servers:
        pairs = [("cpu_s", "energy_j")] + [(f"{p}_cpu_s", f"{p}_j") for p in ALGORITHMS[algo].phases
                                           if row["kind"] == "client"]
        for cpu_col, j_col in pairs:
            assert float(row[j_col]) == pytest.approx(float(row[cpu_col]) * watts, rel=1.1e-5), (row["kind"], j_col)


def test_the_docs_document_every_column():
    text = page(REPORT_PAGE)
    phases = {p for spec in ALGORITHMS.values() for p in spec.phases}
    missing = [c for c in CORE_COLUMNS if f"`{c}`" not in text]
    missing += [c for c in report_columns() if f"`{c}_j`" not in text]
    missing += [p for p in phases if f"`{p}`" not in text]
    assert not missing, f"{REPORT_PAGE} does not document: {missing}"


def _start(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "profiles"
    args = [sys.executable, "-m", "edgeprof.cli", "measure", "--dataset", "synthetic", "--synthetic-samples", "400",
            "--synthetic-classes", "4", "--backbone", "mlp", "--clients", "4", "--tau", "5", "--rounds", "100000",
            "--no-progress", "--out", str(out), "--run-name", name]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out / f"{name}.csv"


def _wait_for_rows(path: Path, proc: subprocess.Popen, rows: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().count("\n") > rows:
            return
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(0.05)
    raise AssertionError("run produced no rows in time")


@pytest.mark.slow
def test_killed_run_leaves_a_valid_csv_with_every_finished_round(tmp_path):
    proc, path = _start(tmp_path, "killed")
    _wait_for_rows(path, proc, 6)

    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    header = path.read_text().splitlines()[0].split(",")
    assert len(rows) >= 6
    assert path.read_text().endswith("\n")  # no half-written row
    for row in rows:
        assert None not in row and len(row) == len(header)
        assert row["kind"] in ("client", "server") and float(row["wall_s"]) > 0
    rounds = sorted({int(r["round"]) for r in rows})
    assert rounds == list(range(1, rounds[-1] + 1))
    assert json.loads(path.with_suffix(".json").read_text())["status"] == "running"


@pytest.mark.slow
def test_interrupted_run_exits_130_and_marks_the_sidecar(tmp_path):
    proc, path = _start(tmp_path, "interrupted")
    _wait_for_rows(path, proc, 4)

    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)

    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["status"] == "interrupted"
    assert read_report(path).where(kind="server")
    assert sidecar["rows"] == len(read_report(path).rows)


def test_net_energy_and_carbon_columns_follow_the_sidecar(tmp_path):
    result = run(RunConfig(algo="pflego", out=tmp_path, run_name="net",
                           energy=EnergySettings(idle_seconds=0.2, carbon_intensity=250.0), **SMALL))
    report = read_report(result.csv_path)
    idle_w = report.sidecar["energy"]["idle"]["total_power_w"]
    assert report.sidecar["energy"]["carbon"]["g_per_kwh"] == 250.0

    for row in report.where(kind="client"):
        gross, wall = float(row["energy_j"]), float(row["wall_s"])
        assert float(row["energy_net_j"]) == pytest.approx(gross - idle_w * wall, rel=1e-4, abs=1e-9)
        assert float(row["carbon_g"]) == pytest.approx(gross / 3.6e6 * 250.0, rel=1e-4)


def test_the_summary_says_how_many_windows_were_too_short_for_the_meters(tmp_path, monkeypatch):
    """A Jetson sampled at 1 Hz (a sysfs tree read by the production meter) cannot resolve a round of a few
    milliseconds: every row is flagged short_window, and the summary says so with the meters' update period."""
    from typer.testing import CliRunner

    from edgeprof.cli import app
    from fixtures_sysfs import build_jetson

    build_jetson(tmp_path / "sys", "orin_nano")
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path / "sys"))
    result = CliRunner().invoke(app, ["measure", "--dataset", "synthetic", "--synthetic-samples", "240",
                                      "--backbone", "mlp", "--clients", "4", "--rounds", "2", "--tau", "2",
                                      "--jetson-hz", "1", "--no-progress", "--run-name", "short", "--out",
                                      str(tmp_path / "out")])

    assert result.exit_code == 0, result.output
    report = read_report(tmp_path / "out" / "short.csv")
    rows = [r for r in report.rows if r["kind"] in ("client", "server")]
    assert rows and all(r["short_window"] == "1" for r in rows)
    assert (f"energy: {len(rows)} of {len(rows)} rows lasted less than the meters' update period (1 s): their "
            "joules are not resolved (short_window)") in " ".join(result.stdout.split())
    # and its phases, each shorter still: every phase of every client row, named with how many rows
    clients = [r for r in rows if r["kind"] == "client"]
    phases = {p: sum(p in r["short_phases"].split(";") for r in clients) for p in ("cache_forward", "head_steps",
                                                                                     "joint_grad")}
    assert phases == dict.fromkeys(phases, len(clients))
    assert ("energy: " + ", ".join(f"{p} in {n} of {len(clients)}" for p, n in phases.items()) + " client rows lasted "
            "less than the meters' update period: those phases' joules are not resolved (short_phases)"
            ) in " ".join(result.stdout.split())


@pytest.mark.parametrize("name", GPU_REPORTS)
@pytest.mark.parametrize("with_idle", [True, False], ids=["idle-baseline", "no-idle-baseline"])
def test_summary_shows_the_gpus_own_joules_net_of_idle_and_the_estimate_beside_them(tmp_path, name, with_idle):
    path = gpu_reference(tmp_path, name, idle_section(tmp_path / "sys", IDLE_W) if with_idle else None)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))

    lines = {(ln.algo, ln.part): ln for ln in gpu_lines(read_report(path))}
    printed = CliRunner().invoke(app, ["summary", str(path)])

    taus = sorted({int(r["tau"]) for r in rows})  # a sweep: each tau's rounds apart, never one median over taus
    assert len(taus) > 1 and list(lines) == [(f"{a}, tau={t}", p) for a in ("fedavg", "pflego") for t in taus
                                             for p in ("client round", "server step")]
    for (name, part), ln in lines.items():
        algo, tau = name.split(", tau=")
        mine = [r for r in rows if r["algo"] == algo and r["tau"] == tau
                and r["kind"] == part.split()[0].replace("round", "client")]
        gpu, wall = (np.array([float(r[c]) for r in mine]) for c in ("gpu_j", "wall_s"))
        estimate = np.array([float(r["cpu_estimate_j"]) for r in mine])
        sums = ln.totals
        assert (sums.rows, sums.short) == (len(mine), sum(r["short_window"] == "1" for r in mine))
        assert sums.gpu_j == pytest.approx(gpu.sum(), rel=1e-12) and ln.gpu_j == pytest.approx(np.median(gpu))
        assert (sums.method, sums.rest_method) == ("counter", "estimate")  # each by its own method, never mixed
        assert ln.rest_j == pytest.approx(np.median(estimate)) and sums.rest_j == pytest.approx(estimate.sum())
        if with_idle:
            assert sums.net_j == pytest.approx((gpu - IDLE_W * wall).sum(), rel=1e-9, abs=1e-9)
            assert ln.net_j == pytest.approx(np.median(gpu - IDLE_W * wall), rel=1e-9, abs=1e-9)
            if part == "client round":
                assert sums.idle_share == pytest.approx(IDLE_W * wall.sum() / gpu.sum(), rel=1e-9)
        else:
            assert (ln.net_j, sums.net_j, sums.idle_share) == (None, None, None)
    assert printed.exit_code == 0, printed.output
    out = printed.stdout
    pflego = lines[(f"pflego, tau={taus[-1]}", "client round")]
    (shown,) = [ln for ln in out.splitlines()
                if re.match(rf"│ pflego, tau={taus[-1]} +│ client round │", ln) and "counter" in ln]
    assert f" {pflego.totals.gpu_j:.4g} " in shown and shown.rstrip(" │").endswith("estimate")
    verdict = r"│ (flat|linear|inconclusive) +│"
    fits = [ln for ln in out.splitlines() if re.search(r"│ gpu_j \(counter\) +│.*" + verdict, ln)]
    assert len(fits) == 2  # pflego's and fedavg's
    assert ("GPU idle power: 106.3 W (gpu_0" in out) == with_idle
    assert ("GPU net of idle: not shown, the run measured no idle baseline" in out) == (not with_idle)
    if with_idle:
        assert f" {pflego.totals.idle_share:.0%} " in shown
        net = r"│ gpu_net_j \(counter, net of idle\) +│.*"
        assert len([ln for ln in out.splitlines() if re.search(net + verdict, ln)]) == 2


def test_the_summary_of_a_sweep_gives_each_engine_and_tau_its_own_medians_and_the_fits(tmp_path):
    """A real sweep of PFLEGO on two engines and FedAvg at two taus: a median over rounds of different work (tau 1
    and 3, ONNX and torch) would describe none of them, so each (variant, tau) is its own line, its medians those
    of its rows (numpy, from the CSV); the fits and ratios against tau follow, as the sweep printed them."""
    out = tmp_path / "out"
    swept = CliRunner().invoke(app, ["sweep", "--backbone", "mlp", "--dataset", "synthetic", "--samples-per-client",
                                     "20", "--taus", "1,3", "--repeats", "2", "--algos", "pflego,fedavg",
                                     "--engines", "onnx,torch-reuse", "--no-progress", "--run-name", "e", "--out",
                                     str(out)])
    assert swept.exit_code == 0, swept.output
    with open(out / "e.csv", newline="") as f:
        rows = list(csv.DictReader(f))

    printed = CliRunner().invoke(app, ["summary", str(out / "e.csv")])

    assert printed.exit_code == 0, printed.output
    table = {(cells[0], cells[1]): cells[2:] for cells in (
        [c.strip() for c in line.strip("│ ").split("│")] for line in printed.stdout.splitlines()
        if line.startswith("│ ") and ", tau=" in line.split("│")[1])}
    def variant(row):  # PFLEGO's default engine is onnx: the other one is named
        return row["algo"] + ("[torch-reuse]" if row["engine"] == "torch-reuse" else "")

    cells = {(variant(r), r["tau"]) for r in rows if r["kind"] == "client"}
    assert {v for v, _ in cells} == {"pflego", "pflego[torch-reuse]", "fedavg"}
    assert {name for name, part in table if part == "client round"} == {f"{v}, tau={t}" for v, t in cells}
    for name, tau in cells:
        for kind, part in (("client", "client round"), ("server", "server step")):
            mine = [r for r in rows if (variant(r), r["tau"], r["kind"]) == (name, tau, kind)]
            n, wall = table[(f"{name}, tau={tau}", part)][:2]
            assert int(n) == len(mine) == 2  # 4 significant digits printed: within half of the last one
            assert float(wall) == pytest.approx(np.median([float(r["wall_s"]) for r in mine]), rel=5e-4)
    fits = [line for line in printed.stdout.splitlines() if re.match(r"│ \S+ +│ wall_s +│", line)]
    assert "cost per client round = a + b*tau" in printed.stdout and len(fits) == 3
    assert "ratio to PFLEGO per client round at each tau" in printed.stdout


def test_summary_of_a_run_without_a_gpu_has_no_gpu_part(tmp_path):
    path = tmp_path / "cpu.csv"
    with ReportWriter(path, columns_for(ALGORITHMS["pflego"].phases + ALGORITHMS["fedavg"].phases)) as writer:
        writer.write_rows([dict(r, run_id="cpu", energy_method="estimate", cpu_estimate_j=r["energy_j"],
                                cpu_estimate_method="estimate") for r in rows_for(CLAIM_HOLDS)])

    parts = gpu_summary(read_report(path))
    printed = CliRunner().invoke(app, ["summary", str(path)])

    assert parts == [] and printed.exit_code == 0, printed.output
    assert "median per client round" in printed.stdout and "GPU" not in printed.stdout


# ------------------------------------------------------------ the machine's name: ``host``, and its older name ``device``

@pytest.mark.parametrize("env,configured,expected", [
    ({"EDGEPROF_HOST": "pi-4"}, "node-name", "pi-4"),
    ({"EDGEPROF_DEVICE": "pi-4"}, "node-name", "pi-4"),  # the old name, read while EDGEPROF_HOST is unset
    ({"EDGEPROF_HOST": "pi-4", "EDGEPROF_DEVICE": "old"}, None, "pi-4"),
    ({}, "node-name", "node-name"),
    ({}, None, socket.gethostname()),
])
def test_edgeprof_host_or_its_old_name_names_the_host(monkeypatch, env, configured, expected):
    for name in ("EDGEPROF_HOST", "EDGEPROF_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    assert host_label(configured) == expected


@pytest.mark.parametrize("variable", ["EDGEPROF_HOST", "EDGEPROF_DEVICE"])
def test_a_run_writes_its_hosts_name_in_every_row_and_its_facts_in_the_sidecar(tmp_path, monkeypatch, variable):
    monkeypatch.delenv("EDGEPROF_HOST", raising=False)
    monkeypatch.delenv("EDGEPROF_DEVICE", raising=False)
    monkeypatch.setenv(variable, "bench-7")

    report = read_report(run(RunConfig(out=tmp_path, run_name="named", **{**SMALL, "rounds": 1})).csv_path)

    assert "device" not in report.columns and {r["host"] for r in report.rows} == {"bench-7"}
    assert "device" not in report.sidecar and report.sidecar["host"]["hostname"] == socket.gethostname()


def _old_flower_report(folder: Path) -> Path:
    """A Flower run's report as edgeprof wrote it before the machine was named ``host``, by hand: the column
    ``device``, the sidecar's section ``device``, and ``device`` on each Flower node and client."""
    path = folder / "old.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=("run_id", "device", "algo", "engine", "tau", "round", "kind", "client",
                                          "wall_s", "energy_j", "energy_method"))
        w.writeheader()
        for rnd in (1, 2):
            for tau in (1, 5):
                for client, name in enumerate(("orin-0", "orin-1")):
                    w.writerow(dict(run_id="old", device=name, algo="fedavg", engine="torch", tau=tau, round=rnd,
                                    kind="client", client=client, wall_s=0.1 * tau + client + rnd / 100,
                                    energy_j=tau + client, energy_method="estimate"))
            w.writerow(dict(run_id="old", device="server-1", algo="fedavg", engine="torch", tau=5, round=rnd,
                            kind="server", wall_s=0.01, energy_j=0.1, energy_method="estimate"))
    nodes = {str(p): {"node_id": 10 + p, "n_train": 30, "device": f"orin-{p}"} for p in (0, 1)}
    path.with_suffix(".json").write_text(json.dumps({
        "run_id": "old", "status": "complete", "rows": 10,
        "device": {"hostname": "server-1", "cpu_model": "Old CPU", "cpu_cores_logical": 4},
        "flower": {"alpha": {"nodes": nodes},
                   "clients": {str(p): {"node_id": 10 + p, "device": f"orin-{p}"} for p in (0, 1)},
                   "rounds": {str(r): {"sampled": [0, 1], "accepted": [0, 1], "rejected": []} for r in (1, 2)}}}))
    return path


def test_an_old_report_is_read_with_host_where_it_wrote_device(tmp_path):
    from edgeprof.report.analysis import analyze
    from edgeprof.report.federation import of_report

    path = _old_flower_report(tmp_path)

    report = read_report(path)
    summary = CliRunner().invoke(app, ["summary", str(path)], env={"COLUMNS": "200"})

    assert "device" not in report.columns and report.columns[1] == "host"
    assert [r["host"] for r in report.rows[:3]] == ["orin-0", "orin-1", "orin-0"]
    assert report.where(kind="server")[0]["host"] == "server-1" and report.sidecar_problem == ""
    assert "device" not in report.sidecar and report.sidecar["host"]["cpu_model"] == "Old CPU"
    assert [n.host for n in of_report(report).nodes] == ["orin-0", "orin-1"]
    assert all(c == {"node_id": c["node_id"], "host": c["host"]} for c in report.sidecar["flower"]["clients"].values())
    assert {f.host for f in analyze(report.rows).fits} == {"orin-0", "orin-1"}
    assert summary.exit_code == 0, summary.output
    table = summary.stdout[summary.stdout.index("Flower: per host"):]
    assert [ln.split("│")[1].strip() for ln in table.splitlines() if ln.startswith("│ orin-")] == ["orin-0", "orin-1"]


def test_an_old_report_is_drawn_with_its_hosts(tmp_path):
    pytest.importorskip("plotly", reason="the dashboard extra is not installed (the plain-install CI leg)")
    from edgeprof.report.dashboard import render

    page = render([read_report(_old_flower_report(tmp_path))])

    assert "orin-0: " in page and "orin-1: " in page and "<td>Old CPU</td>" in page


@pytest.mark.parametrize("reference", ["sweep-cnn-omniglot-600.csv", "trace-pflego-tau50.csv",
                                       "gpu-h200/gpu-check-cnn-omniglot.csv"])
def test_the_committed_reference_profiles_read_with_their_host(reference):
    """The references under profiles/reference/ are measured data, written with ``device``: read, not rewritten."""
    from edgeprof.report.analysis import analyze

    path = Path(__file__).resolve().parents[1] / "profiles" / "reference" / reference
    assert "device" in path.read_text().splitlines()[0].split(",")  # still as it was measured

    report = read_report(path)

    assert "device" not in report.columns and {r["host"] for r in report.rows} == {"vm"}
    assert "device" not in report.sidecar and report.sidecar["host"]["hostname"] == "vm"
    assert {f.host for f in analyze(report.rows).fits} <= {"vm"}


def test_the_summary_says_a_short_window_may_be_one_step_of_a_coarse_counter(tmp_path):
    """A report whose meters include one counting in 1 J steps (a Sapphire Rapids psys): its short rows are said to
    have lasted less than the update period or counted less than one step; a report without one says the first."""
    import json

    from typer.testing import CliRunner

    from edgeprof.cli import app
    from edgeprof.report.summary import unresolved_words

    header = "run_id,algo,kind,round,client,tau,wall_s,cpu_s,energy_j,energy_method,short_window"
    (tmp_path / "r.csv").write_text(header + "\nr,pflego,client,1,0,5,0.5,0.4,0,counter,1\n"
                                    "r,pflego,client,1,1,5,0.5,0.4,3,counter,0\n")
    meters = {"meters": [{"name": "rapl", "update_period_s": 0.001, "energy_quantum_j": 1.0, "domains": []}]}
    (tmp_path / "r.json").write_text(json.dumps({"status": "complete", "meters": meters}))

    shown = CliRunner().invoke(app, ["summary", str(tmp_path / "r.csv")])

    text = " ".join(shown.stdout.split())
    assert shown.exit_code == 0, shown.output
    assert ("energy: 1 of 2 rows lasted less than the meters' update period (0.001 s) or counted less than one 1 J "
            "step of their coarsest counter: their joules are not resolved (short_window)") in text
    meters["meters"][0].pop("energy_quantum_j")
    (tmp_path / "r.json").write_text(json.dumps({"status": "complete", "meters": meters}))
    from edgeprof.report import read_report

    assert unresolved_words(read_report(tmp_path / "r.csv"), 0.001) == "lasted less than the meters' update period (0.001 s)"

"""The sweep: cell planning, shared clients, the CLI end to end on a tiny configuration, and --check."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.algorithms import ALGORITHMS, phases_of
from edgeprof.cli import app
from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError
from edgeprof.report.schema import columns_for
from edgeprof.report.writer import ReportWriter, read_report
from edgeprof.rounds.sweep import SweepConfig, SweepResult, Variant, plan_cells, sweep_clients

from conftest import make_clients
from test_analysis import CLAIM_HOLDS, IDLE_W, geometric_ratio, gpu_reference, idle_section, reference_columns, rows_for

TINY = ["--backbone", "mlp", "--dataset", "synthetic", "--samples-per-client", "20", "--taus", "1,3",
        "--repeats", "1", "--no-progress"]


def _cfg(**kw) -> SweepConfig:
    base = RunConfig(dataset="synthetic", backbone="mlp", clients=1, participation=1.0, progress=False)
    return SweepConfig(base=base, **kw)


def test_variants_expand_engines_and_accept_algo_colon_engine():
    cfg = _cfg(algos=("pflego", "fedavg", "pflego:onnx"), engines=("onnx", "torch-reuse"))

    assert cfg.variants() == [Variant("pflego", "onnx"), Variant("pflego", "torch-reuse"), Variant("fedavg", "torch")]
    assert _cfg(algos=("pflego:torch-reuse",)).variants() == [Variant("pflego", "torch-reuse")]


@pytest.mark.parametrize("kw,message", [
    (dict(algos=("fedfoo",)), "unknown algorithm 'fedfoo'"),
    (dict(algos=("fedavg:onnx",)), "unknown engine 'onnx' for fedavg"),
    (dict(taus=(0, 5)), "taus must be integers >= 1"),
    (dict(taus=(5, 5)), "must not repeat"),
    (dict(repeats=0), "repeats must be >= 1"),
])
def test_bad_sweep_settings_are_config_errors(kw, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(**kw)


def test_plan_has_every_cell_once_in_a_seeded_shuffled_order():
    cfg = _cfg(algos=("pflego", "fedavg"), taus=(1, 5, 50, 100), repeats=3, max_baseline_tau=50)

    cells = plan_cells(cfg)

    key = [(c.variant.algo, c.tau, c.repeat) for c in cells]
    assert len(key) == len(set(key)) == 4 * 3 + 3 * 3  # fedavg skips tau=100
    assert key == [(c.variant.algo, c.tau, c.repeat) for c in plan_cells(cfg)]
    assert key != sorted(key)


def test_clients_keep_samples_per_client_and_too_many_is_an_error(monkeypatch, rng):
    clients = sweep_clients(_cfg(samples_per_client=30))
    assert [c.n_train for c in clients] == [30]

    monkeypatch.setattr("edgeprof.rounds.simulate.load_clients", lambda cfg: make_clients(rng, sizes=(40, 7)))
    digits = SweepConfig(base=RunConfig(dataset="digits", backbone="mlp", clients=2, participation=1.0),
                         samples_per_client=30)
    with pytest.raises(ConfigError, match="client 1 has only 7 training samples, fewer than --samples-per-client 30"):
        sweep_clients(digits)


def test_tiny_sweep_runs_end_to_end_and_writes_one_report(tmp_path):
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["sweep", *TINY, "--algos", "pflego,fedavg", "--engines", "onnx,torch-reuse",
                                      "--out", str(out), "--run-name", "tiny"])

    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["tiny.csv", "tiny.json"]
    report = read_report(out / "tiny.csv")
    assert report.columns == columns_for(phases_of(["pflego", "fedavg"]))
    clients, servers = report.where(kind="client"), report.where(kind="server")
    assert len(clients) == len(servers) == 3 * 2
    cells = {(r["algo"], r["engine"], r["tau"]) for r in clients}
    assert cells == {(a, e, t) for a, e in (("pflego", "onnx"), ("pflego", "torch-reuse"), ("fedavg", "torch"))
                     for t in ("1", "3")}
    assert sorted(int(r["round"]) for r in clients) == list(range(1, 7))
    assert all(r["n_samples"] == "20" for r in clients)
    assert {r["joint_grad_s"] != "" for r in clients if r["algo"] == "pflego"} == {True}
    sidecar = json.loads((out / "tiny.json").read_text())
    assert sidecar["status"] == "complete" and len(sidecar["sweep"]["order"]) == 6
    assert "report:" in result.stdout and "verdict" in result.stdout


def _fake_sweep(monkeypatch, tmp_path: Path, costs: dict, method: str = "") -> None:
    """Replace run_sweep by one that writes a report of synthetic rows (no timing in tests), their energy obtained
    by ``method``."""
    path = tmp_path / "fake.csv"
    with ReportWriter(path, columns_for(phases_of(["pflego", "fedavg"]))) as writer:
        for row in rows_for(costs, method=method):
            writer.write(row)

    def fake(cfg, progress=None, stage=None):
        return SweepResult("fake", path, path.with_suffix(".json"), 1, 1, "complete")

    monkeypatch.setattr("edgeprof.rounds.sweep.run_sweep", fake)


@pytest.mark.parametrize("costs,code", [
    (CLAIM_HOLDS, 0),
    ({("pflego", "onnx"): lambda t: 0.01 + 0.15 * t, ("fedavg", "torch"): lambda t: 0.2}, 8),
])
def test_check_exit_code_follows_the_verdicts(monkeypatch, tmp_path, costs, code):
    _fake_sweep(monkeypatch, tmp_path, costs)

    result = CliRunner().invoke(app, ["sweep", *TINY, "--out", str(tmp_path), "--check"])

    assert result.exit_code == code, result.output
    if code:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("edgeprof: error: claim not shown:")
        assert "not flat" in lines[0] and "not linear" in lines[0]
    else:
        assert "check: pflego is flat and fedavg linear" in result.stdout


def _fit_rows(stdout: str, label: str) -> set[str]:
    """The algorithms of the fit table's rows whose metric is ``label`` (the ratio table's rows have two names)."""
    return {m.group(1) for m in re.finditer(rf"^│ (\S+)\s+│ {re.escape(label)}\s+│\s+\d", stdout, flags=re.M)}


def test_a_sweep_on_the_cpu_estimate_says_its_energy_verdict_is_an_estimate(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path / "sys"))  # no RAPL, no Jetson rails
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: as on this VM, the CPU-time estimate alone
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["sweep", *TINY, "--algos", "pflego,fedavg", "--device", "cpu", "--check",
                                      "--check-metric", "energy_j", "--out", str(out), "--run-name", "est"])

    assert result.exit_code in (0, 8), result.output  # a tiny sweep on a busy machine may not show the claim
    assert {r["energy_method"] for r in read_report(out / "est.csv").where(kind="client")} == {"estimate"}
    verdicts = [ln for ln in (result.stdout + result.stderr).splitlines()
                if ln.startswith(("check:", "edgeprof: error: claim not shown"))]
    assert len(verdicts) == 1 and "in energy_j (ESTIMATE)" in verdicts[0], result.output
    # the judged metric is shown, labelled an estimate on every row (a variant whose every window was shorter
    # than the estimate's update period has no energy fit: on a fast, quiet machine tiny rounds can be)
    assert _fit_rows(result.stdout, "energy_j (ESTIMATE)") in ({"pflego", "fedavg"}, {"pflego"}, {"fedavg"})
    energy_rows = re.findall(r"^│ \S+\s+│ (energy_j[^│]*?)\s+│", result.stdout, flags=re.M)
    assert energy_rows and set(energy_rows) == {"energy_j (ESTIMATE)"}, result.stdout


@pytest.mark.parametrize("method,label", [("counter", "energy_j (counter)"), ("estimate", "energy_j (ESTIMATE)")])
def test_a_check_on_energy_names_how_the_joules_were_obtained(monkeypatch, tmp_path, method, label):
    _fake_sweep(monkeypatch, tmp_path, CLAIM_HOLDS, method)

    result = CliRunner().invoke(app, ["sweep", *TINY, "--out", str(tmp_path), "--check", "--check-metric", "energy_j"])

    assert result.exit_code == 0, result.output
    assert f"check: pflego is flat and fedavg linear in tau ({label})" in result.stdout
    assert _fit_rows(result.stdout, label) == {"pflego", "pflego[torch-reuse]", "fedavg"}
    assert ("ESTIMATE" in result.output) == (method == "estimate")


def test_check_without_fedavg_is_refused_before_running(tmp_path):
    result = CliRunner().invoke(app, ["sweep", *TINY, "--algos", "pflego", "--check", "--out", str(tmp_path / "o")])

    assert result.exit_code == 2 and "--check needs both pflego and fedavg" in result.stderr
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


#: local work of one client round, as (backbone forward passes, numpy head steps), by algorithm and tau
LOCAL_WORK = {
    "pflego": lambda t: (1, t - 1), "fedrecon": lambda t: (1, t - 1),  # cached features (ONNX Runtime)
    "fedavg": lambda t: (t, 0), "fedprox": lambda t: (t, 0), "fedper": lambda t: (t, 0),
    "fedsim": lambda t: (t, 0), "fedbabu": lambda t: (t, 0), "fedrep": lambda t: (t + max(1, t // 10), 0),
    "ditto": lambda t: (2 * t, 0), "fedalt": lambda t: (2 * t, 0),
}


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_every_sweep_cell_runs_exactly_its_own_tau(algo, tmp_path, monkeypatch):
    """Cells of different tau interleave in one federation: each must do its own tau's local work."""
    from edgeprof.nn import head as headlib
    from edgeprof.nn.backbones import Backbone
    from edgeprof.rounds.sweep import SweepConfig, plan_cells, run_sweep

    counts = {"forward": 0, "head_steps": 0}
    forward, steps = Backbone.forward, headlib.gradient_steps

    def counting_forward(self, x):
        counts["forward"] += 1
        return forward(self, x)

    def counting_steps(head, feats, y, lr, n):
        counts["head_steps"] += n
        return steps(head, feats, y, lr, n)

    monkeypatch.setattr(Backbone, "forward", counting_forward)
    monkeypatch.setattr(headlib, "gradient_steps", counting_steps)
    base = RunConfig(dataset="synthetic", synthetic_classes=4, backbone="mlp", clients=1, participation=1.0,
                     out=tmp_path, progress=False, threads=1, run_name=f"count-{algo}")
    cfg = SweepConfig(base=base, algos=(algo,), taus=(3, 1, 12), repeats=2, samples_per_client=40)
    snapshots = []

    run_sweep(cfg, progress=lambda done, total: snapshots.append(dict(counts)))

    per_cell = [{k: after[k] - before[k] for k in counts} for before, after in zip(snapshots, snapshots[1:])]
    expected = [dict(zip(("forward", "head_steps"), LOCAL_WORK[algo](c.tau))) for c in plan_cells(cfg)]
    assert [c.tau for c in plan_cells(cfg)] != sorted(c.tau for c in plan_cells(cfg))  # taus interleave
    assert per_cell == expected


def _reference_sweep(monkeypatch, tmp_path: Path, name: str, idle: bool) -> Path:
    """Replace run_sweep by one whose report is a copy of a real GPU sweep (the H200 reference), its sidecar
    given the GPU's measured idle power (as with --idle-seconds) where ``idle``."""
    import torch

    path = gpu_reference(tmp_path / "report", name, idle_section(tmp_path / "sys", IDLE_W) if idle else None)

    def fake(cfg, progress=None, stage=None):
        return SweepResult(name, path, path.with_suffix(".json"), 1, 1, "complete")

    monkeypatch.setattr("edgeprof.rounds.sweep.run_sweep", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # torch sees the GPU the report was measured on
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    return path


@pytest.mark.parametrize("name,metric,idle,code,said", [
    ("gpu-check-cnn-omniglot", "gpu_j", True, 0, "check: pflego is flat and fedavg linear in tau (gpu_j (counter))"),
    ("gpu-check-cnn-cifar", "gpu_j", True, 8, "pflego on vm is inconclusive, not flat, in gpu_j (counter)"),
    ("gpu-check-cnn-omniglot", "gpu_j", False, 0, "check: pflego is flat and fedavg linear in tau (gpu_j (counter))"),
], ids=["omniglot-shown", "cifar-not-shown", "no-idle-baseline"])
def test_a_gpu_sweep_prints_and_checks_the_gpus_own_joules(monkeypatch, tmp_path, name, metric, idle, code, said):
    _reference_sweep(monkeypatch, tmp_path, name, idle)
    cols = reference_columns(name, IDLE_W)

    result = CliRunner().invoke(app, ["sweep", *TINY, "--out", str(tmp_path), "--check", "--check-metric", metric])

    assert result.exit_code == code, result.output
    assert said in (result.stderr if code else result.stdout)
    table = [ln for ln in result.stdout.splitlines() if "│ fedavg │ pflego │ gpu_j (counter)" in ln]
    assert len(table) == 1 and f"{geometric_ratio(cols, 'gpu_j', 50):.1f} [" in table[0]  # the ratio at tau=50
    net = [ln for ln in result.stdout.splitlines() if "fedavg" in ln and "gpu_net_j (counter, net of idle)" in ln]
    assert len(net) == (2 if idle else 0)
    assert ("GPU idle power: 106.3 W (gpu_0, measured over 5 s before the run)" in result.stdout) == idle
    assert ("GPU net of idle: not shown, the run measured no idle baseline" in result.stdout) == (not idle)
    assert "energy_j adds cpu_estimate_j (estimate) to it" in result.stdout


@pytest.mark.parametrize("method,label", [("counter", "energy_j (counter)"), ("estimate", "energy_j (ESTIMATE)")])
def test_the_sweeps_table_shows_the_energy_fits_without_check(monkeypatch, tmp_path, method, label):
    """The terminal's fit table has an energy row per variant, named with how its joules were obtained, also
    when no --check asks for energy (it showed only wall and CPU seconds)."""
    _fake_sweep(monkeypatch, tmp_path, CLAIM_HOLDS, method)

    result = CliRunner().invoke(app, ["sweep", *TINY, "--out", str(tmp_path)])

    assert result.exit_code == 0, result.output
    assert _fit_rows(result.stdout, label) == {"pflego", "pflego[torch-reuse]", "fedavg"}
    assert _fit_rows(result.stdout, "wall_s") == {"pflego", "pflego[torch-reuse]", "fedavg"}


def test_a_cpu_sweep_prints_no_gpu_figures(monkeypatch, tmp_path):
    _fake_sweep(monkeypatch, tmp_path, CLAIM_HOLDS)

    result = CliRunner().invoke(app, ["sweep", *TINY, "--out", str(tmp_path), "--check"])

    assert result.exit_code == 0, result.output
    assert "wall_s" in result.stdout and "gpu_j" not in result.stdout and "gpu_net_j" not in result.stdout
    assert "GPU" not in result.stdout


@pytest.mark.parametrize("args,said", [
    (["--check-metric", "gpu_j"], "--check-metric gpu_j judges the joules of rounds on a GPU, and this sweep runs on "
                                  "the CPU (--device auto is cpu here: torch sees no CUDA GPU); use --check-metric "
                                  "energy_j, or run on a GPU"),
    (["--check-metric", "gpu_net_j", "--device", "cpu"], "--check-metric gpu_net_j judges the joules of rounds on a "
                                                         "GPU, and this sweep runs on the CPU; use"),
    (["--check-metric", "gpu_net_j", "gpu"], "needs an idle baseline; add --idle-seconds 10"),
], ids=["gpu-j-on-the-cpu", "gpu-net-j-on-the-cpu", "gpu-net-j-without-idle-baseline"])
def test_a_check_on_a_gpu_metric_the_sweep_cannot_have_is_refused_before_any_cell_runs(monkeypatch, tmp_path, args,
                                                                                      said):
    import torch

    ran = []
    monkeypatch.setattr("edgeprof.rounds.sweep.run_sweep", lambda *a, **k: ran.append(1))
    if "gpu" in args:  # torch sees a GPU: only the idle baseline is missing
        args = [a for a in args if a != "gpu"]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)

    result = CliRunner().invoke(app, ["sweep", *TINY, "--out", str(tmp_path), "--check", *args])

    assert result.exit_code == 2 and said in " ".join(result.stderr.split()) and not ran
    assert not list(tmp_path.iterdir()), "nothing written"

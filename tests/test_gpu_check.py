"""scripts/gpu_check.py on a machine without a GPU: its help, its one-line refusal, and a dry run of every step."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_help_works_anywhere(tmp_path):
    done = _run("--help", cwd=tmp_path)
    assert done.returncode == 0 and "--out" in done.stdout and "--dry-run-on-cpu" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    done = _run("--out", str(tmp_path / "out"), cwd=tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("gpu_check: error: torch")
    assert "sees no CUDA GPU" in lines[0] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,message", [
    (["--taus", "5,x"], "--taus must be"), (["--repeats", "0"], "positive"),
    (["--trace-hz", "5000"], "--trace-hz must be in 1..1000"), (["--archive", "out.zip"], "must name a .tar.gz"),
    (["--sustain-seconds", "-1"], "must not be negative"), (["--profiler-rounds", "-1"], "must not be negative"),
    (["--sustain-seconds", "inf"], "argument --sustain-seconds: must be a finite number, got 'inf'"),
    (["--sustain-seconds", "nan"], "argument --sustain-seconds: must be a finite number, got 'nan'"),
    (["--idle-seconds", "nan"], "argument --idle-seconds: must be a finite number, got 'nan'"),
    (["--sample-hz", "inf"], "argument --sample-hz: must be a finite number"),
    (["--idle-seconds", "1e9"], "must be at most 3600"), (["--repeats", "x"], "invalid int value: 'x'")])
def test_bad_options_are_one_line(tmp_path, args, message):
    done = _run("--out", str(tmp_path), *args, cwd=tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr


#: what a CUDA PyTorch image (the GPU machines this script is for) lacks of edgeprof's requirements
ABSENT_ON_A_CUDA_IMAGE = ("pydantic", "codecarbon", "flwr", "plotly")

#: a sitecustomize that makes the modules unimportable in every Python process that starts with it on its path
BLOCKER = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
"""


@pytest.mark.slow
def test_a_dry_run_on_the_cpu_without_what_a_cuda_image_lacks_writes_every_figure(tmp_path):
    """The dry run where pydantic, codecarbon, flwr and plotly cannot be imported (as on the GPU machines): every
    step runs, the reports, traces, README and archive are written, and the README says it measured no GPU."""
    out, site = tmp_path / "out", tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(absent=set(ABSENT_ON_A_CUDA_IMAGE)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}  # gpu_check and its pytest
    check = subprocess.run([sys.executable, "-c", "import pydantic"], env=env, capture_output=True, text=True)
    assert "No module named 'pydantic'" in check.stderr, "the blocker must work for this test to mean anything"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--dry-run-on-cpu", "--taus", "1,3",
                           "--repeats", "2", "--samples", "40", "--sustain-seconds", "0.2", "--hold-seconds", "0.05",
                           "--profiler-rounds", "3", "--archive", str(tmp_path / "gc.tar.gz")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads((out / "gpu_check.json").read_text())
    assert figures["device"] == "cpu" and set(figures["backbones"]) == {"cnn-omniglot", "cnn-cifar"}
    assert figures["failed_steps"] == [] and figures["tests"]["failed"] == 0
    assert figures["tests"]["skipped"] == len(_module("gpu_cases").CHECKS)  # no GPU here: each check skipped
    assert [row["n"] for row in figures["head_rule"]["rows"]] == [10, 40, 160]
    for backbone, fig in figures["backbones"].items():
        assert (out / f"gpu-check-{backbone}.csv").is_file() and (out / f"gpu-check-{backbone}.trace.parquet").is_file()
        assert fig["tau_for_ratio"] == 3 and fig["ratio"]["wall_s"]["value"] > 0 and fig["taus"] == [1, 3]
        growth = fig["growth"]["fedavg"]["wall_s"]  # the sweep's verdict, by the documented rule on its interval
        assert growth["lo"] <= growth["value"] <= growth["hi"]
        assert growth["verdict"] == ("linear" if growth["lo"] >= 0.5 else
                                     "flat" if -0.2 <= growth["lo"] and growth["hi"] <= 0.2 else "inconclusive")
        assert set(fig["phases"]["pflego"]) == {"cache_forward", "head_steps", "joint_grad"}
        assert 0 < fig["floor_forward_s"] < fig["floor_forward_backward_s"]
        assert "gpu_j" not in fig["ratio"] and fig["gpu_method"] == []
        held = fig["sustained"]
        assert held["tau"] == 3 and held["pflego"]["rounds"] >= 3 and held["ratio_wall_s"] > 0
        assert "gpu_j" not in held["pflego"] and "ratio_gpu_j" not in held
        cost = fig["profiler_cost"]  # measured on the CPU with this machine's meters; the limit is not enforced
        assert (cost["tau"], cost["rounds"], cost["enforced"]) == (3, 3, False) and cost["meters"]
        for algo in ("pflego", "fedavg"):
            a = cost[algo]
            assert a["unprofiled_wall_s"] > 0 and a["profiled_wall_s"] > 0 and a["overhead_wall_s"] >= 0
            assert a["difference"] == pytest.approx(a["profiled_wall_s"] / a["unprofiled_wall_s"] - 1, rel=1e-12)
            assert a["passed"] == (a["difference"] <= cost["limit"])
            walls = a["walls_s"]  # each kind's rounds, pass by pass; the paired figure from the same passes
            assert len(walls["unprofiled"]) == len(walls["profiled"]) == 3 and a["warmup_passes"] >= 2
            assert a["paired_difference"] == pytest.approx(
                statistics.median(p / u for p, u in zip(walls["profiled"], walls["unprofiled"])) - 1, rel=1e-12)
            assert a["profiled_wall_s"] == pytest.approx(statistics.median(walls["profiled"]), rel=1e-12)
            assert f"{algo} round at tau=3, unprofiled / profiled (median of 3 each, interleaved" in done.stdout
        floor = cost["pflego"]["unprofiled_wall_s"] / fig["floor_forward_backward_s"]
        assert f"PFLEGO round unprofiled / forward+backward: {floor:.2f}x" in done.stdout
    readme = (out / "README.md").read_text()
    assert readme.startswith("# DRY RUN ON THE CPU: no figure here measures a GPU")
    assert "| FedAvg/PFLEGO per round at tau=3, wall |" in readme and "no NVML joules in the report" in readme
    assert "plotly is not installed" in done.stdout and "FedAvg/PFLEGO per round at tau=3" in done.stdout
    with tarfile.open(tmp_path / "gc.tar.gz") as tar:
        names = set(tar.getnames())
        tar.extractall(tmp_path / "back", filter="data")
    assert {"out/README.md", "out/gpu_check.json", "out/gpu-check-cnn-cifar.csv",
            "out/gpu-check-cnn-omniglot.trace.parquet"} <= names
    # back where plotly is installed, docs/gpus.md's dashboard command draws the unpacked folder
    pytest.importorskip("plotly")
    from typer.testing import CliRunner

    from edgeprof.cli import app

    back = tmp_path / "back" / "out"
    drawn = CliRunner().invoke(app, ["dashboard", str(back / "gpu-check-cnn-omniglot.csv"),
                                     str(back / "gpu-check-cnn-cifar.csv"), "--out", str(back), "--name",
                                     "dashboard", "--title", "edgeprof GPU check"])
    assert drawn.exit_code == 0, drawn.output
    assert "edgeprof GPU check" in (back / "dashboard.html").read_text()


def _module(name: str = "gpu_check"):
    """The script, or the checks next to it (``gpu_cases``), imported from scripts/."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SCRIPT.with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_power_integral_over_a_window_interpolates_its_edges():
    """Power 100 W until t=10.5, then 300 W: over [10.25, 11.0] the samples at 0.1 s steps integrate exactly to the
    piecewise-linear area (the edges interpolated between the samples around them)."""
    check = _module()
    samples = [(10.0 + 0.1 * i, 100.0 if 10.0 + 0.1 * i <= 10.5 + 1e-9 else 300.0, math.nan, 50.0)
               for i in range(21)]

    joules, inside = check.integral_j(samples, 10.25, 11.0)

    # 100 W to 10.5, a ramp 10.5 -> 10.6 (mean 200 W), 300 W from 10.6 to 11.0
    assert inside == 8 and joules == pytest.approx(100 * 0.25 + 200 * 0.1 + 300 * 0.4, rel=1e-9)
    assert check.integral_j(samples, 20.0, 21.0)[1] == 0
    assert math.isnan(check.integral_j(samples, 10.25, 11.0, column=2)[0]), "no instant power: no integral"


def test_the_instant_power_is_integrated_where_the_gpu_answers_it_and_only_those_samples():
    check = _module()
    samples = [(float(t), 100.0, 200.0 if t % 2 == 0 else math.nan, 0.0) for t in range(11)]  # instant every 2 s
    assert check.integral_j(samples, 1.0, 9.0, column=2) == (pytest.approx(200.0 * 8), 4)


def test_a_failing_step_is_recorded_and_the_others_still_write_their_files(tmp_path, monkeypatch):
    """The head-steps step fails: the run goes on to the sweeps, exits 1, and the JSON and README name the step."""
    check = _module()

    def broken(*args):
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(check, "head_rule", broken)
    out = tmp_path / "out"
    code = check.main(["--out", str(out), "--dry-run-on-cpu", "--skip-tests", "--taus", "1,2", "--repeats", "1",
                       "--samples", "20", "--sustain-seconds", "0", "--trace-hz", "0", "--profiler-rounds", "0"])

    result = json.loads((out / "gpu_check.json").read_text())
    assert code == 1 and result["failed_steps"] == ["head_rule"]
    assert result["errors"]["head_rule"] == "RuntimeError: no kernel image is available for execution on the device"
    assert set(result["backbones"]) == {"cnn-omniglot", "cnn-cifar"} and "error" not in result["backbones"]["cnn-cifar"]
    assert "Failed steps: head_rule (RuntimeError: no kernel image" in (out / "README.md").read_text()


@pytest.mark.parametrize("profiled_s,passed", [(0.1015, True), (0.1025, False), (0.0990, True)],
                         ids=["1.5%-slower", "2.5%-slower", "faster"])
def test_a_profiled_round_more_than_two_percent_slower_than_unprofiled_fails(profiled_s, passed):
    check = _module()

    verdict = check.profiler_verdict(0.1, profiled_s)

    assert verdict == {"difference": pytest.approx(profiled_s / 0.1 - 1, rel=1e-12), "passed": passed}
    cost = {"tau": 50, "pflego": verdict, "fedavg": check.profiler_verdict(0.1, 0.1)}
    if passed:
        check.check_profiler_cost(cost)
    else:
        with pytest.raises(RuntimeError, match=r"more than 2% slower .* at tau=50: pflego \+2\.5%$"):
            check.check_profiler_cost(cost)


def test_on_a_gpu_the_profilers_cost_fails_the_run_where_a_round_is_over_the_limit(fake_gpu, tmp_path, monkeypatch):
    """main() as on a GPU machine, the profiler's cost measured, then given as PFLEGO 1.5% and FedAvg 2.5% slower
    profiled: FedAvg's fails its step on both backbones, the run exits 1, and the JSON and README say why."""
    check = _module()
    measured = check.profiler_cost

    def given(*args):
        cost = measured(*args)
        for algo, profiled in (("pflego", 1.015), ("fedavg", 1.025)):
            cost[algo].update(unprofiled_wall_s=1.0, profiled_wall_s=profiled, **check.profiler_verdict(1.0, profiled))
        return cost

    monkeypatch.setattr(check, "profiler_cost", given)
    out = tmp_path / "out"
    code = check.main(["--out", str(out), "--skip-tests", "--taus", "1,2", "--repeats", "1", "--samples", "20",
                       "--idle-seconds", "0", "--sustain-seconds", "0", "--hold-seconds", "0", "--trace-hz", "0",
                       "--profiler-rounds", "1"])

    result = json.loads((out / "gpu_check.json").read_text())
    assert code == 1 and result["failed_steps"] == ["profiler within 2% cnn-omniglot", "profiler within 2% cnn-cifar"]
    assert result["errors"]["profiler within 2% cnn-cifar"].endswith("at tau=2: fedavg +2.5%")
    cost = result["backbones"]["cnn-omniglot"]["profiler_cost"]
    assert cost["enforced"] and any(m.startswith("gpu") and "(counter)" in m for m in cost["meters"]), cost["meters"]
    readme = (out / "README.md").read_text()
    assert "1 / 1.015 s: +1.5% (within the 2% limit) |" in readme
    assert "1 / 1.025 s: +2.5% (OVER the 2% limit) |" in readme


@pytest.mark.slow
def test_sigterm_as_from_timeout_stops_it_with_every_file_written_and_the_stop_named(tmp_path):
    """Under ``timeout`` the run gets SIGTERM: it stops in its first sweep, writes the JSON (saying how it stopped),
    README and archive with the sweep's finished cells, and exits 143."""
    import signal

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen([sys.executable, str(SCRIPT), "--out", str(out), "--dry-run-on-cpu", "--skip-tests",
                            "--taus", "1,2", "--repeats", "3", "--samples", "20", "--hold-seconds", "0.3",
                            "--idle-seconds", "0.2", "--archive", str(tmp_path / "gc.tar.gz")], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in run.stdout:
        seen.append(line)
        if line.startswith("4. sweep on"):
            time.sleep(2.0)  # a few held windows in
            run.send_signal(signal.SIGTERM)
            break
    rest, _ = run.communicate(timeout=120)
    output = "".join(seen) + rest

    assert run.returncode == 143, output
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["stopped"] == "interrupted (SIGTERM)" and "Traceback" not in output
    assert "STOPPED EARLY: interrupted (SIGTERM)" in (out / "README.md").read_text()
    with tarfile.open(tmp_path / "gc.tar.gz") as tar:
        assert "out/gpu-check-cnn-omniglot.csv" in tar.getnames()  # the interrupted sweep's finished cells
    assert json.loads((out / "gpu-check-cnn-omniglot.json").read_text())["status"].startswith("interrupted")


def test_a_held_windows_counter_is_compared_with_the_power_over_the_whole_window():
    """Rows of held windows (each the mean of its rounds) against a GPU whose power rises linearly, 100 W + 20 W/s:
    each window's counter joules (its rounds') over the samples' exact trapezoid over the whole window is 1; taken
    as one round's joules over the last round's span it would not be (the power rose meanwhile)."""
    check = _module()

    def energy(t: float) -> float:  # joules drawn since t = 0
        return 100.0 * t + 10.0 * t * t

    samples = [(0.01 * i, 100.0 + 0.2 * i, 100.0 + 0.2 * i, 50.0) for i in range(1001)]  # 100 Hz over 10 s
    rows = []
    for start, rounds in ((1.0, 4), (3.0, 1), (5.5, 7)):
        end = start + 0.5 * rounds  # rounds of 0.5 s
        rows.append({"timestamp_s": f"{end:.3f}", "wall_s": "0.5", "held_rounds": "" if rounds == 1 else str(rounds),
                     "gpu_j": f"{(energy(end) - energy(start)) / rounds:.9g}"})
    sampler = types.SimpleNamespace(samples=samples, counter=[(0.0, 0.0), (10.0, energy(10.0))])

    spans = check.window_spans(rows)
    figures = check._nvml_figures(rows, sampler)

    assert [(a, b) for a, b, _ in spans] == [pytest.approx((1.0, 3.0)), pytest.approx((3.0, 3.5)),
                                             pytest.approx((5.5, 9.0))]
    for power in ("average", "instant"):
        entry = figures["counter_over_integral"][power]
        assert entry["windows"]["n"] == 3
        assert entry["windows"]["min"] == pytest.approx(1.0, abs=1e-8)
        assert entry["windows"]["max"] == pytest.approx(1.0, abs=1e-8)
        assert entry["whole_sweep"]["ratio"] == pytest.approx(1.0, abs=1e-12)


def _live_gpu(watts: float, **rest) -> dict:
    """One GPU of a fake pynvml drawing ``watts`` since now: its counter follows the wall clock."""
    start = time.time()

    class Live(dict):
        def __getitem__(self, key):
            if key == "energy_mj":
                return int((time.time() - start) * watts * 1000)
            return super().__getitem__(key)

    return Live(energy_mj=0, power_mw=int(watts * 1000), instant_mw=int(watts * 1000), util=37,
                limit_mw=700_000, name="Fake H100", bus_id="00000000:17:00.0",
                uuid="GPU-A1B2C3D4-0000-1111-2222-333344445555", **rest)


def _fake_pynvml(gpus):
    from fixtures_sysfs import fake_pynvml

    mod = fake_pynvml(gpus)
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h]["bus_id"].encode())
    mod.nvmlDeviceGetUUID = lambda h: gpus[h]["uuid"]
    return mod


def test_the_sampler_reads_average_and_instant_power_utilisation_and_the_counter_at_both_ends():
    check = _module()
    gpu = _live_gpu(150.0)
    nvml = _fake_pynvml([gpu])
    with check.NvmlSampler(nvml, 0, hz=200) as sampler:
        time.sleep(0.1)
    assert len(sampler.samples) >= 5 and sampler.error is None
    assert {s[1:] for s in sampler.samples} == {(150.0, 150.0, 37.0)}
    (t0, j0), (t1, j1) = sampler.counter
    assert j1 - j0 == pytest.approx(150.0 * (t1 - t0), abs=0.002 + 150 * 0.002)  # mJ steps, reads ~1 ms apart


def test_a_gpu_without_instant_power_or_utilisation_is_sampled_with_what_it_answers():
    check = _module()
    gpu = {"energy_mj": None, "power_mw": 80_000}
    nvml = _fake_pynvml([gpu])
    nvml.nvmlDeviceGetUtilizationRates = lambda h: (_ for _ in ()).throw(nvml.NVMLError(3))
    with check.NvmlSampler(nvml, 0, hz=200) as sampler:
        time.sleep(0.05)
    assert sampler.samples and all(s[1] == 80.0 and math.isnan(s[2]) and math.isnan(s[3]) for s in sampler.samples)
    assert sampler.counter == [], "no energy counter: nothing to read at the ends"
    gpu["power_mw"] = None  # the power stops answering: the samples end, and say why
    with check.NvmlSampler(nvml, 0, hz=200) as sampler:
        time.sleep(0.02)
    assert sampler.samples == [] and sampler.error == "nvmlDeviceGetPowerUsage failed"


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch sees one CUDA GPU (faked at torch.cuda's function boundary, as in tests/test_compute.py) whose device
    kind keeps its tensors in host memory, and pynvml is a fake whose GPU draws 150 W: every step of the script
    runs as it would on a GPU machine, and the NVML figures have a known answer."""
    import torch

    from edgeprof.nn import compute as computelib
    from edgeprof.nn.cuda import CudaKind

    props = types.SimpleNamespace(name="Fake H100", total_memory=80 * 2**30, multi_processor_count=132, major=9,
                                  minor=0, uuid=None, pci_domain_id=0, pci_bus_id=0x17, pci_device_id=0)
    for name, value in {"is_available": lambda: True, "device_count": lambda: 1, "is_initialized": lambda: False,
                        "current_device": lambda: 0, "get_device_properties": lambda *a: props,
                        "synchronize": lambda *a: None, "reset_peak_memory_stats": lambda *a: None,
                        "max_memory_allocated": lambda *a: 2**20,
                        "memory_stats_as_nested_dict": lambda *a: {"allocated_bytes": {"all": {"peak": 2**20}}},
                        "mem_get_info": lambda *a: (79 * 2**30, 80 * 2**30)}.items():
        monkeypatch.setattr(torch.cuda, name, value)

    class HostBackedCuda(CudaKind):
        def torch_device(self, device):
            return torch.device("cpu")

        def to_device(self, t, device):
            return t.clone()

        def place_module(self, module, device):
            return module

    monkeypatch.setitem(computelib.DEVICE_KINDS, "cuda", HostBackedCuda())
    gpu = _live_gpu(150.0)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([gpu]))
    return gpu


@pytest.mark.slow
@pytest.mark.parametrize("period,hold", [(0.1, 0.15), (60.0, 0.0)], ids=["held", "every-window-short"])
def test_a_rehearsal_on_a_fake_gpu_runs_every_step_and_its_counter_agrees_with_its_power(fake_gpu, tmp_path,
                                                                                         monkeypatch, period, hold):
    """main() as on a GPU machine (device cuda, NVML found, sampled and read by the sweep's meter): the GPU's
    description, idle power, NVML joules per round (counter), their ratio and the counter against the integral
    of the power samples, which for a GPU drawing a constant 150 W must agree. With NVML's 100 ms counter and
    windows held 0.15 s every window is resolved; with a counter updating every minute and no hold every window
    is short: no NVML ratio or verdict is drawn from the rounds, and the sustained figure stands."""
    from edgeprof.meters.nvml import NvmlMeter

    monkeypatch.setattr(NvmlMeter, "update_period_s", period)
    check = _module()
    monkeypatch.setattr(check, "PROFILER_LIMIT", math.inf)  # no wall-time limit on this noisy host-backed "GPU"
    out = tmp_path / "gpu-h100"
    code = check.main(["--out", str(out), "--skip-tests", "--taus", "1,3", "--repeats", "2", "--samples", "40",
                       "--idle-seconds", "0.2", "--sample-hz", "200", "--sustain-seconds", "0.3", "--hold-seconds", str(hold),
                       "--profiler-rounds", "2", "--archive", str(tmp_path / "gc.tar.gz")])

    result = json.loads((out / "gpu_check.json").read_text())
    assert code == 0 and result["failed_steps"] == [], result.get("errors")
    env = result["environment"]
    assert (env["gpu"], env["driver"], env["cuda_driver"], env["power_limit_w"]) == ("Fake H100", "580.00.00",
                                                                                     "13.0", 700.0)
    assert env["energy_counter"] is True and env["instant_power_field"] is True
    assert result["idle_power_w"] == 150.0 and result["head_rule"]["rule"] == "torch on the device"
    for backbone, fig in result["backbones"].items():
        assert fig["gpu_method"] == ["counter"], backbone
        if not hold:
            assert fig["short_windows"] == fig["rounds"] and "gpu_j" not in fig["ratio"]
            claim = fig["claim"]["gpu_j"]
            assert not claim["shown"] and any("pflego" in p and "not resolved" in p for p in claim["problems"])
            assert fig["growth"]["pflego"]["gpu_j"]["verdict"] == "inconclusive"
            assert math.isnan(fig["pflego_gpu_j"])
        else:
            assert fig["short_windows"] == 0 and fig["ratio"]["gpu_j"]["value"] > 0
            # the round's GPU joules are the counter's: 150 W over the window
            for algo in ("pflego", "fedavg"):
                assert fig[f"{algo}_gpu_j"] == pytest.approx(150.0 * fig[f"{algo}_wall_s"], rel=0.05, abs=0.02)
        assert fig["gpu_util_in_windows_pct"] == 37.0
        held = fig["sustained"]
        for algo in ("pflego", "fedavg"):  # one counter reading over >= 0.3 s of rounds: 150 W, to the mJ
            assert held[algo]["power_w"] == pytest.approx(150.0, rel=0.01), (backbone, algo, held)
            assert held[algo]["gpu_j"] == pytest.approx(150.0 * held[algo]["wall_s"], rel=0.01)
        assert held["ratio_gpu_j"] == pytest.approx(held["ratio_wall_s"], rel=0.02)
        cost = fig["profiler_cost"]  # the profiled windows read NVML, as a run's do
        assert cost["enforced"] and any(m.startswith("gpu") and "(counter)" in m for m in cost["meters"])
        assert all(cost[algo]["passed"] and cost[algo]["profiled_wall_s"] > 0 for algo in ("pflego", "fedavg"))
        for power in ("average", "instant"):
            whole = fig["counter_over_integral"][power]["whole_sweep"]
            assert whole["ratio"] == pytest.approx(1.0, abs=0.01), (backbone, power, whole)
        # the sweep measured the GPU's idle power (150 W, as it draws throughout), so net of idle is about nothing
        assert fig["sweep_idle"]["power_w"] == pytest.approx(150.0, rel=0.01)
        if hold:
            for algo in ("pflego", "fedavg"):
                assert abs(fig[f"{algo}_gpu_net_j"]) <= 0.05 * fig[f"{algo}_gpu_j"] + 0.02, (backbone, algo)
        # the trace's GPU power: the 150 W it drew, under the 700 W limit, nothing flagged
        power = fig["trace_power"]
        assert power["intervals"] > 0 and power["limit_w"] == 700.0 and power["flagged"] == 0
        assert power["over_limit_unflagged"] == 0 and 100.0 <= power["min_w"] <= power["max_w"] <= 200.0
        met = {what: ok for what, _, ok in check.targets(fig)}
        assert met["no trace power above the power limit unflagged"] is True
    readme = (out / "README.md").read_text()
    assert readme.startswith("# GPU reference: Fake H100") and "580.00.00" in readme and "700 W" in readme
    if not hold:
        assert "NVML joules | not resolved: 8 of 8 windows shorter than NVML's update period" in readme
    else:
        assert "NVML joules (counter)" in readme
    assert "NVML energy counter / integral of its instant power" in readme
    assert "| sustained: rounds back to back at tau=3 for 0.3 s, one counter reading |" in readme
    assert "| target: no trace power above the power limit unflagged | MET: 0 unflagged above 700 W" in readme
    idle_row = re.search(r"\| the GPU's idle power the sweep measured \(gpu_net_j = gpu_j - idle W x wall_s\) \| "
                         r"([0-9.]+) W \|", readme)
    assert idle_row and float(idle_row[1]) == pytest.approx(150.0, rel=0.01), idle_row  # the counter's 150 W


def _trace_report(tmp_path: Path, watts: list[tuple[float, str, int]]) -> Path:
    """A sweep's report (CSV, sidecar) and its trace, written by the production writer (Parquet, as a run writes
    it where pyarrow is installed): one client window whose GPU intervals (column ``gpu``) have ``watts``
    (w, flag, resolved), and one CPU-estimate interval beside them."""
    from edgeprof.report.trace_file import TraceWriter, trace_csv_path
    from edgeprof.results import TraceRow

    tmp_path.mkdir(parents=True, exist_ok=True)
    csv_path = tmp_path / "gpu-check-mlp.csv"
    csv_path.write_text("run_id,kind\nr,client\n")
    trace = TraceWriter(trace_csv_path(csv_path), 50.0)
    rows = [TraceRow(0.02 * (i + 1), 0.02, "", "gpu_0", "gpu", True, w, "counter", False, bool(resolved), flag)
            for i, (w, flag, resolved) in enumerate(watts)]
    rows.append(TraceRow(0.02, 0.02, "", "cpu_estimate", "cpu_estimate", True, 900.0, "estimate", False))
    trace.write_window(rows, {"run_id": "r", "algo": "pflego", "tau": 5, "round": 0, "kind": "client", "client": 0},
                       0, window="client")
    csv_path.with_suffix(".json").write_text(json.dumps({"trace": trace.finish()}))
    return csv_path


def test_the_traces_gpu_power_is_ranged_against_the_limit_and_an_unflagged_reading_over_it_fails(tmp_path):
    """trace_power reads the trace the sweep wrote: the range of the GPU's unflagged watts (all, and the resolved
    ones), the flagged intervals apart, and every unflagged one above the power limit counted; one such fails the
    check and misses the target, flagged ones above it do not."""
    check = _module()
    flagged = [(120.0, "", 1), (95.0, "", 0), (5928.0, "above the 700 W power limit", 1), (410.0, "", 1)]
    power = check.trace_power(_trace_report(tmp_path / "a", flagged), 700.0)
    assert (power["intervals"], power["min_w"], power["max_w"]) == (4, 95.0, 410.0)
    assert (power["resolved"], power["resolved_min_w"], power["resolved_max_w"]) == (2, 120.0, 410.0)
    assert power["flagged"] == 1 and power["flags"] == ["above the 700 W power limit"]
    assert power["over_limit_unflagged"] == 0
    check.check_trace_power(power)  # flagged: nothing to fail

    unflagged = check.trace_power(_trace_report(tmp_path / "b", [(120.0, "", 1), (701.5, "", 1)]), 700.0)
    assert unflagged["over_limit_unflagged"] == 1 and unflagged["max_w"] == 701.5
    with pytest.raises(RuntimeError, match="1 interval\\(s\\) of the GPU's power above its 700 W limit carry no flag"):
        check.check_trace_power(unflagged)
    fig = {"trace_power": unflagged, "growth": {}, "ratio": {}, "tau_for_ratio": 50}
    assert dict((what, ok) for what, _, ok in check.targets(fig))[
        "no trace power above the power limit unflagged"] is False


@pytest.mark.parametrize("difference,ratio,verdict,floor,met", [
    (0.012, 31.0, "flat", 1.25, True), (0.025, 31.0, "flat", 1.25, False), (0.012, 29.9, "flat", 1.25, False),
    (0.012, 31.0, "inconclusive", 1.25, False), (0.012, 31.0, "flat", 1.31, False)],
    ids=["all-met", "profiler-over", "ratio-under", "not-flat", "over-the-floor"])
def test_each_target_is_met_only_on_its_side_of_the_issues_bound(difference, ratio, verdict, floor, met):
    """The Done-when bounds: profiler under 2%, FedAvg/PFLEGO at least 30x, PFLEGO flat, round at most 1.3x its
    floor; one figure on the wrong side misses its own target and no other."""
    check = _module()
    good = {"profiler": 0.012, "ratio": 31.0, "verdict": "flat", "floor": 1.25}
    given = {"profiler": difference, "ratio": ratio, "verdict": verdict, "floor": floor}
    growth = {"value": 0.05, "lo": -0.02, "hi": 0.12, "verdict": given["verdict"]}
    fig = {"tau_for_ratio": 50, "profiler_cost": {"pflego": {"difference": given["profiler"]}},
           "growth": {"pflego": {"wall_s": growth, "gpu_j": growth}},
           "ratio": {m: {"value": given["ratio"], "lo": given["ratio"] - 1, "hi": given["ratio"] + 1}
                     for m in ("wall_s", "gpu_j")},
           "pace": {"round_over_floor": given["floor"]},
           "trace_power": {"over_limit_unflagged": 0, "limit_w": 700.0, "max_w": 310.0, "flagged": 0}}
    result = check.targets(fig)
    assert len(result) == 7 and all(ok is not None for _, _, ok in result)
    assert all(ok for _, _, ok in result) is met
    off = {k for k in good if good[k] != given[k]}
    names = {"profiler": "profiler", "ratio": "FedAvg/PFLEGO", "verdict": "PFLEGO flat", "floor": "floor"}
    for what, _, ok in result:
        if "trace" in what:
            continue
        assert ok is not any(names[k] in what for k in off), what


@pytest.mark.parametrize("tau", [1, 5, 100])
def test_the_pace_figures_follow_from_the_flops_and_the_times(tau):
    """Each pass's TFLOP/s is its FLOPs over its seconds, as a share of the peak and of the measured GEMM; the
    ratio's limit is tau*(F+B) / (F + F+B + (tau-1) head steps); the round is set against forward + forward+backward;
    the printed lines carry those figures."""
    check = _module()
    flops = {"forward": 2e12, "forward_backward": 6e12, "head_step": 1e9}
    fig = {"tau_for_ratio": tau, "floor_forward_s": 0.5, "floor_forward_backward_s": 1.5,
           "ratio": {"wall_s": {"value": 3.5}}, "head_share": {"tau": 100, "share": 0.04},
           "profiler_cost": {"pflego": {"unprofiled_wall_s": 2.5}, "fedavg": {"unprofiled_wall_s": 1.2 * tau}}}

    got = check.pace(fig, flops, gemm={"tflops": 8.0}, peak={"tflops": 16.0, "how": "datasheet"})

    forward = got["passes"]["forward"]
    assert (forward["tflops"], forward["of_peak"], forward["of_gemm"]) == pytest.approx((4.0, 0.25, 0.5))
    assert got["passes"]["forward+backward"]["tflops"] == pytest.approx(4.0)
    pflego = got["passes"][f"PFLEGO round at tau={tau}"]
    assert pflego["flops"] == pytest.approx(8e12 + (tau - 1) * 1e9) and pflego["seconds"] == 2.5
    assert got["passes"][f"FedAvg round at tau={tau}"]["tflops"] == pytest.approx(6.0 / 1.2)
    assert got["ratio_limit"] == pytest.approx(tau * 6e12 / (8e12 + (tau - 1) * 1e9))
    assert got["round_over_floor"] == pytest.approx(2.5 / 2.0)
    lines = dict(check.pace_lines(got))
    assert lines["pace: forward"].startswith("4 TFLOP/s") and "25.0% of FP32 peak, 50.0% of the measured GEMM" in \
        lines["pace: forward"]
    assert lines["pace: head steps' share of the PFLEGO round at tau=100"] == "4.00% (target under 5%)"
    limit = lines[f"pace: FedAvg/PFLEGO at tau={tau}, limit by FLOPs tau*(F+B)/(F + F+B + head) / measured"]
    assert limit == f"{got['ratio_limit']:.3g}x / 3.5x"


def test_the_measured_gemm_and_the_peak_come_from_the_device(monkeypatch):
    """On the CPU (the dry run): the GEMM is timed on a GEMM_N['cpu'] matrix and its rate is 2 n^3 / seconds; the
    peak is edgeprof.hardware.peak's, with how it was obtained."""
    check = _module()
    monkeypatch.setitem(check.GEMM_N, "cpu", 64)

    gemm, peak = check.measured_gemm("cpu", repeats=2), check.fp32_peak("cpu")

    assert gemm["n"] == 64 and gemm["tflops"] == pytest.approx(2 * 64**3 / gemm["seconds"] / 1e12)
    assert peak["tflops"] > 0 and "FP32 peak" in peak["how"]


@pytest.mark.parametrize("backbone", ["cnn-omniglot", "cnn-cifar"])
def test_the_h100_references_figures_follow_from_its_committed_reports(backbone):
    """profiles/reference/gpu-h100-2/: the ratios, growths, claims and the trace's power range that gpu_check.json
    holds (and its README quotes) are made again here from the committed reports and traces, by the same code."""
    check = _module()
    folder = ROOT / "profiles" / "reference" / "gpu-h100-2"
    stored = json.loads((folder / "gpu_check.json").read_text())
    want = stored["backbones"][backbone]
    csv_path = folder / f"gpu-check-{backbone}.csv"

    fig = check.figures(csv_path, None, tuple(want["taus"]))

    for metric in ("wall_s", "gpu_j", "gpu_net_j"):
        assert fig["ratio"][metric]["value"] == pytest.approx(want["ratio"][metric]["value"], rel=1e-9), metric
        for algo in ("pflego", "fedavg"):
            got, stored_growth = fig["growth"][algo][metric], want["growth"][algo][metric]
            assert got["verdict"] == stored_growth["verdict"], (algo, metric)
            assert [got[k] for k in ("value", "lo", "hi")] == pytest.approx(
                [stored_growth[k] for k in ("value", "lo", "hi")], rel=1e-9)
    assert fig["claim"] == want["claim"] and fig["sweep_idle"] == want["sweep_idle"]
    power = check.trace_power(csv_path, stored["environment"]["power_limit_w"])
    assert power == want["trace_power"] and power["over_limit_unflagged"] == 0
    assert {w: ok for w, _, ok in check.targets(want)}["PFLEGO flat over tau in gpu_j"] is True

"""The CLI: bad input gets one clear line and a non-zero exit, no traceback, no report written."""

from __future__ import annotations

import dataclasses
import gzip
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.report.writer import read_report

FAST = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp", "--clients", "4",
        "--rounds", "1", "--tau", "2", "--no-progress"]


def _invoke(args, out: Path):
    return CliRunner().invoke(app, ["measure", *args, "--out", str(out)])


def _write_corrupt_mnist(folder: Path) -> Path:
    folder.mkdir()
    (folder / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(struct.pack(">I", 1234) + b"junk"))
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"junk"))
    return folder


@pytest.mark.parametrize("args,expected", [
    (["--algo", "fedfoo"], "unknown algorithm 'fedfoo'"),
    (["--tau", "0"], "tau must be an integer >= 1"),
    (["--participation", "0"], "participation must be in (0, 1]"),
    (["--participation", "1.5"], "participation must be in (0, 1]"),
    (["--backbone", "resnet"], "unknown backbone"),
    (["--dataset", "mnist", "--data-dir", "/nonexistent/mnist"], "/nonexistent/mnist"),
    (["--run-name", "../escape"], "run name"),
    (["--test-fraction", "1"], "test fraction must be in (0, 1)"),
])
def test_bad_input_is_one_line_and_non_zero(tmp_path, args, expected):
    out = tmp_path / "profiles"

    result = _invoke([*(FAST[6:] if "--dataset" in args else FAST), *args], out)  # FAST[6:]: no synthetic options

    assert result.exit_code != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error:"), result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.output
    assert not out.exists()  # refused before its report: no folder left behind either


def test_the_test_fraction_is_the_measure_option_of_its_name(tmp_path):
    # Execute: the same run keeping 25% (the default) and 50% of each class for test
    kept = {}
    for fraction in (None, "0.5"):
        out = tmp_path / str(fraction)
        result = _invoke([*FAST, *(["--test-fraction", fraction] if fraction else []), "--run-name", "r"], out)
        assert result.exit_code == 0, result.output
        report = read_report(out / "r.csv")
        kept[fraction] = (report.sidecar["config"]["test_fraction"],
                          [(r["client"], int(r["n_samples"])) for r in report.where(kind="client")])
    # Verify: the sidecar records it, and the same client trains on fewer samples when it keeps more for test
    assert kept[None][0] == 0.25 and kept["0.5"][0] == 0.5
    [(client, n_quarter)], [(same, n_half)] = kept[None][1], kept["0.5"][1]
    assert client == same and n_half < n_quarter


@pytest.mark.parametrize(("argv", "hz"), [([], 10), (["--meter-setting", "jetson_hz=20"], 20),
                                         (["--jetson-hz", "5"], 5), (["--jetson-hz", "5", "--meter-setting",
                                                                      "jetson_hz=20"], 5)])
def test_a_meter_setting_is_not_overridden_by_an_option_left_at_its_default(tmp_path, monkeypatch, argv, hz):
    from fixtures_sysfs import build_jetson

    build_jetson(tmp_path, "orin_nano")
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path))

    result = CliRunner().invoke(app, ["doctor", *argv])

    # the option given wins over --meter-setting; left out, the setting stands; neither: the back-end's default
    assert result.exit_code == 0, result.output
    assert f"sampling:      {hz:g} Hz" in result.stdout


@pytest.mark.parametrize("command", ["summary", "dashboard"])
def test_a_glob_that_takes_a_reports_trace_csv_reads_the_report_and_a_trace_alone_is_one_line(tmp_path, command):
    # Prepare: a report and, beside it, the trace CSV an interrupted traced run leaves (its parquet never written)
    if command == "dashboard":
        pytest.importorskip("plotly")  # the dashboard extra (a plain install has none)
    assert _invoke([*FAST, "--run-name", "r"], tmp_path).exit_code == 0
    trace = tmp_path / "r.trace.csv"
    trace.write_text("run_id,algo,tau,round,kind,client,window,phase,t_s,dt_s,domain,column,in_total,w,method\n")
    page = ["--out", str(tmp_path / "page")] if command == "dashboard" else []

    # Execute: as `edgeprof summary profiles/*.csv` gives them, and the trace alone
    both = CliRunner().invoke(app, [command, str(tmp_path / "r.csv"), str(trace), *page])
    alone = CliRunner().invoke(app, [command, str(trace), *page])

    # Verify
    assert both.exit_code == 0, both.output
    assert f"edgeprof: note: left out {trace}: the power trace of {tmp_path / 'r.csv'}" in both.stderr
    assert alone.exit_code == 7
    assert _one_error_line(alone).endswith(f"{trace} is the power trace of {tmp_path / 'r.csv'}, not a report: give "
                                           f"{tmp_path / 'r.csv'} (edgeprof trace {tmp_path / 'r.csv'} prints its "
                                           "trace)")


def _one_error_line(result) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error:"), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


#: a case about a machine without a CUDA GPU (this one, CI's), skipped on one that has a GPU
NEEDS_NO_GPU = pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA GPU")


def _report_file(tmp_path: Path) -> str:
    path = tmp_path / "not-a-report.csv"
    path.write_text("a,b\n1,2\n")
    return str(path)


@pytest.mark.parametrize("argv,code,expected", [
    (["measure", *FAST, "--tau", "0"], 2, "tau must be an integer >= 1"),
    (["measure", *FAST, "--tau", "abc"], 2, "Invalid value for '--tau'"),
    (["measure", *FAST, "--execution", "nchw:64"], 2, "execution must be auto, calibrate or FORMAT:CHUNK"),
    (["sweep", "--execution", "channels_last:0"], 2, "execution chunk must be a number of images"),
    (["measure", *FAST, "--device", "tpu"], 2, "device must be auto, cpu, cuda or KIND:N"),
    pytest.param(["measure", *FAST, "--device", "cuda"], 2, "--device cuda: torch", marks=NEEDS_NO_GPU),
    pytest.param(["sweep", "--device", "cuda:1"], 2, "--device cuda:1: torch", marks=NEEDS_NO_GPU),
    (["train", *FAST[:-1], "--device", "cuda:x"], 2, "device must be KIND or KIND:N"),
    (["measure", *FAST, "--no-such-option"], 2, "No such option"),
    (["measre"], 2, "No such command 'measre'"),
    ([], 2, "no command given"),  # was an empty error line under the help
    (["doctor", "--cpu-watts", "-3"], 2, "cpu-watts must be positive"),
    (["doctor", "--cpu-watts", "0"], 2, "cpu-watts must be positive"),
    (["doctor", "--meter-setting", "cpu-wats="], 2, "unknown meter setting(s) cpu_wats;"),  # was accepted
    (["measure", *FAST, "--country", "FRA", "--carbon-intensity", "50"], 2, "--country FRA say where codecarbon's "
                                                                           "intensity is looked up"),  # recorded
    (["doctor", "--meter-setting", "jetson_hz=abc"], 2, "jetson-hz must be positive, got abc"),  # --jetson-hz's
    # default took its place unchecked
    (["measure", *FAST, "--cpu-watts", "nan"], 2, "cpu-watts must be positive"),
    # an option the run would ignore, and record as if used
    (["measure", *FAST[6:], "--synthetic-samples", "100"], 2, "--synthetic-samples sets the synthetic data set, and "
                                                              "this run's is digits"),
    (["train", *FAST[:-1], "--data-dir", "data"], 2, "--data-dir is where the files of mnist"),
    (["measure", *FAST, "--eval-protocol", "paper"], 2, "--eval-protocol says how --evaluate scores a round"),
    (["sweep", "--check-metric", "cpu_s"], 2, "--check-metric cpu_s says what --check judges"),
    (["export", "--backbone", "resnet"], 2, "unknown backbone"),
    (["export", "--dataset", "cifar10"], 2, "--dataset sets the input shape of a torchvision or your own"),  # ignored
    (["export", "--seed", "-1"], 2, "seed must be an integer in 0..4,294,967,295"),  # was accepted
    (["export", "--seed", str(2**32)], 2, "seed must be an integer in 0..4,294,967,295"),
    (["train", *FAST[:-1], "--target-accuracy", "2"], 2, "target accuracy"),
    (["sweep", "--taus", "1,x"], 2, "--taus must be a comma-separated list"),
    (["sweep", "--algos", "pflego:torch-reuse,fedavg", "--engines", "onnx"], 2, "--engines onnx runs the algorithms given "
                                                                          "without an engine"),  # was ignored
    (["sweep", "--algos", "pflego", "--max-baseline-tau", "5"], 2, "--max-baseline-tau caps the taus"),  # ignored
    (["flower-app-dir", "--port", "0"], 2, "port must be in 1..65535"),
    (["flower-app-dir", "--round-timeout", "nan"], 2, "round-timeout must be a number of seconds above 0"),
    (["flower-app-dir", "--node-wait", "inf"], 2, "node-wait must be a number of seconds >= 0"),
    (["dashboard"], 2, "Missing argument"),
    (["measure", *FAST[6:], "--dataset", "mnist", "--data-dir", "/nonexistent/mnist"], 3, "/nonexistent/mnist"),
    (["summary", "/nonexistent/report.csv"], 7, "no report at"),
    (["summary", "."], 7, ". is a folder, not a report: name its report CSVs (*.csv)"),  # was a traceback
    (["trace", "/"], 7, "/ is a folder, not a report"),
    (["summary", "{report}"], 7, "not an edgeprof report"),
    # a name the system refuses to look up (ENAMETOOLONG) is the report's or the folder's, not "the output"
    (["summary", "a" * 300 + ".csv"], 7, "cannot read " + "a" * 300 + ".csv: File name too long"),
    (["trace", "a" * 300 + ".csv"], 7, "File name too long"),
    (["measure", *FAST, "--out", "a" * 300], 4, "is not writable: File name too long"),
    (["dashboard", "{report}"], 7, "not an edgeprof report"),
    (["dashboard", "{report}", "--title", "caf\udce9"], 2, "--title 'caf\\udce9' is not valid text"),  # a traceback
    (["dashboard", "{report}", "--output", "p.html", "--name", "q"], 2, "give one or the other"),  # --name ignored
    (["dashboard", "{report}", "--out", "p.html", "--name", "q"], 2, "give --out a folder"),  # --name ignored
])
def test_every_command_fails_with_one_line_and_its_documented_code(tmp_path, monkeypatch, argv, code, expected):
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{report}", _report_file(tmp_path)) for a in argv]

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == code, result.output
    assert expected in _one_error_line(result)


@pytest.mark.parametrize("error,code", [("ConfigError", 2), ("DataError", 3), ("OutputError", 4),
                                        ("MeterError", 5), ("MeterPermissionError", 5), ("ModelError", 6),
                                        ("ReportError", 7), ("ClaimNotShown", 8)])
def test_each_error_class_has_its_documented_exit_code(error, code):
    """The exit codes of docs/measuring.md (6, a refused backbone, also through the CLI in test_custom_backbone.py)."""
    from edgeprof import errors
    from edgeprof.report import analysis

    cls = getattr(errors, error, None) or getattr(analysis, error)
    assert cls.exit_code == code


@pytest.mark.slow
def test_a_meter_that_fails_mid_run_exits_5_and_keeps_the_finished_rounds(tmp_path, monkeypatch):
    """A real RAPL tree whose counter stops reading as a number while the run goes on (the meter keeps the file
    open, as on real sysfs, where a removed zone's open attribute then fails with ENODEV): one error line."""
    import threading
    import time

    from fixtures_sysfs import build_rapl

    zones = build_rapl(tmp_path / "sys", "one_socket")
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path / "sys"))
    out = tmp_path / "profiles"
    counter = tmp_path / "sys" / "class" / "powercap" / zones[0] / "energy_uj"

    def break_the_counter() -> None:  # once a round is on disk, the package counter becomes unreadable
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            csv_path = out / "meter.csv"
            if csv_path.is_file() and len(csv_path.read_text().splitlines()) > 2:
                counter.write_text("gone\n")
                return
            time.sleep(0.01)

    breaker = threading.Thread(target=break_the_counter)
    breaker.start()
    args = [a if a != "1" else "100000" for a in FAST]  # --rounds 100000: it cannot finish first
    result = CliRunner().invoke(app, ["measure", *args, "--run-name", "meter", "--out", str(out)])
    breaker.join()

    assert result.exit_code == 5, result.output
    assert "energy_uj" in _one_error_line(result)
    rows = (out / "meter.csv").read_text().splitlines()
    assert len(rows) > 2 and all(len(r.split(",")) == len(rows[0].split(",")) for r in rows)


def test_corrupt_data_file(tmp_path):
    data = _write_corrupt_mnist(tmp_path / "mnist")
    out = tmp_path / "profiles"

    result = _invoke([*FAST[6:], "--dataset", "mnist", "--data-dir", str(data)], out)

    assert result.exit_code == 3
    assert "edgeprof: error:" in result.stderr and "train-images" in result.stderr
    assert not out.exists() or not list(out.iterdir())


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    result = _invoke(FAST, blocker / "profiles")

    assert result.exit_code == 4
    assert "not writable" in result.stderr and "Traceback" not in result.output


def test_measure_writes_report_and_summary(tmp_path):
    out = tmp_path / "profiles"

    result = _invoke([*FAST, "--run-name", "cli-run"], out)

    assert result.exit_code == 0, result.output
    assert (out / "cli-run.csv").is_file() and (out / "cli-run.json").is_file()
    assert "median per client round" in result.stdout and "cli-run.csv" in result.stdout.replace("\n", "")


def test_summary_prints_grams_co2e_and_measure_evaluate_prints_the_final_accuracy(tmp_path):
    from edgeprof.report import read_report

    out = tmp_path / "profiles"

    result = _invoke([*FAST, "--run-name", "co2", "--carbon-intensity", "400", "--evaluate"], out)

    assert result.exit_code == 0, result.output
    report = read_report(out / "co2.csv")
    rows = [r for r in report.rows if r["kind"] in ("client", "server")]
    grams = sum(float(r["carbon_g"]) for r in rows)
    assert grams > 0 and "g CO2e" in result.stdout
    assert f"carbon: {grams:.4g} g CO2e over {len(rows)} client rounds and server steps" in result.stdout
    (last,) = report.where(kind="eval")
    assert f"after round 1: training loss {float(last['train_loss']):.4g}, test accuracy " \
           f"{float(last['test_accuracy']):.2%}" in result.stdout


COMMANDS = ["measure", "export", "algos", "summary", "doctor", "train", "sweep", "dashboard", "flower-app-dir",
            "flower-simulate", "flower-certs"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.stdout


def test_export_writes_onnx(tmp_path):
    result = CliRunner().invoke(app, ["export", "--backbone", "mlp", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mlp.onnx").stat().st_size > 1000


@pytest.mark.parametrize("given", [["--cpu-watts", "7.5"],
                                   # the same setting by its name: --cpu-watts not given overrode it with its None
                                   ["--meter-setting", "cpu_watts=7.5"], ["--meter-setting", "cpu-watts=7.5"]])
def test_doctor_lists_the_estimate_and_why_rapl_is_missing(tmp_path, monkeypatch, given):
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path))

    result = CliRunner().invoke(app, ["doctor", *given])

    assert result.exit_code == 0, result.output
    assert "cpu_estimate" in result.stdout and "estimate" in result.stdout
    assert "rapl" in result.stdout and "NOT FOUND" in result.stdout and "fix" in result.stdout
    assert "watts/core:    7.5 W per busy core (--cpu-watts 7.5" in result.stdout


@pytest.mark.slow
def test_readme_command_runs_through_the_console_script(tmp_path):
    import shutil
    import subprocess
    import sys

    exe = shutil.which("edgeprof", path=str(Path(sys.executable).parent))
    assert exe, "the edgeprof console script is not installed next to this Python"

    done = subprocess.run([exe, "measure", "--algo", "pflego", "--tau", "50", "--rounds", "1", "--no-progress",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    (csv_path,) = tmp_path.glob("pflego-tau50-*.csv")
    assert f"report: {csv_path}" in done.stdout
    from edgeprof.report import read_report

    report = read_report(csv_path)
    assert report.sidecar["config"]["dataset"] == "digits" and report.sidecar["config"]["backbone"] == "cnn-omniglot"
    assert len(report.where(kind="client")) == 2  # 20% of 10 clients


# --- options: declared once, choices from the registries, --out a folder, panels ---------------------------
import typer.main  # noqa: E402

from edgeprof.algorithms.aggregation import SERVER_OPTIMIZERS  # noqa: E402
from edgeprof.algorithms.participants import PARTICIPATION_MODES  # noqa: E402
from edgeprof.data import names as data_names  # noqa: E402
from edgeprof.nn import names as nn_names  # noqa: E402
from edgeprof.cli import options  # noqa: E402
from edgeprof.algorithms import ALGORITHMS  # noqa: E402
from edgeprof.report.analysis import GPU_METRICS, METRICS  # noqa: E402

WIDE = {"COLUMNS": "300"}  # help on one line per option, so a list of choices is never wrapped


def _click_command(name: str):
    return typer.main.get_command(app).commands[name]


def _options(name: str) -> list:
    return [p for p in _click_command(name).params if p.opts[0].startswith("--") and p.name != "help"]


def _registry(name: str) -> tuple:
    return {"algorithms": tuple(ALGORITHMS), "datasets": data_names.DATASETS, "backbones": nn_names.BACKBONES,
            "degrees": data_names.DEGREES, "modes": PARTICIPATION_MODES, "optimizers": SERVER_OPTIMIZERS,
            "metrics": METRICS + GPU_METRICS, "splits": data_names.SPLITS}[name]


CHOICES = [("measure", "--algo", "algorithms"), ("train", "--algos", "algorithms"), ("sweep", "--algos", "algorithms"),
           ("flower-simulate", "--algo", "algorithms"), ("measure", "--dataset", "datasets"),
           ("sweep", "--dataset", "datasets"), ("measure", "--backbone", "backbones"),
           ("export", "--backbone", "backbones"), ("measure", "--degree", "degrees"),
           ("measure", "--participation-mode", "modes"), ("measure", "--server-optimizer", "optimizers"),
           ("sweep", "--check-metric", "metrics"), ("measure", "--split", "splits"),
           ("flower-app-dir", "--split", "splits")]


@pytest.mark.parametrize("command,option,registry", CHOICES)
def test_help_shows_the_choices_of_the_registry(command, option, registry):
    names = (*_registry(registry), nn_names.FACTORY_FORM) if registry == "backbones" else _registry(registry)

    result = CliRunner().invoke(app, [command, "--help"], env=WIDE)

    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith(f"│ {option} ")]
    assert f"[{' | '.join(names)}]" in line


def test_a_name_added_to_a_registry_is_offered_and_accepted(monkeypatch, tmp_path):
    monkeypatch.setattr("edgeprof.nn.names.BACKBONES", (*nn_names.BACKBONES, "tiny-net"))  # the layer's list
    received = []
    monkeypatch.setattr("edgeprof.cli._measure_and_report", received.append)

    shown = CliRunner().invoke(app, ["measure", "--help"], env=WIDE)
    result = CliRunner().invoke(app, ["measure", "--backbone", "tiny-net", "--out", str(tmp_path)])

    assert "efficientnet_b0 | tiny-net | module:factory]" in shown.stdout
    assert result.exit_code == 0, result.output
    assert received[0].backbone == "tiny-net"


REFUSED = [(["measure", "--algo", "nope"], "algorithm", "algorithms"),
           (["train", "--algos", "pflego,nope"], "algorithm", "algorithms"),
           (["sweep", "--algos", "pflego,nope:onnx"], "algorithm", "algorithms"),
           (["flower-app-dir", "--algo", "nope"], "algorithm", "algorithms"),
           (["measure", "--dataset", "nope"], "dataset", "datasets"),
           (["flower-simulate", "--backbone", "nope"], "backbone", "backbones"),
           (["train", "--degree", "nope"], "degree of personalization", "degrees"),
           (["measure", "--participation-mode", "nope"], "participation mode", "modes"),
           (["train", "--server-optimizer", "nope"], "server optimizer", "optimizers"),
           (["sweep", "--check-metric", "nope"], "metric", "metrics"),
           (["train", "--split", "nope"], "split", "splits")]


@pytest.mark.parametrize("argv,what,registry", REFUSED)
def test_a_name_outside_the_registry_is_refused_with_one_line(monkeypatch, tmp_path, argv, what, registry):
    monkeypatch.chdir(tmp_path)
    for run in ("_measure_and_report", "_train_and_report", "_sweep_and_report"):
        monkeypatch.setattr(f"edgeprof.cli.{run}", lambda *a, **k: pytest.fail("ran with a refused choice"))

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 2, result.output
    line = _one_error_line(result)
    assert f"unknown {what} 'nope'; choose one of: {', '.join(_registry(registry))}" in line
    assert not list(tmp_path.iterdir())


def _values(tmp_path: Path) -> dict:
    """RunConfig field -> (its command-line tokens, the value the config must hold); none is a default."""
    return {"algo": (["--algo", "fedprox"], "fedprox"), "engine": (["--engine", ALGORITHMS["fedprox"].engines[-1]],
                                                                   ALGORITHMS["fedprox"].engines[-1]),
            "tau": (["--tau", "7"], 7), "rounds": (["--rounds", "2"], 2), "clients": (["--clients", "5"], 5),
            "participation": (["--participation", "0.4"], 0.4),
            "participation_mode": (["--participation-mode", "bernoulli"], "bernoulli"), "seed": (["--seed", "3"], 3),
            "dataset": (["--dataset", "fashion-mnist"], "fashion-mnist"), "degree": (["--degree", "medium"], "medium"),
            "split": (["--split", "paper"], "paper"), "test_fraction": (["--test-fraction", "0.4"], 0.4),
            "backbone": (["--backbone", "cnn-cifar"], "cnn-cifar"),
            "data_dir": (["--data-dir", str(tmp_path / "data")], tmp_path / "data"),
            "synthetic_samples": (["--synthetic-samples", "300"], 300),
            "synthetic_classes": (["--synthetic-classes", "5"], 5), "threads": (["--threads", "2"], 2),
            "execution": (["--execution", "channels_last:32"], "channels_last:32"),
            "device": (["--device", "cpu"], "cpu"), "tf32": (["--tf32"], True),
            "beta": (["--beta", "0.5"], 0.5), "rho": (["--rho", "0.25"], 0.25), "mu": (["--mu", "0.125"], 0.125),
            "server_optimizer": (["--server-optimizer", "sgd"], "sgd"), "run_name": (["--run-name", "r1"], "r1"),
            "evaluate": (["--evaluate"], True), "eval_protocol": (["--eval-protocol", "paper"], "paper"),
            "cpu_watts": (["--cpu-watts", "7.5"], 7.5),
            "jetson_hz": (["--jetson-hz", "20"], 20.0), "idle_seconds": (["--idle-seconds", "0.5"], 0.5),
            "country": (["--country", "FRA"], "FRA"), "region": (["--region", "north"], "north"),
            "carbon_intensity": (["--carbon-intensity", "99"], 99.0), "progress": (["--no-progress"], False),
            "hold_seconds": (["--hold-seconds", "0.25"], 0.25),
            "out": (["--out", str(tmp_path / "reports")], tmp_path / "reports")}


def _capture_config(monkeypatch, command: str, received: list) -> dict:
    """Replace the command's run function by one that keeps the RunConfig it gets; the settings it fixes."""
    if command == "measure":
        monkeypatch.setattr("edgeprof.cli._measure_and_report", received.append)
        return {}
    if command == "train":
        monkeypatch.setattr("edgeprof.cli._train_and_report", lambda base, names, target, *_: received.append(base))
        return {"evaluate": True}
    if command == "sweep":
        monkeypatch.setattr("edgeprof.cli._sweep_and_report", lambda cfg, **_: received.append(cfg.base))
        return {"participation": 1.0}
    if command == "flower-app-dir":
        monkeypatch.setattr("edgeprof.flower.config.to_run_config", lambda cfg, settings: received.append(cfg) or {})
        monkeypatch.setattr("edgeprof.flower.config.write_app_dir", lambda folder, run_config: folder)
    else:
        monkeypatch.setattr("edgeprof.flower.simulation.simulate", lambda cfg, *a, **k: received.append(cfg))
        monkeypatch.setattr("edgeprof.cli._read", lambda csv_path: None)  # no report: its summary is not printed
        monkeypatch.setattr("edgeprof.cli._print_summary", lambda report: None)
    return {"progress": False}


#: options that refuse each other: the first is given in a run of its own (no algorithm takes both rho and mu; the
#: synthetic data set's options are refused beside another data set, so their run names --dataset synthetic)
APART = {"hold_seconds": "evaluate", "tf32": "device", "rho": "mu", "server_optimizer": "mu",
         "synthetic_samples": "dataset", "synthetic_classes": "dataset"}


@pytest.mark.parametrize("command,apart", [*[(c, False) for c in ("measure", "train", "sweep", "flower-app-dir",
                                                                     "flower-simulate")], ("measure", True)])
def test_each_command_builds_its_run_config_from_its_options(monkeypatch, tmp_path, command, apart):
    from edgeprof.config import RunConfig

    monkeypatch.chdir(tmp_path)
    values, received = _values(tmp_path), []
    fixed = _capture_config(monkeypatch, command, received)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    options = [p.name for p in _options(command) if p.name in fields]
    clash = {a for a, b in APART.items() if a in options and b in options}
    assert clash or not apart, f"{command} has no options that refuse each other"
    taken = [n for n in options if (n in clash) == apart] if apart else [n for n in options if n not in clash]
    argv = [command, *(t for name in taken for t in values[name][0])]
    if apart and "synthetic_samples" in taken:
        argv += ["--dataset", "synthetic"]
    if command == "train":
        argv += ["--algos", "fedprox,fedavg"]
        fixed["algo"] = "fedprox"

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 0, result.output
    (cfg,) = received
    assert len(taken) >= (1 if apart else 12) and set(taken) <= set(values)  # a new run option needs a row
    assert {name: getattr(cfg, name) for name in taken} == {name: values[name][1] for name in taken}
    assert {name: getattr(cfg, name) for name in fixed} == fixed


@pytest.mark.parametrize("command", ["measure", "train", "sweep", "dashboard", "export", "flower-app-dir",
                                     "flower-simulate"])
def test_out_is_a_folder_in_every_command(command):
    (out,) = [p for p in _click_command(command).params if "-o" in p.opts]

    assert out.name == "out" and out.opts == ["--out", "-o"]
    assert out.help.startswith("Folder ")


def _fake_write_dashboard(monkeypatch) -> list:
    received = []

    def write(paths, output, title="edgeprof report", *, trace_round=None, trace_client=None):
        received.append((list(paths), Path(output)))
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text("<html></html>")
        return Path(output)

    monkeypatch.setattr("edgeprof.report.dashboard.write_dashboard", write)
    return received


@pytest.mark.parametrize("reports,options,page", [
    (["a.csv"], [], "profiles/a.html"),
    (["a.csv"], ["--out", "site"], "site/a.html"),
    (["a.csv", "b.csv"], ["-o", "site"], "site/dashboard.html"),
    (["a.csv", "b.csv"], ["--out", "site", "--name", "tau-sweep"], "site/tau-sweep.html"),
    (["a.csv"], ["--out", "site", "--name", "page.html"], "site/page.html"),
])
def test_dashboard_writes_its_page_into_the_out_folder(monkeypatch, tmp_path, reports, options, page):
    monkeypatch.chdir(tmp_path)
    received = _fake_write_dashboard(monkeypatch)

    result = CliRunner().invoke(app, ["dashboard", *reports, *options])

    assert result.exit_code == 0, result.output
    assert received == [([Path(r) for r in reports], Path(page))]
    assert (tmp_path / page).is_file() and f"wrote {page}" in result.stdout and not result.stderr


@pytest.mark.parametrize("options", [["--output", "old/report.html"], ["-o", "old/report.html"]])
def test_dashboard_old_file_options_still_write_the_file_with_a_note(monkeypatch, tmp_path, options):
    monkeypatch.chdir(tmp_path)
    received = _fake_write_dashboard(monkeypatch)

    result = CliRunner().invoke(app, ["dashboard", "a.csv", *options])

    assert result.exit_code == 0, result.output
    assert received == [([Path("a.csv")], Path("old/report.html"))]
    (note,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert note.startswith("edgeprof: note:") and "deprecated" in note and "--out" in note


def test_dashboard_name_must_be_a_file_name(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    received = _fake_write_dashboard(monkeypatch)

    result = CliRunner().invoke(app, ["dashboard", "a.csv", "--name", "../escape"])

    assert result.exit_code == 2 and "--name must be a file name" in _one_error_line(result)
    assert received == [] and not list(tmp_path.iterdir())


PANELS = {options.MODEL, options.FEDERATION, options.DATA, options.ENERGY, options.OUTPUT, options.SWEEP,
          options.FLOWER}


@pytest.mark.parametrize("command", [c for c in COMMANDS if _options(c)])
def test_every_option_sits_in_a_help_panel_and_help_shows_the_panels(command):
    panels = {p.name: p.rich_help_panel for p in _options(command)}

    result = CliRunner().invoke(app, [command, "--help"], env=WIDE)

    assert set(panels.values()) <= PANELS, panels
    assert all(f"╭─ {panel} " in result.stdout for panel in set(panels.values()))


def test_measure_help_groups_its_options_in_five_panels():
    result = CliRunner().invoke(app, ["measure", "--help"], env=WIDE)

    for panel, option in [("Model and algorithm", "--algo"), ("Federation", "--participation-mode"),
                          ("Data", "--dataset"), ("Energy and carbon", "--cpu-watts"), ("Output", "--out")]:
        section = result.stdout.split(f"╭─ {panel} ")[1].split("╰")[0]
        assert f"\n│ {option} " in section, panel


def test_version_prints_the_package_version():
    from edgeprof import __version__

    result = CliRunner().invoke(app, ["--version"])

    assert result.exit_code == 0 and result.stdout.strip() == f"edgeprof {__version__}"


@pytest.mark.parametrize("command,default", [("measure", "digits"), ("train", "digits"), ("sweep", "synthetic")])
def test_help_states_each_commands_own_default_dataset(command, default):
    from edgeprof.cli import _console  # noqa: F401 - the CLI module is importable without a terminal

    result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)

    text = " ".join(result.stdout.split())
    block = text[text.index("--dataset"):text.index("--dataset") + 400]
    assert f"[default: {default}]" in block and "(embedded, default)" not in block


@pytest.mark.parametrize("args,said", [
    (["--tf32"], "--tf32 asks for TF32 matmuls and convolutions on a CUDA GPU; --device auto (here: cpu) has none"),
    (["--country", "XX"], "unknown country 'XX': use an ISO 3166 code"),
    (["--threads", "3"], "--threads 3: more than this machine's 2 cores (more intra-op threads only oversubscribe "
                         "it)"),
], ids=["tf32-on-the-cpu", "unknown-country", "more-threads-than-cores"])
def test_a_setting_set_up_would_refuse_is_refused_before_the_output_folder_is_made(tmp_path, args, said, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # auto is the CPU, as on this machine
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # a two-core machine, whatever the runner has
    out = tmp_path / "new" / "folder"
    for command in (["measure"], ["sweep", "--taus", "1,2", "--backbone", "mlp"]):
        result = CliRunner().invoke(app, [*command, *args, "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert said in result.stderr and result.stdout == "", result.output
        assert not (tmp_path / "new").exists(), "no folder made"


def test_a_run_that_fails_in_set_up_prints_nothing_on_stdout(tmp_path):
    """The progress display's last frame was an empty line on a stdout that is not a terminal."""
    result = CliRunner().invoke(app, ["measure", "--dataset", "mnist", "--data-dir", str(tmp_path / "none"),
                                      "--out", str(tmp_path)])
    assert result.exit_code == 3 and result.stdout == "", repr(result.stdout)


@pytest.mark.slow
def test_a_closed_stdout_ends_the_command_silently_with_exit_1_and_the_report_whole(tmp_path):
    """docs/measuring.md: `edgeprof measure ... | head` whose reader has gone ends as click's commands do, exit 1
    with no error line or traceback (rich's and click's closed-pipe exit), and the run's report is whole. The pipe's read end
    is closed before the command starts, so its first write meets the closed pipe, whatever the timing."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    exe = shutil.which("edgeprof", path=str(Path(sys.executable).parent))
    assert exe, "the edgeprof console script is not installed next to this Python"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([exe, "measure", "--backbone", "mlp", "--tau", "2", "--rounds", "1", "--no-progress",
                               "--out", str(tmp_path)], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    finally:
        os.close(write_end)

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr  # notes may be said; no error
    (sidecar,) = tmp_path.glob("pflego-tau2-*.json")
    assert json.loads(sidecar.read_text())["status"] == "complete"

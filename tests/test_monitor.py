"""edgeprof.monitor on a fake machine: windows, phases, begin/end and the decorator to the microjoule; the
nesting and overlap rules; labels; the report and sidecar it writes, read back by `edgeprof summary` and
`edgeprof dashboard`."""

from __future__ import annotations

import asyncio
import json
from typing import Mapping

import pytest
from typer.testing import CliRunner

import edgeprof
from edgeprof.cli import app
from edgeprof.errors import MonitorError
from edgeprof.meters.base import Domain, Meter
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.estimate import CpuTimeEstimateMeter
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report.writer import read_report

PKG = Domain("cpu_package_0", "cpu_package", "counter", True)
DRAM = Domain("dram_0", "dram", "counter", True)
# powers of two throughout, so that every sum below is exact in binary floating point
PKG_W, DRAM_W, READ_COST_S = 8.0, 2.0, 2.0**-10


class Machine:
    """Wall, process-CPU and thread-CPU clocks that move only when the test runs something."""

    def __init__(self) -> None:
        self.wall_s, self.cpu_s, self.thread_s = 1024.0, 64.0, 16.0

    def run(self, cpu_s: float, waiting_s: float = 0.0) -> None:
        self.wall_s += cpu_s + waiting_s
        self.cpu_s += cpu_s
        self.thread_s += cpu_s


class PowerMeter(Meter):
    """Counters of a machine drawing PKG_W on the package and DRAM_W on the DRAM; a read costs ``read_cost_s``."""

    name = "power"

    def __init__(self, machine: Machine, read_cost_s: float = 0.0) -> None:
        self.machine, self.read_cost_s = machine, read_cost_s

    def domains(self):
        return (PKG, DRAM)

    def read_j(self) -> Mapping[str, float]:
        self.machine.run(self.read_cost_s)
        return {"cpu_package_0": PKG_W * self.machine.wall_s, "dram_0": DRAM_W * self.machine.wall_s}


class FakeRss(PeakRss):
    """A resettable peak (as on Linux) of 42 MiB; counts the resets."""

    def __init__(self) -> None:
        self.per_window, self.resets = True, 0

    def reset(self) -> None:
        self.resets += 1

    def read_mb(self) -> float:
        return 42.0


@pytest.fixture
def machine() -> Machine:
    return Machine()


def profiler(machine: Machine, meter: Meter | None = None, rss: PeakRss | None = None) -> Profiler:
    return Profiler(MeterSet([meter or PowerMeter(machine)]), clock=lambda: machine.wall_s,
                    cpu_clock=lambda: machine.cpu_s, thread_clock=lambda: machine.thread_s, rss=rss or FakeRss())


def run_monitor(tmp_path, prof, **kwargs):
    return edgeprof.monitor(out=tmp_path, run_id="mine", profiler=prof, carbon_intensity=360.0, **kwargs)


def test_windows_phases_begin_end_and_decorator_to_the_microjoule(tmp_path, machine):
    # Prepare
    mon = run_monitor(tmp_path, profiler(machine), labels={"model": "mlp"})

    @mon.measure
    def evaluate(x):
        machine.run(0.375)
        return x + 1

    # Execute
    with mon:
        with mon.window("epoch", round=1, lr=0.5) as epoch:
            machine.run(0.25)  # outside any phase
            with mon.phase("forward"):
                machine.run(0.5)
            with edgeprof.phase("backward"):  # the free function marks the innermost window too
                machine.run(1.0, waiting_s=0.5)
            with epoch.phase("forward"):  # a phase entered twice adds up
                machine.run(0.125)
        callback = mon.begin_window("callback", client=3)
        machine.run(2.0)
        measured = mon.end_window(callback)  # the window begin_window returned, or its name
        assert evaluate(6) == 7
    report = read_report(mon.csv_path)

    # Assert: the figures returned
    assert epoch.measurement.wall_s == 2.375 and epoch.measurement.cpu_s == 1.875
    assert epoch.measurement.energy_j == pytest.approx((PKG_W + DRAM_W) * 2.375, abs=1e-6)
    assert epoch.measurement.phases["forward"].energy_j["cpu_package_0"] == pytest.approx(PKG_W * 0.625, abs=1e-6)
    assert measured.energy_j == pytest.approx(20.0, abs=1e-6) and measured.energy_method == "counter"
    assert measured.carbon_g == pytest.approx(20.0 / 3.6e6 * 360.0, rel=1e-5)
    # ... and the rows written, one per window, in the order the windows ended
    rows = {r["window"]: r for r in report.rows}
    assert [r["window"] for r in report.rows] == ["epoch", "callback", "evaluate"]
    assert all(r["kind"] == "window" and r["run_id"] == "mine" for r in report.rows)
    e = rows["epoch"]
    assert float(e["wall_s"]) == 2.375 and float(e["cpu_s"]) == 1.875
    assert float(e["energy_j"]) == pytest.approx(23.75, abs=1e-6) and e["energy_method"] == "counter"
    assert float(e["cpu_package_j"]) == pytest.approx(19.0, abs=1e-6) and e["cpu_package_method"] == "counter"
    assert float(e["dram_j"]) == pytest.approx(4.75, abs=1e-6)
    assert float(e["forward_s"]) == 0.625 and float(e["forward_cpu_s"]) == 0.625
    assert float(e["forward_j"]) == pytest.approx(6.25, abs=1e-6)
    assert float(e["backward_s"]) == 1.5 and float(e["backward_cpu_s"]) == 1.0
    assert float(e["backward_j"]) == pytest.approx(15.0, abs=1e-6)
    assert e["round"] == "1" and json.loads(e["labels"]) == {"lr": 0.5, "model": "mlp"}
    assert e["peak_rss_mb"] == "42.0" and e["short_window"] == "0"
    assert rows["callback"]["client"] == "3" and float(rows["callback"]["energy_j"]) == pytest.approx(20.0, abs=1e-6)
    assert float(rows["evaluate"]["energy_j"]) == pytest.approx(3.75, abs=1e-6)
    assert rows["evaluate"]["forward_s"] == ""  # a window without the phase: empty, never 0
    sidecar = report.sidecar
    # rounds_completed: the rounds the rows name (only the epoch's round=1), not the windows
    assert sidecar["status"] == "complete" and sidecar["rounds_completed"] == 1 and sidecar["rows"] == 3
    assert sidecar["phases"] == ["forward", "backward"] and sidecar["config"]["labels"] == {"model": "mlp"}
    assert sidecar["monitor"]["windows"] == {"epoch": 1, "callback": 1, "evaluate": 1}
    assert sidecar["monitor"]["overlapping_windows"] == 0 and sidecar["monitor"]["notes"] == []
    assert sidecar["meters"]["meters"][0]["name"] == "power"


def test_the_estimate_is_labelled_estimate_and_is_cpu_seconds_times_watts(tmp_path, machine):
    meter = CpuTimeEstimateMeter(4.0, cpu_time=lambda: machine.cpu_s, cpu_clock_lag_s=0.004)
    with run_monitor(tmp_path, profiler(machine, meter)) as mon:
        with mon.window("step") as w:
            with mon.phase("work"):
                machine.run(0.5, waiting_s=4.0)  # waiting costs wall time, not CPU time
    row = read_report(mon.csv_path).rows[0]

    assert w.measurement.energy_method == "estimate" and row["energy_method"] == "estimate"
    assert row["cpu_estimate_method"] == "estimate" and row["cpu_package_j"] == ""
    assert float(row["energy_j"]) == pytest.approx(2.0, abs=1e-6)
    assert float(row["work_j"]) == pytest.approx(2.0, abs=1e-6)
    assert float(row["wall_s"]) == 4.5


def test_nested_windows_each_see_the_whole_machine_and_say_so(tmp_path, machine):
    rss = FakeRss()
    with run_monitor(tmp_path, profiler(machine, rss=rss)) as mon:
        with mon.window("outer") as outer:
            machine.run(1.0)
            with mon.window("inner") as inner:
                with mon.phase("x"):  # the innermost window's phase
                    machine.run(0.5)
            machine.run(0.5)
    rows = {r["window"]: r for r in read_report(mon.csv_path).rows}
    sidecar = json.loads(mon.sidecar_path.read_text())

    assert float(rows["inner"]["energy_j"]) == pytest.approx(5.0, abs=1e-6)
    assert float(rows["outer"]["energy_j"]) == pytest.approx(20.0, abs=1e-6)  # counts the inner window's energy too
    assert float(rows["inner"]["x_s"]) == 0.5 and rows["outer"]["x_s"] == ""
    assert outer.measurement.overlapped and inner.measurement.overlapped
    assert rss.resets == 1  # only when no other window was open: the outer window's peak stays its own
    assert rows["outer"]["peak_rss_mb"] == "42.0" and rows["inner"]["peak_rss_mb"] == ""
    assert sidecar["monitor"]["overlapping_windows"] == 2 and sidecar["monitor"]["windows_without_peak_rss"] == 1
    assert any("double count" in n for n in sidecar["monitor"]["notes"])


def test_overlapping_windows_keep_their_own_start_and_end(tmp_path, machine):
    with run_monitor(tmp_path, profiler(machine)) as mon:
        mon.begin_window("a")
        machine.run(1.0)
        mon.begin_window("b")
        machine.run(2.0)
        a = mon.end_window("a")  # ends before b: windows need not nest
        machine.run(4.0)
        b = mon.end_window("b")

    assert (a.wall_s, b.wall_s) == (3.0, 6.0)
    assert a.energy_j == pytest.approx(30.0, abs=1e-6) and b.energy_j == pytest.approx(60.0, abs=1e-6)


def test_bookkeeping_is_charged_to_every_window_open_while_it_ran(tmp_path, machine):
    with run_monitor(tmp_path, profiler(machine, PowerMeter(machine, READ_COST_S))) as mon:
        with mon.window("outer") as outer:
            with mon.window("inner") as inner:
                with mon.phase("p"):
                    pass

    # reads inside each window: its own start's (a sample reads the clock, then the meters), the phase's two, and
    # for the outer window the inner window's two edges whole; its own end reads the meters after its end
    assert inner.measurement.result.overhead_s == 3 * READ_COST_S
    assert outer.measurement.result.overhead_s == 5 * READ_COST_S


@pytest.mark.parametrize(("misuse", "message"), [
    (lambda mon: mon.phase("p").__enter__(), "outside any window"),
    (lambda mon: mon.end_window("never"), "no window 'never' is open"),
    (lambda mon: mon.end_window(3), "takes the window's name or the window begin_window returned, got 3"),
    (lambda mon: [mon.end_window(w := mon.begin_window("w")), mon.end_window(w)], "that window is not open"),
    (lambda mon: [mon.begin_window("w"), mon.begin_window("w")], "already open"),
    (lambda mon: mon.window("w", wall_s=1).__enter__(), "fills itself"),
    (lambda mon: mon.window("w", round="three").__enter__(), "whole number"),
    (lambda mon: mon.window("w", kind="epoch").__enter__(), "kind 'epoch'"),
    (lambda mon: mon.window("").__enter__(), "window name"),
    # a name far too long is counted, not printed (the line was the whole name)
    (lambda mon: mon.window("w" * 5000).__enter__(), "1 to 200 characters, got 5,000 characters$"),
    (lambda mon: [mon.begin_window("w"), mon.phase("p" * 5000).__enter__()], "^phase name of 5,000 characters must"),
])
def test_misuse_is_one_clear_error(tmp_path, machine, misuse, message):
    with run_monitor(tmp_path, profiler(machine)) as mon:
        with pytest.raises(MonitorError, match=message):
            misuse(mon)


@pytest.mark.parametrize("name", ["Forward", "wall", "energy", "setup", "x_cpu", "1st"])
def test_a_phase_name_must_head_columns_of_its_own(tmp_path, machine, name):
    with run_monitor(tmp_path, profiler(machine)) as mon:
        with mon.window("w"):
            with pytest.raises(MonitorError, match="phase name"):
                with mon.phase(name):
                    pass


def test_phases_of_one_window_do_not_overlap_but_a_window_inside_a_phase_may(tmp_path, machine):
    with run_monitor(tmp_path, profiler(machine)) as mon:
        with mon.window("w") as w:
            with mon.phase("a"):
                with pytest.raises(MonitorError, match="do not overlap"):
                    with w.phase("b"):
                        pass
                with mon.window("inner"):
                    with mon.phase("b"):  # a phase of the inner window
                        machine.run(1.0)
        mon.begin_window("cb")
        with mon.phase("a"):
            with pytest.raises(MonitorError, match="inside its phase"):
                mon.end_window("cb")

    rows = {r["window"]: r for r in read_report(mon.csv_path).rows}
    assert float(rows["w"]["a_s"]) == 1.0 and rows["w"]["b_s"] == "" and float(rows["inner"]["b_s"]) == 1.0


def test_outside_any_window_the_free_phase_does_nothing(machine):
    from edgeprof.measure.windows import current_window

    start = machine.wall_s
    with edgeprof.phase("anything"):
        assert current_window() is None  # it opened no window of its own
        machine.run(1.0)
    assert machine.wall_s == start + 1.0 and current_window() is None  # the body ran, nothing is left open
    with pytest.raises(MonitorError, match="phase name 'Bad-name'"):  # a name a window would refuse is refused
        with edgeprof.phase("Bad-name"):
            machine.run(1.0)


def test_a_failing_run_says_failed_and_names_the_windows_left_open(tmp_path, machine):
    mon = run_monitor(tmp_path, profiler(machine))
    with pytest.raises(RuntimeError, match="boom"):
        with mon:
            with mon.window("done"):
                machine.run(1.0)
            mon.begin_window("left-open")
            raise RuntimeError("boom")

    report = read_report(mon.csv_path)
    assert [r["window"] for r in report.rows] == ["done"]
    assert report.sidecar["status"] == "failed" and report.sidecar["reason"] == "boom"
    assert report.sidecar["monitor"]["unclosed_windows"] == ["left-open"]
    with pytest.raises(MonitorError, match="not running"):
        with mon.window("late"):
            pass


def test_stopping_inside_a_window_leaves_it_out_and_says_so(tmp_path, machine):
    mon = run_monitor(tmp_path, profiler(machine)).start()
    with mon.window("cut"):
        machine.run(1.0)
        mon.stop()

    report_text = mon.csv_path.read_text().splitlines()
    sidecar = json.loads(mon.sidecar_path.read_text())
    assert len(report_text) == 1 and sidecar["status"] == "complete"
    assert sidecar["monitor"]["unclosed_windows"] == ["cut"]


def test_the_decorator_measures_coroutines_and_each_recursive_call(tmp_path, machine):
    mon = run_monitor(tmp_path, profiler(machine))

    @mon.measure(name="fetch", client=1)
    async def fetch():
        machine.run(1.0)
        return "ok"

    @mon.measure
    def countdown(n):
        machine.run(1.0)
        return n if n == 0 else countdown(n - 1)

    with mon:
        assert asyncio.run(fetch()) == "ok"
        countdown(2)
    rows = read_report(mon.csv_path).rows

    assert [(r["window"], r["client"]) for r in rows[:1]] == [("fetch", "1")]
    assert [float(r["wall_s"]) for r in rows[1:]] == [1.0, 2.0, 3.0]  # innermost first; nested ones double count


def test_a_report_read_back_by_summary_and_dashboard(tmp_path, machine):
    with run_monitor(tmp_path, profiler(machine), labels={"algo": "mine"}) as mon:
        for epoch in (1, 2):
            with mon.window("epoch", round=epoch):
                with mon.phase("forward"):
                    machine.run(0.5)
        with mon.window("evaluate"):
            machine.run(0.25)
    runner = CliRunner()

    summary = runner.invoke(app, ["summary", str(mon.csv_path)], terminal_width=200)
    dashboard = runner.invoke(app, ["dashboard", str(mon.csv_path), "--out", str(tmp_path)])

    assert summary.exit_code == 0, summary.output
    assert "median per window" in summary.stdout and "window epoch" in summary.stdout
    lines = {ln.split("│")[2].strip(): ln for ln in summary.stdout.splitlines() if ln.count("│") > 3}
    assert "mine" in lines["window epoch"] and " 2 " in lines["window epoch"] and "counter" in lines["window epoch"]
    assert "0.5 " in lines["forward"] and "5 " in lines["forward"]  # median seconds and joules of the phase
    assert "window evaluate" in lines
    assert dashboard.exit_code == 0, dashboard.output
    page = (tmp_path / "mine.html").read_text()
    assert "Windows of your own code" in page and ">epoch<" in page and "forward 0.5 s" in page


def test_columns_join_the_header_when_a_phase_first_appears_and_rows_stay(tmp_path, machine):
    with run_monitor(tmp_path, profiler(machine), phases=["declared"]) as mon:
        with mon.window("first"):
            machine.run(1.0)
        header_before = mon.csv_path.read_text().splitlines()[0]
        with mon.window("second"):
            with mon.phase("late"):
                machine.run(1.0)
    report = read_report(mon.csv_path)

    assert "declared_s" in header_before and "late_s" not in header_before
    assert report.columns[-3:] == ("late_s", "late_cpu_s", "late_j")
    assert [r["late_s"] for r in report.rows] == ["", "1"] and float(report.rows[0]["wall_s"]) == 1.0
    assert report.sidecar["phases"] == ["declared", "late"]
    assert not list(tmp_path.glob("*.tmp"))


def test_bad_settings_fail_before_anything_is_written(tmp_path):
    for kwargs, message in (({"name": "a/b"}, "name"), ({"cpu_watts": -1.0}, "cpu"),
                            ({"labels": {"energy_j": 1}}, "fills itself"), ({"phases": ["Bad"]}, "phase name")):
        with pytest.raises(edgeprof.errors.ConfigError, match=message):
            edgeprof.monitor(out=tmp_path / "never", **kwargs)
    assert not (tmp_path / "never").exists()


# --- the API as people use it --------------------------------------------------------------------------------

def test_measure_takes_a_positional_name_and_measures_a_generator_over_its_whole_iteration(tmp_path, machine):
    mon = run_monitor(tmp_path, profiler(machine))

    @mon.measure("batches")
    def batches(n):
        for i in range(n):
            machine.run(0.25)  # the producer's work for item i
            yield i

    @mon.measure("async-batches")
    async def async_batches(n):
        for i in range(n):
            machine.run(0.125)
            yield i

    async def consume():
        return [i async for i in async_batches(2)]

    import asyncio

    with mon:
        items = [i for i in batches(4) if machine.run(0.5) is None]  # the consumer's work between items
        async_items = asyncio.run(consume())

    rows = {r["window"]: r for r in read_report(mon.csv_path).rows}
    assert items == [0, 1, 2, 3] and async_items == [0, 1]
    # one window each, over the whole iteration: 4 x (0.25 produce + 0.5 consume) and 2 x 0.125, exactly
    assert float(rows["batches"]["cpu_s"]) == 4 * 0.75 and float(rows["async-batches"]["cpu_s"]) == 2 * 0.125
    with pytest.raises(MonitorError, match="takes a function or a window name"):
        mon.measure(42)


def test_a_window_that_ends_in_an_exception_says_so_in_its_row(tmp_path, machine):
    mon = run_monitor(tmp_path, profiler(machine))

    with mon:
        with pytest.raises(ValueError):
            with mon.window("step"):
                machine.run(1.0)
                raise ValueError("bad batch")
        with mon.window("fine"):
            machine.run(1.0)

    rows = {r["window"]: r for r in read_report(mon.csv_path).rows}
    assert json.loads(rows["step"]["labels"]) == {"error": "ValueError"} and float(rows["step"]["cpu_s"]) == 1.0
    assert rows["fine"]["labels"] in ("", "{}")


def test_a_phase_whose_exit_an_exception_cut_short_ends_with_its_window(tmp_path, machine):
    """A signal handler that raises (the program's own ``sys.exit(143)``) as a phase's ``with`` block is being left
    can stop the phase's exit before it runs (contextlib's ``__exit__`` had not yet resumed the phase): the window
    that ends with that exception ended the phase itself, up to its own end, instead of refusing to end inside a
    phase (a MonitorError, a traceback and exit 1 where the program asked for 143). The phase's late exit, when its
    generator is collected, adds nothing."""
    mon = run_monitor(tmp_path, profiler(machine))

    with mon:
        with pytest.raises(SystemExit):
            with mon.window("epoch"):
                phase = mon.phase("data")
                phase.__enter__()
                machine.run(1.0)
                raise SystemExit(143)  # the phase's __exit__ never runs
        machine.run(0.5)
        del phase  # its generator closed: its finally (the phase's exit) runs now
        with mon.window("next"):
            machine.run(0.25)

    rows = {r["window"]: r for r in read_report(mon.csv_path).rows}
    assert json.loads(rows["epoch"]["labels"]) == {"error": "SystemExit"}
    assert float(rows["epoch"]["data_s"]) == float(rows["epoch"]["wall_s"]) == 1.0
    assert float(rows["next"]["wall_s"]) == 0.25 and rows["next"]["data_s"] == ""


@pytest.mark.parametrize("ending,status,reason", [
    ("", "interrupted", "interrupted (the program exited without stopping the monitor)"),
    ("os.kill(os.getpid(), signal.SIGTERM)", "interrupted", "interrupted (SIGTERM)"),
])
def test_a_monitor_never_stopped_or_terminated_keeps_its_rows_and_says_how_it_ended(tmp_path, ending, status, reason):
    """A program that starts a monitor and exits without stopping it, or gets SIGTERM inside it: the rows it
    finished stay, the sidecar says interrupted and why; no ImportError traceback at the interpreter's exit."""
    import subprocess
    import sys

    script = f"""
import os, signal, edgeprof
mon = edgeprof.monitor(out={str(tmp_path)!r}, run_id="left")
mon.start()
with mon.window("done"):
    pass
with mon.window("cut"):
    {ending or "pass"}
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)

    sidecar = json.loads((tmp_path / "left.json").read_text())
    rows = read_report(tmp_path / "left.csv").rows
    assert (sidecar["status"], sidecar["reason"]) == (status, reason), result.stderr
    assert [r["window"] for r in rows][0] == "done" and "ImportError" not in result.stderr


# ---------------------------------------------------------------------------------------- results as labels

def test_labels_set_while_a_window_is_open_label_its_row_and_none_after_it_ended(tmp_path):
    from edgeprof.errors import MonitorError
    from edgeprof.report.writer import read_report

    with edgeprof.monitor(out=tmp_path, run_id="labels", labels={"model": "mlp"}, cpu_watts=1.0) as mon:
        with mon.window("epoch", round=1) as w:
            w.labels["train_loss"] = 0.5  # a documented column, set once the loss is known
            w.labels.update(lr=0.1, model="cnn")  # any other label, and one overriding the monitor's
            with pytest.raises(MonitorError, match="fills the report column 'test_accuracy'"):
                w.labels["test_accuracy"] = float("nan")
        with pytest.raises(MonitorError, match="has ended and its row is written"):
            w.labels["train_loss"] = 0.25

    (row,) = read_report(tmp_path / "labels.csv").rows
    assert row["train_loss"] == "0.5" and row["test_accuracy"] == "" and row["round"] == "1"
    assert json.loads(row["labels"]) == {"lr": 0.1, "model": "cnn"}
    assert w.measurement.labels == {"model": "cnn", "round": 1, "train_loss": 0.5, "lr": 0.1}


def test_numpy_numbers_and_a_diverged_loss_label_rows_instead_of_stopping_the_program(tmp_path):
    """A training loop's values as it has them: numpy numbers (``np.float32``, a 0-d array as ``loss.numpy()``
    gives) are the numbers they hold (a float32 its shortest decimal); a diverged ``train_loss`` (nan, inf) is a result, written as such (the reader
    takes it, as from ``measure``), and a non-finite number in another label is the JSON string ``"nan"``; none of
    them raises in the program measured. A tensor-like array still gets one line naming ``.item()``."""
    import numpy as np

    from edgeprof.errors import MonitorError
    from edgeprof.report.writer import read_report

    losses = [np.float32(0.75), np.asarray(np.float32("nan")), np.float64("inf")]
    with edgeprof.monitor(out=tmp_path, run_id="np", labels={"lr": np.float32(0.1)}, cpu_watts=1.0) as mon:
        for epoch, loss in enumerate(losses):
            with mon.window("epoch", round=np.int64(epoch + 1), train_loss=loss, grad_norm=float(loss),
                            clipped=np.bool_(epoch > 0)):
                pass
        with mon.window("evaluate", kind="eval", test_accuracy=np.float32(0.25)):
            pass
        with pytest.raises(MonitorError, match=r"label batch=array\(\[1, 2\]\): label values are strings, numbers, "
                                               r"booleans or None \(a tensor's or array's number: its \.item\(\)\)"):
            mon.window("bad", batch=np.array([1, 2])).__enter__()

    rows = read_report(tmp_path / "np.csv").rows
    epochs = [r for r in rows if r["window"] == "epoch"]
    assert [r["round"] for r in epochs] == ["1", "2", "3"]
    assert [r["train_loss"] for r in epochs] == ["0.75", "nan", "inf"]
    assert [json.loads(r["labels"]) for r in epochs] == [
        {"lr": 0.1, "grad_norm": 0.75, "clipped": False}, {"lr": 0.1, "grad_norm": "nan", "clipped": True},
        {"lr": 0.1, "grad_norm": "inf", "clipped": True}]  # np.float32(0.1) as the 0.1 it was given, not 0.10000000149
    (evaluated,) = [r for r in rows if r["window"] == "evaluate"]
    assert evaluated["test_accuracy"] == "0.25"


def test_a_decorated_function_labels_its_row_with_what_it_returns(tmp_path):
    """``returns=`` a label name, or a function of the result; a generator's return value too; None labels
    nothing; a refused label fails the call, whose row says so; an async generator is refused up front."""
    from edgeprof.errors import MonitorError
    from edgeprof.report.writer import read_report

    mon = edgeprof.monitor(out=tmp_path, run_id="returns", cpu_watts=1.0)

    @mon.measure(kind="eval", returns="test_accuracy")
    def evaluate(value):
        return value

    @mon.measure(returns=lambda r: {"train_loss": r[0], "n_samples": r[1]})
    def train():
        return 0.75, 32

    @mon.measure(returns="test_accuracy")
    def batches():
        yield 1
        return 0.5

    with pytest.raises(MonitorError, match="async generator function"):
        @mon.measure(returns="test_accuracy")
        async def stream():
            yield 1

    with mon:
        assert evaluate(0.9) == 0.9 and evaluate(None) is None and train() == (0.75, 32)
        assert list(batches()) == [1]
        with pytest.raises(MonitorError, match="must be a finite number"):
            evaluate("high")

    rows = read_report(tmp_path / "returns.csv").rows
    assert [(r["window"], r["kind"], r["test_accuracy"]) for r in rows if r["window"] != "train"] == [
        ("evaluate", "eval", "0.9"), ("evaluate", "eval", ""), ("batches", "window", "0.5"),
        ("evaluate", "eval", "")]
    assert json.loads(rows[-1]["labels"]) == {"error": "MonitorError"}
    (trained,) = [r for r in rows if r["window"] == "train"]
    assert (trained["train_loss"], trained["n_samples"]) == ("0.75", "32")


# ---------------------------------------------------------------------------------------- signals

def test_terminated_is_not_a_keyboard_interrupt_and_edgeprof_catches_both():
    import signal

    from edgeprof.signals import STOP_EXCEPTIONS, Terminated, stop_behind

    term = Terminated(signal.SIGTERM)
    caught_by_ctrl_c = False
    try:
        raise term
    except KeyboardInterrupt:  # a program's own Ctrl-C handling
        caught_by_ctrl_c = True
    except BaseException:
        pass

    assert not caught_by_ctrl_c and not isinstance(term, (KeyboardInterrupt, Exception))
    assert isinstance(term, STOP_EXCEPTIONS) and stop_behind(RuntimeError().with_traceback(None)) is None
    assert term.reason == "interrupted (SIGTERM)"


def test_the_monitor_chains_to_the_programs_handler_records_the_signal_and_puts_it_back(tmp_path):
    """A handler the program set before the monitor started runs on SIGTERM (the monitor does not take its
    place); the monitor records the signal, the sidecar says interrupted; after the run the program's handler is
    its own again."""
    import os
    import signal

    heard = []
    own = lambda signum, frame: heard.append(signum)  # noqa: E731
    previous = signal.signal(signal.SIGTERM, own)
    try:
        with edgeprof.monitor(out=tmp_path, run_id="chained", cpu_watts=1.0) as mon:
            with mon.window("step"):
                os.kill(os.getpid(), signal.SIGTERM)
                signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary for the handler to run at
            assert signal.getsignal(signal.SIGTERM) is not own  # the monitor's, which chains to it
        after = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)

    sidecar = json.loads((tmp_path / "chained.json").read_text())
    assert heard == [signal.SIGTERM] and after is own
    assert (sidecar["status"], sidecar["reason"]) == ("interrupted", "interrupted (SIGTERM)")
    assert sidecar["monitor"]["signals"] == ["SIGTERM"] and sidecar["rows"] == 1

"""What a person sees while edgeprof works: named set-up stages, bars that start after set-up, and a
sweep bar weighted by each cell's expected cost."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from edgeprof.config import RunConfig
from edgeprof.cli.progress import Display
from edgeprof.rounds.simulate import run
from edgeprof.rounds.sweep import Cell, SweepConfig, Variant, cell_weights, plan_cells


def _tiny(tmp_path, **kw) -> RunConfig:
    return RunConfig(dataset="synthetic", synthetic_samples=200, synthetic_classes=4, backbone="mlp", clients=4,
                     rounds=3, tau=2, out=tmp_path, progress=False, **kw)


def test_run_names_each_set_up_stage_before_the_first_round(tmp_path):
    events = []

    result = run(_tiny(tmp_path, run_name="stages"), stage=lambda text: events.append(("stage", text)),
                 progress=lambda done, total: events.append(("progress", done, total)))

    stages = [e[1] for e in events if e[0] == "stage"]
    assert [s.split()[0] for s in stages] == ["loading", "building", "opening"]
    assert "generated synthetic data" in stages[0] and "4 clients" in stages[0]
    assert "exporting the backbone to ONNX" in stages[1]  # pflego's default engine is onnx
    first = next(i for i, e in enumerate(events) if e[0] == "progress")
    assert events[first] == ("progress", 0, 3) and all(e[0] == "stage" for e in events[:first])
    assert [e[1] for e in events[first:]] == [0, 1, 2, 3] and result.rounds_completed == 3


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=140, color_system=None), buffer


def test_display_shows_the_stage_then_replaces_it_by_the_bar():
    console, buffer = _console()

    with Display(True, console=console) as display:
        display.stage("loading the embedded digits")
        display._progress.refresh()
        during_setup = buffer.getvalue()
        bar = display.bar("pflego tau=50", 3)
        bar(3, 3)
        tasks = list(display._progress.tasks)

    assert "set-up: loading the embedded digits" in during_setup
    assert [t.description for t in tasks] == ["pflego tau=50"]  # the set-up line is gone
    assert tasks[0].completed == 3 and "3/3" in buffer.getvalue()


def test_each_bar_starts_its_clock_after_its_own_set_up():
    import time

    console, _ = _console()
    with Display(True, console=console) as display:
        display.stage("first algorithm")
        first = display.bar("a", 1)
        first(1, 1)
        display.stage("second algorithm")
        time.sleep(0.3)  # a slow set-up of the second run
        display.bar("b", 1)
        a, b = display._progress.tasks
        assert a.finished_time is not None and a.finished_time < 0.3
        assert b.elapsed is not None and b.elapsed < 0.3


def test_disabled_display_says_nothing():
    with Display(False) as display:
        display.stage("anything")
        assert display.bar("a", 2) is None and display.weighted_bar("s", [1.0]) is None


def test_sweep_cells_are_weighted_by_expected_cost():
    cells = [Cell(Variant("pflego", "onnx"), tau, 1) for tau in (1, 100)] + \
            [Cell(Variant("fedavg", "torch"), tau, 1) for tau in (1, 100)]

    weights = cell_weights(cells)

    assert sum(weights) == pytest.approx(1.0)
    assert weights[0] == pytest.approx(weights[1])  # PFLEGO's round does not grow with tau
    assert weights[3] / weights[2] == pytest.approx((3 * 100 + 1) / (3 * 1 + 1))  # FedAvg's: 3 passes a step
    assert weights[3] > 50 * weights[1]


def test_the_weighted_bar_advances_by_cost_not_by_count():
    cfg = SweepConfig(algos=("pflego", "fedavg"), taus=(1, 100), repeats=1)
    cells = plan_cells(cfg)
    weights = cell_weights(cells)
    console, _ = _console()

    with Display(True, console=console) as display:
        advance = display.weighted_bar("sweep cells", weights)
        advance(1, len(cells))
        (task,) = display._progress.tasks

    assert task.completed == round(1000 * weights[0]) and task.description == "sweep cells 1/4"

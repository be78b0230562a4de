"""The tau that reaches a target accuracy for the fewest client joules (issue 40): over seeds on hand-built reports,
the projection onto a swept device, the CLI's refusals, and one small run on the embedded digits."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.report.writer import Report, read_report
from edgeprof.report.to_target import cells, optima, project, read_costs, render, verdict_lines
from edgeprof.rounds.train import energy_to_target

COLUMNS = ("run_id", "algo", "tau", "round", "kind", "wall_s", "energy_j", "energy_method", "test_accuracy")


def _run(algo: str, tau: int, seed: int, accuracies, joules_per_client: float, clients: int = 2) -> Report:
    """One run's report: per round ``clients`` client rows (joules and seconds growing with the round), a server row
    and an eval row; its seed in the sidecar, as ``edgeprof train`` writes it."""
    rows = []
    for t, acc in enumerate(accuracies, start=1):
        for c in range(clients):
            j = joules_per_client * (1 + 0.1 * t + 0.01 * c + 0.03 * seed)
            rows.append(dict(run_id="r", algo=algo, tau=str(tau), round=str(t), kind="client", wall_s=str(j / 7),
                             energy_j=str(j), energy_method="estimate", test_accuracy=""))
        rows.append(dict(run_id="r", algo=algo, tau=str(tau), round=str(t), kind="server", wall_s="5",
                         energy_j="50", energy_method="estimate", test_accuracy=""))
        rows.append(dict(run_id="r", algo=algo, tau=str(tau), round=str(t), kind="eval", wall_s="", energy_j="",
                         energy_method="", test_accuracy=str(acc)))
    return Report(Path(f"{algo}-{tau}-{seed}.csv"), COLUMNS, rows, sidecar={"config": {"seed": seed}})


def _by_hand(report: Report, target: float):
    """Independently from the rows: (first round reaching the target, client joules and seconds up to it)."""
    first = None
    for row in report.rows:
        if row["kind"] == "eval" and float(row["test_accuracy"]) >= target:
            first = int(row["round"]) if first is None else min(first, int(row["round"]))
    if first is None:
        return None
    upto = [r for r in report.rows if r["kind"] == "client" and int(r["round"]) <= first]
    return first, sum(float(r["energy_j"]) for r in upto), sum(float(r["wall_s"]) for r in upto)


def _t_interval(values):
    values = np.asarray(values, dtype=float)
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    return max(lo, 0.0), hi


CURVES = {  # seed -> test accuracy per round, per (algo, tau)
    ("a", 1): {0: [0.5, 0.7, 0.91, 0.95], 1: [0.6, 0.92, 0.93, 0.95], 2: [0.5, 0.6, 0.8, 0.9]},
    ("a", 5): {0: [0.91, 0.95, 0.96, 0.97], 1: [0.8, 0.93, 0.95, 0.96], 2: [0.92, 0.94, 0.95, 0.96]},
    ("b", 1): {0: [0.4, 0.5, 0.6, 0.7], 1: [0.4, 0.5, 0.6, 0.95], 2: [0.4, 0.5, 0.6, 0.7]},
    ("b", 5): {0: [0.6, 0.9, 0.95, 0.95], 1: [0.7, 0.92, 0.95, 0.96], 2: [0.8, 0.9, 0.95, 0.97]},
}
JOULES = {("a", 1): 1.0, ("a", 5): 4.0, ("b", 1): 1.0, ("b", 5): 2.0}


def _reports():
    return [_run(algo, tau, seed, acc, JOULES[(algo, tau)]) for (algo, tau), seeds in CURVES.items()
            for seed, acc in seeds.items()]


@pytest.mark.parametrize("target", [0.9, 0.95])
def test_cells_match_an_independent_computation_from_the_rows(target):
    reports = _reports()

    table = cells([r for rep in reports for r in energy_to_target(rep, target)])

    assert [(c.algo, c.tau) for c in table] == list(CURVES)
    for cell in table:
        runs = [rep for rep in reports if rep.rows[0]["algo"] == cell.algo and rep.rows[0]["tau"] == str(cell.tau)]
        hand = [_by_hand(rep, target) for rep in runs]
        reached = [h for h in hand if h is not None]
        assert cell.reached == len(reached) and cell.seeds == (0, 1, 2)
        assert cell.is_reached == (len(reached) >= 2)
        if not cell.is_reached:
            assert math.isinf(cell.joules.median)
            continue
        joules = sorted([h[1] for h in reached] + [math.inf] * (3 - len(reached)))
        assert cell.joules.median == pytest.approx(joules[1])
        assert cell.rounds.median == sorted([h[0] for h in reached] + [math.inf] * (3 - len(reached)))[1]
        if len(reached) == 3:
            assert (cell.joules.lo, cell.joules.hi) == pytest.approx(_t_interval([h[1] for h in reached]))
            assert (cell.wall_s.lo, cell.wall_s.hi) == pytest.approx(_t_interval([h[2] for h in reached]))
        else:  # some seed did not reach: the point only
            assert cell.joules.lo is None and cell.joules.hi is None


@pytest.mark.parametrize("target", [0.9, 0.95])
def test_the_energy_optimal_tau_is_the_reached_cell_with_the_lowest_median_joules(target):
    table = cells([r for rep in _reports() for r in energy_to_target(rep, target)])
    expected = {}
    for algo in ("a", "b"):
        reached = [c for c in table if c.algo == algo and 2 * c.reached > 3]
        expected[algo] = min(reached, key=lambda c: c.joules.median).tau if reached else None

    best = optima(table)
    lines = verdict_lines(table)

    assert {a: (c.tau if c else None) for a, c in best.items()} == expected
    for algo, tau in expected.items():
        shown = f"energy-optimal tau of {algo}: {tau} (" if tau else f"energy-optimal tau of {algo}: none"
        assert any(line.startswith(shown) for line in lines), lines
    winner = min((c for c in best.values() if c), key=lambda c: c.joules.median)
    assert lines[-1].startswith(f"fewest client joules to target: {winner.algo} at tau {winner.tau}")
    assert all("energy_j (ESTIMATE)" in line for line in lines if "client J" in line or "fewest" in line)


@pytest.mark.parametrize("reached_seeds, shown_as_reached", [((0, 1, 2), True), ((0, 1), True), ((0,), False),
                                                              ((), False)])
def test_a_cell_is_not_reached_unless_more_than_half_its_seeds_reached(reached_seeds, shown_as_reached):
    reports = [_run("a", 3, s, [0.5, 0.95 if s in reached_seeds else 0.6, 0.7], 1.0) for s in range(3)]

    (cell,) = cells([r for rep in reports for r in energy_to_target(rep, 0.9)])
    text = _text(render([cell], 0.9))

    assert cell.reached == len(reached_seeds) and cell.is_reached is shown_as_reached
    assert f"{len(reached_seeds)}/3" in text
    assert ("not reached in 3 rounds" in text) is not shown_as_reached


def _on(host: str, report: Report, backbone: str = "mlp") -> Report:
    """``report`` as measured on ``host``, of ``backbone`` (its rows' ``host`` and ``backbone`` columns)."""
    return Report(report.path, (*report.columns, "host", "backbone"),
                  [dict(r, host=host, backbone=backbone) for r in report.rows], report.sidecar)


def test_seeds_count_once_and_one_devices_runs_only():
    """A seed is one sample of the spread over seeds: two runs of one seed (a run repeated, its reports given with
    the first's) are refused rather than counted as two, which would narrow the interval; seeds added by a later run
    are welcome. Joules to target are a device's, of one workload: runs of two devices, or of two backbones, are
    refused, not pooled into one median."""
    from edgeprof.errors import ReportError

    def table(reports):
        return cells([r for rep in reports for r in energy_to_target(rep, 0.9)])

    first = [_on("laptop", _run("a", 1, s, [0.5, 0.95], 1.0)) for s in (0, 1)]
    later = [_on("laptop", _run("a", 1, s, [0.6, 0.95], 1.5)) for s in (1, 2)]  # seed 1 again, and seed 2

    (cell,) = table(first + later[1:])
    assert cell.seeds == (0, 1, 2) and cell.joules.n == 3
    with pytest.raises(ReportError, match=r"^a at tau 1: seed 1 comes from two runs; .*give one report per seed$"):
        table(first + later)
    (other,) = table([_on("jetson", rep) for rep in later])
    assert other.seeds == (1, 2)
    with pytest.raises(ReportError, match=r"^these train runs were measured on 2 devices \(jetson, laptop\): the "
                                          r"energy to target is one device's; give one device's reports$"):
        table(first + [_on("jetson", rep) for rep in later[1:]])
    with pytest.raises(ReportError, match=r"^these train runs trained 2 workloads \(data set/backbone/device: "
                                          r"/cnn/, /mlp/\): the energy to target is one workload's; give the reports "
                                          r"of one$"):
        table(first + [_on("laptop", _run("a", 1, 2, [0.6, 0.95], 1.5), backbone="cnn")])


@pytest.mark.parametrize("hosts", [("laptop", "jetson"), ("laptop", "laptop")])
def test_summary_and_dashboard_of_two_devices_train_runs_refuse_the_pooled_table(tmp_path, hosts):
    """``summary`` refuses a table pooled over devices in one line (exit 7), before it prints anything, as it
    refuses any report set it cannot summarize whole; the dashboard says it in its to-target section and draws the
    rest."""
    from edgeprof.report.dashboard import render as dashboard

    train = {"target_accuracy": 0.9, "eval_protocol": "global"}
    paths = [_write_train_report(tmp_path, f"a-{seed}", _on(host, _run("a", 1, seed, [0.5, 0.95], 1.0)), train)
             for seed, host in enumerate(hosts)]

    result = CliRunner().invoke(app, ["summary", *map(str, paths)])
    page = dashboard([read_report(p) for p in paths])

    pooled = hosts[0] != hosts[1]
    assert result.exit_code == (7 if pooled else 0), result.output
    assert all(f"report: {p}" in result.stdout for p in paths) is not pooled and (result.stdout == "") is pooled
    assert ("energy-optimal tau of a: 1 (" in result.stdout) is not pooled
    section = page[page.index('id="to-target"'):page.index('id="methods"')]
    assert ("measured on 2 devices (jetson, laptop)" in section) is pooled
    assert ("client joules to 90% test accuracy" in page) is not pooled
    if pooled:
        assert [ln for ln in result.stderr.splitlines() if ln.strip()] == [
            "edgeprof: error: these train runs were measured on 2 devices (jetson, laptop): the energy to target is "
            "one device's; give one device's reports"]


def _text(table) -> str:
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


# --- projection onto a swept device -------------------------------------------------------------------------------
def _write_sweep(path: Path, lines: dict[str, tuple[float, float]], taus=(1, 5, 10, 20), host="jetson",
                 column="host", backbone="mlp"):
    """A sweep report: per algorithm three client rows at each tau, joules a + b*tau plus a fixed wobble; the
    machine's name in ``column`` (``device``: as an older edgeprof wrote it); ``backbone``: train's default."""
    wobble = (-0.05, 0.0, 0.07)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=("run_id", column, "algo", "engine", "backbone", "tau", "round", "kind",
                                          "energy_j", "energy_method"))
        w.writeheader()
        for algo, (a, b) in lines.items():
            for tau in taus:
                for i, d in enumerate(wobble):
                    w.writerow({"run_id": "s", column: host, "algo": algo, "engine": "", "backbone": backbone,
                                "tau": tau, "round": i + 1, "kind": "client", "energy_j": a + b * tau + d,
                                "energy_method": "counter"})
    return path


@pytest.mark.parametrize("column", ["host", "device"])  # device: an older sweep's column, read as host
def test_a_projection_is_counted_rounds_here_times_the_fitted_cost_there(tmp_path, column):
    sweep = _write_sweep(tmp_path / "sweep.csv", {"a": (2.0, 0.5), "b": (1.0, 0.1)}, column=column)
    table = cells([r for rep in _reports() for r in energy_to_target(rep, 0.9)])
    rows = read_report(sweep).rows

    costs = read_costs(sweep, ("a", "b"), (1, 5))
    projected = [project(c, costs[c.algo]) for c in table]

    for cell in projected:
        pts = [(float(r["tau"]), float(r["energy_j"])) for r in rows if r["algo"] == cell.algo]
        x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
        b, a = np.polyfit(x, y, 1)
        resid = y - (a + b * x)
        band = stats.t.ppf(0.975, len(x) - 2) * math.sqrt(resid @ resid / (len(x) - 2)) * math.sqrt(
            1 / len(x) + (cell.tau - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum())
        cost = a + b * cell.tau
        p = cell.projection
        assert p.host == "jetson" and p.cost_j == pytest.approx(cost)
        assert (p.cost_lo, p.cost_hi) == pytest.approx((cost - band, cost + band))
        if not cell.is_reached:
            assert p.joules is None
            continue
        count = cell.client_rounds
        assert p.joules.median == pytest.approx(count.median * cost)
        n_lo, n_hi = (count.lo, count.hi) if count.lo is not None else (count.median, count.median)
        assert (p.joules.lo, p.joules.hi) == pytest.approx((n_lo * (cost - band), n_hi * (cost + band)))
    lines = verdict_lines(projected)
    assert "PROJECTED client J on jetson" in _text(render(projected, 0.9))
    for algo in ("a", "b"):  # the optimum there: the lowest projected median, whatever tau is cheapest here
        mine = [c for c in projected if c.algo == algo and c.projection.joules is not None]
        there = min(mine, key=lambda c: c.projection.joules.median)
        after = lines[next(i for i, line in enumerate(lines) if line.startswith(f"energy-optimal tau of {algo}:")) + 1]
        assert after.startswith(f"  on jetson: tau {there.tau} (") and "PROJECTION onto jetson" in after


@pytest.mark.parametrize("lines, taus, message", [
    ({"a": (2.0, 0.5)}, (1,), "has no energy fit for b"),
    ({"a": (2.0, 0.5), "b": (1.0, 0.1)}, (1, 50), "does not cover tau 50"),
])
def test_read_costs_refuses_a_sweep_that_cannot_project(tmp_path, lines, taus, message):
    from edgeprof.errors import ConfigError

    sweep = _write_sweep(tmp_path / "sweep.csv", lines)

    with pytest.raises(ConfigError, match=message):
        read_costs(sweep, ("a", "b"), taus)


# --- the command line ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (["--tau", "5", "--taus", "1,5"], "--tau and --taus both given"),
    (["--seed", "1", "--seeds", "0,1"], "--seed and --seeds both given"),
    (["--taus", "1,x"], "--taus must be a comma-separated list of ints"),
    (["--seeds", ","], "--seeds must be a comma-separated list of distinct integers"),
    (["--taus", "5,5"], "--taus must be a comma-separated list of distinct integers"),
    (["--taus", "1,5", "--cost-from", "{sweep}"], "has no energy fit for fedavg"),
    (["--taus", "1,50", "--algos", "pflego", "--cost-from", "{sweep}"], "does not cover tau 50"),
    (["--taus", "1,5", "--algos", "pflego", "--backbone", "cnn-omniglot", "--cost-from", "{sweep}"],
     "its rounds ran the backbone mlp, this training cnn-omniglot: a round's joules are its backbone's; sweep that "
     "device with --backbone cnn-omniglot"),
])
def test_train_refuses_bad_lists_in_one_line_before_running(tmp_path, extra, message):
    sweep = _write_sweep(tmp_path / "sweep.csv", {"pflego": (2.0, 0.01)})
    out = tmp_path / "out"
    args = ["train", "--algos", "pflego,fedavg", "--out", str(out), "--no-progress"]
    args += [a.replace("{sweep}", str(sweep)) for a in extra]

    result = CliRunner().invoke(app, args)

    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists() or not list(out.iterdir())


def test_a_small_digits_run_names_each_algorithms_energy_optimal_tau(tmp_path):
    """The run docs/energy-to-target.md shows (with --cost-from, its projection), then `summary` of its reports."""
    sweep = _write_sweep(tmp_path / "sweep.csv", {"pflego": (2.0, 0.01), "fedavg": (1.0, 0.2)})
    args = ["train", "--algos", "pflego,fedavg", "--taus", "1,10", "--seeds", "0,1", "--target-accuracy", "0.8",
            "--rounds", "5", "--clients", "4", "--participation", "0.5", "--threads", "1"]

    result = CliRunner().invoke(app, args + ["--out", str(tmp_path / "r"), "--run-name", "d", "--no-progress",
                                             "--cost-from", str(sweep)])
    summary = CliRunner().invoke(app, ["summary", *map(str, sorted((tmp_path / "r").glob("*.csv")))])

    assert result.exit_code == 0, result.output
    for algo in ("pflego", "fedavg"):
        assert f"energy-optimal tau of {algo}: " in result.stdout
        for tau in (1, 10):
            for seed in (0, 1):
                report = read_report(tmp_path / "r" / f"d-{algo}-tau{tau}-seed{seed}.csv")
                evals = report.where(kind="eval")
                assert len(evals) == 5 and {(r["tau"], r["seed"]) for r in evals} == {(str(tau), str(seed))}
                assert report.sidecar["config"]["seed"] == seed
                assert report.sidecar["train"]["target_accuracy"] == 0.8
    assert "fewest client joules to target" in result.stdout and "energy_j (ESTIMATE)" in result.stdout
    assert "PROJECTION onto jetson" in result.stdout and "PROJECTED" in result.stdout
    assert summary.exit_code == 0, summary.output
    assert "to 80% test accuracy" in summary.stdout
    for line in result.stdout.splitlines():
        if line.startswith("energy-optimal tau of"):
            assert line in summary.stdout


def _write_train_report(folder: Path, name: str, report: Report, train: dict) -> Path:
    import json

    path = folder / f"{name}.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=report.columns)
        w.writeheader()
        w.writerows(report.rows)
    path.with_suffix(".json").write_text(json.dumps({**report.sidecar, "train": train}))
    return path


@pytest.mark.parametrize("targets, code, shown", [
    ((0.9, 0.9), 0, "energy-optimal tau of a: 5 ("),
    ((0.9, 0.95), 7, "different or no target accuracies"),
    ((0.9, "high"), 7, "different or no target accuracies"),
])
def test_summary_of_train_reports_prints_the_table_or_refuses_mixed_targets(tmp_path, targets, code, shown):
    reports = [_run("a", tau, 0, [0.5, 0.95, 0.96], 1.0 if tau == 1 else 0.1) for tau in (1, 5)]
    paths = [_write_train_report(tmp_path, f"a-{i}", rep, {"target_accuracy": t, "eval_protocol": "global"})
             for i, (rep, t) in enumerate(zip(reports, targets))]

    result = CliRunner().invoke(app, ["summary", *map(str, paths)])

    assert result.exit_code == code, result.output
    assert shown in result.output and "Traceback" not in result.output
    if code:
        assert len([line for line in result.stderr.splitlines() if "error" in line]) == 1


def test_accuracy_against_cumulative_client_joules_and_its_pareto_front_match_the_rows():
    """Every evaluation as (client joules of its rounds so far, accuracy), computed again from the rows; the front
    holds exactly the points no other point beats on both counts, checked against every pair."""
    from edgeprof.report.to_target import accuracy_energy, pareto_front

    reports = _reports()
    points = [p for rep in reports for p in accuracy_energy(rep)]

    hand = []
    for rep in reports:
        seed = rep.sidecar["config"]["seed"]
        for row in rep.rows:
            if row["kind"] == "eval":
                joules = sum(float(r["energy_j"]) for r in rep.rows
                             if r["kind"] == "client" and int(r["round"]) <= int(row["round"]))
                hand.append((row["algo"], int(row["tau"]), seed, int(row["round"]), joules, float(row["test_accuracy"])))
    got = [(p.algo, p.tau, p.seed, p.round, p.joules, p.accuracy) for p in points]
    assert sorted(g[:4] for g in got) == sorted(h[:4] for h in hand)
    for g, h in zip(sorted(got), sorted(hand)):
        assert g[4] == pytest.approx(h[4], rel=1e-12) and g[5] == h[5]

    front = pareto_front(points)
    beaten = {id(p) for p in points for q in points
              if q.joules <= p.joules and q.accuracy >= p.accuracy and (q.joules, q.accuracy) != (p.joules, p.accuracy)}
    undominated = {(p.joules, p.accuracy) for p in points if id(p) not in beaten}
    assert {(p.joules, p.accuracy) for p in front} == undominated and len(front) == len(undominated)
    assert [p.joules for p in front] == sorted(p.joules for p in front)
    assert all(a.accuracy < b.accuracy for a, b in zip(front, front[1:]))  # more energy on it buys more accuracy
    assert 1 < len(front) < len(points)


def test_the_dashboard_draws_joules_to_target_against_tau_with_the_optimum_and_unreached_cells():
    import json
    import re

    from edgeprof.report.dashboard import render as dashboard

    reports = [Report(r.path, r.columns, r.rows, sidecar={**r.sidecar, "train": {"target_accuracy": 0.9}})
               for r in _reports()]
    table = cells([res for rep in reports for res in energy_to_target(rep, 0.9)])

    page = dashboard(reports)

    figures = json.loads(re.search(r'id="edgeprof-figures">(.*?)</script>', page, re.S).group(1))
    (figure,) = [f for f in figures if "client joules to 90% test accuracy" in f["layout"]["title"]["text"]]
    traces = {t["name"]: t for t in figure["data"]}
    for algo, best in optima(table).items():
        reached = [c for c in table if c.algo == algo and c.is_reached]
        missing = [c for c in table if c.algo == algo and not c.is_reached]
        line = traces[algo]
        assert line["x"] == [c.tau for c in reached] and line["y"] == pytest.approx([c.joules.median for c in reached])
        assert line["error_y"]["array"] == pytest.approx([c.joules.hi - c.joules.median if c.joules.hi else 0
                                                          for c in reached])
        assert traces[f"{algo}: energy-optimal tau {best.tau}"]["x"] == [best.tau]
        if missing:
            crosses = traces[f"{algo}: not reached"]
            assert crosses["x"] == [c.tau for c in missing] and crosses["marker"]["symbol"] == "x-open"
            assert all(text.startswith("not reached in 4 rounds") for text in crosses["text"])
        else:
            assert f"{algo}: not reached" not in traces
    assert "energy_j (ESTIMATE)" in figure["layout"]["title"]["text"]

    # accuracy against cumulative client joules: a line a run, and the Pareto front over every evaluation
    from edgeprof.report.to_target import accuracy_energy, pareto_front

    (curves,) = [f for f in figures if "test accuracy against cumulative client joules" in f["layout"]["title"]["text"]]
    lines = {t["name"]: t for t in curves["data"]}
    points = [p for rep in reports for p in accuracy_energy(rep)]
    front = pareto_front(points)
    assert lines["Pareto front"]["x"] == pytest.approx([p.joules for p in front])
    assert lines["Pareto front"]["y"] == [p.accuracy for p in front]
    for algo, tau in CURVES:
        mine = [p for p in points if (p.algo, p.tau) == (algo, tau)]
        drawn = [(x, y) for x, y in zip(lines[f"{algo}, tau {tau}"]["x"], lines[f"{algo}, tau {tau}"]["y"]) if x is not None]
        expected = sorted((p.joules, p.accuracy) for p in mine)
        assert [x for pair in sorted(drawn) for x in pair] == pytest.approx([x for pair in expected for x in pair])
        assert lines[f"{algo}, tau {tau}"]["x"].count(None) == len(CURVES[(algo, tau)])  # the seeds apart
    assert lines["target 90%"]["y"] == [0.9, 0.9]
    assert "energy_j (ESTIMATE)" in curves["layout"]["title"]["text"]


def test_summary_refuses_a_seed_from_two_runs_before_it_prints_anything(tmp_path):
    """`edgeprof summary` of train reports that give one seed twice: one line and exit 7, nothing printed before it
    (it printed every report's summary, then refused)."""
    import csv
    import json

    from typer.testing import CliRunner

    from edgeprof.cli import app

    paths = []
    for name, seed, accuracies in (("first", 1, [0.5, 0.95]), ("again", 1, [0.6, 0.95])):
        report = _run("pflego", 1, seed, accuracies, 1.0)
        path = tmp_path / name / "digits-pflego.csv"
        path.parent.mkdir()
        with path.open("w", newline="") as f:
            out = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
            out.writeheader()
            out.writerows({**r, "run_id": name} for r in report.rows)
        path.with_suffix(".json").write_text(json.dumps({"status": "complete", "config": {"seed": seed},
                                                         "train": {"target_accuracy": 0.9}}))
        paths.append(str(path))

    result = CliRunner().invoke(app, ["summary", *paths])

    assert result.exit_code == 7, result.output
    assert result.stdout == "" and "seed 1 comes from two runs" in result.stderr
    assert len([ln for ln in result.stderr.splitlines() if ln.strip()]) == 1, result.stderr


def test_an_evaluation_whose_joules_hold_a_short_window_is_hollow_and_off_the_pareto_front():
    """Its joules sum a client window the meters did not resolve: it is drawn hollow, said so in its hover text and
    a note, and the front is made of the resolved evaluations alone (it drew them as solid front points)."""
    from edgeprof.report.dashboard.page import Page
    from edgeprof.report.dashboard.target import _front_figure
    from edgeprof.report.to_target import accuracy_energy, pareto_front

    report = _run("a", 1, 0, [0.5, 0.7, 0.95], 1.0)
    first = next(r for r in report.rows if r["kind"] == "client" and r["round"] == "1")
    rows = [dict(r, short_window="1" if r is first else "0") for r in report.rows]
    report = Report(report.path, (*report.columns, "short_window"), rows, report.sidecar)

    points = accuracy_energy(report)
    page = Page()
    _front_figure(page, points, 0.9, "energy_j (ESTIMATE)")

    assert [p.short for p in points] == [1, 1, 1] and pareto_front(points) == []  # round 1's row is in every sum
    run, front = page.figures[0]["data"][0], page.figures[0]["data"][1]
    assert [s for s, x in zip(run["marker"]["symbol"], run["x"]) if x is not None] == ["circle-open"] * 3
    assert front["x"] == [] and all("short window(s) in its joules: not resolved" in t for t in run["text"] if t)
    clean = Report(report.path, report.columns, [dict(r, short_window="0") for r in rows], report.sidecar)
    assert len(pareto_front(accuracy_energy(clean))) == 3

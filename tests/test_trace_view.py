"""``edgeprof trace`` and the dashboard's power-over-time section, on real traced runs and on trace files written
here in the real format: every figure checked against a sum computed here from the trace file's own rows (mean W =
sum(w * dt) / sum(dt), peak = max over the resolved, unflagged intervals), every mark against the rows' own
``resolved`` and ``flag`` cells."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path
from typing import NamedTuple, Optional

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.measure.trace import TraceRow
from edgeprof.report.dashboard import render
from edgeprof.report.trace_file import EARLIER_COLUMNS, TraceWriter
from edgeprof.report.dashboard.window_charts import HOLLOW
from edgeprof.report.writer import read_report, write_sidecar

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
         "--clients", "4", "--participation", "0.5", "--tau", "20", "--rounds", "2", "--threads", "1", "--no-progress"]
ALGOS = ("pflego", "fedavg")


def _measure(out: Path, name: str, *extra: str) -> Path:
    result = CliRunner().invoke(app, ["measure", *SMALL, *extra, "--out", str(out), "--run-name", name])
    assert result.exit_code == 0, result.output
    return out / f"{name}.csv"


def traced_reports(folder: Path) -> dict[str, Path]:
    """A traced report of each of PFLEGO and FedAvg (2 rounds, 2 of 4 clients each), and one run without --trace."""
    reports = {algo: _measure(folder, algo, "--algo", algo, "--trace", "--trace-hz", "1000") for algo in ALGOS}
    reports["plain"] = _measure(folder, "plain", "--algo", "pflego")
    return reports


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    return traced_reports(tmp_path_factory.mktemp("traced"))


# --- what is computed here from the files, without edgeprof's readers ------------------------------------
def _raw(report: Path) -> list[dict]:
    """The trace file's rows as its format stores them (pyarrow for Parquet, csv for CSV; a trace without the
    ``resolved`` and ``flag`` columns as resolved and unflagged)."""
    section = json.loads(report.with_suffix(".json").read_text())["trace"]
    path = report.parent / section["file"]
    if section["format"] == "parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        with open(path, newline="") as f:
            rows = [dict(r, t_s=float(r["t_s"]), dt_s=float(r["dt_s"]), w=float(r["w"] or "nan"), row=int(r["row"]),
                         round=int(r["round"])) for r in csv.DictReader(f)]
    return [dict(r, w=math.nan if r["w"] is None else r["w"], resolved=int(r.get("resolved", 1)),
                 flag=r.get("flag") or "") for r in rows]


def _client_energies(report: Path) -> list[tuple[float, int, str]]:
    """(energy J, round, client) of each client row of the report CSV."""
    with open(report, newline="") as f:
        return [(float(r["energy_j"]), int(r["round"]), r["client"]) for r in csv.DictReader(f) if r["kind"] == "client"]


def _lower_median(items: list) -> object:
    return sorted(items)[(len(items) - 1) // 2]


def _resolvable_energies(report: Path, round: Optional[int] = None) -> tuple[list[tuple[tuple, int, str]], int]:
    """((energy J, report row), round, client) of each client window (of ``round`` where given) the meter resolves
    (it lasts two update periods of the estimate, the sidecar's), or of every one where none does; and how many were
    left out. Durations and joules from the trace file's intervals (``sum(w * dt_s)`` of the total's valid ones, as
    its rows are written), ties in the order of the report's rows, as the window is chosen."""
    period = _period(report, "cpu_estimate")
    windows: dict[int, dict] = {}
    for r in _raw(report):
        if r["kind"] == "client":
            w = windows.setdefault(int(r["row"]), {"round": int(r["round"]), "client": str(r["client"]), "dt": {},
                                                   "j": 0.0})
            w["dt"][r["t_s"]] = r["dt_s"]
            if r["in_total"] and math.isfinite(r["w"]):
                w["j"] += r["w"] * r["dt_s"]
    every = [((w["j"], row), w["round"], w["client"]) for row, w in windows.items()
             if round is None or w["round"] == round]
    kept = [e for e, (row, w) in zip(every, [(row, w) for row, w in windows.items()
                                             if round is None or w["round"] == round])
            if sum(w["dt"].values()) >= 2 * period]
    return (kept, len(every) - len(kept)) if kept else (every, 0)


class Expected(NamedTuple):
    """One domain over one phase, from its rows: what the table must show."""

    dt: float
    mean: float
    peak: Optional[float]
    unresolved: bool
    flagged: bool
    #: some of its intervals are not resolved (they are left out of the peak)
    partial: bool


def _summed(rows: list[dict], unresolved: bool) -> Expected:
    valid = [r for r in rows if math.isfinite(r["w"])]
    dt = sum(r["dt_s"] for r in valid)
    own = [r["w"] for r in valid if r["resolved"] and not r["flag"]]
    partial = any(not r["resolved"] for r in valid)
    return Expected(sum(r["dt_s"] for r in rows), sum(r["w"] * r["dt_s"] for r in valid) / dt,
                    max(own) if own else None, unresolved, any(r["flag"] for r in valid), partial)


def _short_stretch(rows: list[dict], phase: Optional[str], period_s: Optional[float]) -> bool:
    """Whether, in some window, a stretch of consecutive intervals of ``phase`` (None: the whole window) holds an
    unresolved valid row and lasts less than two update periods (or the period is not known)."""
    for window in {r["row"] for r in rows}:
        runs, previous = [], object()
        for r in sorted((r for r in rows if r["row"] == window), key=lambda r: r["t_s"]):
            if phase is None or r["phase"] == phase:
                if phase is not None and previous != phase or not runs:
                    runs.append([])
                runs[-1].append(r)
            previous = r["phase"]
        for run in runs:
            if any(math.isfinite(r["w"]) and not r["resolved"] for r in run) and (
                    period_s is None or sum(r["dt_s"] for r in run) < 2 * period_s):
                return True
    return False


def _expected(rows: list[dict], period_s: Optional[float]) -> dict[str, Expected]:
    """phase -> what one domain's rows make of it; "" for the intervals outside any phase: its mean is not resolved
    where a stretch of it with unresolved intervals is shorter than two update periods of its meter."""
    return {phase: _summed([r for r in rows if r["phase"] == phase], _short_stretch(rows, phase, period_s))
            for phase in {r["phase"] for r in rows}}


def _whole(rows: list[dict], period_s: Optional[float]) -> Expected:
    """One domain over one whole window, the stretch of all its intervals."""
    return _summed(rows, _short_stretch(rows, None, period_s))


def _cell(value: Optional[float], unresolved: bool, flagged: bool = False) -> str:
    """A figure as the table prints it: ``~`` before one the meter does not resolve, `` !`` after a flagged one."""
    return "-" if value is None else f"{'~' if unresolved else ''}{value:.4g}{' !' if flagged else ''}"


def _cells(e: Expected) -> list[str]:
    """The mean W and peak W cells of a domain over a phase."""
    return [_cell(e.mean, e.unresolved, e.flagged), _cell(e.peak, e.partial)]


def _period(report: Path, domain: str) -> Optional[float]:
    """The update period the report's sidecar gives the domain's meter."""
    meters = json.loads(report.with_suffix(".json").read_text())["meters"]["meters"]
    return next((m["update_period_s"] for m in meters for d in m["domains"] if d["name"] == domain), None)


def _table(output: str) -> list[list[str]]:
    """The body rows of the printed table, as cells."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]


def _trace(*args: str):
    return CliRunner().invoke(app, ["trace", *map(str, args)])


# --- the text view ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ALGOS)
def test_each_phase_of_the_window_shown_is_its_energy_over_its_duration_and_its_highest_interval(reports, algo):
    result = _trace(reports[algo])

    assert result.exit_code == 0, result.output
    rnd, client = re.search(r"window: round (\d+), client (\d+)", result.output).groups()
    rows = [r for r in _raw(reports[algo]) if r["kind"] == "client" and r["round"] == int(rnd)
            and r["client"] == client and r["domain"] == "cpu_estimate"]
    expected = _expected(rows, _period(reports[algo], "cpu_estimate"))
    shown = {cells[0].removesuffix(" (short)"): cells for cells in _table(result.output)}
    names = {"" if name == "(no phase)" else name for name in shown} - {"whole window"}
    assert names == set(expected)
    for phase, e in expected.items():
        cells = shown[phase or "(no phase)"]
        assert cells[1:] == [f"{e.dt:.4g}", "cpu_estimate (estimate)", *_cells(e), "estimate"]
    assert shown["whole window"][3:5] == _cells(_whole(rows, _period(reports[algo], "cpu_estimate")))
    assert "an ESTIMATE, not a measurement" in result.output
    assert ("~: not resolved" in result.output) == any(not r["resolved"] for r in rows)


@pytest.mark.parametrize("algo", ALGOS)
def test_the_phases_are_listed_in_the_order_the_window_entered_them(reports, algo):
    result = _trace(reports[algo])
    rnd, client = re.search(r"window: round (\d+), client (\d+)", result.output).groups()
    rows = sorted((r for r in _raw(reports[algo]) if r["round"] == int(rnd) and r["client"] == client),
                  key=lambda r: r["t_s"])

    order = [cells[0].removesuffix(" (short)") for cells in _table(result.output)]

    assert order == [*dict.fromkeys(r["phase"] for r in rows if r["phase"]), "(no phase)", "whole window"]


@pytest.mark.parametrize("algo", ALGOS)
def test_the_default_window_is_the_median_energy_client_window_and_says_so(reports, algo):
    """The median over the client windows the meter resolves (two update periods long), wherever one was traced."""
    kept, left_out = _resolvable_energies(reports[algo])
    _, rnd, client = _lower_median(kept)

    output = " ".join(_trace(reports[algo]).output.split())

    said = (f"window: round {rnd}, client {client} ({algo} tau=20), run {algo}: the median-energy client window of "
            f"the 4 traced")
    assert said + (f", of the {len(kept)} long enough for the meters to resolve ({left_out} shorter than two update "
                   f"periods left out)" if left_out else "") in output, output


def test_round_client_and_kind_pick_the_window(reports):
    in_round_2 = [e for e in _client_energies(reports["pflego"]) if e[1] == 2]
    _, _, median = _lower_median(_resolvable_energies(reports["pflego"], round=2)[0])
    _, _, other = max(in_round_2)

    by_round = _trace(reports["pflego"], "--round", 2).output
    by_client = _trace(reports["pflego"], "--round", 2, "--client", other).output
    server = _trace(reports["pflego"], "--kind", "server", "--round", 1).output

    assert f"window: round 2, client {median} " in by_round and "median-energy client window of the 2 traced in " \
                                                                "round 2" in by_round
    assert f"window: round 2, client {other} " in by_client and f"the only traced client window of client " \
                                                                f"{other} in round 2" in by_client
    assert "window: round 1, server step (pflego tau=20)" in server and "whole window" in server


@pytest.mark.parametrize("case,code,words", [
    ("no trace", 7, ["was run without --trace", "run it again with --trace"]),
    ("trace missing", 7, ["trace file", "is missing"]),
    ("trace damaged", 7, ["cannot read trace"]),
    ("no such round", 2, ["no traced client window in round 9; rounds traced: 1, 2"]),
    ("no such client", 2, ["no traced client window of client 99 in round 2; clients traced there: "]),
    ("no such kind", 2, ["unknown window kind 'bogus'; choose one of: client, server, eval, window"]),
    ("no eval window", 2, ["no traced eval window in this report; traced kinds: client, server (--kind picks one)"]),
])
def test_each_error_is_one_line_and_its_exit_code(reports, tmp_path, case, code, words):
    for path in reports["pflego"].parent.glob("pflego.*"):
        shutil.copy(path, tmp_path / path.name)
    report, args = tmp_path / "pflego.csv", []
    trace = next(tmp_path.glob("pflego.trace.*"))
    if case == "no trace":
        report = reports["plain"]
    elif case == "trace missing":
        trace.unlink()
    elif case == "trace damaged":
        trace.write_bytes(b"PAR1 not a trace at all" * 3)
    else:
        args = {"no such round": ["--round", "9"], "no such client": ["--round", "2", "--client", "99"],
                "no such kind": ["--kind", "bogus"], "no eval window": ["--kind", "eval"]}[case]

    result = _trace(report, *args)

    assert result.exit_code == code, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error: "), result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in result.output and result.stdout == ""


# --- the dashboard ---------------------------------------------------------------------------------------
def _section(page: str) -> str:
    return re.search(r'<section id="trace">(.*?)</section>', page, re.S).group(1)


def _section_figures(page: str) -> list[dict]:
    blob = re.search(r'id="edgeprof-figures">(.*?)</script>', page, re.S).group(1)
    ids = re.findall(r'class="plot" id="(fig\d+)"', _section(page))
    return [f for f in json.loads(blob) if f["id"] in ids]


def _segments(rows: list[dict]) -> list[str]:
    """The phases of one window, one per run of consecutive intervals, in time order (outside any phase left out)."""
    phases = [r["phase"] for r in sorted(rows, key=lambda r: r["t_s"])]
    return [p for i, p in enumerate(phases) if p and (i == 0 or phases[i - 1] != p)]


@pytest.fixture(scope="module")
def page(reports) -> str:
    return render([read_report(reports[a]) for a in ALGOS])


def _drawn_at(trace: dict, t: float) -> Optional[float]:
    """The watts a plotly step line (``hv``) draws at time ``t``: the y of the point before ``t`` when the segment
    to the next point is drawn (neither is None), else None."""
    points = list(zip(trace["x"], trace["y"]))
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y0 is not None and y1 is not None and x0 is not None and x1 is not None and x0 <= t < x1:
            return y0
    return None


def _lines(figure: dict, domain: str) -> tuple[Optional[dict], Optional[dict]]:
    """A domain's solid line (its resolved intervals) and dotted one (its unresolved intervals), None where absent."""
    lines = [t for t in figure["data"] if t["mode"] == "lines" and t["legendgroup"] == domain]
    solid = [t for t in lines if t["line"]["dash"] != "dot"]
    dotted = [t for t in lines if t["line"]["dash"] == "dot"]
    assert len(solid) <= 1 and len(dotted) <= 1, [t["name"] for t in lines]
    return (solid or [None])[0], (dotted or [None])[0]


def _assert_drawn(figure: dict, rows: list[dict]) -> None:
    """Each interval of one domain is drawn at its watts over its whole length: in the solid line when resolved,
    in the dotted one when not (none of them in both); the two lines meet at every boundary between them."""
    solid, dotted = _lines(figure, rows[0]["domain"])
    ordered = sorted(rows, key=lambda r: r["t_s"])
    for r in ordered:
        own = r["w"] if math.isfinite(r["w"]) else None
        for t in (r["t_s"] - r["dt_s"] * 0.99, r["t_s"] - r["dt_s"] / 2, r["t_s"] - r["dt_s"] * 0.01):
            assert (_drawn_at(solid, t) if solid else None) == (own if r["resolved"] else None), (r, t)
            assert (_drawn_at(dotted, t) if dotted else None) == (None if r["resolved"] else own), (r, t)
    for before, after in zip(ordered, ordered[1:]):
        if before["resolved"] != after["resolved"] and math.isfinite(before["w"]) and math.isfinite(after["w"]):
            step = [(before["t_s"], before["w"]), (before["t_s"], after["w"])]
            assert any(list(zip(dotted["x"][i:i + 2], dotted["y"][i:i + 2])) == step
                       for i in range(len(dotted["x"]) - 1)), step


@pytest.mark.parametrize("position,algo", list(enumerate(ALGOS)))
def test_the_dashboard_draws_each_algorithm_s_median_window_over_labelled_phase_bands(reports, page, position, algo):
    _, rnd, client = _lower_median(_resolvable_energies(reports[algo])[0])
    rows = [r for r in _raw(reports[algo]) if r["kind"] == "client" and r["round"] == rnd and r["client"] == client]

    figure = _section_figures(page)[position]

    layout = figure["layout"]
    resolvable = sum({r["t_s"]: r["dt_s"] for r in rows}.values()) >= 2 * _period(reports[algo], "cpu_estimate")
    short = "" if resolvable else " (shorter than two meter updates: not resolved)"
    assert f": {algo}, round {rnd} client {client}, tau=20{short} (ESTIMATE)" in layout["title"]["text"]
    assert [a["text"].removesuffix(" (short)") for a in layout["annotations"]] == _segments(rows)
    assert len(layout["shapes"]) == len(_segments(rows)) and all(s["type"] == "rect" for s in layout["shapes"])
    assert layout["yaxis"]["title"]["text"] == "watts (ESTIMATE)"
    solid, dotted = _lines(figure, "cpu_estimate")
    assert (solid is not None) == any(r["resolved"] for r in rows)
    assert (dotted is not None) == any(not r["resolved"] and math.isfinite(r["w"]) for r in rows)
    assert solid is None or (solid["name"], solid["line"]["dash"]) == ("cpu_estimate (estimate)", "dash")
    assert dotted is None or dotted["name"] == "cpu_estimate (estimate, unresolved: span mean)"
    _assert_drawn(figure, rows)


@pytest.mark.parametrize("position,algo", list(enumerate(ALGOS)))
def test_the_dashboard_s_bars_are_each_phase_s_energy_over_its_duration_in_every_client_window(reports, page,
                                                                                              position, algo):
    rows = [r for r in _raw(reports[algo]) if r["kind"] == "client"]
    expected = _expected(rows, _period(reports[algo], "cpu_estimate"))

    figure = _section_figures(page)[len(ALGOS) + position]

    (bars,) = figure["data"]
    assert f": {algo}: mean power per phase over 4 client windows (ESTIMATE)" in figure["layout"]["title"]["text"]
    assert bars["name"] == "cpu_estimate (estimate)" and bars["marker"]["pattern"]["shape"] == "/"
    assert bars["x"][-2:] == ["(no phase)", "whole window"]
    for name, mean, fill in zip(bars["x"][:-1], bars["y"], bars["marker"]["color"]):
        e = expected["" if name == "(no phase)" else name]
        assert mean == pytest.approx(e.mean, rel=1e-12)
        assert (fill == HOLLOW) == e.unresolved
    whole = sum(r["w"] * r["dt_s"] for r in rows) / sum(r["dt_s"] for r in rows)
    assert bars["y"][-1] == pytest.approx(whole, rel=1e-12)


def test_the_section_labels_estimates_and_places_the_power_plots_side_by_side(page):
    section = _section(page)

    assert "<strong>Power here is an ESTIMATE</strong>" in section and "1000 Hz" in section
    assert section.count('<div class="grid">') == 2 and section.count('class="plot"') == 2 * len(ALGOS)


def test_a_report_without_a_trace_says_in_one_line_how_to_record_one(reports):
    section = _section(render([read_report(reports["plain"])]))

    assert section.count("<p") == 1 and 'class="plot"' not in section
    assert "No power trace was recorded in plain: run it with --trace" in section


# --- the commands the power trace page shows ---------------------------------------------------------------
def test_the_commands_the_power_trace_page_shows(tmp_path, monkeypatch):
    """docs/power-trace.md's commands, smaller: two traced runs, the text view, the dashboard; the reference."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    small = ["--dataset", "synthetic", "--synthetic-samples", "120", "--synthetic-classes", "4", "--backbone", "mlp",
             "--rounds", "2", "--no-progress"]
    for algo, extra in (("pflego", []), ("fedavg", ["--trace-hz", "100"])):
        done = runner.invoke(app, ["measure", "--algo", algo, "--tau", "2", "--trace", *extra, *small,
                                   "--out", "profiles", "--run-name", f"trace-{algo}-tau50"])
        assert done.exit_code == 0, done.output
    pflego, fedavg = "profiles/trace-pflego-tau50.csv", "profiles/trace-fedavg-tau50.csv"
    _, rnd, client = _lower_median(_client_energies(Path(fedavg)))
    shown = [["trace", pflego], ["trace", pflego, "--round", "2", "--kind", "server"],
             ["trace", fedavg, "--round", str(rnd), "--client", client],
             ["dashboard", pflego, fedavg, "--out", "profiles", "--name", "trace", "--title", "power over time"],
             ["trace", str(ROOT / "profiles" / "reference" / "trace-pflego-tau50.csv")]]

    results = [runner.invoke(app, argv) for argv in shown]

    assert [r.exit_code for r in results] == [0, 0, 0, 0, 0], [r.output for r in results]
    assert "power per phase, in time order" in results[0].output and "server step" in results[1].output
    assert f"round {rnd}, client {client} " in results[2].output and (tmp_path / "profiles" / "trace.html").is_file()
    assert "cache_forward" in results[4].output and "(estimate)" in results[4].output


def test_the_dashboard_draws_the_round_and_client_asked_for_and_notes_an_algorithm_without_one(reports, tmp_path):
    energies = {a: _client_energies(reports[a]) for a in ALGOS}
    rnd = 2
    median = {a: _lower_median(_resolvable_energies(reports[a], round=rnd)[0]) for a in ALGOS}
    client = median["pflego"][2]
    fedavg_has = any(c == client for _, r, c in energies["fedavg"] if r == rnd)

    by_round = _section_figures(render([read_report(reports[a]) for a in ALGOS], trace_round=rnd))
    by_client = render([read_report(reports[a]) for a in ALGOS], trace_round=rnd, trace_client=int(client))
    missing = CliRunner().invoke(app, ["dashboard", str(reports["pflego"]), "--trace-round", "9", "--out",
                                       str(tmp_path)])

    for figure, algo in zip(by_round, ALGOS):  # each algorithm's median-energy client window of that round
        assert f": {algo}, round {rnd} client {median[algo][2]}, " in figure["layout"]["title"]["text"]
    titles = [f["layout"]["title"]["text"] for f in _section_figures(by_client)]
    assert f": pflego, round {rnd} client {client}, " in titles[0]
    assert ("Not drawn: " in _section(by_client)) == (not fedavg_has)
    assert missing.exit_code == 2 and not list(tmp_path.iterdir())
    assert "--trace-round/--trace-client match no traced window: " in missing.output
    assert "rounds traced: 1, 2" in missing.output


# --- intervals the meter does not resolve, and powers a device cannot draw ----------------------------------
GPU_PERIOD_S = 0.1
#: one client window of a GPU whose energy counter moves every 0.1 s, sampled at 50 Hz and at its phase edges:
#: (end s, length s, phase, gpu_0 W, resolved, flag), the intervals gathered into spans of two updates (0.2 s) as
#: edgeprof.measure.trace gathers them: a span of several intervals gives each of them its mean power, unresolved
GPU = ((0.02, 0.02, "cache_forward", 120.0, 0, ""), (0.04, 0.02, "cache_forward", 120.0, 0, ""),
       (0.06, 0.02, "head_steps", 120.0, 0, ""), (0.22, 0.16, "joint_grad", 120.0, 0, ""),
       (0.47, 0.25, "joint_grad", 300.0, 1, ""), (0.72, 0.25, "joint_grad", 900.0, 1, "above the 700 W power limit"),
       (0.97, 0.25, "joint_grad", 250.0, 0, ""), (0.975, 0.005, "", 250.0, 0, ""))
FLAGS = {"above the limit": (900.0, "above the 700 W power limit"), "negative": (-40.0, "negative power")}


def _gpu(flag: str = "above the limit", resolved: Optional[int] = None) -> tuple:
    """:data:`GPU` with its flagged interval's watts and flag from :data:`FLAGS`; ``resolved`` for every row."""
    w, why = FLAGS[flag]
    return tuple((t, dt, phase, w if flagged else watts, ok if resolved is None else resolved, why if flagged else "")
                 for t, dt, phase, watts, ok, flagged in GPU)


def _trace_rows(gpu: tuple) -> list[TraceRow]:
    """The window's rows: gpu_0 (a counter) as given, cpu_estimate (its meter resolves every interval) beside it."""
    rows = []
    for i, (t, dt, phase, w, resolved, flag) in enumerate(gpu):
        rows.append(TraceRow(t, dt, phase, "gpu_0", "gpu_0_j", True, w, "counter", False, bool(resolved), flag))
        rows.append(TraceRow(t, dt, phase, "cpu_estimate", "cpu_estimate_j", True, 10.0 + i, "estimate", False))
    return rows


def written_report(folder: Path, source: Path, gpu: tuple = GPU, *, earlier: bool = False,
                   period_s: Optional[float] = GPU_PERIOD_S) -> Path:
    """A copy of a traced report whose trace is one client window of ``gpu`` rows (its first client row's), written
    by TraceWriter (Parquet where pyarrow is installed), or with ``earlier`` as a CSV of the columns a trace had
    before ``resolved`` and ``flag``; the sidecar names the file and gives gpu_0's meter ``period_s``."""
    folder.mkdir(parents=True, exist_ok=True)
    report = folder / "written.csv"
    shutil.copy(source, report)
    sidecar = json.loads(source.with_suffix(".json").read_text())
    index, row = next((i, r) for i, r in enumerate(read_report(source).rows) if r["kind"] == "client")
    writer = TraceWriter(folder / "written.trace.csv", hz=50.0)
    writer.write_window(_trace_rows(gpu), row, index, window="client")
    if earlier:
        writer.close()
        with open(writer.path, newline="") as f:
            rows = list(csv.DictReader(f))
        with open(writer.path, "w", newline="") as f:
            out = csv.DictWriter(f, EARLIER_COLUMNS, extrasaction="ignore")
            out.writeheader()
            out.writerows(rows)
        sidecar["trace"] = {"file": writer.path.name, "format": "csv", "hz": 50.0, "columns": list(EARLIER_COLUMNS)}
    else:
        sidecar["trace"] = writer.finish()
    if period_s is not None:
        sidecar["meters"]["meters"].append({"name": "nvml", "update_period_s": period_s, "domains": [
            {"name": "gpu_0", "column": "gpu_0_j", "method": "counter", "in_total": True}]})
    write_sidecar(report.with_suffix(".json"), sidecar)
    return report


def _by_domain(output: str) -> dict[tuple[str, str], list[str]]:
    """(phase, domain) -> the cells of its row in the printed table (the phase is printed on a block's first row)."""
    shown, phase = {}, ""
    for cells in _table(output):
        phase = cells[0] or phase
        shown[(phase, cells[2])] = cells
    return shown


@pytest.mark.parametrize("flag", FLAGS)
def test_a_phase_the_meter_does_not_resolve_is_marked_and_its_peak_is_its_resolved_intervals_highest(
        reports, tmp_path, flag):
    report = written_report(tmp_path, reports["pflego"], _gpu(flag))
    rows = [r for r in _raw(report) if r["domain"] == "gpu_0"]

    result = _trace(report)

    assert result.exit_code == 0, result.output
    shown = _by_domain(result.output)
    for phase, e in _expected(rows, GPU_PERIOD_S).items():
        assert shown[(phase or "(no phase)", "gpu_0")][1:] == [f"{e.dt:.4g}", "gpu_0", *_cells(e), "counter"]
    assert shown[("whole window", "gpu_0")][3:5] == _cells(_whole(rows, GPU_PERIOD_S))
    assert shown[("cache_forward", "gpu_0")][3:5] == ["~120", "-"]  # a span's mean, and no interval of its own
    assert shown[("joint_grad", "gpu_0")][4] == "~300"  # the resolved unflagged intervals' highest: not 900
    assert shown[("whole window", "gpu_0")][3].startswith(f"{_whole(rows, GPU_PERIOD_S).mean:.4g}")  # resolved
    assert not any("~" in c for (_, domain), cells in shown.items() if domain.startswith("cpu") for c in cells)
    lines = " ".join(result.output.split())
    assert ("~: not resolved: its meter cannot resolve the phase (gpu_0 updates every 0.1 s): the figure is the "
            "mean power over the span of at least two update periods around it, not the phase's own") in lines


@pytest.mark.parametrize("flag", FLAGS)
def test_a_flagged_interval_is_said_and_never_shown_as_a_peak(reports, tmp_path, flag):
    watts, why = FLAGS[flag]
    report = written_report(tmp_path, reports["pflego"], _gpu(flag))

    result = _trace(report)

    shown = _by_domain(result.output)
    flagged = {phase for (phase, domain), cells in shown.items() if domain == "gpu_0" and cells[3].endswith(" !")}
    assert flagged == {"joint_grad", "whole window"}
    assert not any(f"{watts:.4g}" in c for cells in shown.values() for c in cells[4:5])
    assert (f"!: 1 interval {why} (gpu_0 in joint_grad; {watts:.4g} W at most): not a power the domain drew; left "
            f"out of peak W, kept in mean W (the meter's energy)") in " ".join(result.output.split())


@pytest.mark.parametrize("period_s,marked", [(GPU_PERIOD_S, False), (0.6, True), (None, True)],
                         ids=["window-spans-two-periods", "window-shorter", "period-unknown"])
def test_the_whole_window_is_resolved_when_it_spans_two_update_periods_of_its_meter(reports, tmp_path, period_s,
                                                                                    marked):
    report = written_report(tmp_path, reports["pflego"], _gpu(resolved=0), period_s=period_s)
    rows = [r for r in _raw(report) if r["domain"] == "gpu_0"]

    shown = _by_domain(_trace(report).output)

    assert shown[("whole window", "gpu_0")][3:5] == _cells(_whole(rows, period_s))
    assert shown[("whole window", "gpu_0")][3].startswith("~") == marked
    assert shown[("whole window", "gpu_0")][4] == "-"


def _unmarked(rows: tuple) -> tuple:
    return tuple((t, dt, phase, w, 1, "") for t, dt, phase, w, _, _ in rows)


def test_a_trace_written_before_resolved_and_flag_reads_and_shows_as_before(reports, tmp_path):
    earlier = written_report(tmp_path / "earlier", reports["pflego"], _unmarked(GPU), earlier=True)
    now = written_report(tmp_path / "now", reports["pflego"], _unmarked(GPU))

    shown = [_trace(path).output for path in (earlier, now)]
    pages = [render([read_report(path)]) for path in (earlier, now)]

    with open(earlier.parent / "written.trace.csv", newline="") as f:
        assert tuple(next(csv.reader(f))) == EARLIER_COLUMNS
    assert [out.split("\ntrace: ")[0] for out in shown] == [shown[1].split("\ntrace: ")[0]] * 2
    assert not re.search(r"[~!]", "".join(_table(shown[0])[i][3] for i in range(len(_table(shown[0])))))
    assert "not resolved" not in shown[0] and "!:" not in shown[0]
    figures = [_section_figures(page) for page in pages]
    assert [[t["name"] for t in f["data"]] for f in figures[0]] == [["gpu_0", "cpu_estimate (estimate)"]] * 2
    assert [f["data"] for f in figures[0]] == [f["data"] for f in figures[1]]
    assert HOLLOW not in json.dumps(figures[0]) and "hollow" not in _section(pages[0]).lower()


def test_the_dashboard_draws_unresolved_intervals_dotted_and_marks_flagged_ones(reports, tmp_path):
    report = written_report(tmp_path, reports["pflego"], _gpu())
    rows = [r for r in _raw(report) if r["domain"] == "gpu_0"]

    line_figure = _section_figures(render([read_report(report)]))[0]

    solid, dotted = _lines(line_figure, "gpu_0")
    assert solid["name"] == "gpu_0" and solid["line"]["dash"] == "solid"
    assert dotted["name"] == "gpu_0 (unresolved: span mean)" and dotted["opacity"] < 1
    _assert_drawn(line_figure, rows)
    (marks,) = [t for t in line_figure["data"] if t["mode"] == "markers"]
    flagged = [r for r in rows if r["flag"]]
    assert marks["marker"]["symbol"] == "x" and marks["name"] == "gpu_0: flagged"
    assert (marks["x"], marks["y"], marks["text"]) == ([r["t_s"] - r["dt_s"] / 2 for r in flagged],
                                                       [r["w"] for r in flagged], [r["flag"] for r in flagged])
    _, cpu_dotted = _lines(line_figure, "cpu_estimate")
    assert cpu_dotted is None  # its meter resolves every interval


def test_the_dashboard_draws_a_phase_bar_the_meter_does_not_resolve_hollow_and_says_so(reports, tmp_path):
    report = written_report(tmp_path, reports["pflego"], _gpu())
    rows = [r for r in _raw(report) if r["domain"] == "gpu_0"]
    expected = {("(no phase)" if p == "" else p): e for p, e in _expected(rows, GPU_PERIOD_S).items()}
    expected["whole window"] = _whole(rows, GPU_PERIOD_S)

    page = render([read_report(report)])

    gpu, cpu = _section_figures(page)[1]["data"]
    for i, phase in enumerate(gpu["x"]):
        e = expected[phase]
        assert gpu["y"][i] == pytest.approx(e.mean, rel=1e-12)
        assert (gpu["marker"]["color"][i] == HOLLOW) == e.unresolved == (gpu["marker"]["line"]["width"][i] > 0)
        assert ("not resolved" in gpu["customdata"][i][2]) == e.unresolved
        assert (gpu["text"][i] == "!") == e.flagged == ("above the 700 W power limit" in gpu["customdata"][i][2])
    # joint_grad lasts more than two update periods: its mean is resolved though its edges' intervals are not
    assert [phase for phase, fill in zip(gpu["x"], gpu["marker"]["color"]) if fill == HOLLOW] == [
        "cache_forward", "head_steps", "(no phase)"]
    assert HOLLOW not in cpu["marker"]["color"]
    section = " ".join(_section(page).split())
    assert "<strong>Hollow = not resolved by the meter.</strong>" in section
    assert "A red &times; marks an interval whose power the device cannot have drawn" in section


# --- windows shorter than two updates of their meter -----------------------------------------------------------
def _window(row: int, seconds: float, watts: float, period_s: float):
    """A traced client window of round 1: ``seconds`` of ``watts`` in 10 intervals of one counter domain."""
    from edgeprof.report.trace_view import Window

    rows = tuple({"run_id": "r", "algo": "pflego", "tau": 5, "round": 1, "kind": "client", "client": row,
                  "t_s": (k + 1) * seconds / 10, "dt_s": seconds / 10, "phase": "joint_grad", "domain": "gpu_0",
                  "column": "gpu_0_j", "in_total": 1, "w": watts, "method": "counter", "resolved": 0, "flag": ""}
                 for k in range(10))
    return Window(row, rows, {"gpu_0": period_s})


def test_the_default_window_is_the_median_of_those_the_meter_resolves():
    # Prepare: a 100-ms counter; two windows of 50 ms (not even one update), three of 0.3 s
    from edgeprof.report.trace_view import choose

    found = [_window(0, 0.05, 80.0, 0.1), _window(1, 0.05, 90.0, 0.1), _window(2, 0.3, 100.0, 0.1),
             _window(3, 0.3, 110.0, 0.1), _window(4, 0.3, 120.0, 0.1)]
    # Execute
    chosen, why = choose(found)
    only_short, why_short = choose(found[:2])
    # Assert: the median of the three long ones (the median of all five would be a 50-ms one), said so
    assert chosen.client == 3 and [w.resolvable for w in found] == [False, False, True, True, True]
    assert why == ("the median-energy client window of the 5 traced, of the 3 long enough for the meters to resolve "
                   "(2 shorter than two update periods left out)")
    assert only_short.client == 0 and why_short == "the median-energy client window of the 2 traced"


def test_a_window_shorter_than_two_updates_is_said_to_be_not_resolved_on_the_page_and_by_trace(reports, tmp_path):
    # Prepare: the written window (0.975 s) under a meter that updates every second
    report = written_report(tmp_path, reports["pflego"], _gpu(), period_s=1.0)
    # Execute
    shown = " ".join(_trace(report).output.split())
    page = render([read_report(report)])
    # Assert: neither says its dotted steps are the mean of a span two updates long: they are the window's mean
    assert ("the figure is the mean power over the whole window, itself shorter than two update periods and so not "
            "resolved either, not the phase's own") in shown
    titles = [f["layout"]["title"]["text"] for f in _section_figures(page)]
    assert any("(shorter than two meter updates: not resolved)" in t for t in titles), titles
    assert "holds no such span: its dotted step is the mean power of the whole window" in page


def test_trace_round_on_reports_with_no_trace_is_refused_not_ignored(tmp_path):
    # Prepare: a report measured without --trace
    done = CliRunner().invoke(app, ["measure", "--dataset", "synthetic", "--synthetic-samples", "120", "--backbone",
                                    "mlp", "--rounds", "1", "--tau", "1", "--no-progress", "--out", str(tmp_path),
                                    "--run-name", "plain"])
    assert done.exit_code == 0, done.output
    # Execute
    results = [CliRunner().invoke(app, ["dashboard", str(tmp_path / "plain.csv"), option, "1", "--out",
                                        str(tmp_path / "page")]) for option in ("--trace-round", "--trace-client")]
    # Assert: one line, exit 2, no page
    for result in results:
        assert result.exit_code == 2, result.output
        assert [ln for ln in result.stderr.splitlines() if ln.strip()] == [
            "edgeprof: error: --trace-round/--trace-client pick a traced window, and none of these reports has a "
            "traced client window or window of your own code (measure with --trace)"]
    assert not (tmp_path / "page").exists()

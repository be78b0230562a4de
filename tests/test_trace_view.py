"""``edgeprof trace`` and the dashboard's power-over-time section, on real traced runs: every figure checked
against a sum computed here from the trace file's own rows (mean W = sum(w * dt) / sum(dt), peak = max)."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.report.dashboard import render
from edgeprof.report.writer import read_report

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
    """The trace file's rows as its format stores them (pyarrow for Parquet, csv for CSV)."""
    section = json.loads(report.with_suffix(".json").read_text())["trace"]
    path = report.parent / section["file"]
    if section["format"] == "parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        with open(path, newline="") as f:
            rows = [dict(r, t_s=float(r["t_s"]), dt_s=float(r["dt_s"]), w=float(r["w"] or "nan"), row=int(r["row"]),
                         round=int(r["round"])) for r in csv.DictReader(f)]
    return [dict(r, w=math.nan if r["w"] is None else r["w"]) for r in rows]


def _client_energies(report: Path) -> list[tuple[float, int, str]]:
    """(energy J, round, client) of each client row of the report CSV."""
    with open(report, newline="") as f:
        return [(float(r["energy_j"]), int(r["round"]), r["client"]) for r in csv.DictReader(f) if r["kind"] == "client"]


def _lower_median(items: list) -> object:
    return sorted(items)[(len(items) - 1) // 2]


def _expected(rows: list[dict]) -> dict[str, tuple[float, float, float]]:
    """phase -> (duration s, mean W, peak W) of one domain's rows; "" for the intervals outside any phase."""
    out = {}
    for phase in {r["phase"] for r in rows}:
        mine = [r for r in rows if r["phase"] == phase]
        dt = sum(r["dt_s"] for r in mine)
        out[phase] = (dt, sum(r["w"] * r["dt_s"] for r in mine) / dt, max(r["w"] for r in mine))
    return out


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
    expected = _expected(rows)
    shown = {cells[0].removesuffix(" (short)"): cells for cells in _table(result.output)}
    names = {"" if name == "(no phase)" else name for name in shown} - {"whole window"}
    assert names == set(expected)
    for phase, (dt, mean, peak) in expected.items():
        cells = shown[phase or "(no phase)"]
        assert cells[1:] == [f"{dt:.4g}", "cpu_estimate (estimate)", f"{mean:.4g}", f"{peak:.4g}", "estimate"]
    whole = sum(r["w"] * r["dt_s"] for r in rows) / sum(r["dt_s"] for r in rows)
    assert shown["whole window"][3] == f"{whole:.4g}"
    assert "an ESTIMATE, not a measurement" in result.output


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
    _, rnd, client = _lower_median(_client_energies(reports[algo]))

    output = _trace(reports[algo]).output

    assert f"window: round {rnd}, client {client} ({algo} tau=20), run {algo}: the median-energy client window of " \
           f"the 4 traced" in output


def test_round_client_and_kind_pick_the_window(reports):
    in_round_2 = [e for e in _client_energies(reports["pflego"]) if e[1] == 2]
    _, _, median = _lower_median(in_round_2)
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
    ("no such kind", 2, ["unknown window kind 'eval'; choose one of: client, server, window"]),
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
                "no such kind": ["--kind", "eval"]}[case]

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


@pytest.mark.parametrize("position,algo", list(enumerate(ALGOS)))
def test_the_dashboard_draws_each_algorithm_s_median_window_over_labelled_phase_bands(reports, page, position, algo):
    _, rnd, client = _lower_median(_client_energies(reports[algo]))
    rows = [r for r in _raw(reports[algo]) if r["kind"] == "client" and r["round"] == rnd and r["client"] == client]

    figure = _section_figures(page)[position]

    layout = figure["layout"]
    assert f": {algo}, round {rnd} client {client}, tau=20 (ESTIMATE)" in layout["title"]["text"]
    assert [a["text"].removesuffix(" (short)") for a in layout["annotations"]] == _segments(rows)
    assert len(layout["shapes"]) == len(_segments(rows)) and all(s["type"] == "rect" for s in layout["shapes"])
    assert layout["yaxis"]["title"]["text"] == "watts (ESTIMATE)"
    (line,) = figure["data"]
    assert line["name"] == "cpu_estimate (estimate)" and line["line"]["dash"] == "dash"
    assert line["y"][:-1] == [r["w"] for r in sorted(rows, key=lambda r: r["t_s"])]


@pytest.mark.parametrize("position,algo", list(enumerate(ALGOS)))
def test_the_dashboard_s_bars_are_each_phase_s_energy_over_its_duration_in_every_client_window(reports, page,
                                                                                              position, algo):
    rows = [r for r in _raw(reports[algo]) if r["kind"] == "client"]
    expected = _expected(rows)

    figure = _section_figures(page)[len(ALGOS) + position]

    (bars,) = figure["data"]
    assert f": {algo}: mean power per phase over 4 client windows (ESTIMATE)" in figure["layout"]["title"]["text"]
    assert bars["name"] == "cpu_estimate (estimate)" and bars["marker"]["pattern"]["shape"] == "/"
    assert bars["x"][-2:] == ["(no phase)", "whole window"]
    for name, mean in zip(bars["x"][:-1], bars["y"]):
        assert mean == pytest.approx(expected["" if name == "(no phase)" else name][1], rel=1e-12)
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
    median = {a: _lower_median([e for e in energies[a] if e[1] == rnd]) for a in ALGOS}
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
    assert "--trace-round/--trace-client match no traced client window" in missing.output
    assert "rounds traced: 1, 2" in missing.output

"""Reports of your own code (``edgeprof.monitor``) read back as such: ``edgeprof trace`` picks any window kind, by
name and round, and its advice for an untraced report is the monitor's; ``edgeprof summary`` speaks of windows and
eval windows, names the data and the run's labels and the windows that raised; the dashboard shows all of them.

One real monitor run (the CPU estimate as its meter, a real power trace at 200 Hz) is read by the real commands.
"""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.report.dashboard import SECTIONS
from test_dashboard import CHROMIUM, _cells, _chromium, _figures


def _busy(a: np.ndarray, reps: int) -> np.ndarray:
    for _ in range(reps):
        a = np.tanh(a @ a / a.shape[0])
    return a


def _own_code_run(out: Path, trace_hz: float) -> str:
    """A monitor run as a training loop is measured: a ``load`` window, three ``epoch`` windows (rounds 1-3, phase
    ``forward``) of which the second does twice the work, an eval window after each epoch that labels its accuracy,
    and a ``checkpoint`` window that raises; the report's path."""
    import edgeprof

    a = np.random.default_rng(2).random((64, 64))
    labels = {"model": "mlp", "dataset": "digits", "lr": 0.1}
    with edgeprof.monitor(out, run_id="own", trace_hz=trace_hz, cpu_watts=2.0, labels=labels) as mon:
        with mon.window("load"):
            a = _busy(a, 10)
        for epoch in (1, 2, 3):
            with mon.window("epoch", round=epoch):
                with mon.phase("forward"):
                    a = _busy(a, 40 * (2 if epoch == 2 else 1))
            with mon.window("evaluate", kind="eval", round=epoch, test_accuracy=0.5 + 0.1 * epoch):
                a = _busy(a, 10)
        with pytest.raises(OSError):
            with mon.window("checkpoint"):
                raise OSError("disk full")
    return str(out / "own.csv")


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> str:
    return _own_code_run(tmp_path_factory.mktemp("traced"), trace_hz=200)


def _run(*args) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(app, [*map(str, args)], terminal_width=200)
    return result.exit_code, [ln for ln in result.stderr.splitlines() if ln.strip()], result.stdout


# --- edgeprof trace ----------------------------------------------------------------------------------------
def _trace(*args) -> tuple[int, list[str], str]:
    return _run("trace", *args)


def test_trace_picks_a_window_of_your_own_code_by_name_kind_and_round(traced):
    report = traced

    _, _, default = _trace(report)
    _, _, second = _trace(report, "--window", "epoch", "--round", "2")
    _, _, load = _trace(report, "--window", "load")
    _, _, evals = _trace(report, "--kind", "eval", "--round", "3")
    code, errors, _ = _trace(report, "--window", "step")

    # the name traced most often (epoch: 3, and evaluate is of kind eval), its median-energy window among those
    # the meter resolves (two update periods long, from the trace file and the sidecar): with all three, epoch 1 or
    # 3, never the doubled epoch 2 nor the load
    from test_trace_view import _period, _raw

    period = _period(Path(report), "cpu_estimate")
    seconds: dict[int, dict] = {}
    for r in _raw(Path(report)):
        if r.get("window") == "epoch":
            seconds.setdefault(int(r["round"]), {})[r["t_s"]] = r["dt_s"]
    long_enough = sorted(rnd for rnd, dts in seconds.items() if sum(dts.values()) >= 2 * period)
    said = " ".join(default.split())
    left_out = (f", of the {len(long_enough)} long enough for the meters to resolve ({3 - len(long_enough)} shorter "
                "than two update periods left out)" if 0 < len(long_enough) < 3 else "")
    assert (f"the median-energy own-code window named 'epoch' of the 3 traced{left_out}; other names traced: "
            "checkpoint, load") in said, said
    if len(long_enough) in (0, 3):
        assert "window: window epoch, round 1" in default or "window: window epoch, round 3" in default
    else:
        assert any(f"window: window epoch, round {rnd}" in default for rnd in long_enough)
    assert "window: window epoch, round 2, run own: the only traced own-code window named 'epoch' in round 2" \
        in second and "forward" in second
    assert "window: window load, run own: the only traced own-code window named 'load'" in load
    assert "window: eval window evaluate, round 3, run own: the only traced eval window in round 3" in evals
    assert code == 2 and errors == ["edgeprof: error: no traced window named 'step' in this report; names traced: "
                                    "checkpoint, epoch, evaluate, load"]


def test_an_untraced_report_of_your_own_code_says_how_to_trace_it(tmp_path):
    report = _own_code_run(tmp_path, trace_hz=0)

    code, errors, out = _trace(report)

    assert code == 7 and out == "" and len(errors) == 1
    assert "was run without a power trace" in errors[0] and "edgeprof.monitor(..., trace_hz=50)" in errors[0]
    assert "--trace" not in errors[0]



# --- edgeprof summary --------------------------------------------------------------------------------------
def test_summary_speaks_of_windows_and_eval_windows_and_names_the_data_labels_and_errors(traced):
    code, errors, out = _run("summary", traced)
    table = [ln for ln in out.splitlines() if ln.count("│") > 3]
    parts = [ln.split("│")[1].strip() for ln in table]
    heads = next(ln for ln in out.splitlines() if ln.count("┃") > 3)

    assert code == 0 and errors == []
    assert "median per window" in out and "client round" not in out and "evaluate message" not in out
    assert parts == ["window load", "window epoch", "forward", "window checkpoint", "eval window evaluate"]
    assert "algo" not in heads  # no algorithm in a report of one's own code: no empty column for it
    assert "data: digits" in out and "labels: model=mlp, dataset=digits, lr=0.1" in out
    assert "raised: 1 window ended by an exception (checkpoint: OSError); their rows are kept, labelled error" in out
    # the windows' short ones are counted, and their carbon summed, as a CLI run's rounds are
    rows = [r for r in csv.DictReader(open(traced, newline="")) if r["kind"] in ("window", "eval")]
    short = sum(r["short_window"] == "1" for r in rows)
    line = " ".join(out.split())
    assert (f"energy: {short} of {len(rows)} rows lasted less than the meters' update period" in line) == (short > 0)
    grams = sum(float(r["carbon_g"]) for r in rows if r["carbon_g"])
    assert f"carbon: {grams:.4g} g CO2e over {len(rows)} measured windows" in line, line


# --- the dashboard -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def page(traced, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("page")
    code, errors, _ = _run("dashboard", traced, "--out", out, "--name", "own")
    assert code == 0 and errors == []
    return out / "own.html"


def _rows(report: str, **where) -> list[dict]:
    with open(report, newline="") as f:
        return [r for r in csv.DictReader(f) if all(r[k] == v for k, v in where.items())]


def _section(html_text: str, sid: str) -> str:
    found = re.search(rf'<section id="{sid}">(.*?)</section>', html_text, re.S)
    return found.group(1) if found else ""


def test_a_page_of_your_own_code_leaves_out_the_federated_sections_and_says_so(page):
    text = page.read_text()
    nav = re.search(r"<nav>(.*?)</nav>", text, re.S).group(1)

    assert [sid for sid, _ in SECTIONS if f'href="#{sid}"' in nav] == \
        ["runs", "windows", "phases", "trace", "energy", "accuracy", "methods"]
    assert all(f'<section id="{sid}">' not in text for sid in ("verdicts", "cost-vs-tau", "timeseries", "flower"))
    assert "These reports are of your own code" in text
    runs = _cells(text, "runs")
    assert runs[0][0] == "own" and runs[0][-2:] == ["digits", "-"]  # the data its rows name; no backbone named


def test_the_windows_section_shows_eval_windows_labels_and_the_window_that_raised(page, traced):
    text = page.read_text()
    windows = {row[1]: row for row in _cells(text, "windows")}  # host, window, n, ...: no algorithm column
    labels = _cells(text, "labels")
    raised = _cells(text, "raised")
    epochs = _rows(traced, kind="window", window="epoch")
    plot = _figures(text, "of each window")[0]

    assert list(windows) == ["load", "epoch", "eval evaluate", "checkpoint"]
    assert windows["eval evaluate"][2] == "3" and windows["epoch"][2] == "3"
    assert float(windows["epoch"][3]) == pytest.approx(statistics.median(float(r["wall_s"]) for r in epochs),
                                                        rel=1e-3)
    assert labels == [["own", "model=mlp, dataset=digits, lr=0.1", "dataset=digits", "-"]]
    assert raised[0][1:5] == ["own", "checkpoint", "-", "OSError"]
    # load and checkpoint have no round: every window in the order written, on whole-number ticks
    assert plot["layout"]["xaxis"]["tickformat"] == "d" and plot["layout"]["xaxis"]["dtick"] == 1
    assert [t["name"] for t in plot["data"]] == ["load", "epoch", "eval evaluate", "checkpoint"]


def test_phases_totals_and_accuracy_are_drawn_from_the_windows_rows(page, traced):
    text = page.read_text()
    seconds = _figures(text, "median seconds per phase of each window")[0]
    totals = {row[1]: row for row in _cells(text, "totals")}
    accuracy = _figures(text, "test accuracy of your own code")[0]["data"][0]
    rows = _rows(traced)
    epochs = [r for r in rows if r["window"] == "epoch"]

    forward = next(d for d in seconds["data"] if d["name"] == "forward")
    assert forward["x"] == ["epoch"]
    assert forward["y"][0] == pytest.approx(statistics.median(float(r["forward_s"]) for r in epochs), rel=1e-9)
    assert float(totals["window epoch"][4].split()[0]) == pytest.approx(sum(float(r["energy_j"]) for r in epochs),
                                                                         rel=1e-3)
    assert totals["eval window evaluate"][2] == "3" and totals["window checkpoint"][2] == "1"
    # each eval window against the energy of every window written up to it, itself included
    spent, expected = 0.0, []
    for r in rows:
        spent += float(r["energy_j"])
        if r["test_accuracy"]:
            expected.append(spent)
    assert accuracy["y"] == pytest.approx([0.6, 0.7, 0.8]) and accuracy["x"] == pytest.approx(expected, rel=1e-12)


def test_the_trace_of_each_window_name_is_drawn(page):
    text = _section(page.read_text(), "trace")
    titles = [f["layout"]["title"]["text"] for f in _figures(page.read_text())
              if f'id="{f["id"]}"' in text]

    assert any(t.startswith("vm: window epoch, round") or "window epoch, round" in t for t in titles)
    assert any("eval window evaluate, round" in t for t in titles)
    assert any("epoch: mean power per phase over 3 windows" in t for t in titles)
    assert "each window name's median-energy window" in text and "client window" not in text


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_of_your_own_code_draws_every_plot_in_headless_chromium(page, tmp_path):
    expected = page.read_text().count('class="plot"')

    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())

    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == [], console
    assert f'data-plots="{expected}"' in re.search(r"<body[^>]*>", dom.stdout).group(0) and expected >= 10

"""Readers of a traced run survive every file next to it, and what they say is true: a trace section of the wrong
shape or pointing elsewhere, a foreign or torn trace, watts no meter reads, a run killed by SIGKILL (its sidecar still
``running``), a cut sidecar; a monitor label longer than the report's reader takes is refused when it is given.

Every case is a real traced run (``measure --trace``, or a monitor process killed with SIGKILL) copied into
``tmp_path`` and damaged there in its real format (JSON sidecar, Parquet via pyarrow, the trace CSV's own layout),
then read through the CLI (``trace``, ``dashboard``) and :func:`edgeprof.read_report` / ``read_trace``.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import edgeprof
from edgeprof.cli import app
from edgeprof.errors import MonitorError, OutputError
from edgeprof.report.trace_file import TRACE_COLUMNS, read_trace
from edgeprof.report import writer
from edgeprof.report.writer import ReportWriter, read_report

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A real traced run (2 rounds, 2 of 4 clients each, 1000 Hz): t.csv, t.json, t.trace.parquet."""
    out = tmp_path_factory.mktemp("traced")
    result = CliRunner().invoke(app, ["measure", "--dataset", "synthetic", "--synthetic-samples", "200",
                                      "--synthetic-classes", "4", "--backbone", "mlp", "--clients", "4",
                                      "--participation", "0.5", "--tau", "5", "--rounds", "2", "--threads", "1",
                                      "--no-progress", "--trace", "--trace-hz", "1000", "--run-name", "t",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out / "t.csv"


def _copy(run: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("t.csv", "t.json", "t.trace.parquet"):
        shutil.copy(run.parent / name, folder / name)
    return folder / "t.csv"


def _sidecar(run: Path) -> dict:
    return json.loads(run.with_suffix(".json").read_text())


def _rows(run: Path) -> list[dict]:
    return pq.read_table(run.with_suffix(".trace.parquet")).to_pylist()


def _as_trace_csv(rows: list[dict]) -> bytes:
    """Trace rows in the trace CSV's own layout (what a run leaves before its end turns it into Parquet)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(TRACE_COLUMNS)
    for r in rows:
        writer.writerow(["" if r[c] is None or (isinstance(r[c], float) and math.isnan(r[c])) else r[c]
                         for c in TRACE_COLUMNS])
    return buffer.getvalue().encode()


def _write_parquet(path: Path, rows: list[dict] | pa.Table) -> None:
    pq.write_table(rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows), path)


def _invoke(*argv: str):
    return CliRunner().invoke(app, [str(a) for a in argv])


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _dashboard(report: Path, tmp_path: Path) -> str:
    result = _invoke("dashboard", report, "--out", tmp_path / "page", "--name", "p")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    return (tmp_path / "page" / "p.html").read_text()


# --- the sidecar's trace section --------------------------------------------------------------------------
TRACE_SECTIONS = {
    "hz is a word": ({"hz": "fifty"}, "trace.hz is a string"),
    "hz is NaN": ({"hz": float("nan")}, "trace.hz is the number nan"),
    "hz below zero": ({"hz": -5}, "trace.hz is the number -5"),
    "file outside the folder": ({"file": "../../../etc/passwd"}, "trace.file is a string"),
    "file elsewhere, a trace name": ({"file": "../other/t.trace.parquet"}, "trace.file is a string"),
    "no file": ({"file": None}, "trace.file is null"),
}


@pytest.mark.parametrize("case", list(TRACE_SECTIONS))
def test_a_trace_section_of_the_wrong_shape_is_named_and_the_trace_beside_the_report_read(run, tmp_path, case):
    change, named = TRACE_SECTIONS[case]
    report = _copy(run, tmp_path / "r")
    sidecar = _sidecar(run)
    sidecar["trace"].update(change)
    report.with_suffix(".json").write_text(json.dumps(sidecar))

    result = _invoke("trace", report)
    page = _dashboard(report, tmp_path)

    assert result.exit_code == 0, result.output
    notes = _lines(result.stderr)
    assert len(notes) == 2 and named in notes[0], notes
    assert notes[1] == ("edgeprof: note: t.csv: its sidecar is damaged (a note above says how): reading the trace "
                        "file beside the report, t.trace.parquet"), notes
    assert f"trace: {report.with_suffix('.trace.parquet')} (1000 Hz)" in result.stdout  # the rate of --trace-hz
    assert "Power over time" in page and "reading the trace file beside the report" in page


# --- a trace file that is not one, or a damaged one ------------------------------------------------------
def _foreign(path: Path, run: Path) -> None:
    _write_parquet(path, pa.table({"a": [1, 2], "b": ["x", "y"]}))


def _all_rows(**cells):
    def damage(path: Path, run: Path) -> None:
        _write_parquet(path, [dict(r, **cells) for r in _rows(run)])
    return damage


FOREIGN = {
    "a foreign Parquet table": (_foreign, "is not an edgeprof trace (no run_id, algo, tau, round, kind, client, row, "
                                          "phase, t_s, dt_s, domain, in_total, w, method, short_phase columns)"),
    "watts that are words": (_all_rows(w="abc"), "has no usable row (N rows, all damaged; row 0: w = 'abc' is not a "
                                                 "number)"),
    "a negative row index": (_all_rows(row=-1), "row 0: row = -1 is not a whole number >= 0"),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_a_file_that_is_no_trace_is_one_line_and_exit_7(run, tmp_path, case):
    damage, expected = FOREIGN[case]
    report = _copy(run, tmp_path / "r")
    damage(report.with_suffix(".trace.parquet"), run)
    expected = expected.replace("N rows", f"{len(_rows(run))} rows")

    result = _invoke("trace", report)
    page = _dashboard(report, tmp_path)

    assert result.exit_code == 7, result.output
    lines = _lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error:") and expected in lines[0], lines
    assert html.escape(expected) in page  # the dashboard names it in Power over time and goes on


def _trace_csv_run(run: Path, folder: Path, rows: list[dict], cut: int = 0) -> Path:
    """A copy of the run whose trace is the CSV (as before Parquet), its bytes cut short by ``cut``."""
    report = _copy(run, folder)
    report.with_suffix(".trace.parquet").unlink()
    data = _as_trace_csv(rows)
    report.with_suffix(".trace.csv").write_bytes(data[:len(data) - cut])
    sidecar = _sidecar(run)
    sidecar["trace"].update(file="t.trace.csv", format="csv")
    report.with_suffix(".json").write_text(json.dumps(sidecar))
    return report


DAMAGED_ROWS = {
    "a torn last line": (lambda rows: rows, 20, "wrong number of cells (a torn or extended line)"),
    "an interval of negative length": (lambda rows: [dict(r, dt_s=-1.0) if i == 3 else r for i, r in enumerate(rows)],
                                       0, "row 3: dt_s = '-1.0' is not a finite number >= 0"),
    "a time that is not finite": (lambda rows: [dict(r, t_s=math.inf) if i == 4 else r for i, r in enumerate(rows)],
                                  0, "row 4: t_s = 'inf' is not a finite number >= 0"),
}


@pytest.mark.parametrize("case", list(DAMAGED_ROWS))
def test_a_damaged_trace_row_is_skipped_with_one_note(run, tmp_path, case):
    change, cut, expected = DAMAGED_ROWS[case]
    rows = _rows(run)
    report = _trace_csv_run(run, tmp_path / "r", change(rows), cut)

    result = _invoke("trace", report)
    read = read_trace(report.with_suffix(".trace.csv"))
    page = _dashboard(report, tmp_path)

    assert result.exit_code == 0, result.output
    notes = _lines(result.stderr)
    assert len(notes) == 1 and notes[0].startswith(f"edgeprof: note: t.trace.csv: skipped 1 damaged row(s) of "
                                                   f"{len(rows)}") and expected in notes[0], notes
    assert len(read) == len(rows) - 1 and "whole window" in result.stdout and "Power over time" in page


# --- watts no meter reads: invalid, never summed, marked ---------------------------------------------------
def _window_of(stdout: str, rows: list[dict]) -> list[dict]:
    """The trace rows of the window the table shows (its round and client, from the ``window:`` line)."""
    found = re.search(r"window: round (\d+), client (\d+)", stdout)
    return [r for r in rows if r["kind"] == "client" and r["round"] == int(found[1]) and r["client"] == found[2]]


@pytest.mark.parametrize("bad_w", [math.nan, -3.0], ids=["nan", "negative"])
def test_watts_that_are_not_a_number_or_below_zero_are_invalid_left_out_and_marked(run, tmp_path, bad_w):
    rows = _rows(run)
    firsts = {min(i for i, r in enumerate(rows) if r["row"] == n) for n in {r["row"] for r in rows}}
    report = _copy(run, tmp_path / "r")
    _write_parquet(report.with_suffix(".trace.parquet"),
                   [dict(r, w=bad_w, method="estimate", flag="") if i in firsts else r for i, r in enumerate(rows)])

    result = _invoke("trace", report)

    assert result.exit_code == 0, result.output
    notes = _lines(result.stderr)
    assert len(notes) == 1 and f"read {len(firsts)} interval(s) as invalid" in notes[0], notes
    shown = [(i, r) for i, r in enumerate(rows) if r in _window_of(result.stdout, rows)]
    valid = [r for i, r in shown if i not in firsts]
    mean = sum(r["w"] * r["dt_s"] for r in valid) / sum(r["dt_s"] for r in valid)
    whole = next(ln for ln in result.stdout.splitlines() if "whole window" in ln).split("│")
    assert whole[4].strip().lstrip("~") == f"{mean:.4g}" and "invalid" in whole[6], whole
    assert any(ln.startswith("invalid: ") for ln in result.stdout.splitlines())
    read = read_trace(report.with_suffix(".trace.parquet"))
    assert all(math.isnan(read[i]["w"]) and read[i]["method"] == "invalid" for i in firsts)


# --- what a reader says when the sidecar does not name the trace ----------------------------------------
KILLED = """
import os, signal, sys, time
import edgeprof

mon = edgeprof.monitor(out=sys.argv[1], run_id="k", trace_hz=1000)
mon.start()
for round in (1, 2):
    with mon.window("step", round=round):
        with edgeprof.phase("work"):
            t = time.perf_counter()
            while time.perf_counter() - t < 0.03:
                pass
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A traced monitor run killed with SIGKILL after two windows: k.csv, k.trace.csv, a sidecar still running."""
    out = tmp_path_factory.mktemp("killed")
    done = subprocess.run([sys.executable, "-c", KILLED, str(out)], cwd=ROOT, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert json.loads((out / "k.json").read_text())["status"] == "running"
    return out / "k.csv"


def test_a_run_killed_during_trace_says_it_did_not_finish_and_shows_the_trace_it_left(killed, tmp_path):
    result = _invoke("trace", killed, "--kind", "window")
    page = _dashboard(killed, tmp_path)

    assert result.exit_code == 0, result.output
    assert _lines(result.stderr) == ["edgeprof: note: k.csv: the run did not finish (its sidecar still says running: "
                                     "it was stopped before its end): reading the trace file beside the report, "
                                     "k.trace.csv"]
    assert "window step" in result.stdout and f"trace: {killed.with_suffix('.trace.csv')} (1000 Hz)" in result.stdout
    assert "k: the run did not finish" in page and "without --trace" not in result.output


@pytest.mark.parametrize("keep", [300, 0], ids=["cut", "empty"])
def test_a_cut_sidecar_says_it_is_damaged_and_shows_the_trace(run, tmp_path, keep):
    report = _copy(run, tmp_path / "r")
    report.with_suffix(".json").write_bytes(run.with_suffix(".json").read_bytes()[:keep])

    result = _invoke("trace", report)
    kept = read_report(report)

    assert result.exit_code == 0, result.output
    notes = _lines(result.stderr)
    assert notes[0].startswith("edgeprof: note: ignoring sidecar") and "its sidecar is damaged" in notes[1], notes
    assert "whole window" in result.stdout and "sample rate not recorded" in result.stdout
    assert kept.sidecar == {} and kept.sidecar_problem.startswith("ignoring sidecar")


NOTHING_BESIDE = {
    "killed before a trace row": ({"status": "running"}, "did not finish (its sidecar still says running) and left "
                                                         "no trace file beside it"),
    "traced, its file removed": ({}, "was run with --trace, but its trace file is missing (no t.trace.* beside it)"),
    "a damaged sidecar": (None, "has no trace file beside it, and its sidecar is damaged (a note above says how): "
                                "whether it was run with --trace is unknown"),
}


@pytest.mark.parametrize("case", list(NOTHING_BESIDE))
def test_without_a_trace_file_the_error_says_what_is_known(run, tmp_path, case):
    change, expected = NOTHING_BESIDE[case]
    report = _copy(run, tmp_path / "r")
    report.with_suffix(".trace.parquet").unlink()
    sidecar = {k: v for k, v in _sidecar(run).items() if k != "trace"}
    report.with_suffix(".json").write_text("{" if change is None else json.dumps({**sidecar, **change}))

    result = _invoke("trace", report)

    assert result.exit_code == 7, result.output
    assert _lines(result.stderr)[-1] == f"edgeprof: error: {report} {expected}"


# --- the write side refuses what the read side would reject ---------------------------------------------
def _monitor_report(folder: Path, label: str) -> tuple[Path, BaseException | None]:
    """A monitor run with one window labelled ``note=label`` (its error, if refused) and one plain window."""
    refused = None
    with edgeprof.monitor(out=folder, run_id="m") as mon:
        try:
            with mon.window("labelled", note=label):
                pass
        except MonitorError as err:
            refused = err
        with mon.window("plain"):
            pass
    return folder / "m.csv", refused


def test_a_label_longer_than_the_reader_takes_is_refused_in_one_line(tmp_path):
    report, refused = _monitor_report(tmp_path, "x" * 200_000)

    result = _invoke("summary", report)

    assert refused is not None and "\n" not in str(refused)
    cell = len('{"note":""}') + 200_000
    assert str(refused) == (f"label 'note' makes the report's labels cell {cell} characters, more than the "
                            f"{writer.MAX_CELL_CHARS} a report's reader takes; shorten it")
    assert result.exit_code == 0 and "window plain" in result.stdout, result.output


def test_a_label_as_long_as_the_reader_takes_is_written_and_read_back_whole(tmp_path):
    label = "x" * (writer.MAX_CELL_CHARS - len('{"note":""}'))
    report, refused = _monitor_report(tmp_path, label)

    rows = read_report(report).rows

    assert refused is None and json.loads(rows[0]["labels"]) == {"note": label} and len(rows) == 2


def test_the_writer_never_writes_a_cell_its_reader_rejects(tmp_path):
    path = tmp_path / "w.csv"
    with ReportWriter(path, ("run_id", "algo", "kind", "labels")) as report:
        report.write({"run_id": "w", "algo": "a", "kind": "window", "labels": "ok"})
        with pytest.raises(OutputError, match=f"labels cell .* is {writer.MAX_CELL_CHARS + 1} characters"):
            report.write({"run_id": "w", "algo": "a", "kind": "window", "labels": "y" * (writer.MAX_CELL_CHARS + 1)})

    assert [r["labels"] for r in read_report(path).rows] == ["ok"]

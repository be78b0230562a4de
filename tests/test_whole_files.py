"""Every file edgeprof writes is whole or absent: a full disk leaves no part of a page, a model or a Flower app.

The disk is a real, small tmpfs filled to its last block (root only; skipped elsewhere, as in test_faults.py);
each command runs for real through the CLI and must end in one line and exit 4 (OutputError), leaving neither a
part of its file nor a temporary file, and a previous file at the same path as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.flower.config import APP_HEADER

from test_faults import _fill, _one_line, small_disk  # noqa: F401 - small_disk is a fixture used by name

FAST = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
        "--clients", "4", "--rounds", "1", "--tau", "1", "--no-progress"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A real report of a one-round run, on an ordinary disk."""
    out = tmp_path_factory.mktemp("profiles")
    result = CliRunner().invoke(app, ["measure", *FAST, "--run-name", "r", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out / "r.csv"


#: each command as (its arguments given the full disk and the report, the file it writes there)
COMMANDS = {
    "dashboard": (lambda disk, rep: ["dashboard", str(rep), "--out", str(disk), "--name", "page"],
                  Path("page.html")),
    "export": (lambda disk, rep: ["export", "--backbone", "mlp", "--out", str(disk)],
               Path("mlp.onnx")),
    "flower-app-dir": (lambda disk, rep: ["flower-app-dir", str(disk / "app"), "--backbone", "mlp"],
                       Path("app/pyproject.toml")),
}


#: a previous file of each command's: a previous app pyproject is one flower-app-dir wrote (it replaces no other)
PREVIOUS = {"flower-app-dir": f"{APP_HEADER}\n# a previous good file\n".encode()}


@pytest.mark.parametrize("previous", [None, b"a previous good file\n"], ids=["new", "over-a-previous-one"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_full_disk_leaves_no_part_of_a_file_and_exits_4(small_disk, report, command, previous):
    argv, name = COMMANDS[command]
    target = small_disk / name
    if previous is not None:
        previous = PREVIOUS.get(command, previous)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(previous)
    _fill(small_disk)

    result = CliRunner().invoke(app, argv(small_disk, report))

    assert result.exit_code == 4, result.output
    line = _one_line(result.stderr)
    assert line.startswith("edgeprof: error: cannot write") and "No space left on device" in line, line
    assert (target.read_bytes() if target.exists() else None) == previous  # as it was: absent, or the old one
    assert not list(small_disk.rglob("*.tmp"))
    assert previous is not None or not (small_disk / "app").exists()  # no empty app folder either



@pytest.mark.parametrize("name", ["r.csv", "r.json"], ids=["the-report", "its-sidecar"])
def test_a_dashboard_page_never_takes_the_place_of_the_report_it_reads(report, name):
    # Prepare: the report's own files, as they are
    target = report.parent / name
    before = {p: p.read_bytes() for p in (report, report.with_suffix(".json"))}
    # Execute: the page named onto the report or its sidecar (--output FILE; --out FOLDER --name NAME)
    results = [CliRunner().invoke(app, ["dashboard", str(report), "--output", str(target)]),
               CliRunner().invoke(app, ["dashboard", str(report), "--out", str(report.parent), "--name", name])]
    # Assert: refused in one line, exit 2, and the report's files are as they were
    for result in results[:1]:
        assert result.exit_code == 2, result.output
        assert f"the dashboard's page {target} would overwrite {target}, a file of the report" in result.stderr
    assert results[1].exit_code == 0 and (report.parent / f"{name}.html").is_file()  # NAME.html: a page beside them
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("command", ["dashboard", "export"])
def test_a_file_is_never_written_in_place_of_a_fifo(tmp_path, report, command):
    # Prepare: a FIFO where the command's file goes
    import os
    import stat

    args, written = COMMANDS[command]
    fifo = tmp_path / written
    os.mkfifo(fifo)
    # Execute
    result = CliRunner().invoke(app, args(tmp_path, report))
    # Assert: one line, exit 4; the FIFO is still there, and no temporary file is
    assert result.exit_code == 4, result.output
    assert "not a regular file (a device, FIFO or socket) is there, and a file is never written in its place" in (
        _one_line(result.stderr))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and [p.name for p in tmp_path.iterdir()] == [written.name]


@pytest.mark.parametrize("command", ["measure", "export", "dashboard"])
def test_an_out_that_is_a_file_is_said_to_be_one(tmp_path, report, command):
    """It said "File exists" (or "Not a directory"), which reads like a name clash."""
    blocker = tmp_path / "f"
    blocker.write_text("a file\n")
    args = {"measure": ["measure", *FAST, "--out", str(blocker)],
            "export": ["export", "--backbone", "mlp", "--out", str(blocker)],
            "dashboard": ["dashboard", str(report), "--out", str(blocker / "sub")]}[command]

    result = CliRunner().invoke(app, args)

    assert result.exit_code == 4, result.output
    assert _one_line(result.stderr).endswith(f"{blocker} is a file, not a folder") and blocker.read_text() == "a file\n"

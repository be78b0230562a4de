"""Report readers survive damaged reports: `summary` and `dashboard` skip and count bad rows with one note,
refuse a file with nothing usable in one line (exit 7), and print hostile labels literally."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A real report of 3 rounds (client, server and eval rows)."""
    out = tmp_path_factory.mktemp("good")
    result = CliRunner().invoke(app, ["measure", "--dataset", "synthetic", "--synthetic-samples", "200",
                                      "--synthetic-classes", "4", "--backbone", "mlp", "--clients", "4", "--rounds",
                                      "3", "--tau", "2", "--evaluate", "--no-progress", "--run-name", "good",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out / "good.csv"


def _copy(good: Path, folder: Path, csv_bytes: bytes, sidecar: bytes | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "r.csv"
    path.write_bytes(csv_bytes)
    path.with_suffix(".json").write_bytes(good.with_suffix(".json").read_bytes() if sidecar is None else sidecar)
    return path


def _set_cell(good: Path, column: str, value: str, line: int = 1) -> bytes:
    lines = good.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[line].split(",")
    cells[header.index(column)] = value
    lines[line] = ",".join(cells)
    return ("\r\n".join(lines) + "\r\n").encode()


DAMAGE = {
    "torn last line": lambda g: g.read_bytes()[:-40],
    "wall_s is abc": lambda g: _set_cell(g, "wall_s", "abc"),
    "tau is nan": lambda g: _set_cell(g, "tau", "nan"),
    "not utf-8": lambda g: _set_cell(g, "device", "caf\xe9").replace(b"caf\xc3\xa9", b"caf\xe9"),
    "unknown kind": lambda g: _set_cell(g, "kind", "bogus"),
}


@pytest.mark.parametrize("command", ["summary", "dashboard"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_row_is_skipped_with_one_note(good, tmp_path, command, damage):
    path = _copy(good, tmp_path / "r", DAMAGE[damage](good))
    argv = [command, str(path)] + (["--out", str(tmp_path / "page")] if command == "dashboard" else [])

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 0, result.output
    notes = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and notes[0].startswith("edgeprof: note: r.csv: skipped 1 damaged row(s)"), notes
    assert "Traceback" not in result.output


@pytest.mark.parametrize("content,sidecar,expected", [
    (b"\x00\x01\x02binary\xff\xfe", None, "binary data"),
    (b"run_id,algo,kind,round\r\nr,pflego,client,abc\r\n", None, "no usable row"),
    (b"name,value\r\na,1\r\n", None, "no run_id, algo, kind column"),
])
def test_a_report_with_nothing_usable_is_one_line_and_exit_7(good, tmp_path, content, sidecar, expected):
    path = _copy(good, tmp_path / "r", content, sidecar)

    for argv in (["summary", str(path)], ["dashboard", str(path), "--out", str(tmp_path)]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 7, result.output
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, lines  # one failure, one line (no note about the same damaged rows first)
        assert lines[0].startswith("edgeprof: error:") and expected in lines[0] and "Traceback" not in result.output


#: sections of the wrong shape, as a hand edit or another tool leaves them; each is named and left out
WRONG_SHAPES = {
    "device": "oops", "meters": "x", "libraries": [1, 2], "energy": {"carbon": "250 g"},
    "monitor": {"notes": "one"}, "rows": -3,
}


@pytest.mark.parametrize("command", ["summary", "dashboard"])
@pytest.mark.parametrize("section", list(WRONG_SHAPES))
def test_a_sidecar_section_of_the_wrong_shape_is_left_out_with_one_note(good, tmp_path, command, section):
    sidecar = json.loads(good.with_suffix(".json").read_text())
    sidecar[section] = WRONG_SHAPES[section]
    path = _copy(good, tmp_path / "r", good.read_bytes(), json.dumps(sidecar).encode())
    argv = [command, str(path)] + (["--out", str(tmp_path / "page")] if command == "dashboard" else [])

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 0, result.output
    notes = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and "left out sidecar section(s) of the wrong shape" in notes[0], notes
    assert notes[0].split("wrong shape: ")[1].startswith(section), notes
    assert "Traceback" not in result.output


def test_a_sidecar_keeps_its_usable_sections_and_the_ones_it_does_not_know():
    from edgeprof.report.sidecar import usable_sidecar

    data = {"device": "oops", "status": "complete", "meters": {"meters": [{"name": "rapl"}]}, "sweep": {"any": 1}}

    kept, why = usable_sidecar(data)

    assert kept == {"status": "complete", "meters": {"meters": [{"name": "rapl"}]}, "sweep": {"any": 1}}
    assert why.startswith("left out sidecar section(s) of the wrong shape: device is a string")


@pytest.mark.parametrize("sidecar", [b"[1, 2, 3]", b'"text"', b"\xff\xfe{}", b"{not json"])
def test_a_damaged_sidecar_is_ignored_with_a_note(good, tmp_path, sidecar):
    path = _copy(good, tmp_path / "r", good.read_bytes(), sidecar)

    result = CliRunner().invoke(app, ["summary", str(path)])

    assert result.exit_code == 0, result.output
    assert "edgeprof: note: ignoring sidecar" in result.stderr and "median per client round" in result.stdout


def test_a_report_with_only_some_columns_still_summarizes(good, tmp_path):
    keep = ["run_id", "algo", "kind", "wall_s"]
    lines = good.read_text().splitlines()
    header = lines[0].split(",")
    rows = [",".join(line.split(",")[header.index(c)] for c in keep) for line in lines[1:]]
    path = _copy(good, tmp_path / "r", ("\r\n".join([",".join(keep), *rows]) + "\r\n").encode(), b"{}")

    result = CliRunner().invoke(app, ["summary", str(path)])

    assert result.exit_code == 0, result.output
    assert "client round" in result.stdout and "Traceback" not in result.output


@pytest.mark.parametrize("label", ["[/bold]", "[red]red[/red]", "[link=http://x]x[/link]"])
def test_labels_are_printed_literally(good, tmp_path, label):
    path = _copy(good, tmp_path / "r", good.read_text().replace(",pflego,", f",{label},").encode())

    result = CliRunner().invoke(app, ["summary", str(path)])

    assert result.exit_code == 0, result.output
    assert label in result.stdout


def test_summary_counts_rows_whose_energy_is_invalid(good, tmp_path):
    path = _copy(good, tmp_path / "r", _set_cell(_set_cell_file(good, tmp_path), "energy_method", "invalid"))

    result = CliRunner().invoke(app, ["summary", str(path)])

    assert result.exit_code == 0, result.output
    assert "energy: 1 of " in result.stdout and "implausible reading" in result.stdout


def _set_cell_file(good: Path, tmp_path: Path) -> Path:
    """A copy of the report whose first row has no energy, as the writer leaves an invalid window."""
    copy = tmp_path / "blank.csv"
    copy.write_bytes(_set_cell(good, "energy_j", ""))
    return copy


def test_a_diverged_run_is_a_result_every_rows_energy_kept_and_the_round_named(tmp_path):
    """FedAvg with an absurd step diverges: exit 0, one note naming the first round whose loss is not finite
    (read independently from the CSV here), the sidecar says so, and summary and dashboard keep every row."""
    import csv
    import math

    out = tmp_path / "div"
    result = CliRunner().invoke(app, ["measure", "--algo", "fedavg", "--beta", "1e9", "--dataset", "synthetic",
                                      "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
                                      "--clients", "4", "--tau", "2", "--rounds", "4", "--no-progress",
                                      "--run-name", "d", "--out", str(out)])

    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((out / "d.csv").open()))
    clients = [r for r in rows if r["kind"] == "client"]
    first = next(int(r["round"]) for r in clients if not math.isfinite(float(r["train_loss"])))
    notes = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert notes == [f"edgeprof: note: the training loss stopped being finite at round {first} "
                     f"({next(r['train_loss'] for r in clients if int(r['round']) == first)}): the run diverged; its "
                     "rows and their energy are kept (sidecar: diverged)"]
    assert json.loads((out / "d.json").read_text())["diverged"]["round"] == first
    for argv in (["summary", str(out / "d.csv")], ["dashboard", str(out / "d.csv"), "--out", str(tmp_path / "page")]):
        again = CliRunner().invoke(app, argv)
        assert again.exit_code == 0 and "damaged" not in again.output, again.output
    assert f"│ fedavg │ client round  │ {len(clients)} │" in result.stdout  # every client round counted

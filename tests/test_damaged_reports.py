"""Report readers survive damaged reports: `summary` and `dashboard` skip and count bad rows with one note,
refuse a file with nothing usable in one line (exit 7), and print hostile labels literally."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.report.summary import summarize
from edgeprof.report.writer import read_report


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
    "not utf-8": lambda g: _set_cell(g, "host", "caf\xe9").replace(b"caf\xc3\xa9", b"caf\xe9"),
    "unknown kind": lambda g: _set_cell(g, "kind", "bogus"),
    "wall_s below zero": lambda g: _set_cell(g, "wall_s", "-1"),
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
    "host": "oops", "meters": "x", "libraries": [1, 2], "energy": {"carbon": "250 g"},
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

    data = {"host": "oops", "status": "complete", "meters": {"meters": [{"name": "rapl"}]}, "sweep": {"any": 1}}

    kept, why = usable_sidecar(data)

    assert kept == {"status": "complete", "meters": {"meters": [{"name": "rapl"}]}, "sweep": {"any": 1}}
    assert why.startswith("left out sidecar section(s) of the wrong shape: host is a string")


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


def test_each_summary_line_says_how_its_own_cells_were_obtained(good, tmp_path):
    # Prepare: the first client row's total is invalid (an implausible reading fell outside its phases, which keep
    # their joules); the server rows are untouched
    path = _copy(good, tmp_path / "r", _set_cell(_set_cell_file(good, tmp_path), "energy_method", "invalid"))
    report = read_report(path)
    assert report.rows[0]["kind"] == "client" and report.rows[0]["head_steps_j"]
    measured = {r["energy_method"] for r in report.rows[1:] if r["energy_method"]}
    assert measured == {"estimate"}

    # Execute
    lines = {ln.part: ln for ln in summarize(report)}

    # Verify: only the client round line has an invalid cell; its phases and the server step were all obtained as
    # the report's other rows were
    assert lines["client round"].method == "estimate+invalid"
    phases = [part for part in lines if part.startswith("  ")]
    assert phases and {lines[p].method for p in phases} == {"estimate"}
    assert lines["server step"].method == "estimate"


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


# --- issue 34, item 4: sidecars that break a JSON parser, spreadsheets' byte-order marks, negative joules, and
# control codes: every reader survives them, and says what it did
HOSTILE_SIDECARS = {
    "nested 100,000 deep": (b'{"x":' * 100_000 + b"1" + b"}" * 100_000, "nested more than 32 deep"),
    "nested 500 deep": (b'{"x":' * 500 + b"1" + b"}" * 500, "nested more than 32 deep"),
    "an integer of 5,001 digits": (b'{"rows": ' + b"9" * 5001 + b"}", "a whole number of 5001 digits (at most 64)"),
    "larger than 8 MiB": (b'{"notes": ["' + b"a" * (8 * 2**20) + b'"]}', "larger than 8 MiB"),
}


@pytest.mark.parametrize("command", ["summary", "dashboard", "read_report"])
@pytest.mark.parametrize("case", list(HOSTILE_SIDECARS))
def test_a_sidecar_no_json_reader_should_take_is_ignored_with_one_note(good, tmp_path, case, command):
    sidecar, why = HOSTILE_SIDECARS[case]
    path = _copy(good, tmp_path / "r", good.read_bytes(), sidecar)

    if command == "read_report":
        report = read_report(path)
        assert report.sidecar == {} and report.sidecar_problem == f"ignoring sidecar {path.with_suffix('.json')}: {why}"
        assert len(report.rows) == len(good.read_text().splitlines()) - 1
        return
    result = CliRunner().invoke(app, [command, str(path)] + (["--out", str(tmp_path / "p")] if command == "dashboard"
                                                             else []))

    assert result.exit_code == 0, result.output
    assert _notes(result) == [f"edgeprof: note: ignoring sidecar {path.with_suffix('.json')}: {why}"]


def _notes(result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.strip()]


def test_a_csv_saved_with_a_byte_order_mark_reads_as_the_report(good, tmp_path):
    path = _copy(good, tmp_path / "r", b"\xef\xbb\xbf" + good.read_bytes())

    marked, plain = read_report(path), read_report(good)
    shown = CliRunner().invoke(app, ["summary", str(path)])
    page = CliRunner().invoke(app, ["dashboard", str(path), "--out", str(tmp_path / "p")])

    assert marked.columns == plain.columns and marked.rows == plain.rows
    assert shown.exit_code == 0 and page.exit_code == 0, shown.output + page.output
    expected = CliRunner().invoke(app, ["summary", str(good)]).stdout
    assert shown.stdout.replace(str(path), "R") == expected.replace(str(good), "R")


#: a negative figure per column kind, and the cells the reader leaves empty and marks invalid
NEGATIVE = {
    "energy_j": ({"energy_j", "energy_net_j", "carbon_g"}, {"energy_method"}),
    "cpu_estimate_j": ({"cpu_estimate_j"}, {"cpu_estimate_method"}),
    "joint_grad_j": ({"joint_grad_j"}, set()),
    "carbon_g": ({"carbon_g"}, set()),
}


@pytest.mark.parametrize("column", list(NEGATIVE))
def test_negative_joules_are_read_as_invalid_marked_and_left_out_of_medians(good, tmp_path, column):
    import csv
    import statistics

    emptied, marked = NEGATIVE[column]
    path = _copy(good, tmp_path / "r", _set_cell(good, column, "-5"))
    rows = list(csv.DictReader(good.open(newline="")))

    report = read_report(path)
    shown = CliRunner().invoke(app, ["summary", str(path)])

    first = report.rows[0]
    assert all(first[c] == "" for c in emptied) and all(first[c] == "invalid" for c in marked), first
    assert _notes(shown) == [f"edgeprof: note: r.csv: read 1 negative figure(s) as invalid, no meter reads below "
                             f"zero: their method says invalid, medians and totals leave them out (line 2: {column} "
                             f"= '-5')"]
    if column == "energy_j":  # the client rounds' median leaves the row out, says over how many, and counts it
        clients = [r for r in rows if r["kind"] == "client"]
        median = statistics.median(float(r["energy_j"]) for r in clients[1:])
        client = next(ln for ln in shown.stdout.splitlines() if "│ client round" in ln).split("│")
        assert client[6].strip() == f"{median:.4g} ({len(clients) - 1} of {len(clients)})", shown.stdout
        assert client[3].strip() == str(len(clients)) and "energy: 1 of " in shown.stdout, shown.stdout
    page = CliRunner().invoke(app, ["dashboard", str(path), "--out", str(tmp_path / "p")])
    assert page.exit_code == 0 and "Traceback" not in page.output


CONTROL = {"ESC colour": "pf\x1b[31mlego", "bell": "pflego\x07", "carriage return": "\rpflego",
           "right-to-left override": "pf\u202elego", "markup and ESC": "[red]pf\x1b]8;;x\x07lego[/red]"}


@pytest.mark.parametrize("label", list(CONTROL))
def test_control_codes_from_a_file_are_printed_escaped(good, tmp_path, label):
    value = CONTROL[label]
    sidecar = json.loads(good.with_suffix(".json").read_text())
    sidecar.setdefault("energy", {}).setdefault("carbon", {}).update(source=value)
    path = _copy(good, tmp_path / "r", good.read_text().replace(",pflego,", f',"{value}",').encode(),
                 json.dumps(sidecar).encode())

    result = CliRunner().invoke(app, ["summary", str(path)])

    assert result.exit_code == 0, result.output
    escaped = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in value)
    assert escaped in result.stdout and f"({escaped})" in result.stdout  # the table and the carbon line
    assert not any(not ch.isprintable() and ch != "\n" for ch in result.stdout), repr(result.stdout)


def test_a_report_missing_rows_its_sidecar_counts_is_noted(good, tmp_path):
    # Prepare: the report with its second row deleted, its sidecar as the run wrote it
    lines = good.read_bytes().splitlines(keepends=True)
    path = _copy(good, tmp_path / "r", b"".join(lines[:2] + lines[3:]))
    # Execute
    results = [CliRunner().invoke(app, ["summary", str(path)]),
               CliRunner().invoke(app, ["dashboard", str(path), "--out", str(tmp_path / "page")])]
    # Assert: one note each, naming how many are missing
    written = len(lines) - 1
    for result in results:
        assert result.exit_code == 0, result.output
        assert _notes(result) == [f"edgeprof: note: r.csv: holds {written - 1} row(s), and its sidecar says the run "
                                  f"wrote {written}: 1 are missing (the file was cut short or edited)"]


def test_a_report_without_its_sidecar_says_what_is_not_known(good, tmp_path):
    # Prepare: the CSV alone
    path = tmp_path / "alone.csv"
    path.write_bytes(good.read_bytes())
    # Execute
    result = CliRunner().invoke(app, ["summary", str(path)])
    # Assert: how it ended and what its overhead column counted are said to be unknown, not guessed
    text = " ".join(result.stdout.split())
    assert result.exit_code == 0, result.output
    assert ("run: how it ended is not known: there is no sidecar alone.json (its meters and settings are not known "
            "either)") in text
    assert "profiler overhead (as its column records it: no sidecar says whether wall or CPU time)" in text
    assert "as reports before edgeprof counted wall time" not in text


def test_the_dashboard_page_says_what_reading_its_reports_noted(good, tmp_path):
    """The notes of reading (a damaged row, rows missing, no sidecar) were said on stderr alone: the page showed a
    damaged report as whole. They head the page now."""
    import html

    lines = good.read_bytes().splitlines(keepends=True)
    damaged = _copy(good, tmp_path / "d", b"".join(lines[:2] + lines[3:-1]) + lines[-1][:-30])
    alone = tmp_path / "a" / "alone.csv"
    alone.parent.mkdir()
    alone.write_bytes(good.read_bytes())

    results = [CliRunner().invoke(app, ["dashboard", str(path), "--out", str(tmp_path / "page"), "--name", name])
               for path, name in ((damaged, "damaged"), (alone, "alone"))]

    heads = []
    for result, name in zip(results, ("damaged", "alone")):
        assert result.exit_code == 0, result.output
        page = html.unescape((tmp_path / "page" / f"{name}.html").read_text())
        heads.append(page[page.index("Read with notes"):page.index("</ul>")])
        assert all(n.removeprefix("edgeprof: note: ") in heads[-1] for n in _notes(result))
    assert "r.csv: skipped 1 damaged row(s)" in heads[0] and "1 are missing (the file was cut short" in heads[0]
    assert "alone.csv: there is no sidecar alone.json beside it" in heads[1]
    page = CliRunner().invoke(app, ["dashboard", str(good), "--out", str(tmp_path / "page"), "--name", "whole"])
    assert page.exit_code == 0 and "Read with notes" not in (tmp_path / "page" / "whole.html").read_text()

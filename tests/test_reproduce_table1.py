"""scripts/reproduce_table1.py's pure parts: options, the paper's column, the variants, the summary and the table
(from given numbers; no federated run here)."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "reproduce_table1.py"


@pytest.fixture(scope="module")
def t1():
    spec = importlib.util.spec_from_file_location("reproduce_table1", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("argv, expected", [
    ([], [("global", "balanced"), ("paper", "paper")]),
    (["--protocol", "paper"], [("paper", "paper")]),
    (["--protocol", "global"], [("global", "balanced")]),
    (["--split", "paper"], [("global", "paper"), ("paper", "paper")]),
    (["--protocol", "paper", "--split", "balanced"], [("paper", "balanced")]),
])
def test_each_protocol_runs_with_its_own_split_unless_one_is_named(t1, argv, expected):
    args = t1.parse_args(argv)

    assert [(c.protocol, c.split) for c in args.columns] == expected


def test_defaults_are_the_readme_setting(t1):
    args = t1.parse_args([])

    assert (args.dataset, args.data_dir, args.rounds, args.tau, args.clients, args.seeds, args.last) == \
        ("digits", None, 100, 25, 20, [0, 1, 2], 10)
    assert [v.algo for v in args.variants] == ["pflego", *t1.ALGOS]


def test_file_dataset_takes_data_dir_and_algos_select_rows(t1, tmp_path):
    args = t1.parse_args(["--dataset", "fashion-mnist", "--data-dir", str(tmp_path), "--algos", "fedavg, pflego",
                          "--seeds", "3,4"])

    assert (args.dataset, args.data_dir, args.seeds) == ("fashion-mnist", tmp_path, [3, 4])
    # pflego keeps the table's order (first) and gets both rows; Fashion-MNIST's Table 6 rho is 0.002
    assert [(v.label, v.overrides) for v in args.variants] == [
        ("pflego (rho=0.002, Table 6)", ()), ("pflego (rho=0.001, paper's grid)", (("rho", 0.001),)),
        ("fedavg", ())]


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "mnist"], "needs --data-dir"),
    (["--data-dir", "/tmp"], "--data-dir needs --dataset"),
    (["--algos", "fedavg,fedfoo"], "unknown fedfoo"),
    (["--algos", ","], "(none given)"),
    (["--seeds", "0,x"], "comma-separated integers"),
    (["--last", "0"], "--last must be at least 1"),
    (["--protocol", "local"], "invalid choice"),
])
def test_bad_options_are_one_line_and_exit_2(t1, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        t1.parse_args(argv)

    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("dataset, title, pflego, fedavg", [
    ("digits", "MNIST", "98.70 ± 0.21", "97.54 ± 0.25"),
    ("mnist", "MNIST", "98.70 ± 0.21", "97.54 ± 0.25"),
    ("fashion-mnist", "Fashion-MNIST", "96.34 ± 0.43", "96.35 ± 0.47"),
])
def test_paper_column_matches_the_dataset(t1, dataset, title, pflego, fedavg):
    got_title, column = t1.paper_column(dataset)

    assert (got_title, column["pflego"], column["fedavg"]) == (title, pflego, fedavg)
    assert set(column) == {"fedper", "fedavg", "fedprox", "ditto", "fedrep", "fedbabu", "pflego"}


def _cell(t1, label, protocol, seed, accs, joules=(1.0,), method="estimate"):
    return t1.Cell(label, protocol, seed, tuple(accs), tuple(joules), method)


def test_summary_averages_the_last_rounds_then_the_seeds(t1):
    variants = [t1.Variant("fedavg", "fedavg"), t1.Variant("fedrecon", "fedrecon")]
    cols = t1.columns("both", None)
    cells = [_cell(t1, "fedavg", "global", 0, [0.1, 0.5, 0.7], joules=(1.0, 2.0)),
             _cell(t1, "fedavg", "global", 1, [0.2, 0.6, 0.8], joules=(3.0,)),
             _cell(t1, "fedavg", "paper", 0, [0.0, 0.9, 0.9], joules=(4.0, 5.0)),
             _cell(t1, "fedrecon", "global", 0, [0.4, 0.5], method="none")]

    rows = t1.summarize(cells, variants, cols, {"fedavg": "97.54 ± 0.25"}, last=2)

    finals = [100 * (0.5 + 0.7) / 2, 100 * (0.6 + 0.8) / 2]
    assert rows[0].accuracy["global"] == pytest.approx((statistics.fmean(finals), statistics.stdev(finals)))
    assert rows[0].accuracy["paper"] == pytest.approx((90.0, 0.0))
    assert (rows[0].paper, rows[0].energy_j, rows[0].method) == ("97.54 ± 0.25", 3.0, "estimate")
    # fedrecon: no paper-protocol run, not in Table 1, no energy method
    assert (set(rows[1].accuracy), rows[1].paper, rows[1].method) == ({"global"}, "-", "none")


def test_table_puts_the_paper_column_beside_both_protocols(t1):
    cols = t1.columns("both", None)
    rows = [t1.Row("fedavg", "97.54 ± 0.25", {"global": (74.691, 4.2), "paper": (97.004, 0.31)}, 0.2381, "estimate"),
            t1.Row("fedalt", "-", {"global": (98.2, 0.8)}, None, "none")]

    text = t1.format_table(rows, cols, "MNIST", "setting")

    lines = text.splitlines()
    assert lines[:2] == ["setting", ""]
    assert lines[2] == ("| algorithm | paper, MNIST High-Pers | global protocol, balanced split | "
                        "paper protocol, paper split | median J / client round | energy method |")
    assert lines[3] == "|---|---|---|---|---|---|"
    assert lines[4] == "| fedavg | 97.54 ± 0.25 | 74.69 ± 4.20 | 97.00 ± 0.31 | 0.238 | estimate |"
    assert lines[5] == "| fedalt | - | 98.20 ± 0.80 | - | - | none |"


def test_run_names_tell_protocol_split_and_overrides_apart(t1):
    variant = t1.Variant("pflego (rho=0.001, paper's grid)", "pflego", (("rho", 0.001),))

    names = {t1.run_name("digits", variant, c, 0) for c in t1.columns("both", None)}

    assert names == {"table1-digits-pflego-rho0.001-global-balanced-s0", "table1-digits-pflego-rho0.001-paper-paper-s0"}


def test_unreadable_data_dir_is_one_line_before_any_run(t1, tmp_path, capsys):
    out = tmp_path / "out"

    code = t1.main(["--dataset", "mnist", "--data-dir", str(tmp_path), "--out", str(out)])

    err = capsys.readouterr().err
    assert code == 3  # DataError's exit code
    assert err.startswith("error: ") and err.count("\n") == 1
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("sidecar, reused", [
    ({"status": "complete", "config": {"rounds": 100, "seed": 0}}, True),
    ({"status": "interrupted", "config": {"rounds": 100, "seed": 0}}, False),
    ({"status": "complete", "config": {"rounds": 50, "seed": 0}}, False),
    ({"status": "complete"}, False),
])
def test_resume_reads_only_a_complete_run_with_the_same_settings(t1, sidecar, reused):
    assert t1.finished(sidecar, {"rounds": 100, "seed": 0}) is reused


def test_resume_finds_the_report_of_the_same_run(t1, tmp_path):
    import json

    from edgeprof.config import RunConfig

    cfg = RunConfig(algo="fedavg", dataset="digits", backbone="mlp", out=tmp_path, run_name="table1-x-s0")
    (tmp_path / "table1-x-s0.csv").write_text("run_id\n")
    sidecar = tmp_path / "table1-x-s0.json"
    sidecar.write_text(json.dumps({"status": "complete", "config": cfg.resolved().to_dict()}))

    found = t1.previous_report(cfg)
    sidecar.write_text(json.dumps({"status": "complete", "config": {**cfg.resolved().to_dict(), "tau": 7}}))

    assert (found, t1.previous_report(cfg)) == (tmp_path / "table1-x-s0.csv", None)

"""The HTML dashboard: every section, escaped labels, inlined plotly; and a real headless Chromium load."""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgeprof.algorithms import phases_of
from edgeprof.report.analysis import analyze
from edgeprof.cli import app
from edgeprof.report.dashboard import SECTIONS, render, script_json, write_dashboard
from edgeprof.report.schema import columns_for
from edgeprof.report.writer import ReportWriter, read_report, write_sidecar

from test_analysis import (CLAIM_HOLDS, GPU_REPORTS, IDLE_W, TAUS, geometric_ratio, gpu_reference, idle_section,
                           reference_columns, rows_for)

HOSTILE = "<script>alert(1)</script>"
HOSTILE_ALGO = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
TWO = {("pflego", "onnx"): lambda t: 0.2, ("fedavg", "torch"): lambda t: 0.01 + 0.15 * t}


def _write(folder: Path, name: str, rows: list[dict], host: str, method: str = "estimate") -> Path:
    path = folder / f"{name}.csv"
    with ReportWriter(path, columns_for(phases_of(["pflego", "fedavg"]))) as writer:
        for i, row in enumerate(rows):
            row = dict(row, run_id=name, round=str(i + 1), energy_method=row.get("energy_method", method),
                       carbon_g=f"{1e-4 * i:.6g}", peak_rss_mb=f"{300 + i % 7}")
            if row["kind"] == "client" and row["algo"] == "pflego":
                row.update(cache_forward_s="0.1", head_steps_s="0.01", joint_grad_s="0.09")
            elif row["kind"] == "client" and row["algo"] == "fedavg":
                row.update(local_steps_s=row["wall_s"])
            writer.write(row)
    write_sidecar(path.with_suffix(".json"), {
        "run_id": name, "status": "complete",
        "host": {"hostname": host, "cpu_model": f"CPU of {host}", "cpu_cores_logical": 2},
        "meters": {"meters": [{"name": "cpu_estimate"}], "not_found": [{"meter": "rapl", "reason": "none"}]},
        "energy": {"carbon": {"g_per_kwh": 475.0, "source": "world average"}}})
    return path


def _render(folder: Path, rows: list[dict]) -> str:
    """The page of one report of ``rows`` (each with its own energy_method, else estimate), really written."""
    return render([read_report(_write(folder, "run", rows, "laptop"))])


def _figures(page: str, title_part: str = "") -> list[dict]:
    blob = re.search(r'id="edgeprof-figures">(.*?)</script>', page, re.S).group(1)
    return [f for f in json.loads(blob) if title_part in f["layout"]["title"]["text"]]


def _cells(page: str, table_class: str) -> list[list[str]]:
    """The body cells of the page's table of ``table_class``, unescaped."""
    body = re.search(rf'<table class="{table_class}">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", tr)] for tr in re.findall(r"<tr>(.*?)</tr>", body)]


def _eval_rows(host: str) -> list[dict]:
    rows = []
    for rnd in range(1, 4):
        rows.append(dict(host=host, algo="fedavg", engine="torch", tau="5", kind="client", wall_s="0.5",
                         energy_j="5"))
        rows.append(dict(host=host, algo="fedavg", engine="torch", tau="5", kind="eval",
                         test_accuracy=f"{0.5 + 0.1 * rnd}", train_loss="1.0"))
    return rows


@pytest.fixture
def reports(tmp_path) -> list[Path]:
    sweep = rows_for(CLAIM_HOLDS, host="laptop") + rows_for(CLAIM_HOLDS, host=HOSTILE, seed=1)
    odd = rows_for({("x", "y"): lambda t: 1.0}, host="laptop")
    sweep += [dict(r, algo=HOSTILE_ALGO, engine="torch") for r in odd]
    sweep += [dict(r, kind="server", wall_s="0.002") for r in sweep[:12]]
    train = _eval_rows("laptop")
    return [_write(tmp_path, "sweep-a", sweep, "laptop"),
            _write(tmp_path, "train-b", train, "jetson", method="counter")]


def test_page_has_every_section_and_plotly_once(reports):
    page = render([read_report(p) for p in reports])

    for sid, name in SECTIONS:
        assert f'<section id="{sid}">' in page and name in page
    assert page.count("plotly.js v") == 1 and "<script src" not in page
    assert "ESTIMATE" in page and "(an ESTIMATE, not a measurement)" in page
    assert "Peak resident memory" in page and "Hosts side by side" in page
    assert "Verdict <b>flat</b>" in page and ">flat<" in page and ">linear<" in page
    figures = json.loads(re.search(r'id="edgeprof-figures">(.*?)</script>', page, re.S).group(1))
    titles = " ".join(f["layout"]["title"]["text"] for f in figures)
    for part in ("per client round", "per phase", "each client round", "total energy", "test accuracy"):
        assert part in titles
    assert "laptop: " in titles and "&lt;script&gt;alert(1)&lt;/script&gt;: " in titles  # one column per host


def test_hostile_labels_are_escaped_everywhere(reports):
    page = render([read_report(p) for p in reports], title=HOSTILE)

    assert HOSTILE not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    blob = re.search(r'id="edgeprof-figures">(.*?)</script>', page, re.S).group(1)
    assert "<" not in blob and ">" not in blob
    assert "&lt;img src=x" in json.dumps(json.loads(blob))


def test_script_json_cannot_close_its_script():
    text = script_json({"name": "</script><script>alert(1)</script>", "x": [float("nan"), 1.0], "s": "\u2028"})

    assert "</" not in text and "\u2028" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>", "x": [None, 1.0], "s": "\u2028"}


def test_dashboard_command_writes_one_file(reports, tmp_path):
    out = tmp_path / "page" / "report.html"

    result = CliRunner().invoke(app, ["dashboard", *map(str, reports), "-o", str(out)])

    assert result.exit_code == 0, result.output
    assert out.is_file() and "wrote" in result.stdout
    bad = CliRunner().invoke(app, ["dashboard", str(tmp_path / "missing.csv"), "-o", str(out)])
    assert bad.exit_code == 7 and "no report at" in bad.stderr


def _fit_n(page: str) -> dict[tuple[str, str], int]:
    """The verdicts table's n per (algorithm, metric), of the seconds (not the joules: short windows leave them)."""
    return {(row[1], row[2]): int(row[3]) for row in _cells(page, "verdicts") if row[2] in ("wall_s", "cpu_s")}


def test_a_report_named_twice_or_copied_is_refused_not_counted_twice(tmp_path):
    """Read twice, a report's rounds would pass for twice the measurements made: a fit's n doubled and its 95%
    intervals narrowed (which can turn a verdict). One line, exit 7, no page; while another run of the same name, the
    same rows measured on another device, and two reports that are each named once stay two reports."""
    tiny = ["--backbone", "mlp", "--dataset", "synthetic", "--samples-per-client", "20", "--taus", "1,3",
            "--repeats", "2", "--algos", "pflego,fedavg", "--no-progress", "--run-name", "sweep"]
    for folder in ("one", "rerun"):  # two real sweeps of one name on this host
        assert CliRunner().invoke(app, ["sweep", *tiny, "--out", str(tmp_path / folder)]).exit_code == 0
    one, rerun = tmp_path / "one" / "sweep.csv", tmp_path / "rerun" / "sweep.csv"
    (tmp_path / "copy").mkdir()
    for suffix in (".csv", ".json"):
        shutil.copy(one.with_suffix(suffix), tmp_path / "copy" / f"sweep{suffix}")
    elsewhere = tmp_path / "elsewhere" / "sweep.csv"  # the same run id and times, another host: not the same rows
    elsewhere.parent.mkdir()
    with one.open(newline="") as src, elsewhere.open("w", newline="") as dst:
        rows = list(csv.DictReader(src))
        assert rows and all(r["timestamp_s"] and r["host"] for r in rows)
        writer = csv.DictWriter(dst, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(dict(r, host="jetson") for r in rows)
    page = tmp_path / "page"

    twice = "the report named twice"
    for named, how in [((one, one), twice), ((one, one.with_suffix(".json")), twice),
                       ((one, rerun, tmp_path / "copy" / "sweep.csv"), "a copy")]:
        for command in (["dashboard", *map(str, named), "--out", str(page)], ["summary", *map(str, named)]):
            result = CliRunner().invoke(app, command)
            assert result.exit_code == 7, result.output
            line = [ln for ln in result.stderr.splitlines() if ln.strip()]
            assert line == [f"edgeprof: error: {named[0]} and {named[-1].with_suffix('.csv')} hold the same measured "
                            f"rows ({how}): name each report once"], result.stderr
            if command[0] == "summary":  # nothing printed before the refusal: every report is read first
                assert result.stdout == "", result.stdout
    assert not page.exists()

    rows_of = {p: len(read_report(p).where(kind="client")) // 2 for p in (one, rerun)}  # per algorithm
    assert CliRunner().invoke(app, ["dashboard", str(one), "--out", str(page), "--name", "one"]).exit_code == 0
    assert set(_fit_n((page / "one.html").read_text()).values()) == {rows_of[one]}
    both = CliRunner().invoke(app, ["dashboard", str(one), str(rerun), "--out", str(page), "--name", "both"])
    assert both.exit_code == 0, both.output
    assert set(_fit_n((page / "both.html").read_text()).values()) == {rows_of[one] + rows_of[rerun]}
    hosts = CliRunner().invoke(app, ["dashboard", str(one), str(elsewhere), "--out", str(page), "--name", "hosts"])
    assert hosts.exit_code == 0, hosts.output
    assert CliRunner().invoke(app, ["summary", str(one), str(rerun), str(elsewhere)]).exit_code == 0


def _verdict_rows(page: str) -> dict[tuple[str, str, str], list[str]]:
    """The verdicts table: (host, algorithm, metric) -> the rest of its row."""
    return {(row[0], row[1], row[2]): row[3:] for row in _cells(page, "verdicts")}


def test_one_hosts_reports_of_two_workloads_are_fitted_apart_not_pooled(tmp_path):
    """Two real sweeps on this host, of two data sets: pooled, FedAvg's two lines made one noisy fit. Each is drawn as
    its own setting, ``host · data set``, with exactly the fits, verdicts and ratios of its report alone."""
    tiny = ["--backbone", "mlp", "--samples-per-client", "20", "--taus", "1,3", "--repeats", "2",
            "--algos", "pflego,fedavg", "--no-progress", "--trace"]
    paths = {}
    for dataset in ("synthetic", "digits"):
        result = CliRunner().invoke(app, ["sweep", *tiny, "--dataset", dataset, "--run-name", dataset,
                                          "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
        paths[dataset] = tmp_path / f"{dataset}.csv"
    reports = {d: read_report(p) for d, p in paths.items()}
    (host,) = {r["host"] for rep in reports.values() for r in rep.rows}

    both = render(list(reports.values()))

    combined = _verdict_rows(both)
    assert {key[0] for key in combined} == {f"{host} · synthetic", f"{host} · digits"}
    for dataset, report in reports.items():
        alone = _verdict_rows(render([report]))
        assert {k[0] for k in alone} == {host}
        assert {(f"{host} · {dataset}", *k[1:]): v for k, v in alone.items()} == {
            k: v for k, v in combined.items() if k[0] == f"{host} · {dataset}"}
    for dataset in reports:  # every section names the settings: the cost plots and the power traces
        assert len(_figures(both, f"{host} · {dataset}: wall seconds per client round")) == 1
        titles = [f["layout"]["title"]["text"] for f in _figures(both, f"{host} · {dataset}: fedavg")]
        assert len(titles) == 2 and any(t.startswith(f"{host} · {dataset}: fedavg, round ") for t in titles)
        assert f"{host} · {dataset}: fedavg: mean power per phase over 4 client windows (ESTIMATE)" in titles


def test_a_hosts_settings_are_named_by_the_workload_cells_that_differ_there():
    """The workload of a row is its data set, backbone and device; an empty cell (an eval row names no device) is its
    report's; a host is split only where its rows differ, and named by the cells that differ."""
    from edgeprof.report.dashboard.page import rows_of
    from edgeprof.report.writer import Report

    def report(host, device, backbone="mlp"):
        rows = [dict(host=host, algo="fedavg", kind="client", dataset="digits", backbone=backbone,
                     device_kind=device), dict(host=host, algo="fedavg", kind="eval", dataset="digits",
                                               backbone=backbone, device_kind="")]
        return Report(Path(f"{host}-{device}-{backbone}.csv"), tuple(rows[0]), rows)

    def hosts(*reports):
        return [r.host for r in rows_of(reports)]

    assert hosts(report("gpu", "cpu"), report("gpu", "cuda")) == ["gpu · cpu"] * 2 + ["gpu · cuda"] * 2
    assert hosts(report("gpu", "cuda"), report("gpu", "cuda"), report("laptop", "cpu")) == ["gpu"] * 4 + ["laptop"] * 2
    assert hosts(report("gpu", "cpu"), report("gpu", "cuda", "cnn-cifar"), report("laptop", "cpu")) == [
        "gpu · mlp/cpu"] * 2 + ["gpu · cnn-cifar/cuda"] * 2 + ["laptop"] * 2


@pytest.mark.parametrize("methods", [{"pflego": "estimate", "fedavg": "estimate"},
                                     {"pflego": "counter", "fedavg": "counter"},
                                     {"pflego": "estimate", "fedavg": "counter"}],
                         ids=["all-estimated", "all-measured", "pflego-estimated"])
def test_energy_figures_and_rows_say_estimate_exactly_where_estimated(tmp_path, methods):
    rows = [dict(r, energy_method=methods[r["algo"]]) for r in rows_for(TWO)]

    page = _render(tmp_path, rows)

    mark = {algo: " (ESTIMATE)" if method == "estimate" else "" for algo, method in methods.items()}
    either = " (ESTIMATE)" if "estimate" in methods.values() else ""
    assert [f["layout"]["title"]["text"] for f in _figures(page, "energy, J per client round")] == [
        f"dev: energy, J per client round{either}"]
    fits = {(algo, metric) for _, algo, metric, *_ in _cells(page, "verdicts")}
    assert fits == {(algo, m) for algo in methods for m in ("wall_s", "cpu_s", f"energy_j{mark[algo]}")}
    assert {row[3] for row in _cells(page, "ratios")} == {"wall_s", "cpu_s", f"energy_j{either}"}
    totals = {algo: (energy.endswith(" (ESTIMATE)"), carbon.endswith(" (ESTIMATE)"))
              for _, algo, _, _, energy, carbon, _ in _cells(page, "totals")}
    assert totals == {algo: (bool(m), bool(m)) for algo, m in mark.items()}
    # every axis of joules or grams says so too, where any of them was estimated (the titles alone did)
    axes = [(f["layout"]["title"]["text"], axis["title"]["text"]) for f in _figures(page)
            for axis in (f["layout"].get("xaxis", {}), f["layout"].get("yaxis", {})) if axis.get("title")]
    energy_axes = [(t, a) for t, a in axes if re.search(r"\bJ\b|joules|energy|CO2", a)]
    assert energy_axes and all(a.endswith(" (ESTIMATE)") == bool(either) for _, a in energy_axes), energy_axes


@pytest.mark.parametrize("methods,banner", [
    ({"pflego": "estimate", "fedavg": "estimate"},
     "Energy here is an ESTIMATE wherever its method is estimate (process CPU time times watts per core), not a "
     "measurement. The energy method in these reports is estimate."),
    ({"pflego": "estimate", "fedavg": "counter"},
     "Energy here is an ESTIMATE wherever its method is estimate (process CPU time times watts per core), not a "
     "measurement. The energy methods in these reports are counter and estimate."),
    ({"pflego": "counter", "fedavg": "counter"}, "The energy method in these reports is counter."),
])
def test_energy_banner_is_made_of_sentences(tmp_path, methods, banner):
    rows = [dict(r, energy_method=methods[r["algo"]]) for r in rows_for(TWO)]

    page = _render(tmp_path, rows)

    notes = [html.unescape(re.sub(r"<[^>]+>", "", p)) for p in re.findall(r'<p class="[a-z]+">(.*?)</p>', page, re.S)]
    assert [n for n in notes if "energy method" in n] == [banner, banner]  # above the cost plots and the totals


def test_titles_sit_below_the_toolbar_and_log_toggles_below_the_titles(reports):
    page = render([read_report(p) for p in reports])

    figures = _figures(page)
    assert _figures(page, "total energy") and _figures(page, "total carbon")  # the half-width ones among them
    for f in figures:
        layout = f["layout"]
        title, top, toggles = layout["title"], layout["margin"]["t"], layout.get("updatemenus", [])
        assert (title["yref"], title["y"], title["yanchor"]) == ("container", 1, "top")
        assert title["pad"]["t"] >= 28  # plotly's toolbar: 2 px from the top, buttons about 24 px high
        assert all((m["y"], m["yanchor"]) == (1, "bottom") for m in toggles)  # on the plot area's top edge
        assert top - title["pad"]["t"] >= 30 + 30 * bool(toggles)  # a 17 px title, then 26 px buttons


@pytest.mark.parametrize("title", ["median seconds per phase", "per client round"])
def test_phase_and_cost_charts_toggle_a_log_y_axis(reports, title):
    figures = _figures(render([read_report(p) for p in reports]), title)

    assert len(figures) >= 2  # one per host
    for f in figures:
        (toggle,) = f["layout"]["updatemenus"]
        assert [b["args"] for b in toggle["buttons"]] == [[{"yaxis.type": "linear"}], [{"yaxis.type": "log"}]]


def test_phase_axis_puts_tau_under_the_algorithm_in_short_upright_labels(reports):
    (figure,) = _figures(render([read_report(p) for p in reports]), "laptop: median seconds per phase")

    xaxis, bar = figure["layout"]["xaxis"], figure["data"][0]
    assert (xaxis["type"], xaxis["tickangle"], xaxis["automargin"]) == ("multicategory", 0, True)
    algos, taus = bar["x"]
    assert set(taus) == {str(t) for t in TAUS} and max(len(html.unescape(a)) for a in algos) <= 24
    assert html.escape(HOSTILE_ALGO, quote=True) + " tau=100" in bar["hovertext"]


@pytest.mark.parametrize("algos,shown", [
    (("a" * 30, "b" * 30), ("a" * 23 + "\u2026", "b" * 23 + "\u2026")),
    (("c" * 30 + "one", "c" * 30 + "two"), ("c" * 30 + "one", "c" * 30 + "two")),  # cut, the two would read the same
], ids=["cut", "kept-whole"])
def test_long_algorithm_names_are_cut_on_axes_unless_two_would_merge(tmp_path, algos, shown):
    rows = rows_for({(algo, "torch"): (lambda t: 1.0) for algo in algos})

    (figure,) = _figures(_render(tmp_path, rows), "total energy")

    assert tuple(figure["data"][0]["x"]) == shown and tuple(figure["data"][0]["hovertext"]) == algos


def test_time_series_draws_one_line_per_algorithm_and_tau(tmp_path):
    rows = rows_for(TWO)
    interleaved = [r for start in range(3) for r in rows[start::3]]  # the taus alternate round by round

    (figure,) = _figures(_render(tmp_path, interleaved), "each client round")

    traces = figure["data"]
    lines = sorted((t["name"], tau) for t in traces for tau in {text.rsplit("tau=", 1)[1] for text in t["text"]})
    assert len(traces) == len(lines) == 2 * len(TAUS)  # no line joins two taus
    assert lines == sorted((algo, str(tau)) for algo in ("pflego", "fedavg") for tau in TAUS)
    assert all(t["x"] == sorted(t["x"]) for t in traces)
    assert [t["name"] for t in traces if t["showlegend"]] == ["pflego", "fedavg"]  # one legend entry each


def test_confidence_band_of_a_cost_stops_at_zero(tmp_path):
    rows = rows_for({("fedavg", "torch"): lambda t: 0.01 + 0.15 * t}, noise=0.3)
    fit = analyze(rows).fit_for("dev", "fedavg", "wall_s").fit
    assert fit.predict(fit.x_min) - fit.band(fit.x_min) < 0  # unclipped, the band would go below zero

    (figure,) = _figures(_render(tmp_path, rows), "wall seconds per client round")

    (band,) = [t for t in figure["data"] if t.get("fill") == "toself"]
    lower = band["y"][len(band["y"]) // 2:]  # from tau_max back to tau_min
    assert lower[-1] == 0.0 and min(band["y"]) == 0.0
    assert lower[0] == pytest.approx(fit.predict(fit.x_max) - fit.band(fit.x_max)) and lower[0] > 0


def test_short_windows_are_drawn_hollow_and_left_out_of_the_energy_fit_and_the_table_counts_them(tmp_path):
    """PFLEGO's rounds shorter than a 0.3 s meter, FedAvg's at tau=1 too: their joules are hollow markers, not in
    the energy fit, the fits table shows '0 (+18 short)' and '15 (+3 short)', and the note says why."""
    from test_analysis import _short_below

    rows = _short_below(rows_for(TWO, noise=0.0), 0.3)  # PFLEGO 0.2 s; FedAvg 0.16 s at tau=1, 0.76 s at tau=5

    page = _render(tmp_path, [dict(r, energy_method="counter") for r in rows])

    (figure,) = _figures(page, "energy, J per client round")
    hollow = {t["name"]: len(t["x"]) for t in figure["data"] if t.get("marker", {}).get("symbol") == "circle-open"}
    assert hollow == {"pflego: short window, not fitted": 18, "fedavg: short window, not fitted": 3}
    assert [t["name"] for t in figure["data"] if t.get("mode") == "lines" and "fit" in t["name"]] == [
        "fedavg fit (linear)"], "no fit is drawn through joules the meters did not resolve"
    counts = {(c[1], c[2]): c[3] for c in _cells(page, "verdicts")}
    assert counts[("pflego", "energy_j")] == "0 (+18 short)" and counts[("fedavg", "energy_j")] == "15 (+3 short)"
    assert counts[("pflego", "wall_s")] == "18"
    assert "21 client or server window(s) lasted less than the meters' update period" in page


@pytest.mark.parametrize("taus,sentences,verdicts,cost_plots", [((5,), 2, False, 0), ((1, 5, 10), 0, True, 3)],
                         ids=["one-tau", "three-taus"])
def test_one_tau_says_no_fit_instead_of_verdicts_and_strips(tmp_path, taus, sentences, verdicts, cost_plots):
    rows = [r for r in rows_for(TWO) if int(r["tau"]) in taus]

    page = _render(tmp_path, rows)

    assert page.count("<b>One tau: no fit.</b> Every algorithm here ran at a single tau (tau=5)") == sentences
    assert ('<table class="verdicts">' in page) == verdicts and '<table class="ratios">' in page
    assert len(_figures(page, "per client round")) == cost_plots


def test_no_pair_to_compare_says_so_instead_of_a_table_of_headers(tmp_path):
    from edgeprof.report.dashboard.claim import NO_RATIOS

    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    pflego_only = _render(tmp_path / "one", [r for r in rows_for(TWO) if r["algo"] == "pflego"])
    both = _render(tmp_path / "two", rows_for(TWO))

    assert NO_RATIOS in pflego_only and '<table class="ratios">' not in pflego_only
    assert NO_RATIOS not in both and _cells(both, "ratios")  # PFLEGO and FedAvg at the same taus: ratios drawn


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--virtual-time-budget=15000"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_page_loads_in_headless_chromium_without_errors_and_draws_every_plot(reports, tmp_path):
    page = write_dashboard(reports, tmp_path / "report.html", title=HOSTILE)
    expected = page.read_text().count('class="plot"')

    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    shot = tmp_path / "report.png"
    _chromium(tmp_path, "--window-size=1400,3000", f"--screenshot={shot}", page.as_uri())

    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == [], console
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert f'data-plots="{expected}"' in body and "data-pwned" not in body
    assert dom.stdout.count('class="main-svg"') >= expected > 5
    assert shot.is_file() and shot.stat().st_size > 20_000


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_trace_section_draws_its_plots_in_headless_chromium(tmp_path):
    from test_trace_view import traced_reports

    reports = traced_reports(tmp_path / "profiles")
    page = write_dashboard([reports["pflego"], reports["fedavg"]], tmp_path / "trace.html")
    section = re.search(r'<section id="trace">(.*?)</section>', page.read_text(), re.S).group(1)
    expected = section.count('class="plot"')
    alone = tmp_path / "trace-only.html"  # the trace section alone at the top of the window, for the screenshot
    alone.write_text(page.read_text().replace("</head>", "<style>section:not(#trace),nav,h1{display:none}</style>"
                                                         "</head>", 1))

    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    shot = tmp_path / "trace.png"
    _chromium(tmp_path, "--window-size=1200,1000", f"--screenshot={shot}", alone.as_uri())

    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln] == []
    drawn = re.search(r'<section id="trace">(.*?)</section>', dom.stdout, re.S).group(1)
    assert expected == 4 and drawn.count('class="main-svg"') >= expected
    bands = sum(len(f["layout"].get("shapes", [])) for f in _figures(page.read_text()))
    assert bands >= 2 and drawn.count('<g class="shape-group"') == bands  # every phase band is drawn
    assert "cache_forward" in drawn and "local_steps" in drawn
    assert "cpu_estimate (estimate)" in drawn and "watts (ESTIMATE)" in drawn
    assert shot.is_file() and shot.stat().st_size > 20_000


@pytest.mark.parametrize("with_idle", [True, False], ids=["idle-baseline", "no-idle-baseline"])
def test_a_gpu_report_shows_the_gpus_own_verdicts_ratios_and_totals_net_of_idle(tmp_path, with_idle):
    name = "gpu-check-cnn-omniglot"
    path = gpu_reference(tmp_path, name, idle_section(tmp_path / "sys", IDLE_W) if with_idle else None)
    cols = reference_columns(name, IDLE_W)
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] in ("client", "server")]

    page = render([read_report(path)])

    verdicts = {(c[1], c[2]): c[-1] for c in _cells(page, "verdicts")}
    assert verdicts[("pflego", "gpu_j (counter)")] == "flat" and verdicts[("fedavg", "gpu_j (counter)")] == "linear"
    assert ("pflego", "energy_j (ESTIMATE)") in verdicts  # the total's verdict stays, labelled as before
    assert (("pflego", "gpu_net_j (counter, net of idle)") in verdicts) == with_idle
    ratios = {c[3]: c[4:] for c in _cells(page, "ratios")}  # metric -> the cells at tau 5, 25, 50, 100
    assert ratios["gpu_j (counter)"][2].startswith(f"{geometric_ratio(cols, 'gpu_j', 50):.2f} [")
    if with_idle:
        net50 = geometric_ratio(cols, "gpu_net_j", 50)
        assert ratios["gpu_net_j (counter, net of idle)"][2].startswith(f"{net50:.2f} [")
    for _, algo, count, gross, method, net, share, rest, rest_method in _cells(page, "gpu-totals"):
        mine = [r for r in rows if r["algo"] == algo]
        gpu, wall = (np.array([float(r[c]) for r in mine]) for c in ("gpu_j", "wall_s"))
        short = sum(r["short_window"] == "1" for r in mine)
        assert (count, gross, method, rest_method) == (f"{len(mine)} ({short} short)", f"{gpu.sum():.4g}", "counter",
                                                       "estimate")
        assert rest == f"{sum(float(r['cpu_estimate_j']) for r in mine):.4g}"
        assert (net, share) == ((f"{(gpu - IDLE_W * wall).sum():.4g}", f"{IDLE_W * wall.sum() / gpu.sum():.0%}")
                                if with_idle else ("-", "-"))
    titles = [f["layout"]["title"]["text"] for f in _figures(page)]
    assert "vm: GPU joules per client round (counter)" in titles
    assert "vm: energy, J per client round (ESTIMATE)" in titles  # the total's plot, labelled as before
    assert ("vm: GPU joules net of idle per client round (counter, net of idle)" in titles) == with_idle
    labelled = [c for table_class in ("verdicts", "ratios") for row in _cells(page, table_class) for c in row]
    assert not [c for c in labelled if "counter" in c and ("ESTIMATE" in c or "estimate" in c)]
    note = "gpu-check-cnn-omniglot: no net of idle: the run measured no idle baseline (--idle-seconds)"
    assert (note in html.unescape(page)) == (not with_idle)


def test_a_report_without_a_gpu_has_no_gpu_figures(reports):
    page = render([read_report(p) for p in reports])

    assert "gpu_j" not in page and "gpu-totals" not in page and "round GPU" not in page
    assert not _figures(page, "GPU")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_a_gpu_page_loads_in_headless_chromium_and_draws_the_gpus_own_plots(tmp_path):
    paths = [gpu_reference(tmp_path, name, idle_section(tmp_path / "sys", IDLE_W)) for name in GPU_REPORTS]
    page = write_dashboard(paths, tmp_path / "gpu.html")
    expected = page.read_text().count('class="plot"')

    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    shot = tmp_path / "gpu.png"
    _chromium(tmp_path, "--window-size=1400,3000", f"--screenshot={shot}", page.as_uri())

    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln] == []
    assert f'data-plots="{expected}"' in re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert dom.stdout.count('class="main-svg"') >= expected
    for text in ("GPU joules per client round (counter)", "GPU joules net of idle per client round",
                 "total GPU energy per algorithm (counter)", "gpu_net_j (counter, net of idle)"):
        assert text in dom.stdout, text
    assert shot.is_file() and shot.stat().st_size > 20_000


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_trace_section_draws_unresolved_intervals_and_bars_hollow_in_headless_chromium(tmp_path):
    from test_trace_view import _measure, written_report

    source = _measure(tmp_path / "profiles", "pflego", "--algo", "pflego", "--trace")
    page = write_dashboard([written_report(tmp_path / "written", source)], tmp_path / "hollow.html")

    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())

    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln] == []
    drawn = re.search(r'<section id="trace">(.*?)</section>', dom.stdout, re.S).group(1)
    assert drawn.count('class="main-svg"') >= 2
    for text in ("gpu_0 (unresolved: span mean)", "gpu_0: flagged", "Hollow = not resolved by the meter."):
        assert text in drawn, text
    bars = re.findall(r'<g class="point"><path [^>]*style="([^"]*)"', drawn)
    hollow = [b for b in bars if "fill-opacity: 0;" in b]
    # cache_forward, head_steps and (no phase): joint_grad is longer than two update periods, resolved
    assert len(hollow) == 3 and all("stroke-width: 2px" in b for b in hollow)


def test_accuracy_against_energy_draws_hollow_where_its_joules_hold_a_short_window(tmp_path):
    # Prepare: three rounds of a client, a server step and an evaluation; round 2's client window was short
    path = tmp_path / "acc.csv"
    with ReportWriter(path, columns_for(phases_of(["fedavg"]))) as writer:
        for rnd in (1, 2, 3):
            for kind in ("client", "server", "eval"):
                row = dict(run_id="acc", algo="fedavg", engine="torch", tau="5", kind=kind, round=str(rnd))
                if kind == "eval":
                    row.update(test_accuracy=f"{0.5 + 0.1 * rnd}")
                else:
                    row.update(wall_s="0.5", energy_j="5", energy_method="counter",
                               short_window="1" if (rnd, kind) == (2, "client") else "0")
                writer.write(row)
    write_sidecar(path.with_suffix(".json"), {"run_id": "acc", "status": "complete"})
    # Execute
    (figure,) = _figures(render([read_report(path)]), "test accuracy")
    # Assert: the evaluations after round 2 sum its unresolved joules: hollow, and said so
    (line,) = figure["data"]
    assert line["x"] == [10.0, 20.0, 30.0] and line["marker"]["symbol"] == ["circle", "circle-open", "circle-open"]
    assert line["text"] == ["", "its joules hold short windows: not resolved", "its joules hold short windows: not "
                                                                               "resolved"]


def test_the_rounds_axis_of_the_wall_time_plot_has_whole_ticks_only(tmp_path):
    page = _render(tmp_path, rows_for(TWO))

    (figure,) = _figures(page, "wall seconds of each client round")

    assert figure["layout"]["xaxis"]["tickformat"] == "d"

"""The HTML dashboard: one self-contained page (plotly.js and the data inlined) from one or more reports.

``render(reports) -> str`` is the renderer; :func:`write_dashboard` reads report files and writes the
page. The page needs no network and no server: plotly.js comes from the installed ``plotly`` package
(:func:`plotly.offline.get_plotlyjs`, inlined once) and every figure is a JSON object in one
``application/json`` script, drawn by a few lines of JavaScript.

Sections: runs and hosts, the Flower federation (each Flower run's ending, nodes and their data, and per round
what was sampled, accepted and rejected: :mod:`edgeprof.report.dashboard.flower`), the windows of a user's own code
(reports of ``edgeprof.monitor``: each window name's and eval window's medians and rows, the runs' labels, the
windows that raised), verdicts (fits, growth, ratios), cost versus tau with fitted lines and 95% bands, per-phase
breakdown, power over time (reports run with ``--trace`` or ``trace_hz=``: each algorithm's median-energy client
window, or each window name's median-energy window, against time over its phases' bands, and its mean power per
phase), per-round time series, energy and carbon totals, accuracy against cumulative energy (reports with
``kind=eval`` rows, or windows labelled ``test_accuracy``), client joules to a target accuracy against tau (the
reports of ``edgeprof train``, :mod:`edgeprof.report.dashboard.target`), measurement methods. A page of reports of
your own code alone leaves out the sections made for federated runs
(:data:`edgeprof.report.dashboard.own_code.FEDERATED_SECTIONS`) and says so. Reports from several hosts (the
``host`` column, else the sidecar's host name) are drawn side by side, one column per host; one host's reports of
several workloads (data sets, backbones, devices) one column per workload, ``host · workload``
(:func:`edgeprof.report.dashboard.page.rows_of`), each fitted apart.

Escaping: every text that comes from a report (run ids, algorithm, engine and host names, sidecar
values) is HTML-escaped in the page and in the plot labels; the JSON inside ``<script>`` has ``<``,
``>``, ``&`` and the line separators written as ``\\uXXXX`` escapes, so no value can close the script.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Iterator, Optional, Sequence

from edgeprof.atomic import make_folder, write_text
from edgeprof.errors import ConfigError, OutputError, require
from edgeprof.report.analysis import analyze
from edgeprof.report.dashboard import claim, flower, own_code, runs, target, window_charts
from edgeprof.report.dashboard.page import SCRIPT, STYLE, Page, by_host, esc, rows_of, script_json
from edgeprof.report.writer import Report, distinct, read_report

__all__ = ["SECTIONS", "render", "script_json", "write_dashboard"]


SECTIONS = (("runs", "Runs and hosts"), ("flower", "Flower federation"), ("windows", "Windows of your own code"),
            ("verdicts", "Verdicts"),
            ("cost-vs-tau", "Cost per client round vs tau"),
            ("phases", "Per-phase breakdown"), ("trace", "Power over time"), ("timeseries", "Per-round time series"),
            ("energy", "Energy and carbon totals"), ("accuracy", "Accuracy against cumulative energy"),
            ("to-target", "Energy to target accuracy against tau"), ("methods", "How the figures were measured"))


def render(reports: Sequence[Report], title: str = "edgeprof report", *, trace_round: Optional[int] = None,
           trace_client: Optional[int] = None, notes: Sequence[str] = ()) -> str:
    """The whole page for ``reports`` as one string (plotly.js inlined once); ``trace_round`` and
    ``trace_client`` pick the power trace's window to draw (default: each algorithm's median client window);
    ``notes``: what reading the reports noted (damaged rows, missing rows, a sidecar ignored), shown at the top with
    a line for each report that has no sidecar. ReportError when two reports hold the same measured rows
    (:func:`edgeprof.report.writer.distinct`)."""
    get_plotlyjs = require("plotly.offline", "dashboard", "the dashboard").get_plotlyjs

    if not reports:
        raise ConfigError("the dashboard needs at least one report")
    reports = distinct(reports)  # a report named twice would count its rounds twice (ReportError)
    rows = runs.with_gpu_net(rows_of(reports))  # gpu_net_j where a report's sidecar has the GPU's idle power
    analysis = analyze([r.data | {"host": r.host} for r in rows])
    hosts = by_host(rows)
    page = Page()
    bodies = {
        "runs": runs.runs_and_hosts(reports, rows),
        "flower": flower.flower_section(reports),
        "windows": window_charts.windows(page, reports, hosts),
        "verdicts": claim.verdicts(analysis, rows),
        "cost-vs-tau": claim.cost_vs_tau(page, analysis, rows, hosts),
        "phases": claim.phases(page, reports, hosts),
        "trace": window_charts.power_over_time(page, reports, trace_round, trace_client),
        "timeseries": runs.timeseries(page, hosts),
        "energy": runs.energy(page, hosts),
        "accuracy": runs.accuracy(page, hosts),
        "to-target": target.energy_to_target_section(page, reports),
        "methods": runs.methods_section(reports),
    }
    left_out = own_code.FEDERATED_SECTIONS if own_code.own_only(reports) else ()
    shown = [(sid, name) for sid, name in SECTIONS if sid not in left_out]
    nav = "".join(f'<a href="#{sid}">{esc(name)}</a>' for sid, name in shown)
    sections = "".join(f'<section id="{sid}"><h2>{esc(name)}</h2>{bodies[sid]}</section>' for sid, name in shown)
    note = own_code.left_out_note() if len(shown) < len(SECTIONS) else ""
    read = [*notes, *(f"{r.path.name}: {r.sidecar_problem} beside it: how its run ended, its meters and its settings "
                      "are not known" for r in reports if not r.sidecar and r.sidecar_problem.startswith("there is no"))]
    if read:
        note += ('<div class="note"><strong>Read with notes</strong> (what is drawn below is what these files hold):'
                 "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in read) + "</ul></div>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style>'
            f'<script>{get_plotlyjs()}</script></head><body><h1>{esc(title)}</h1><nav>{nav}</nav>{note}{sections}'
            f'<script type="application/json" id="edgeprof-figures">{script_json(page.figures)}</script>'
            f"<script>{SCRIPT}</script></body></html>\n")


@contextlib.contextmanager
def _kept_notes() -> Iterator[list[str]]:
    """The notes edgeprof's logger says within the block (warnings and above), kept for the page; they are said as
    before too."""
    kept: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record.getMessage())

    logger, handler = logging.getLogger("edgeprof"), Keep(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield kept
    finally:
        logger.removeHandler(handler)


def _run_files(report: Path) -> tuple[Path, ...]:
    """A report's CSV and the files its run wrote beside it: sidecar, power trace, final theta."""
    from edgeprof.report.trace_file import trace_csv_path

    return (report, report.with_suffix(".json"), trace_csv_path(report), report.with_suffix(".trace.parquet"),
            report.with_suffix(".theta.npz"))


def _check_not_an_input(output: Path, paths: Sequence[str | Path]) -> None:
    """ConfigError where the page would take the place of a report it reads or of a file its run wrote."""
    target = os.path.realpath(output)
    for path in paths:
        for kept in _run_files(Path(path)):
            if os.path.realpath(kept) == target:
                raise ConfigError(f"the dashboard's page {output} would overwrite {kept}, a file of the report "
                                  f"{path}; name another page (--out FOLDER --name NAME)")


def write_dashboard(paths: Sequence[str | Path], output: str | Path, title: str = "edgeprof report", *,
                    trace_round: Optional[int] = None, trace_client: Optional[int] = None) -> Path:
    """Read the reports at ``paths`` and write the page to ``output`` (ReportError / OutputError; ConfigError
    for a ``trace_round`` / ``trace_client`` with no traced client window). The page is written whole or not at
    all (:mod:`edgeprof.atomic`): a failed write leaves a previous page at ``output`` as it was."""
    output = Path(output)
    _check_not_an_input(output, paths)
    with _kept_notes() as notes:
        reports = [read_report(p) for p in paths]
    text = render(reports, title=title, trace_round=trace_round, trace_client=trace_client, notes=notes)
    try:
        make_folder(output.parent)
        write_text(output, text)  # whole or absent: a full disk leaves no part of a page, and an old page as it was
    except OSError as err:
        raise OutputError(f"cannot write the dashboard to {output}: {err.strerror or err}") from err
    return output

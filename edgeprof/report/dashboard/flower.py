"""The dashboard's Flower section: what happened in each Flower run (:mod:`edgeprof.report.federation`).

Per report whose sidecar has edgeprof's ``flower`` section: how the run ended (its status and reason, and the
sampled replies not used, so a run that lost a node never reads as a clean ``complete``), its notes (Flower
simulation, clients sharing a machine: per-client energy is then an attribution), its nodes (partition, node,
host, the data each said it trains on), the nodes left out at the roll call, and per round the partitions sampled,
accepted and rejected with the reason.
"""

from __future__ import annotations

from typing import Sequence

from edgeprof.report.dashboard.page import esc, table
from edgeprof.report.federation import Federation, of_report
from edgeprof.report.writer import Report


def status_text(report: Report) -> str:
    """A report's status for the runs table: a Flower run's :meth:`Federation.ending`, else the sidecar's status."""
    federation = of_report(report)
    if federation is not None:
        return federation.ending()
    status = report.sidecar.get("status", "-") if isinstance(report.sidecar, dict) else "-"
    return status if isinstance(status, str) else "-"


def _run(name: str, federation: Federation) -> str:
    """One run's part of the section: ending, notes, nodes, refusals, rounds."""
    cls = "note" if federation.status == "complete" and not federation.unused else "estimate"
    parts = [f'<h3>{esc(name)}</h3><p class="{cls}"><b>{esc(federation.status)}</b>'
             f'{esc(federation.ending()[len(federation.status):])}</p>']
    parts += [f'<p class="note">{esc(note)}</p>' for note in federation.notes]
    if federation.nodes:
        nodes = [(n.partition, n.node_id, n.host or "-", n.n_train, n.data_text) for n in federation.nodes]
        parts.append(table(("partition", "node", "host", "N_i", "data"), nodes, "flower-nodes"))
    if federation.missing_partitions:
        parts.append(f'<p class="note">No node served partition(s) '
                     f'{esc(", ".join(map(str, federation.missing_partitions)))}.</p>')
    if federation.refused:
        parts.append("<p>Left out at the roll call:</p>" + table(
            ("node", "reason"), federation.refused, "flower-refused"))
    body = [(r.round, ", ".join(map(str, r.sampled)) or "-", ", ".join(map(str, r.accepted)) or "-",
             "under way when the run ended" if r.under_way else ", ".join(map(str, r.missing)) or "-",
             len(r.rejected),
             "; ".join(f"{who}: {why}" for who, why in r.rejected) or "-") for r in federation.rounds]
    if body:
        parts.append(table(("round", "sampled", "accepted", "not used", "rejected", "why"), body, "flower-rounds"))
    else:
        parts.append('<p class="note">No round ran.</p>')
    return "".join(parts)


def flower_section(reports: Sequence[Report]) -> str:
    """The section's HTML: one part per Flower run, or a note that none of the reports is one."""
    parts = []
    for rep in reports:
        federation = of_report(rep)
        if federation is not None:
            parts.append(_run(rep.rows[0].get("run_id", rep.path.stem) if rep.rows else rep.path.stem, federation))
    if not parts:
        return '<p class="note">None of these reports is a Flower run.</p>'
    return "".join(parts)

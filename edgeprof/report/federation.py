"""What a Flower run's sidecar says happened, read for ``edgeprof summary`` and the dashboard.

:func:`read_federation` reads the sidecar's ``flower`` section (written by edgeprof's ServerApp) into plain data:
how the run ended (``status`` and ``reason``), per round the partitions sampled and accepted, the replies rejected
with the reason and the profiles flagged (cells the server left out), the nodes left out at the roll call, the
partitions no node served, each partition's node, host and data, and the notes (simulation, clients sharing a
machine). A sidecar is a file like any other: every value is checked for its type, and one of the wrong type reads
as absent, never as an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from edgeprof.report.writer import Report


@dataclass(frozen=True)
class FlowerRound:
    """One round: the partitions sampled and accepted, and the replies rejected as (who, reason); ``under_way``: the
    run ended (a stop, a failure) before the round did, so its replies were not awaited (none is missing);
    ``flagged``: the replies whose profile had cells the server left out or marked invalid, as (node, reason)."""

    round: int
    sampled: list[int]
    accepted: list[int]
    rejected: list[tuple[str, str]]
    under_way: bool = False
    flagged: list[tuple[str, str]] = field(default_factory=list)

    @property
    def missing(self) -> list[int]:
        """Sampled partitions whose reply was not used (rejected, or none came within the round's time); none in a
        round the run's end cut off."""
        return [] if self.under_way else [p for p in self.sampled if p not in self.accepted]


@dataclass(frozen=True)
class FlowerNode:
    """A partition's node: its id, host, N_i and the data it said it trains on (``{}`` where it did not say)."""

    partition: int
    node_id: Any
    host: str
    n_train: Any
    data: dict = field(default_factory=dict)

    @property
    def data_text(self) -> str:
        """``own: mnist in /data/x, 2 test, sha256 1a2b3c4d5e6f`` / ``partition of synthetic, ...`` / ``-``."""
        data = self.data
        if not data:
            return "-"
        where = (f"own: {data.get('dataset', '?')} in {data.get('folder', '?')}" if data.get("source") == "own"
                 else f"partition of {data.get('dataset', '?')}")
        return f"{where}, {data.get('n_test', '?')} test, sha256 {str(data.get('sha256', ''))[:12]}"


@dataclass(frozen=True)
class Federation:
    """A Flower run as its sidecar tells it."""

    status: str
    reason: str
    rounds: list[FlowerRound]
    nodes: list[FlowerNode]
    refused: list[tuple[str, str]]
    missing_partitions: list[int]
    simulation: bool
    notes: list[str]

    @property
    def rejected(self) -> list[tuple[int, str, str]]:
        """Every rejected reply as (round, who, reason), the roll call's refusals first as round 0."""
        return [(0, who, why) for who, why in self.refused] + [
            (r.round, who, why) for r in self.rounds for who, why in r.rejected]

    @property
    def flagged(self) -> list[tuple[int, str, str]]:
        """Every reply whose profile had cells the server left out or marked, as (round, node, reason)."""
        return [(r.round, who, why) for r in self.rounds for who, why in r.flagged]

    @property
    def unused(self) -> int:
        """Sampled replies over all rounds that were not used (rejected, or none came)."""
        return sum(len(r.missing) for r in self.rounds)

    def ending(self) -> str:
        """How the run ended, in one line: ``complete``, ``complete, 2 of 9 sampled replies not used (...)``,
        ``failed: <reason>``, ``interrupted: <reason>; round 3 was under way (...)``. The replies of a round the
        run's end cut off are not counted among those not used."""
        line = status_with_reason(self.status, self.reason)
        finished = [r for r in self.rounds if not r.under_way]
        if self.unused:
            sampled = sum(len(r.sampled) for r in finished)
            rejected = sum(len(r.rejected) for r in finished)
            line += (f", {self.unused} of {sampled} sampled replies not used ({rejected} rejected, "
                     f"{max(self.unused - rejected, 0)} never came)")
        for r in self.rounds:
            if r.under_way:
                line += (f"; round {r.round} was under way when the run ended (its {len(r.sampled)} sampled "
                         "replies were not awaited)")
        return line


def status_with_reason(status: str, reason: str) -> str:
    """``status: reason``, or the reason alone where it already starts with the status (``interrupted (SIGTERM)``,
    not ``interrupted: interrupted (SIGTERM)``)."""
    if not reason:
        return status
    return reason if reason.split(" ", 1)[0] == status else f"{status}: {reason}"


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _pairs(value: Any, first: str, second: str = "reason") -> list[tuple[str, str]]:
    """[(item[first], item[second])] of a list of objects, the items of the wrong shape left out."""
    if not isinstance(value, list):
        return []
    return [(str(v.get(first, "?")), _text(v.get(second))) for v in value if isinstance(v, Mapping)]


def _rounds(value: Any, completed: Optional[int] = None) -> list[FlowerRound]:
    """The rounds; with ``completed`` (a run that ended before its last round: the rounds its rows hold), a round
    after those is marked ``under_way``."""
    if not isinstance(value, Mapping):
        return []
    rounds = []
    for key, r in value.items():
        if isinstance(r, Mapping) and str(key).isdecimal():
            rounds.append(FlowerRound(int(key), _ints(r.get("sampled")), _ints(r.get("accepted")),
                                      _pairs(r.get("rejected"), "from"),
                                      completed is not None and int(key) > completed,
                                      _pairs(r.get("profiles_flagged"), "node")))
    return sorted(rounds, key=lambda r: r.round)


def _nodes(value: Any) -> list[FlowerNode]:
    if not isinstance(value, Mapping):
        return []
    nodes = []
    for key, n in value.items():
        if isinstance(n, Mapping) and str(key).isdecimal():
            data = n.get("data")
            nodes.append(FlowerNode(int(key), n.get("node_id", "?"), _text(n.get("host")), n.get("n_train", "?"),
                                    dict(data) if isinstance(data, Mapping) else {}))
    return sorted(nodes, key=lambda n: n.partition)


def read_federation(sidecar: Any) -> Optional[Federation]:
    """The Flower run a sidecar describes, or None for a sidecar without edgeprof's ``flower`` section."""
    flower = sidecar.get("flower") if isinstance(sidecar, Mapping) else None
    if not isinstance(flower, Mapping) or "rounds" not in flower:
        return None
    alpha = flower.get("alpha") if isinstance(flower.get("alpha"), Mapping) else {}
    listed = flower.get("notes") if isinstance(flower.get("notes"), list) else []  # a plain app's (ProfiledStrategy)
    notes = [n for n in [_text(flower.get("energy_note")), *map(_text, listed)] if n]
    done = sidecar.get("rounds_completed")
    ended_early = sidecar.get("status") != "complete" and isinstance(done, int) and not isinstance(done, bool)
    if flower.get("simulation") is True:
        notes.insert(0, "Flower simulation: every client ran on this one machine")
    return Federation(_text(sidecar.get("status")) or "unknown", " ".join(_text(sidecar.get("reason")).split()),
                      _rounds(flower.get("rounds"), done if ended_early else None), _nodes(alpha.get("nodes")),
                      _pairs(alpha.get("refused"), "node_id"), _ints(alpha.get("missing_partitions")),
                      flower.get("simulation") is True, notes)


def of_report(report: Report) -> Optional[Federation]:
    """:func:`read_federation` of a report's sidecar."""
    return read_federation(report.sidecar)

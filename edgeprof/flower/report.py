"""The one server-side reporter: one edgeprof report for a Flower federation whose ClientApps carry the mod.

:class:`ProfiledStrategy` wraps any Message-API strategy (it adds reporting, it subclasses no algorithm). In
every round:

* each reply that carries the mod's profile (:mod:`edgeprof.flower.energy`; the older wire format is read too)
  becomes one row (training replies: kind ``client``; evaluation replies: kind ``eval``), and the profile is
  taken out of the reply (:func:`~edgeprof.flower.energy.take_profile`), so the wrapped strategy aggregates
  exactly what it would have without edgeprof: its result is unchanged;
* the wrapped strategy's ``aggregate_train`` runs in a server window of this machine's meters, written as the
  round's ``server`` row. Rows are flushed as they are written, so a federation that stops keeps every
  finished round; a client that never replies simply has no row for that round.

Where the rows go is the only difference between a user's own app and edgeprof's (:class:`MonitorRows`,
:class:`RunRows`):

* a user's own app, with one of Flower's stock strategies, in one more line::

      from edgeprof.flower import ProfiledStrategy

      strategy = ProfiledStrategy(<a stock strategy>(fraction_evaluate=0.5), out="profiles", name="quickstart")
      result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=3)

  ``start`` is Flower's own round loop inside an :func:`edgeprof.monitor` run, which writes
  ``<out>/<run id>.csv`` and its sidecar. Rows carry ``round``, ``client`` (a small index in the order the
  nodes first replied; the sidecar maps it to the node id and host), ``host``, ``n_samples`` (the
  strategy's ``weighted_by_key``, ``num-examples`` by default) and, for training, ``train_loss``; the window is
  ``train`` / ``evaluate``, the server's ``aggregate_train``. The ``algo`` column is the wrapped strategy's class
  name (a label ``algo=`` overrides it). The sidecar's ``flower`` section holds the clients and, per round, how
  many replies came, were profiled, had no profile, or were errors;
* edgeprof's own ServerApp (:mod:`edgeprof.flower.server_app`) writes into the run it opened
  (:func:`edgeprof.session.run.open_run`): the rows of ``edgeprof measure`` (algorithm, engine, tau, the
  client's partition id), and ``eval`` rows with the protocol's loss and accuracy, so ``edgeprof summary`` and
  the dashboard read it unchanged. A client row's ``dataset`` is the data set its node said it trains on at the
  roll call (its own folder's, ``dataset`` in its node config), the run's where the node did not say.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Iterable, Iterator, Mapping, Optional

from flwr.app import Message, MetricRecord
from flwr.serverapp.strategy import Strategy

from edgeprof.errors import EdgeprofError
from edgeprof.flower.energy import take_profile, take_trace
from edgeprof.flower.node_checks import checked_profile

log = logging.getLogger("edgeprof.flower")

SHARED_HOST_NOTE = ("clients {clients} report the same host: each of their rows is that machine's energy "
                    "during the client's window, an attribution, not a separate machine's measurement; clients "
                    "that ran at the same time are counted in each other's windows")


class ProfiledStrategy(Strategy):
    """Wraps ``strategy``; writes one report row per profiled reply and one server row per round.

    ``rows``: where the rows go (:class:`RunRows` for edgeprof's ServerApp); without it, the keyword arguments
    are those of :func:`edgeprof.monitor` (``out``, ``name``, ``labels``, ``run_id``, the meter and carbon
    settings, ``profiler``) for the server's own report and meters (:class:`MonitorRows`). Any attribute the
    wrapper does not have is the wrapped strategy's.
    """

    def __init__(self, strategy: Strategy, *, rows: Optional[RunRows] = None, **monitor_settings: Any) -> None:
        self.inner = strategy
        self.rows = rows if rows is not None else MonitorRows(strategy, monitor_settings)
        self.rounds: dict[int, dict[str, dict[str, int]]] = {}
        #: per round, the replies whose profile had cells left out or marked (:func:`checked_profile`): node, why
        self.flagged: dict[int, list[dict]] = {}

    def __getattr__(self, name: str):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def monitor(self):
        return getattr(self.rows, "monitor", None)

    @property
    def csv_path(self):
        """The report, once start() has opened it."""
        return getattr(self.rows, "csv_path", None)

    def start(self, *args, **kwargs):
        """Flower's round loop (same arguments and result as the wrapped strategy's ``start``), reported."""
        with self.rows.run(self):
            return super().start(*args, **kwargs)

    def summary(self) -> None:
        self.inner.summary()

    def configure_train(self, server_round: int, arrays, config, grid) -> Iterable[Message]:
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        self.rows.running()
        replies = list(replies)
        self._record(server_round, replies, "train", "client")
        with self.rows.server_window(server_round, replies):
            result = self.inner.aggregate_train(server_round, replies)
        self.rows.after_train(server_round, replies)
        return result

    def configure_evaluate(self, server_round: int, arrays, config, grid) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]):
        self.rows.running()
        replies = list(replies)
        self._record(server_round, replies, "evaluate", "eval")
        metrics = self.inner.aggregate_evaluate(server_round, replies)
        self.rows.after_evaluate(server_round, metrics)
        return metrics

    def _record(self, server_round: int, replies: list[Message], window: str, kind: str) -> None:
        """Write a row for each profiled reply and take the profile out of every reply."""
        counts = self.rounds.setdefault(server_round, {}).setdefault(
            window, {"replies": 0, "profiled": 0, "unprofiled": 0, "errors": 0, "flagged": 0})
        for msg in replies:
            counts["replies"] += 1
            if msg.has_error():
                counts["errors"] += 1
                continue
            trace = take_trace(msg)
            profile = take_profile(msg)
            if profile is None:
                counts["unprofiled"] += 1
                continue
            profile, problems = checked_profile(profile)
            if problems:
                reason = "; ".join(problems)
                counts["flagged"] += 1
                self.flagged.setdefault(server_round, []).append({"node": msg.metadata.src_node_id, "window": window,
                                                                  "reason": reason})
                log.warning("round %d: node %d's profile: %s; its row is written without them", server_round,
                            msg.metadata.src_node_id, reason)
            try:
                self.rows.client_row(server_round, msg, profile, window, kind, trace)
                counts["profiled"] += 1
            except (EdgeprofError, TypeError, ValueError, KeyError) as err:
                counts["unprofiled"] += 1
                log.warning("round %d: unreadable profile from node %d: %s", server_round,
                            msg.metadata.src_node_id, err)


def _count(value: Any) -> Optional[int]:
    """A count a reply gave, as an int; None unless it is a finite whole number >= 0 (a node's numbers are
    untrusted: ``inf`` or a list must not crash the reporter)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return int(value) if value == int(value) else None


def _finite(value: Any) -> Optional[float]:
    """A number a reply gave, as a float; None unless it is a finite real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _metrics(msg: Message) -> Mapping[str, Any]:
    """The reply's MetricRecord when it has exactly one (as stock strategies require), else nothing."""
    records = msg.content.metric_records
    return next(iter(records.values())) if len(records) == 1 else {}


class MonitorRows:
    """Rows of a user's own federation, written through an :func:`edgeprof.monitor` run opened by ``start``."""

    def __init__(self, strategy: Strategy, settings: dict) -> None:
        from edgeprof.session.monitoring import monitor

        self.inner = strategy
        labels = {"algo": type(strategy).__name__, **dict(settings.pop("labels", None) or {})}
        settings.setdefault("name", "flower")
        self.settings = {**settings, "labels": labels}
        monitor(**self.settings)  # settings checked now, nothing opened until start()
        self.monitor = None
        self.csv_path = None
        self.clients: dict[int, int] = {}  # node id -> client index
        self.hosts: dict[int, str] = {}  # client index -> host

    @contextlib.contextmanager
    def run(self, reporter: ProfiledStrategy) -> Iterator[None]:
        from edgeprof.session.monitoring import monitor

        with monitor(**self.settings) as mon:
            self.monitor, self.csv_path = mon, mon.csv_path
            try:
                yield
            finally:
                mon.sidecar_sections["flower"] = self.flower_section(reporter.rounds, reporter.flagged)
                self.monitor = None

    def flower_section(self, rounds: Mapping[int, Any], flagged: Optional[Mapping[int, list]] = None) -> dict:
        """The sidecar's ``flower`` section: strategy, clients, per-round reply counts, the profiles flagged (per
        round: node, window, why), the shared-host note."""
        by_host: dict[str, list[int]] = {}
        for index, host in self.hosts.items():
            by_host.setdefault(host, []).append(index)
        shared = [clients for clients in by_host.values() if len(clients) > 1]
        return {"strategy": type(self.inner).__name__,
                "clients": {str(i): {"node_id": n, "host": self.hosts.get(i, "")} for n, i in self.clients.items()},
                "rounds": {str(r): counts for r, counts in sorted(rounds.items())},
                "flagged": {str(r): found for r, found in sorted((flagged or {}).items())},
                "notes": [SHARED_HOST_NOTE.format(clients=clients) for clients in shared]}

    def running(self):
        if self.monitor is None:
            raise EdgeprofError("ProfiledStrategy writes its report inside start(): call strategy.start(grid=..., "
                                "initial_arrays=..., num_rounds=...)")
        return self.monitor

    def _client(self, node_id: int, host: str) -> int:
        index = self.clients.setdefault(node_id, len(self.clients))
        if host:
            self.hosts[index] = host
        return index

    def client_row(self, server_round: int, msg: Message, profile: Mapping[str, Any], window: str, kind: str,
                   trace=None) -> None:
        host = profile.get("host")
        host = host if isinstance(host, str) and host else ""
        labels: dict[str, Any] = {"round": server_round, "client": self._client(msg.metadata.src_node_id, host)}
        if host:
            labels["host"] = host
        metrics = _metrics(msg)
        n = _count(metrics.get(getattr(self.inner, "weighted_by_key", "num-examples")))
        if n is not None:
            labels["n_samples"] = n
        loss = _finite(metrics.get("train_loss", metrics.get("train-loss")))
        if kind == "client" and loss is not None:
            labels["train_loss"] = loss
        self.running().record(window, profile, kind=kind, trace=trace, **labels)

    def server_window(self, server_round: int, replies: list[Message]):
        return self.running().window("aggregate_train", kind="server", round=server_round,
                                     n_participants=len(replies))

    def after_train(self, server_round: int, replies: list[Message]) -> None:
        """Nothing: the monitor wrote the server row as its window ended."""

    def after_evaluate(self, server_round: int, metrics) -> None:
        """Nothing: evaluation replies are rows of their own."""


class RunRows:
    """Rows of edgeprof's own federation, written into the run the ServerApp opened (``ctx``): client rows with
    the partition id and the algorithm's columns, a ``server`` row per round, ``eval`` rows."""

    def __init__(self, ctx, strategy) -> None:
        self.ctx = ctx
        self.inner = strategy
        self._win = None

    @contextlib.contextmanager
    def run(self, reporter: ProfiledStrategy) -> Iterator[None]:
        yield  # the ServerApp opened the run

    def running(self) -> None:
        """Always: the run is open before the reporter exists."""

    def client_row(self, server_round: int, msg: Message, profile: Mapping[str, Any], window: str, kind: str,
                   trace=None) -> None:
        from edgeprof.flower.strategy import METRICS_KEY, num_examples_key
        from edgeprof.report.schema import _fmt, format_cells
        from edgeprof.session.run import base_row

        metrics = msg.content[METRICS_KEY] if METRICS_KEY in msg.content else MetricRecord()
        pid = self.inner.directory.partition_of(msg.metadata.src_node_id)
        loss = _finite(metrics.get("train-loss"))
        data = self.inner.directory.nodes[pid].data if pid is not None else {}
        row = base_row(self.ctx, self.inner.cfg, server_round, kind, client=pid,
                       dataset=data.get("dataset") or self.inner.cfg.dataset,
                       n_samples=_count(metrics.get(num_examples_key(metrics))) or None,
                       n_participants=len(self.inner.sampled.get(server_round, ())),
                       train_loss=None if loss is None else _fmt(loss))
        row = {k: "" if v is None else str(v) for k, v in row.items()}
        row.update(format_cells(profile, set(self.ctx.writer.columns)))  # checked_profile took out the row's names
        self.ctx.write(row, trace, window)

    @contextlib.contextmanager
    def server_window(self, server_round: int, replies: list[Message]) -> Iterator[None]:
        with self.ctx.profiler.window("server") as win:
            yield
        self._win = win

    def after_train(self, server_round: int, replies: list[Message]) -> None:
        """The round's ``server`` row; under the ``paper`` protocol, its ``eval`` row."""
        from edgeprof.session.run import base_row

        inner, cfg = self.inner, self.inner.cfg
        accepted = inner.accepted.get(server_round, [])
        n = sum(inner.directory.nodes[p].n_train for p in accepted)
        self.ctx.record(self._win, base_row(self.ctx, cfg, server_round, "server",
                                            n_participants=len(inner.sampled.get(server_round, ())), n_samples=n))
        if cfg.evaluate and cfg.eval_protocol == "paper":
            self._eval_row(server_round, inner.paper_score(server_round, replies))

    def after_evaluate(self, server_round: int, metrics) -> None:
        if metrics is not None:
            self._eval_row(server_round, (float(metrics["train-loss"]), float(metrics["test-accuracy"])))

    def _eval_row(self, server_round: int, score) -> None:
        """An ``eval`` row (the protocol's loss and accuracy), as the in-process loop writes it."""
        from edgeprof.rounds.evaluation import accuracy_cell
        from edgeprof.session.run import base_row

        if score is None:
            return
        loss, accuracy = score
        cfg = self.inner.cfg
        self.ctx.write(base_row(self.ctx, cfg, server_round, "eval", train_loss=f"{loss:.6g}",
                                test_accuracy=accuracy_cell(accuracy),
                                eval_protocol=cfg.eval_protocol,
                                n_participants=len(self.inner.sampled.get(server_round, ()))))

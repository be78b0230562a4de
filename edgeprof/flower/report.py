"""One edgeprof report for a whole Flower federation, written by the server.

:class:`ReportingStrategy` wraps any strategy (it adds reporting, it does not subclass an algorithm):
for every training reply that carries the profile of :mod:`edgeprof.flower.mod` it writes that
client's row - with the ``device`` the client ran on - and it times the wrapped strategy's
aggregation in a server-side profiler window, written as the round's ``server`` row. Rows are flushed
as they are written, so a federation that stops keeps every finished round; a client that never
replies simply has no row for that round. The CSV has the schema of ``edgeprof measure``, so
``edgeprof summary`` and the dashboard read it unchanged.
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from edgeprof.flower.energy import read_profile
from edgeprof.flower.strategy import METRICS_KEY, EdgeprofStrategy, num_examples_key
from edgeprof.report.schema import _fmt, format_cells
from edgeprof.report.session import RunContext, base_row

log = logging.getLogger("edgeprof.flower")

def profile_cells(msg: Message, columns: Iterable[str]) -> Optional[dict[str, str]]:
    """The report cells of a reply's profile (:func:`~edgeprof.flower.energy.read_profile`: the one wire format,
    or the older one), only columns the report has; None when the reply carries no profile."""
    profile = read_profile(msg)
    return None if profile is None else format_cells(profile, set(columns))


class ReportingStrategy(Strategy):
    """Wraps an :class:`EdgeprofStrategy`; writes client rows and a server row every round."""

    def __init__(self, inner: EdgeprofStrategy, ctx: RunContext) -> None:
        self.inner = inner
        self.ctx = ctx
        self.cfg = inner.cfg

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        return self.inner.configure_train(server_round, arrays, config, grid)

    def _client_row(self, server_round: int, msg: Message) -> dict | None:
        cells = None if msg.has_error() else profile_cells(msg, self.ctx.writer.columns)
        if cells is None:
            return None
        metrics = msg.content[METRICS_KEY] if METRICS_KEY in msg.content else MetricRecord()
        pid = self.inner.directory.partition_of(msg.metadata.src_node_id)
        row = base_row(self.ctx, self.cfg, server_round, "client", client=pid,
                       n_samples=int(metrics.get(num_examples_key(metrics), 0)) or None,
                       n_participants=len(self.inner.sampled.get(server_round, ())),
                       train_loss=_fmt(float(metrics["train-loss"])) if "train-loss" in metrics else None)
        row = {k: "" if v is None else str(v) for k, v in row.items()}
        row.update({k: v for k, v in cells.items() if k != "device" or v})
        return row

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        for msg in replies:
            try:
                row = self._client_row(server_round, msg)
            except (TypeError, ValueError, KeyError) as err:
                log.warning("round %d: unreadable profile from node %d: %s", server_round,
                            msg.metadata.src_node_id, err)
                continue
            if row is not None:
                self.ctx.writer.write(row)
        with self.ctx.profiler.window("server") as win:
            result = self.inner.aggregate_train(server_round, replies)
        accepted = self.inner.accepted.get(server_round, [])
        n = sum(self.inner.directory.nodes[p].n_train for p in accepted)
        self.ctx.record(win, base_row(self.ctx, self.cfg, server_round, "server",
                                      n_participants=len(self.inner.sampled.get(server_round, ())),
                                      n_samples=n))
        if self.cfg.evaluate and self.cfg.eval_protocol == "paper":
            self._eval_row(server_round, self.inner.paper_score(server_round, replies))
        return result

    def _eval_row(self, server_round: int, score) -> None:
        """An ``eval`` row (the protocol's loss and accuracy), as the in-process loop writes it."""
        if score is None:
            return
        loss, accuracy = score
        self.ctx.writer.write(base_row(self.ctx, self.cfg, server_round, "eval", train_loss=f"{loss:.6g}",
                                       test_accuracy=f"{accuracy:.6g}", eval_protocol=self.cfg.eval_protocol,
                                       n_participants=len(self.inner.sampled.get(server_round, ()))))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]):
        metrics = self.inner.aggregate_evaluate(server_round, replies)
        if metrics is not None:
            self._eval_row(server_round, (float(metrics["train-loss"]), float(metrics["test-accuracy"])))
        return metrics

    def summary(self) -> None:
        self.inner.summary()

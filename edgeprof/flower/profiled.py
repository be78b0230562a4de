"""One edgeprof report for a Flower federation whose ClientApps carry :func:`~edgeprof.flower.energy.energy_mod`.

The server side of a user's own Flower app, with one of Flower's stock strategies, in one more line::

    from edgeprof.flower import ProfiledStrategy

    strategy = ProfiledStrategy(<a stock strategy>(fraction_evaluate=0.5), out="profiles", name="quickstart")
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=3)

:class:`ProfiledStrategy` wraps a Message-API strategy; it adds reporting, it subclasses no algorithm. Its
``start`` is Flower's own round loop (:meth:`flwr.serverapp.strategy.Strategy.start`) inside an
:func:`edgeprof.monitor` run, which writes ``<out>/<run id>.csv`` and its sidecar. In every round:

* each training reply that carries the mod's profile becomes one row of kind ``client`` (window ``train``)
  and each evaluation reply one of kind ``eval`` (window ``evaluate``), with ``round``, ``client`` (a small index
  in the order the nodes first replied; the sidecar maps it to the node id and device), ``device``,
  ``n_samples`` (the strategy's ``weighted_by_key``, ``num-examples`` by default) and, for training,
  ``train_loss`` (the reply's ``train_loss`` or ``train-loss`` metric); the measured cells are the client's
  own, methods included;
* the profile is then taken out of the reply (:func:`~edgeprof.flower.energy.take_profile`), so the
  wrapped strategy aggregates exactly what it would have without edgeprof: its result is unchanged;
* the wrapped strategy's ``aggregate_train`` runs in a window of this machine's meters, written as the round's
  ``server`` row.

The ``algo`` column is the wrapped strategy's class name (a label ``algo=`` overrides it), so ``edgeprof
summary`` shows a median client round and server step per strategy. The sidecar's ``flower`` section holds the
clients and, per round, how many replies came, were profiled, had no profile, or were errors.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Mapping, Optional

from flwr.app import Message
from flwr.serverapp.strategy import Strategy

from edgeprof.errors import EdgeprofError
from edgeprof.flower.energy import take_profile

log = logging.getLogger("edgeprof.flower")

SHARED_DEVICE_NOTE = ("clients {clients} report the same device: each of their rows is that machine's energy "
                      "during the client's window, an attribution, not a separate device's measurement; clients "
                      "that ran at the same time are counted in each other's windows")


class ProfiledStrategy(Strategy):
    """Wraps ``strategy``; writes one report row per profiled reply and one server row per round.

    The keyword arguments are those of :func:`edgeprof.monitor` (``out``, ``name``, ``labels``, ``run_id``,
    the meter and carbon settings, ``profiler``) for the server's own report and meters. Any attribute the
    wrapper does not have is the wrapped strategy's.
    """

    def __init__(self, strategy: Strategy, **monitor_settings: Any) -> None:
        from edgeprof.measure.monitoring import monitor

        self.inner = strategy
        labels = {"algo": type(strategy).__name__, **dict(monitor_settings.pop("labels", None) or {})}
        monitor_settings.setdefault("name", "flower")
        self._monitor_settings = {**monitor_settings, "labels": labels}
        monitor(**self._monitor_settings)  # settings checked now, nothing opened until start()
        self.monitor = None
        #: the report, once start() has opened it
        self.csv_path = None
        self.clients: dict[int, int] = {}  # node id -> client index
        self.devices: dict[int, str] = {}  # client index -> device
        self.rounds: dict[int, dict[str, dict[str, int]]] = {}

    def __getattr__(self, name: str):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # --- the run --------------------------------------------------------------------------------------------
    def start(self, *args, **kwargs):
        """Flower's round loop (same arguments and result as the wrapped strategy's ``start``), reported."""
        from edgeprof.measure.monitoring import monitor

        with monitor(**self._monitor_settings) as mon:
            self.monitor, self.csv_path = mon, mon.csv_path
            try:
                return super().start(*args, **kwargs)
            finally:
                mon.sidecar_sections["flower"] = self.flower_section()
                self.monitor = None

    def flower_section(self) -> dict:
        """The sidecar's ``flower`` section: strategy, clients, per-round reply counts, the shared-device note."""
        by_device: dict[str, list[int]] = {}
        for index, device in self.devices.items():
            by_device.setdefault(device, []).append(index)
        shared = [clients for clients in by_device.values() if len(clients) > 1]
        return {"strategy": type(self.inner).__name__,
                "clients": {str(i): {"node_id": n, "device": self.devices.get(i, "")} for n, i in self.clients.items()},
                "rounds": {str(r): counts for r, counts in sorted(self.rounds.items())},
                "notes": [SHARED_DEVICE_NOTE.format(clients=clients) for clients in shared]}

    def _running(self):
        if self.monitor is None:
            raise EdgeprofError("ProfiledStrategy writes its report inside start(): call strategy.start(grid=..., "
                                "initial_arrays=..., num_rounds=...)")
        return self.monitor

    # --- the strategy ---------------------------------------------------------------------------------------
    def summary(self) -> None:
        self.inner.summary()

    def configure_train(self, server_round: int, arrays, config, grid) -> Iterable[Message]:
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        mon = self._running()
        replies = list(replies)
        self._record(server_round, replies, "train", "client")
        with mon.window("aggregate_train", kind="server", round=server_round, n_participants=len(replies)):
            return self.inner.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round: int, arrays, config, grid) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]):
        self._running()
        replies = list(replies)
        self._record(server_round, replies, "evaluate", "eval")
        return self.inner.aggregate_evaluate(server_round, replies)

    # --- rows -----------------------------------------------------------------------------------------------
    def _client(self, node_id: int, device: str) -> int:
        index = self.clients.setdefault(node_id, len(self.clients))
        if device:
            self.devices[index] = device
        return index

    def _record(self, server_round: int, replies: list[Message], window: str, kind: str) -> None:
        """Write a row for each profiled reply and take the profile out of every reply."""
        counts = self.rounds.setdefault(server_round, {}).setdefault(
            window, {"replies": 0, "profiled": 0, "unprofiled": 0, "errors": 0})
        for msg in replies:
            counts["replies"] += 1
            if msg.has_error():
                counts["errors"] += 1
                continue
            profile = take_profile(msg)
            if profile is None:
                counts["unprofiled"] += 1
                continue
            try:
                self._write(server_round, msg, profile, window, kind)
                counts["profiled"] += 1
            except (EdgeprofError, TypeError, ValueError) as err:
                counts["unprofiled"] += 1
                log.warning("round %d: unreadable profile from node %d: %s", server_round,
                            msg.metadata.src_node_id, err)

    def _write(self, server_round: int, msg: Message, profile: Mapping[str, Any], window: str, kind: str) -> None:
        device = profile.get("device")
        device = device if isinstance(device, str) and device else ""
        labels: dict[str, Any] = {"round": server_round, "client": self._client(msg.metadata.src_node_id, device)}
        if device:
            labels["device"] = device
        metrics = _metrics(msg)
        n = metrics.get(getattr(self.inner, "weighted_by_key", "num-examples"))
        if isinstance(n, (int, float)) and not isinstance(n, bool) and n == int(n) and n >= 0:
            labels["n_samples"] = int(n)
        loss = metrics.get("train_loss", metrics.get("train-loss"))
        if kind == "client" and isinstance(loss, (int, float)) and not isinstance(loss, bool) and math.isfinite(loss):
            labels["train_loss"] = float(loss)
        self._running().record(window, profile, kind=kind, **labels)


def _metrics(msg: Message) -> Mapping[str, Any]:
    """The reply's MetricRecord when it has exactly one (as stock strategies require), else nothing."""
    records = msg.content.metric_records
    return next(iter(records.values())) if len(records) == 1 else {}

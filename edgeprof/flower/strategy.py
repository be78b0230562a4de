"""The Flower strategy (Message API, flwr >= 1.20): the server-side driver of the algorithm contract.

Every algorithm of :data:`edgeprof.algorithms.ALGORITHMS` runs on Flower through one strategy that names
no algorithm. :class:`EdgeprofStrategy` samples the round's clients I_t with exactly the random sequence
of the in-process loop (:func:`edgeprof.algorithms.participants.sample_participants` on ``participant_rng``), maps
their partition ids to Flower node ids through a :class:`Directory`, sends one TRAIN message per sampled
client (with ``scale`` = I/r and ``num-outputs`` = max_i K_i in its ConfigRecord), rejects any reply that
is malformed (missing records, wrong number or shape of arrays, non-float or non-finite values, a
partition id that is not the sending node's, a sample count other than the node's roll-call N_i, a loss that is
not finite and >= 0: :mod:`edgeprof.flower.node_checks`) with a logged reason, and hands the valid replies, as
:class:`~edgeprof.algorithms.contract.Reply` objects with alpha_i from the directory, to the algorithm's
server program: the very function the in-process driver calls.

Missing and rejected clients. The server program sees only the valid replies; what a missing one means
follows from the algorithm's declared kind of server step (``AlgorithmSpec.server_kind``, recorded in the
sidecar): an averaging server step averages the valid replies by N_i among themselves, as the in-process
loop would had the other clients not been sampled; a gradient server step (Section 3.2.1 of the paper that
defines it: "missing clients' gradients can be set to zero") sums over the clients that replied, each with its
own alpha_i, while the scale stays I/r with r the number the round *sampled* (``cfg.sampled_per_round``),
never the number that replied. That estimate stays unbiased only if failures are independent of the
gradients; a device that always fails shrinks the effective step of theta by its alpha_i.

How alpha_i = N_i / sum_j N_j is formed when the server does not know the data sizes in advance:
before round 1 the server asks every node for its partition id and N_i (a QUERY message) and waits up
to ``node-wait`` seconds for every partition to have a node. A roll-call answer whose values fail
:func:`~edgeprof.flower.node_checks.read_node_info`, that names a partition another node serves, or that
``total-samples`` cannot hold (:meth:`Directory.enforce_total`) leaves its node out of the run, logged and
recorded. Every training reply reports N_i again; one that differs from the roll call's is rejected (a changed
N_i would change every other client's alpha). The denominator is ``total-samples``
from the run config when given (the exact sum_j N_j over all I clients, equation (1)), otherwise the
sum over the clients known so far. When every client answered the query (the normal case, and the
tests) this is exactly the paper's alpha_i. When some client never showed up, the sum over known
clients is too small: every alpha_i and so the step of theta is inflated by sum_all / sum_known, and
the objective silently becomes the weighted loss of the known clients only. Set ``total-samples`` to
keep alpha_i exact.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from edgeprof.algorithms import ALGORITHMS
from edgeprof.config import RunConfig
from edgeprof.algorithms.participants import participant_rng, sample_participants
from edgeprof.flower.node_checks import (METRICS_KEY, NUM_EXAMPLES, OLD_NUM_EXAMPLES, NodeInfo,  # noqa: F401
                                         NodeLimits, RejectedReply, metrics_of, number, num_examples_key,
                                         read_evaluation, whole_number)

log = logging.getLogger("edgeprof.flower")

ARRAYS_KEY = "arrays"
CONFIG_KEY = "config"


class Directory:
    """Partition id <-> node id, the roll call's N_i of every partition (alpha_i's numerators), and the nodes
    left out with the reason (``refused``: node id, reason)."""

    def __init__(self, num_partitions: int, total_samples: int = 0) -> None:
        self.num_partitions = num_partitions
        self.total_samples = total_samples
        self.nodes: dict[int, NodeInfo] = {}  # by partition id
        self.refused: list[tuple[int, str]] = []

    def refuse(self, node_id: int, reason: str) -> None:
        """Leave a node out of the run: one logged line, recorded for the sidecar."""
        log.warning("node %d left out of the federation: %s", node_id, reason)
        self.refused.append((node_id, reason))

    def add(self, info: NodeInfo) -> bool:
        """Register a node; False (and the node refused) for a partition out of range or already taken."""
        if not 0 <= info.partition_id < self.num_partitions:
            self.refuse(info.node_id, f"partition {info.partition_id} outside 0..{self.num_partitions - 1}")
            return False
        known = self.nodes.get(info.partition_id)
        if known is not None and known.node_id != info.node_id:
            self.refuse(info.node_id, f"partition {info.partition_id} is already served by node {known.node_id}")
            return False
        self.nodes[info.partition_id] = info
        return True

    def enforce_total(self) -> None:
        """With ``total-samples``: while the nodes' N_i sum above it, leave out the largest claim (the highest
        partition id among equals), so what is kept does not depend on the order the answers came in."""
        while self.total_samples and sum(i.n_train for i in self.nodes.values()) > self.total_samples:
            claimed = sum(i.n_train for i in self.nodes.values())
            pid, info = max(self.nodes.items(), key=lambda kv: (kv[1].n_train, kv[0]))
            del self.nodes[pid]
            self.refuse(info.node_id, f"the nodes' num-examples sum to {claimed}, above total-samples "
                                      f"{self.total_samples}; its claim ({info.n_train}, partition {pid}) is the largest")

    def node_of(self, partition_id: int) -> int | None:
        info = self.nodes.get(partition_id)
        return None if info is None else info.node_id

    def partition_of(self, node_id: int) -> int | None:
        return next((p for p, i in self.nodes.items() if i.node_id == node_id), None)

    @property
    def total(self) -> float:
        """sum_j N_j: the configured total, else the sum over the known clients."""
        return float(self.total_samples or sum(i.n_train for i in self.nodes.values()))

    def alpha(self, partition_id: int) -> float:
        return self.nodes[partition_id].n_train / self.total

    @property
    def num_outputs(self) -> int:
        """max_i K_i over the known clients: the shared head's outputs of the baselines."""
        return max((i.num_classes for i in self.nodes.values()), default=0)

    def describe(self) -> dict:
        return {"total_samples": self.total, "total_source": "total-samples (configured)" if self.total_samples
                else "sum over the clients that answered", "missing_partitions":
                [p for p in range(self.num_partitions) if p not in self.nodes],
                "nodes": {str(p): {"node_id": i.node_id, "n_train": i.n_train, "host": i.host,
                                   **({"data": i.data} if i.data else {})}
                          for p, i in sorted(self.nodes.items())},
                "refused": [{"node_id": n, "reason": why} for n, why in self.refused]}


@dataclass
class ClientReply:
    """A validated training reply."""

    partition_id: int
    node_id: int
    n_samples: int
    loss: float
    arrays: list[np.ndarray] = field(repr=False)


def check_arrays(record: object, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """The record's arrays if they are float arrays of ``shapes`` with finite values; RejectedReply if not."""
    if not isinstance(record, ArrayRecord):
        raise RejectedReply(f"no ArrayRecord under {ARRAYS_KEY!r}")
    try:
        arrays = record.to_numpy_ndarrays()
    except Exception as err:  # noqa: BLE001 - any undecodable payload is a rejection, not a crash
        raise RejectedReply(f"arrays cannot be decoded: {err}") from err
    if len(arrays) != len(shapes):
        raise RejectedReply(f"{len(arrays)} arrays, expected {len(shapes)}")
    for i, (a, shape) in enumerate(zip(arrays, shapes)):
        if tuple(a.shape) != tuple(shape):
            raise RejectedReply(f"array {i} has shape {tuple(a.shape)}, expected {tuple(shape)}")
        if not np.issubdtype(a.dtype, np.floating):
            raise RejectedReply(f"array {i} has dtype {a.dtype}, expected a float type")
        if not np.all(np.isfinite(a)):
            raise RejectedReply(f"array {i} has NaN or infinite values")
    return [np.asarray(a, dtype=np.float32) for a in arrays]


def parse_reply(msg: Message, shapes: Sequence[tuple[int, ...]], directory: Directory) -> ClientReply:
    """Validate one training reply against the global model's shapes, the node's partition and its roll-call
    N_i (the only N_i its alpha uses); a ``train-loss``, when given, must be finite and >= 0."""
    metrics = metrics_of(msg)
    node = msg.metadata.src_node_id
    pid = whole_number(metrics, "partition-id", 0, directory.num_partitions - 1,
                       f"a partition id in 0..{directory.num_partitions - 1}")
    if directory.node_of(pid) != node:
        raise RejectedReply(f"node {node} replied for partition {pid}, which is node {directory.node_of(pid)}'s")
    known = directory.nodes[pid].n_train
    n = whole_number(metrics, num_examples_key(metrics), known, known, f"{known}, this node's roll-call N_i")
    arrays = check_arrays(msg.content.get(ARRAYS_KEY) if ARRAYS_KEY in msg.content else None, shapes)
    loss = number(metrics, "train-loss", 0.0, math.inf, "a finite loss >= 0") if "train-loss" in metrics \
        else float("nan")
    return ClientReply(pid, node, n, loss, arrays)


class EdgeprofStrategy(Strategy):
    """Sampling as in the in-process loop, one TRAIN message per sampled client, validated replies, and the
    registered algorithm's server program over them.

    ``sampled``, ``accepted`` and ``rejected`` record, per round, the partitions sampled, those passed to
    the server program, and (partition or node, reason) of those rejected. The global state (arrays and
    server optimizer) is built on first use, once the roll call knows max_i K_i.
    """

    def __init__(self, cfg: RunConfig, directory: Directory) -> None:
        self.cfg = cfg
        self.spec = ALGORITHMS[cfg.algo]
        self.directory = directory
        self.limits = NodeLimits.of(cfg, directory.total_samples)
        self.rng = participant_rng(cfg)
        self.scale = cfg.clients / cfg.sampled_per_round  # I / r, r as sampled (never as replied)
        self.theta: list[np.ndarray] = []
        self.sampled: dict[int, list[int]] = {}
        self.accepted: dict[int, list[int]] = {}
        self.rejected: dict[int, list[tuple[str, str]]] = {}
        self.evaluated: dict[int, list] = {}
        self._runtime = None
        self._optimizer = None

    @property
    def missing_replies(self) -> str:
        """What a sampled client's missing or rejected reply means for this algorithm's server step."""
        return self.spec.missing_replies

    def runtime(self):
        if self._runtime is None:
            self._runtime = server_runtime(self.cfg, self.directory.num_outputs)
            self._optimizer = self.spec.new_server_state(self._runtime, self.cfg.rho).optimizer
        return self._runtime

    def round_config(self, server_round: int) -> dict:
        """What every TRAIN message of a round carries in its ConfigRecord."""
        return {"server-round": server_round, "scale": float(self.scale),
                "num-outputs": self.directory.num_outputs}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self.theta = arrays.to_numpy_ndarrays()
        sampled = sample_participants(self.rng, self.cfg.clients, self.cfg.participation,
                                      self.cfg.participation_mode, self.cfg.participant_rounding)
        self.sampled[server_round] = sampled
        messages = []
        for pid in sampled:
            node = self.directory.node_of(pid)
            if node is None:
                log.warning("round %d: partition %d sampled but no node serves it (gradient counts as 0)",
                            server_round, pid)
                continue
            record = RecordDict({ARRAYS_KEY: arrays, CONFIG_KEY: ConfigRecord(
                {**dict(config), **self.round_config(server_round), "partition-id": pid})})
            messages.append(Message(content=record, dst_node_id=node, message_type=MessageType.TRAIN,
                                    group_id=str(server_round)))
        log.info("round %d: sampled partitions %s, %d messages", server_round, sampled, len(messages))
        return messages

    def validate(self, server_round: int, replies: Iterable[Message]) -> list[ClientReply]:
        """The replies that pass :func:`parse_reply`; every other one is logged and recorded."""
        shapes = [a.shape for a in self.theta]
        good: list[ClientReply] = []
        self.rejected[server_round] = []
        for msg in replies:
            try:
                reply = parse_reply(msg, shapes, self.directory)
            except RejectedReply as err:
                self.reject(server_round, f"node {msg.metadata.src_node_id}", str(err))
                continue
            if reply.partition_id not in self.sampled.get(server_round, ()) or \
                    reply.partition_id in [g.partition_id for g in good]:
                self.reject(server_round, f"node {reply.node_id}",
                            f"partition {reply.partition_id} was not sampled or replied twice")
                continue
            good.append(reply)
        good.sort(key=lambda g: g.partition_id)  # the in-process loop's order, so sums round alike
        self.accepted[server_round] = [g.partition_id for g in good]
        return good

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        good = self.validate(server_round, replies)
        metrics = MetricRecord({"replies-accepted": len(good), "replies-rejected":
                                len(self.rejected[server_round]), "sampled": len(self.sampled[server_round])})
        if not good:
            log.warning("round %d: no valid reply; the global model is unchanged", server_round)
            return None, metrics
        losses = [g.loss for g in good if math.isfinite(g.loss)]
        if losses:
            metrics["train-loss"] = float(np.average(losses, weights=[g.n_samples for g in good
                                                                      if math.isfinite(g.loss)]))
        return ArrayRecord(self.aggregate(self.theta, good)), metrics

    def aggregate(self, theta: list[np.ndarray], replies: Sequence[ClientReply]) -> list[np.ndarray]:
        """The algorithm's server program on the current arrays and the round's valid replies (at least one)."""
        from edgeprof.algorithms.contract import Reply, RoundSettings, ServerState

        rt = self.runtime()
        state = ServerState(theta, self._optimizer)
        settings = RoundSettings.of(self.cfg, scale=self.scale)
        new = self.spec.server(rt, state, [Reply(r.partition_id, r.n_samples, self.directory.alpha(r.partition_id),
                                                 r.arrays) for r in replies], settings)
        self._optimizer = new.optimizer
        return new.arrays

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """With ``evaluate`` and the ``global`` protocol: one EVALUATE message to every known client with the
        new global arrays (the ``paper`` protocol is scored inside the training replies)."""
        if not (self.cfg.evaluate and self.cfg.eval_protocol == "global"):
            return []
        return [Message(content=RecordDict({ARRAYS_KEY: arrays, CONFIG_KEY: ConfigRecord(
                    {**dict(config), **self.round_config(server_round), "partition-id": pid})}),
                        dst_node_id=info.node_id, message_type=MessageType.EVALUATE, group_id=str(server_round))
                for pid, info in sorted(self.directory.nodes.items())]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The ``global`` protocol over the clients that answered (:func:`edgeprof.rounds.evaluation.global_score`)."""
        from edgeprof.rounds.evaluation import global_score

        results = self.scored(server_round, replies)
        self.evaluated[server_round] = results
        if not results:
            return None
        loss, accuracy = global_score(results)
        return MetricRecord({"train-loss": loss, "test-accuracy": accuracy, "clients": len(results)})

    def paper_score(self, server_round: int, replies: Sequence[Message]) -> tuple[float, float] | None:
        """The ``paper`` protocol over the round's accepted training replies (their local evaluation)."""
        from edgeprof.rounds.evaluation import paper_score

        accepted = {self.directory.node_of(p) for p in self.accepted.get(server_round, ())}
        results = self.scored(server_round, [m for m in replies if m.metadata.src_node_id in accepted])
        return paper_score(results) if results else None

    def scored(self, server_round: int, replies: Iterable[Message]) -> list:
        """The EvalResults of ``replies``; every reply whose evaluation fails :func:`eval_result` is logged and
        recorded among the round's rejections."""
        results = []
        for msg in replies:
            try:
                results.append(eval_result(msg, self.directory, self.limits))
            except RejectedReply as err:
                self.reject(server_round, f"node {msg.metadata.src_node_id}", f"evaluation: {err}")
        return results

    def reject(self, server_round: int, who: str, reason: str) -> None:
        """Leave a reply out of the round: one logged line, recorded for the sidecar."""
        log.warning("round %d: rejected reply from %s: %s", server_round, who, reason)
        self.rejected.setdefault(server_round, []).append((who, reason))

    def summary(self) -> None:
        log.info("%s (%s): %d clients, participation %s (%s), scale I/r = %.6g", type(self).__name__,
                 self.cfg.algo, self.cfg.clients, self.cfg.participation, self.cfg.participation_mode, self.scale)


#: the metrics of a client's evaluation (an EVALUATE reply, or the local evaluation in a TRAIN reply)
EVAL_KEYS = ("eval-train-loss", "eval-test-accuracy", "eval-n-train", "eval-n-test")


def eval_result(msg: Message, directory: Directory, limits: NodeLimits):
    """The EvalResult a reply carries (:func:`~edgeprof.flower.node_checks.read_evaluation`); RejectedReply for
    an error reply, missing or out-of-range values, or a partition that is not the node's."""
    from edgeprof.algorithms.contract import EvalResult

    metrics = metrics_of(msg)
    pid = whole_number(metrics, "partition-id", 0, directory.num_partitions - 1,
                       f"a partition id in 0..{directory.num_partitions - 1}")
    if directory.node_of(pid) != msg.metadata.src_node_id:
        raise RejectedReply(f"node {msg.metadata.src_node_id} evaluated partition {pid}, which is node "
                            f"{directory.node_of(pid)}'s")
    return EvalResult(pid, *read_evaluation(metrics, directory.nodes[pid].n_train, limits))


def make_strategy(cfg: RunConfig, directory: Directory) -> EdgeprofStrategy:
    """The strategy of ``cfg.algo`` (any registered algorithm)."""
    return EdgeprofStrategy(cfg, directory)


def server_threads(cfg: RunConfig) -> Optional[int]:
    """The intra-op threads of the server's step: the run's ``threads`` (the devices' default), at most the server
    machine's cores (a run config is written for its devices; a server with fewer cores runs its step on all of
    them, which :func:`~edgeprof.flower.server_app.run_server` logs, rather than refuse the run)."""
    from edgeprof.host import max_threads

    return cfg.threads if cfg.threads is None else min(cfg.threads, max_threads())


def server_runtime(cfg: RunConfig, num_outputs: int):
    """The server's runtime: the seeded backbone of the in-process run, max_i K_i outputs, on
    :func:`server_threads`."""
    from edgeprof.rounds.runtime import build_runtime

    return build_runtime(replace(cfg, threads=server_threads(cfg)), num_outputs)

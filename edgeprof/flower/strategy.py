"""Flower strategies (Message API, flwr >= 1.20) for edgeprof's algorithms.

Every algorithm of :data:`edgeprof.algorithms.ALGORITHMS` runs on Flower.
:class:`EdgeprofStrategy` does what they all need: it samples the round's clients I_t with exactly the
random sequence of the in-process loop (:func:`edgeprof.simulate.sample_participants` on
``simulate.participant_rng``), maps their partition ids to Flower node ids through a :class:`Directory`,
sends one TRAIN message per sampled client (with ``scale`` = I/r and ``num-outputs`` = max_i K_i in its
ConfigRecord), and rejects any reply that is malformed (missing records, wrong number or shape of
arrays, non-float or non-finite values, a partition id that is not the sending node's) with a logged
reason. Each algorithm overrides one method, :meth:`EdgeprofStrategy.aggregate`, which calls the very
server step the in-process class calls:

* :class:`PflegoStrategy` - PFLEGO (Georgatos et al., equation (4)): the replies carry the gradients
  g_i = grad_theta l_i, not weights; theta_t = opt(theta_{t-1}, (I/r) sum_{i in I_t} alpha_i g_i)
  through :func:`edgeprof.algorithms.pflego.server_step` with the server optimizer (Adam or SGD, step rho).
* :class:`FedAvgStrategy` - FedAvg (McMahan et al. 2017), FedProx (Li et al. 2020) and Ditto (Li et al.
  2021): the global model is the whole network (backbone plus the shared head of max_i K_i outputs,
  :attr:`EdgeprofStrategy.global_head`) and the server takes the N_i-weighted average of the replies'
  weights through :func:`edgeprof.algorithms.fedavg.server_step`; Ditto's personal models stay home.
* :class:`PersonalHeadStrategy` - FedPer, FedRep, FedBABU, FedSim and FedAlt: the global model is the
  backbone only; the N_i-weighted average of the replies' backbones through
  :func:`edgeprof.algorithms.fedper.server_step` (personal heads, or FedBABU's fixed head, stay home).
* :class:`FedReconStrategy` - FedRecon (Singhal et al. 2021): the backbone by FedOpt, theta_t =
  opt(theta, theta - sum_i (N_i / sum_j N_j) theta_i) through
  :func:`edgeprof.algorithms.fedrecon.server_step` (Adam or SGD, step rho).

Missing and rejected clients. The averaging strategies (FedAvg, FedProx, Ditto, the personal-head
ones, FedRecon) average the valid replies by N_i among themselves, as the in-process loop would had the
other clients not been sampled. For PFLEGO, Section 3.2.1 of the paper: "missing clients' gradients can
be set to zero". A sampled client that does not reply within the round timeout (crashed, unplugged) or
whose reply is rejected contributes g_i = 0: the sum runs over the clients that replied, each with its
own alpha_i, and the scale stays I/r with r the number the round *sampled* (``cfg.sampled_per_round``),
never the number that replied. The estimate stays unbiased only if failures are independent of the
gradients; a device that always fails shrinks the effective step of theta by its alpha_i.

How alpha_i = N_i / sum_j N_j is formed when the server does not know the data sizes in advance:
before round 1 the server asks every node for its partition id and N_i (a QUERY message) and waits up
to ``node-wait`` seconds for every partition to have a node; every training reply reports N_i again
and the :class:`Directory` keeps the latest value per partition. The denominator is ``total-samples``
from the run config when given (the exact sum_j N_j over all I clients, equation (1)), otherwise the
sum over the clients known so far. When every client answered the query (the normal case, and the
tests) this is exactly the paper's alpha_i. When some client never showed up, the sum over known
clients is too small: every alpha_i and so the step of theta is inflated by sum_all / sum_known, and
the objective silently becomes the weighted loss of the known clients only. Set ``total-samples`` to
keep alpha_i exact (a late client then contributes its true share when it first replies).
"""

from __future__ import annotations

import logging
import math
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from edgeprof.algorithms import aggregation, fedavg, fedper, fedrecon, pflego
from edgeprof.config import RunConfig
from edgeprof.simulate import input_shape, participant_rng, sample_participants

log = logging.getLogger("edgeprof.flower")

ARRAYS_KEY = "arrays"
CONFIG_KEY = "config"
METRICS_KEY = "metrics"


@dataclass
class NodeInfo:
    """What a node said about itself: its partition, data size, classes and device name."""

    partition_id: int
    node_id: int
    n_train: int
    num_classes: int = 0
    device: str = ""


class Directory:
    """Partition id <-> node id, and the latest known N_i of every partition (alpha_i's numerators)."""

    def __init__(self, num_partitions: int, total_samples: int = 0) -> None:
        self.num_partitions = num_partitions
        self.total_samples = total_samples
        self.nodes: dict[int, NodeInfo] = {}  # by partition id

    def add(self, info: NodeInfo) -> bool:
        """Register a node; False (and a warning) for a partition out of range or already taken."""
        if not 0 <= info.partition_id < self.num_partitions:
            log.warning("node %d claims partition %d outside 0..%d; ignored", info.node_id, info.partition_id,
                        self.num_partitions - 1)
            return False
        known = self.nodes.get(info.partition_id)
        if known is not None and known.node_id != info.node_id:
            log.warning("partition %d already served by node %d; node %d ignored", info.partition_id,
                        known.node_id, info.node_id)
            return False
        self.nodes[info.partition_id] = info
        return True

    def node_of(self, partition_id: int) -> int | None:
        info = self.nodes.get(partition_id)
        return None if info is None else info.node_id

    def partition_of(self, node_id: int) -> int | None:
        return next((p for p, i in self.nodes.items() if i.node_id == node_id), None)

    def update_n(self, partition_id: int, n_train: int) -> None:
        self.nodes[partition_id].n_train = int(n_train)

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
                "nodes": {str(p): {"node_id": i.node_id, "n_train": i.n_train, "device": i.device}
                          for p, i in sorted(self.nodes.items())}}


class RejectedReply(ValueError):
    """A reply that is not averaged in; the message is the logged reason."""


@dataclass
class ClientReply:
    """A validated training reply."""

    partition_id: int
    node_id: int
    n_samples: int
    loss: float
    arrays: list[np.ndarray] = field(repr=False)


def _metric(metrics: MetricRecord, key: str) -> float:
    if key not in metrics:
        raise RejectedReply(f"metric {key!r} missing")
    value = metrics[key]
    if isinstance(value, list) or not math.isfinite(float(value)):
        raise RejectedReply(f"metric {key!r} is not a finite number: {value!r}")
    return float(value)


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
    """Validate one training reply against the global model's shapes and the node's partition."""
    if msg.has_error():
        raise RejectedReply(f"client error: {msg.error.reason}")
    content = msg.content
    node = msg.metadata.src_node_id
    metrics = content.get(METRICS_KEY) if METRICS_KEY in content else None
    if not isinstance(metrics, MetricRecord):
        raise RejectedReply(f"no MetricRecord under {METRICS_KEY!r}")
    pid = int(_metric(metrics, "partition-id"))
    if directory.node_of(pid) != node:
        raise RejectedReply(f"node {node} replied for partition {pid}, which is node {directory.node_of(pid)}'s")
    n = _metric(metrics, "n-samples")
    if n < 1 or n != int(n):
        raise RejectedReply(f"n-samples must be a positive integer, got {n}")
    arrays = check_arrays(content.get(ARRAYS_KEY) if ARRAYS_KEY in content else None, shapes)
    loss = float(metrics["train-loss"]) if "train-loss" in metrics else float("nan")
    return ClientReply(pid, node, int(n), loss, arrays)


class EdgeprofStrategy(Strategy):
    """Sampling as in the in-process loop, one TRAIN message per sampled client, validated replies.

    Subclasses implement :meth:`aggregate`. ``sampled``, ``accepted`` and ``rejected`` record, per round,
    the partitions sampled, those averaged in, and (partition or node, reason) of those rejected.
    """

    #: whether the global arrays are backbone *and* shared head (:func:`initial_arrays`), or the backbone only
    global_head = False
    #: what happens to a sampled client's missing or rejected reply (written to the sidecar)
    missing_replies = "left out: the N_i-weighted average runs over the valid replies"

    def __init__(self, cfg: RunConfig, directory: Directory) -> None:
        self.cfg = cfg
        self.directory = directory
        self.rng = participant_rng(cfg)
        self.scale = cfg.clients / cfg.sampled_per_round  # I / r, r as sampled (never as replied)
        self.theta: list[np.ndarray] = []
        self.sampled: dict[int, list[int]] = {}
        self.accepted: dict[int, list[int]] = {}
        self.rejected: dict[int, list[tuple[str, str]]] = {}

    def round_config(self, server_round: int) -> dict:
        """What every TRAIN message of a round carries in its ConfigRecord."""
        return {"server-round": server_round, "scale": float(self.scale),
                "num-outputs": self.directory.num_outputs}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self.theta = arrays.to_numpy_ndarrays()
        sampled = sample_participants(self.rng, self.cfg.clients, self.cfg.participation,
                                      self.cfg.participation_mode)
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
                who = f"node {msg.metadata.src_node_id}"
                log.warning("round %d: rejected reply from %s: %s", server_round, who, err)
                self.rejected[server_round].append((who, str(err)))
                continue
            if reply.partition_id not in self.sampled.get(server_round, ()) or \
                    reply.partition_id in [g.partition_id for g in good]:
                reason = f"partition {reply.partition_id} was not sampled or replied twice"
                log.warning("round %d: rejected reply: %s", server_round, reason)
                self.rejected[server_round].append((f"node {reply.node_id}", reason))
                continue
            self.directory.update_n(reply.partition_id, reply.n_samples)
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

    @abstractmethod
    def aggregate(self, theta: list[np.ndarray], replies: Sequence[ClientReply]) -> list[np.ndarray]:
        """The new global arrays from the current ones and the round's valid replies (at least one)."""

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        log.info("%s: %d clients, participation %s (%s), scale I/r = %.6g", type(self).__name__,
                 self.cfg.clients, self.cfg.participation, self.cfg.participation_mode, self.scale)


class OptimizerStrategy(EdgeprofStrategy):
    """A strategy whose server step feeds a server optimizer (``cfg.server_optimizer``, step ``cfg.rho``)."""

    def __init__(self, cfg: RunConfig, directory: Directory) -> None:
        super().__init__(cfg, directory)
        self.optimizer = aggregation.make_optimizer(cfg.server_optimizer, cfg.rho)


class PflegoStrategy(OptimizerStrategy):
    """PFLEGO's server: the replies are gradients of theta; equation (4) with the server optimizer."""

    missing_replies = "count as zero (PFLEGO Section 3.2.1): sum over the replies, scale I/r of the sampled r"

    def aggregate(self, theta, replies):
        alphas = [self.directory.alpha(r.partition_id) for r in replies]
        return pflego.server_step(theta, [r.arrays for r in replies], alphas, self.scale, self.optimizer)


class FedAvgStrategy(EdgeprofStrategy):
    """FedAvg's server (also FedProx's and Ditto's): the N_i-weighted average of the whole models."""

    global_head = True

    def aggregate(self, theta, replies):
        return fedavg.server_step([r.arrays for r in replies], [r.n_samples for r in replies])


class PersonalHeadStrategy(EdgeprofStrategy):
    """FedPer's server (also FedRep's, FedBABU's, FedSim's, FedAlt's): the N_i-weighted average of the backbones."""

    def aggregate(self, theta, replies):
        return fedper.server_step([r.arrays for r in replies], [r.n_samples for r in replies])


class FedReconStrategy(OptimizerStrategy):
    """FedRecon's server: the N_i-weighted mean of the theta_i as a pseudo-gradient for the server optimizer."""

    missing_replies = "left out: the pseudo-gradient averages the valid replies' theta_i by N_i"

    def aggregate(self, theta, replies):
        return fedrecon.server_step(theta, [r.arrays for r in replies], [r.n_samples for r in replies],
                                    self.optimizer)


#: the strategy of every algorithm in :data:`edgeprof.algorithms.ALGORITHMS`
STRATEGIES: dict[str, type[EdgeprofStrategy]] = {
    "pflego": PflegoStrategy, "fedavg": FedAvgStrategy, "fedprox": FedAvgStrategy, "ditto": FedAvgStrategy,
    "fedper": PersonalHeadStrategy, "fedrep": PersonalHeadStrategy, "fedbabu": PersonalHeadStrategy,
    "fedsim": PersonalHeadStrategy, "fedalt": PersonalHeadStrategy, "fedrecon": FedReconStrategy,
}


def make_strategy(cfg: RunConfig, directory: Directory) -> EdgeprofStrategy:
    """The strategy of ``cfg.algo``; ConfigError for a name with no Flower strategy."""
    from edgeprof.errors import ConfigError

    if cfg.algo not in STRATEGIES:
        raise ConfigError(f"{cfg.algo} does not run on Flower; choose one of: {', '.join(STRATEGIES)}")
    return STRATEGIES[cfg.algo](cfg, directory)


def initial_arrays(cfg: RunConfig, num_outputs: int) -> list[np.ndarray]:
    """The global model of round 0, built exactly as :func:`edgeprof.simulate.build_algorithm` does.

    The seeded backbone, followed by FedAvg's shared head of ``num_outputs`` (max_i K_i) outputs when the
    strategy's global model has one (FedAvg, FedProx, Ditto; Ditto's personal models start here too).
    """
    from edgeprof.nn.backbones import build_backbone, get_params

    backbone = build_backbone(cfg.backbone, input_shape(cfg), seed=cfg.seed)
    if cfg.algo in STRATEGIES and STRATEGIES[cfg.algo].global_head:
        return get_params(fedavg.BackboneWithHead(backbone, num_outputs, seed=cfg.seed))
    return get_params(backbone)

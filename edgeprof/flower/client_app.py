"""The edgeprof ClientApp: each SuperNode is one client of the in-process federation, on its own device.

A SuperNode started with ``--node-config "partition-id=<i> num-partitions=<I>"`` loads
``load_clients(cfg)[i]`` - the very partition ``edgeprof measure`` gives client i, since data loading
and partitioning depend only on the run config and its seed - and runs the algorithm's plain client
round (:func:`edgeprof.algorithms.pflego.client_round`, :func:`edgeprof.algorithms.fedavg.client_round`),
the same functions the in-process loop calls. PFLEGO's personal head W_i never leaves the device: it is
kept between rounds in Flower's node-local state, ``context.state["edgeprof.head"]`` (an ArrayRecord
that the SuperNode stores with the run's Context), and starts from
:func:`edgeprof.algorithms.pflego.initial_head` (seed, client id), as in the in-process run.

Handlers: ``query`` answers the server's roll call (partition id, N_i, K_i, device); ``train`` runs one
round and replies with the arrays (PFLEGO: grad_theta l_i; FedAvg: the new weights) and a MetricRecord
``metrics`` (partition-id, n-samples, train-loss). :mod:`edgeprof.flower.mod` profiles ``train``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError
from edgeprof.flower.config import from_run_config, node_overrides
from edgeprof.flower.mod import current_phase, device_name, make_profile_mod
from edgeprof.flower.strategy import ARRAYS_KEY, CONFIG_KEY, METRICS_KEY

HEAD_KEY = "edgeprof.head"


def node_cfg(context: Context, defaults: Optional[Mapping[str, Any]] = None) -> RunConfig:
    """The run settings of this node: the run config over ``defaults``, then the node's device settings."""
    cfg, _ = from_run_config(context.run_config, defaults)
    return node_overrides(cfg, context.node_config)


def partition_id(context: Context, cfg: RunConfig) -> int:
    """This node's client index; ConfigError if the node config is missing or disagrees with the run."""
    node = context.node_config
    if "partition-id" not in node:
        raise ConfigError("start the SuperNode with --node-config 'partition-id=<i> num-partitions=<I>'")
    pid = int(node["partition-id"])
    if "num-partitions" in node and int(node["num-partitions"]) != cfg.clients:
        raise ConfigError(f"node has num-partitions={node['num-partitions']} but the run has clients={cfg.clients}")
    if not 0 <= pid < cfg.clients:
        raise ConfigError(f"partition-id {pid} outside 0..{cfg.clients - 1}")
    return pid


@functools.lru_cache(maxsize=2)
def _clients(cfg: RunConfig):
    from edgeprof.simulate import load_clients

    return load_clients(cfg)


def load_client(cfg: RunConfig, pid: int):
    """Client ``pid`` of ``load_clients(cfg)`` (cached per process)."""
    return _clients(cfg)[pid]


@functools.lru_cache(maxsize=2)
def _backbone(name: str, seed: int, shape: tuple):
    from edgeprof.nn.backbones import build_backbone

    return build_backbone(name, shape, seed=seed)


def _module(cfg: RunConfig):
    from edgeprof.simulate import input_shape, set_threads

    set_threads(cfg.threads)
    return _backbone(cfg.backbone, cfg.seed, tuple(input_shape(cfg)))


def pflego_round(cfg: RunConfig, client, theta: list[np.ndarray], config, state: RecordDict):
    """PFLEGO's client round with the head from ``state``; returns (grad_theta, n, loss)."""
    from edgeprof.algorithms import pflego
    from edgeprof.nn.ort import FeatureRunner

    backbone = _module(cfg)
    if HEAD_KEY in state:
        head = state[HEAD_KEY].to_numpy_ndarrays()[0]
    else:
        head = pflego.initial_head(cfg.seed, client.client_id, client.num_classes, backbone.feature_dim)
    runner = FeatureRunner(backbone, threads=cfg.threads)
    res = pflego.client_round(lambda x: runner.features(x, theta),
                              lambda h, x, y: pflego.torch_joint_gradient(backbone, theta, h, x, y),
                              head, client.x_train, client.y_train, tau=cfg.tau, beta=cfg.beta, rho=cfg.rho,
                              scale=float(config["scale"]), phase=current_phase())
    state[HEAD_KEY] = ArrayRecord([res.head])
    return res.theta_grad, res.n_samples, res.loss


def fedavg_round(cfg: RunConfig, client, weights: list[np.ndarray], config, state: RecordDict):
    """FedAvg's client round on the shared model; returns (new weights, n, loss)."""
    from edgeprof.algorithms import fedavg

    model = fedavg.BackboneWithHead(_module(cfg), int(config["num-outputs"]), seed=cfg.seed)
    new, loss = fedavg.client_round(model, weights, client.x_train, client.y_train, tau=cfg.tau,
                                    beta=cfg.beta, phase=current_phase())
    return new, client.n_train, loss


ROUNDS: dict[str, Callable] = {"pflego": pflego_round, "fedavg": fedavg_round}


def make_client_app(defaults: Optional[Mapping[str, Any]] = None) -> ClientApp:
    """The ClientApp; ``defaults`` (a run config) fills keys the run config lacks (simulation)."""
    cfg_of = functools.partial(node_cfg, defaults=defaults)
    app = ClientApp(mods=[make_profile_mod(cfg_of)])

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        cfg = cfg_of(context)
        pid = partition_id(context, cfg)
        client = load_client(cfg, pid)
        info = MetricRecord({"partition-id": pid, "n-samples": client.n_train, "num-classes": client.num_classes})
        from flwr.app import ConfigRecord

        return Message(RecordDict({METRICS_KEY: info, "device": ConfigRecord(
            {"device": device_name(context.node_config)})}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        cfg = cfg_of(context)
        pid = partition_id(context, cfg)
        if cfg.algo not in ROUNDS:
            raise ConfigError(f"{cfg.algo} does not run on Flower yet")
        arrays = msg.content[ARRAYS_KEY].to_numpy_ndarrays()
        out, n, loss = ROUNDS[cfg.algo](cfg, load_client(cfg, pid), arrays, msg.content[CONFIG_KEY],
                                        context.state)
        metrics = MetricRecord({"partition-id": pid, "n-samples": int(n), "train-loss": float(loss)})
        return Message(RecordDict({ARRAYS_KEY: ArrayRecord(out), METRICS_KEY: metrics}), reply_to=msg)

    return app


app = make_client_app()

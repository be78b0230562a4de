"""The edgeprof ClientApp: each SuperNode is one client of the in-process federation, on its own device.

A SuperNode started with ``--node-config "partition-id=<i> num-partitions=<I>"`` loads
``load_clients(cfg)[i]`` - the very partition ``edgeprof measure`` gives client i, since data loading
and partitioning depend only on the run config and its seed - and runs the algorithm's plain client
round from :mod:`edgeprof.algorithms` (``pflego.client_round``, ``fedavg.client_round``,
``fedprox.client_round``, ``fedper.client_round``, ``fedrep.client_round``, ``fedbabu.client_round``,
``ditto.client_round``, ``fedrecon.client_round``, ``partial.local_sim`` / ``local_alt``), the same
functions the in-process loop calls, with the arguments the in-process class passes (:data:`ROUNDS`).

What is personal never leaves the device: it is kept between rounds in Flower's node-local state
``context.state`` (ArrayRecords that the SuperNode stores with the run's Context) and starts where the
in-process class starts it, so a client first sampled in round t starts from the same state as there:

* ``edgeprof.head``: PFLEGO's W_i (:func:`edgeprof.algorithms.pflego.initial_head`), or the [W_i, b_i]
  head of FedPer, FedRep, FedSim and FedAlt (:func:`edgeprof.algorithms.fedper.initial_head`);
* ``edgeprof.personal``: Ditto's personal model v_i, starting at the round-0 global model
  (:func:`edgeprof.flower.strategy.initial_arrays`), not at the global model of the client's first round.

FedRecon's clients are stateless (the head is reconstructed from its initial value every round) and
FedBABU's head is the fixed orthogonal head every client builds from the seed and ``num-outputs``.

Handlers: ``query`` answers the server's roll call (partition id, N_i, K_i, device); ``train`` runs one
round and replies with the arrays (PFLEGO: grad_theta l_i; FedRecon and the weight-averaging
algorithms: the new shared weights) and a MetricRecord ``metrics`` (partition-id, n-samples,
train-loss). :mod:`edgeprof.flower.mod` profiles ``train``.
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
from edgeprof.flower.strategy import ARRAYS_KEY, CONFIG_KEY, METRICS_KEY, initial_arrays

HEAD_KEY = "edgeprof.head"
PERSONAL_KEY = "edgeprof.personal"


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


def _whole_model(cfg: RunConfig, config):
    """The baselines' network: the backbone with FedAvg's shared head of ``num-outputs`` outputs."""
    from edgeprof.algorithms import fedavg

    return fedavg.BackboneWithHead(_module(cfg), int(config["num-outputs"]), seed=cfg.seed)


def fedavg_round(cfg: RunConfig, client, weights: list[np.ndarray], config, state: RecordDict):
    """FedAvg's client round on the shared model; returns (new weights, n, loss)."""
    from edgeprof.algorithms import fedavg

    new, loss = fedavg.client_round(_whole_model(cfg, config), weights, client.x_train, client.y_train,
                                    tau=cfg.tau, beta=cfg.beta, phase=current_phase())
    return new, client.n_train, loss


def fedprox_round(cfg: RunConfig, client, weights: list[np.ndarray], config, state: RecordDict):
    """FedProx's client round (proximal term mu towards the received weights); (new weights, n, loss)."""
    from edgeprof.algorithms import fedprox

    new, loss = fedprox.client_round(_whole_model(cfg, config), weights, client.x_train, client.y_train,
                                     tau=cfg.tau, beta=cfg.beta, mu=cfg.mu, phase=current_phase())
    return new, client.n_train, loss


def ditto_round(cfg: RunConfig, client, weights: list[np.ndarray], config, state: RecordDict):
    """Ditto's client round with v_i from ``state`` (else the round-0 global model); (new global, n, loss)."""
    from edgeprof.algorithms import ditto

    if PERSONAL_KEY in state:
        personal = state[PERSONAL_KEY].to_numpy_ndarrays()
    else:
        personal = initial_arrays(cfg, int(config["num-outputs"]))
    new, personal, loss = ditto.client_round(_whole_model(cfg, config), weights, personal, client.x_train,
                                             client.y_train, tau=cfg.tau, beta=cfg.beta, lam=cfg.mu,
                                             phase=current_phase())
    state[PERSONAL_KEY] = ArrayRecord(personal)
    return new, client.n_train, loss


def _personal_head(cfg: RunConfig, client, state: RecordDict) -> list[np.ndarray]:
    """[W_i, b_i] from ``state``, else the in-process first head (:func:`edgeprof.algorithms.fedper.initial_head`)."""
    from edgeprof.algorithms import fedper

    if HEAD_KEY in state:
        return state[HEAD_KEY].to_numpy_ndarrays()
    return fedper.initial_head(cfg.seed, client.client_id, client.num_classes, _module(cfg).feature_dim)


def _head_round(local_update: Callable) -> Callable:
    """A personal-head round: ``local_update(cfg, backbone, body, head, x, y, phase)`` -> (body, head, loss)."""

    def round_(cfg: RunConfig, client, body: list[np.ndarray], config, state: RecordDict):
        head = _personal_head(cfg, client, state)
        body, head, loss = local_update(cfg, _module(cfg), body, head, client.x_train, client.y_train,
                                        current_phase())
        state[HEAD_KEY] = ArrayRecord(list(head))
        return body, client.n_train, loss

    round_.__name__ = round_.__qualname__ = local_update.__name__
    round_.__doc__ = local_update.__doc__
    return round_


@_head_round
def fedper_round(cfg, backbone, body, head, x, y, phase):
    """FedPer: tau joint steps on (body, head), as :class:`edgeprof.algorithms.fedper.FedPer`."""
    from edgeprof.algorithms import fedper

    return fedper.client_round(backbone, body, head, x, y, tau=cfg.tau, beta=cfg.beta, phase=phase)


@_head_round
def fedrep_round(cfg, backbone, body, head, x, y, phase):
    """FedRep: tau head steps, then body_steps(tau) body steps, as :class:`edgeprof.algorithms.fedrep.FedRep`."""
    from edgeprof.algorithms import fedrep

    return fedrep.client_round(backbone, body, head, x, y, head_steps=cfg.tau,
                               n_body_steps=fedrep.body_steps(cfg.tau), beta=cfg.beta, phase=phase)


@_head_round
def fedsim_round(cfg, backbone, body, head, x, y, phase):
    """FedSim: LocalSim, as :class:`edgeprof.algorithms.partial.FedSim`."""
    from edgeprof.algorithms import partial

    return partial.local_sim(backbone, body, head, x, y, tau=cfg.tau, beta=cfg.beta, phase=phase)


@_head_round
def fedalt_round(cfg, backbone, body, head, x, y, phase):
    """FedAlt: LocalAlt with tau_v = tau_u = tau, as :class:`edgeprof.algorithms.partial.FedAlt`."""
    from edgeprof.algorithms import partial

    return partial.local_alt(backbone, body, head, x, y, tau_v=cfg.tau, tau_u=cfg.tau, beta=cfg.beta,
                             phase=phase)


@functools.lru_cache(maxsize=2)
def _orthogonal_head(num_outputs: int, feature_dim: int, seed: int) -> tuple:
    from edgeprof.algorithms import fedbabu

    return tuple(fedbabu.orthogonal_head(num_outputs, feature_dim, seed))


def fedbabu_round(cfg: RunConfig, client, body: list[np.ndarray], config, state: RecordDict):
    """FedBABU's client round: body steps under the fixed orthogonal head of ``num-outputs`` outputs."""
    from edgeprof.algorithms import fedbabu

    backbone = _module(cfg)
    head = list(_orthogonal_head(int(config["num-outputs"]), backbone.feature_dim, cfg.seed))
    new, loss = fedbabu.client_round(backbone, body, head, client.x_train, client.y_train, tau=cfg.tau,
                                     beta=cfg.beta, phase=current_phase())
    return new, client.n_train, loss


def fedrecon_round(cfg: RunConfig, client, theta: list[np.ndarray], config, state: RecordDict):
    """FedRecon's stateless client round (head reconstructed from its initial value); (theta_i, n, loss)."""
    from edgeprof.algorithms import fedrecon, pflego
    from edgeprof.nn.ort import FeatureRunner

    backbone = _module(cfg)
    head0 = pflego.initial_head(cfg.seed, client.client_id, client.num_classes, backbone.feature_dim)
    runner = FeatureRunner(backbone, threads=cfg.threads)

    def body_grad(head, x, y):
        loss, _, grad = pflego.torch_joint_gradient(backbone, theta, head, x, y)
        return loss, grad

    new, _, loss = fedrecon.client_round(lambda x: runner.features(x, theta), body_grad, theta, head0,
                                         client.x_train, client.y_train, tau=cfg.tau, beta=cfg.beta,
                                         phase=current_phase())
    return new, client.n_train, loss


#: the client round of every algorithm in :data:`edgeprof.algorithms.ALGORITHMS`:
#: ``round(cfg, client, arrays, config, state) -> (reply arrays, N_i, loss)``
ROUNDS: dict[str, Callable] = {
    "pflego": pflego_round, "fedavg": fedavg_round, "fedprox": fedprox_round, "ditto": ditto_round,
    "fedper": fedper_round, "fedrep": fedrep_round, "fedbabu": fedbabu_round, "fedsim": fedsim_round,
    "fedalt": fedalt_round, "fedrecon": fedrecon_round,
}


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
            raise ConfigError(f"{cfg.algo} has no Flower client round")
        arrays = msg.content[ARRAYS_KEY].to_numpy_ndarrays()
        out, n, loss = ROUNDS[cfg.algo](cfg, load_client(cfg, pid), arrays, msg.content[CONFIG_KEY],
                                        context.state)
        metrics = MetricRecord({"partition-id": pid, "n-samples": int(n), "train-loss": float(loss)})
        return Message(RecordDict({ARRAYS_KEY: ArrayRecord(out), METRICS_KEY: metrics}), reply_to=msg)

    return app


app = make_client_app()

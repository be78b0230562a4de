"""The edgeprof ClientApp: each SuperNode is one client of the in-process federation, on its own device.

A SuperNode started with ``--node-config "partition-id=<i> num-partitions=<I>"`` loads
``load_clients(cfg)[i]`` - the very partition ``edgeprof measure`` gives client i, since data loading
and partitioning depend only on the run config and its seed - and runs the registered algorithm's client
program (:mod:`edgeprof.algorithms.contract`), the same function the in-process driver calls. Nothing
here names an algorithm.

What is personal never leaves the device: exactly the algorithm's declared personal state is kept between
rounds in Flower's node-local state ``context.state`` under ``edgeprof.personal`` (an ArrayRecord the
SuperNode stores with the run's Context) and starts where the in-process driver starts it
(``AlgorithmSpec.init_personal``), so a client first sampled in round t starts from the same state as
there. An algorithm that declares nothing personal leaves ``context.state`` untouched.

The backbone, its ONNX Runtime session and anything an algorithm derives once (:class:`Runtime`) are kept
per process (:func:`runtime_for`), for as long as the process serves messages.

Handlers: ``query`` answers the server's roll call (partition id, N_i, K_i, host, and which data it trains on:
:func:`data_record`, also one line in the node's log); ``train`` runs one
round and replies with the client program's reply arrays and a MetricRecord ``metrics`` (partition-id,
num-examples (Flower's key for N_i), train-loss). :mod:`edgeprof.flower.mod` profiles ``train``. With
``evaluate``, ``evaluate`` answers the server's EVALUATE messages (the ``global`` protocol: this client's
declared evaluation under the new global arrays), and under the ``paper`` protocol the training reply also
carries the evaluation of the model the client just trained, taken after the round's window.

An edgeprof error in a handler (a run config this node's operator does not allow, a missing partition id, data
that cannot be read) is one logged line on the node and a failed reply with that line as its reason
(:func:`refuse_in_one_line`): the server records the node's failure and the federation goes on; any other
exception is a bug and keeps Flower's own report with its traceback.
"""

from __future__ import annotations

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # a Flower app is an entry point: before torch loads (edgeprof.host)

import contextlib
import functools
import logging
from typing import Any, Mapping, Optional

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError
from edgeprof.flower.config import check_trust, from_run_config, node_overrides
from edgeprof.flower.mod import current_phase, host_name, make_profile_mod, node_compute
from edgeprof.flower.node_checks import DATA_RECORD, HOST_RECORD
from edgeprof.flower.strategy import ARRAYS_KEY, CONFIG_KEY, METRICS_KEY

#: the context.state key of the declared personal state
PERSONAL_KEY = "edgeprof.personal"


def node_cfg(context: Context, defaults: Optional[Mapping[str, Any]] = None) -> RunConfig:
    """The run settings of this node: the run config over ``defaults`` (only what the node's operator allows it,
    :func:`~edgeprof.flower.config.check_trust`; a simulation's nodes are the user's own processes), then the
    node's device settings."""
    cfg, settings = from_run_config(context.run_config, defaults)
    if not settings.simulation:
        check_trust(cfg, context.node_config)
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
    from edgeprof.rounds.simulate import load_clients

    return load_clients(cfg)


def load_client(cfg: RunConfig, pid: int, node_config: Optional[Mapping[str, Any]] = None):
    """This node's client: its own data where its operator gives a ``data-dir`` (and ``dataset``, default the
    run's) in the node config, split train/test by the run's test fraction; else client ``pid`` of
    ``load_clients(cfg)``, the partition ``edgeprof measure`` gives it (cached per process)."""
    node_config = node_config or {}
    if node_config.get("data-dir"):
        return _own_client(cfg, pid, str(node_config["data-dir"]), str(node_config.get("dataset", cfg.dataset)))
    return _clients(cfg)[pid]


@functools.lru_cache(maxsize=2)
def _own_client(cfg: RunConfig, pid: int, data_dir: str, dataset: str):
    from edgeprof.data import load_dataset
    from edgeprof.data.partition import own_client
    from edgeprof.rounds.simulate import input_shape

    data = load_dataset(dataset, data_dir=data_dir, shape=input_shape(cfg), seed=cfg.seed,
                        synthetic_classes=cfg.synthetic_classes, synthetic_samples=cfg.synthetic_samples)
    return own_client(data, pid, cfg.test_fraction, seed=cfg.seed)


def data_record(cfg: RunConfig, pid: int, node_config: Mapping[str, Any], client) -> dict[str, Any]:
    """Which data this node trains on, for its roll-call answer (read by
    :func:`edgeprof.flower.node_checks.data_of`): the data set, ``own`` (its operator's ``data-dir``) or
    ``partition`` (client ``pid`` of the run's data set), the folder, the test count, and the SHA-256 of the arrays it
    loaded (train and test samples and labels, in that order): two nodes with the same digest train and test on the
    same data."""
    import hashlib

    digest = hashlib.sha256()
    for array in (client.x_train, client.y_train, client.x_test, client.y_test):
        digest.update(np.ascontiguousarray(array).tobytes())
    own = bool(node_config.get("data-dir"))
    return {"dataset": str(node_config.get("dataset", cfg.dataset)) if own else cfg.dataset,
            "source": "own" if own else "partition", "folder": str(node_config["data-dir"]) if own else "",
            "n-test": int(client.n_test), "sha256": digest.hexdigest()}


def data_line(pid: int, n_train: int, data: Mapping[str, Any]) -> str:
    """The node's log line of what it trains on: ``edgeprof: partition 0 trains on its own data: mnist in /data/x
    (8 train, 2 test samples, sha256 1a2b3c4d5e6f)``, or ``... on partition 0 of synthetic (...)``."""
    what = (f"its own data: {data['dataset']} in {data['folder']}" if data["source"] == "own"
            else f"partition {pid} of {data['dataset']}")
    return (f"edgeprof: partition {pid} trains on {what} ({n_train} train, {data['n-test']} test samples, "
            f"sha256 {data['sha256'][:12]})")


@functools.lru_cache(maxsize=2)
def runtime_for(cfg: RunConfig, num_outputs: int):
    """This process's runtime for ``cfg`` (a freshly seeded backbone, its ONNX session once built), kept
    across the messages a process serves; its Compute is the node's (:func:`edgeprof.flower.mod.node_compute`,
    whose device is not resolved again) with the plan ``cfg.execution`` gives the backbone."""
    from edgeprof.rounds.runtime import build_runtime

    return build_runtime(cfg, num_outputs, device=node_compute(cfg))


def personal_state(spec, rt, client, state: RecordDict):
    """The client's declared personal state: from ``context.state``, else the algorithm's initial one."""
    if not spec.personal:
        return None
    if PERSONAL_KEY in state:
        return state[PERSONAL_KEY].to_numpy_ndarrays()
    return spec.init_personal(rt, client, spec.init_global(rt))


def train_round(cfg: RunConfig, client, arrays: list[np.ndarray], config, state: RecordDict):
    """Run ``cfg.algo``'s client program on this node; returns its ClientResult and keeps its personal state."""
    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.algorithms.contract import RoundSettings

    spec = ALGORITHMS[cfg.algo]
    rt = runtime_for(cfg, int(config["num-outputs"]))
    settings = RoundSettings.of(cfg, scale=float(config["scale"]), phase=current_phase())
    result = spec.client(rt, arrays, personal_state(spec, rt, client, state), client, settings)
    if result.personal is not None:
        state[PERSONAL_KEY] = ArrayRecord(list(result.personal))
    _LAST_ROUND[client.client_id] = (arrays, result, settings.with_phase(lambda _: contextlib.nullcontext()))
    return result


#: the last round each client ran in this process: (global arrays, ClientResult, settings), for the
#: ``paper`` protocol's local evaluation after the round's window
_LAST_ROUND: dict[int, tuple] = {}


def eval_metrics(result) -> dict:
    """An EvalResult as reply metrics (the keys :func:`edgeprof.flower.strategy.eval_result` reads)."""
    return {"eval-train-loss": float(result.train_loss), "eval-test-accuracy": float(result.test_accuracy),
            "eval-n-train": int(result.n_train), "eval-n-test": int(result.n_test)}


def local_evaluation(cfg_of, msg: Message, context: Context, reply: Message) -> None:
    """The ``paper`` protocol: score the model this client just trained (before the server step), add it to
    the training reply; nothing under the ``global`` protocol (the server asks with EVALUATE messages)."""
    from edgeprof.algorithms import ALGORITHMS

    cfg = cfg_of(context)
    if not (cfg.evaluate and cfg.eval_protocol == "paper"):
        return
    client = load_client(cfg, partition_id(context, cfg), context.node_config)
    arrays, result, settings = _LAST_ROUND.pop(client.client_id)
    spec = ALGORITHMS[cfg.algo]
    rt = runtime_for(cfg, int(msg.content[CONFIG_KEY]["num-outputs"]))
    shared = spec.local_shared(arrays, result.reply)
    reply.content[METRICS_KEY].update(eval_metrics(spec.evaluate(rt, shared, result.personal, client, settings)))


def prepare_round(cfg_of, msg: Message, context: Context) -> None:
    """Everything a training round needs before it starts, measured by the mod as set-up: this node's data,
    the runtime (backbone; export and ONNX Runtime session for the ``onnx`` engine, read from the per-node
    export cache when present), the personal state and the algorithm's own set-up (``AlgorithmSpec.prepare``: on a
    GPU its step graphs captured). The round then finds them in this process."""
    import dataclasses

    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.algorithms.contract import RoundSettings

    cfg = cfg_of(context)
    client = load_client(cfg, partition_id(context, cfg), context.node_config)
    rt = runtime_for(cfg, int(msg.content[CONFIG_KEY]["num-outputs"]))
    rt.prepare()
    spec = ALGORITHMS[cfg.algo]
    personal = personal_state(spec, rt, client, context.state)
    settings = RoundSettings.of(cfg, scale=float(msg.content[CONFIG_KEY]["scale"]))
    if spec.prepare is not None:  # the algorithm's own set-up (a GPU's captured step graphs), once per client and tau
        rt.cached(("prepare", client.client_id, settings.tau), lambda: spec.prepare(rt, client, settings) or True)
    if str(context.node_config.get("warmup", "1")).lower() not in ("0", "false", "no"):
        # a fresh process initialises kernels on first use (oneDNN primitives, the ONNX Runtime run): run the
        # client program once per process at tau=1 on the real data and throw the result away, so that cost
        # is set-up, not round
        arrays = msg.content[ARRAYS_KEY].to_numpy_ndarrays()
        settings = dataclasses.replace(settings, tau=1)
        own = None if personal is None else [a.copy() for a in personal]
        rt.cached("warm-up", lambda: spec.client(rt, arrays, own, client, settings) and True)


def node_device(cfg: RunConfig) -> None:
    """ConfigError with one line naming the node config's key, ``threads`` or ``compute-device``, when this node
    cannot run rounds as set: more threads than its cores, or a device it cannot use (``cuda`` where torch sees no
    GPU, an index it does not have); ``auto`` always can, and is resolved once, by the mod
    (:func:`~edgeprof.flower.mod.node_compute`)."""
    from edgeprof.errors import ConfigError
    from edgeprof.nn.compute import check_threads, check_usable

    try:
        check_threads(cfg.threads)
    except ConfigError as err:
        raise ConfigError(f"this node's threads {cfg.threads} (its node config, else the run's): "
                          f"{str(err).removeprefix(f'--threads {cfg.threads}: ')}; set threads in its "
                          "--node-config") from err
    if cfg.device == "auto":
        return
    try:
        check_usable(cfg.device, cfg.tf32)
    except ConfigError as err:
        raise ConfigError(f"this node's compute-device {cfg.device!r} (its node config, else the run's): "
                          f"{str(err).removeprefix(f'--device {cfg.device}: ')}") from err


def refuse_in_one_line(msg: Message, context: Context, call_next) -> Message:
    """A Flower mod: an :class:`~edgeprof.errors.EdgeprofError` raised while the node handles ``msg`` becomes one
    line in the node's log and a failed reply carrying it (the server logs it as the node's reason), not a
    traceback; the node keeps serving."""
    from flwr.app import Error
    from flwr.common.constant import ErrorCode

    from edgeprof.errors import EdgeprofError

    try:
        return call_next(msg, context)
    except EdgeprofError as err:
        line = f"edgeprof: {type(err).__name__}: {err}"
        logging.getLogger("flwr").error("%s", line)
        return Message(error=Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=line), reply_to=msg)


def make_client_app(defaults: Optional[Mapping[str, Any]] = None) -> ClientApp:
    """The ClientApp; ``defaults`` (a run config) fills keys the run config lacks (simulation)."""
    cfg_of = functools.partial(node_cfg, defaults=defaults)
    app = ClientApp(mods=[refuse_in_one_line, make_profile_mod(cfg_of, functools.partial(prepare_round, cfg_of),
                                           functools.partial(local_evaluation, cfg_of))])

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        cfg = cfg_of(context)
        node_device(cfg)  # at the roll call, as every other node setting: a node that cannot run rounds is left out
        pid = partition_id(context, cfg)
        client = load_client(cfg, pid, context.node_config)
        info = MetricRecord({"partition-id": pid, "num-examples": client.n_train, "num-classes": client.num_classes})
        from flwr.app import ConfigRecord

        data = data_record(cfg, pid, context.node_config, client)
        logging.getLogger("flwr").info("%s", data_line(pid, client.n_train, data))
        return Message(RecordDict({METRICS_KEY: info, HOST_RECORD: ConfigRecord(
            {HOST_RECORD: host_name(context.node_config)}), DATA_RECORD: ConfigRecord(data)}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        cfg = cfg_of(context)
        pid = partition_id(context, cfg)
        arrays = msg.content[ARRAYS_KEY].to_numpy_ndarrays()
        result = train_round(cfg, load_client(cfg, pid, context.node_config), arrays, msg.content[CONFIG_KEY],
                             context.state)
        metrics = MetricRecord({"partition-id": pid, "num-examples": int(result.n_samples),
                                "train-loss": float(result.loss)})
        return Message(RecordDict({ARRAYS_KEY: ArrayRecord(list(result.reply)), METRICS_KEY: metrics}),
                       reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        """The ``global`` protocol: this client's declared evaluation under the new global arrays."""
        from edgeprof.algorithms import ALGORITHMS
        from edgeprof.algorithms.contract import RoundSettings

        cfg = cfg_of(context)
        pid = partition_id(context, cfg)
        client = load_client(cfg, pid, context.node_config)
        config = msg.content[CONFIG_KEY]
        spec = ALGORITHMS[cfg.algo]
        rt = runtime_for(cfg, int(config["num-outputs"]))
        result = spec.evaluate(rt, msg.content[ARRAYS_KEY].to_numpy_ndarrays(),
                               personal_state(spec, rt, client, context.state), client,
                               RoundSettings.of(cfg, scale=float(config["scale"])))
        metrics = MetricRecord({"partition-id": pid, "num-examples": int(result.n_test), **eval_metrics(result)})
        return Message(RecordDict({METRICS_KEY: metrics}), reply_to=msg)

    return app


app = make_client_app()

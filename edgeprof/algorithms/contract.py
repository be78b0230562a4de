"""The algorithm contract: a client program and a server program on plain data, plus one declaration.

An algorithm is one module per paper. Its client program

    client(rt, global_arrays, personal, data, settings) -> ClientResult(reply, personal, loss, n_samples)

takes the round's global arrays, the client's own personal state (a list of arrays, or None when the
algorithm keeps nothing on the client), the client's data and the round's :class:`RoundSettings` (tau,
learning rates, the scale I/r, the phase marker), and returns the reply it sends, its new personal state
and its loss. Its server program

    server(rt, state, replies, settings) -> ServerState

takes the global state (arrays and the server optimizer's state) and the round's :class:`Reply` objects
and returns the new global state. Everything else (name, phases, engines, hyperparameter row, kind of
server step, what is personal, how it is evaluated) is declared once in an :class:`AlgorithmSpec` and
registered with one line in :mod:`edgeprof.algorithms`.

Two drivers run that contract and name no algorithm: the in-process loop (:class:`edgeprof.rounds.federation.Federation`
under ``measure``, ``sweep`` and ``train``) and Flower (:mod:`edgeprof.flower.client_app` and
:mod:`edgeprof.flower.strategy`). :class:`Runtime` is what both give the programs on one machine: the
seeded backbone module, its ONNX Runtime session, the run's :class:`~edgeprof.nn.compute.Compute` (device,
execution plan, threads: every tensor placement and host/device copy of a program goes through it) and the
run-constant settings (seed, engine).
Per-round settings never live in shared state: they arrive in every call.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Mapping, Optional, Sequence, Union

import numpy as np

Phase = Callable[[str], ContextManager]
Arrays = list  # list[np.ndarray], one array per parameter tensor


def no_phase(_name: str) -> ContextManager:
    """The phase marker used when nothing is profiling."""
    return contextlib.nullcontext()


@dataclass(frozen=True)
class RoundSettings:
    """The settings of one round, handed to every client and server call (never read from shared state).

    ``scale`` is I/r (the number of clients over the expected number sampled per round); ``phase`` marks
    the profiled parts of the client's work.
    """

    tau: int
    beta: float
    rho: Optional[float] = None
    mu: Optional[float] = None
    scale: float = 1.0
    phase: Phase = field(default=no_phase, compare=False)

    @staticmethod
    def of(cfg, *, scale: float = 1.0, phase: Phase = no_phase) -> "RoundSettings":
        """The settings of a (resolved) RunConfig."""
        return RoundSettings(cfg.tau, cfg.beta, cfg.rho, cfg.mu, float(scale), phase)

    def with_phase(self, phase: Phase) -> "RoundSettings":
        return dataclasses.replace(self, phase=phase)


@dataclass
class ClientResult:
    """What one client round produces: the reply to send, the new personal state, the loss, N_i."""

    reply: Arrays
    personal: Optional[Arrays]
    loss: float
    n_samples: int


@dataclass(frozen=True)
class Reply:
    """A client's reply as the server program sees it; ``alpha`` = N_i / sum_j N_j over all I clients."""

    client_id: int
    n_samples: int
    alpha: float
    arrays: Arrays


@dataclass
class ServerState:
    """The global state: the global arrays and, for a server with an optimizer, its state."""

    arrays: Arrays
    optimizer: Any = None


@dataclass(frozen=True)
class EvalResult:
    """A client's training loss (its l_i) and test accuracy under the current model."""

    client_id: int
    train_loss: float
    test_accuracy: float
    n_train: int
    n_test: int


#: how accuracy is measured with ``evaluate`` (the algorithm's :attr:`AlgorithmSpec.evaluate`, called by both
#: drivers): ``global`` scores every client after the server step (the unweighted mean of per-client accuracies);
#: ``paper`` scores the round's sampled clients right after their local update, before the server step, as correct
#: predictions summed over them / their test samples (the PFLEGO authors' reference code, and so Table 1)
EVAL_PROTOCOLS = ("global", "paper")

#: what a server step does with the replies (declared; the drivers report it)
SERVER_KINDS = {
    "gradient": "applies the server optimizer to (I/r) sum alpha_i g_i of the replied gradients",
    "average": "replaces the global arrays by the N_i-weighted average of the replied arrays",
    "pseudo-gradient": "applies the server optimizer to theta minus the N_i-weighted average of the replies",
}
#: what a sampled client's missing or rejected reply means, per kind of server step
MISSING_REPLIES = {
    "gradient": "count as zero (PFLEGO Section 3.2.1): sum over the replies, scale I/r of the sampled r",
    "average": "left out: the N_i-weighted average runs over the valid replies",
    "pseudo-gradient": "left out: the pseudo-gradient averages the valid replies' arrays by N_i",
}

ClientFn = Callable[["Runtime", Arrays, Optional[Arrays], Any, RoundSettings], ClientResult]
ServerFn = Callable[["Runtime", ServerState, Sequence[Reply], RoundSettings], ServerState]
EvalFn = Callable[["Runtime", Arrays, Optional[Arrays], Any, RoundSettings], EvalResult]


@dataclass(frozen=True)
class AlgorithmSpec:
    """Everything about an algorithm, declared once in its module.

    ``hyperparams`` names the row of the paper's tables it takes (its own or the one it borrows), or
    gives its defaults directly. ``personal`` says in words what the client keeps (``""``: nothing);
    ``init_personal`` builds it (None when nothing is personal). ``cost`` is a prior (a + b*tau forward
    passes per round) for progress bars only. ``prepare(rt, data, settings)``, where declared, is a client's
    set-up at the settings' tau that a round would otherwise do inside its window (PFLEGO captures its head steps
    as a device graph); the drivers call it before any window (:meth:`~edgeprof.rounds.federation.Federation.prepare`).
    """

    name: str
    paper: str
    phases: tuple[str, ...]
    client: ClientFn
    server: ServerFn
    init_global: Callable[["Runtime"], Arrays]
    evaluate: EvalFn
    evaluation: str
    server_kind: str
    hyperparams: Union[str, Mapping[str, float]]
    engines: tuple[str, ...] = ("torch",)
    personal: str = ""
    init_personal: Optional[Callable[["Runtime", Any, Arrays], Arrays]] = None
    prepare: Optional[Callable[["Runtime", Any, RoundSettings], None]] = None
    cost: tuple[float, float] = (0.0, 3.0)

    def __post_init__(self) -> None:
        if self.server_kind not in SERVER_KINDS:
            raise ValueError(f"{self.name}: server_kind must be one of {', '.join(SERVER_KINDS)}")
        if bool(self.personal) != (self.init_personal is not None):
            raise ValueError(f"{self.name}: declare both personal and init_personal, or neither")

    @property
    def has_optimizer(self) -> bool:
        """Whether the server step feeds a server optimizer (Adam or SGD with step rho)."""
        return self.server_kind != "average"

    @property
    def reply_is_model(self) -> bool:
        """Whether a reply holds the client's locally trained shared arrays (False: a gradient of them)."""
        return self.server_kind != "gradient"

    def local_shared(self, global_arrays: Arrays, reply: Arrays) -> Arrays:
        """The shared arrays of a client's model right after its local update: its reply when that is a model,
        else (a gradient) the round's global arrays. The ``paper`` protocol scores that model."""
        return reply if self.reply_is_model else global_arrays

    @property
    def missing_replies(self) -> str:
        return MISSING_REPLIES[self.server_kind]

    def expected_cost(self, tau: int) -> float:
        return self.cost[0] + self.cost[1] * tau

    def new_server_state(self, rt: "Runtime", rho: Optional[float]) -> ServerState:
        """Round 0's global state: the initial arrays and, where declared, a fresh server optimizer."""
        from edgeprof.algorithms import aggregation

        optimizer = aggregation.make_optimizer(rt.server_optimizer, rho) if self.has_optimizer else None
        return ServerState(self.init_global(rt), optimizer)


class Runtime:
    """What the programs use on one machine for a whole run: the backbone and run-constant settings.

    ``backbone`` is the seeded torch module, handed over fresh (the programs load the round's arrays into
    it; ``initial_params`` keeps its round-0 weights);
    ``num_outputs`` is max_i K_i over the federation (the baselines' shared head); :meth:`features`
    runs the backbone once over a batch with given weights, in ONNX Runtime for the ``onnx`` engine.
    :meth:`cached` keeps any object an algorithm derives once per run (a model wrapping the backbone, a
    fixed head), so the in-process loop and a Flower client build it once too.
    """

    def __init__(self, backbone, *, compute, seed: int, num_outputs: int, engine: str = "torch",
                 server_optimizer: str = "adam") -> None:
        #: where and how every torch forward and backward runs, and every host/device copy: the run's
        #: :class:`~edgeprof.nn.compute.Compute`, resolved once (:func:`edgeprof.rounds.runtime.build_runtime`)
        self.compute = compute
        self.backbone = compute.module(backbone)
        #: the backbone's round-0 weights, taken before any program loads other weights into it
        self.initial_params = compute.params(self.backbone)
        self.feature_dim = int(backbone.feature_dim)
        self.seed = seed
        self.num_outputs = int(num_outputs)
        self.engine = engine
        self.server_optimizer = server_optimizer
        self._cache: dict[Any, Any] = {}
        #: whether the ``onnx`` engine's forward runs in ONNX Runtime here (False: its build has no provider for
        #: the run's device, and the forward runs in torch on the device; :attr:`forward_engine` says so)
        self.ort_here = engine != "onnx" or bool(compute.ort_providers())
        if not self.ort_here:
            import logging

            logging.getLogger("edgeprof").warning(f"the cached forward runs in torch on {compute.device}: this "
                                                  "onnxruntime has no execution provider for it (install "
                                                  "onnxruntime-gpu, or NVIDIA's build on a Jetson)")

    @property
    def threads(self) -> Optional[int]:
        return self.compute.threads

    def cached(self, key: Any, build: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    @property
    def runner(self):
        """The ONNX Runtime session of the backbone (built on first use, from a host copy of the module)."""
        from edgeprof.nn.ort import FeatureRunner

        return self.cached("onnx-runner", lambda: FeatureRunner(self.compute.host_module(self.backbone),
                                                                threads=self.threads,
                                                                providers=self.compute.ort_providers()))

    def prepare(self) -> None:
        """Build what the first round would otherwise build inside its window: the ONNX Runtime session."""
        if self.engine == "onnx" and self.ort_here:
            self.runner  # noqa: B018 - built for its side effect

    @property
    def forward_engine(self) -> str:
        """What runs phi(x; theta) for :meth:`features`, for the sidecar."""
        if self.engine == "onnx" and self.ort_here:
            names = [p if isinstance(p, str) else p[0] for p in self.compute.ort_providers()]
            return f"onnxruntime ({', '.join(names)})"
        note = " (onnxruntime has no execution provider for it here)" if self.engine == "onnx" else ""
        return f"torch on {self.compute.device}{note}"

    @property
    def has_runner(self) -> bool:
        """Whether the ONNX Runtime session has been built."""
        return "onnx-runner" in self._cache

    def features(self, x: np.ndarray, weights: Sequence[np.ndarray]) -> np.ndarray:
        """phi(x; weights) on the host: ONNX Runtime for the ``onnx`` engine, else one torch forward without
        autograd on the run's device."""
        if self.engine == "onnx" and self.ort_here:
            return self.runner.features(x, weights)
        self.compute.load(self.backbone, weights)
        return self.compute.host(self.compute.forward(self.backbone, x), copy=False)

    def close(self) -> None:
        runner = self._cache.pop("onnx-runner", None)
        if runner is not None and hasattr(runner, "close"):
            runner.close()

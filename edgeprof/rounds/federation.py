"""The in-process driver of the algorithm contract: a whole federation's state in one process.

:class:`Federation` holds what the contract leaves to a driver: the global state, every client's
personal state (exactly what the algorithm declares personal), alpha_i and the scale I/r, and the
:class:`~edgeprof.algorithms.contract.Runtime`. Its three operations call the algorithm's programs and
name no algorithm: :meth:`Federation.client_round` (one participant's client program),
:meth:`Federation.server_step` (the server program over the round's replies) and
:meth:`Federation.evaluate`. ``measure``, ``train`` and ``sweep`` run it through :mod:`edgeprof.rounds.simulate`;
the Flower ClientApp and strategy are the other driver of the same programs.

Per-round settings (tau, learning rates) come from the :class:`RoundSettings` passed in, or from the
federation's own when none is: a sweep hands each cell its own settings instead of changing shared state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from edgeprof.algorithms import ALGORITHMS, aggregation
from edgeprof.algorithms.contract import EvalResult, Phase, Reply, RoundSettings, Runtime, no_phase
from edgeprof.rounds.runtime import build_runtime


@dataclass
class ClientUpdate:
    """What a client sent back at the end of its round (the driver's record of it)."""

    client_id: int
    n_samples: int
    loss: float
    payload: list[np.ndarray]


class Federation:
    """Global state, personal states and the runtime of one in-process federation."""

    def __init__(self, cfg, clients, runtime: Optional[Runtime] = None) -> None:
        cfg = cfg.resolved()
        self.spec = ALGORITHMS[cfg.algo]
        self.clients = list(clients)
        self.runtime = runtime if runtime is not None else build_runtime(cfg, max(c.num_classes for c in self.clients))
        self.scale = len(self.clients) / cfg.sampled_per_round
        self.settings = RoundSettings.of(cfg, scale=self.scale)
        self.state = self.spec.new_server_state(self.runtime, cfg.rho)
        initial = [a.copy() for a in self.state.arrays]
        self.personal: list = [self.spec.init_personal(self.runtime, c, initial) if self.spec.init_personal else None
                               for c in self.clients]
        self.alphas = aggregation.alphas([c.n_train for c in self.clients])

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def global_arrays(self) -> list[np.ndarray]:
        return self.state.arrays

    def settings_for(self, cfg) -> RoundSettings:
        """The round settings of ``cfg`` (another tau or learning rate) with this federation's scale."""
        return RoundSettings.of(cfg.resolved(), scale=self.scale)

    def prepare(self, settings: Optional[RoundSettings] = None) -> None:
        """The algorithm's set-up for every client at ``settings``' tau (the federation's own when None), before any
        window: what its rounds would otherwise build inside theirs (:attr:`AlgorithmSpec.prepare`)."""
        if self.spec.prepare is not None:
            for data in self.clients:
                self.spec.prepare(self.runtime, data, settings or self.settings)

    def client_round(self, client_id: int, phase: Phase = no_phase,
                     settings: Optional[RoundSettings] = None) -> ClientUpdate:
        """Run the client program for one participant; its personal state is replaced by the new one."""
        s = (settings or self.settings).with_phase(phase)
        data = self.clients[client_id]
        result = self.spec.client(self.runtime, self.state.arrays, self.personal[client_id], data, s)
        self.personal[client_id] = result.personal
        return ClientUpdate(client_id, result.n_samples, result.loss, result.reply)

    def server_step(self, updates: Sequence[ClientUpdate], settings: Optional[RoundSettings] = None) -> None:
        """Run the server program over the round's replies (nothing happens when no client replied)."""
        if not updates:
            return
        replies = [Reply(u.client_id, u.n_samples, float(self.alphas[u.client_id]), u.payload) for u in updates]
        self.state = self.spec.server(self.runtime, self.state, replies, settings or self.settings)

    def evaluate(self, client_id: int, settings: Optional[RoundSettings] = None) -> EvalResult:
        """The algorithm's declared evaluation of one client under the current state."""
        return self.spec.evaluate(self.runtime, self.state.arrays, self.personal[client_id],
                                  self.clients[client_id], settings or self.settings)

    def evaluate_local(self, update: ClientUpdate, settings: Optional[RoundSettings] = None) -> EvalResult:
        """The client's model right after its local update, before the server step (the paper protocol).

        Its new personal state with the shared arrays it trained (its reply) or, when it replied a gradient,
        with the round's global arrays (call this before :meth:`server_step`).
        """
        shared = self.spec.local_shared(self.state.arrays, update.payload)
        cid = update.client_id
        return self.spec.evaluate(self.runtime, shared, self.personal[cid], self.clients[cid], settings or self.settings)

    def close(self) -> None:
        self.runtime.close()

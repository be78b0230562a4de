"""The algorithm registry: name -> where its implementation lives, its profiled phases and engines.

Modules are imported only when an algorithm is used (:func:`load`), so validating a config or
printing ``--help`` does not import torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class AlgoSpec:
    """Where an algorithm lives and what its client round is made of."""

    target: str  # "module:Class"
    phases: tuple[str, ...]
    engines: tuple[str, ...] = ("torch",)
    paper: str = ""
    #: expected client-round cost as (a, b): a + b*tau forward passes over the local data (a backward
    #: counts two). A prior for progress bars and ETAs only; what a round costs is what edgeprof measures.
    cost: tuple[float, float] = (0.0, 3.0)

    def expected_cost(self, tau: int) -> float:
        return self.cost[0] + self.cost[1] * tau


ALGORITHMS: dict[str, AlgoSpec] = {
    "pflego": AlgoSpec("edgeprof.algorithms.pflego:Pflego", ("cache_forward", "head_steps", "joint_grad"),
                       ("onnx", "torch-reuse"),
                       "Personalized Federated Learning with Exact Stochastic Gradient Descent", (4.0, 0.0)),
    "fedavg": AlgoSpec("edgeprof.algorithms.fedavg:FedAvg", ("local_steps",), ("torch",),
                       "Communication-Efficient Learning of Deep Networks from Decentralized Data"),
    "fedprox": AlgoSpec("edgeprof.algorithms.fedprox:FedProx", ("local_steps",), ("torch",),
                        "Federated Optimization in Heterogeneous Networks"),
    "fedper": AlgoSpec("edgeprof.algorithms.fedper:FedPer", ("local_steps",), ("torch",),
                       "Federated Learning with Personalization Layers"),
    "fedrep": AlgoSpec("edgeprof.algorithms.fedrep:FedRep", ("head_epochs", "body_epochs"), ("torch",),
                       "Exploiting Shared Representations for Personalized Federated Learning", (0.0, 1.3)),
    "fedbabu": AlgoSpec("edgeprof.algorithms.fedbabu:FedBabu", ("local_steps",), ("torch",),
                        "FedBABU: Towards Enhanced Representation for Federated Image Classification"),
    "ditto": AlgoSpec("edgeprof.algorithms.ditto:Ditto", ("global_steps", "personal_steps"), ("torch",),
                      "Ditto: Fair and Robust Federated Learning Through Personalization", (0.0, 6.0)),
    "fedrecon": AlgoSpec("edgeprof.algorithms.fedrecon:FedRecon", ("reconstruction", "body_steps"), ("onnx",),
                         "Federated Reconstruction: Partially Local Federated Learning", (4.0, 0.0)),
    "fedsim": AlgoSpec("edgeprof.algorithms.partial:FedSim", ("local_steps",), ("torch",),
                       "Federated Learning with Partial Model Personalization"),
    "fedalt": AlgoSpec("edgeprof.algorithms.partial:FedAlt", ("personal_steps", "shared_steps"), ("torch",),
                       "Federated Learning with Partial Model Personalization"),
}

#: the phase every server step is recorded under
SERVER_PHASE = "server"


def load(name: str):
    """The algorithm class registered under ``name``."""
    module_name, class_name = ALGORITHMS[name].target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def phases_of(names) -> tuple[str, ...]:
    """The union of the client phases of several algorithms, in registry order, without repeats."""
    seen: list[str] = []
    for name in names:
        for phase in ALGORITHMS[name].phases:
            if phase not in seen:
                seen.append(phase)
    return tuple(seen)

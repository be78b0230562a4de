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


ALGORITHMS: dict[str, AlgoSpec] = {
    "pflego": AlgoSpec("edgeprof.algorithms.pflego:Pflego", ("cache_forward", "head_steps", "joint_grad"),
                       ("onnx", "torch-reuse"),
                       "Personalized Federated Learning with Exact Stochastic Gradient Descent"),
    "fedavg": AlgoSpec("edgeprof.algorithms.fedavg:FedAvg", ("local_steps",), ("torch",),
                       "Communication-Efficient Learning of Deep Networks from Decentralized Data"),
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

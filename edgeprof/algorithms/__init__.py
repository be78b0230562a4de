"""The algorithm registry: one line per algorithm, naming the module attribute that declares it.

Each algorithm module declares an :class:`~edgeprof.algorithms.contract.AlgorithmSpec` (its client and
server programs, phases, engines, hyperparameter row, what is personal, how it is evaluated); the line
below registers it. Modules are imported only when an algorithm is looked up, so listing names, printing
``--help`` or validating a config name does not import torch. An algorithm defined outside the package
(a user's own, a test's) is registered with :func:`register`.
"""

from __future__ import annotations

import importlib
from typing import Iterable, Iterator, Mapping

from edgeprof.host import load_native_libraries

#: name -> "module:attribute" of its AlgorithmSpec
REGISTRY: dict[str, str] = {
    "pflego": "edgeprof.algorithms.pflego:SPEC",
    "fedavg": "edgeprof.algorithms.fedavg:SPEC",
    "fedprox": "edgeprof.algorithms.fedprox:SPEC",
    "fedper": "edgeprof.algorithms.fedper:SPEC",
    "fedrep": "edgeprof.algorithms.fedrep:SPEC",
    "fedbabu": "edgeprof.algorithms.fedbabu:SPEC",
    "ditto": "edgeprof.algorithms.ditto:SPEC",
    "fedrecon": "edgeprof.algorithms.fedrecon:SPEC",
    "fedsim": "edgeprof.algorithms.partial:FEDSIM",
    "fedalt": "edgeprof.algorithms.partial:FEDALT",
}

#: the phase every server step is recorded under
SERVER_PHASE = "server"


class _Algorithms(Mapping):
    """name -> AlgorithmSpec, importing a module on first look-up; specs registered at run time too."""

    def __init__(self) -> None:
        self._specs: dict = {}
        self._extra: dict = {}

    def __getitem__(self, name: str):
        if name in self._extra:
            return self._extra[name]
        if name not in REGISTRY:
            raise KeyError(name)
        if name not in self._specs:
            module_name, attr = REGISTRY[name].split(":")
            load_native_libraries(("torch",))  # the modules import torch: loaded whole first, a Ctrl-C held
            self._specs[name] = getattr(importlib.import_module(module_name), attr)
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        yield from REGISTRY
        yield from (n for n in self._extra if n not in REGISTRY)

    def __len__(self) -> int:
        return len(set(REGISTRY) | set(self._extra))

    def __contains__(self, name: object) -> bool:
        return name in REGISTRY or name in self._extra


ALGORITHMS = _Algorithms()


def register(spec) -> None:
    """Register an algorithm declared outside this package (its name must be new)."""
    if spec.name in ALGORITHMS:
        raise ValueError(f"an algorithm named {spec.name!r} is already registered")
    ALGORITHMS._extra[spec.name] = spec


def unregister(name: str) -> None:
    """Remove an algorithm added with :func:`register`."""
    ALGORITHMS._extra.pop(name, None)


def phases_of(names: Iterable[str]) -> tuple[str, ...]:
    """The union of the client phases of several algorithms, in registry order, without repeats."""
    seen: list[str] = []
    for name in names:
        for phase in ALGORITHMS[name].phases:
            if phase not in seen:
                seen.append(phase)
    return tuple(seen)

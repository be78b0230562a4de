"""The meter registry: one line per energy back-end, in discovery order, naming its declaration.

Each back-end module declares a :class:`~edgeprof.meters.base.Backend` (``BACKEND``: name, probe,
opener, report columns, settings, role in discovery); the lines below register them. Discovery
(:func:`edgeprof.meters.discovery.discover`) walks this order, and the report's energy columns
(:func:`edgeprof.report.schema.domain_columns`) are the union of the declared columns in this order, so
a new back-end is one module and one line here. Modules are imported when the registry is read (by
``discover()`` or a report header), never by ``import edgeprof``; a back-end imports its optional
dependency (``pynvml``) only when probed. A back-end defined outside the package (a user's own, a
test's) is added with :func:`register`, in its place in the order.
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from edgeprof.errors import MeterError
from edgeprof.meters.base import Backend, MeterOption

#: the back-ends in discovery order: "module:attribute" of each Backend (or a Backend added at run time)
BACKENDS: list[str | Backend] = [
    "edgeprof.meters.rapl:BACKEND",
    "edgeprof.meters.nvml:BACKEND",
    "edgeprof.meters.amdsmi:BACKEND",
    "edgeprof.meters.jetson:BACKEND",
    "edgeprof.meters.apple:BACKEND",
    "edgeprof.meters.estimate:BACKEND",
]


def _load(entry: str | Backend) -> Backend:
    if isinstance(entry, Backend):
        return entry
    module_name, _, attr = entry.partition(":")
    try:
        backend = getattr(importlib.import_module(module_name), attr or "BACKEND")
    except (ImportError, AttributeError) as err:
        raise MeterError(f"meter back-end {entry!r} cannot be loaded: {err}") from err
    if not isinstance(backend, Backend):
        raise MeterError(f"meter back-end {entry!r} is a {type(backend).__name__}, not a Backend")
    return backend


def backends() -> tuple[Backend, ...]:
    """Every registered back-end, in discovery order (their modules imported on first call)."""
    loaded = tuple(_load(entry) for entry in BACKENDS)
    names = [b.name for b in loaded]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise MeterError(f"meter back-ends registered twice: {twice}")
    return loaded


def report_columns() -> tuple[str, ...]:
    """The report columns of every registered back-end, in registry order, each once."""
    return tuple(dict.fromkeys(c for b in backends() for c in b.columns))


def settings() -> dict[str, Any]:
    """Every setting a registered back-end reads, with its default (the first back-end's on a shared name)."""
    out: dict[str, Any] = {}
    for backend in backends():
        for key, default in backend.settings.items():
            out.setdefault(key, default)
    return out


def options() -> tuple[MeterOption, ...]:
    """The meter options of every registered back-end (settings with a flag, a Flower config key and a keyword
    argument of their own: :class:`~edgeprof.meters.base.MeterOption`), in registry order, each name once."""
    out: dict[str, MeterOption] = {}
    for backend in backends():
        for option in backend.options:
            out.setdefault(option.name, option)
    return tuple(out.values())


def check_names(names: Iterable[str]) -> None:
    """ConfigError with one line for a setting's name that no registered back-end declares."""
    from edgeprof.errors import ConfigError

    declared = settings()
    unknown = sorted(set(names) - set(declared))
    if unknown:
        raise ConfigError(f"unknown meter setting(s) {', '.join(unknown)}; the registered meters take: "
                          f"{', '.join(sorted(declared))}")


def check_settings(given: dict[str, Any]) -> None:
    """ConfigError with one line for a setting no registered back-end declares, or one its back-end refuses."""
    from edgeprof.errors import ConfigError

    check_names(given)
    for backend in backends():
        own = {k: v for k, v in given.items() if k in backend.settings}
        problem = backend.check(own) if backend.check is not None and own else None
        if problem:
            raise ConfigError(problem)


def register(entry: str | Backend, *, before: str | None = None) -> None:
    """Add a back-end (a ``"module:attribute"`` line or a Backend) before the one named ``before`` (default: last).

    A back-end registered last is still tried before the ``cpu_fallback`` ones (discovery decides
    those after every other), so appending never makes the estimate stand in beside a CPU counter.
    """
    backend, names = _load(entry), [b.name for b in backends()]
    if backend.name in names:
        raise ValueError(f"a meter back-end named {backend.name!r} is already registered")
    if before is not None and before not in names:
        raise ValueError(f"no meter back-end named {before!r} to register {backend.name!r} before; have {names}")
    BACKENDS.insert(names.index(before) if before is not None else len(BACKENDS), entry)


def unregister(name: str) -> None:
    """Remove the back-end named ``name`` (one added with :func:`register`, or a listed one)."""
    for index, backend in enumerate(backends()):
        if backend.name == name:
            del BACKENDS[index]
            return


@contextmanager
def registered(entry: str | Backend, *, before: str | None = None) -> Iterator[Backend]:
    """:func:`register` for the duration of a ``with`` block, then :func:`unregister` (tests, scripts)."""
    backend = _load(entry)
    register(entry, before=before)
    try:
        yield backend
    finally:
        unregister(backend.name)

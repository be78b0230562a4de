"""A node operator's ``allow-backbones``: which backbone code a run config may make this device import.

A pattern is ``module:factory`` or ``path/to/file.py:factory``; its factory part is a glob over one plain
identifier. A module pattern (``mynets:*``, ``mynets.*:make_*``) matches a module name dot-separated part by
part, a ``*`` never crossing a ``.``. A file pattern (``/srv/nets/*.py:*``) matches the backbone file's real
path (symlinks resolved, ``..`` collapsed, relative to this process's folder) folder by folder, a ``*`` never
crossing a ``/``: so ``/srv/nets/../../x.py`` and a link in ``/srv/nets`` that points out of it match nothing.
A matched spec then names only its module's own top-level callables (:func:`check_allowed`).
Torch-free until a spec matches; standard library otherwise.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Optional

from edgeprof.errors import ConfigError
from edgeprof.nn.names import factory_spec

_GLOB_CHARS = frozenset("*?[")


def patterns(text: object) -> list[str]:
    """The comma-separated patterns of an ``allow-backbones`` value; ConfigError for one without ``:factory``."""
    found = [p.strip() for p in str(text or "").split(",") if p.strip()]
    bad = [p for p in found if ":" not in p]
    if bad:
        raise ConfigError(f"allow-backbones pattern {bad[0]!r} is neither module:factory nor path/to/file.py:factory "
                          f"(e.g. 'mynets:*')")
    return found


def is_file(module: str) -> bool:
    """Whether a spec's or pattern's module part names a file (as :func:`edgeprof.nn.custom.resolve_factory`)."""
    return module.endswith(".py") or "/" in module


def real_file(module: str) -> Optional[Path]:
    """The real path of a file spec's module part (symlinks resolved, ``..`` collapsed), None if no file is there
    or the path cannot be resolved (a link loop, a NUL byte, a name too long, an unknown ``~user``)."""
    try:
        path = Path(module).expanduser().resolve()
        return path if path.is_file() else None
    except (OSError, RuntimeError, ValueError):
        return None


def matches(spec: str, pattern: str) -> bool:
    """Whether the factory spec ``spec`` matches one ``allow-backbones`` pattern (see the module docstring)."""
    parts = factory_spec(spec)
    want_module, _, want_factory = pattern.rpartition(":")
    if parts is None or not parts[1].isidentifier() or not fnmatch.fnmatchcase(parts[1], want_factory):
        return False
    module = parts[0]
    if is_file(module) != is_file(want_module):
        return False
    if not is_file(module):
        return _parts_match(module.split("."), want_module.split("."))
    path = real_file(module)
    return path is not None and _path_matches(path, want_module)


def _path_matches(path: Path, pattern: str) -> bool:
    """Whether the real ``path`` matches a path pattern: its literal leading folders resolved, the rest one
    name per part."""
    try:
        parts = Path(pattern).expanduser().parts
        literal = next((i for i, p in enumerate(parts) if _GLOB_CHARS & set(p)), len(parts))
        base = Path(*parts[:literal]).resolve() if literal else Path.cwd().resolve()
    except (OSError, RuntimeError, ValueError):  # a pattern that names no folder here matches nothing
        return False
    globs = parts[literal:]
    if not globs:
        return path == base
    if path.parts[:len(base.parts)] != base.parts:
        return False
    return _parts_match(list(path.parts[len(base.parts):]), list(globs))


def _parts_match(names: list[str], globs: list[str]) -> bool:
    """Name by name, each against its own glob (so no ``*`` crosses a separator)."""
    return len(names) == len(globs) and all(fnmatch.fnmatchcase(n, g) for n, g in zip(names, globs))


def check_allowed(spec: str, allow: object) -> None:
    """ConfigError (one line) unless an ``allow-backbones`` pattern matches the factory spec ``spec`` and its
    factory is a callable defined in the module it names (``__module__``), not a name that module imported.

    Only the matched module is imported (a matched file loaded) to look: nothing is called.
    """
    refused = f"this node imports no backbone code a run config names ({spec!r})"
    factory = factory_spec(spec)[1]
    if not factory.isidentifier():
        raise ConfigError(f"{refused}: a node calls a module's own top-level callable, never a dotted path "
                          f"({factory})")
    if not any(matches(spec, p) for p in patterns(allow)):
        raise ConfigError(f"{refused}; its operator allows it with --node-config "
                          f"\"allow-backbones={_suggestion(spec)!r}\"")
    from edgeprof.nn.custom import resolve_factory

    resolve_factory(spec, own=True)


def _suggestion(spec: str) -> str:
    """The pattern that would allow ``spec``: its module (a file by its real path) and any factory."""
    module = factory_spec(spec)[0]
    path = real_file(module) if is_file(module) else None
    return f"{path or module}:*"

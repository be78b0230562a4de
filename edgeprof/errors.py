"""One exception hierarchy for everything a user can get wrong or a machine can lack.

The CLI turns an :class:`EdgeprofError` into one line on stderr and its ``exit_code``; nothing else
in the package prints tracebacks at a user.
"""

from __future__ import annotations


class EdgeprofError(Exception):
    """Base class: a problem with one clear line of explanation."""

    exit_code = 1


class ConfigError(EdgeprofError):
    """Invalid run settings (unknown algorithm, tau < 1, participation outside (0, 1], ...)."""

    exit_code = 2


class MonitorError(ConfigError):
    """The monitor API used in a way it cannot measure: phases that overlap inside one window, a window ended
    twice or never begun, a label that would overwrite a measured column, a monitor that is not running."""


def require(module: str, extra: str, what: str):
    """Import ``module`` (a package of an optional extra), or raise the ConfigError that names the extra to install:
    ``the dashboard needs plotly, which is not installed: pip install 'edgeprof[dashboard]'`` (exit 2)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        package = module.split(".")[0]
        raise ConfigError(f"{what} needs {package}, which is not installed: pip install 'edgeprof[{extra}]'") from err


class DataError(EdgeprofError):
    """A data file is missing, unreadable or not in the format its loader expects."""

    exit_code = 3


class OutputError(EdgeprofError):
    """The report or model folder cannot be created or written."""

    exit_code = 4


class MeterError(EdgeprofError):
    """An energy meter could not be opened or read; the message names the fix."""

    exit_code = 5


class MeterPermissionError(MeterError):
    """A power counter exists but this user may not read it."""


class ModelError(EdgeprofError):
    """A backbone cannot be built, exported or loaded."""

    exit_code = 6


class ReportError(EdgeprofError):
    """A report file is missing or not an edgeprof report."""

    exit_code = 7

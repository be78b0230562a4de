"""A Flower mod that profiles every training round of a ClientApp with the edgeprof Profiler.

The mod opens this device's meters (:func:`edgeprof.meters.discovery.discover`), runs the rest of the
ClientApp inside a profiler window named ``client``, and adds two records to the reply:

* ``edgeprof.profile`` (MetricRecord, numbers only): every numeric report column the window produced -
  ``wall_s``, ``cpu_s``, ``peak_rss_mb``, ``energy_j``, ``carbon_g``, the per-domain ``<column>_j``, the
  phase columns ``<phase>_s`` / ``<phase>_cpu_s`` / ``<phase>_j``, ``profiler_overhead_s``, ``short_window``;
* ``edgeprof.profile-info`` (ConfigRecord, strings, since a MetricRecord holds only numbers): ``device``
  (``EDGEPROF_DEVICE``, else the node config's ``device``, else the host name), ``energy_method`` and
  every ``<column>_method`` (``counter``, ``integrated_power`` or ``estimate``), and where the carbon
  intensity comes from.

The server turns these into the client's report row (:mod:`edgeprof.flower.report`). Phases are marked
by the code inside the window through :func:`current_phase`, the engine's own marker
(:func:`edgeprof.windows.phase`), so the algorithms' client rounds mark phases as in ``edgeprof measure``.
Messages other than TRAIN pass through unprofiled.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any, Callable, Mapping, Optional

from flwr.app import ConfigRecord, Context, Message, MessageType, MetricRecord

from edgeprof.algorithms.contract import Phase
from edgeprof.config import RunConfig
from edgeprof.host import device_label

PROFILE_METRICS = "edgeprof.profile"
PROFILE_INFO = "edgeprof.profile-info"

def current_phase() -> Phase:
    """The phase marker of the window around this call: :func:`edgeprof.windows.phase`, which marks a phase of
    the innermost window open in this context (the mod's ``client`` window) and does nothing outside one."""
    from edgeprof.windows import phase

    return phase


def device_name(node_config: Mapping[str, Any]) -> str:
    """How this device appears in the report's ``device`` column."""
    return device_label(str(node_config.get("device", "")))


@functools.lru_cache(maxsize=8)
def _carbon(country: Optional[str], region: Optional[str], override: Optional[float]) -> tuple[Optional[float], str]:
    from edgeprof.errors import ConfigError
    from edgeprof.meters.carbon import carbon_intensity

    try:
        found = carbon_intensity(country, region=region, override_g_per_kwh=override)
    except ConfigError as err:
        return None, f"no carbon intensity: {err}"
    return found.g_per_kwh, found.source


def split_row(row: Mapping[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """Numeric cells -> MetricRecord values; the other non-empty cells -> ConfigRecord strings."""
    numbers, strings = {}, {}
    for key, value in row.items():
        if value == "":
            continue
        try:
            numbers[key] = float(value)
        except ValueError:
            strings[key] = value
    return numbers, strings


def startup_cells() -> dict[str, float]:
    """Wall and CPU seconds from this process's start to now, when it is a ``flwr-clientapp`` process that a
    SuperNode started for this message (its start-up is then part of what the round cost the device); empty
    in a long-lived process (simulation, tests), where the process's age says nothing about the round."""
    if not os.path.basename(sys.argv[0] if sys.argv else "").startswith("flwr-clientapp"):
        return {}
    import psutil

    started = psutil.Process().create_time()
    return {"startup_s": max(0.0, time.time() - started), "startup_cpu_s": time.process_time()}


def _setup_cells(win) -> dict[str, float]:
    """The set-up window's wall, CPU and (when measured) joules, for the ``setup_*`` report columns."""
    cells = {"setup_s": win.result.wall_s, "setup_cpu_s": win.result.cpu_s}
    if win.result.domains:
        cells["setup_j"] = win.result.energy_total_j
    return cells


def make_profile_mod(cfg_of: Callable[[Context], RunConfig],
                     prepare: Optional[Callable[[Message, Context], None]] = None,
                     after: Optional[Callable[[Message, Context, Message], None]] = None,
                     device_of: Optional[Callable[[Message, Context], object]] = None):
    """The mod; ``cfg_of(context)`` gives the run settings of this node (meters options, carbon).

    ``prepare(msg, context)`` does the set-up a round needs (data, model, ONNX session, personal state) in
    its own ``setup`` window before the ``client`` window opens, so the round's ``wall_s`` and ``energy_j``
    cover the round alone; the set-up's wall, CPU and joules travel beside it (``setup_*`` columns), with the
    process's own start-up (``startup_*``) when a SuperNode started it for this message. ``after(msg, context,
    reply)`` runs once the round's window is closed (the ``paper`` protocol's local evaluation), unprofiled.
    ``device_of(msg, context)``: the round's compute device once set-up is done (the runtime's Compute), which
    the profiler synchronises at every window and phase edge and whose kind and peak memory the row records.
    """

    def profile_mod(msg: Message, context: Context, call_next) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, context)
        startup = startup_cells()
        from edgeprof.profiler import Profiler
        from edgeprof.report.schema import row_from_window
        from edgeprof.report.session import open_meters

        from edgeprof.nn.compute import resolve_device

        cfg = cfg_of(context)
        meters = open_meters(cfg, resolve_device(cfg.device))
        try:
            profiler = Profiler(meters)
            with profiler.window("setup") as setup:
                if prepare is not None:
                    prepare(msg, context)
            if device_of is not None:
                profiler.device = device_of(msg, context)
            with profiler.window("client") as win:
                reply = call_next(msg, context)
        finally:
            meters.close()
        if reply.has_error():
            return reply
        if after is not None:
            after(msg, context, reply)
        g_per_kwh, source = _carbon(cfg.energy.country, cfg.energy.region, cfg.energy.carbon_intensity)
        numbers, strings = split_row(row_from_window(win.result, {}, carbon_g_per_kwh=g_per_kwh))
        numbers.update(_setup_cells(setup), **startup)
        strings.update(device=device_name(context.node_config), carbon_source=source)
        reply.content[PROFILE_METRICS] = MetricRecord(numbers)
        reply.content[PROFILE_INFO] = ConfigRecord(strings)
        return reply

    return profile_mod

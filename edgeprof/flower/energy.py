"""A Flower mod for any ClientApp: every message it handles is profiled, and the reply says what it cost.

One line in a user's own ClientApp, which needs to know nothing else of edgeprof::

    from edgeprof.flower import energy_mod

    app = ClientApp(mods=[energy_mod()])

For every message (train, evaluate, query, ...) the mod opens this device's meters as ``edgeprof measure``
does (:func:`edgeprof.meters.discovery.discover`), runs the rest of the ClientApp inside one window named
after the message type (:mod:`edgeprof.measure.windows`), and adds to every reply that carries no error:

* a ConfigRecord :data:`PROFILE_RECORD` (``edgeprof.message-profile``) with every non-empty cell of the
  window's report row, exactly as ``edgeprof measure`` would write it (``wall_s``, ``cpu_s``, ``peak_rss_mb``,
  ``energy_j`` and its ``energy_method``, ``carbon_g``, each meter's ``<column>_j`` / ``<column>_method``, the
  phases' ``<phase>_s`` / ``<phase>_cpu_s`` / ``<phase>_j``, ``profiler_overhead_s``, ``short_window``), plus
  ``host``, ``carbon_source`` and ``message_type``. The method labels (``counter``, ``integrated_power``,
  ``estimate``, ``invalid``) travel here, since a MetricRecord holds numbers only; stock strategies ignore
  ConfigRecords in replies;
* in the reply's MetricRecord, when it has exactly one (the app's ``metrics``): ``edgeprof.wall_s``,
  ``edgeprof.cpu_s``, ``edgeprof.energy_j`` and ``edgeprof.carbon_g`` (:data:`METRIC_KEYS`). Always these four,
  NaN where nothing was measured (no meter, an implausible reading, no carbon data), never 0: a stock
  strategy needs the same keys in every reply, and without the server piece it averages them like the app's
  own metrics.

The server piece, :class:`edgeprof.flower.report.ProfiledStrategy`, writes these as one report and takes
them out of the replies (:func:`take_profile`) before the wrapped strategy aggregates.

Phases: code inside the ClientApp marks them with ``with edgeprof.phase("train"): ...``, which does nothing
where the mod is absent. Shared machines: the mod measures the machine it runs on; clients that run at the
same time on one machine (Flower's simulation engine) count each other's work in their windows.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from flwr.app import ConfigRecord, Context, Message

from edgeprof.host import host_label

_log = logging.getLogger("edgeprof.flower")

if TYPE_CHECKING:
    from edgeprof.config import EnergySettings

PROFILE_RECORD = "edgeprof.message-profile"
#: the ConfigRecord of a traced window's power trace (``trace-hz``): one list per
#: :class:`~edgeprof.measure.trace.TraceRow` field, one item per interval and domain
TRACE_RECORD = "edgeprof.message-trace"
#: prefix of the keys the mod adds to the reply's MetricRecord
METRIC_PREFIX = "edgeprof."
#: report columns copied into the reply's MetricRecord as ``edgeprof.<column>``
METRIC_KEYS = ("wall_s", "cpu_s", "energy_j", "carbon_g")


#: the older wire format (edgeprof's own ClientApp before the mods were one): numbers in a MetricRecord, labels
#: in a ConfigRecord; :func:`read_profile` still reads it
OLD_METRICS, OLD_INFO = "edgeprof.profile", "edgeprof.profile-info"


def split_row(row: Mapping[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """Numeric cells -> floats; the other non-empty cells -> strings."""
    numbers, strings = {}, {}
    for key, value in row.items():
        if value == "":
            continue
        try:
            numbers[key] = float(value)
        except ValueError:
            strings[key] = value
    return numbers, strings


def profile_cells(row: Mapping[str, str]) -> dict[str, float | str]:
    """The non-empty cells of a report row, numbers as floats and labels as strings."""
    numbers, strings = split_row(row)
    return {**numbers, **strings}


def attach_profile(reply: Message, cells: Mapping[str, float | str], *, metrics: bool = True) -> None:
    """Add the profile record (and, with ``metrics``, the :data:`METRIC_KEYS`) to ``reply``."""
    reply.content[PROFILE_RECORD] = ConfigRecord(dict(cells))
    records = reply.content.metric_records
    if metrics and len(records) == 1:
        record = next(iter(records.values()))
        for column in METRIC_KEYS:
            value = cells.get(column)
            record[METRIC_PREFIX + column] = float(value) if isinstance(value, float) else math.nan


def read_profile(msg: Message) -> Optional[dict[str, float | str]]:
    """The profile a mod attached to ``msg`` (None if none): the record :data:`PROFILE_RECORD`, or, from an
    edgeprof ClientApp of the older wire format, its numbers (:data:`OLD_METRICS`) and labels (:data:`OLD_INFO`),
    read here once for every server-side reader. A profile that names its machine by the old key ``device`` (an
    older edgeprof's mod) has it read as ``host``."""
    content = msg.content
    if PROFILE_RECORD in content:
        record = content[PROFILE_RECORD]
        return _host_named(dict(record)) if isinstance(record, ConfigRecord) else None
    if OLD_METRICS not in content:
        return None
    profile: dict[str, float | str] = {k: v for k, v in content[OLD_METRICS].items() if not isinstance(v, list)}
    if OLD_INFO in content:
        profile.update({k: v for k, v in content[OLD_INFO].items() if isinstance(v, str)})
    return _host_named(profile)


def _host_named(profile: dict[str, float | str]) -> dict[str, float | str]:
    """``profile`` with an older mod's ``device`` (the machine's name) read as ``host`` where it has none."""
    if "device" in profile:
        old = profile.pop("device")
        profile.setdefault("host", old)
    return profile


def take_profile(msg: Message) -> Optional[dict[str, float | str]]:
    """:func:`read_profile`, and the profile removed from ``msg`` with the metric keys, so that the reply is
    exactly what the ClientApp returned."""
    profile = read_profile(msg)
    content = msg.content
    for key in (PROFILE_RECORD, OLD_METRICS, OLD_INFO):
        if key in content:
            del content[key]
    for record in content.metric_records.values():
        for key in [k for k in record if k.startswith(METRIC_PREFIX)]:
            del record[key]
    return profile


def trace_record(trace) -> ConfigRecord:
    """A window's trace rows as one ConfigRecord of parallel lists (watts NaN where invalid)."""
    from edgeprof.measure.trace import TraceRow

    return ConfigRecord({f: [getattr(r, f) for r in trace] for f in TraceRow.__dataclass_fields__})


#: the trace row fields saying what a meter resolved (:class:`~edgeprof.measure.trace.TraceRow`), and their types
RESOLUTION_FIELDS = {"resolved": bool, "flag": str}
#: the longest flag a node's trace row may carry
MAX_FLAG_CHARS = 200


def take_trace(msg: Message) -> Optional[tuple]:
    """The trace rows a traced mod attached to ``msg`` (None if none), removed from it. A record that is not a
    trace edgeprof's mod writes (lists of other lengths or types, an unknown method) is dropped with a warning:
    a reply's profile row is still written, without its trace."""
    from edgeprof.measure.trace import TraceRow
    from edgeprof.meters.base import INVALID, METHODS

    if TRACE_RECORD not in msg.content:
        return None
    record = msg.content[TRACE_RECORD]
    del msg.content[TRACE_RECORD]
    types = {"t_s": float, "dt_s": float, "phase": str, "domain": str, "column": str, "in_total": bool, "w": float,
             "method": str, "short_phase": bool}
    try:
        if isinstance(record, ConfigRecord) and set(record) == set(types) | set(RESOLUTION_FIELDS):
            types.update(RESOLUTION_FIELDS)  # a node before these fields sends none: its rows read as resolved
        elif not isinstance(record, ConfigRecord) or set(record) != set(types):
            raise ValueError(f"fields {sorted(record) if isinstance(record, ConfigRecord) else type(record).__name__}")
        columns = {f: list(record[f]) for f in types}
        if len({len(c) for c in columns.values()}) != 1:
            raise ValueError("lists of different lengths")
        for f, kind in types.items():
            ok = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)) if kind is float else \
                (lambda v, kind=kind: isinstance(v, kind))
            if not all(ok(v) for v in columns[f]):
                raise ValueError(f"{f} holds a value that is not {kind.__name__}")
        if not set(columns["method"]) <= {*METHODS, INVALID}:
            raise ValueError(f"unknown method in {sorted(set(columns['method']))}")
        if any(len(flag) > MAX_FLAG_CHARS for flag in columns.get("flag", ())):
            raise ValueError(f"a flag longer than {MAX_FLAG_CHARS} characters")
    except ValueError as err:
        _log.warning("node %s sent a trace record edgeprof cannot read (%s): its row is written without a trace",
                     msg.metadata.src_node_id, err)
        return None
    return tuple(TraceRow(**{f: float(columns[f][i]) if types[f] is float else columns[f][i] for f in types})
                 for i in range(len(columns["method"])))


def startup_cells() -> dict[str, float]:
    """Wall and CPU seconds from this process's start to now, when it is a ``flwr-clientapp`` process that a
    SuperNode started for this message (its start-up is then part of what the round cost the device); empty
    in a long-lived process (simulation, tests), where the process's age says nothing about the round."""
    import os
    import sys
    import time

    if not os.path.basename(sys.argv[0] if sys.argv else "").startswith("flwr-clientapp"):
        return {}
    import psutil

    started = psutil.Process().create_time()
    return {"startup_s": max(0.0, time.time() - started), "startup_cpu_s": time.process_time()}


def _setup_cells(result) -> dict[str, float]:
    """The set-up window's wall, CPU and (when measured) joules (its WindowResult), for the ``setup_*`` columns."""
    cells = {"setup_s": result.wall_s, "setup_cpu_s": result.cpu_s}
    if result.domains:
        cells["setup_j"] = result.energy_total_j
    return cells


@functools.lru_cache(maxsize=8)
def _carbon(country: Optional[str], region: Optional[str], override: Optional[float]) -> tuple[Optional[float], str]:
    """(g CO2e per kWh or None, where it comes from or why there is none); a bad country is a ConfigError."""
    from edgeprof.meters.carbon import carbon_or_note

    intensity, note = carbon_or_note(country, region=region, override_g_per_kwh=override)
    return (None, note or "") if intensity is None else (intensity.g_per_kwh, intensity.source)


def energy_mod(*, country: Optional[str] = None, region: Optional[str] = None,
               carbon_intensity: Optional[float] = None, host: Optional[str] = None, metrics: bool = True,
               meters: Optional[Callable[[], object]] = None, energy: Optional["EnergySettings"] = None,
               trace_hz: float = 0.0, device: Optional[str] = None,
               **meter_options: Any) -> Callable[[Message, Context, Callable], Message]:
    """The mod. Settings as the options of ``edgeprof measure`` (each meter option of the registered back-ends by
    its name, :func:`edgeprof.meters.registry.options`), or whole as ``energy`` (an
    :class:`~edgeprof.config.EnergySettings`, with any setting a meter back-end declares); checked now: a bad
    one fails at import.

    ``host`` names this machine in the report's ``host`` column (``EDGEPROF_HOST`` wins, then its old name
    ``EDGEPROF_DEVICE``; default: the node config's ``host``, else its old key ``device``, else the host name;
    ``device`` is the old name of this argument, read where ``host`` is not given); ``metrics=False`` leaves the
    reply's MetricRecord alone;
    ``meters`` opens the meter set for one message (default: :func:`~edgeprof.meters.discovery.discover` with these
    settings; tests pass fake meters); ``trace_hz``: also send each window's power trace at that rate
    (:data:`TRACE_RECORD`; the server piece writes it to the run's trace file when that run is traced).
    """
    from edgeprof.config import EnergySettings

    if energy is None:
        energy = EnergySettings.of(country=country, region=region, carbon_intensity=carbon_intensity,
                                   trace_hz=trace_hz, **meter_options)
    _carbon(energy.country, energy.region, energy.carbon_intensity)  # a bad country fails now, at import

    def open_meters(_context):
        from edgeprof.meters.discovery import discover

        return meters() if meters is not None else discover(**energy.meter_settings)

    return profile_mod(lambda _context: energy, open_meters, host=host or device, metrics=metrics)


def profile_mod(energy_of: Callable[[Context], "EnergySettings"], open_meters: Callable[[Context], object], *,
                only: Optional[tuple] = None, window: Optional[str] = None,
                prepare: Optional[Callable[[Message, Context], None]] = None,
                after: Optional[Callable[[Message, Context, Message], None]] = None,
                compute_of: Optional[Callable[[Message, Context], object]] = None, host: Optional[str] = None,
                metrics: bool = True, startup: bool = False) -> Callable[[Message, Context, Callable], Message]:
    """The one client mod: :func:`energy_mod` for any ClientApp and edgeprof's own ClientApp
    (:func:`edgeprof.flower.mod.make_profile_mod`) are this with their settings.

    Each message (of the types in ``only``; all by default) runs in a window of the one engine named ``window``
    (default: the message type) over the meters ``open_meters(context)`` opens; ``prepare(msg, context)`` runs
    first in its own ``setup`` window (its cells travel as ``setup_*``), and ``startup`` adds the process's own
    start-up (``startup_*``); ``compute_of(msg, context)`` is the compute device, asked for before anything else
    (its resolution is start-up) and handed to the profiler when it is built, which synchronises it at every edge,
    the set-up window's too; ``after(msg, context, reply)`` runs once the window is closed, unprofiled. The reply of a
    message without an error gets the profile record :data:`PROFILE_RECORD` (and, with ``metrics``, the
    :data:`METRIC_KEYS` in its MetricRecord).
    """

    def edgeprof_energy_mod(msg: Message, context: Context, call_next) -> Message:
        from edgeprof.flower.config import node_host
        from edgeprof.measure.profiler import Profiler
        from edgeprof.report.schema import check_phase_name, row_from_window

        if only is not None and msg.metadata.message_type not in only:
            return call_next(msg, context)
        compute = None if compute_of is None else compute_of(msg, context)  # before any window: part of start-up
        started = startup_cells() if startup else {}
        kind = str(msg.metadata.message_type)
        energy = energy_of(context)
        meter_set = open_meters(context)
        setup = profiler = None
        try:
            profiler = Profiler(meter_set, device=compute)
            profiler.windows.check_phase = check_phase_name  # a phase's columns must be none of the report's own
            if prepare is not None:
                with profiler.window("setup") as setup:
                    prepare(msg, context)
            if energy.trace_hz:
                profiler.windows.start_trace(energy.trace_hz)
            try:
                with profiler.window(window or kind) as win:
                    reply = call_next(msg, context)
                # the figures now, while the meters are open (a slow meter's series is waited for, after the window)
                result, setup_result = win.result, None if setup is None else setup.result
            finally:
                profiler.windows.stop_trace()
        finally:
            if profiler is not None:
                profiler.close()
            meter_set.close()
        if reply.has_error():
            return reply
        if after is not None:
            after(msg, context, reply)
        g_per_kwh, source = _carbon(energy.country, energy.region, energy.carbon_intensity)
        cells = profile_cells(row_from_window(result, {}, carbon_g_per_kwh=g_per_kwh))
        cells.update(_setup_cells(setup_result) if setup_result is not None else {}, **started)
        cells.update(host=host_label(host or node_host(context.node_config) or None),
                     carbon_source=source, message_type=kind)
        attach_profile(reply, cells, metrics=metrics)
        if result.trace is not None:
            reply.content[TRACE_RECORD] = trace_record(result.trace)
        return reply

    return edgeprof_energy_mod

"""edgeprof's own ClientApp mod: the one client mod (:func:`edgeprof.flower.energy.profile_mod`) set up for
edgeprof's rounds.

It profiles every TRAIN message in a window named ``client`` over this node's meters (the run config's energy
settings with the node's own, :func:`edgeprof.flower.config.node_overrides`), after the round's set-up in its own
``setup`` window (``setup_*`` columns, with the process's ``startup_*``), with the node's compute device
(:func:`node_compute`, resolved once per process, before any window) synchronised at every edge, and adds the
profile to the reply in the one wire format (the ConfigRecord ``edgeprof.message-profile``: every cell of the
window's report row, exactly as ``edgeprof measure`` writes it, plus ``host`` and ``carbon_source``). The
server turns it into the client's report row (:mod:`edgeprof.flower.report`, which still reads the older two-record
format once, in :func:`edgeprof.flower.energy.read_profile`). Phases are marked by the code inside the window
through :func:`current_phase`, the engine's own marker (:func:`edgeprof.measure.windows.phase`), so the algorithms'
client rounds mark phases as in ``edgeprof measure``. Messages other than TRAIN pass through unprofiled.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional

from flwr.app import Context, Message, MessageType

from edgeprof.algorithms.contract import Phase
from edgeprof.config import RunConfig
from edgeprof.flower.config import node_host
from edgeprof.host import host_label


def current_phase() -> Phase:
    """The phase marker of the window around this call: :func:`edgeprof.measure.windows.phase`, which marks a
    phase of the innermost window open in this context (the mod's ``client`` window) and does nothing outside one."""
    from edgeprof.measure.windows import phase

    return phase


def host_name(node_config: Mapping[str, Any]) -> str:
    """How this node appears in the report's ``host`` column (:func:`edgeprof.host.host_label` over the node
    config's name, :func:`edgeprof.flower.config.node_host`)."""
    return host_label(node_host(node_config) or None)


@functools.lru_cache(maxsize=2)
def node_compute(cfg: RunConfig):
    """This node's :class:`~edgeprof.nn.compute.Compute` before its execution plan
    (:func:`edgeprof.nn.compute.device_compute`): its device resolved (``auto``: here, once per process and run
    config) and checked, torch's threads and numerics set. The mod hands it to the profiler when it builds it and
    tells NVML its GPU; the node's runtime takes its plan from it (:func:`edgeprof.flower.client_app.runtime_for`)."""
    from edgeprof.nn.compute import device_compute

    return device_compute(cfg.device, cfg.threads, cfg.tf32)


def _node_compute(cfg_of: Callable[[Context], RunConfig], _msg: Message, context: Context):
    return node_compute(cfg_of(context))


def _node_meters(cfg_of: Callable[[Context], RunConfig], context: Context):
    """This node's meters: its energy settings, NVML told which GPU runs its rounds."""
    from edgeprof.session.run import open_meters

    cfg = cfg_of(context)
    return open_meters(cfg, node_compute(cfg).device)


def _node_energy(cfg_of: Callable[[Context], RunConfig], context: Context):
    return cfg_of(context).energy


def make_profile_mod(cfg_of: Callable[[Context], RunConfig],
                     prepare: Optional[Callable[[Message, Context], None]] = None,
                     after: Optional[Callable[[Message, Context, Message], None]] = None):
    """The mod; ``cfg_of(context)`` gives the run settings of this node (energy settings, compute device).

    ``prepare(msg, context)`` does the set-up a round needs (data, model, ONNX session, personal state) in
    its own ``setup`` window before the ``client`` window opens, so the round's ``wall_s`` and ``energy_j``
    cover the round alone; ``after(msg, context, reply)`` runs once the round's window is closed (the ``paper``
    protocol's local evaluation), unprofiled. The profiler synchronises the node's compute device
    (:func:`node_compute`) at every edge, the set-up window's included.
    """
    from edgeprof.flower.energy import profile_mod

    return profile_mod(functools.partial(_node_energy, cfg_of), functools.partial(_node_meters, cfg_of),
                       only=(MessageType.TRAIN,), window="client", prepare=prepare, after=after,
                       compute_of=functools.partial(_node_compute, cfg_of), metrics=False, startup=True)

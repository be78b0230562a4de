"""edgeprof on Flower: real multi-device federations where every device profiles its own rounds.

Optional: needs ``pip install 'edgeprof[flower]'``. No algorithm is named here: both apps drive the
algorithm contract of :mod:`edgeprof.algorithms.contract`; nothing outside this package imports flwr, and this
``__init__`` imports nothing, so ``import edgeprof`` stays free of Flower.

- :mod:`.config`      Flower run config <-> RunConfig, the Flower app folder (no flwr import)
- :mod:`.strategy`    the one strategy: sampling, reply validation, and the registered algorithm's
                      server program (the server-side driver of the algorithm contract)
- :mod:`.mod`         the mod that wraps each client round in the edgeprof Profiler
- :mod:`.client_app`  the ClientApp: partition from the node config, the registered algorithm's client
                      program, its declared personal state in ``context.state`` (the client-side driver)
- :mod:`.report`      the one server-side reporter: one report for the federation, written by the server
- :mod:`.server_app`  the ServerApp: roll call, strategy, report, final theta
- :mod:`.simulation`  many clients on one machine: ``flwr run`` against a local SuperLink in simulation mode
- :mod:`.superlink`   the life of that local SuperLink: free port, private FLWR_HOME, logs, stop, no leftovers
- :mod:`.loopback`    free ports and waiting for a listener on 127.0.0.1 (tests, benchmarks; no flwr import)

For a user's own Flower app (any ClientApp, Flower's stock strategies), importable from here:

- :mod:`.energy`      ``energy_mod()``: the mod that profiles every message a ClientApp handles
- :mod:`.report`      ``ProfiledStrategy``: wraps a strategy, writes one report for the federation
"""

_EXPORTS = {"energy_mod": "edgeprof.flower.energy", "ProfiledStrategy": "edgeprof.flower.report"}


def __getattr__(name: str):
    """``energy_mod`` and ``ProfiledStrategy``, imported (with flwr) only when asked for."""
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'edgeprof.flower' has no attribute {name!r}")

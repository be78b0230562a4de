"""edgeprof on Flower: real multi-device federations where every device profiles its own rounds.

Optional: needs ``pip install 'edgeprof[flower]'``; nothing outside this package imports flwr, and this
``__init__`` imports nothing, so ``import edgeprof`` stays free of Flower.

- :mod:`.config`      Flower run config <-> RunConfig, the Flower app folder (no flwr import)
- :mod:`.strategy`    one strategy per server step (PFLEGO's equation (4), the N_i-weighted averages,
                      FedRecon's FedOpt) for every registered algorithm, reply validation
- :mod:`.mod`         the mod that wraps each client round in the edgeprof Profiler
- :mod:`.client_app`  the ClientApp: partition from the node config, every algorithm's client round,
                      personal heads and models in ``context.state``
- :mod:`.report`      the reporting wrapper: one report for the federation, written by the server
- :mod:`.server_app`  the ServerApp: roll call, strategy, report, final theta
- :mod:`.simulation`  Flower's simulation engine for many clients on one machine
"""

"""The edgeprof ServerApp: roll call, the algorithm's strategy wrapped in the reporter, one report.

Order of work, as in :func:`edgeprof.rounds.simulate.run`: parse and validate the run config, check the
output folder, ask every connected node who it is (:func:`roll_call`), build the strategy and the
initial global model (the same seeded backbone as the in-process run), open this machine's meters;
only then create the CSV and the sidecar. The rounds are Flower's ``Strategy.start`` loop with the
round timeout of the run config; the final global arrays are saved next to the report as
``<run_id>.theta.npz`` (``arr_0``, ``arr_1``, ... in parameter order).

The sidecar gets a ``flower`` section: which node served which partition on which device, alpha_i's
denominator and where it came from, the nodes left out at the roll call (``alpha.refused``, with the reason),
per round the partitions sampled, accepted and rejected (with the reason), and - when the clients share a machine (Flower simulation, or several SuperNodes reporting the
same device) - the note that per-client energy is then attribution, not measurement.
"""

from __future__ import annotations

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # a Flower app is an entry point: before torch loads (edgeprof.host)

import functools
import logging
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from edgeprof.config import RunConfig
from edgeprof.flower.config import FlowerSettings, from_run_config
from edgeprof.flower.report import ProfiledStrategy, RunRows
from edgeprof.flower.node_checks import NodeLimits, RejectedReply, read_node_info
from edgeprof.flower.strategy import Directory, EdgeprofStrategy, make_strategy
from edgeprof.flower.strategy import initial_arrays as strategy_initial_arrays
from edgeprof.signals import stop_exception

log = logging.getLogger("edgeprof.flower")

SHARED_MACHINE_NOTE = (
    "clients share one machine ({why}): each client row's energy is the machine's energy during that "
    "client's window, an attribution, not a measurement of a separate device; concurrent clients are "
    "counted in each other's windows")


def _forward_logs_to_flower() -> None:
    """Show this package's log lines where Flower shows its own (the ServerApp's log stream)."""
    ours, flwr_logger = logging.getLogger("edgeprof.flower"), logging.getLogger("flwr")
    if not ours.handlers and flwr_logger.handlers:
        for handler in flwr_logger.handlers:
            ours.addHandler(handler)
        ours.setLevel(logging.INFO)
        ours.propagate = False


def roll_call(grid: Grid, cfg: RunConfig, settings: FlowerSettings, *, poll_s: float = 1.0) -> Directory:
    """Ask every connected node for its partition id, N_i, K_i and device, until all I partitions are
    served or ``node-wait`` seconds have passed (then the missing partitions count as absent clients).

    Each answer is checked (:func:`~edgeprof.flower.node_checks.read_node_info`, :meth:`Directory.add`); a node
    whose answer fails is left out of the run with one logged line (``flower.alpha.refused`` in the sidecar)
    and not asked again; with ``total-samples``, :meth:`Directory.enforce_total` then leaves out the largest
    claims until the N_i fit."""
    directory = Directory(cfg.clients, settings.total_samples)
    limits = NodeLimits.of(cfg, settings.total_samples)
    answered: set[int] = set()
    deadline = time.monotonic() + settings.node_wait_s
    while True:
        new = [n for n in grid.get_node_ids() if n not in answered]
        if new:
            messages = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in new]
            for reply in grid.send_and_receive(messages, timeout=settings.round_timeout_s):
                _answer(directory, limits, reply, answered)
        if len(directory.nodes) >= cfg.clients or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    directory.enforce_total()
    missing = directory.describe()["missing_partitions"]
    log.info("roll call: %d of %d partitions served%s", len(directory.nodes), cfg.clients,
             f"; missing {missing}" if missing else "")
    return directory


def _answer(directory: Directory, limits: NodeLimits, reply: Message, answered: set[int]) -> None:
    """Take one roll-call answer: a node that did not answer is asked again; one that did is registered or
    refused, and not asked again."""
    node = reply.metadata.src_node_id
    if reply.has_error():
        log.warning("node %d did not answer the roll call: %s", node, reply.error.reason)
        return
    answered.add(node)
    try:
        info = read_node_info(reply, limits)
    except RejectedReply as err:
        directory.refuse(node, f"roll call: {err}")
        return
    directory.add(info)


def initial_arrays(cfg: RunConfig, directory: Directory) -> list[np.ndarray]:
    """The global model of round 0 (:func:`edgeprof.flower.strategy.initial_arrays`, max_i K_i outputs)."""
    return strategy_initial_arrays(cfg, directory.num_outputs)


def shared_machine(settings: FlowerSettings, directory: Directory) -> Optional[str]:
    """Why the clients share a machine, or None when every client reported its own device."""
    if settings.simulation:
        return "Flower simulation"
    devices = [i.device for i in directory.nodes.values()]
    shared = sorted({d for d in devices if devices.count(d) > 1})
    return f"several SuperNodes report device {', '.join(shared)}" if shared else None


def flower_section(strategy: EdgeprofStrategy, settings: FlowerSettings) -> dict:
    why = shared_machine(settings, strategy.directory)
    rounds = {str(r): {"sampled": s, "accepted": strategy.accepted.get(r, []),
                       "rejected": [{"from": w, "reason": why_} for w, why_ in strategy.rejected.get(r, [])]}
              for r, s in strategy.sampled.items()}
    return {"strategy": type(strategy).__name__, "scale_I_over_r": strategy.scale,
            "alpha": strategy.directory.describe(), "round_timeout_s": settings.round_timeout_s,
            "missing_gradients": strategy.missing_replies, "simulation": settings.simulation,
            "shared_machine": why is not None, "energy_note": SHARED_MACHINE_NOTE.format(why=why) if why else "",
            "rounds": rounds}


class StopRequest:
    """A stop signal carried to a ServerApp that runs in a thread of its own, as Flower's simulation runs it
    (Python runs signal handlers in the main thread only, and a stop raised there would tear the simulation
    down under the ServerApp and leave its report ``running``).

    The main thread's handler calls :meth:`ask` with the signal; the server raises that stop at its next look
    at the grid (:meth:`watch`: every poll for replies and for nodes, every 0.1 s while it waits), so its
    report ends ``interrupted`` with every finished round, and the simulation then ends as after its last
    round; :meth:`raise_asked` raises the stop in the main thread, naming the report.
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)  # the run's output folder (its report is <out>/<run id>.csv)
        self.signum: Optional[int] = None
        self.report = None  # the server's report, once it has let go of it
        self.complete = False  # whether that report is whole (the run had ended before the stop was seen)

    def ask(self, signum: int, _frame=None) -> None:
        """Record the first stop signal (a signal handler: later ones change nothing)."""
        if self.signum is None:
            self.signum = signum

    def check(self) -> None:
        """Raise the stop asked for, if any (KeyboardInterrupt, or Terminated for SIGTERM and SIGHUP)."""
        if self.signum is not None:
            raise stop_exception(self.signum)

    def watch(self, grid: Grid) -> Grid:
        """``grid`` with :meth:`check` before each of its polls (the instance's methods, shadowed)."""
        for name in ("pull_messages", "get_node_ids"):
            setattr(grid, name, functools.partial(self._checked, getattr(grid, name)))
        return grid

    def _checked(self, method, *args, **kwargs):
        self.check()
        return method(*args, **kwargs)

    def raise_asked(self) -> None:
        """In the main thread, once the simulation has ended: raise the stop asked for, naming the report."""
        if self.signum is not None:
            stop = stop_exception(self.signum)
            stop.report, stop.report_complete = self.report, self.complete
            raise stop


def run_server(grid: Grid, run_config: Mapping[str, Any], defaults: Optional[Mapping[str, Any]] = None) -> str:
    """Run the federation the run config describes; returns the run id (report ``<out>/<run_id>.csv``)."""
    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.report.session import make_run_id, open_run
    from edgeprof.report.writer import check_writable
    from edgeprof.nn.compute import set_threads

    _forward_logs_to_flower()
    cfg, settings = from_run_config(run_config, defaults)
    out = check_writable(cfg.out)
    set_threads(cfg.threads)
    directory = roll_call(grid, cfg, settings)
    strategy = make_strategy(cfg, directory)
    theta0 = initial_arrays(cfg, directory)

    def finish(data: dict) -> dict:
        return {**data, "flower": flower_section(strategy, settings)}

    # the server step's device: synchronised at the server window's edges, its kind in the server rows
    with open_run(cfg, run_id=make_run_id(cfg), phases=ALGORITHMS[cfg.algo].phases, finish=finish,
                  runtime=strategy.runtime()) as session:
        final = theta0
        try:
            reporter = ProfiledStrategy(strategy, rows=RunRows(session.ctx, strategy))
            result = reporter.start(grid, ArrayRecord(theta0), num_rounds=cfg.rounds,
                                    timeout=settings.round_timeout_s)
            if result.arrays is not None and len(result.arrays) > 0:
                final = result.arrays.to_numpy_ndarrays()
            np.savez(out / f"{session.ctx.run_id}.theta.npz", *final)
        finally:
            session.done = len(strategy.accepted)
    log.info("edgeprof report: %s", session.csv_path)
    return session.ctx.run_id


def make_server_app(defaults: Optional[Mapping[str, Any]] = None, stop: Optional[StopRequest] = None) -> ServerApp:
    """The ServerApp; ``defaults`` (a run config) fills keys the run config lacks (simulation); ``stop``: how a
    signal the main thread receives reaches it (simulation, where it runs in a thread of its own)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        if stop is None:
            run_server(grid, context.run_config, defaults)
            return
        try:
            run_id = run_server(stop.watch(grid), context.run_config, defaults)
        except KeyboardInterrupt as err:
            if stop.signum is None:
                raise
            stop.report = getattr(err, "report", None)  # recorded as interrupted; the main thread says so
        else:
            stop.report, stop.complete = stop.out / f"{run_id}.csv", True

    return app


app = make_server_app()

"""The edgeprof ServerApp: roll call, the algorithm's strategy wrapped in the reporter, one report.

Order of work, as in :func:`edgeprof.rounds.simulate.run`: parse and validate the run config, check the
output folder, ask every connected node who it is (:func:`roll_call`), build the strategy and the
initial global model (the same seeded backbone as the in-process run), open this machine's meters;
only then create the CSV and the sidecar. The rounds are Flower's ``Strategy.start`` loop with the
round timeout of the run config; the final global arrays are saved next to the report as
``<run_id>.theta.npz`` (``arr_0``, ``arr_1``, ... in parameter order).

Failing loudly: a run that no node serves after the roll call (:func:`unserved`: every node refused, or none
answered within ``node-wait``) runs no round; its report is the sidecar, ``failed`` with the one-line reason, and
the ServerApp raises :class:`NoNodeError`, which Flower's runtime logs as one line (:class:`_OneLineFailure`) and
ends with a non-zero exit and a failed run. A node's own refusal (``edgeprof: ...``, its ClientApp's
:func:`~edgeprof.flower.client_app.refuse_in_one_line`) leaves it out at once. As the rounds begin, the log says where
the report is and that a stop keeps it as interrupted (:data:`STOP_NOTE`).

The sidecar gets a ``flower`` section: which node served which partition on which host, alpha_i's
denominator and where it came from, which data each node trains on (``alpha.nodes.<i>.data``), the nodes left out
at the roll call (``alpha.refused``, with the reason), per round the partitions sampled, accepted and rejected (with
the reason), and - when the clients share a machine (Flower simulation, or several SuperNodes reporting the same
host) - the note that per-client energy is then attribution, not measurement.
"""

from __future__ import annotations

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # a Flower app is an entry point: before torch loads (edgeprof.host)

import contextlib
import functools
import logging
import os
import signal
import threading
import time
from typing import Any, Iterator, Mapping, Optional

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from edgeprof.config import RunConfig
from edgeprof.errors import EdgeprofError
from edgeprof.flower.config import FlowerSettings, from_run_config
from edgeprof.flower.report import ProfiledStrategy, RunRows
from edgeprof.flower.node_checks import NodeLimits, RejectedReply, read_node_info
from edgeprof.flower.strategy import Directory, EdgeprofStrategy, make_strategy, server_threads

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


class _OneLineFailure(logging.Filter):
    """On Flower's logger: the record Flower's runtime writes when the ServerApp raises ("ServerApp raised an
    exception", with the traceback) becomes one line when what it raised is an
    :class:`~edgeprof.errors.EdgeprofError` (no node serves a partition, a run config edgeprof refuses). The runtime
    still marks the run failed and exits non-zero."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if isinstance(err, EdgeprofError):
            record.msg, record.args = "ServerApp failed: edgeprof: %s: %s", (type(err).__name__, err)
            record.exc_info, record.exc_text = None, None
        return True


def _one_line_failures() -> None:
    """Install :class:`_OneLineFailure` on Flower's logger, once per process."""
    flwr_logger = logging.getLogger("flwr")
    if not any(isinstance(f, _OneLineFailure) for f in flwr_logger.filters):
        flwr_logger.addFilter(_OneLineFailure())


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
        reason = " ".join(str(reply.error.reason).split())
        if not reason.startswith(REFUSAL_PREFIX):  # no answer (a crash, a node gone): asked again
            log.warning("node %d did not answer the roll call: %s", node, reason)
            return
        answered.add(node)  # the node's own refusal (refuse_in_one_line): it would refuse again
        directory.refuse(node, f"the node refused the roll call: {reason}")
        return
    answered.add(node)
    try:
        info = read_node_info(reply, limits)
    except RejectedReply as err:
        directory.refuse(node, f"roll call: {err}")
        return
    directory.add(info)


#: the ServerApp's log line as the rounds begin: where the report is, and what a stop leaves of it. Said before any
#: stop, as after ``flwr stop`` the SuperLink takes no more log lines of the run
STOP_NOTE = ("edgeprof: report %s: a row is written as each round ends; a stop (flwr stop, a signal) keeps every "
             "finished round, the sidecar recorded interrupted")

#: how a node's own refusal begins (:func:`edgeprof.flower.client_app.refuse_in_one_line`)
REFUSAL_PREFIX = "edgeprof: "


class NoNodeError(EdgeprofError):
    """No node serves a partition of the run after the roll call: the run ends failed, before round 1."""


class SuperLinkLost(EdgeprofError):
    """The SuperLink stopped answering the ServerApp for longer than the round timeout: the run ends failed, with
    every round it finished."""


class SuperLinkGone(BaseException):
    """The ServerApp's parent process (the SuperLink, or the SuperExec that started the ServerApp) ended under the
    run. Raised in the main thread from Flower's stop (:func:`parent_watch`), before Flower's force exit can cut the
    process off; a BaseException, so that Flower's exit handlers do not swallow it, and so that it unwinds the run
    (its report ends ``failed``, with this reason). :func:`make_server_app` hands it to Flower as
    :class:`SuperLinkLost`."""


@contextlib.contextmanager
def parent_watch() -> Iterator[None]:
    """Within the block (the ServerApp's main thread, in a process of its own), Flower's stop tells a parent that
    went away from an operator's stop.

    Flower's ServerApp process watches its parent's pid and, once it is gone, raises SIGINT in itself: Flower's
    exit then starts a 5 s force exit (``os._exit``) and pushes its logs and status to the SuperLink that is gone
    (up to 6 s), so the process was killed before the stop reached the run and its sidecar stayed ``running``.
    This check is one of Flower's exit handlers that run before the force exit starts: if the process's parent is
    no longer the one it started under (an orphan is handed to another parent as its own ends), it raises
    :class:`SuperLinkGone`, which ends the run at once. A stop the operator asked for (``flwr stop``, a signal to
    the process) leaves the parent as it was and goes on to Flower's own exit (``SystemExit(0)``: interrupted).

    Flower's SIGINT is raised in its watch thread, and Python runs a signal's handler in the main thread only
    when that thread next runs Python code: a main thread blocked in a wait (Flower's push of a round's messages
    waits, with no timeout, on a pool whose calls retry a lost SuperLink for up to the round timeout) took the
    stop only after it (seen: 20 to 27 s). So, once the parent is gone, :func:`wake_main_thread` interrupts the
    main thread's wait every :data:`WAKE_EVERY_S` until the stop is taken."""
    from flwr.supercore.exit import add_exit_handler

    parent, watching = os.getppid(), [True]

    def check() -> None:
        if watching[0] and os.getppid() != parent:
            watching[0] = False
            raise SuperLinkGone(f"the SuperLink went away: the ServerApp's parent process (pid {parent}: the "
                                "SuperLink, or the SuperExec that started the ServerApp) ended; the report keeps "
                                "every finished round")

    add_exit_handler(check, run_before_force_exit=True)
    previous = signal.signal(WAKE_SIGNAL, _woken)
    threading.Thread(target=wake_main_thread, args=(parent, watching, threading.main_thread().ident), daemon=True,
                     name="edgeprof-parent-wake").start()
    try:
        yield
    finally:
        watching[0] = False
        signal.signal(WAKE_SIGNAL, signal.SIG_DFL if previous is None else previous)  # None: set outside Python


#: the signal that wakes the main thread: its handler does nothing, its arrival interrupts the thread's wait so that
#: Python runs the handlers that are pending (Flower's stop); ignored by default, so one that comes late is harmless
WAKE_SIGNAL = signal.SIGURG
#: once the parent is gone, the main thread is woken this often, for at most WAKE_FOR_S
WAKE_EVERY_S, WAKE_FOR_S = 0.1, 10.0


def _woken(signum: int, frame: Any) -> None:
    """:data:`WAKE_SIGNAL`'s handler: nothing to do; its arrival is the point."""


def wake_main_thread(parent: int, watching: list[bool], main: int) -> None:
    """A thread's loop: once ``parent`` no longer exists (the test Flower's own watch makes before it raises its
    stop), send :data:`WAKE_SIGNAL` to the ``main`` thread every :data:`WAKE_EVERY_S` until the watch ends (the
    stop was taken: ``watching[0]`` is False), for at most :data:`WAKE_FOR_S`. A parent left a zombie still exists:
    Flower raises no stop, and the round timeout ends the run (:func:`bound_retries`)."""
    while watching[0] and _pid_exists(parent):
        time.sleep(WAKE_EVERY_S)
    deadline = time.monotonic() + WAKE_FOR_S
    while watching[0] and time.monotonic() < deadline:
        signal.pthread_kill(main, WAKE_SIGNAL)
        time.sleep(WAKE_EVERY_S)


def _pid_exists(pid: int) -> bool:
    """Flower's test of its ServerApp's parent (``flwr.supercore.app_utils``): any error of ``kill(pid, 0)`` is a
    process gone."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def bound_retries(grid: Grid, seconds: float) -> tuple[type[BaseException], ...]:
    """Make the grid give up a call the SuperLink has not answered for ``seconds``; the errors it then raises.

    A deployed ServerApp's grid (Flower's ``HttpGrid``) retries a call that reaches no SuperLink for ever: a
    SuperLink that crashed, or was killed alone, left the ServerApp's process waiting for good and its report
    ``running``. Its retry invoker takes a ``max_time``, as Flower's own runtime bounds it on exit (``max_tries =
    1``). A grid without one (the simulation's in-memory grid, which has no link to lose) is left as it is: ()."""
    invoker = getattr(grid, "_retry_invoker", None)
    if invoker is None or not hasattr(invoker, "max_time"):
        return ()
    invoker.max_time = seconds if invoker.max_time is None else min(invoker.max_time, seconds)
    errors = invoker.recoverable_exceptions
    return tuple(errors) if isinstance(errors, tuple) else (errors,)


@contextlib.contextmanager
def link_lost_after(seconds: float, errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """A retried call the grid gave up (:func:`bound_retries`) as :class:`SuperLinkLost`, in one line. An error
    that carries the SuperLink's answer (an HTTP status) is its own, and passes as it is."""
    try:
        yield
    except errors as err:
        if getattr(err, "response", None) is not None:
            raise
        raise SuperLinkLost(f"the SuperLink stopped answering: no reply to the ServerApp for {seconds:g} s "
                            f"(--round-timeout) ({type(err).__name__}: {' '.join(str(err).split()) or 'no detail'})"
                            "; the report keeps every finished round") from err


def unserved(cfg: RunConfig, settings: FlowerSettings, directory: Directory) -> Optional[str]:
    """Why the run cannot start, in one line, or None: it fails when no node serves any of its partitions after the
    roll call (fewer nodes than a round samples is a run that goes on, each missing reply handled as the algorithm
    declares). The line names what the nodes said: the first refusal and how many there were, else that none
    answered."""
    if directory.nodes:
        return None
    head = f"no node serves any of the {cfg.clients} partitions after node-wait {settings.node_wait_s:g} s"
    if directory.refused:
        node, why = directory.refused[0]
        more = f" (and {len(directory.refused) - 1} more)" if len(directory.refused) > 1 else ""
        return f"{head}: {len(directory.refused)} node(s) left out, node {node}: {why}{more}"
    return (f"{head}: no node answered the roll call; check that each SuperNode connects to this SuperLink and "
            f"that its num-partitions matches the run's clients ({cfg.clients})")


def initial_arrays(strategy: EdgeprofStrategy) -> list[np.ndarray]:
    """The global model of round 0, as the in-process driver builds it (``AlgorithmSpec.init_global``), on the
    server's one runtime (``strategy.runtime()``, max_i K_i outputs: its backbone and Compute built once, so
    ``--execution calibrate`` calibrates once)."""
    return strategy.spec.init_global(strategy.runtime())


def shared_machine(settings: FlowerSettings, directory: Directory) -> Optional[str]:
    """Why the clients share a machine, or None when every client reported its own host."""
    if settings.simulation:
        return "Flower simulation"
    hosts = [i.host for i in directory.nodes.values()]
    shared = sorted({h for h in hosts if hosts.count(h) > 1})
    return f"several SuperNodes report host {', '.join(shared)}" if shared else None


def flower_section(strategy: EdgeprofStrategy, settings: FlowerSettings,
                   flagged: Optional[Mapping[int, list]] = None) -> dict:
    """The sidecar's ``flower`` section; ``flagged``: the reporter's profiles with cells left out, per round."""
    why = shared_machine(settings, strategy.directory)
    rounds = {str(r): {"sampled": s, "accepted": strategy.accepted.get(r, []),
                       "rejected": [{"from": w, "reason": why_} for w, why_ in strategy.rejected.get(r, [])],
                       "profiles_flagged": list((flagged or {}).get(r, []))}
              for r, s in strategy.sampled.items()}
    return {"strategy": type(strategy).__name__, "scale_I_over_r": strategy.scale,
            "alpha": strategy.directory.describe(), "round_timeout_s": settings.round_timeout_s,
            "missing_gradients": strategy.missing_replies, "simulation": settings.simulation,
            "shared_machine": why is not None, "energy_note": SHARED_MACHINE_NOTE.format(why=why) if why else "",
            "rounds": rounds}


class StopRequest:
    """Flower's stop carried to a ServerApp that runs in a thread of its own, as Flower's simulation runs it (the
    ``flwr-simulation`` process runs the virtual clients in its main thread).

    ``flwr stop``, or a stop signal to that process, makes Flower's runtime exit from its main thread
    (``sys.exit(0)`` after its exit handlers), which a ServerApp in another thread never sees: it would be cut
    off with its report ``running``. :meth:`ask` is one of those exit handlers (:meth:`serving`; run before
    Flower's force-exit timer starts): it records the stop and waits, at most ``wait_s`` seconds, until the server
    has let go of its report. The server raises the stop at its next look at the grid (:meth:`watch`: every poll
    for replies and for nodes, every 0.1 s while it waits) as the ``SystemExit(0)`` that Flower's runtime raises
    under a ServerApp in a process of its own, so its report ends ``interrupted`` with every finished round, as a
    deployed run's does (:func:`edgeprof.session.run.ending`).

    The stop reaches the server, too, when the process exits without running Flower's exit handlers. Flower
    puts the default handlers back at the first stop signal, so a second one that lands before its exit handlers
    run (``flwr stop``'s own SIGINT, sent at the runtime's next heartbeat, beside the command's) is a
    KeyboardInterrupt that ends the main thread. The interpreter then joins the other threads, first those of
    Flower's client pool, one of which may wait for ever for a client's reply from Ray; and this thread would
    wait for replies that never come (before: the report stayed ``running`` until the runtime was killed, a
    minute later). So :meth:`ask` is also one of the interpreter's thread-exit calls, run in the main thread
    before it joins those threads (``threading._register_atexit``, as :mod:`concurrent.futures` uses), and
    :meth:`check` raises the stop once the main thread has ended.
    """

    def __init__(self, wait_s: float = 60.0) -> None:
        self.wait_s = wait_s
        self.asked = threading.Event()
        self.closed = threading.Event()  # the server has let go of its report (or never opened one)

    def ask(self) -> None:
        """Record the stop; return once the server has let go of its report, or after ``wait_s`` seconds."""
        self.asked.set()
        self.closed.wait(self.wait_s)

    def check(self) -> None:
        """Raise the stop asked for, if any, or the process's exit once its main thread has ended:
        ``SystemExit(0)``, the exit Flower's runtime asked for."""
        if not self.asked.is_set() and not threading.main_thread().is_alive():
            self.asked.set()
        if self.asked.is_set():
            raise SystemExit(0)

    def watch(self, grid: Grid) -> Grid:
        """``grid`` with :meth:`check` before each of its polls (the instance's methods, shadowed)."""
        for name in ("pull_messages", "get_node_ids"):
            setattr(grid, name, functools.partial(self._checked, getattr(grid, name)))
        return grid

    def _checked(self, method, *args, **kwargs):
        self.check()
        return method(*args, **kwargs)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Within the block the server runs: :meth:`ask` is one of Flower's exit handlers and one of the
        interpreter's thread-exit calls; at its end, however it ends, the server has let go of its report."""
        from flwr.supercore.exit import add_exit_handler

        add_exit_handler(self.ask, run_before_force_exit=True)
        register = getattr(threading, "_register_atexit", None)  # CPython 3.9 and later
        if register is not None:
            with contextlib.suppress(RuntimeError):  # the interpreter is already ending: check() sees it
                register(self.ask)
        try:
            yield
        finally:
            self.closed.set()


def run_server(grid: Grid, run_config: Mapping[str, Any], defaults: Optional[Mapping[str, Any]] = None) -> str:
    """Run the federation the run config describes; returns the run id (report ``<out>/<run_id>.csv``)."""
    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.session.run import make_run_id, open_run
    from edgeprof.report.writer import check_writable
    from edgeprof.nn.compute import set_threads

    _forward_logs_to_flower()
    cfg, settings = from_run_config(run_config, defaults)
    out = check_writable(cfg.out)
    threads = server_threads(cfg)
    if threads != cfg.threads:
        log.warning("edgeprof: the server step runs on this machine's %d cores: the run's threads (%d, each "
                    "device's unless its node config says) are more", threads, cfg.threads)
    set_threads(threads)
    lost = functools.partial(link_lost_after, settings.round_timeout_s,
                             bound_retries(grid, settings.round_timeout_s))
    with lost():
        directory = roll_call(grid, cfg, settings)
    shared = shared_machine(settings, directory)
    if shared is not None:  # said as the run starts, where `flwr run --stream` and `flwr log` show it
        log.warning("edgeprof: energy: %s", SHARED_MACHINE_NOTE.format(why=shared))
    strategy = make_strategy(cfg, directory)

    reporters: list[ProfiledStrategy] = []

    def finish(data: dict) -> dict:
        return {**data, "flower": flower_section(strategy, settings, reporters[0].flagged if reporters else None)}

    why = unserved(cfg, settings, directory)
    if why is not None:  # the report says so, failed with the reason, and the ServerApp exits non-zero
        with open_run(cfg, run_id=make_run_id(cfg), phases=ALGORITHMS[cfg.algo].phases, finish=finish) as session:
            log.error("edgeprof: the run failed: %s; report %s (failed)", why, session.csv_path)
            raise NoNodeError(why)
    theta0 = initial_arrays(strategy)
    # the server step's device: synchronised at the server window's edges, its kind in the server rows
    with open_run(cfg, run_id=make_run_id(cfg), phases=ALGORITHMS[cfg.algo].phases, finish=finish,
                  runtime=strategy.runtime()) as session:
        log.info(STOP_NOTE, session.csv_path)
        final = theta0
        try:
            reporter = ProfiledStrategy(strategy, rows=RunRows(session.ctx, strategy))
            reporters.append(reporter)
            with lost():
                result = reporter.start(grid, ArrayRecord(theta0), num_rounds=cfg.rounds,
                                        timeout=settings.round_timeout_s)
            if result.arrays is not None and len(result.arrays) > 0:
                final = result.arrays.to_numpy_ndarrays()
            np.savez(out / f"{session.ctx.run_id}.theta.npz", *final)
        finally:
            session.done = len(strategy.accepted)
    log.info("edgeprof report: %s", session.csv_path)
    return session.ctx.run_id


def make_server_app() -> ServerApp:
    """The ServerApp. In a process of its own (a deployment) Flower's runtime stops it with ``sys.exit(0)`` under the
    rounds; in a thread of Flower's simulation process that stop is carried to it by a :class:`StopRequest`."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        _one_line_failures()
        if threading.current_thread() is threading.main_thread():
            try:
                with parent_watch():
                    run_server(grid, context.run_config)
            except SuperLinkGone as err:  # the report says failed; Flower logs one line and exits non-zero
                raise SuperLinkLost(str(err)) from None
            return
        stop = StopRequest()
        with stop.serving():
            try:
                run_server(stop.watch(grid), context.run_config)
            except SystemExit:  # the stop, recorded as interrupted: the thread ends as after its last round
                if not stop.asked.is_set():
                    raise

    return app


app = make_server_app()

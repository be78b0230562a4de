"""A Flower SuperLink in simulation mode on this machine, owned by the command that starts it.

Flower's supported way to run many clients on one machine (flwr 1.40 and later) is ``flwr run <app> <superlink>``
against a SuperLink started with ``--simulation``: the SuperLink starts a ``flower-superexec``, which starts one
``flwr-simulation`` process per run; that process runs the app's ServerApp in a thread and its ClientApp on virtual
SuperNodes (Ray). :class:`LocalSuperLink` owns that runtime for the length of one command:

- a private ``FLWR_HOME`` in a temporary folder (the user's ``~/.flwr`` is neither read nor written), holding the one
  connection :data:`CONNECTION` (insecure: loopback only) and the apps Flower installs per run; it is the runtime's
  ``TMPDIR`` and ``RAY_TMPDIR`` too, so Ray's session files and whatever the processes leave in a temporary folder
  go with it;
- the SuperLink on 127.0.0.1, on a port that is free when it starts (since flwr 1.40 its Runtime, Control and Fleet
  APIs share that one HTTP address; the gRPC APIs on fixed ports stay off), tried again on another port when it
  cannot bind; the app's dependencies are not installed per run (``--disable-runtime-dependency-installation``: the
  app is edgeprof's own, installed here); its output goes to ``<logs>/superlink.log``;
- :meth:`run`: ``flwr run <app> edgeprof --stream`` with the federation config (``num-supernodes``,
  ``client-resources-num-cpus``, ...), its output (the run's log stream) to ``<logs>/run.log`` and to ``echo``, the
  run id read from its ``Successfully started run`` line; :meth:`stop`: SIGINT to the simulation process (its
  ServerApp closes its report), then ``flwr stop <run id>``, Flower's own stop of the run;
- :meth:`close`: the runs' ``flwr`` processes and the SuperLink are ended (SIGTERM, then SIGKILL), then every process
  of the runtime that is left (each carries :data:`MARK` with this runtime's own token in its environment, Flower's
  and Ray's alike: SIGINT, Flower's own stop signal, then SIGTERM, then SIGKILL), then the temporary folder is
  removed.

Every process starts in a session of its own, so a Ctrl-C in the terminal reaches the command alone, which stops
the run with Flower's stop. Standard library and psutil only: flwr runs in the processes started here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Mapping, Optional, TextIO

from edgeprof.errors import ConfigError, EdgeprofError, OutputError
from edgeprof.flower.loopback import HOST, free_ports

#: the environment variable that marks every process of a runtime with that runtime's token
MARK = "EDGEPROF_FLOWER_RUNTIME"
#: the name of the runtime's one SuperLink connection in its private FLWR_HOME
CONNECTION = "edgeprof"
#: environment switches that would make a SuperLink open gRPC APIs of its own on fixed ports
_FIXED_PORT_SWITCHES = ("FLWR_INTERNAL_GRPC_CONTROL_API", "FLWR_INTERNAL_GRPC_FLEET_API")
_STARTED = re.compile(r"Successfully started run (\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _toml(value: object) -> str:
    """A federation-config value as ``flwr run --federation-config`` reads it (TOML): 1, 0.25, true, "ray"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, (int, float)) else json.dumps(str(value))


class FlowerRuntimeError(EdgeprofError):
    """Flower's runtime on this machine could not be started; the message names its log (exit 1)."""


def _end(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM ``process``, and SIGKILL it after ``grace_s`` seconds if it still runs; reap it."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()


def marked(token: str, key: str = MARK) -> list:
    """The live processes (psutil) whose environment holds ``key=token``: a runtime's processes, wherever they
    were started from (Ray's workers are started by Ray's raylet, not by anything started here)."""
    import psutil

    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.pid != os.getpid() and process.environ().get(key) == token and \
                    process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def _end_marked(token: str, grace_s: float) -> None:
    """End the processes marked with ``token``: those that do not end within ``grace_s`` seconds by themselves get
    SIGINT (Flower's own stop signal: a simulation process then closes its ServerApp's report and shuts Ray down),
    then SIGTERM, then SIGKILL, a few seconds apart."""
    import psutil

    deadline = time.monotonic() + grace_s
    while (left := marked(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for sig, wait_s in ((signal.SIGINT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if not left:
            return
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while (left := marked(token)) and time.monotonic() < deadline:
            time.sleep(0.1)


def _wait_gone(processes: list, timeout_s: float, done: Optional[Callable[[], bool]] = None) -> None:
    """Wait at most ``timeout_s`` seconds until none of ``processes`` (psutil) runs, or ``done()`` is true; one that
    has exited but is not yet reaped by its parent (a zombie) has ended."""
    import psutil

    def running(process) -> bool:
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout_s
    while any(running(p) for p in processes) and time.monotonic() < deadline and not (done and done()):
        time.sleep(0.1)


def _simulations(token: str) -> list:
    """The runtime's ``flwr-simulation`` processes (each runs one run's ServerApp and its virtual clients)."""
    import psutil

    found = []
    for process in marked(token):
        with contextlib.suppress(psutil.Error):
            if any(Path(part).name == "flwr-simulation" for part in process.cmdline()[:2]):
                found.append(process)
    return found


class FlowerRun:
    """A ``flwr run --stream`` process: its output copied line by line (colours stripped) to its log file and to
    ``echo``; :attr:`run_id` once Flower has said it."""

    def __init__(self, process: subprocess.Popen, log_path: Path, echo: Optional[TextIO]) -> None:
        self.process = process
        self.run_id: Optional[str] = None
        self.started = threading.Event()
        self._log = open(log_path, "a", encoding="utf-8")
        self._echo = echo
        self._reader = threading.Thread(target=self._copy, name="flwr-run-log", daemon=True)
        self._reader.start()

    def _copy(self) -> None:
        try:
            for raw in self.process.stdout:
                self.note(_ANSI.sub("", raw.decode("utf-8", "replace")))
        finally:
            self.started.set()  # nobody waits for a run id that will never come

    def note(self, text: str) -> None:
        """Add ``text`` to the run's log (and to ``echo``)."""
        with contextlib.suppress(OSError, ValueError):
            self._log.write(text)
            self._log.flush()
        if self._echo is not None:
            with contextlib.suppress(OSError, ValueError):
                self._echo.write(text)
                self._echo.flush()
        if self.run_id is None and (found := _STARTED.search(text)):
            self.run_id = found.group(1)
            self.started.set()

    def wait(self) -> int:
        """Wait for the run to end (``flwr run --stream`` returns once the run's log stream has ended)."""
        code = self.process.wait()
        self._reader.join(10)
        return code

    def close(self, grace_s: float = 5.0) -> None:
        _end(self.process, grace_s)
        self._reader.join(5)
        with contextlib.suppress(OSError):
            self._log.close()


class LocalSuperLink:
    """A SuperLink in simulation mode on the loopback, started by :meth:`start` and ended, with every process and
    file of its runtime, by :meth:`close` (also as a context manager). ``logs``: the folder of its logs;
    ``echo``: where the runs' log lines are shown too (None: only in ``<logs>/run.log``)."""

    def __init__(self, logs: Path, *, echo: Optional[TextIO] = None, start_timeout_s: float = 120.0) -> None:
        self.logs = Path(logs)
        self.echo = echo
        self.start_timeout_s = start_timeout_s
        self.token = secrets.token_hex(8)
        self.root: Optional[Path] = None  # the temporary folder: FLWR_HOME, Ray's session files, the app
        self.port: Optional[int] = None
        self.process: Optional[subprocess.Popen] = None
        self.runs: list[FlowerRun] = []
        self.env: dict = {}

    def __enter__(self) -> "LocalSuperLink":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _program(self, name: str) -> str:
        found = shutil.which(name, path=self.env["PATH"])
        if found is None:
            raise ConfigError(f"flower-simulate needs Flower's program {name}, which is not on PATH: "
                              "pip install 'edgeprof[flower]'")
        return found

    def _environment(self) -> dict:
        """The runtime's environment: this one, with the mark, the private FLWR_HOME, the temporary folder as the
        processes' own (``TMPDIR``: what Ray, Flower and ONNX Runtime leave there goes with it), this interpreter's
        scripts first on PATH (as an activated environment has them), the loopback never proxied."""
        env = {k: v for k, v in os.environ.items() if k not in _FIXED_PORT_SWITCHES}
        scripts = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
        no_proxy = ",".join(p for p in (HOST, "localhost", os.environ.get("NO_PROXY", "")) if p)
        env.update({MARK: self.token, "FLWR_HOME": str(self.root / "flwr-home"), "RAY_TMPDIR": str(self.root),
                    "TMPDIR": str(self.root),
                    "FLWR_DISABLE_UPDATE_CHECK": "1", "PYTHONUNBUFFERED": "1", "NO_PROXY": no_proxy,
                    "no_proxy": no_proxy, "PATH": os.pathsep.join([*scripts, os.environ.get("PATH", "")])})
        return env

    def start(self) -> None:
        """Start the SuperLink on a free loopback port and wait until it answers; FlowerRuntimeError (naming its
        log) when it cannot start, OutputError when the log folder cannot be written."""
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputError(f"cannot write Flower's logs to {self.logs}: {err.strerror or err}") from err
        self.root = Path(tempfile.mkdtemp(prefix="edgeprof-"))
        self.env = self._environment()
        superlink = self._program("flower-superlink")
        self._program("flwr")
        home = self.root / "flwr-home"
        home.mkdir()
        log_path = self.logs / "superlink.log"
        for attempt in range(3):  # a port taken between its choice and the SuperLink's bind: another one
            [port] = free_ports(1)
            (home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                                              f'address = "{HOST}:{port}"\ninsecure = true\n')
            with open(log_path, "w" if attempt == 0 else "a", encoding="utf-8") as log:
                self.process = subprocess.Popen(
                    [superlink, "--insecure", "--simulation", "--host", HOST, "--port", str(port),
                     "--disable-runtime-dependency-installation"], stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
            if self._ready(port):
                self.port = port
                return
            if self.process.poll() is None:
                break
        raise FlowerRuntimeError(f"Flower's SuperLink did not start within {self.start_timeout_s:g} s (exit "
                                 f"{self.process.poll()}); its log: {log_path}")

    def _ready(self, port: int) -> bool:
        """Whether the SuperLink answers on ``port`` (its health endpoint) before it exits or the time is up."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(OSError):
                with opener.open(f"http://{HOST}:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return True
            time.sleep(0.2)
        return False

    def run(self, app: Path, federation: Mapping[str, object]) -> FlowerRun:
        """Submit the app folder ``app`` with the federation config ``federation`` (``flwr run --stream``)."""
        args = [self._program("flwr"), "run", str(app), CONNECTION, "--stream"]
        for key, value in federation.items():
            args += ["--federation-config", f"{key}={_toml(value)}"]
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   env=self.env, start_new_session=True)
        run = FlowerRun(process, self.logs / "run.log", self.echo)
        self.runs.append(run)
        return run

    def stop(self, run: FlowerRun, wait_s: float = 60.0, *, done: Optional[Callable[[], bool]] = None) -> None:
        """Stop ``run``: SIGINT to the runtime's simulation processes, Flower's own stop signal (its ServerApp
        closes its report as interrupted); once they have ended, or ``done()`` says what they had to do is done,
        or after ``wait_s`` seconds, Flower's own stop of the run, ``flwr stop <run id>`` (once the run has an
        id), which ends it at the SuperLink; then wait at most ``wait_s`` seconds for the ``flwr run`` process.

        The signal comes first. After ``flwr stop`` the runtime sends the simulation process a SIGINT of its own,
        at its next heartbeat (up to half a minute later), and Flower's handler takes only the first stop signal:
        the default handler is back after it, so a second one that lands while the process ends is a
        KeyboardInterrupt, under which Ray's shutdown can end the process before its ServerApp has closed the
        report (seen in CI: the report stayed ``running``)."""
        import psutil

        simulations = _simulations(self.token)
        for process in simulations:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGINT)
        _wait_gone(simulations, wait_s, done)
        if run.process.poll() is None:
            run.started.wait(min(wait_s, 15.0))  # a run being submitted gets its id in a moment
        if run.run_id is not None:
            try:
                answer = subprocess.run([self._program("flwr"), "stop", run.run_id, CONNECTION],
                                        stdin=subprocess.DEVNULL, capture_output=True, env=self.env,
                                        timeout=wait_s, start_new_session=True)
                run.note(_ANSI.sub("", (answer.stdout + answer.stderr).decode("utf-8", "replace")))
            except subprocess.TimeoutExpired:
                run.note(f"flwr stop {run.run_id} did not return within {wait_s:g} s\n")
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.process.wait(wait_s)

    def close(self) -> None:
        """End the runs' ``flwr`` processes, the SuperLink and every process left of the runtime, then remove the
        temporary folder. Safe to call more than once."""
        for run in self.runs:
            run.close()
        if self.process is not None:
            _end(self.process, 10.0)
        _end_marked(self.token, grace_s=3.0)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

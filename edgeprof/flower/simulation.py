"""Many clients on one machine with Flower's simulation runtime: ``flwr run`` against a SuperLink in simulation mode.

The app is the one ``edgeprof flower-app-dir`` writes and a deployment runs (:func:`~edgeprof.flower.config.write_app_dir`:
components ``edgeprof.flower.server_app:app`` and ``edgeprof.flower.client_app:app``, every setting in
``[tool.flwr.app.config]``, read from ``context.run_config``), written into a temporary folder and submitted to a
SuperLink this command starts and ends (:class:`~edgeprof.flower.superlink.LocalSuperLink`: free loopback port,
private ``FLWR_HOME``, its logs and the run's log stream in ``<out>/<run id>.flower/``). The simulation's settings are
Flower's federation config (:func:`federation_config`): ``num-supernodes`` = the clients, the CPUs and GPUs each
virtual client reserves, the CPUs of the whole Ray instance. Flower gives every virtual SuperNode ``partition-id``
and ``num-partitions`` in its node config, so client i loads the partition of ``edgeprof measure``'s client i. The
run config carries ``simulation = true``, and the report's sidecar then says that the clients shared the machine:
per-client energy in such a report is the machine's energy during each client's window - attribution, not
measurement - and clients that run concurrently are counted in each other's windows.

The run's name is decided here (``--run-name``, else a new run id), so the report is ``<out>/<run id>.csv``; once
the runtime has ended, the command ends as the ServerApp's sidecar says the run ended (:func:`run_outcome`). A stop
(Ctrl-C, SIGTERM, SIGHUP) is Flower's own: SIGINT to the simulation's process, whose ServerApp, in a thread there,
closes its report as interrupted with every finished round (:class:`~edgeprof.flower.server_app.StopRequest`),
then ``flwr stop <run id>`` (:meth:`~edgeprof.flower.superlink.LocalSuperLink.stop` says why in that order); a
report that process left ``running`` is closed by the command (:func:`close_abandoned`), and the command exits
with 128 + the signal.

CPUs and GPUs: Flower's simulation reserves whole CPUs per client (``client-resources-num-cpus`` takes integers,
:func:`whole_cpus`) and any share of a GPU. Ray shows each virtual client only the GPUs it reserves, numbered from
0, and hides every GPU from a client that reserves none. So the device is decided once, here (``auto`` resolved on
this machine), and a run on CUDA reserves one GPU per client unless ``client_gpus`` says otherwise (a fraction such
as 0.25 lets four clients share one); :func:`client_gpus_for` refuses what Ray would break, and
:func:`edgeprof.nn.compute.check_usable` (the check ``measure`` makes) a device this machine cannot run rounds on,
both before the runtime starts.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError, ReportError, require
from edgeprof.flower.config import FlowerSettings, to_run_config

log = logging.getLogger("edgeprof")


def whole_cpus(value: Any, what: str = "--client-cpus") -> int:
    """A number of CPUs as Flower's simulation takes it: a whole number >= 1 (``1``, ``2.0``); ConfigError with one
    line otherwise, saying why for a fraction (Flower reserves whole CPUs per client)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if number and value > 0 and value != int(value):
        raise ConfigError(f"{what} {value:g}: Flower's simulation reserves whole CPUs per client "
                          "(client-resources-num-cpus takes integers); give 1 or more")
    if not number or value < 1:
        raise ConfigError(f"{what} must be a whole number of CPUs >= 1, got {value}")
    return int(value)


def federation_config(clients: int, client_cpus: int = 1, client_gpus: float = 0.0,
                      total_cpus: Optional[int] = None, backend: str = "ray") -> dict:
    """Flower's federation config of the simulation (``flwr run --federation-config``): ``clients`` virtual
    SuperNodes, the CPUs and GPUs each reserves, and with ``total_cpus`` the CPUs of the whole Ray instance."""
    config: dict = {"num-supernodes": clients, "backend": backend, "client-resources-num-cpus": client_cpus,
                    "client-resources-num-gpus": float(client_gpus)}
    if total_cpus is not None:
        config["init-args-num-cpus"] = total_cpus
    return config


def client_gpus_for(device: str, client_gpus: Optional[float]) -> float:
    """The GPUs each virtual client reserves for rounds on ``device`` (resolved: not ``auto``).

    On CUDA: ``client_gpus``, default 1 (clients on one GPU take turns, so no client's window holds another's
    GPU work); 0 is refused (Ray would hide the GPU), and so is ``cuda:N`` for N > 0 (a client sees its
    reserved GPU as ``cuda:0``). On any other device: 0; a reservation is refused (it could never be met
    on a machine without a GPU, and the rounds would not use it elsewhere). ConfigError with one line.
    """
    kind, _, index = device.partition(":")
    if client_gpus is not None and not 0 <= client_gpus < math.inf:
        raise ConfigError(f"--client-gpus must be a number >= 0, got {client_gpus}")
    if kind != "cuda":
        if client_gpus:
            raise ConfigError(f"--client-gpus {client_gpus:g} reserves GPUs, but the rounds run on {device}: "
                              "use --device cuda, or leave --client-gpus out")
        return 0.0
    if client_gpus == 0:
        raise ConfigError(f"--device {device} with --client-gpus 0: Ray hides every GPU from a client that "
                          "reserves none; give each client a share (1, or 0.25 for four on one GPU) or use --device cpu")
    if index not in ("", "0"):
        raise ConfigError(f"--device {device}: Ray shows each simulated client only the GPU it reserves, as "
                          "cuda:0; use --device cuda (Ray picks the GPU)")
    return 1.0 if client_gpus is None else float(client_gpus)


def simulate(cfg: RunConfig, settings: FlowerSettings = FlowerSettings(), *, backend: str = "ray",
             client_cpus: int = 1, client_gpus: Optional[float] = None, total_cpus: Optional[int] = None) -> Path:
    """Run ``cfg`` with ``cfg.clients`` virtual SuperNodes on Flower's simulation runtime; returns the report CSV.

    ``client_cpus``: whole CPUs each client reserves; ``client_gpus``: GPUs each client reserves (None: 1 for rounds
    on CUDA, else 0; :func:`client_gpus_for`); ``total_cpus``: the CPUs of the whole Ray instance (None: Ray's own
    count). Everything is checked before the runtime starts. ReportError (exit 7) with one line when the run did
    not complete (:func:`run_outcome`); a stop signal ends it as interrupted and is raised naming the report.
    """
    from edgeprof.nn.compute import check_threads, check_usable, resolve_device

    client_cpus = whole_cpus(client_cpus)
    total_cpus = None if total_cpus is None else whole_cpus(total_cpus, "total_cpus")
    ray_cpus = total_cpus or os.cpu_count() or 1
    if client_cpus > ray_cpus:
        raise ConfigError(f"--client-cpus {client_cpus}: more than the {ray_cpus} CPUs Ray has here, so no client "
                          "could ever be scheduled")
    # decided here, where every GPU is visible: a client sees only what it reserves
    cfg = dataclasses.replace(cfg, device=resolve_device(cfg.device))
    client_gpus = client_gpus_for(cfg.device, client_gpus)
    check_usable(cfg.device, cfg.tf32)
    check_threads(cfg.threads)  # the server and every virtual client run on this machine
    require("flwr", "flower", "flower-simulate")
    require("ray", "flower", "flower-simulate")
    _check_data_and_backbone(cfg)

    from edgeprof.session.run import make_run_id
    from edgeprof.report.writer import check_writable

    # the simulation's processes have a working folder of their own choosing: every path absolute
    cfg = dataclasses.replace(cfg, run_name=make_run_id(cfg), out=Path(cfg.out).resolve(),
                              data_dir=None if cfg.data_dir is None else Path(cfg.data_dir).resolve())
    run_config = to_run_config(cfg, dataclasses.replace(settings, simulation=True))
    federation = federation_config(cfg.clients, client_cpus, client_gpus, total_cpus, backend)
    return run_federation(run_config, federation, check_writable(cfg.out) / f"{cfg.run_name}.csv")


def _check_data_and_backbone(cfg: RunConfig) -> None:
    """Load the data and build the backbone here, as every node will: a missing data file (DataError, exit 3) or a
    backbone edgeprof refuses (ModelError, exit 6) is one line now, not a failed run after the runtime started."""
    from edgeprof.host import load_native_libraries
    from edgeprof.nn.backbones import build_backbone
    from edgeprof.rounds.simulate import input_shape, load_clients

    load_native_libraries(("torch",))  # not ONNX Runtime: its import leaves a session file in TMPDIR, and here
    load_clients(cfg)  # (the driver) nothing of the runtime's may stay behind
    build_backbone(cfg.backbone, input_shape(cfg), seed=cfg.seed)


def run_federation(run_config: Mapping[str, Any], federation: Mapping[str, Any], csv_path: Path) -> Path:
    """Run the app of ``run_config`` (whose report is ``csv_path``) on a local SuperLink with the federation config
    ``federation``; returns ``csv_path`` once the ServerApp's sidecar says ``complete`` (:func:`run_outcome`).

    The runtime is ended however the run ends, and the logs stay in ``<out>/<run id>.flower/``. On a stop signal
    the run is stopped as Flower stops it (:meth:`~edgeprof.flower.superlink.LocalSuperLink.stop`), a report left
    ``running`` is closed (:func:`close_abandoned`), and the stop is raised on, naming the report (``report``,
    ``report_complete``) as the sidecar says; a second stop signal meanwhile is dropped.
    """
    from edgeprof.flower.config import write_app_dir
    from edgeprof.flower.superlink import LocalSuperLink
    from edgeprof.signals import STOP_EXCEPTIONS, signals_held

    logs = csv_path.with_suffix(".flower")
    link, run, ended = LocalSuperLink(logs, echo=sys.stderr), None, False
    try:
        try:
            link.start()
            run = link.run(write_app_dir(link.root / "app", run_config).parent, federation)
            run.wait()
            ended = True
        except STOP_EXCEPTIONS:
            with signals_held(deliver=False):
                if run is not None:
                    link.stop(run, done=lambda: _closed(csv_path))
            raise
        finally:
            with signals_held(deliver=ended):  # a stop once the run has ended: after the runtime has
                link.close()
    except STOP_EXCEPTIONS as stop:
        data = _sidecar(csv_path)
        if data is not None and data.get("status") == "running":
            with signals_held(deliver=False):
                data = close_abandoned(csv_path, data, stop)
        if data is not None:
            stop.report, stop.report_complete = csv_path, data.get("status") == "complete"
        raise
    return run_outcome(csv_path, logs)


def _closed(csv_path: Path) -> bool:
    """Whether the ServerApp has closed the report ``csv_path``: its sidecar no longer says ``running``."""
    data = _sidecar(csv_path)
    return data is not None and data.get("status") != "running"


def close_abandoned(csv_path: Path, data: dict, stop: BaseException) -> dict:
    """Close the report ``csv_path`` that a stopped run's ServerApp left ``running`` (its sidecar ``data``): Flower's
    simulation process ended before its ServerApp could (a second stop signal in that process, Ray's shutdown,
    a kill). The sidecar then says ``interrupted``, why, and the rows and rounds the CSV holds (a round is
    finished once its ``server`` row is written); the sidecar written. Returns it; ``data`` unchanged when the CSV
    cannot be read or the sidecar written (a warning says so)."""
    from edgeprof.errors import OutputError
    from edgeprof.report.writer import read_report, write_sidecar
    from edgeprof.session.run import ending

    try:
        rows = read_report(csv_path).rows
    except ReportError as err:
        log.warning("could not record how the run ended: %s", err)
        return data
    _, reason = ending(stop)
    closed = {**data, "status": "interrupted", "rows": len(rows),
              "rounds_completed": sum(row.get("kind") == "server" for row in rows),
              "reason": f"{reason}; Flower's simulation process ended before its ServerApp closed the report, "
                        "which this command then closed with the rows it holds"}
    try:
        write_sidecar(csv_path.with_suffix(".json"), closed)
    except OutputError as err:
        log.warning("could not record how the run ended: %s", err)
        return data
    return closed


def _sidecar(csv_path: Path) -> Optional[dict]:
    """The sidecar of the report ``csv_path`` (:func:`edgeprof.report.writer.read_sidecar`), None when there is
    none or it could not be read."""
    from edgeprof.report.writer import read_sidecar

    data, _ = read_sidecar(csv_path.with_suffix(".json"))
    return data or None


def _one_line(text: Any, limit: int = 500) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def last_error(log_path: Path) -> str:
    """The last error line of a Flower log (``ERROR ...``, or an edgeprof refusal), else its last line."""
    try:
        lines = [ln.strip() for ln in log_path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return f"no log at {log_path}"
    errors = [ln for ln in lines if ln.startswith("ERROR") or "edgeprof: " in ln or "Exit Code:" in ln]
    return _one_line((errors or lines or ["the log is empty"])[-1])


def run_outcome(csv_path: Path, logs: Path) -> Path:
    """``csv_path`` when the ServerApp's sidecar says the run completed; otherwise ReportError (exit 7) with one
    line: the sidecar's reason for a ``failed`` or ``interrupted`` run, the last error in Flower's log when no
    report was written, and the sidecar's own word when the ServerApp ended without closing its report."""
    data = _sidecar(csv_path)
    status = None if data is None else data.get("status")
    if status == "complete":
        return csv_path
    where = f"Flower's logs in {logs}"
    if data is None:
        raise ReportError(f"the simulation ended without a report: {last_error(logs / 'run.log')} ({where})")
    reason = _one_line(data.get("reason") or "no reason recorded")
    if status == "failed":
        raise ReportError(f"the run failed: {reason}; report {csv_path} ({where})")
    if status == "interrupted":
        raise ReportError(f"the run ended {reason}; report {csv_path} ({where})")
    raise ReportError(f"the ServerApp ended without closing its report ({csv_path.with_suffix('.json')} says "
                      f"{_one_line(status, 40)!r}; {where})")

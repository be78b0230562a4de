"""The in-process federated loop used by ``measure`` (and by ``train`` and ``sweep``).

Order of work, so that bad input never leaves a half-written report: validate the config, check the
output folder, load and partition the data, build the federation (:class:`edgeprof.rounds.federation.Federation`,
the in-process driver of the algorithm contract); only then open the run (:func:`edgeprof.session.run.open_run`:
meters, CSV, sidecar). Each client round and each server step runs inside a profiler window and its row is
flushed as soon as the window closes. Nothing here names an algorithm.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from edgeprof.algorithms import ALGORITHMS
from edgeprof.algorithms.contract import RoundSettings
from edgeprof.algorithms.participants import participant_rng, sample_participants
from edgeprof.config import RunConfig
from edgeprof.rounds.evaluation import accuracy_cell
from edgeprof.rounds.federation import Federation
from edgeprof.session.run import RunContext, base_row, make_run_id, open_run
from edgeprof.report.writer import check_writable
from edgeprof.host import load_native_libraries


@dataclass
class RunResult:
    """Where a run's report lies and how far it got."""

    run_id: str
    csv_path: Path
    sidecar_path: Path
    rounds_completed: int
    status: str


def input_shape(cfg: RunConfig) -> tuple[int, int, int]:
    """The (C, H, W) the data is loaded in: Table 4's shape for its backbones, else the data's own
    (:func:`edgeprof.nn.backbones.input_shape_for`)."""
    from edgeprof.nn.backbones import input_shape_for

    return input_shape_for(cfg.backbone, cfg.dataset)


def load_clients(cfg: RunConfig):
    """Load the data set in the backbone's input shape and partition it across the clients (``cfg.split``)."""
    from edgeprof.data import load_dataset, partition

    dataset = load_dataset(cfg.dataset, data_dir=cfg.data_dir, shape=input_shape(cfg), seed=cfg.seed,
                           synthetic_classes=cfg.synthetic_classes, synthetic_samples=cfg.synthetic_samples)
    return partition(dataset, cfg.clients, cfg.degree, seed=cfg.seed, test_fraction=cfg.test_fraction,
                     split=cfg.split)


def build_federation(cfg: RunConfig, clients) -> Federation:
    """The in-process federation of ``cfg`` over ``clients``, with a freshly seeded backbone.

    With the ``onnx`` engine the backbone is exported and its ONNX Runtime session opened here, before any
    profiler window, as set-up; so is the algorithm's own set-up at ``cfg``'s tau (:meth:`Federation.prepare`).
    """
    federation = Federation(cfg, clients)
    federation.runtime.prepare()
    federation.prepare()  # the algorithm's own set-up at cfg's tau, before any window
    return federation


def evaluate_all(federation: Federation, settings: Optional[RoundSettings] = None) -> tuple[float, float]:
    """The ``global`` protocol: equation (1)'s training loss and the mean test accuracy over every client."""
    from edgeprof.rounds.evaluation import global_score

    return global_score([federation.evaluate(i, settings) for i in range(federation.num_clients)])


def run_round(ctx: RunContext, cfg: RunConfig, federation: Federation, round_index: int,
              participants: Sequence[int]) -> None:
    """One federated round with ``cfg``'s settings: every participant's client window, then the server window.

    With ``cfg.evaluate`` an ``eval`` row follows: under the ``paper`` protocol each participant is scored
    right after its own window (outside it) and before the server step; under ``global`` every client
    after the server step (:mod:`edgeprof.rounds.evaluation`).
    """
    from edgeprof.rounds.evaluation import paper_score

    settings = federation.settings_for(cfg)
    paper = cfg.evaluate and cfg.eval_protocol == "paper"
    updates, local = [], []
    for cid in participants:
        with ctx.profiler.window("client") as win:
            update, held = _client_window(federation, cid, win.phase, settings, cfg.hold_seconds)
        updates.append(update)
        ctx.record(win, base_row(ctx, cfg, round_index, "client", client=cid, n_samples=update.n_samples,
                                 n_participants=len(participants), train_loss=f"{update.loss:.6g}"),
                   held_rounds=held)
        if paper:
            local.append(federation.evaluate_local(update, settings))
    with ctx.profiler.window("server") as win:
        federation.server_step(updates, settings)
    ctx.record(win, base_row(ctx, cfg, round_index, "server", n_participants=len(participants),
                             n_samples=sum(u.n_samples for u in updates)))
    if cfg.evaluate and (local or not paper):
        loss, acc = paper_score(local) if paper else evaluate_all(federation, settings)
        ctx.write(base_row(ctx, cfg, round_index, "eval", train_loss=f"{loss:.6g}",
                           test_accuracy=accuracy_cell(acc),
                           n_participants=len(participants), eval_protocol=cfg.eval_protocol))


def _client_window(federation: Federation, cid: int, phase, settings, hold_s: float):
    """The client's round inside its window: once, or with ``hold_s`` repeated until that long has passed (at
    least once; the last reply is the one sent). (the reply, how many rounds were held: None when not held)."""
    if not hold_s:
        return federation.client_round(cid, phase, settings), None
    start, held = time.perf_counter(), 0
    while True:
        update = federation.client_round(cid, phase, settings)
        held += 1
        if time.perf_counter() - start >= hold_s:
            return update, held


def run_rounds(ctx: RunContext, cfg: RunConfig, federation: Federation,
               advance: Callable[[], None] = lambda: None) -> int:
    """All rounds of one algorithm; returns the number completed (every one is already on disk)."""
    rng = participant_rng(cfg)
    for t in range(1, cfg.rounds + 1):
        participants = sample_participants(rng, federation.num_clients, cfg.participation, cfg.participation_mode,
                                           cfg.participant_rounding)
        run_round(ctx, cfg, federation, t, participants)
        advance()
    return cfg.rounds


def preflight(cfg: RunConfig) -> None:
    """Refuse, before the output folder is made, what set-up would refuse later in one line (ConfigError, exit 2):
    a device this machine cannot use or ``--tf32`` on one without TF32, more ``--threads`` than its cores, and a
    country or region codecarbon does not know."""
    from edgeprof.errors import ConfigError
    from edgeprof.meters.carbon import carbon_or_note
    from edgeprof.nn.compute import check_threads, check_usable, kind_of, resolve_device, tf32_refused

    device = resolve_device(cfg.device)
    if cfg.tf32 and not kind_of(device).cudnn and kind_of(device).unavailable(device) is None:
        raise ConfigError(tf32_refused(cfg.device if cfg.device == device else f"{cfg.device} (here: {device})"))
    check_usable(device, cfg.tf32)
    check_threads(cfg.threads)
    energy = cfg.energy
    # codecarbon's data missing is the machine's, a note of the run (no carbon figures), never a refusal
    carbon_or_note(energy.country, region=energy.region, override_g_per_kwh=energy.carbon_intensity)


def _no_stage(_: str) -> None:
    """Default set-up reporter: says nothing."""


def setup_stages(cfg: RunConfig) -> dict[str, str]:
    """What a person reads while a run sets up, one line per stage."""
    source = "the embedded digits" if cfg.dataset == "digits" else (
        "generated synthetic data" if cfg.dataset == "synthetic" else f"{cfg.dataset} from {cfg.data_dir}")
    build = f"building the {cfg.backbone} backbone and {cfg.algo}"
    if "onnx" in (cfg.engine or ""):
        build += " (exporting the backbone to ONNX, opening ONNX Runtime)"
    return {"data": f"loading {source} and partitioning it across {cfg.clients} clients", "build": build,
            "meters": "opening the energy meters",
            "idle": f"measuring idle power for {cfg.energy.idle_seconds:g} s (keep the machine quiet)"}


def run(cfg: RunConfig, *, progress: Optional[Callable[[int, int], None]] = None,
        stage: Callable[[str], None] = _no_stage, sidecar: Optional[dict] = None) -> RunResult:
    """Run ``cfg`` end to end and return where its report lies.

    ``stage(text)`` is called as each set-up step starts (loading data, building the backbone, opening
    meters); ``progress(0, total)`` when set-up is over, then ``progress(done, total)`` after every round.
    A stop (KeyboardInterrupt, or Terminated for SIGTERM and SIGHUP) is re-raised after the sidecar is marked
    ``interrupted``; the CSV keeps every finished round. ``sidecar``: sections the caller adds to the run's
    sidecar (``train``: its target and protocol).
    """
    cfg = cfg.resolved()
    stages = setup_stages(cfg)
    preflight(cfg)
    check_writable(cfg.out, keep=False)  # early, so a bad folder fails before the data loads
    load_native_libraries()
    stage(stages["data"])
    clients = load_clients(cfg)
    stage(stages["build"])
    federation = build_federation(cfg, clients)
    stage(stages["meters"] if cfg.energy.idle_seconds <= 0 else stages["idle"])
    try:  # a stop after the final sidecar names the whole report (edgeprof.signals.report_closed)
        with open_run(cfg, run_id=make_run_id(cfg), phases=ALGORITHMS[cfg.algo].phases,
                      runtime=federation.runtime, finish=lambda data: {**data, **(sidecar or {})}) as session:
            if progress:
                progress(0, cfg.rounds)  # set-up is over
            run_rounds(session.ctx, cfg, federation, lambda: session.advance(progress, cfg.rounds))
        return RunResult(session.ctx.run_id, session.csv_path, session.sidecar_path, session.done, session.status)
    finally:
        federation.close()

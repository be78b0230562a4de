"""The in-process federated loop used by ``measure`` (and by ``train`` and ``sweep``).

Order of work, so that bad input never leaves a half-written report: validate the config, check the
output folder, load and partition the data, build the backbone and the algorithm, open the meters;
only then create the CSV and the sidecar. Each client round and each server step runs inside a
profiler window and its row is flushed as soon as the window closes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from edgeprof.algorithms import ALGORITHMS, load, phases_of
from edgeprof.config import RunConfig
from edgeprof.device import device_label
from edgeprof.meters.discovery import MeterSet
from edgeprof.profiler import Profiler
from edgeprof.report.schema import columns_for, row_from_window
from edgeprof.report.writer import ReportWriter, check_writable, write_sidecar

#: notes on what a run does without (no carbon data, ...); the CLI prints them as ``edgeprof: note: ...``
log = logging.getLogger("edgeprof")

@dataclass
class RunResult:
    """Where a run's report lies and how far it got."""

    run_id: str
    csv_path: Path
    sidecar_path: Path
    rounds_completed: int
    status: str


@dataclass
class Energy:
    """How the run turns joules into net joules and grams: idle power and carbon intensity."""

    idle_power_w: Optional[float] = None
    carbon_g_per_kwh: Optional[float] = None
    sidecar: dict = field(default_factory=dict)
    #: one line each for what the run does without (printed by the CLI, kept in the sidecar)
    notes: list[str] = field(default_factory=list)


def sample_participants(rng: np.random.Generator, num_clients: int, participation: float,
                        mode: str) -> list[int]:
    """I_t: r = max(1, round(pi*I)) clients uniformly without replacement (``fixed``), or every client
    independently with probability pi (``bernoulli``, possibly none)."""
    if mode == "fixed":
        r = max(1, round(participation * num_clients))
        return sorted(int(i) for i in rng.choice(num_clients, size=r, replace=False))
    return [i for i in range(num_clients) if rng.random() < participation]


def participant_rng(cfg: RunConfig) -> np.random.Generator:
    """The generator that draws I_t each round; the Flower strategy draws from the same stream."""
    return np.random.default_rng(cfg.seed + 2)


def input_shape(cfg: RunConfig) -> tuple[int, int, int]:
    from edgeprof.nn.backbones import default_input_shape

    return default_input_shape(cfg.backbone)


def load_clients(cfg: RunConfig):
    """Load the data set in the backbone's input shape and partition it across the clients."""
    from edgeprof.data import load_dataset, partition

    dataset = load_dataset(cfg.dataset, data_dir=cfg.data_dir, shape=input_shape(cfg), seed=cfg.seed,
                           synthetic_classes=cfg.synthetic_classes, synthetic_samples=cfg.synthetic_samples)
    return partition(dataset, cfg.clients, cfg.degree, seed=cfg.seed, test_fraction=cfg.test_fraction)


def build_algorithm(cfg: RunConfig, clients):
    """The algorithm object for ``cfg`` over ``clients`` with a seeded backbone."""
    from edgeprof.nn.backbones import build_backbone

    backbone = build_backbone(cfg.backbone, input_shape(cfg), seed=cfg.seed)
    return load(cfg.algo)(cfg, clients, backbone)


def set_threads(threads: Optional[int]) -> None:
    """Limit torch's (and through FeatureRunner, ONNX Runtime's) intra-op threads."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def make_run_id(cfg: RunConfig) -> str:
    if cfg.run_name:
        return cfg.run_name
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{cfg.algo}-tau{cfg.tau}-{stamp}-{secrets.token_hex(2)}"


def base_row(ctx: "RunContext", cfg: RunConfig, round_index: int, kind: str, **extra) -> dict:
    row = dict(run_id=ctx.run_id, device=ctx.device, algo=cfg.algo, engine=cfg.engine, dataset=cfg.dataset,
               backbone=cfg.backbone, tau=cfg.tau, round=round_index, kind=kind,
               timestamp_s=f"{time.time():.3f}")
    row.update(extra)
    return row


@dataclass
class RunContext:
    """What every window of a run shares: its id, writer, profiler and energy conversion."""

    run_id: str
    device: str
    writer: ReportWriter
    profiler: Profiler
    energy: Energy

    def record(self, window, base: dict) -> None:
        self.writer.write(row_from_window(window.result, base, idle_power_w=self.energy.idle_power_w,
                                          carbon_g_per_kwh=self.energy.carbon_g_per_kwh))


def evaluate_all(algorithm) -> tuple[float, float]:
    """Equation (1)'s training loss sum_i alpha_i l_i and the test accuracy averaged over clients."""
    results = [algorithm.evaluate(i) for i in range(algorithm.num_clients)]
    n = np.array([r.n_train for r in results], dtype=float)
    loss = float(np.dot(n / n.sum(), [r.train_loss for r in results]))
    return loss, float(np.mean([r.test_accuracy for r in results]))


def run_round(ctx: RunContext, cfg: RunConfig, algorithm, round_index: int, participants: Sequence[int]) -> None:
    """One federated round: every participant's client window, then the server window."""
    updates = []
    for cid in participants:
        with ctx.profiler.window("client") as win:
            update = algorithm.client_round(cid, win.phase)
        updates.append(update)
        ctx.record(win, base_row(ctx, cfg, round_index, "client", client=cid, n_samples=update.n_samples,
                                 n_participants=len(participants), train_loss=f"{update.loss:.6g}"))
    with ctx.profiler.window("server") as win:
        algorithm.server_step(updates)
    ctx.record(win, base_row(ctx, cfg, round_index, "server", n_participants=len(participants),
                             n_samples=sum(u.n_samples for u in updates)))
    if cfg.evaluate:
        loss, acc = evaluate_all(algorithm)
        ctx.writer.write(base_row(ctx, cfg, round_index, "eval", train_loss=f"{loss:.6g}",
                                  test_accuracy=f"{acc:.6g}", n_participants=len(participants)))


def run_rounds(ctx: RunContext, cfg: RunConfig, algorithm, advance: Callable[[], None] = lambda: None) -> int:
    """All rounds of one algorithm; returns the number completed (every one is already on disk)."""
    rng = participant_rng(cfg)
    for t in range(1, cfg.rounds + 1):
        participants = sample_participants(rng, algorithm.num_clients, cfg.participation, cfg.participation_mode)
        run_round(ctx, cfg, algorithm, t, participants)
        advance()
    return cfg.rounds


def open_energy(cfg: RunConfig, meters: MeterSet) -> Energy:
    """Idle baseline (when asked for) and carbon intensity (when known)."""
    from edgeprof.meters import carbon, idle

    energy = Energy()
    if cfg.idle_seconds > 0:
        baseline = idle.measure_idle(meters, cfg.idle_seconds)
        energy.idle_power_w = baseline.total_power_w
        energy.sidecar["idle"] = baseline.describe()
    intensity, note = carbon.carbon_or_note(cfg.country, region=cfg.region, override_g_per_kwh=cfg.carbon_intensity)
    if intensity is None:
        log.warning(note)
        energy.notes.append(note)
        energy.sidecar["carbon"] = {"g_per_kwh": None, "source": note}
    else:
        energy.carbon_g_per_kwh = intensity.g_per_kwh
        energy.sidecar["carbon"] = dataclasses.asdict(intensity)
    return energy


def open_meters(cfg: RunConfig) -> MeterSet:
    from edgeprof.meters.discovery import discover

    return discover(cpu_watts=cfg.cpu_watts, jetson_hz=cfg.jetson_hz)


def sidecar_data(cfg: RunConfig, run_id: str, meters: MeterSet, energy: Energy, **status) -> dict:
    from edgeprof.device import device_info, library_versions

    return {"run_id": run_id, "config": cfg.to_dict(), "device": device_info(),
            "libraries": library_versions(), "meters": meters.describe(), "energy": energy.sidecar,
            "phases": list(ALGORITHMS[cfg.algo].phases), "notes": list(energy.notes), **status}


@dataclass
class ReportSession:
    """An open report: the context its windows write through, and how many rounds are on disk."""

    ctx: RunContext
    csv_path: Path
    sidecar_path: Path
    done: int = 0
    status: str = "interrupted"

    def advance(self, progress: Optional[Callable[[int, int], None]], total: int) -> None:
        """Count one more finished round (or sweep cell) and report progress."""
        self.done += 1
        if progress:
            progress(self.done, total)


@contextlib.contextmanager
def report_session(out: Path, run_id: str, phases: Sequence[str], meters: MeterSet, energy: Energy,
                   sidecar: Callable[..., dict]) -> Iterator[ReportSession]:
    """Create the CSV and a ``running`` sidecar, yield the session, and always leave a final sidecar.

    ``sidecar(**status)`` builds the sidecar's content; on exit it is called with ``status`` (``complete``
    when the body finished, else ``interrupted``), ``rounds_completed`` and ``rows``.
    """
    csv_path, sidecar_path = out / f"{run_id}.csv", out / f"{run_id}.json"
    with ReportWriter(csv_path, columns_for(phases)) as writer:
        write_sidecar(sidecar_path, sidecar(status="running"))
        session = ReportSession(RunContext(run_id, device_label(), writer, Profiler(meters), energy), csv_path,
                                sidecar_path)
        try:
            yield session
            session.status = "complete"
        finally:
            write_sidecar(sidecar_path, sidecar(status=session.status, rounds_completed=session.done,
                                                rows=writer.rows_written))


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
            "idle": f"measuring idle power for {cfg.idle_seconds:g} s (keep the machine quiet)"}


def run(cfg: RunConfig, *, progress: Optional[Callable[[int, int], None]] = None,
        stage: Callable[[str], None] = _no_stage) -> RunResult:
    """Run ``cfg`` end to end and return where its report lies.

    ``stage(text)`` is called as each set-up step starts (loading data, building the backbone, opening
    meters); ``progress(0, total)`` when set-up is over, then ``progress(done, total)`` after every round. KeyboardInterrupt is re-raised after the
    sidecar is marked ``interrupted``; the CSV keeps every finished round.
    """
    cfg = cfg.resolved()
    stages = setup_stages(cfg)
    out = check_writable(cfg.out)
    set_threads(cfg.threads)
    stage(stages["data"])
    clients = load_clients(cfg)
    stage(stages["build"])
    algorithm = build_algorithm(cfg, clients)
    stage(stages["meters"])
    meters = open_meters(cfg)
    try:
        if cfg.idle_seconds > 0:
            stage(stages["idle"])
        energy = open_energy(cfg, meters)
        run_id = make_run_id(cfg)
        sidecar = functools.partial(sidecar_data, cfg, run_id, meters, energy)
        with report_session(out, run_id, phases_of([cfg.algo]), meters, energy, sidecar) as session:
            if progress:
                progress(0, cfg.rounds)  # set-up is over
            run_rounds(session.ctx, cfg, algorithm, lambda: session.advance(progress, cfg.rounds))
        return RunResult(run_id, session.csv_path, session.sidecar_path, session.done, session.status)
    finally:
        meters.close()
        algorithm.close()

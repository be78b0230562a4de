"""``edgeprof sweep``: the cost of one client round against tau, for several algorithms, in one report.

Every cell of the sweep is one (algorithm variant, tau, repeat): one federated round (every client
takes part, each in its own profiler window, then the server step in its window) recorded with
:func:`edgeprof.rounds.simulate.run_round`, so its rows are ordinary report rows. What keeps the comparison
fair on a noisy machine:

* the same data, partition, seed and backbone initialisation for every variant (each variant has its
  own federation built by :func:`edgeprof.rounds.simulate.build_federation` from the same settings);
* a warm-up: one unrecorded round per variant at the smallest tau (first ONNX Runtime session, first
  torch kernels, allocator growth) before anything is measured;
* the cells run in a seeded random order (:func:`plan_cells`), so drift in the machine's load or
  clock speed is spread over every variant and tau instead of favouring whichever runs first.

The report's ``round`` column is the cell's position in that order (1, 2, ...); ``tau``, ``algo`` and
``engine`` say which cell it was. Each variant keeps one federation (its global and personal state carry
over from cell to cell); a cell's tau and learning rates reach its round as
:class:`~edgeprof.algorithms.contract.RoundSettings` arguments, never through shared mutable settings.
"""

from __future__ import annotations

import dataclasses
import math
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

from edgeprof.algorithms import ALGORITHMS, phases_of
from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError

if TYPE_CHECKING:  # the analysis is imported where a sweep is analysed, not with this module
    from edgeprof.report.analysis import Analysis

REFERENCE_ALGO = "pflego"


@dataclass(frozen=True)
class Variant:
    """An algorithm with one of its engines."""

    algo: str
    engine: str

    @property
    def label(self) -> str:
        from edgeprof.report.analysis import variant_of

        return variant_of(self.algo, self.engine)


@dataclass(frozen=True)
class Cell:
    """One measured round of the sweep."""

    variant: Variant
    tau: int
    repeat: int


@dataclass(frozen=True)
class SweepConfig:
    """Settings of a sweep; ``base`` holds the shared run settings (data, backbone, seed, meters, out).

    ``algos`` items are ``algo`` or ``algo:engine``; a plain ``algo`` runs with every engine of
    ``engines`` it has (its default engine when it has none of them). ``samples_per_client`` keeps
    that many training samples per client (None: all). ``max_baseline_tau`` skips cells of the
    algorithms other than PFLEGO above that tau (their cost dominates the sweep's time).
    """

    base: RunConfig = field(default_factory=lambda: RunConfig(dataset="synthetic", clients=1, participation=1.0))
    algos: tuple[str, ...] = ("pflego", "fedavg")
    engines: tuple[str, ...] = ()
    taus: tuple[int, ...] = (1, 5, 10, 25, 50, 100)
    repeats: int = 3
    samples_per_client: Optional[int] = 600
    max_baseline_tau: Optional[int] = None
    warmup: bool = True

    def __post_init__(self) -> None:
        if not self.taus or any(not isinstance(t, int) or t < 1 for t in self.taus):
            raise ConfigError(f"taus must be integers >= 1, got {','.join(map(str, self.taus)) or 'none'}")
        if len(set(self.taus)) != len(self.taus):
            raise ConfigError("taus must not repeat")
        if self.repeats < 1:
            raise ConfigError(f"repeats must be >= 1, got {self.repeats}")
        if self.samples_per_client is not None and self.samples_per_client < 1:
            raise ConfigError(f"samples per client must be >= 1, got {self.samples_per_client}")
        if self.max_baseline_tau is not None and self.max_baseline_tau < 1:
            raise ConfigError(f"max baseline tau must be >= 1, got {self.max_baseline_tau}")
        self.variants()  # validates algos and engines

    def variants(self) -> list[Variant]:
        """The (algo, engine) pairs to run, in the order given, without repeats."""
        out: list[Variant] = []
        for item in self.algos:
            algo, _, engine = item.strip().partition(":")
            if algo not in ALGORITHMS:
                raise ConfigError(f"unknown algorithm {algo!r}; choose from: {', '.join(ALGORITHMS)}")
            engines = ALGORITHMS[algo].engines
            if engine and engine not in engines:
                raise ConfigError(f"unknown engine {engine!r} for {algo}; choose one of: {', '.join(engines)}")
            chosen = [engine] if engine else [e for e in self.engines if e in engines] or [engines[0]]
            out.extend(v for v in (Variant(algo, e) for e in chosen) if v not in out)
        if not out:
            raise ConfigError("no algorithm to sweep; give --algos")
        offered = {e for v in out for e in ALGORITHMS[v.algo].engines}
        unknown = [e for e in self.engines if e not in offered]
        if unknown:
            raise ConfigError(f"engine {unknown[0]!r} belongs to none of the swept algorithms; "
                              f"their engines: {', '.join(sorted(offered))}")
        unused = [e for e in self.engines if e not in {v.engine for v in out}]
        if unused:  # offered only by algorithms given as algo:engine, which name their own
            raise ConfigError(f"--engines {unused[0]} runs the algorithms given without an engine, and every one that "
                              f"has it names its own in --algos ({', '.join(a for a in self.algos if ':' in a)}); "
                              "leave --engines out, or give the algorithm without ':engine'")
        if self.max_baseline_tau is not None and all(v.algo == REFERENCE_ALGO for v in out):
            raise ConfigError(f"--max-baseline-tau caps the taus of the algorithms other than {REFERENCE_ALGO}, and "
                              f"--algos has only {REFERENCE_ALGO}; leave it out")
        return out

    def taus_for(self, variant: Variant) -> list[int]:
        cap = self.max_baseline_tau
        if cap is None or variant.algo == REFERENCE_ALGO:
            return sorted(self.taus)
        return [t for t in sorted(self.taus) if t <= cap]

    def run_config(self, variant: Variant, tau: int) -> RunConfig:
        """The full (resolved) settings of one cell."""
        return dataclasses.replace(self.base, algo=variant.algo, engine=variant.engine, tau=tau,
                                   beta=None, rho=None, mu=None).resolved()


@dataclass
class SweepResult:
    """Where the sweep's report lies and how many cells finished."""

    run_id: str
    csv_path: Path
    sidecar_path: Path
    cells_completed: int
    cells_total: int
    status: str


def plan_cells(cfg: SweepConfig) -> list[Cell]:
    """Every (variant, tau, repeat) cell in a random order seeded by ``base.seed``."""
    cells = [Cell(v, tau, k) for v in cfg.variants() for tau in cfg.taus_for(v) for k in range(1, cfg.repeats + 1)]
    order = np.random.default_rng([cfg.base.seed, 5]).permutation(len(cells))
    return [cells[i] for i in order]


def cell_weights(cells: Sequence[Cell]) -> list[float]:
    """Each cell's expected share of the sweep's time (from the registry's cost prior), for progress/ETA."""
    costs = [ALGORITHMS[c.variant.algo].expected_cost(c.tau) + 1.0 for c in cells]  # +1: the server step
    total = sum(costs)
    return [c / total for c in costs]


def sweep_clients(cfg: SweepConfig):
    """The clients every variant shares; each keeps ``samples_per_client`` training samples.

    For synthetic data enough samples are generated for every client to have that many; for the
    other data sets a client with fewer is a ConfigError.
    """
    from edgeprof.rounds.simulate import load_clients

    from edgeprof.data.partition import classes_for_degree

    base, want = cfg.base, cfg.samples_per_client
    if base.dataset == "synthetic" and want is not None and base.degree != "group":
        k = classes_for_degree(base.degree, base.synthetic_classes)
        share = 1.0 / max(base.synthetic_classes / k, base.clients)  # of all samples, per client, about
        needed = math.ceil(1.3 * want / share / (1.0 - base.test_fraction)) + base.synthetic_classes
        base = dataclasses.replace(base, synthetic_samples=max(base.synthetic_samples, needed))
    clients = load_clients(base)
    if want is None:
        return clients
    short = [c for c in clients if c.n_train < want]
    if short:
        c = short[0]
        raise ConfigError(f"client {c.client_id} has only {c.n_train} training samples, fewer than "
                          f"--samples-per-client {want}; lower it or use fewer --clients")
    return [dataclasses.replace(c, x_train=c.x_train[:want], y_train=c.y_train[:want]) for c in clients]


def _warm_up(federations: dict, cfg: SweepConfig, participants: Sequence[int]) -> None:
    """One unrecorded round per variant at its smallest tau; the state it leaves is kept."""
    for variant, federation in federations.items():
        settings = federation.settings_for(cfg.run_config(variant, cfg.taus_for(variant)[0]))
        federation.server_step([federation.client_round(cid, settings=settings) for cid in participants], settings)


def _sweep_sections(cfg: SweepConfig, cells: Sequence[Cell], data: dict) -> dict:
    """The sweep's own sidecar entries: every variant and tau in ``config``, and a ``sweep`` section."""
    variants = cfg.variants()
    data["config"].update(algo=[v.algo for v in variants], engine=[v.engine for v in variants],
                          tau=sorted(cfg.taus), beta=None, rho=None, mu=None)
    data["sweep"] = {
        "variants": [v.label for v in variants], "taus": sorted(cfg.taus), "repeats": cfg.repeats,
        "samples_per_client": cfg.samples_per_client, "max_baseline_tau": cfg.max_baseline_tau,
        "warmup": cfg.warmup, "participants": list(range(cfg.base.clients)),
        "learning_rates": {v.label: {k: getattr(cfg.run_config(v, 1), k) for k in ("beta", "rho", "mu")}
                           for v in variants},
        "order": [[c.variant.label, c.tau, c.repeat] for c in cells],
    }
    return data


def analyze_report(csv_path: Path) -> tuple["Analysis", list[str]]:
    """The analysis of a sweep's report and the lines to print beside it.

    On a GPU the round GPU's own joules (``gpu_j``) have fits, verdicts and ratios of their own, and so does
    ``gpu_net_j`` where the sidecar has the GPU's idle power (:mod:`edgeprof.report.gpu_energy`); the lines say
    how ``gpu_j`` was measured and the idle power, or why there is none. A report without a GPU has neither.
    """
    from edgeprof.report import gpu_energy
    from edgeprof.report.analysis import analyze
    from edgeprof.report.writer import read_report

    report = read_report(csv_path)
    return analyze(gpu_energy.with_net(report.rows, report.sidecar)), gpu_energy.notes(report.rows, report.sidecar)


def run_sweep(cfg: SweepConfig, *, progress: Optional[Callable[[int, int], None]] = None,
              stage: Callable[[str], None] = lambda _: None) -> SweepResult:
    """Run every cell of ``cfg`` and write one report; ``progress(done, total)`` after every cell.

    ``stage(text)`` is called as each set-up step starts (data, algorithms, meters, warm-up), and
    ``progress(0, total)`` once set-up is over.

    Order of work as in :func:`edgeprof.rounds.simulate.run`: validate, check the output folder, load the data,
    build every algorithm and open the meters before any file is created. A stop (KeyboardInterrupt,
    or Terminated for SIGTERM and SIGHUP) is re-raised after the sidecar is marked ``interrupted``.
    """
    from edgeprof.session.run import make_run_id, open_run
    from edgeprof.report.writer import check_writable
    from edgeprof.nn.compute import set_threads
    from edgeprof.host import load_native_libraries
    from edgeprof.rounds.simulate import build_federation, preflight, run_round

    preflight(cfg.base)
    check_writable(cfg.base.out, keep=False)  # early, so a bad folder fails before the data loads
    load_native_libraries()
    set_threads(cfg.base.threads)
    cells = plan_cells(cfg)
    stage(f"preparing {cfg.base.dataset} data for {cfg.base.clients} client(s)")
    clients = sweep_clients(cfg)
    participants = list(range(len(clients)))
    federations = {}
    try:
        for v in cfg.variants():
            stage(f"building {v.label} on the {cfg.base.backbone} backbone")
            federations[v] = build_federation(cfg.run_config(v, cfg.taus_for(v)[0]), clients)
            for tau in cfg.taus_for(v)[1:]:  # the algorithm's set-up at every swept tau, before any window
                federations[v].prepare(federations[v].settings_for(cfg.run_config(v, tau)))
        stage("opening the energy meters")
        phases = phases_of(dict.fromkeys(v.algo for v in cfg.variants()))
        finish = functools.partial(_sweep_sections, cfg, cells)
        # one backbone, device and plan for all; the ONNX engine's runtime says what ran its cached forward
        runtime = next((f.runtime for f in federations.values() if f.runtime.engine == "onnx"),
                       next(iter(federations.values())).runtime)
        with open_run(cfg.base, run_id=make_run_id(cfg.base, prefix="sweep"), phases=phases,
                      finish=finish, runtime=runtime) as session:
            if cfg.warmup:
                stage("warm-up: one unrecorded round per algorithm")
                _warm_up(federations, cfg, participants)
            if progress:
                progress(0, len(cells))  # set-up is over
            for index, cell in enumerate(cells, start=1):
                # the cell's tau and learning rates reach the round as arguments, not as shared state
                run_round(session.ctx, cfg.run_config(cell.variant, cell.tau), federations[cell.variant], index,
                          participants)
                session.advance(progress, len(cells))
        return SweepResult(session.ctx.run_id, session.csv_path, session.sidecar_path, session.done, len(cells), session.status)
    finally:
        for federation in federations.values():
            federation.close()

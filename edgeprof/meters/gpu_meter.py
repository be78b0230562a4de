"""What the NVML and AMD SMI meters share: a meter of the GPUs a vendor library lists, each read through its energy
counter where it has one, else through power samples a :class:`~edgeprof.meters.sampler.PowerSampler` integrates.

:class:`GpuMeter` holds the logic that is the same for both: the probe's steps and reasons, the round's GPU against
the others (domains ``<prefix>_<i>`` in column ``gpu`` and the total, ``<prefix>_other_<i>`` in column ``gpu_other``;
which GPU is the round's is :mod:`edgeprof.meters.gpu_map`'s business), the counter steps accumulated with their reset
and jump checks, the sampler's set-up and the update period it implies, and what ``describe()`` says of the round's
GPU. A subclass (:class:`~edgeprof.meters.nvml.NvmlMeter`, :class:`~edgeprof.meters.amdsmi.AmdSmiMeter`) keeps its
library's specifics: how it is loaded, initialised and let go, how its GPUs are listed and the round's is found, how a
counter (and its unit) and a power are read, what its sidecar says of each GPU, and the words of its messages.

A GPU, as a subclass lists it, has ``index``, ``handle``, ``method`` (``counter`` or ``integrated_power``),
``max_power_mw`` and ``bound_source`` (its plausible-power bound and where it comes from), ``limit_mw`` (its largest
power limit, 0 where the library gives none) and ``instant`` (whether its integrated power is an instant reading
rather than an average).

Plausibility: a counter reading below the previous one is flagged ``counter reset`` and the counter re-based; a rise
faster than the GPU's bound times (elapsed + :data:`SLACK_S`) is flagged ``counter jump``; neither adds anything.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from types import ModuleType
from typing import Any, Callable, ClassVar, Mapping

from edgeprof.errors import MeterError
from edgeprof.meters import gpu_map
from edgeprof.meters.base import Domain, Invalid, Meter, ProbeResult
from edgeprof.meters.sampler import PowerSampler

#: seconds added to the elapsed time before a counter step's implied power is compared with the bound (they cover the
#: counter's 100-ms updates and a power average of up to 1 s)
SLACK_S = 1.0


class GpuMeter(Meter):
    """Cumulative joules per GPU of a vendor library: the energy counter where present, else integrated power.

    ``module`` injects the library (tests pass a fake); ``gpu``: the torch device the round runs on (None: every GPU
    is the round's; a host device such as ``"cpu"``: none is); ``device_properties`` and ``environ`` as for the
    subclass's ``round_gpu``; ``hz`` the power sampling rate; ``clock_ns`` (default :func:`time.monotonic_ns`) times
    the power samples and the counter steps; ``start_thread=False`` leaves the sampler to be driven by hand.
    """

    #: the library as messages name it ("NVML")
    library: ClassVar[str]
    #: the library's GPUs in the probe's reason when the library does not initialise ("no NVIDIA GPU usable")
    vendor_gpu: ClassVar[str]
    #: the library's GPUs in ``describe()``'s ``round_gpu`` ("every GPU counts in column gpu")
    every_gpu: ClassVar[str]
    #: what a device whose work is on none of the library's GPUs is, in ``describe()`` ("a host device")
    not_round: ClassVar[str]
    #: domain names: ``<prefix>_<index>`` for the round's GPU, ``<prefix>_other_<index>`` for the others
    domain_prefix: ClassVar[str]
    #: the key of the round GPU's index in ``describe()``'s ``round_gpu``
    index_key: ClassVar[str]
    #: how many of the counter's energy units make a millijoule (1: the unit is mJ; 1000: uJ); the counter's steps
    #: (counts times energy per count, :meth:`_read_counter`) are accumulated in that unit
    units_per_mj: ClassVar[int]
    #: a counter reset's subject, its count unit, and a counter jump's subject; ``{index}`` is the GPU's
    reset_subject: ClassVar[str]
    count_unit: ClassVar[str]
    jump_subject: ClassVar[str]
    #: ``describe()``'s ``resolution``: with a counter, with power samples only
    resolution: ClassVar[tuple[str, str]]
    #: the update period where every GPU has a counter (seconds between its updates), and where a GPU's power is
    #: an average (the seconds it may span); with instant power only, it is the sampling period
    counter_period_s: ClassVar[float]
    power_average_s: ClassVar[float]
    #: whether opening the meter fails where no GPU can be measured (else it opens with no domain)
    needs_a_gpu: ClassVar[bool] = False
    #: the probe's fix at each step that can fail: ``load``, ``init``, ``list``, ``none`` (no GPU), ``mapping``
    fixes: ClassVar[Mapping[str, str]]

    def __init__(self, module: ModuleType | None = None, *, gpu: Any = None, hz: float = 10.0,
                 clock_ns: Callable[[], int] = time.monotonic_ns, start_thread: bool = True,
                 device_properties: Callable[[int], Any] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        if gpu is not None:
            gpu_map.parse_device(gpu)  # a typo is the user's: one line, before any library call
        self._lib = self._load(module)
        self._init(self._lib)
        self._closed, self._sampler, self.hz, self._clock_ns, self._gpu = False, None, hz, clock_ns, gpu
        try:
            self._gpus = self._list(self._lib)
            if not self._gpus and self.needs_a_gpu:
                raise MeterError(f"{self.library} found no GPU with an energy counter or a power reading")
            rounds, self._mapped = self._round_indices(self._lib, self._gpus, gpu, device_properties, environ)
            self._domains = {g.index: self._domain(g, rounds) for g in self._gpus}
            self._open_readers(hz, clock_ns)
        except MeterError:
            self.close()
            raise
        if self._sampler is not None and start_thread:
            self._sampler.start()

    # --- the library's specifics -------------------------------------------------------------------------------

    @staticmethod
    @abstractmethod
    def _load(module: ModuleType | None) -> ModuleType:
        """The library: ``module`` when given, else imported; MeterError (its text ending ``. Fix: ...``) when not."""

    @staticmethod
    @abstractmethod
    def _init(lib: ModuleType) -> None:
        """Initialise the library; MeterError with one line when the driver does not answer."""

    @staticmethod
    @abstractmethod
    def _shutdown(lib: ModuleType) -> None:
        """Let go of the library, best effort."""

    @staticmethod
    @abstractmethod
    def _list(lib: ModuleType) -> tuple[Any, ...]:
        """Every GPU the library can measure (see the module docstring); MeterError (one line) for any failure."""

    @staticmethod
    @abstractmethod
    def _find(lib: ModuleType, gpus: tuple[Any, ...], gpu: Any, device_properties, environ,
              ) -> gpu_map.Mapped | None:
        """The library's GPU that runs torch device ``gpu`` (None where none does); MeterError when unknown."""

    @abstractmethod
    def _read_counter(self, gpu: Any) -> tuple[int, float]:
        """The GPU's counter now (counts) and its energy per count, in the counter's unit (:attr:`units_per_mj`)."""

    @abstractmethod
    def _power_uw(self, gpu: Any) -> float:
        """The GPU's power now, in microwatts."""

    @abstractmethod
    def _describe_gpu(self, gpu: Any) -> dict:
        """What the sidecar records about one GPU."""

    def _describe_power(self) -> dict:
        """What the sidecar adds about the power samples, where a sampler runs."""
        return {}

    @classmethod
    def _fix(cls, step: str, err: MeterError | None) -> str:
        """The probe's fix for ``err``, raised at ``step`` (one of :attr:`fixes`' keys)."""
        return cls.fixes[step]

    # --- the probe ---------------------------------------------------------------------------------------------

    @classmethod
    def probe(cls, module: ModuleType | None = None, gpu: Any = None, *,
              device_properties: Callable[[int], Any] | None = None, environ: Mapping[str, str] | None = None,
              ) -> ProbeResult:
        """Whether the library loads, at least one GPU reports energy or power, and the round's GPU ``gpu`` (a torch
        device) is one of them; when not, why and how to fix it. A ``gpu`` that is no torch device is a ConfigError."""
        if gpu is not None:
            gpu_map.parse_device(gpu)  # a typo is the user's: one line, before any library call
        try:
            lib = cls._load(module)
        except MeterError as err:
            return ProbeResult(cls.name, False, str(err).split(". Fix")[0], cls._fix("load", err))
        try:
            cls._init(lib)
        except MeterError as err:
            return ProbeResult(cls.name, False, f"no {cls.vendor_gpu} usable: {err}", cls._fix("init", err))
        try:
            return cls._probe_gpus(lib, gpu, device_properties, environ)
        finally:
            cls._shutdown(lib)

    @classmethod
    def _probe_gpus(cls, lib: ModuleType, gpu: Any, device_properties, environ) -> ProbeResult:
        try:
            gpus = cls._list(lib)
        except MeterError as err:
            return ProbeResult(cls.name, False, f"{cls.library} error while listing GPUs: {err}", cls._fix("list", err))
        if not gpus:
            return ProbeResult(cls.name, False, f"{cls.library} found no GPU with an energy counter or a power reading",
                               cls._fix("none", None))
        try:
            rounds = cls._round_indices(lib, gpus, gpu, device_properties, environ)[0]
        except MeterError as err:
            return ProbeResult(cls.name, False, f"the round's GPU cannot be measured: {err}", cls._fix("mapping", err))
        return ProbeResult(cls.name, True, domains=tuple(cls._domain(g, rounds).name for g in gpus))

    @classmethod
    def _round_indices(cls, lib: ModuleType, gpus: tuple[Any, ...], gpu: Any, device_properties, environ,
                       ) -> tuple[frozenset[int], gpu_map.Mapped | None]:
        """The indices whose energy is the round's (every GPU when ``gpu`` is None), and the mapping."""
        if gpu is None:
            return frozenset(g.index for g in gpus), None
        mapped = cls._find(lib, gpus, gpu, device_properties, environ)
        if mapped is None:
            return frozenset(), None
        if mapped.nvml_index not in {g.index for g in gpus}:
            raise MeterError(f"{cls.library} GPU {mapped.nvml_index}, which runs torch device {gpu} ({mapped.how}), "
                             "reports neither an energy counter nor power")
        return frozenset({mapped.nvml_index}), mapped

    @classmethod
    def _domain(cls, gpu: Any, round_indices: frozenset[int]) -> Domain:
        """``<prefix>_<i>`` in column ``gpu`` for the round's GPU, ``<prefix>_other_<i>`` beside the total otherwise."""
        if gpu.index in round_indices:
            return Domain(f"{cls.domain_prefix}_{gpu.index}", "gpu", gpu.method, in_total=True)
        return Domain(f"{cls.domain_prefix}_other_{gpu.index}", "gpu_other", gpu.method, in_total=False)

    # --- the meter ---------------------------------------------------------------------------------------------

    def _open_readers(self, hz: float, clock_ns: Callable[[], int]) -> None:
        """The counters' first readings and, for GPUs without one, the power sampler (first sample now)."""
        self._counter_gpus = tuple(g for g in self._gpus if g.method == "counter")
        self._last_t_ns = clock_ns()
        self._last: dict[str, int] = {}
        self._per_count: dict[str, float] = {}  # each counter's energy per count at its first reading
        for g in self._counter_gpus:
            self._last[self._key(g)], self._per_count[self._key(g)] = self._read_counter(g)
        self._total = {key: 0 for key in self._last}  # in the unit of units_per_mj
        powered = tuple(g for g in self._gpus if g.method == "integrated_power")
        if powered:
            self.update_period_s = (max(self.counter_period_s if self._counter_gpus else 0.0, 1.0 / hz)
                                    if all(g.instant for g in powered) else self.power_average_s)
            self._sampler = PowerSampler(
                tuple(self._key(g) for g in powered), lambda: {self._key(g): self._power_uw(g) for g in powered},
                hz=hz, clock_ns=clock_ns, max_power_uw={self._key(g): g.max_power_mw * 1000 for g in powered})

    def _key(self, gpu: Any) -> str:
        return self._domains[gpu.index].name

    @property
    def sampler(self) -> PowerSampler | None:
        return self._sampler

    def domains(self) -> tuple[Domain, ...]:
        return tuple(self._domains[g.index] for g in self._gpus)

    def read_j(self) -> Mapping[str, float]:
        t_ns = self._clock_ns()
        elapsed_s = max(t_ns - self._last_t_ns, 0) / 1e9
        for gpu in self._counter_gpus:
            key = self._key(gpu)
            now, per_count = self._read_counter(gpu)
            problem = self._problem(gpu, self._last[key], now, per_count, elapsed_s)
            if problem:
                self.flag_invalid(key, problem)
            else:
                self._total[key] += (now - self._last[key]) * per_count
            self._last[key] = now
        self._last_t_ns = t_ns
        out = {key: total / (1000 * self.units_per_mj) for key, total in self._total.items()}
        if self._sampler is not None:
            energy, invalid = self._sampler.read()
            out.update(energy)
            for key, why in invalid.items():
                self.flag_invalid(key, Invalid("implausible power", why))
        return {d.name: out[d.name] for d in self.domains()}

    def _problem(self, gpu: Any, last: int, now: int, per_count: float, elapsed_s: float) -> Invalid | None:
        """Why the counter's step from ``last`` to ``now`` counts cannot be trusted (None when it can)."""
        if now < last:
            return Invalid("counter reset", f"{self.reset_subject.format(index=gpu.index)} went back from {last} to "
                                            f"{now} {self.count_unit} (driver reload or GPU reset)")
        step = (now - last) * per_count
        if step > gpu.max_power_mw * self.units_per_mj * (elapsed_s + SLACK_S):  # mW x units_per_mj: units per s
            return Invalid("counter jump", f"{self.jump_subject.format(index=gpu.index)} rose "
                                           f"{step / (1000 * self.units_per_mj):.6g} J in {elapsed_s:.3g} s, over "
                                           f"{gpu.max_power_mw / 1000:g} W ({gpu.bound_source}) x (elapsed + "
                                           f"{SLACK_S:g} s)")
        return None

    def power_limits_w(self) -> Mapping[str, float]:
        """Each GPU's largest power limit (or cap) where the library gives one (a drawn power above it is flagged)."""
        return {self._key(g): g.limit_mw / 1000 for g in self._gpus if g.limit_mw}

    def power_bounds_w(self) -> Mapping[str, float]:
        return {self._key(g): g.max_power_mw / 1000 for g in self._gpus}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sampler is not None:
            self._sampler.stop()
        self._shutdown(self._lib)

    def describe(self) -> dict:
        info = super().describe()
        info["gpus"] = [self._describe_gpu(g) for g in self._gpus]
        info["round_gpu"] = self._describe_round()
        if self._sampler is not None:
            info["sampling_hz"] = self.hz
            info.update(self._describe_power())
        info["resolution"] = self.resolution[0 if self._counter_gpus else 1]
        return info

    def _describe_round(self) -> dict:
        """Which GPU is the round's, how that was found, and what happens to the others."""
        if self._gpu is None:
            return {"device": None,
                    "how": f"no torch device given: every {self.every_gpu} counts in column gpu and the total"}
        if self._mapped is None:
            return {"device": str(self._gpu),
                    "how": f"{self.not_round}: every {self.every_gpu} is in column gpu_other, not the total"}
        out = {"device": str(self._gpu), self.index_key: self._mapped.nvml_index, "how": self._mapped.how,
               "others": "column gpu_other, not in the total"}
        if self._mapped.mig:
            out["mig"] = f"a MIG instance: {self.library}'s figures are its whole GPU's, every instance on it included"
        return out

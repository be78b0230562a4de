"""Apple silicon energy through IOReport, read by zeus-apple-silicon (``edgeprof[apple]``; imported only when probed).

On an M-series Mac, IOReport's "Energy Model" channels are cumulative energy counters per part of the SoC, readable
without sudo. zeus-apple-silicon (ml-energy/zeus-apple-silicon, the library Zeus reads them with) gives them as
``AppleEnergyMonitor().get_cumulative_energy()``: an ``AppleEnergyMetrics`` of integer millijoules counted from a
point fixed for the monitor's lifetime, each field ``None`` where the chip has no such channel. Each field read here
is one domain, method ``counter``; deltas are accumulated in integer millijoules:

  * in the total: ``cpu_total_mj`` (domain and column ``soc_cpu``: every CPU cluster, cores and cluster managers),
    ``gpu_mj`` (``soc_gpu``), ``ane_mj`` (``soc_ane``, the Neural Engine) and ``dram_mj`` (``soc_dram``);
  * beside it: ``gpu_sram_mj`` (``soc_gpu_sram``): whether IOReport's GPU channel contains it is not documented, so
    it is reported and never added (nothing is counted twice);
  * not reported: the per-core, per-cluster and cluster-manager fields, which are inside ``cpu_total_mj`` (as RAPL's
    core and uncore are inside their package).

The figures are Apple's energy model (estimated from activity, frequency and voltage), not a power sensor's; the
library's README puts their resolution at 1 mJ and says windows under about 10 ms are dominated by quantization, so
``update_period_s`` is :data:`UPDATE_PERIOD_S` (10 ms) and a shorter window is flagged ``short_window``. The SoC's
GPU and Neural Engine are in the total because they are part of the machine the round runs on (as a RAPL package
holds its integrated GPU); rounds run on the CPU: torch's ``mps`` device is no device kind of the compute seam.

Plausibility: the counters only grow while the monitor lives; a reading below the previous one is flagged ``counter
reset`` and re-based, a rise faster than :data:`DEFAULT_MAX_POWER_W` per domain times (elapsed + 1 s) ``counter
jump``; a field that stops answering (``None``) is flagged ``counter missing``. None of them adds anything.

Probing: on a machine that is not macOS on arm64 the library is not even imported (it cannot be installed there);
on a Mac the probe tells apart the library not installed, installed without its native extension
(``zeus_apple_silicon.zeus_ext``), IOReport refusing the subscription (``RuntimeError``), and a chip whose channels
the library does not know (every field ``None``). The module is injectable (``apple_module``) so tests pass a fake
with the library's classes.

On an Ultra chip (two dies, channels prefixed ``DIE_N_``), zeus-apple-silicon 1.1.0 keeps one die's CPU and GPU
channel where it should add both; its repository sums them since (multi-die support, after 1.1.0), so there the
figures are half the chip until a release has it.
"""

from __future__ import annotations

import platform
import sys
import time
from types import ModuleType
from typing import Any, Callable, Mapping

from edgeprof.errors import MeterError
from edgeprof.meters.base import Backend, Domain, Invalid, Meter, ProbeResult

INSTALL_FIX = "on an Apple silicon Mac: pip install 'edgeprof[apple]' (zeus-apple-silicon; no sudo needed)"
ARM64_FIX = ("on Apple silicon, use an arm64 Python (python -c 'import platform; print(platform.machine())' prints "
             "arm64), then pip install 'edgeprof[apple]'")
NATIVE_FIX = ("reinstall it on this Mac so that its extension is built for this Python: pip install --force-reinstall "
              "--no-cache-dir zeus-apple-silicon (needs the Xcode command line tools: xcode-select --install)")
#: (AppleEnergyMetrics field, domain and report column, counted in the total)
FIELDS = (("cpu_total_mj", "soc_cpu", True), ("gpu_mj", "soc_gpu", True), ("ane_mj", "soc_ane", True),
          ("dram_mj", "soc_dram", True), ("gpu_sram_mj", "soc_gpu_sram", False))
#: seconds below which a window is not resolved (the library's README: quantization dominates under ~10 ms)
UPDATE_PERIOD_S = 0.01
#: watts no part of an Apple SoC draws (a whole Mac Studio with an M-series Ultra is rated under 500 W)
DEFAULT_MAX_POWER_W = 500
#: seconds added to the elapsed time before a counter step's implied power is compared with the bound
SLACK_S = 1.0


def this_system() -> tuple[str, str]:
    """(``sys.platform``, machine) of this Python: ``("darwin", "arm64")`` on Apple silicon."""
    return sys.platform, platform.machine().lower()


def load_apple(apple_module: ModuleType | None = None, system: tuple[str, str] | None = None) -> ModuleType:
    """The library: the injected module, else ``import zeus_apple_silicon`` on macOS/arm64; MeterError with one line
    (and ``. Fix: ...``) on another machine, when it is absent, or when its native extension does not load."""
    if apple_module is not None:
        return apple_module
    os_name, machine = system or this_system()
    if os_name == "darwin" and machine not in ("arm64", "aarch64"):
        raise MeterError(f"this Python runs as {machine} on macOS (an Intel Mac, or Rosetta): IOReport's energy "
                         f"counters are read on Apple silicon from an arm64 Python. Fix: {ARM64_FIX}")
    if os_name != "darwin":
        raise MeterError(f"not an Apple silicon Mac ({os_name}, {machine}): IOReport's energy counters exist only on "
                         f"macOS on M-series chips. Fix: {INSTALL_FIX}")
    try:
        import zeus_apple_silicon
    except ImportError as err:
        if err.name == "zeus_apple_silicon":
            raise MeterError(f"zeus-apple-silicon is not installed. Fix: {INSTALL_FIX}") from err
        raise MeterError(f"zeus-apple-silicon is installed but its native extension does not load "
                         f"({type(err).__name__}: {err}). Fix: {NATIVE_FIX}") from err
    except Exception as err:  # a broken install: one line, not a traceback
        raise MeterError(f"zeus-apple-silicon cannot be imported ({type(err).__name__}: {err}). "
                         f"Fix: {NATIVE_FIX}") from err
    return zeus_apple_silicon


def _one_line(err: BaseException) -> str:
    try:
        text = " ".join(str(err).split())
    except Exception:
        text = ""
    return f"{type(err).__name__}: {text}".rstrip(": ")


def open_monitor(apple: ModuleType) -> Any:
    """``AppleEnergyMonitor()`` (an IOReport subscription); MeterError with one line when IOReport refuses it."""
    try:
        return apple.AppleEnergyMonitor()
    except Exception as err:
        raise MeterError(f"IOReport refused the energy subscription ({_one_line(err)})") from err


def cumulative_mj(apple: ModuleType, monitor: Any) -> dict[str, int | None]:
    """Each field of :data:`FIELDS` from ``get_cumulative_energy()``: integer millijoules, or None when absent."""
    try:
        metrics = monitor.get_cumulative_energy()
    except Exception as err:
        raise MeterError(f"IOReport energy reading failed ({_one_line(err)})") from err
    out: dict[str, int | None] = {}
    for field, domain, _ in FIELDS:
        value = getattr(metrics, field, None)
        out[domain] = None if value is None or isinstance(value, bool) or not isinstance(value, int) else value
    return out


def probe(apple_module: ModuleType | None = None, *, system: tuple[str, str] | None = None) -> ProbeResult:
    """Whether IOReport's energy counters can be read here through zeus-apple-silicon (see the module docstring)."""
    try:
        apple = load_apple(apple_module, system)
        readings = cumulative_mj(apple, open_monitor(apple))
    except MeterError as err:
        reason, _, fix = str(err).partition(". Fix: ")
        return ProbeResult("apple", False, reason, fix or "check that this is an M-series Mac on a supported macOS "
                                                          "(python -c 'import zeus_apple_silicon as z; "
                                                          "print(z.AppleEnergyMonitor().get_cumulative_energy())')")
    found = tuple(domain for domain, value in readings.items() if value is not None)
    if not found:
        return ProbeResult("apple", False, "IOReport gives no energy channel zeus-apple-silicon knows (a chip newer "
                                           "than this version of the library?)", "pip install -U zeus-apple-silicon")
    return ProbeResult("apple", True, domains=found)


class AppleSiliconMeter(Meter):
    """Cumulative joules per part of an Apple SoC from IOReport's energy counters (see the module docstring).

    ``clock_ns`` (default :func:`time.monotonic_ns`) times the steps between readings for the plausibility check.
    """

    name = "apple"
    update_period_s = UPDATE_PERIOD_S

    def __init__(self, apple_module: ModuleType | None = None, *, system: tuple[str, str] | None = None,
                 clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._apple = load_apple(apple_module, system)
        self._monitor = open_monitor(self._apple)
        self._clock_ns = clock_ns
        self._last_t_ns = clock_ns()
        first = cumulative_mj(self._apple, self._monitor)
        self._domains = tuple(Domain(domain, domain, "counter", in_total=in_total)
                              for _, domain, in_total in FIELDS if first[domain] is not None)
        if not self._domains:
            raise MeterError("IOReport gives no energy channel zeus-apple-silicon knows")
        self._last = {d.name: first[d.name] for d in self._domains}
        self._total_mj = {d.name: 0 for d in self._domains}

    def domains(self) -> tuple[Domain, ...]:
        return self._domains

    def read_j(self) -> Mapping[str, float]:
        t_ns = self._clock_ns()
        elapsed_s = max(t_ns - self._last_t_ns, 0) / 1e9
        now = cumulative_mj(self._apple, self._monitor)
        for key, last in self._last.items():
            problem = self._problem(key, last, now[key], elapsed_s)
            if problem:
                self.flag_invalid(key, problem)
            else:
                self._total_mj[key] += now[key] - last
            if now[key] is not None:
                self._last[key] = now[key]
        self._last_t_ns = t_ns
        return {key: mj / 1000 for key, mj in self._total_mj.items()}

    @staticmethod
    def _problem(key: str, last: int, now: int | None, elapsed_s: float) -> Invalid | None:
        """Why the step from ``last`` to ``now`` mJ cannot be trusted (None when it can)."""
        if now is None:
            return Invalid("counter missing", f"IOReport no longer gives {key}'s energy channel")
        if now < last:
            return Invalid("counter reset", f"{key} energy went back from {last} to {now} mJ")
        if now - last > DEFAULT_MAX_POWER_W * (elapsed_s + SLACK_S) * 1000:  # mJ vs W * s * 1000
            return Invalid("counter jump", f"{key} energy rose {(now - last) / 1000:.6g} J in {elapsed_s:.3g} s, over "
                                           f"{DEFAULT_MAX_POWER_W} W x (elapsed + {SLACK_S:g} s)")
        return None

    def describe(self) -> dict:
        info = super().describe()
        info["resolution"] = "1 mJ counters (Apple's energy model, not a power sensor)"
        info["total"] = ("sum of " + ", ".join(d.name for d in self._domains if d.in_total)
                         + "; CPU clusters, cores and managers are inside soc_cpu and not reported")
        info["library"] = "zeus-apple-silicon (IOReport)"
        return info


#: discovery's view of Apple silicon: once opened, the CPU side is measured (the estimate stands down)
BACKEND = Backend(
    name="apple", title="IOReport (Apple silicon)",
    columns=("soc_cpu", "soc_gpu", "soc_ane", "soc_dram", "soc_gpu_sram"), measures_cpu=True,
    settings={"apple_module": None},
    probe=lambda ctx: probe(ctx.settings["apple_module"]),
    open=lambda ctx: AppleSiliconMeter(ctx.settings["apple_module"]),
)

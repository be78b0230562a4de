"""NVIDIA Jetson board power from the INA3221 monitors, integrated by a sampler thread.

Two sysfs layouts (root defaulting to ``/sys``):
  * JetPack 5+ (hwmon): ``bus/i2c/drivers/ina3221/*/hwmon/hwmon*/in<k>_label``, ``in<k>_input`` (bus
    voltage, mV) and ``curr<k>_input`` (mA); power = mV * mA (uW, exact integer).
  * JetPack 4 (iio): ``bus/i2c/drivers/ina3221x/*/iio:device*/rail_name_<k>`` and
    ``in_power<k>_input`` (mW).
Channels labelled ``NC`` (not connected) or ``sum ...`` (the driver's summation channel) are skipped.

Rails seen on real boards:
  * Orin Nano / Orin NX (JP5+): VDD_IN (module input), VDD_CPU_GPU_CV, VDD_SOC.
  * Xavier NX (JP4): VDD_IN, VDD_CPU_GPU_CV, VDD_SOC.     * TX2 (JP4): VDD_IN, VDD_SYS_CPU, VDD_SYS_GPU, ...
  * Nano (JP4): POM_5V_IN, POM_5V_CPU, POM_5V_GPU.
  * AGX Orin: VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0 (+ VDDQ_VDD2_1V8AO on the second monitor): no input rail.

What counts: the input rail (``VDD_IN``, ``POM_5V_IN``) is domain ``board_total`` and is the total; the
sub-rails are inside it and are reported with ``in_total=False`` (columns ``board_cpu``/``board_gpu``/
``board_soc``), never added to it. A board without an input rail (AGX Orin, AGX Xavier) reports its rails
with ``in_total=True``: the total is then the sum of the listed rails, a *partial* figure that excludes
regulator conversion losses, the carrier board and anything on an unmonitored rail; ``describe()`` says so.
Rails that are neither CPU nor GPU (VDD_SOC, VIN_SYS_5V0, DDR rails) go to column ``board_soc``.

Plausibility: voltage, current and power cannot be negative on these rails (the monitors measure the load
side of each rail), so a sample with a negative ``in<k>_input``, ``curr<k>_input`` or ``in_power<k>_input``
is :class:`~edgeprof.meters.sampler.Implausible`: never integrated, and the rail is invalid in every window
that a trapezoid touching it falls in (``implausible power``). So is a reading above what the monitor can
produce (hwmon layout): a bus voltage over the INA3221's 32.76 V full scale (12 bits of 8 mV), or a current over
163.8 mV (its shunt ADC's full scale) through the rail's ``shunt<k>_resistor``. The iio layout (JetPack 4's
``ina3221x``) integrates its ``in_power<k>_input``; the driver also shows the bus voltage and current
(``in_voltage<k>_input``, ``in_current<k>_input``) and settable alert limits (``crit_current_limit_<k>``), but not the
shunt resistors, so no full scale of the current, and none of the power, is known: its rails have no upper bound
(an alert limit is the operator's setting, not what the monitor can read), and ``describe()`` says so. A rail whose label file is missing, a directory, unreadable or not UTF-8 is left out with
the reason (``ProbeResult.skipped``, ``describe()``).

Resolution: the monitor converts a new reading every ``update_interval`` ms (hwmon: the channels, the averaging
and the conversion times set it; 1 ms to over a second). Sampling faster only repeats readings, so the meter's
update period is the longer of 1 / ``hz`` and that interval: a window shorter than it is ``short_window``.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters.base import Backend, Domain, Invalid, Meter, MeterOption, ProbeResult
from edgeprof.meters.sampler import Implausible, PowerSample, PowerSampler
from edgeprof.meters.sysfs import IntFile, read_label, read_positive_int

#: names of the board's input rail (the total), upper-cased
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN", "VIN", "VDD_IN_TOTAL")

#: what a permission error on a rail file names as its fix
PERMISSION_FIX = "run as root or chmod a+r it"

#: the INA3221's full scales: bus voltage (12 bits of 8 mV) and shunt voltage (12 bits of 40 uV), mV
BUS_FULL_SCALE_MV = 32760
SHUNT_FULL_SCALE_MV = 163.8

NO_TOTAL_NOTE = (
    "this board has no total input rail; total = sum of the listed rails, which excludes regulator "
    "conversion losses, the carrier board and unmonitored rails (partial)"
)


@dataclass(frozen=True)
class Rail:
    """One INA3221 channel: where to read it and how its reading converts to microwatts."""

    label: str
    layout: str  # "hwmon" or "iio"
    power_file: Path  # in_power<k>_input (mW) or in<k>_input (mV)
    current_file: Path | None  # curr<k>_input (mA) for hwmon
    #: the most the monitor can read: bus mV and current mA (hwmon: full scale, through its shunt); None: unknown
    max_mv: int | None = None
    max_ma: float | None = None
    #: the monitor's conversion period (hwmon ``update_interval``), seconds; 0: not exposed
    update_s: float = 0.0

    @property
    def max_w(self) -> float | None:
        """The most power this rail's readings can show, W (None: no bound known)."""
        if self.max_mv is None or self.max_ma is None:
            return None
        return self.max_mv * self.max_ma / 1e6

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.power_file,) if self.current_file is None else (self.power_file, self.current_file)

    def open(self) -> "OpenRail":
        """The rail with its files kept open, for a sampler that reads it many times a second."""
        return OpenRail(self)

    def read_uw(self) -> PowerSample:
        """Microwatts now (files opened and closed again), or :class:`Implausible` (see :class:`OpenRail`)."""
        rail = self.open()
        try:
            return rail.read_uw()
        finally:
            rail.close()


class OpenRail:
    """A rail whose files stay open between readings (one ``pread`` a file a sample)."""

    def __init__(self, rail: Rail) -> None:
        self.rail = rail
        self._files = tuple(IntFile(path, "Jetson rail", PERMISSION_FIX) for path in rail.files)

    def read_uw(self) -> PowerSample:
        """Microwatts now, or :class:`Implausible` (naming the file) when a reading is negative."""
        values = [f.read() for f in self._files]
        for path, value in zip(self.rail.files, values):
            if value < 0:
                return Implausible(f"rail {self.rail.label}: {path.name} reads {value} (negative)")
        if self.rail.current_file is None:
            return values[0] * 1000
        (volt, mv), (curr, ma) = zip(self.rail.files, values)
        if self.rail.max_mv is not None and mv > self.rail.max_mv:
            return Implausible(f"rail {self.rail.label}: {volt.name} reads {mv} mV, above the monitor's "
                               f"{self.rail.max_mv} mV full scale")
        if self.rail.max_ma is not None and ma > self.rail.max_ma:
            return Implausible(f"rail {self.rail.label}: {curr.name} reads {ma} mA, above the {self.rail.max_ma:.0f} "
                               f"mA its shunt lets the monitor read ({SHUNT_FULL_SCALE_MV} mV full scale)")
        return mv * ma

    def close(self) -> None:
        for f in self._files:
            f.close()


def _skip(label: str) -> bool:
    return not label or label.upper() == "NC" or label.lower().startswith("sum")


def _hwmon_rails(root: Path) -> tuple[list[Rail], list[str]]:
    rails, skipped = [], []
    for hwmon in sorted(root.glob("bus/i2c/drivers/ina3221/*/hwmon/hwmon*")):
        interval_ms = read_positive_int(hwmon / "update_interval")
        for label_file in sorted(hwmon.glob("in*_label")):
            k = re.fullmatch(r"in(\d+)_label", label_file.name)
            if k is None:
                continue
            label, why = read_label(label_file)
            if label is None:
                skipped.append(f"rail {label_file.name} left out: {why}")
                continue
            volt, curr = hwmon / f"in{k[1]}_input", hwmon / f"curr{k[1]}_input"
            if not _skip(label) and volt.exists() and curr.exists():
                shunt_uohm = read_positive_int(hwmon / f"shunt{k[1]}_resistor")
                max_ma = None if shunt_uohm is None else SHUNT_FULL_SCALE_MV * 1e6 / shunt_uohm
                rails.append(Rail(label, "hwmon", volt, curr, BUS_FULL_SCALE_MV, max_ma,
                                  (interval_ms or 0) / 1000.0))
    return rails, skipped


def _iio_rails(root: Path) -> tuple[list[Rail], list[str]]:
    rails, skipped = [], []
    for dev in sorted(root.glob("bus/i2c/drivers/ina3221x/*/iio:device*")):
        for name_file in sorted(dev.glob("rail_name_*")):
            k = name_file.name.rsplit("_", 1)[1]
            label, why = read_label(name_file)
            if label is None:
                skipped.append(f"rail {name_file.name} left out: {why}")
                continue
            power = dev / f"in_power{k}_input"
            if not _skip(label) and power.exists():
                rails.append(Rail(label, "iio", power, None))
    return rails, skipped


def scan_rails(sysfs_root: str | os.PathLike) -> tuple[list[Rail], list[str]]:
    """Every connected INA3221 rail, hwmon layout first, labels made unique; and, one line each, the rails
    left out because their label cannot be read."""
    root = Path(sysfs_root)
    (hwmon, hwmon_skipped), (iio, iio_skipped) = _hwmon_rails(root), _iio_rails(root)
    rails, seen = [], set()
    for rail in hwmon + iio:
        if rail.label not in seen:
            seen.add(rail.label)
            rails.append(rail)
    return rails, hwmon_skipped + iio_skipped


def find_rails(sysfs_root: str | os.PathLike) -> list[Rail]:
    """Every connected INA3221 rail, hwmon layout first; labels made unique."""
    return scan_rails(sysfs_root)[0]


def _column(label: str) -> str:
    upper = label.upper()
    if "GPU" in upper and "CPU" not in upper and "SOC" not in upper:
        return "board_gpu"
    if "CPU" in upper:
        return "board_cpu"  # includes VDD_CPU_GPU_CV (CPU, GPU and CV share that rail)
    if "GPU" in upper:
        return "board_gpu"  # VDD_GPU_SOC
    return "board_soc"


def rail_domains(labels: list[str]) -> tuple[Domain, ...]:
    """Domains for the rails: the input rail is ``board_total``; the rest nest inside it, if present."""
    has_total = any(label.upper() in TOTAL_RAILS for label in labels)
    domains = []
    for label in labels:
        if label.upper() in TOTAL_RAILS:
            domains.append(Domain("board_total", "board_total", "integrated_power", in_total=True))
        else:
            name = "board_" + re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
            domains.append(Domain(name, _column(label), "integrated_power", in_total=not has_total))
    return tuple(domains)


def probe(sysfs_root: str | os.PathLike) -> ProbeResult:
    """Whether INA3221 rails exist here and can be read."""
    rails, skipped = scan_rails(sysfs_root)
    skipped = tuple(skipped)
    drivers = Path(sysfs_root) / "bus/i2c/drivers"
    if not rails and skipped:
        return ProbeResult("jetson", False, f"no usable INA3221 rail under {drivers} (each one left out: see skipped)",
                           "check the ina3221 driver (dmesg | grep ina3221)", skipped=skipped)
    if not rails:
        return ProbeResult(
            "jetson", False, f"no INA3221 rails under {drivers} (not a Jetson)",
            "on a Jetson: check that the ina3221 driver is loaded (ls /sys/bus/i2c/drivers/ina3221*); "
            "in a container mount the host's /sys and set EDGEPROF_SYSFS_ROOT",
        )
    try:
        for rail in rails:
            rail.read_uw()
    except MeterPermissionError as err:
        return ProbeResult("jetson", False, str(err), "sudo chmod a+r the rail files, or run as root", skipped=skipped)
    except MeterError as err:
        return ProbeResult("jetson", False, str(err), "check the ina3221 driver (dmesg | grep ina3221)",
                           skipped=skipped)
    return ProbeResult("jetson", True, domains=tuple(d.name for d in rail_domains([r.label for r in rails])),
                       skipped=skipped)


class JetsonMeter(Meter):
    """Cumulative joules per INA3221 rail, from power samples at ``hz`` integrated by trapezoids."""

    name = "jetson"

    def __init__(self, sysfs_root: str | os.PathLike, *, hz: float = 10.0,
                 clock_ns: Callable[[], int] = time.monotonic_ns, start_thread: bool = True) -> None:
        self.sysfs_root = str(sysfs_root)
        rails, skipped = scan_rails(sysfs_root)
        self._rails, self._skipped = tuple(rails), tuple(skipped)
        if not self._rails:
            raise MeterError(f"no INA3221 rails under {sysfs_root}" + (f" ({'; '.join(skipped)})" if skipped else ""))
        self._domains = rail_domains([r.label for r in self._rails])
        self.hz = float(hz)
        #: a new reading every sampling period, or every conversion of the monitor where that is longer
        self.update_period_s = max(1.0 / self.hz, max(r.update_s for r in self._rails))
        pairs = tuple(zip((d.name for d in self._domains), (r.open() for r in self._rails)))
        self._open = tuple(rail for _, rail in pairs)
        self._sampler = PowerSampler(
            tuple(name for name, _ in pairs), lambda: {name: rail.read_uw() for name, rail in pairs},
            hz=hz, clock_ns=clock_ns,
        )
        if start_thread:
            self._sampler.start()

    @property
    def sampler(self) -> PowerSampler:
        return self._sampler

    @property
    def has_total_rail(self) -> bool:
        return any(d.column == "board_total" for d in self._domains)

    def domains(self) -> tuple[Domain, ...]:
        return self._domains

    def read_j(self) -> Mapping[str, float]:
        energy, invalid = self._sampler.read()
        for name, why in invalid.items():
            self.flag_invalid(name, Invalid("implausible power", why))
        return energy

    def power_bounds_w(self) -> Mapping[str, float]:
        return {d.name: r.max_w for d, r in zip(self._domains, self._rails) if r.max_w is not None}

    def close(self) -> None:
        self._sampler.stop()
        for rail in self._open:
            rail.close()

    def describe(self) -> dict:
        info = super().describe()
        info["sampling_hz"] = self.hz
        info["rails"] = [{"label": r.label, "layout": r.layout, "domain": d.name, **_bounds(r)}
                         for r, d in zip(self._rails, self._domains)]
        conversion = max(r.update_s for r in self._rails)
        info["resolution"] = "integer mW (iio) or mV x mA (hwmon) samples" + (
            f"; the monitor converts every {conversion * 1000:g} ms (update_interval), so the update period is "
            f"{self.update_period_s * 1000:g} ms" if conversion else "")
        info["total"] = ("board_total: the input rail (sub-rails are inside it and not added)"
                         if self.has_total_rail else NO_TOTAL_NOTE)
        info["partial_total"] = not self.has_total_rail
        if self._skipped:
            info["skipped"] = list(self._skipped)
            if not self.has_total_rail:  # the input rail may be among those left out
                info["total"] = info["total"].replace("this board has no total input rail",
                                                      "no total input rail among the readable rails (see skipped)")
        return info


def _bounds(rail: Rail) -> dict:
    """What ``describe()`` says of a rail's upper bound: the most it can read, or why none is known."""
    if rail.max_w is not None:
        return {"max_w": round(rail.max_w, 3),
                "max_from": f"{rail.max_mv} mV bus full scale x {rail.max_ma:.0f} mA shunt full scale"}
    if rail.layout == "iio":
        return {"max_w": None, "max_from": "none: the iio driver does not expose its shunt resistors, so the "
                                            "current's full scale is not known (only negative readings are "
                                            "flagged)"}
    shunt = rail.current_file.name.replace("curr", "shunt").replace("_input", "_resistor")
    return {"max_w": None, "max_from": f"none for the current: no readable {shunt} (a bus voltage over "
                                        f"{rail.max_mv} mV is flagged)"}


#: the fastest rail sampling, Hz (the INA3221 converts in about 1 ms per channel)
MAX_HZ = 1000.0


def check_settings(given) -> str | None:
    """``jetson_hz`` must be a number in (0, MAX_HZ]."""
    import math

    hz = given.get("jetson_hz", 10.0)
    if isinstance(hz, bool) or not isinstance(hz, (int, float)) or not (math.isfinite(hz) and hz > 0):
        return f"jetson-hz must be positive, got {hz}"
    if hz > MAX_HZ:
        return f"jetson-hz must be at most {MAX_HZ:g}, got {hz}"
    return None


#: discovery's view of the Jetson rails (sampled at ``jetson_hz``); the CPU rail measures the CPU side
BACKEND = Backend(
    name="jetson", title="the Jetson rails", columns=("board_total", "board_cpu", "board_gpu", "board_soc"),
    options=(MeterOption("jetson_hz", 10.0, "Sampling rate of the Jetson power rails, Hz."),),
    measures_cpu=True, check=check_settings,
    probe=lambda ctx: probe(ctx.sysfs_root),
    open=lambda ctx: JetsonMeter(ctx.sysfs_root, hz=ctx.settings["jetson_hz"]),
)

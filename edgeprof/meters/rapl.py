"""Intel and AMD RAPL energy counters through the Linux powercap sysfs interface.

Layout read (``<root>/class/powercap``, root defaulting to ``/sys``): one entry per zone,
``intel-rapl:N`` (top level: ``package-N``, ``psys``, sometimes ``dram``) and ``intel-rapl:N:M``
(sub-zones: ``core``, ``uncore``, ``dram``), each with ``name``, ``energy_uj`` and
``max_energy_range_uj``. ``intel-rapl-mmio:N`` exposes the same package counter again through MMIO; it is
used only for a package the MSR interface does not show, never twice. AMD Zen CPUs use the same layout.

What counts towards the total (nesting is never summed):
  * ``psys`` present: psys (the whole platform) is the total; packages and DRAM are reported beside it
    with ``in_total=False``, and so is another meter's GPU (``Domain.platform``: a laptop's discrete GPU draws
    from the platform's supply). A psys whose counter reads exactly 0 at open while a package's has counted since
    boot is not wired on this board: it is left out (``skipped``) and the packages and DRAM are the total. A psys
    that falls short of the packages and DRAM inside it (their steps since the meter opened, by more than a tenth of
    them, one psys unit and 10 mJ) is ``implausible energy`` in those steps, and counts again once it caught up.
  * else: every ``package-N`` plus every ``dram`` zone (DRAM is not part of the package counter).
  * ``core`` and ``uncore`` sit inside their package and are not reported.

Counter wrap: ``max_energy_range_uj`` is the largest value ``energy_uj`` can show (the kernel converts
the all-ones 32-bit raw counter to microjoules), so the counter takes values ``0..max`` and
``delta = (now - last) mod (max_energy_range_uj + 1)``. The true period is one raw energy unit
(15.3 or 61 uJ) longer than ``max + 1``; that error, at most one unit per wrap, is below the counter's
resolution. A counter that wraps more than once between two reads cannot be detected: at 200 W a
262 kJ range lasts about 20 minutes, so read at least that often. Energy is accumulated in integer
microjoules. Since Linux 5.10 ``energy_uj`` is readable by root only; the probe says so and names the fix.

Plausibility (no implausible step is ever added): a step is accepted only when its implied power,
``delta / (elapsed + 1 s)``, is at most the zone's bound; elapsed is the monotonic time since the previous
reading (an injectable ``clock_ns``) and the second of slack absorbs the counter's update granularity and
scheduling delays. The bound is twice the largest positive ``constraint_*_max_power_uw`` or
``constraint_*_power_limit_uw`` of the zone (PL1's max power is only the TDP, and a laptop holds its short-term
limit PL2, two to four times that, for tens of seconds; twice, because short bursts may exceed a limit), else
:data:`DEFAULT_MAX_POWER_W` (1000 W per package or psys, 500 W per DRAM zone: beyond any shipping part). So a
decrease is taken as a wrap only when the energy it implies, ``max - last + now + 1``, could have been drawn in the
elapsed time. Any other decrease (a counter that jumps back: about 262 kJ in one
window if read as a wrap), an increase faster than the bound, and a value outside ``0..max`` (with the step
after it) are flagged ``counter jump`` (:meth:`~edgeprof.meters.base.Meter.flag_invalid`) and add nothing.
A zone whose ``max_energy_range_uj`` is missing, unreadable, zero or negative has no usable counter period: it is
not opened, and the probe says why (``skipped``), as for a zone whose ``name`` is missing, a directory, unreadable or
not UTF-8. Each zone's energy unit is its range over the 32-bit counter's all-ones value (``describe()``'s
``resolution``): 15.3 or 61 uJ on most parts, 1 J for a Sapphire Rapids server's psys, whose joules in a short window
or phase are whole joules. The coarsest unit of the zones in the total is the meter's ``energy_quantum_j``: a window
or phase in which they count less than one unit is ``short_window`` / ``short_phases``, however long it lasted.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters.base import Backend, Domain, Invalid, Meter, ProbeResult
from edgeprof.meters.sysfs import IntFile, read_label, read_positive_int

_ZONE_RE = re.compile(r"^intel-rapl(?P<mmio>-mmio)?:(?P<top>\d+)(?::(?P<sub>\d+))?$")

PERMISSION_FIX = (
    "sudo chmod -R a+r /sys/class/powercap/intel-rapl:*/energy_uj (until reboot), or permanently a udev "
    'rule in /etc/udev/rules.d/99-powercap.rules: SUBSYSTEM=="powercap", ACTION=="add", '
    'RUN+="/bin/chmod a+r /sys%p/energy_uj"'
)


#: watts a zone of each kind is taken to stay below when its powercap files give no limit (generous on purpose)
DEFAULT_MAX_POWER_W = {"package": 1000, "psys": 1000, "dram": 500}
#: seconds added to the elapsed time before a step's implied power is compared with the bound
SLACK_S = 1.0
#: the raw energy counter behind ``energy_uj``: 32 bits (``max_energy_range_uj`` is its all-ones value in uJ)
RAW_COUNTER_MAX = 2**32 - 1
#: how far psys may fall short of the packages and DRAM inside it (a share of theirs, and uJ) before it is implausible
BEHIND_SHARE = 0.1
BEHIND_SLACK_UJ = 10_000


@dataclass(frozen=True)
class RaplZone:
    """One powercap zone that edgeprof reports, with the power bound its steps are checked against."""

    path: Path
    zone_name: str  # the kernel's name: package-0, dram, psys
    domain: Domain
    max_energy_range_uj: int
    max_power_uw: int = DEFAULT_MAX_POWER_W["package"] * 10**6
    max_power_source: str = "default"

    @property
    def unit_uj(self) -> float:
        """The counter's energy unit: the kernel's range is the all-ones 32-bit raw counter in microjoules (15.3 or
        61 uJ on most parts; 1 J for a Sapphire Rapids server's psys)."""
        return self.max_energy_range_uj / RAW_COUNTER_MAX


def powercap_dir(sysfs_root: str | os.PathLike) -> Path:
    return Path(sysfs_root) / "class" / "powercap"


def _counter(zone_path: Path) -> IntFile:
    """The zone's ``energy_uj``, kept open; permission problems become :class:`MeterPermissionError`."""
    return IntFile(zone_path / "energy_uj", "RAPL counter", PERMISSION_FIX)


def _read_uj(path: Path) -> int:
    """Read an integer counter once (probing); permission problems become :class:`MeterPermissionError`."""
    counter = IntFile(path, "RAPL counter", PERMISSION_FIX)
    try:
        return counter.read()
    finally:
        counter.close()


def _socket_label(zone_name: str, parent_name: str | None) -> str:
    """``package-0`` -> ``0``; ``package-0-die-1`` -> ``0_die_1``; a dram zone takes its package's."""
    source = zone_name if zone_name.startswith("package-") else (parent_name or "")
    if source.startswith("package-"):
        return source[len("package-"):].replace("-", "_")
    return ""


def _kind(name: str) -> str | None:
    """``package``, ``psys`` or ``dram`` for a zone edgeprof reports; None for core, uncore and the rest."""
    if name.startswith("package-"):
        return "package"
    return name if name in ("psys", "dram") else None


def _power_bound(path: Path, kind: str) -> tuple[int, str]:
    """The zone's plausible-power bound in uW and where it comes from (see the module docstring)."""
    files = sorted([*path.glob("constraint_*_max_power_uw"), *path.glob("constraint_*_power_limit_uw")])
    limits = [read_positive_int(f) for f in files]  # an unreadable limit gives no bound; the default applies
    best = max((v for v in limits if v is not None), default=0)
    if best:
        return 2 * best, f"2 x the largest constraint power limit or max power ({best} uW)"
    return DEFAULT_MAX_POWER_W[kind] * 10**6, f"default {DEFAULT_MAX_POWER_W[kind]} W for a {kind} zone"


def _range_or_why(path: Path, name: str) -> tuple[int | None, str]:
    """The zone's ``max_energy_range_uj``, or None and why the zone is left out (a missing or unreadable file, a range
    of zero or less); a permission problem is raised (:class:`MeterPermissionError`, naming its fix)."""
    try:
        range_uj = _read_uj(path / "max_energy_range_uj")
    except MeterPermissionError:
        raise
    except MeterError as err:
        return None, f"zone {path.name} ({name}) left out: {err}"
    if range_uj <= 0:
        return None, (f"zone {path.name} ({name}) left out: max_energy_range_uj is {range_uj}, so its counter has no "
                      "period to read energy from (a driver or firmware fault)")
    return range_uj, ""


def _dead_psys(usable: list) -> str:
    """Why the psys zone among ``usable`` measures nothing ('' when it may): its counter reads exactly 0 while a
    package's, counting since boot like it, has moved (boards that expose psys without wiring it show a 0 for ever)."""
    psys = [path for _, path, name, _ in usable if name == "psys"]
    packages = [path for _, path, name, _ in usable if name.startswith("package-")]
    try:
        if psys and packages and _read_uj(psys[0] / "energy_uj") == 0 and any(
                _read_uj(path / "energy_uj") > 0 for path in packages):
            return (f"zone {psys[0].name} (psys) left out: its counter reads 0 while the packages inside it have "
                    "counted since boot (this platform does not wire psys); the total is the packages and DRAM")
    except MeterError:
        return ""  # an unreadable counter is the probe's to report
    return ""


def scan_zones(sysfs_root: str | os.PathLike) -> tuple[list[RaplZone], list[str]]:
    """The reportable zones under ``sysfs_root`` (without the mmio duplicates) and, one line each, the
    zones left out and why (an unusable ``name``, a ``max_energy_range_uj`` missing or of zero or less, a psys that
    reads 0); reads no counter but, where there is a psys, its and the packages' once."""
    base = powercap_dir(sysfs_root)
    if not base.is_dir():
        return [], []
    entries, skipped = [], []
    for entry in sorted(os.listdir(base)):
        match = _ZONE_RE.match(entry)
        if match is None:
            continue
        name, why = read_label(base / entry / "name")
        if name is None:
            skipped.append(f"zone {entry} left out: {why}")
            continue
        entries.append((match, base / entry, name))
    names = {(bool(m["mmio"]), m["top"], m["sub"]): name for m, _, name in entries}
    usable: list[tuple[re.Match, Path, str, int]] = []
    for match, path, name in sorted(entries, key=lambda e: bool(e[0]["mmio"])):  # MSR zones first
        if _kind(name) is None or (match["mmio"] and any(name == u[2] and not u[0]["mmio"] for u in usable)):
            continue  # core/uncore (inside their package), or an mmio zone showing an MSR zone's counter again
        range_uj, why = _range_or_why(path, name)
        if range_uj is None:
            skipped.append(why)
            continue
        usable.append((match, path, name, range_uj))
    dead = _dead_psys(usable)
    if dead:
        skipped.append(dead)
        usable = [u for u in usable if u[2] != "psys"]
    has_psys = any(name == "psys" for _, _, name, _ in usable)
    zones = []
    for match, path, name, range_uj in sorted(usable, key=lambda u: u[1].name):
        parent = names.get((bool(match["mmio"]), match["top"], None)) if match["sub"] else None
        bound_uw, source = _power_bound(path, _kind(name))
        zones.append(RaplZone(path, name, _domain_for(name, parent, has_psys, match["top"]), range_uj,
                              bound_uw, source))
    return zones, skipped


def find_zones(sysfs_root: str | os.PathLike) -> list[RaplZone]:
    """The reportable zones under ``sysfs_root``, without the mmio duplicates (:func:`scan_zones`)."""
    return scan_zones(sysfs_root)[0]


def _domain_for(name: str, parent: str | None, has_psys: bool, top: str) -> Domain | None:
    if name == "psys":
        return Domain("psys", "psys", "counter", in_total=True, platform=True)
    if name.startswith("package-"):
        return Domain(f"cpu_package_{_socket_label(name, None)}", "cpu_package", "counter", in_total=not has_psys)
    if name == "dram":
        label = _socket_label(name, parent) or top
        return Domain(f"dram_{label}", "dram", "counter", in_total=not has_psys)
    return None  # core, uncore: inside their package


def probe(sysfs_root: str | os.PathLike) -> ProbeResult:
    """Whether RAPL counters exist here and this user can read every one of them."""
    base = powercap_dir(sysfs_root)
    try:
        zones, skipped = scan_zones(sysfs_root)
    except MeterError as err:
        return ProbeResult("rapl", False, str(err), PERMISSION_FIX if isinstance(err, MeterPermissionError) else "")
    skipped = tuple(skipped)
    if not zones and skipped:
        return ProbeResult("rapl", False, f"no usable intel-rapl zone under {base} (each one left out: see skipped)",
                           "check the RAPL driver (dmesg | grep -i rapl); reload it: sudo modprobe -r "
                           "intel_rapl_msr && sudo modprobe intel_rapl_msr", skipped=skipped)
    if not zones:
        return ProbeResult(
            "rapl", False, f"no intel-rapl package or psys zone under {base}",
            "on Intel/AMD Linux: sudo modprobe intel_rapl_msr (AMD Zen needs Linux >= 5.8); "
            "in a container mount the host's /sys and set EDGEPROF_SYSFS_ROOT",
        )
    for zone in zones:
        energy = zone.path / "energy_uj"
        try:
            _read_uj(energy)
        except MeterPermissionError:
            return ProbeResult(
                "rapl", False,
                f"{energy} is not readable by this user (root-only since Linux 5.10)", PERMISSION_FIX, skipped=skipped,
            )
        except MeterError as err:
            return ProbeResult("rapl", False, str(err), "check that the intel_rapl driver is loaded", skipped=skipped)
    return ProbeResult("rapl", True, domains=tuple(z.domain.name for z in zones), skipped=skipped)


class RaplMeter(Meter):
    """Cumulative joules per RAPL zone since the meter was opened, wrap-corrected, implausible steps left out.

    ``clock_ns`` (default :func:`time.monotonic_ns`) times the steps between readings for the plausibility
    check; tests pass a fake one.
    """

    name = "rapl"
    #: RAPL counters update about every millisecond
    update_period_s = 0.001

    def __init__(self, sysfs_root: str | os.PathLike, *, clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self.sysfs_root = str(sysfs_root)
        zones, skipped = scan_zones(sysfs_root)
        self._zones, self._skipped = tuple(zones), tuple(skipped)
        if not self._zones:
            raise MeterError(f"no RAPL zones under {powercap_dir(sysfs_root)}"
                             + (f" ({'; '.join(skipped)})" if skipped else ""))
        self._counters = {z.domain.name: _counter(z.path) for z in self._zones}
        self._clock_ns = clock_ns
        self._last_t_ns = clock_ns()
        self._last: dict[str, int | None] = {z.domain.name: self._in_range(z, self._counters[z.domain.name].read())
                                             for z in self._zones}
        self._total_uj = {z.domain.name: 0 for z in self._zones}
        #: every step that passed the counter checks (the psys check compares these, whether or not psys's counted)
        self._seen_uj = dict(self._total_uj)
        self._psys = next((z for z in self._zones if z.zone_name == "psys"), None)
        #: a Sapphire Rapids server's psys counts in steps of 1 J: a window in which the total counts less than that
        #: is not resolved, however long it lasts (61 uJ steps never bind at a millisecond's joules)
        self.energy_quantum_j = max((z.unit_uj for z in self._zones if z.domain.in_total), default=0.0) / 1e6

    @staticmethod
    def _in_range(zone: RaplZone, value: int) -> int | None:
        return value if 0 <= value <= zone.max_energy_range_uj else None

    def domains(self) -> tuple[Domain, ...]:
        return tuple(z.domain for z in self._zones)

    def read_j(self) -> Mapping[str, float]:
        t_ns = self._clock_ns()
        elapsed_s = max(t_ns - self._last_t_ns, 0) / 1e9
        steps = {}
        for zone in self._zones:
            key = zone.domain.name
            now = self._counters[key].read()
            problem = self._problem(zone, self._last[key], now, elapsed_s)
            if problem:
                self.flag_invalid(key, Invalid("counter jump", problem))
            else:
                steps[key] = (now - self._last[key]) % (zone.max_energy_range_uj + 1)
                self._seen_uj[key] += steps[key]
            self._last[key] = self._in_range(zone, now)
        behind = self._psys_behind()
        for key, step_uj in steps.items():
            if key == "psys" and behind:
                self.flag_invalid(key, Invalid("implausible energy", behind))
            else:
                self._total_uj[key] += step_uj
        self._last_t_ns = t_ns
        return {k: v / 10**6 for k, v in self._total_uj.items()}

    def _psys_behind(self) -> str:
        """Why psys cannot be the platform's energy now ('' when it can): the steps it counted since the meter opened
        fall short of those of the packages and DRAM inside it by more than :data:`BEHIND_SHARE` of theirs, one psys
        energy unit and :data:`BEHIND_SLACK_UJ` (the counters are read one after another and update apart)."""
        psys = self._psys
        if psys is None:
            return ""
        inner = sum(v for k, v in self._seen_uj.items() if k != "psys")
        counted = self._seen_uj["psys"]
        if inner - counted <= BEHIND_SHARE * inner + psys.unit_uj + BEHIND_SLACK_UJ:
            return ""
        return (f"{psys.path.name}/energy_uj (psys) counted {counted / 1e6:.6g} J since the meter opened, less than "
                f"the {inner / 1e6:.6g} J of the packages and DRAM inside it")

    @staticmethod
    def _problem(zone: RaplZone, last: int | None, now: int, elapsed_s: float) -> str:
        """Why the step from ``last`` to ``now`` cannot be trusted ('' when it can)."""
        counter = f"{zone.path.name}/energy_uj"
        if not 0 <= now <= zone.max_energy_range_uj:
            return f"{counter} reads {now}, outside 0..max_energy_range_uj ({zone.max_energy_range_uj})"
        if last is None:
            return f"{counter}: the previous reading was outside 0..{zone.max_energy_range_uj}, so this step is unknown"
        delta = (now - last) % (zone.max_energy_range_uj + 1)
        if delta <= zone.max_power_uw * (elapsed_s + SLACK_S):  # uJ <= uW * s
            return ""
        what = "fell" if now < last else "rose"
        return (f"{counter} {what} from {last} to {now} uJ in {elapsed_s:.3g} s: {delta / 1e6:.6g} J, over "
                f"{zone.max_power_uw / 1e6:g} W ({zone.max_power_source}) x (elapsed + {SLACK_S:g} s)"
                + ("; not a plausible wrap" if now < last else ""))

    def close(self) -> None:
        for counter in self._counters.values():
            counter.close()

    def power_bounds_w(self) -> Mapping[str, float]:
        return {z.domain.name: z.max_power_uw / 1e6 for z in self._zones}

    def describe(self) -> dict:
        info = super().describe()
        info["zones"] = [
            {"domain": z.domain.name, "zone": z.zone_name, "path": str(z.path),
             "max_energy_range_uj": z.max_energy_range_uj, "max_power_w": z.max_power_uw / 1e6,
             "max_power_source": z.max_power_source}
            for z in self._zones
        ]
        info["resolution"] = "1 uJ readout; energy unit " + ", ".join(
            f"{z.zone_name} {z.unit_uj:.4g} uJ" for z in self._zones) + " (max_energy_range_uj / (2^32 - 1))"
        info["total"] = ("psys (packages and DRAM are inside it)" if any(z.zone_name == "psys" for z in self._zones)
                         else "sum of packages and DRAM")
        if self._skipped:
            info["skipped"] = list(self._skipped)
            info["total"] += " (partial: zones left out, see skipped)"
        return info


#: discovery's view of RAPL: first in the order; once opened, the CPU side is measured
BACKEND = Backend(
    name="rapl", title="RAPL", columns=("cpu_package", "dram", "psys"), measures_cpu=True,
    probe=lambda ctx: probe(ctx.sysfs_root), open=lambda ctx: RaplMeter(ctx.sysfs_root),
)

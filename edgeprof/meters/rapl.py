"""Intel and AMD RAPL energy counters through the Linux powercap sysfs interface.

Layout read (``<root>/class/powercap``, root defaulting to ``/sys``): one entry per zone,
``intel-rapl:N`` (top level: ``package-N``, ``psys``, sometimes ``dram``) and ``intel-rapl:N:M``
(sub-zones: ``core``, ``uncore``, ``dram``), each with ``name``, ``energy_uj`` and
``max_energy_range_uj``. ``intel-rapl-mmio:N`` exposes the same package counter again through MMIO; it is
used only for a package the MSR interface does not show, never twice. AMD Zen CPUs use the same layout.

What counts towards the total (nesting is never summed):
  * ``psys`` present: psys (the whole platform) is the total; packages and DRAM are reported beside it
    with ``in_total=False``.
  * else: every ``package-N`` plus every ``dram`` zone (DRAM is not part of the package counter).
  * ``core`` and ``uncore`` sit inside their package and are not reported.

Counter wrap: ``max_energy_range_uj`` is the largest value ``energy_uj`` can show (the kernel converts
the all-ones 32-bit raw counter to microjoules), so the counter takes values ``0..max`` and
``delta = (now - last) mod (max_energy_range_uj + 1)``. The true period is one raw energy unit
(15.3 or 61 uJ) longer than ``max + 1``; that error, at most one unit per wrap, is below the counter's
resolution. A counter that wraps more than once between two reads cannot be detected: at 200 W a
262 kJ range lasts about 20 minutes, so read at least that often. Energy is accumulated in integer
microjoules. Since Linux 5.10 ``energy_uj`` is readable by root only; the probe says so and names the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters.base import Backend, Domain, Meter, ProbeResult

_ZONE_RE = re.compile(r"^intel-rapl(?P<mmio>-mmio)?:(?P<top>\d+)(?::(?P<sub>\d+))?$")

PERMISSION_FIX = (
    "sudo chmod -R a+r /sys/class/powercap/intel-rapl:*/energy_uj (until reboot), or permanently a udev "
    'rule in /etc/udev/rules.d/99-powercap.rules: SUBSYSTEM=="powercap", ACTION=="add", '
    'RUN+="/bin/chmod a+r /sys%p/energy_uj"'
)


@dataclass(frozen=True)
class RaplZone:
    """One powercap zone that edgeprof reports."""

    path: Path
    zone_name: str  # the kernel's name: package-0, dram, psys
    domain: Domain
    max_energy_range_uj: int


def powercap_dir(sysfs_root: str | os.PathLike) -> Path:
    return Path(sysfs_root) / "class" / "powercap"


def _read_text(path: Path) -> str:
    with open(path, "r") as fh:
        return fh.read().strip()


def _read_uj(path: Path) -> int:
    """Read an integer counter; permission problems become :class:`MeterPermissionError`."""
    try:
        return int(_read_text(path))
    except PermissionError as err:
        raise MeterPermissionError(f"cannot read {path}: permission denied. Fix: {PERMISSION_FIX}") from err
    except (OSError, ValueError) as err:
        raise MeterError(f"cannot read RAPL counter {path}: {err}") from err


def _socket_label(zone_name: str, parent_name: str | None) -> str:
    """``package-0`` -> ``0``; ``package-0-die-1`` -> ``0_die_1``; a dram zone takes its package's."""
    source = zone_name if zone_name.startswith("package-") else (parent_name or "")
    if source.startswith("package-"):
        return source[len("package-"):].replace("-", "_")
    return ""


def find_zones(sysfs_root: str | os.PathLike) -> list[RaplZone]:
    """The reportable zones under ``sysfs_root``, without the mmio duplicates; reads no counter."""
    base = powercap_dir(sysfs_root)
    if not base.is_dir():
        return []
    entries = []
    for entry in sorted(os.listdir(base)):
        match = _ZONE_RE.match(entry)
        if match and (base / entry / "name").is_file():
            entries.append((match, base / entry, _read_text(base / entry / "name")))
    names = {(bool(m["mmio"]), m["top"], m["sub"]): name for m, _, name in entries}
    msr_names = {name for m, _, name in entries if not m["mmio"]}
    has_psys = any(name == "psys" for _, _, name in entries)
    zones = []
    for match, path, name in entries:
        if match["mmio"] and name in msr_names:
            continue  # same package counter as the MSR zone
        parent = names.get((bool(match["mmio"]), match["top"], None)) if match["sub"] else None
        domain = _domain_for(name, parent, has_psys, match["top"])
        if domain is None:
            continue
        zones.append(RaplZone(path, name, domain, _read_uj(path / "max_energy_range_uj")))
    return zones


def _domain_for(name: str, parent: str | None, has_psys: bool, top: str) -> Domain | None:
    if name == "psys":
        return Domain("psys", "psys", "counter", in_total=True)
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
        zones = find_zones(sysfs_root)
    except MeterError as err:
        return ProbeResult("rapl", False, str(err), PERMISSION_FIX if isinstance(err, MeterPermissionError) else "")
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
                f"{energy} is not readable by this user (root-only since Linux 5.10)", PERMISSION_FIX,
            )
        except MeterError as err:
            return ProbeResult("rapl", False, str(err), "check that the intel_rapl driver is loaded")
    return ProbeResult("rapl", True, domains=tuple(z.domain.name for z in zones))


class RaplMeter(Meter):
    """Cumulative joules per RAPL zone since the meter was opened, wrap-corrected."""

    name = "rapl"
    #: RAPL counters update about every millisecond
    update_period_s = 0.001

    def __init__(self, sysfs_root: str | os.PathLike) -> None:
        self.sysfs_root = str(sysfs_root)
        self._zones = tuple(find_zones(sysfs_root))
        if not self._zones:
            raise MeterError(f"no RAPL zones under {powercap_dir(sysfs_root)}")
        self._last = {z.domain.name: _read_uj(z.path / "energy_uj") for z in self._zones}
        self._total_uj = {z.domain.name: 0 for z in self._zones}

    def domains(self) -> tuple[Domain, ...]:
        return tuple(z.domain for z in self._zones)

    def read_j(self) -> Mapping[str, float]:
        for zone in self._zones:
            key = zone.domain.name
            now = _read_uj(zone.path / "energy_uj")
            self._total_uj[key] += (now - self._last[key]) % (zone.max_energy_range_uj + 1)
            self._last[key] = now
        return {k: v / 10**6 for k, v in self._total_uj.items()}

    def describe(self) -> dict:
        info = super().describe()
        info["zones"] = [
            {"domain": z.domain.name, "zone": z.zone_name, "path": str(z.path),
             "max_energy_range_uj": z.max_energy_range_uj}
            for z in self._zones
        ]
        info["resolution"] = "1 uJ readout (hardware unit 15.3-61 uJ)"
        info["total"] = ("psys (packages and DRAM are inside it)" if any(z.zone_name == "psys" for z in self._zones)
                         else "sum of packages and DRAM")
        return info


#: discovery's view of RAPL: first in the order; once opened, the CPU side is measured
BACKEND = Backend(
    name="rapl", title="RAPL", columns=("cpu_package", "dram", "psys"), measures_cpu=True,
    probe=lambda ctx: probe(ctx.sysfs_root), open=lambda ctx: RaplMeter(ctx.sysfs_root),
)

"""RAPL through real powercap trees: layouts, nesting, exact joules, counter wrap, permission denied."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest

from edgeprof.errors import MeterError
from edgeprof.meters import rapl
from edgeprof.meters.discovery import MeterSet
from edgeprof.profiler import PeakRss, Profiler
from edgeprof.report.schema import row_from_window
from fixtures_sysfs import build_rapl, rapl_zone, set_energy

# layout -> {domain name: (column, in_total)}; core/uncore never reported
EXPECTED = {
    "one_socket": {"cpu_package_0": ("cpu_package", True)},
    "two_sockets": {"cpu_package_0": ("cpu_package", True), "cpu_package_1": ("cpu_package", True)},
    "dram": {"cpu_package_0": ("cpu_package", True), "dram_0": ("dram", True),
             "cpu_package_1": ("cpu_package", True), "dram_1": ("dram", True)},
    "psys": {"cpu_package_0": ("cpu_package", False), "dram_0": ("dram", False), "psys": ("psys", True)},
    "mmio_duplicate": {"cpu_package_0": ("cpu_package", True)},
}


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_domains_follow_the_nesting(tmp_path, layout):
    build_rapl(tmp_path, layout)

    with rapl.RaplMeter(tmp_path) as meter:
        got = {d.name: (d.column, d.in_total) for d in meter.domains()}

    assert got == EXPECTED[layout]
    assert all(d.method == "counter" for d in meter.domains())
    assert rapl.probe(tmp_path).available


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_window_and_report_totals_never_sum_nested_domains(tmp_path, layout):
    """The production path: a profiler window over the RAPL meter, then the window's report row."""
    zones = build_rapl(tmp_path, layout, energy_uj=1000)
    meter = rapl.RaplMeter(tmp_path)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))  # no clear_refs: lifetime peak

    with profiler.window("client") as win:
        for i, zone in enumerate(zones):  # every zone advances by a different amount: 1.5 J, 2.5 J, ...
            set_energy(tmp_path, zone, 1000 + 1_500_000 + 1_000_000 * i)
    row = row_from_window(win.result, {"run_id": "r"})

    by_domain = {z.domain.name: Fraction(1_500_000 + 1_000_000 * zones.index(z.path.name), 10**6)
                 for z in meter._zones}
    expected_total = sum(v for k, v in by_domain.items() if EXPECTED[layout][k][1])
    assert dict(win.result.span.energy_j) == {k: float(v) for k, v in by_domain.items()}
    assert win.result.energy_total_j == float(expected_total)
    assert float(row["energy_j"]) == float(expected_total)  # every total here has few digits: _fmt is exact
    assert float(row["cpu_package_j"]) == float(sum(v for k, v in by_domain.items() if k.startswith("cpu_package")))
    if layout == "psys":  # package and dram are inside psys: the total is psys alone
        assert win.result.energy_total_j == win.result.span.energy_j["psys"] < sum(by_domain.values())


def test_mmio_only_package_is_used_when_msr_zone_is_absent(tmp_path):
    rapl_zone(tmp_path, "intel-rapl-mmio:0", "package-0", 10)

    with rapl.RaplMeter(tmp_path) as meter:
        assert [d.name for d in meter.domains()] == ["cpu_package_0"]


def test_counter_wrap_between_reads_gives_exact_joules(tmp_path):
    # max_energy_range_uj is the largest value the counter shows: values 0..1_000_000, period 1_000_001
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=999_000, max_range_uj=1_000_000)
    meter = rapl.RaplMeter(tmp_path)

    set_energy(tmp_path, "intel-rapl:0", 500)  # 1000 up to max, 1 to wrap to 0, 500 more
    first = meter.read_j()["cpu_package_0"]
    set_energy(tmp_path, "intel-rapl:0", 300_000)
    second = meter.read_j()["cpu_package_0"]

    assert first == 1501 / 10**6
    assert second == (1501 + 299_500) / 10**6


def test_counter_that_does_not_move_gives_zero_not_a_wrap(tmp_path):
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=42, max_range_uj=1_000_000)
    meter = rapl.RaplMeter(tmp_path)

    assert meter.read_j() == {"cpu_package_0": 0.0}


def test_no_powercap_tree_is_reported_with_a_fix(tmp_path):
    result = rapl.probe(tmp_path)

    assert not result.available
    assert "no intel-rapl" in result.reason and "modprobe intel_rapl_msr" in result.fix


def test_counter_that_becomes_unreadable_raises_meter_error(tmp_path):
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 10)
    meter = rapl.RaplMeter(tmp_path)
    (zone / "energy_uj").unlink()
    (zone / "energy_uj").mkdir()  # reading a directory fails like a vanished counter

    with pytest.raises(MeterError, match="cannot read RAPL counter"):
        meter.read_j()


def _probe_as_nobody(root: str) -> dict:
    """Run ``rapl.probe`` in a forked child that dropped root for ``nobody``; return its result."""
    nobody = pwd.getpwnam("nobody")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges for real, then run the production probe
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            result = rapl.probe(root)
            payload = {"available": result.available, "reason": result.reason, "fix": result.fix}
        except BaseException as err:  # report, never hang the parent
            payload = {"error": repr(err)}
        os.write(write_fd, json.dumps(payload).encode())
        os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def test_root_only_energy_uj_is_reported_with_the_fix():
    """Permission denied for real: the counter is 0400 root (as since Linux 5.10) and the probe runs as a
    non-root user (a forked child that setuid()s to ``nobody`` when the tests run as root, which can read
    any file), so the production ``open`` really gets EACCES."""
    base = tempfile.mkdtemp(prefix="edgeprof-rapl-")
    try:
        os.chmod(base, 0o755)
        zone = rapl_zone(Path(base), "intel-rapl:0", "package-0", 123)
        for p in [Path(base), *Path(base).rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o444)
        os.chmod(zone / "energy_uj", 0o400 if os.geteuid() == 0 else 0o000)

        if os.geteuid() == 0:
            try:
                pwd.getpwnam("nobody")
            except KeyError:
                pytest.skip("no 'nobody' user to drop root privileges to")
            result = _probe_as_nobody(base)
        else:
            probe = rapl.probe(base)
            result = {"available": probe.available, "reason": probe.reason, "fix": probe.fix}
    finally:
        shutil.rmtree(base)

    assert result.get("error") is None, result
    assert result["available"] is False
    assert "not readable by this user" in result["reason"]
    assert "chmod" in result["fix"] and 'SUBSYSTEM=="powercap"' in result["fix"]

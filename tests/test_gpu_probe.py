"""scripts/gpu_probe.py's NVML neighbour check on the CPU: real PFLEGO rounds beside the slow fake NVML's reader."""

from __future__ import annotations

import sys
from pathlib import Path

from fixtures_sysfs import slow_stepping_pynvml

ROOT = Path(__file__).resolve().parents[1]
READ_S = 0.003


def test_the_neighbour_check_times_rounds_alone_and_beside_each_reader(monkeypatch):
    """Each set of rounds is timed, and the reader ran at the periods named: the old series' 24 ms and the period
    :func:`period_for` gives NVML's counter at its measured read cost (one reading per 100-ms update)."""
    fake = slow_stepping_pynvml(power_w=100.0, read_s=READ_S)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import gpu_probe

    out = gpu_probe.nvml_neighbours("cpu", 4, backbones=("cnn-omniglot",), warmup_s=0.0)

    assert READ_S * 1e3 <= out["read_ms"] < 100 * READ_S * 1e3
    assert out["series_period_s"] == 0.1  # max(5 ms, 10 x the read, the counter's update period)
    rows = out["cnn-omniglot"]
    assert [r["reader_period_s"] for r in rows] == [None, 0.024, 0.1, None]
    for row in rows:
        assert 0 < row["median_ms"] <= row["max_ms"] and 0 < row["mean_ms"] <= row["max_ms"]
    # five reads for the read cost on this thread, the rest by the neighbour thread while its rounds ran
    assert fake.energy_reads.count("MainThread") == 5
    assert fake.energy_reads.count("probe-neighbour") >= 2
    assert set(fake.energy_reads) == {"MainThread", "probe-neighbour"}


def test_the_edges_part_times_each_kind_of_round_and_every_piece_inside_the_profiled_ones(monkeypatch):
    """Real PFLEGO rounds on the CPU: every kind timed at every pass, the profiled ones' own figure kept, and the
    engine's calls and the profiler's pieces timed where they ran (three phases: six phase edges a round)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import gpu_probe

    passes = 3
    out = gpu_probe.edges("cpu", passes, backbones=("cnn-omniglot",), warmup_s=0.0)

    rounds = out["cnn-omniglot"]["rounds"]
    assert set(rounds) == {"unprofiled", "profiled_later", "profiled_at_once", "profiled_timed"}
    assert rounds["unprofiled"]["own_us"] is None and rounds["unprofiled"]["over_unprofiled"] == 0.0
    for kind in ("profiled_later", "profiled_at_once", "profiled_timed"):
        assert rounds[kind]["median_ms"] > 0 and rounds[kind]["own_us"] > 0, kind
    calls = out["cnn-omniglot"]["in_situ_calls"]
    assert calls["begin"] == calls["end"] == passes and calls["_enter_phase"] == calls["_exit_phase"] == 3 * passes
    assert calls["read_peak_rss_mb"] == calls["read_device_peak_mb"] == passes
    assert all(v >= 0 for v in out["cnn-omniglot"]["in_situ_us"].values())
    assert out["alternatives_us"]["perf_counter"] > 0 and "stream_synchronize" not in out["alternatives_us"]

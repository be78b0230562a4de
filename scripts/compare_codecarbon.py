"""Compare edgeprof's energy and carbon with codecarbon's own tracker on the same CPU workload.

Both measure the same few seconds of torch matmuls at the same time: codecarbon's
OfflineEmissionsTracker (no network, no file) and edgeprof's discovered meters. The script prints both
energies (kWh and J), both emissions, and how each figure was obtained. On a machine without RAPL,
codecarbon falls back to its own CPU power model and edgeprof to its labelled CPU-time estimate; the
output says so instead of presenting either as a measurement.

    python scripts/compare_codecarbon.py [--seconds 4] [--country FRA] [--cpu-watts W]
"""

from __future__ import annotations

import argparse
import logging
import time


def workload(seconds: float) -> int:
    """Square float32 matmuls until ``seconds`` of wall time have passed; returns the count."""
    import torch

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = torch.tanh(a @ b)
        n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--country", default="FRA")
    parser.add_argument("--cpu-watts", type=float, default=None)
    args = parser.parse_args()

    import torch  # noqa: F401  (imported before measuring so its import is not in the window)
    from codecarbon import OfflineEmissionsTracker

    from edgeprof.meters import discover
    from edgeprof.meters.carbon import J_PER_KWH, carbon_g, carbon_intensity

    logging.getLogger("codecarbon").setLevel(logging.ERROR)
    meters = discover(cpu_watts=args.cpu_watts)
    intensity = carbon_intensity(args.country)
    tracker = OfflineEmissionsTracker(country_iso_code=args.country, log_level="error", save_to_file=False,
                                      measure_power_secs=1)
    tracker.start()
    before, t0 = meters.read_j(), time.perf_counter()
    matmuls = workload(args.seconds)
    after, wall_s = meters.read_j(), time.perf_counter() - t0
    cc_kg = tracker.stop() or 0.0
    meters.close()

    data = tracker.final_emissions_data
    cc_kwh = data.energy_consumed
    deltas = {d.name: after[d.name] - before[d.name] for d in meters.domains()}
    ep_j = sum(deltas[d.name] for d in meters.domains() if d.in_total)
    hardware = [h.description() if hasattr(h, "description") else type(h).__name__
                for h in getattr(tracker, "_hardware", [])]

    print(f"workload: {matmuls} matmuls (512x512 float32) in {wall_s:.2f} s, country {args.country}\n")
    print("codecarbon (OfflineEmissionsTracker, machine mode):")
    print(f"  energy     {cc_kwh:.3e} kWh = {cc_kwh * J_PER_KWH:9.2f} J "
          f"(cpu {data.cpu_energy * J_PER_KWH:.2f} J, ram {data.ram_energy * J_PER_KWH:.2f} J, "
          f"gpu {data.gpu_energy * J_PER_KWH:.2f} J)")
    print(f"  emissions  {cc_kg * 1000:.4f} g CO2e")
    print(f"  how        cpu model {data.cpu_model!r}, cpu power {data.cpu_power:.1f} W, ram power {data.ram_power:.1f} W;"
          f" hardware: {'; '.join(hardware) or 'unknown'}")
    print("             (without readable RAPL codecarbon uses its own CPU power model (TDP table or a constant),"
          " an estimate, and it counts the whole machine plus a RAM power model)\n")
    print("edgeprof (discovered meters):")
    print(f"  energy     {ep_j / J_PER_KWH:.3e} kWh = {ep_j:9.2f} J "
          f"({', '.join(f'{k} {v:.2f} J' for k, v in deltas.items())})")
    print(f"  emissions  {carbon_g(ep_j, intensity):.4f} g CO2e at {intensity.g_per_kwh:g} g/kWh ({intensity.source})")
    for meter in meters.meters:
        info = meter.describe()
        methods = ", ".join(sorted({d["method"] for d in info["domains"]}))
        extra = f"; {info['watts_source']}" if "watts_source" in info else ""
        print(f"  how        {meter.name}: method {methods}{extra}")
    for row in meters.describe()["not_found"]:
        print(f"  not used   {row['meter']}: {row['reason']}")
    if "estimate" in meters.methods:
        print("             edgeprof's figure is an ESTIMATE (process CPU seconds x watts per core), not a measurement;"
              " it counts this process only, codecarbon the whole machine.")
    if cc_kwh > 0:
        print(f"\nratio edgeprof / codecarbon energy: {ep_j / (cc_kwh * J_PER_KWH):.2f}")


if __name__ == "__main__":
    main()

"""Compare edgeprof's energy and carbon with codecarbon's own tracker over one whole edgeprof run.

The workload is a complete ``edgeprof measure`` run (by default the README's ``--algo pflego --tau 50`` on the
embedded digits data, 3 rounds), executed through :func:`edgeprof.rounds.simulate.run` while codecarbon's
OfflineEmissionsTracker (no network, no file) runs around it. The script prints codecarbon's figures, edgeprof's
meters read around the whole run (set-up included), and the sum of the run's report rows (client rounds and
server steps only), each with how it was obtained. On a machine without RAPL, codecarbon falls back to its own
CPU power model and edgeprof to its labelled CPU-time estimate; the output says so instead of presenting either
as a measurement.

    python scripts/compare_codecarbon.py [--algo pflego] [--tau 50] [--rounds 3] [--country FRA] [--cpu-watts W]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="pflego")
    parser.add_argument("--tau", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--country", default="FRA")
    parser.add_argument("--cpu-watts", type=float, default=None)
    args = parser.parse_args()

    import torch  # noqa: F401  (imported before measuring so its import is not in the window)
    from codecarbon import OfflineEmissionsTracker

    from edgeprof.config import EnergySettings, RunConfig
    from edgeprof.meters import discover
    from edgeprof.report import read_report
    from edgeprof.rounds.simulate import run
    from edgeprof.meters.carbon import J_PER_KWH, carbon_g, carbon_intensity

    logging.getLogger("codecarbon").setLevel(logging.ERROR)
    meters = discover(cpu_watts=args.cpu_watts)
    intensity = carbon_intensity(args.country)
    tracker = OfflineEmissionsTracker(country_iso_code=args.country, log_level="error", save_to_file=False,
                                      measure_power_secs=1)
    tracker.start()
    out = Path(tempfile.mkdtemp(prefix="edgeprof-vs-codecarbon-"))
    cfg = RunConfig(algo=args.algo, tau=args.tau, rounds=args.rounds, out=out, progress=False,
                    energy=EnergySettings.of(cpu_watts=args.cpu_watts, country=args.country))
    before, t0 = meters.read_j(), time.perf_counter()
    result = run(cfg)
    after, wall_s = meters.read_j(), time.perf_counter() - t0
    cc_kg = tracker.stop() or 0.0
    meters.close()
    report = read_report(result.csv_path)
    rows_j, rows_g = sum(report.values("energy_j")), sum(report.values("carbon_g"))

    data = tracker.final_emissions_data
    cc_kwh = data.energy_consumed
    deltas = {d.name: after[d.name] - before[d.name] for d in meters.domains()}
    ep_j = sum(deltas[d.name] for d in meters.domains() if d.in_total)
    hardware = [h.description() if hasattr(h, "description") else type(h).__name__
                for h in getattr(tracker, "_hardware", [])]

    print(f"workload: edgeprof measure --algo {args.algo} --tau {args.tau} --rounds {args.rounds} (digits, "
          f"cnn-omniglot), {wall_s:.2f} s, country {args.country}; report {result.csv_path}\n")
    print("codecarbon (OfflineEmissionsTracker, machine mode):")
    print(f"  energy     {cc_kwh:.3e} kWh = {cc_kwh * J_PER_KWH:9.2f} J "
          f"(cpu {data.cpu_energy * J_PER_KWH:.2f} J, ram {data.ram_energy * J_PER_KWH:.2f} J, "
          f"gpu {data.gpu_energy * J_PER_KWH:.2f} J)")
    print(f"  emissions  {cc_kg * 1000:.4f} g CO2e")
    print(f"  how        cpu model {data.cpu_model!r}, cpu power {data.cpu_power:.1f} W, ram power {data.ram_power:.1f} W;"
          f" hardware: {'; '.join(hardware) or 'unknown'}")
    print("             (without readable RAPL codecarbon uses its own CPU power model (TDP table or a constant),"
          " an estimate, and it counts the whole machine plus a RAM power model)\n")
    print("edgeprof, its report (client rounds + server steps, the rows' energy_j and carbon_g summed):")
    print(f"  energy     {rows_j:9.2f} J over {len(report.rows)} rows, methods "
          f"{', '.join(sorted({r['energy_method'] for r in report.rows}))}")
    print(f"  emissions  {rows_g:.4f} g CO2e")
    print("edgeprof, its meters read around the whole run (set-up, data loading and export included):")
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

"""Set-up against round in a real Flower deployment on loopback, and the same round in-process.

Starts a SuperLink and N SuperNodes (``--insecure``, 127.0.0.1, the given ``--isolation`` mode), submits
an edgeprof PFLEGO run with ``flwr run``, waits for its report and prints, per client row: ``wall_s``, the
sum of its phases, the set-up measured beside the round (``setup_s`` / ``startup_s`` when the report has
them) and ``energy_j``; then the median client-round energy of the same settings run in-process.

    python scripts/bench_flower_setup.py [--nodes 2] [--rounds 3] [--isolation subprocess|process]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgeprof.flower.loopback import free_ports, wait_for_port

BIN = Path(sys.executable).parent


def _settings(args, out: Path, name: str):
    from edgeprof.config import RunConfig

    return RunConfig(algo="pflego", tau=args.tau, rounds=args.rounds, clients=args.nodes, participation=1.0,
                     dataset="digits", backbone=args.backbone, threads=1, seed=0, out=out, run_name=name,
                     progress=False).resolved()


def _phases(row: dict) -> float:
    return sum(float(row[f"{p}_s"]) for p in ("cache_forward", "head_steps", "joint_grad") if row.get(f"{p}_s"))


def deployment(args, root: Path) -> list[dict]:
    from edgeprof.flower.config import FlowerSettings, to_run_config, write_app_dir
    from edgeprof.report import read_report

    link, *nodes = free_ports(1 + 2 * args.nodes)
    env = {**os.environ, "FLWR_HOME": str(root / "flwr-home"), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    Path(env["FLWR_HOME"]).mkdir()
    (Path(env["FLWR_HOME"]) / "config.toml").write_text(
        f'[superlink]\ndefault = "loop"\n\n[superlink.loop]\naddress = "127.0.0.1:{link}"\ninsecure = true\n')
    procs = []

    def start(*argv: str) -> None:
        log = open(root / f"{len(procs)}.log", "w")
        procs.append(subprocess.Popen([str(BIN / argv[0]), *argv[1:]], env=env, cwd=root, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(link),
              "--disable-runtime-dependency-installation")
        try:
            wait_for_port(link, 60)
        except TimeoutError as err:
            raise SystemExit(str(err)) from None
        for pid in range(args.nodes):
            extra = ["--isolation", args.isolation] if args.isolation != "subprocess" else []
            start("flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link}", "--host", "127.0.0.1",
                  "--port", str(nodes[2 * pid]), "--node-config",
                  f"partition-id={pid} num-partitions={args.nodes}", *extra)
            if args.isolation == "process":
                start("flower-superexec", "--insecure", "--runtime-api-address", f"127.0.0.1:{nodes[2 * pid]}")
        cfg = _settings(args, root / "profiles", "deployed")
        app = write_app_dir(root / "app", to_run_config(cfg, FlowerSettings(node_wait_s=120)))
        subprocess.run([str(BIN / "flwr"), "run", str(app.parent), "loop", "--stream"], env=env, check=True,
                       capture_output=True, timeout=900)
        sidecar = cfg.out / "deployed.json"
        deadline = time.monotonic() + 300
        while (not sidecar.is_file() or json.loads(sidecar.read_text())["status"] == "running") \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        return read_report(cfg.out / "deployed.csv").where(kind="client")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def in_process(args, root: Path) -> list[dict]:
    from edgeprof.report import read_report
    from edgeprof.rounds.simulate import run

    return read_report(run(_settings(args, root / "profiles", "in-process")).csv_path).where(kind="client")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tau", type=int, default=50)
    parser.add_argument("--backbone", default="cnn-omniglot")
    parser.add_argument("--isolation", choices=("subprocess", "process"), default="subprocess")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        deployed = deployment(args, Path(tmp))
        local = in_process(args, Path(tmp))
    print(f"PFLEGO, {args.backbone}, tau={args.tau}, {args.nodes} SuperNodes ({args.isolation} isolation), "
          f"{args.rounds} rounds")
    print("round client   wall_s  phases_s  outside  setup_s  startup_s  energy_j")
    for r in sorted(deployed, key=lambda r: (int(r["round"]), int(r["client"]))):
        wall, phases = float(r["wall_s"]), _phases(r)
        print(f"{r['round']:>5} {r['client']:>6} {wall:8.3f} {phases:9.3f} {(wall - phases) / wall:8.1%} "
              f"{r.get('setup_s') or '-':>8} {r.get('startup_s') or '-':>10} {r['energy_j']:>9}")
    later = [r for r in deployed if int(r["round"]) > 1]
    share = statistics.median((float(r["wall_s"]) - _phases(r)) / float(r["wall_s"]) for r in later)
    setup = [float(r["setup_s"]) + float(r.get("startup_s") or 0) for r in later if r.get("setup_s")]
    wall = [float(r["wall_s"]) for r in later]
    print(f"rounds after the first: median share of the round window outside the phases {share:.1%}")
    if setup:
        print(f"  set-up measured beside the round: median {statistics.median(setup):.3f} s per client round, "
              f"{statistics.median(s / (s + w) for s, w in zip(setup, wall)):.1%} of set-up + round")
    deployed_j = statistics.median(float(r["energy_j"]) for r in later)
    local_j = statistics.median(float(r["energy_j"]) for r in local)
    print(f"median client-round energy: deployment {deployed_j:.3f} J, in-process {local_j:.3f} J "
          f"(ratio {deployed_j / local_j:.2f}; energy method {deployed[0]['energy_method']})")


if __name__ == "__main__":
    main()

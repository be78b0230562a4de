#!/usr/bin/env python
"""How far does a one-ulp difference carry in PFLEGO on digits? The cause of its thread-count fragility.

For each variant and seed, two in-process federations (digits High-Pers, 20 clients, 20% participation,
tau=25, mlp, the same participant draws) run side by side: the seed's run, and the same run with ONE weight of
theta_0 (a centre-pixel weight of the first layer) moved by one float32 ulp, the size of a rounding
difference that a change of reduction order (thread count, kernel family, library version) can make. Printed
per variant: ||theta_a - theta_b|| / ||theta_a|| after rounds 1, 10, 20, 50 and T (the perturbation grows
or it does not), the final test accuracy of both runs and the mean over the last 10 rounds (``global``
protocol), and two diagnostics of the Table 6 regime: the mean Frobenius norm of the heads W_i at the end and
the mean norm of the server's theta gradient over the last half of the rounds.

Variants: Table 6 (Adam, rho=0.003, beta=0.189); rho=0.001; beta=0.05; SGD at rho=0.003 and 0.3; and two
what-ifs that patch this process only: the head steps in float64, and W_i's joint step rho instead of rho*I/r.

    python scripts/experiments/pflego_sensitivity.py [--seeds 0,1,2] [--rounds 100] [--variants table6,rho0.001,...]
"""

from __future__ import annotations

import argparse
import contextlib
import time

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # before torch loads, as the CLI does
import numpy as np

#: (name, RunConfig overrides, what-if patch)
VARIANTS = [
    ("table6", {}, None),
    ("rho0.001", {"rho": 0.001}, None),
    ("beta0.05", {"beta": 0.05}, None),
    ("sgd-rho0.003", {"server_optimizer": "sgd", "rho": 0.003}, None),
    ("sgd-rho0.3", {"server_optimizer": "sgd", "rho": 0.3}, None),
    ("head-float64", {}, "head64"),
    ("head-step-rho", {}, "head_rho"),
]
#: the nudged weight: first layer, hidden unit 0, pixel (14, 14) of the 28x28 input (never a blank pixel)
NUDGED_INDEX = 14 * 28 + 14
REPORT_ROUNDS = (1, 10, 20, 50)


def _gradient_steps_float64(head, feats_b, labels, lr, steps):
    """The head steps of :mod:`edgeprof.nn.head` in float64 (what-if), cast back to float32."""
    head, feats_b, rows = head.astype(np.float64), feats_b.astype(np.float64), np.arange(len(labels))
    for _ in range(steps):
        z = feats_b @ head.T
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[rows, labels] -= 1.0
        head = head - lr * (p.T @ feats_b) / len(labels)
    return head.astype(np.float32)


@contextlib.contextmanager
def patched(what: str | None):
    """Apply a what-if patch to this process for the duration of the block."""
    from edgeprof.algorithms import pflego
    from edgeprof.nn import head as headlib

    if what == "head64":
        saved, headlib.gradient_steps = headlib.gradient_steps, _gradient_steps_float64
        try:
            yield
        finally:
            headlib.gradient_steps = saved
    elif what == "head_rho":
        original = pflego.client_round

        def client_round(*args, **kwargs):
            return original(*args, **{**kwargs, "scale": 1.0})  # scale is used only for W_i's joint step

        pflego.client_round = client_round
        try:
            yield
        finally:
            pflego.client_round = original
    else:
        yield


def run_pair(seed: int, rounds: int, overrides: dict, last: int) -> dict:
    """The seed's federation and its one-ulp twin, round by round."""
    from edgeprof.algorithms import aggregation
    from edgeprof.algorithms.contract import ServerState
    from edgeprof.config import RunConfig
    from edgeprof.algorithms.participants import participant_rng, sample_participants
    from edgeprof.rounds.simulate import build_federation, evaluate_all, load_clients

    cfg = RunConfig(algo="pflego", dataset="digits", degree="high", backbone="mlp", clients=20, participation=0.2,
                    tau=25, rounds=rounds, seed=seed, threads=1, **overrides).resolved()
    clients = load_clients(cfg)
    feds = [build_federation(cfg, clients) for _ in range(2)]
    arrays = [a.copy() for a in feds[1].state.arrays]
    flat = arrays[0].reshape(-1)
    flat[NUDGED_INDEX] = np.nextafter(flat[NUDGED_INDEX], np.float32(np.inf))
    feds[1].state = ServerState(arrays, feds[1].state.optimizer)

    grad_norms: list[float] = []
    unbiased = aggregation.unbiased_gradient

    def recording(*args, **kwargs):
        grad = unbiased(*args, **kwargs)
        grad_norms.append(float(np.sqrt(sum(np.sum(np.square(g, dtype=np.float64)) for g in grad))))
        return grad

    rng = participant_rng(cfg)
    dist, accs = {}, ([], [])
    aggregation.unbiased_gradient = recording
    try:
        for t in range(1, rounds + 1):
            who = sample_participants(rng, 20, cfg.participation, cfg.participation_mode, cfg.participant_rounding)
            for fed in feds:
                fed.server_step([fed.client_round(c) for c in who])
            if t in REPORT_ROUNDS or t == rounds:
                a, b = (np.concatenate([x.ravel() for x in f.global_arrays]).astype(np.float64) for f in feds)
                dist[t] = float(np.linalg.norm(a - b) / np.linalg.norm(a))
            if t > rounds - last:
                for acc, fed in zip(accs, feds):
                    acc.append(100 * evaluate_all(fed)[1])
    finally:
        aggregation.unbiased_gradient = unbiased
    heads = float(np.mean([np.linalg.norm(p[0]) for p in feds[0].personal]))
    half = grad_norms[0::2][rounds // 2:]  # the seed's run (the two runs alternate), second half of the rounds
    for fed in feds:
        fed.close()
    return {"dist": dist, "final": (accs[0][-1], accs[1][-1]), "last": tuple(float(np.mean(a)) for a in accs),
            "head_norm": heads, "grad_norm": float(np.mean(half))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--last", type=int, default=10)
    parser.add_argument("--variants", default=",".join(v[0] for v in VARIANTS))
    args = parser.parse_args()
    from edgeprof.nn.compute import set_threads

    set_threads(1)
    wanted = args.variants.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    rounds_shown = [r for r in REPORT_ROUNDS if r < args.rounds] + [args.rounds]
    start = time.perf_counter()
    print(f"one float32 ulp on theta_0[{NUDGED_INDEX}] (first layer); 1 thread; T={args.rounds}; accuracy: "
          f"global protocol, final (mean of the last {args.last} rounds), seed's run -> nudged run\n")
    print("| variant | seed | " + " | ".join(f"rel. theta diff @{r}" for r in rounds_shown)
          + " | accuracy % | mean ||W_i|| | mean ||g|| (2nd half) |")
    print("|---|---|" + "---|" * len(rounds_shown) + "---|---|---|")
    for name, overrides, what in VARIANTS:
        if name not in wanted:
            continue
        with patched(what):
            for seed in seeds:
                r = run_pair(seed, args.rounds, overrides, args.last)
                diffs = " | ".join(f"{r['dist'][t]:.0e}" for t in rounds_shown)
                acc = (f"{r['final'][0]:.2f} ({r['last'][0]:.2f}) -> {r['final'][1]:.2f} ({r['last'][1]:.2f})")
                print(f"| {name} | {seed} | {diffs} | {acc} | {r['head_norm']:.1f} | {r['grad_norm']:.3g} |",
                      flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

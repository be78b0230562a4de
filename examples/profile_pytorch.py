"""A plain PyTorch training loop profiled with edgeprof's API: windows, phases, a decorator.

    python examples/profile_pytorch.py --epochs 3 --out profiles
    edgeprof summary profiles/pytorch-mlp-*.csv
    edgeprof dashboard profiles/pytorch-mlp-*.csv

Every epoch is one window (one report row, its ``round`` column the epoch) with the phases ``forward``,
``backward`` and ``step``; every call of ``evaluate`` is a window of its own (the decorator). Energy comes from
this machine's meters, labelled with how it was obtained (``counter``, ``integrated_power`` or ``estimate``).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import edgeprof


def main(epochs: int = 3, batches: int = 20, out: str = "profiles") -> str:
    torch.manual_seed(0)
    x, y = torch.randn(batches * 32, 20), torch.randint(0, 4, (batches * 32,))
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    mon = edgeprof.monitor(out=out, name="pytorch-mlp", labels={"model": "mlp", "batch_size": 32})

    @mon.measure
    def evaluate() -> float:
        with torch.no_grad():
            return (model(x).argmax(1) == y).float().mean().item()

    with mon:
        for epoch in range(1, epochs + 1):
            with mon.window("epoch", round=epoch):
                for i in range(0, len(x), 32):
                    with mon.phase("forward"):
                        loss = loss_fn(model(x[i:i + 32]), y[i:i + 32])
                    with mon.phase("backward"):
                        optimizer.zero_grad()
                        loss.backward()
                    with mon.phase("step"):
                        optimizer.step()
            print(f"epoch {epoch}: accuracy {evaluate():.2%}")
    print(f"report: {mon.csv_path}")
    return str(mon.csv_path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A plain PyTorch training loop, profiled by edgeprof.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--out", default="profiles")
    args = parser.parse_args()
    main(args.epochs, args.batches, args.out)

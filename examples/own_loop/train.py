"""Train a small CNN with batch-norm on scikit-learn's digits, profiled by edgeprof.

One window per epoch with the phases data, forward, backward and step, its train_loss set while it is open; a
decorated load and evaluate, the evaluation's window of kind ``eval`` labelled with the accuracy it returns; the
run labelled with the model, data set, learning rate and batch size, and a power trace of every window at 50 Hz.
SIGTERM saves a checkpoint and ends with 143.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from torch import nn

import edgeprof
from model import SmallCNN


def main(epochs: int = 3, batch_size: int = 64, lr: float = 0.05, out: str = "profiles", trace_hz: float = 50) -> str:
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    checkpoint = Path(out) / "own-loop-checkpoint.pt"

    def save_and_exit(signum, frame):  # the program's own handler: edgeprof records the signal, then runs it
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), checkpoint)
        print(f"{signal.Signals(signum).name}: checkpoint saved to {checkpoint}", flush=True)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, save_and_exit)
    mon = edgeprof.monitor(out=out, name="own-loop", trace_hz=trace_hz,  # the power trace of every window
                           labels={"model": "small-cnn-bn", "dataset": "digits", "lr": lr, "batch_size": batch_size})

    @mon.measure(returns=lambda data: {"n_samples": len(data[1])})
    def load() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        y = torch.tensor(digits.target)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        train, test = order[: len(y) * 4 // 5], order[len(y) * 4 // 5:]
        return x[train], y[train], x[test], y[test]

    @mon.measure(kind="eval", returns="test_accuracy")
    def evaluate(x: torch.Tensor, y: torch.Tensor) -> float:
        model.eval()
        with torch.no_grad():
            return (model(x).argmax(1) == y).float().mean().item()

    with mon:
        x_train, y_train, x_test, y_test = load()
        for epoch in range(1, epochs + 1):
            model.train()
            with mon.window("epoch", round=epoch) as window:
                order, total = torch.randperm(len(y_train)), 0.0
                for i in range(0, len(order), batch_size):
                    with mon.phase("data"):
                        batch = order[i:i + batch_size]
                        xb, yb = x_train[batch], y_train[batch]
                    with mon.phase("forward"):
                        loss = loss_fn(model(xb), yb)
                    with mon.phase("backward"):
                        optimizer.zero_grad()
                        loss.backward()
                    with mon.phase("step"):
                        optimizer.step()
                    total += loss.item() * len(batch)
                window.labels["train_loss"] = total / len(order)  # set while the window is open: in its row
            accuracy = evaluate(x_test, y_test)
            print(f"epoch {epoch}: train loss {total / len(order):.3f}, test accuracy {accuracy:.1%}", flush=True)
    print(f"report: {mon.csv_path}")
    return str(mon.csv_path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Train a small CNN on the digits, profiled by edgeprof.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--out", default="profiles")
    parser.add_argument("--trace-hz", type=float, default=50, help="the power trace's rate (0: no trace)")
    args = parser.parse_args()
    main(args.epochs, args.batch_size, args.lr, args.out, args.trace_hz)

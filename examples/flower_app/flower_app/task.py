"""The model, the data and the training loop: plain PyTorch, nothing of edgeprof (as in Flower's quickstart)."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """A small classifier of 16 features into 4 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def load_data(partition_id: int, samples: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """This partition's synthetic data: a fixed random linear labelling, a different sample per partition."""
    teacher = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    x = torch.randn(samples, 16, generator=torch.Generator().manual_seed(1 + partition_id))
    return x, (x @ teacher).argmax(1)


def train(model: Net, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float = 0.1) -> float:
    """Mini-batch SGD for ``epochs`` passes; the mean training loss of the last pass."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn, losses = nn.CrossEntropyLoss(), []
    for _ in range(epochs):
        losses = []
        for i in range(0, len(x), 16):
            optimizer.zero_grad()
            loss = loss_fn(model(x[i:i + 16]), y[i:i + 16])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return sum(losses) / len(losses)


def test(model: Net, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(mean loss, accuracy) on ``x``, ``y``."""
    with torch.no_grad():
        logits = model(x)
        return nn.functional.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()

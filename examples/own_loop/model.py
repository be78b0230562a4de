"""A small CNN with batch-norm for scikit-learn's 8x8 digits; its feature part is an edgeprof backbone too:
``edgeprof measure --backbone examples.own_loop.model:factory`` (from the repository root)."""

from __future__ import annotations

from torch import nn


def features(channels: int) -> nn.Sequential:
    """Images (N, channels, H, W) to features (N, 32): two convolutions with batch-norm, pooled."""
    return nn.Sequential(nn.Conv2d(channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


class SmallCNN(nn.Module):
    """The whole model this example trains: :func:`features`, then a linear classifier."""

    def __init__(self, channels: int = 1, classes: int = 10) -> None:
        super().__init__()
        self.features = features(channels)
        self.classifier = nn.Linear(32, classes)

    def forward(self, x):
        return self.classifier(self.features(x))


def factory(input_shape: tuple[int, int, int]) -> nn.Module:
    """edgeprof's backbone: the CNN without its classifier (an algorithm adds its own head), for the data's
    ``(C, H, W)``."""
    return features(input_shape[0])

"""Backbones defined outside edgeprof, named on the command line as ``custom_backbones:<factory>``.

pytest puts this folder on ``sys.path``, so the module is importable as ``custom_backbones`` (the
file form ``tests/custom_backbones.py:<factory>`` works from the repository root). ``small_cnn`` is a
good backbone with batch-norm and dropout; every other factory is one that edgeprof must refuse.
"""

from __future__ import annotations

import torch
from torch import nn


def small_cnn(input_shape):
    """Conv 3x3 (4) + batch-norm + ReLU + dropout + 2x2 pool, then Linear to 6 features: M = 6."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * (height // 2) * (width // 2), 6),
    )  # fmt: skip


class TinyNet(nn.Module):
    """A module class used as the factory itself: ``TinyNet(input_shape)``."""

    def __init__(self, input_shape):
        super().__init__()
        self.conv = nn.Conv2d(input_shape[0], 3, 3, stride=2, padding=1)
        self.norm = nn.BatchNorm2d(3)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return torch.flatten(self.pool(torch.relu(self.norm(self.conv(x)))), 1)


def zero_arg():
    """A factory that takes no argument: a fixed 28x28 grey MLP."""
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 5), nn.Tanh())


class _Doubled(torch.autograd.Function):
    """Doubles in torch, but its ONNX symbolic triples: an export that computes something else."""

    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0

    @staticmethod
    def symbolic(g, x):
        return g.op("Mul", x, g.op("Constant", value_t=torch.tensor(3.0)))


class Doubler(nn.Module):
    def forward(self, x):
        return _Doubled.apply(x)


def onnx_differs(input_shape):
    """A custom op whose ONNX graph is not its torch forward: refused, naming the layer ``doubler``."""
    channels, height, width = input_shape
    net = nn.Sequential()
    net.add_module("conv", nn.Conv2d(channels, 4, 3, padding=1))
    net.add_module("relu", nn.ReLU())
    net.add_module("doubler", Doubler())
    net.add_module("pool", nn.AdaptiveAvgPool2d(1))
    net.add_module("flat", nn.Flatten())
    return net


class StubbornBatchNorm(nn.BatchNorm2d):
    """Batch-norm that stays in training mode whatever .eval() says: batch statistics in every pass."""

    def train(self, mode=True):
        return super().train(True)


def batch_norm_training(input_shape):
    return nn.Sequential(nn.Conv2d(input_shape[0], 4, 3), StubbornBatchNorm(4), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class _BatchStats(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3)

    def forward(self, x):
        h = self.conv(x)
        return torch.nn.functional.batch_norm(h, None, None, training=True).mean((2, 3))


def batch_statistics(input_shape):
    """Batch-norm on batch statistics in forward itself (no module to put in eval mode)."""
    return _BatchStats(input_shape[0])


class _AlwaysDropout(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3)

    def forward(self, x):
        return torch.nn.functional.dropout(self.conv(x), 0.5, training=True).mean((2, 3))


def random_dropout(input_shape):
    return _AlwaysDropout(input_shape[0])


def spatial_output(input_shape):
    """Returns (N, 4, H, W): not a feature vector."""
    return nn.Conv2d(input_shape[0], 4, 3, padding=1)


class _WithClassifier(nn.Module):
    def __init__(self, input_shape):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(input_shape).prod()), 5))
        self.classifier = nn.Linear(5, 2)

    def forward(self, x):
        return self.body(x)


def classifier_left_in(input_shape):
    """A classifier whose parameters never reach the features."""
    return _WithClassifier(input_shape)


class _ScaledByItem(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.conv(x).mean((2, 3)) * self.scale + self.scale.item()


def parameter_as_constant(input_shape):
    """``.item()`` makes the export bake the parameter in as a constant."""
    return _ScaledByItem(input_shape[0])


def not_a_module(input_shape):
    return "resnet"


def fails(input_shape):
    raise ValueError("this factory cannot build for " + str(input_shape))


def exits(input_shape):
    import sys

    sys.exit(3)


class NeedsWidth(nn.Module):
    """A class whose constructor takes other positional arguments than the input shape."""

    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])


class _FirstRowOnly(nn.Module):
    """Features of the batch's first image alone, whatever the batch: (1, M) for N images."""

    def __init__(self, input_shape):
        super().__init__()
        self.linear = nn.Linear(int(torch.tensor(input_shape).prod()), 5)

    def forward(self, x):
        return self.linear(x.flatten(1))[:1]


def drops_the_batch(input_shape):
    """Right on a batch of one (the dry pass), wrong on every other: refused before any round."""
    return _FirstRowOnly(input_shape)


class _NanColumn(nn.Module):
    """A NaN in its first feature; with ``onnx_doubles`` the exported graph doubles every other feature."""

    def __init__(self, input_shape, onnx_doubles: bool):
        super().__init__()
        self.linear = nn.Linear(int(torch.tensor(input_shape).prod()), 8)
        self.onnx_doubles = onnx_doubles

    def forward(self, x):
        y = self.linear(x.flatten(1))
        y = torch.cat([y[:, :1] * float("nan"), y[:, 1:]], 1)
        return y * 2.0 if self.onnx_doubles and torch.onnx.is_in_onnx_export() else y


def nan_features(input_shape):
    """NaN features for ordinary images: refused (a run would train on NaN and report a NaN loss)."""
    return _NanColumn(input_shape, onnx_doubles=False)


class _Bessel(nn.Module):
    """Features through torch.special.i0e, an operator torch's ONNX exporter cannot export (opset 17)."""

    def __init__(self, input_shape):
        super().__init__()
        self.linear = nn.Linear(int(torch.tensor(input_shape).prod()), 4)

    def forward(self, x):
        return torch.special.i0e(self.linear(x.flatten(1)))


def unexportable(input_shape):
    """Right in torch, and refused at its ONNX export: the exporter's own dump of the graph is not shown."""
    return _Bessel(input_shape)


class _GivesUp(nn.Module):
    """Fine in set-up (batches of at most 8 images) and on the first round's two clients; raises in round 2."""

    def __init__(self, input_shape):
        super().__init__()
        self.linear = nn.Linear(int(torch.tensor(input_shape).prod()), 5)
        self.round_batches = 0

    def forward(self, x):
        if x.shape[0] > 8:
            self.round_batches += 1
            if self.round_batches > 2:  # two clients a round
                raise ValueError("the layer gave up")
        return self.linear(x.flatten(1))


def gives_up_in_round_2(input_shape):
    return _GivesUp(input_shape)

"""The shared feature extractors theta of the PFLEGO paper (Table 4, Appendix A.1), in torch.

Each backbone maps a batch ``(B, C, H, W)`` of float32 images to ``(B, M)`` features; the
classifier layer of Table 4 is not part of it (the personal heads live in :mod:`edgeprof.nn.head`).
There is no batch-norm and no dropout, so the forward pass is a pure function of theta and the
input: the same theta gives the same features in torch and in ONNX Runtime.

* ``mlp`` (MNIST, Fashion-MNIST, EMNIST): flatten, Dense 200, ReLU; M = 200.
* ``cnn-cifar`` (CIFAR-10): two [Conv 5x5 64, ReLU, MaxPool 3x3 stride 2] blocks, Dense 384, ReLU,
  Dense 192, ReLU; M = 192. The pools pad by 1 so that 32 -> 16 -> 8 and the flatten is 4096 wide,
  as Table 4 states.
* ``cnn-omniglot`` (Omniglot): four [Conv 3x3 64, ReLU, MaxPool 2x2] blocks, flatten; M = 64 for
  28x28 inputs (28 -> 14 -> 7 -> 3 -> 1).

Any other ``--backbone`` (a torchvision model by name, or your own ``package.module:factory``) is built by
:mod:`edgeprof.nn.custom` behind the same interface (``backbone_name``, ``input_shape``, ``feature_dim``,
``forward``); :func:`build_backbone` dispatches to it, and :func:`input_shape_for` says which shape it gets.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import torch
from torch import nn

from edgeprof.errors import ConfigError, ModelError
from edgeprof.nn.names import TABLE4_BACKBONES as BACKBONES  # the layer's own names (built here)
from edgeprof.nn.names import check_backbone

_DEFAULT_INPUT_SHAPES = {
    "mlp": (1, 28, 28),
    "cnn-cifar": (3, 32, 32),
    "cnn-omniglot": (1, 28, 28),
}
#: the (C, H, W) a backbone outside Table 4 is given: the data set's own channels, at 32x32 for cifar10 and
#: 28x28 for every grey set (digits and synthetic included, as the Table 4 backbones take them)
DATA_SHAPES = {"cifar10": (3, 32, 32)}
GREY_SHAPE = (1, 28, 28)


class Backbone(nn.Module):
    """A feature extractor: ``forward`` maps (B, C, H, W) float32 to (B, feature_dim)."""

    def __init__(self, name: str, net: nn.Sequential, input_shape: tuple[int, int, int], feature_dim: int):
        super().__init__()
        self.net = net
        self.backbone_name = name
        self.input_shape = input_shape
        self.feature_dim = feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def default_input_shape(name: str) -> tuple[int, int, int]:
    """The (C, H, W) of the paper's dataset for a Table 4 backbone; :data:`GREY_SHAPE` for any other."""
    return input_shape_for(name, "digits")


def input_shape_for(name: str, dataset: str) -> tuple[int, int, int]:
    """The (C, H, W) images of ``dataset`` are converted to for backbone ``name``.

    Table 4's backbones take their paper's shape whatever the data (it is resized and its channels
    converted); a torchvision or your own backbone takes the data's own: :data:`DATA_SHAPES`, else
    :data:`GREY_SHAPE`. ConfigError for a name that is neither a backbone nor a factory spec.
    """
    if name in BACKBONES:
        return _DEFAULT_INPUT_SHAPES[name]
    _check_name(name)
    return DATA_SHAPES.get(dataset, GREY_SHAPE)


def file_stem(name: str) -> str:
    """``name`` as a file name (a factory spec's ``:`` and ``/`` become ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "backbone"


def build_backbone(name: str, input_shape: tuple[int, int, int] | None = None, seed: int = 0) -> Backbone:
    """A freshly initialised backbone; the same (name, input_shape, seed) always gives the same theta.

    Initialisation is torch's default for each layer, drawn inside a forked RNG so the global torch
    seed is neither used nor disturbed. Raises :class:`ConfigError` for an unknown name or an input
    shape the architecture cannot take (e.g. smaller than 16x16 for ``cnn-omniglot``). A name outside
    Table 4 (torchvision's, or ``package.module:factory``) is built by :func:`edgeprof.nn.custom.build_custom`.
    """
    _check_name(name)
    if name not in BACKBONES:
        from edgeprof.nn.custom import build_custom

        shape = _check_shape(input_shape if input_shape is not None else default_input_shape(name))
        return build_custom(name, shape, seed)
    shape = _check_shape(input_shape if input_shape is not None else _DEFAULT_INPUT_SHAPES[name])
    builders = {"mlp": _mlp, "cnn-cifar": _cnn_cifar, "cnn-omniglot": _cnn_omniglot}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net, feature_dim = builders[name](shape)
    module = Backbone(name, net, shape, feature_dim)
    module.eval()
    return module


def get_params(module: nn.Module) -> list[np.ndarray]:
    """Float32 C-order copies of the parameters (whatever their memory format), in ``module.parameters()`` order."""
    return [np.array(p.detach().cpu().numpy(), dtype=np.float32, order="C") for p in module.parameters()]


def set_params(module: nn.Module, params: Sequence[np.ndarray]) -> None:
    """Copy ``params`` (in ``module.parameters()`` order) into the module.

    Raises :class:`ModelError`, before changing anything, if the count or any shape differs.
    """
    targets = list(module.parameters())
    check_params([tuple(t.shape) for t in targets], params)
    with torch.no_grad():
        for target, value in zip(targets, params):
            target.copy_(torch.from_numpy(np.asarray(value, dtype=np.float32)))


def check_params(shapes: Sequence[tuple[int, ...]], params: Sequence[np.ndarray]) -> None:
    """Raise :class:`ModelError` unless ``params`` has exactly one array of each shape, in order."""
    if len(params) != len(shapes):
        raise ModelError(f"expected {len(shapes)} parameter arrays, got {len(params)}")
    for i, (value, shape) in enumerate(zip(params, shapes)):
        if tuple(np.shape(value)) != tuple(shape):
            raise ModelError(f"parameter {i} has shape {tuple(np.shape(value))}, the backbone needs {tuple(shape)}")


def param_count(module: nn.Module) -> int:
    """Number of scalar parameters (the size of theta)."""
    return sum(p.numel() for p in module.parameters())


def _check_name(name: str) -> None:
    if name not in BACKBONES:
        check_backbone(name)


def _check_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    dims = tuple(shape)
    if len(dims) != 3 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in dims):
        raise ConfigError(f"input shape must be three positive integers (C, H, W), got {shape!r}")
    return tuple(int(d) for d in dims)  # type: ignore[return-value]


def _relu() -> nn.ReLU:
    """ReLU in place: the same values, one activation buffer less per layer to allocate and fill (about 4% of the
    joint gradient of ``cnn-omniglot`` on 600 images, measured side by side; the ONNX export is the same ``Relu``)."""
    return nn.ReLU(inplace=True)


def _pooled(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _mlp(shape: tuple[int, int, int]) -> tuple[nn.Sequential, int]:
    channels, height, width = shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 200), _relu()), 200


def _cnn_cifar(shape: tuple[int, int, int]) -> tuple[nn.Sequential, int]:
    channels, height, width = shape
    for _ in range(2):
        height, width = _pooled(height, 3, 2, 1), _pooled(width, 3, 2, 1)
    net = nn.Sequential(
        nn.Conv2d(channels, 64, 5, padding=2), _relu(), nn.MaxPool2d(3, stride=2, padding=1),
        nn.Conv2d(64, 64, 5, padding=2), _relu(), nn.MaxPool2d(3, stride=2, padding=1),
        nn.Flatten(),
        nn.Linear(64 * height * width, 384), _relu(),
        nn.Linear(384, 192), _relu(),
    )  # fmt: skip
    return net, 192


def _cnn_omniglot(shape: tuple[int, int, int]) -> tuple[nn.Sequential, int]:
    channels, height, width = shape
    layers: list[nn.Module] = []
    for block in range(4):
        layers += [nn.Conv2d(channels if block == 0 else 64, 64, 3, padding=1), _relu(), nn.MaxPool2d(2)]
        height, width = height // 2, width // 2
    if height < 1 or width < 1:
        raise ConfigError(f"cnn-omniglot needs inputs of at least 16x16, got {shape[1]}x{shape[2]}")
    layers.append(nn.Flatten())
    return nn.Sequential(*layers), 64 * height * width

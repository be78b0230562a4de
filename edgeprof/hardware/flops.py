"""The floating-point operations of a torch module, counted with forward hooks on its leaf modules.

FLOP convention
---------------
Counted (the figures in :attr:`FlopCount.forward` and :attr:`FlopCount.train`):

* ``Conv1d/2d/3d``: 2 FLOPs per multiply-add, ``2 * Cout * Hout * Wout * (Cin/groups) * kh * kw`` per image
  for a Conv2d, plus one add per output element for the bias (``Cout * Hout * Wout``) when it has one.
* ``Linear``: ``2 * in * out`` per row, plus ``out`` bias adds when it has a bias.
* Backward (training) adds, for each of those layers, the two products of the same size as the forward one:
  the gradient with respect to the layer's input (``2 * MACs``; skipped where the input needs no gradient,
  e.g. the first layer, whose input is the data) and the gradient with respect to the weight (``2 * MACs``;
  skipped for a frozen weight). So ``train ~= 3 * forward`` for a conv/linear network.

Reported separately and NOT in those totals (:attr:`FlopCount.extras`, forward pass only): the bias
gradient (a sum of the output gradient over the batch and positions: one add per output element),
``ReLU``-family activations (1 per element), ``MaxPool`` (``k - 1`` comparisons per output for a window of
``k`` elements), ``AvgPool`` (``k`` per output), ``BatchNorm`` (2 per element: scale and shift). Leaf modules
with parameters that are none of these (an ``Embedding``, an ``LSTM``, ...) are listed in
:attr:`FlopCount.uncounted` rather than guessed.

This is the convention of the 34.8 GFLOP figure for one pass of cnn-omniglot training (forward + backward)
over 600 images of 1x28x28: its four 3x3 convolutions are 9,815,040 multiply-adds per image, so
forward = 2 * 9,815,040 + 66,432 bias adds = 19,696,512; backward = 2 * (9,815,040 - 451,584) (no input
gradient for the first convolution) + 2 * 9,815,040 (weights) = 38,356,992; 600 * 58,053,504 = 34.832 GFLOP,
plus 1.2 MFLOP for a 64->5 linear head = 34.833 GFLOP. Counting the first layer's input gradient would give
35.38 (35.4), and counting the bias gradients too would give 34.87 (34.9), so neither is the convention of 34.8.
Leaving the forward bias adds out as well would give 34.79, also 34.8: the figure alone does not say whether
they are in; they are counted here (0.1% of the total).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

# --------------------------------------------------------------------------------------------- FLOP counting


@dataclass(frozen=True)
class FlopCount:
    """The FLOPs of one pass over a batch (see the module docstring for what is counted).

    ``forward = forward_matmul + forward_bias``; ``train = forward + backward_input + backward_weight``.
    ``extras`` (not in either total) maps a kind (``bias_grad``, ``relu``, ``maxpool``, ``avgpool``,
    ``batchnorm``) to its count; ``uncounted`` names the leaf modules with parameters that were not counted.
    """

    forward_matmul: int = 0
    forward_bias: int = 0
    backward_input: int = 0
    backward_weight: int = 0
    extras: dict[str, int] = field(default_factory=dict)
    uncounted: tuple[str, ...] = ()

    @property
    def forward(self) -> int:
        return self.forward_matmul + self.forward_bias

    @property
    def backward(self) -> int:
        return self.backward_input + self.backward_weight

    @property
    def train(self) -> int:
        return self.forward + self.backward


class _Tally:
    """The counts of one pass, added layer by layer from forward hooks (see :func:`count_flops`)."""

    def __init__(self) -> None:
        self.totals = {"forward_matmul": 0, "forward_bias": 0, "backward_input": 0, "backward_weight": 0}
        self.extras: dict[str, int] = {}
        self.uncounted: list[str] = []

    def _extra(self, kind: str, count: int) -> None:
        self.extras[kind] = self.extras.get(kind, 0) + count

    def add(self, name: str, layer: Any, inputs: tuple, output: Any) -> None:
        from torch import nn

        if isinstance(layer, (nn.modules.conv._ConvNd, nn.Linear)) and not isinstance(
            layer, nn.modules.conv._ConvTransposeNd
        ):
            self._matmul(layer, inputs[0] if inputs else None, output)
        elif isinstance(layer, (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Hardswish)):
            self._extra("relu", output.numel())
        elif isinstance(layer, (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd)):
            window = math.prod(_tuple(layer.kernel_size, output.dim() - 2))
            if isinstance(layer, nn.modules.pooling._MaxPoolNd):
                self._extra("maxpool", output.numel() * (window - 1))
            else:
                self._extra("avgpool", output.numel() * window)
        elif isinstance(layer, nn.modules.batchnorm._BatchNorm):
            self._extra("batchnorm", 2 * output.numel())
        elif any(True for _ in layer.parameters(recurse=False)):
            self.uncounted.append(f"{name or '<root>'} ({type(layer).__name__})")

    def _matmul(self, layer: Any, x: Any, output: Any) -> None:
        """A convolution's or a linear layer's multiply-adds, forward and (where a gradient flows) backward."""
        from torch import nn

        if isinstance(layer, nn.Linear):
            positions = output.numel() // layer.out_features  # rows: every leading dim
            macs = positions * layer.in_features * layer.out_features
        else:
            per_output = (layer.in_channels // layer.groups) * math.prod(layer.kernel_size)
            macs = output.numel() * per_output
        self.totals["forward_matmul"] += 2 * macs
        if layer.bias is not None:
            self.totals["forward_bias"] += output.numel()
            if layer.bias.requires_grad:
                self._extra("bias_grad", output.numel())
        if x is not None and x.requires_grad:
            self.totals["backward_input"] += 2 * macs
        if layer.weight.requires_grad:
            self.totals["backward_weight"] += 2 * macs


def count_flops(module: Any, input_shape: Sequence[int], batch: int = 1) -> FlopCount:
    """Count the FLOPs of ``module`` on ``batch`` inputs of shape ``input_shape`` (e.g. (C, H, W)).

    The module runs once on a zero tensor of batch 1 (in eval mode, restored afterwards, so batch-norm
    statistics are not touched) with forward hooks on every leaf module; the counts, all linear in the
    batch, are multiplied by ``batch``. Gradient mode is on during that pass so that each layer sees
    whether its input needs a gradient (it does not when nothing with parameters lies before it).
    """
    import torch

    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    tally = _Tally()
    leaves = [(name, m) for name, m in module.named_modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(lambda layer, i, o, name=name: tally.add(name, layer, i, o)) for name, m in leaves]
    modes = [(m, m.training) for m in module.modules()]
    first = next(iter(module.parameters()), None)
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    device = first.device if first is not None else None
    try:
        module.eval()
        with torch.enable_grad():
            module(torch.zeros((1, *tuple(input_shape)), dtype=dtype, device=device))
    finally:
        for handle in handles:
            handle.remove()
        for m, training in modes:
            m.training = training
    return FlopCount(**{k: v * batch for k, v in tally.totals.items()},
                     extras={k: v * batch for k, v in tally.extras.items()}, uncounted=tuple(tally.uncounted))


def forward_flops(module: Any, input_shape: Sequence[int], batch: int = 1) -> int:
    """FLOPs of one forward pass over ``batch`` inputs: conv/linear multiply-adds (2 each) plus bias adds."""
    return count_flops(module, input_shape, batch).forward


def train_flops(module: Any, input_shape: Sequence[int], batch: int) -> int:
    """Forward + backward FLOPs over ``batch`` inputs: forward, input gradients (not for the first layer) and
    weight gradients of the conv/linear layers; about 3x :func:`forward_flops`."""
    return count_flops(module, input_shape, batch).train


def _tuple(value: Any, dims: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),) * dims

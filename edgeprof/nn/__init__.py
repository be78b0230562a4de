"""Neural-network pieces: the torch backbones, their ONNX Runtime runner, and the numpy softmax head.

Import the submodules directly (``from edgeprof.nn.backbones import build_backbone``); this package
imports nothing so that torch and onnxruntime load only where they are used.
"""

from __future__ import annotations

"""The names the model layer owns: the backbones ``--backbone`` offers and the form of your own. Torch-free, so
the run config (:mod:`edgeprof.config`) and the CLI check a backbone without importing torch; the model code
(:mod:`edgeprof.nn.backbones`, :mod:`edgeprof.nn.custom`) builds from the same lists."""

from __future__ import annotations

import re
from typing import Optional

from edgeprof.errors import ConfigError

#: the backbones of the paper's Table 4, built in
TABLE4_BACKBONES = ("mlp", "cnn-cifar", "cnn-omniglot")
#: standard edge models from torchvision (the ``vision`` extra), adapted to the data, randomly initialised
VISION_BACKBONES = ("mobilenet_v3_small", "resnet18", "efficientnet_b0")
#: every named backbone ``--backbone`` offers; any other value must be your own, as a :func:`factory_spec`
BACKBONES = TABLE4_BACKBONES + VISION_BACKBONES
#: how your own backbone is named (docs/own-code.md, "Your own backbone")
FACTORY_FORM = "module:factory"
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_FACTORY = re.compile(rf"(?P<module>{_DOTTED}|[^:]*\.py):(?P<factory>{_DOTTED})")


def factory_spec(value: str) -> Optional[tuple[str, str]]:
    """``(module, factory)`` of ``package.module:factory`` or ``path/to/file.py:factory``; None for anything else.

    Only the form is checked here; :mod:`edgeprof.nn.custom` imports the module and calls the factory.
    """
    match = _FACTORY.fullmatch(value) if isinstance(value, str) else None
    return (match["module"], match["factory"]) if match else None


def check_backbone(value: str) -> None:
    """ConfigError unless ``value`` is a named backbone (:data:`BACKBONES`) or a factory spec."""
    if not (value in BACKBONES or factory_spec(value) is not None):
        raise ConfigError(f"unknown backbone {value!r}; choose one of: {', '.join(BACKBONES)}, or your own as "
                          f"{FACTORY_FORM} (package.module:factory or path/to/file.py:factory)")

"""Your own backbone: a torchvision model by name, or any ``package.module:factory``, behind edgeprof's interface.

``--backbone`` takes, besides Table 4's names (:mod:`edgeprof.nn.backbones`):

* ``package.module:factory``: the module is imported (the current folder is searched too, as ``python -m``
  does), or ``path/to/file.py:factory``: the file is loaded (relative to the current folder). ``factory`` is a
  callable (a function, or a ``torch.nn.Module`` class), called as ``factory(input_shape)`` with the data's
  ``(C, H, W)`` when it takes a positional argument, else as ``factory()``; it returns a ``torch.nn.Module``
  that maps float32 images ``(N, C, H, W)`` to features ``(N, M)``.
* ``mobilenet_v3_small``, ``resnet18``, ``efficientnet_b0`` from torchvision (``pip install 'edgeprof[vision]'``),
  built with ``weights=None`` (randomly initialised, nothing downloaded), the first convolution rebuilt for the
  data's channels and the classifier replaced by ``nn.Identity()``: features are the pooled last feature map.

The factory runs inside a forked torch RNG seeded with the run's seed (the same seed gives the same theta on
every node). :func:`wrap` then checks the module and wraps it in a :class:`CustomBackbone`: it is cast to
float32 and pinned to eval mode (batch-norm uses its running statistics, which training never changes;
dropout is off), so a round's frozen-theta features and its joint gradient see one and the same function;
every parameter must be trainable and used by the features; M is found by a dry forward pass on a zero batch
``(1, C, H, W)``; and the features must be deterministic and each image's independent of the rest of its
batch. A refusal is one line: :class:`ConfigError` when the spec names nothing usable, :class:`ModelError`
when the model is refused.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from edgeprof.errors import ConfigError, EdgeprofError, ModelError
from edgeprof.nn.backbones import Backbone
from edgeprof.nn.names import VISION_BACKBONES, factory_spec

SEE = "(docs: Your own model and code, Your own backbone)"
VISION_INSTALL = "pip install 'edgeprof[vision]'"


class CustomBackbone(Backbone):
    """A torchvision or your own module as an edgeprof backbone, pinned to eval mode.

    ``train(True)`` is ignored: PFLEGO's round computes the features once with theta frozen and then the
    joint gradient, and both must see the same function (batch-norm on its running statistics, dropout off).
    """

    def train(self, mode: bool = True) -> "CustomBackbone":
        return super().train(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The features of ``x``; your module raising is a :class:`ModelError` that names the line it raised at."""
        try:
            return self.net(x)
        except Exception as err:
            raise ModelError(f"backbone {self.backbone_name!r} raised in its forward pass on a {tuple(x.shape)} batch: "
                             f"{_failure(err)}{_where(err)}") from err


def build_custom(spec: str, input_shape: tuple[int, int, int], seed: int = 0) -> CustomBackbone:
    """The backbone ``spec`` (a torchvision name or a factory spec) for ``input_shape`` images, seeded."""
    factory = vision_factory(spec) if spec in VISION_BACKBONES else resolve_factory(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = _call(factory, spec, input_shape)
        return wrap(spec, net, input_shape)


def resolve_factory(spec: str, own: bool = False) -> Callable[..., Any]:
    """The callable a ``package.module:factory`` or ``path/to/file.py:factory`` spec names (not called).

    With ``own`` (what a Flower node's allow-list permits): only a top-level callable defined in that module
    (its ``__module__``), never a dotted path nor a name the module imported (``from os import abort``).
    """
    parts = factory_spec(spec)
    if parts is None:
        raise ConfigError(f"unknown backbone {spec!r}: give a name or package.module:factory {SEE}")
    module_name, attr = parts
    if own and not attr.isidentifier():
        raise ConfigError(f"backbone {spec!r}: {attr!r} is a dotted path, not a top-level name of {module_name}")
    module = _load_file(module_name) if module_name.endswith(".py") or "/" in module_name else _import(module_name)
    target: Any = module
    for name in attr.split("."):
        if not hasattr(target, name):
            raise ConfigError(f"backbone {spec!r}: {module_name} has no {attr!r}")
        target = getattr(target, name)
    if not callable(target):
        raise ConfigError(f"backbone {spec!r}: {attr!r} is a {type(target).__name__}, not a callable factory")
    defined_in = getattr(target, "__module__", None)
    if own and defined_in != module.__name__:
        raise ConfigError(f"backbone {spec!r}: {attr!r} is not defined in {module_name} (it comes from "
                          f"{defined_in or 'elsewhere'}); a node calls only the allowed module's own callables")
    return target


def _import(name: str):
    """Import ``name`` as Python would, with the current folder searched last (as ``python -m`` does first)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(err.name + ".")):
            raise ConfigError(f"cannot import backbone module {name!r}: no module named {err.name!r} (is its folder "
                              f"on PYTHONPATH, or the current folder?)") from err
        raise ModelError(f"importing backbone module {name!r} failed: {type(err).__name__}: {err}") from err
    except (Exception, SystemExit) as err:  # the user's module raised (or exited) while being imported
        raise ModelError(f"importing backbone module {name!r} failed: {_failure(err)}") from err


def _load_file(path_text: str):
    """Load a backbone file as a module of its own (named after its resolved path, so loaded once)."""
    try:
        path = Path(path_text).expanduser().resolve()
        found = path.is_file()
    except (OSError, RuntimeError, ValueError) as err:  # a link loop, a NUL byte, a name too long, no such ~user
        raise ConfigError(f"backbone file {path_text!r} cannot be resolved: {err}") from err
    if not found:
        raise ConfigError(f"backbone file {path_text} does not exist")
    name = f"edgeprof_backbone_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"backbone file {path_text} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        del sys.modules[name]
        raise ModelError(f"loading backbone file {path_text} failed: {_failure(err)}") from err
    return module


def _takes_shape(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` takes a positional argument (then it gets the input shape)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): offer the shape
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    return any(p.kind in positional for p in params)


def _call(factory: Callable[..., Any], spec: str, shape: tuple[int, int, int]) -> Any:
    """``factory(shape)`` or ``factory()``; a factory that cannot be called either way (a class whose constructor
    takes other positional arguments) is a ModelError naming what it takes, never a bare TypeError."""
    takes_shape = _takes_shape(factory)
    try:
        inspect.signature(factory).bind(*([shape] if takes_shape else []))
    except TypeError as err:
        raise ModelError(f"backbone {spec!r}: edgeprof calls the factory as factory(input_shape) with the data's "
                         f"(C, H, W), or factory() if it takes no positional argument, and it cannot be called so "
                         f"({err}): give a function that builds the module, e.g. lambda input_shape: MyNet(...) "
                         f"{SEE}") from None
    except ValueError:  # no signature to read (a builtin): call it and see
        pass
    try:
        return factory(shape) if takes_shape else factory()
    except EdgeprofError:
        raise
    except (Exception, SystemExit) as err:
        raise ModelError(f"backbone {spec!r}: the factory failed for input shape {shape}: {_failure(err)}") from err


def _failure(err: BaseException) -> str:
    """One line for what the user's code did: its exception, or the sys.exit it called (not the run's exit)."""
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r})"
    return f"{type(err).__name__}: {err}".splitlines()[0]


def _where(err: BaseException) -> str:
    """`` (at FILE:LINE, in FUNCTION)``: the innermost frame of ``err``'s traceback outside torch and edgeprof (the
    user's code that raised); "" where every frame is theirs."""
    import traceback

    ours = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(ours)]
    return f" (at {frames[-1].filename}:{frames[-1].lineno}, in {frames[-1].name})" if frames else ""


def wrap(name: str, net: Any, input_shape: tuple[int, int, int]) -> CustomBackbone:
    """``net`` as a checked, eval-pinned float32 :class:`CustomBackbone` (see the module docstring)."""
    if not isinstance(net, nn.Module):
        raise ModelError(f"backbone {name!r}: the factory returned a {type(net).__name__}, not a torch.nn.Module")
    net.float()
    _check_parameters(name, net)
    module = CustomBackbone(name, net, tuple(input_shape), 0)
    module.eval()
    stuck = [(n, m) for n, m in net.named_modules() if m.training]
    if stuck:
        layer, kind = stuck[0][0] or "(the module)", type(stuck[0][1]).__name__
        raise ModelError(f"backbone {name!r}: layer {layer!r} ({kind}) stays in training mode after .eval(); "
                         f"edgeprof runs a backbone in eval mode (batch-norm on its running statistics, dropout "
                         f"off) {SEE}")
    module.feature_dim = _feature_dim(name, net, input_shape)
    _check_batch_independent(name, module)
    return module


def _check_parameters(name: str, net: nn.Module) -> None:
    params = list(net.named_parameters())
    if not params:
        raise ModelError(f"backbone {name!r} has no parameters to train")
    for pname, p in params:
        if not p.requires_grad:
            raise ModelError(f"backbone {name!r}: parameter {pname!r} does not require gradients; every parameter of "
                             f"a backbone is trained (theta): register a fixed tensor as a buffer {SEE}")


def _feature_dim(name: str, net: nn.Module, shape: tuple[int, int, int]) -> int:
    """M from a dry forward (and backward) pass on a zero batch; every parameter must reach the features."""
    batch = (1, *shape)
    try:
        out = net(torch.zeros(batch))
    except Exception as err:
        raise ModelError(f"backbone {name!r} fails on a {batch} batch of zeros: "
                         f"{type(err).__name__}: {err}".splitlines()[0]) from err
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 1 or out.shape[1] < 1:
        got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
        raise ModelError(f"backbone {name!r} must map (N, C, H, W) images to (N, M) features; on a {batch} batch "
                         f"it returned {got} (end it with a pooling layer and nn.Flatten()) {SEE}")
    if out.dtype != torch.float32:
        raise ModelError(f"backbone {name!r} returned {out.dtype} features; edgeprof needs float32")
    if not out.requires_grad:
        raise ModelError(f"backbone {name!r}: its features do not depend on its parameters (detached?)")
    params = list(net.named_parameters())
    grads = torch.autograd.grad(out.sum(), [p for _, p in params], allow_unused=True)
    unused = [pname for (pname, _), g in zip(params, grads) if g is None]
    if unused:
        raise ModelError(f"backbone {name!r}: parameter {unused[0]!r} is not used to compute the features; remove it "
                         f"(a classifier left in the module? replace it by nn.Identity()) {SEE}")
    return int(out.shape[1])


def _check_batch_independent(name: str, module: CustomBackbone) -> None:
    """Two passes over the same seeded batch agree, and the first image alone gives its features in the batch."""
    from edgeprof.nn.verify import difference, probe_images

    x = torch.from_numpy(probe_images(module.input_shape, batch=3))
    with torch.no_grad():
        first, again, alone = (module(x).numpy(), module(x).numpy(), module(x[:1]).numpy())
    if first.shape[0] != len(x):
        raise ModelError(f"backbone {name!r} gives features of shape {first.shape} for a batch of {len(x)} images: "
                         f"they must keep the batch, (N, M) for N images {SEE}")
    if not np.all(np.isfinite(first)):
        raise ModelError(f"backbone {name!r} gives NaN or infinite features for {len(x)} seeded images in [0, 1) "
                         f"{SEE}")
    diff, tol = difference(module, first, again)
    if diff > tol:
        raise ModelError(f"backbone {name!r} gives other features for the same images in a second pass (dropout or "
                         f"another random layer still active?): it must be deterministic in eval mode {SEE}")
    diff, tol = difference(module, first[:1], alone)
    if diff > tol:
        raise ModelError(f"backbone {name!r}: an image's features depend on the other images of its batch "
                         f"(batch-norm on batch statistics?), max |difference| {diff:.3g} > tolerance {tol:.3g} {SEE}")


# --- torchvision ------------------------------------------------------------------------------------------
def vision_factory(name: str) -> Callable[[tuple[int, int, int]], nn.Module]:
    """A factory of torchvision's ``name`` adapted to the data (ConfigError when torchvision cannot be used)."""
    models = _torchvision_models()
    build = getattr(models, name, None)
    if build is None:
        raise ConfigError(f"this torchvision has no model {name!r}; update it ({VISION_INSTALL})")
    return lambda shape: adapt_vision_model(build(weights=None), shape[0])


def _torchvision_models():
    try:
        from torchvision import models
    except ModuleNotFoundError as err:
        raise ConfigError(f"torchvision is not installed: {VISION_INSTALL} (a torchvision built for torch "
                          f"{torch.__version__.split('+')[0]})") from err
    except Exception as err:  # a build for another torch fails in its own way when imported
        raise ConfigError(f"torchvision cannot be imported ({type(err).__name__}: {err}".splitlines()[0] +
                          f"): install the torchvision built for torch {torch.__version__}") from err
    return models


def adapt_vision_model(model: nn.Module, channels: int) -> nn.Module:
    """The model with its first convolution taking ``channels`` channels and its classifier removed.

    The new convolution keeps every setting of the old one and is initialised as torchvision initialises
    these models' convolutions (Kaiming normal, fan-out); ``fc`` (ResNet) or ``classifier`` (MobileNet,
    EfficientNet) becomes ``nn.Identity()``.
    """
    first = next(((n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)), None)
    if first is None:
        raise ModelError(f"{type(model).__name__} has no convolution to adapt to {channels} channels")
    path, conv = first
    if conv.in_channels != channels:
        new = nn.Conv2d(channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                        bias=conv.bias is not None, padding_mode=conv.padding_mode)
        nn.init.kaiming_normal_(new.weight, mode="fan_out")
        if new.bias is not None:
            nn.init.zeros_(new.bias)
        parent_path, _, attr = path.rpartition(".")
        setattr(model.get_submodule(parent_path) if parent_path else model, attr, new)
    for head in ("fc", "classifier"):
        if isinstance(getattr(model, head, None), nn.Module):
            setattr(model, head, nn.Identity())
    return model


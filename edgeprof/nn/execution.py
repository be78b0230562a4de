"""How every torch forward and backward of a round runs: the memory format and the chunks.

A client's local set is a few hundred to a few thousand images. Run through a convolutional backbone
all at once, in torch's default NCHW layout, the forward and backward are dominated by memory traffic,
not arithmetic: conv1's output alone is 115 MiB at 600 28x28 images, oneDNN reorders every activation
from NCHW to its blocked layout and back around each convolution, and zero-filling the max-pool
gradients alone takes a fifth of the backward. An :class:`ExecutionPlan` says how to do better:

* ``memory_format``: ``channels_last`` keeps the module's 4-D weights and the images NHWC, the layout
  oneDNN computes in, so no reorders; ``contiguous`` is torch's default (NCHW).
* ``chunk``: the local set goes through the network ``chunk`` images at a time and the gradients of
  the *sum* of the per-chunk losses, each divided by the whole set's size N, are accumulated. The result
  is the full-batch gradient of the mean loss, up to float32 reassociation of one sum per parameter (a
  test checks it against the one-batch gradient with a tolerance derived from float32 rounding). A
  chunk's activations stay in the caches; the cost per image no longer grows with N.

Every algorithm's local steps (FedAvg, FedProx, FedPer, FedRep, FedBABU, Ditto, FedSim, FedAlt), PFLEGO's
and FedRecon's joint gradient and every torch forward of an evaluation go through the same plan
(:meth:`Compute.mean_loss_and_grads <edgeprof.nn.compute.Compute.mean_loss_and_grads>`,
:meth:`Compute.forward <edgeprof.nn.compute.Compute.forward>`), so no algorithm is faster for the way it
is run. ``--execution`` chooses it:

* ``auto`` (default): this node's calibration for the backbone, its input shape, the thread count and the
  device (its kind and name: the CPU's model, the GPU's name) when ``--execution calibrate`` stored one in the
  node's cache, else the device kind's default plan (:meth:`DeviceKind.default_plan
  <edgeprof.nn.compute.DeviceKind.default_plan>`): :data:`TABLE` on the CPU, :func:`whole_set_plan` on a GPU;
* ``calibrate``: time the device kind's candidates (:data:`CANDIDATES` on the CPU, :data:`GPU_CANDIDATES`, which
  include the whole set, on a GPU; a few seconds) on this device now, through the seam's sync, store the fastest in
  the node cache (``$EDGEPROF_CACHE_DIR/execution``), use it;
* ``FORMAT:CHUNK``: a given plan, e.g. ``channels_last:64`` or ``contiguous:all``; ``contiguous:all`` is
  edgeprof's path before plans existed (NCHW, the whole set at once), kept for comparison.

The plan used is part of the run's :class:`~edgeprof.nn.compute.Compute` and recorded in its sidecar
(``numerics.compute``) with how it was chosen.
:data:`TABLE` comes from ``scripts/bench_execution.py --only table`` on a 2-core AMD EPYC (AVX2) VM (docs/measuring.md,
"Close to the hardware"): for ``cnn-omniglot`` and ``cnn-cifar``, channels_last in chunks of 64 images was within
14% of the fastest candidate at every N of 150, 600 and 2,400 (within 7% from 600 images), where the NCHW whole
set took 1.21-2.21x the fastest; for ``mlp`` (no convolution) the whole set was fastest and chunks only added
overhead (1.16-3.5x). ``--execution calibrate`` measures the same on the machine at hand. Chunks exist for the
CPU's caches; a GPU runs best on the whole set (one kernel per layer instead of one per layer and chunk: on an
H200, ``channels_last:64`` took 666 aten ops for one forward+backward of 600 images where the whole set takes
~61), so a GPU's default plan is the whole set unless its free memory says otherwise (:func:`whole_set_plan`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from edgeprof.errors import ConfigError

MEMORY_FORMATS = ("contiguous", "channels_last")
#: the ``--execution`` words besides FORMAT:CHUNK
MODES = ("auto", "calibrate")
#: edgeprof's path before plans: NCHW, the whole local set at once
LEGACY_SPEC = "contiguous:all"
#: the calibration's candidates for a network with convolutions / without
CANDIDATES = {True: ("contiguous:all", "contiguous:64", "channels_last:all", "channels_last:32", "channels_last:64",
                     "channels_last:128"),
              False: ("contiguous:all", "contiguous:128", "contiguous:512")}
#: a GPU's calibration candidates: the whole set in each memory format, and chunks for comparison
GPU_CANDIDATES = {True: ("contiguous:all", "channels_last:all", "contiguous:128", "channels_last:128"),
                  False: ("contiguous:all", "contiguous:128")}
#: images timed per candidate by the calibration (a device kind may say otherwise: ``calibration_images``)
CALIBRATION_IMAGES = 256
#: the largest chunk a plan names (``FORMAT:CHUNK`` and a GPU's memory bound)
MAX_CHUNK = 1_000_000
#: a GPU's memory format when no calibration is stored, for a network with convolutions (True) and without:
#: NCHW, cuDNN's own layout for float32 convolutions; chosen before any GPU measurement of the formats
#: (``--execution calibrate`` on the GPU times both)
GPU_TABLE = {True: "contiguous", False: "contiguous"}
#: the share of the device's free memory one forward+backward over the whole set may take (:func:`whole_set_plan`)
GPU_MEMORY_SHARE = 0.5
#: a forward+backward's memory per image over its forward's activations: the saved activations, their gradients
#: and cuDNN's workspace
FOOTPRINT_FACTOR = 3


@dataclass(frozen=True)
class ExecutionPlan:
    """A memory format and a chunk size (None: the whole set at once), and how they were chosen."""

    memory_format: str = "contiguous"
    chunk: Optional[int] = None
    source: str = "given"
    #: the ``--execution`` word this plan was resolved from (``auto``, ``calibrate`` or the plan's own)
    requested: str = ""

    def __post_init__(self) -> None:
        if self.memory_format not in MEMORY_FORMATS:
            raise ConfigError(f"memory format must be one of {', '.join(MEMORY_FORMATS)}, got {self.memory_format!r}")
        if self.chunk is not None and not (isinstance(self.chunk, int) and self.chunk >= 1):
            raise ConfigError(f"chunk must be a positive number of images or 'all', got {self.chunk!r}")

    @property
    def spec(self) -> str:
        """``FORMAT:CHUNK``, the ``--execution`` word that gives this plan."""
        return f"{self.memory_format}:{self.chunk or 'all'}"

    @property
    def channels_last(self) -> bool:
        return self.memory_format == "channels_last"

    def describe(self) -> dict:
        return {"requested": self.requested or self.spec, "memory_format": self.memory_format,
                "chunk": self.chunk or "all", "source": self.source}

    def prepare(self, module):
        """``module`` with its 4-D weights in this plan's memory format (in place; returned for chaining)."""
        import torch

        if self.channels_last:
            module.to(memory_format=torch.channels_last)
        elif any(p.dim() == 4 and not p.is_contiguous() for p in module.parameters()):
            module.to(memory_format=torch.contiguous_format)
        return module

    def split(self, t) -> list:
        """A tensor's chunks along its first axis (the whole tensor when it fits in one chunk)."""
        import torch

        return [t] if self.chunk is None or len(t) <= self.chunk else list(torch.split(t, self.chunk))


def parse(spec: str) -> ExecutionPlan:
    """The plan of a ``FORMAT:CHUNK`` word (ConfigError with one line otherwise)."""
    fmt, sep, chunk = str(spec).partition(":")
    if not sep or fmt not in MEMORY_FORMATS:
        raise ConfigError(f"execution must be auto, calibrate or FORMAT:CHUNK with FORMAT one of "
                          f"{', '.join(MEMORY_FORMATS)} and CHUNK a number of images or 'all', got {spec!r}")
    if chunk == "all":
        return ExecutionPlan(fmt, None, f"given: {spec}")
    if not (chunk.isascii() and chunk.isdigit()) or int(chunk) < 1 or int(chunk) > MAX_CHUNK:  # not "²"
        raise ConfigError(f"execution chunk must be a number of images in 1..{MAX_CHUNK} or 'all', got {chunk!r}")
    return ExecutionPlan(fmt, int(chunk), f"given: {spec}")


def check(spec: str) -> None:
    """ConfigError unless ``spec`` is a valid ``--execution`` word."""
    if spec not in MODES:
        parse(spec)


def has_convolutions(module) -> bool:
    """Whether the module has 4-D weights (a 2-D convolution), the ones channels_last changes."""
    return any(p.dim() == 4 for p in module.parameters())


def table_plan(module) -> ExecutionPlan:
    """:data:`TABLE`'s plan for ``module``."""
    conv = has_convolutions(module)
    fmt, chunk = TABLE[conv]
    kind = "with" if conv else "without"
    return ExecutionPlan(fmt, chunk, f"table: a network {kind} convolutions (edgeprof.nn.execution.TABLE)")


#: the plan for a network with convolutions (True) and without (False) on the CPU when no calibration is stored
TABLE = {True: ("channels_last", 64), False: ("contiguous", None)}


def activation_bytes_per_image(module) -> Optional[int]:
    """The bytes of every leaf module's output for one image: one forward over a zero image on the host, on a copy
    of ``module`` (None when it has no ``input_shape``)."""
    import copy

    import torch

    shape = getattr(module, "input_shape", None)
    if not shape:
        return None
    probe = copy.deepcopy(module).cpu().float().to(memory_format=torch.contiguous_format)
    total = [0]

    def count(_module, _inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            total[0] += output.numel() * output.element_size()

    hooks = [m.register_forward_hook(count) for m in probe.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            probe(torch.zeros((1, *tuple(shape))))
    finally:
        for hook in hooks:
            hook.remove()
    return total[0]


def whole_set_plan(module, free_bytes: Optional[int], where: str) -> ExecutionPlan:
    """A GPU's default plan: the whole local set at once in :data:`GPU_TABLE`'s format, unless it would not fit.

    A forward+backward over N images is taken to need :data:`FOOTPRINT_FACTOR` times the activations of the forward
    (:func:`activation_bytes_per_image`); the plan's chunk is the most images that fit in :data:`GPU_MEMORY_SHARE`
    of ``free_bytes`` (the device's free memory), so a local set up to that size runs whole and a larger one in
    chunks of it; 'all' where that bound passes :data:`MAX_CHUNK` or cannot be estimated (the source says which).
    """
    fmt = GPU_TABLE[has_convolutions(module)]
    per_image = activation_bytes_per_image(module)
    if free_bytes is None or not per_image:
        why = "its free memory unknown" if free_bytes is None else "no input shape to estimate its memory from"
        return ExecutionPlan(fmt, None, f"whole set on {where} ({why}; edgeprof.nn.execution.GPU_TABLE)")
    fits = int(GPU_MEMORY_SHARE * free_bytes) // (FOOTPRINT_FACTOR * per_image)
    memory = (f"{FOOTPRINT_FACTOR} x {per_image / 2**20:.2f} MiB an image for a forward+backward in "
              f"{GPU_MEMORY_SHARE:.0%} of the {free_bytes / 2**30:.1f} GiB free on {where}")
    if fits >= MAX_CHUNK:
        return ExecutionPlan(fmt, None, f"whole set on {where} ({memory}: over {MAX_CHUNK:,} images fit; "
                                        f"edgeprof.nn.execution.GPU_TABLE)")
    fits = max(1, fits)
    return ExecutionPlan(fmt, fits, f"whole set on {where} up to {fits:,} images, in chunks of that beyond "
                                    f"({memory}; edgeprof.nn.execution.GPU_TABLE)")


def resolve(spec: str, module, threads: Optional[int] = None, device: str = "cpu", kind=None) -> ExecutionPlan:
    """The plan ``--execution spec`` gives for ``module`` on ``device`` (see the module docstring); ``kind``: the
    device's :class:`~edgeprof.nn.compute.DeviceKind` (by default the one its word names)."""
    if kind is None:
        from edgeprof.nn.compute import kind_of

        kind = kind_of(device)
    identity = kind.identity(device)
    note = None
    if spec == "calibrate":
        plan = calibrate(module, threads, device=device, kind=kind)
        note = _store(module, threads, identity, plan)
    elif spec == "auto":
        plan, note = _stored(module, threads, identity)
        plan = plan or kind.default_plan(device, module)
    else:
        plan = parse(spec)
    if note:  # the run goes on; its sidecar and stderr say what became of the stored calibration
        logging.getLogger("edgeprof").warning(note)
        plan = dataclasses.replace(plan, source=f"{plan.source}; {note}")
    return dataclasses.replace(plan, requested=spec)


# ---------------------------------------------------------------------------------------------------- calibration


def calibrate(module, threads: Optional[int] = None, images: Optional[int] = None,
              repeats: int = 2, device: str = "cpu", kind=None) -> ExecutionPlan:
    """The fastest of the device kind's candidates (``kind.candidates``: :data:`CANDIDATES` on the CPU) for one
    forward+backward over ``images`` random images (default ``kind.calibration_images``), timed on ``device``.

    The candidates run on a copy of ``module`` (its weights and gradients are untouched), interleaved,
    after one warm-up each, between two syncs of the device through the seam (:meth:`Compute.sync
    <edgeprof.nn.compute.Compute.sync>`); the fastest median wins. A few seconds for the Table 4 backbones.
    """
    import copy

    import torch

    from edgeprof.nn.compute import Compute, kind_of

    kind = kind or kind_of(device)
    images = images or kind.calibration_images
    probe = copy.deepcopy(module)
    shape = tuple(getattr(module, "input_shape"))
    gen = np.random.default_rng(0)
    x = gen.standard_normal((images, *shape)).astype(np.float32)
    y = gen.integers(0, 10, images)
    feature_dim = int(getattr(module, "feature_dim"))
    computes = [Compute(device, dataclasses.replace(parse(spec), source=""), threads, kind)
                for spec in kind.candidates[has_convolutions(module)]]
    plans = [c.plan for c in computes]
    head = computes[0].tensor(gen.standard_normal((10, feature_dim)) * 0.1)
    times: dict[str, list[float]] = {p.spec: [] for p in plans}
    params = list(computes[0].module(probe).parameters())

    def step(compute) -> float:
        compute.module(probe)
        batches = compute.batches(x, y)
        compute.sync()
        start = time.perf_counter()
        compute.mean_loss_and_grads(lambda xb: probe(xb) @ head.T, batches, images, params)
        compute.sync()
        return time.perf_counter() - start

    for compute in computes:
        step(compute)
    for _ in range(repeats):
        for compute in computes:
            times[compute.plan.spec].append(step(compute))
    best = min(plans, key=lambda p: float(np.median(times[p.spec])))
    figures = ", ".join(f"{spec} {1e6 * float(np.median(t)) / images:.0f}" for spec, t in times.items())
    return dataclasses.replace(best, source=f"calibrated on this machine, {kind.identity(device)} (us per image "
                                            f"over {images} images: {figures}; threads "
                                            f"{threads or torch.get_num_threads()})")


def _calibration_path(module, threads: Optional[int], identity: str) -> Optional[Path]:
    """The cache file of a calibration: by the backbone, its layout and input shape, the threads, torch, the host
    CPU and the device (``identity``: its kind and name, :meth:`DeviceKind.identity
    <edgeprof.nn.compute.DeviceKind.identity>`), so a calibration is never taken for another device."""
    from edgeprof.host import cpu_model
    from edgeprof.nn.ort import cache_dir

    folder = cache_dir()
    if folder is None:
        return None
    import torch

    layout = repr([(n, tuple(p.shape)) for n, p in module.named_parameters()])
    key = "|".join([getattr(module, "backbone_name", type(module).__name__), layout,
                    repr(tuple(getattr(module, "input_shape", ()))), str(threads or torch.get_num_threads()),
                    torch.__version__, torch.backends.cpu.get_cpu_capability(), cpu_model(), identity])
    return folder.parent / "execution" / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def _stored(module, threads: Optional[int], identity: str) -> tuple[Optional[ExecutionPlan], Optional[str]]:
    """The calibration stored for this device, or None (none, damaged, or stored without this device's identity,
    as an entry written before the key named the device was); and a note when the cache holds something that is
    no calibration file (a FIFO, a device, a folder, a file too big), which is ignored without being read."""
    path = _calibration_path(module, threads, identity)
    if path is None:
        return None, None
    try:
        text = _read_stored(path)
    except _NotAFile as err:
        return None, f"the stored calibration {path} is {err}; ignored (the device's default plan is used)"
    except OSError:
        return None, None
    try:
        data = json.loads(text) if text is not None else None
        if data is None or data.get("device") != identity:
            return None, None
        plan = parse(data["spec"])
        return dataclasses.replace(plan, source=f"{data['source']}; stored in {path}"), None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, ConfigError):  # damaged
        return None, None


class _NotAFile(OSError):
    """What stands at a calibration's path is no regular file of a calibration's size (the message says what)."""


def _read_stored(path: Path) -> Optional[str]:
    """The text of the calibration file at ``path`` (None: there is none), opened without following a FIFO's wait
    for a writer (``O_NONBLOCK``) and read only once it is known to be a regular file of at most
    :data:`MAX_STORED_BYTES`; :class:`_NotAFile` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotAFile(_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file"))
        if info.st_size > MAX_STORED_BYTES:
            raise _NotAFile(f"{info.st_size:,} bytes, more than a calibration's {MAX_STORED_BYTES:,}")
        return os.read(fd, MAX_STORED_BYTES + 1).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


#: what a path that is no regular file is, by its type (:func:`stat.S_IFMT`)
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}
#: the most a stored calibration may hold (one is a few hundred bytes)
MAX_STORED_BYTES = 64 * 1024


def _store(module, threads: Optional[int], identity: str, plan: ExecutionPlan) -> Optional[str]:
    """Store ``plan`` as this device's calibration (a whole file, renamed into place); None, or the note that says
    why it could not be stored (a read-only folder, a full disk): the run goes on with it either way."""
    path = _calibration_path(module, threads, identity)
    if path is None:
        return None
    from edgeprof.atomic import write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"spec": plan.spec, "source": plan.source, "device": identity}))
    except OSError as err:
        return (f"the calibration was not stored ({err.filename or path}: {err.strerror or err}); the next "
                "--execution auto will not find it")
    return None

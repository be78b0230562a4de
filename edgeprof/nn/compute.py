"""The compute seam: where torch work runs and how, decided once per run (or Flower node) in one value.

A :class:`Compute` is frozen and holds the device (``cpu``, later ``cuda:N``), the execution plan (memory
format and chunks, :mod:`edgeprof.nn.execution`) and the thread count. The
:class:`~edgeprof.algorithms.contract.Runtime` carries it, and every placement of a tensor, every copy between the host (numpy) and the device, and every
synchronisation of the device goes through it:

* host -> device: :meth:`Compute.tensor`, :meth:`Compute.images`, :meth:`Compute.batches`, :meth:`Compute.load`
  (weights into a module), :meth:`Compute.module` (a module onto the device, in the plan's memory format);
* device -> host: :meth:`Compute.host`, :meth:`Compute.hosts`, :meth:`Compute.params`;
* synchronisation: :meth:`Compute.sync`, called by the profiler at window and phase edges only;
* numerics: the float32 matmul precision (``highest``, FP32, unless the run asks for TF32 with ``--tf32``) and, on
  a kind that runs cuDNN, ``torch.backends.cudnn.benchmark`` (on: a round's shapes repeat) and its TF32 switch,
  decided here the same for every algorithm and applied once by :func:`resolve` (:func:`apply_numerics`);
  :meth:`Compute.describe` records them in the sidecar.

What differs between devices is a :class:`DeviceKind` in :data:`DEVICE_KINDS` (``cpu``, and ``cuda`` in
:mod:`edgeprof.nn.cuda`). A new kind is one class and one registry line; a test plugs in a fake kind that records
every placement and synchronisation and runs a round of every algorithm through it. ``--device auto`` is
``cuda`` where torch sees a GPU, else ``cpu`` (:func:`resolve_device`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from edgeprof.errors import ConfigError
from edgeprof.nn.execution import CALIBRATION_IMAGES, CANDIDATES, ExecutionPlan

if TYPE_CHECKING:  # pragma: no cover
    import torch


class DeviceKind:
    """What a device family does differently: its torch device, copies, synchronisation, ONNX Runtime providers.

    The base class is the host CPU; a subclass overrides what its device needs. ``keeps_data`` says whether a
    client's data is copied to the device once per run and kept there (a GPU) or read from the host arrays at
    each use (the CPU, where a tensor shares the array's memory). ``head_on_device``: see the attribute. The
    execution plan ``--execution auto`` takes without a stored calibration is :meth:`default_plan`; the
    calibration times ``candidates`` over ``calibration_images`` images and is stored under :meth:`identity`.
    """

    #: its word in :data:`DEVICE_KINDS` (``--device NAME`` or ``NAME:N``): the report's ``device_kind``
    name = "cpu"
    keeps_data = False
    #: the calibration's candidates for a network with convolutions (True) and without (False)
    candidates = CANDIDATES
    calibration_images = CALIBRATION_IMAGES
    #: whether cuDNN and CUDA's TF32 switches govern this kind's kernels: the seam then turns
    #: ``torch.backends.cudnn.benchmark`` on and allows TF32 only with ``--tf32`` (:func:`apply_numerics`)
    cudnn = False
    #: whether PFLEGO's head steps run in torch on this device (else numpy on the host): a rule per kind,
    #: measured by scripts/bench_head_steps.py (:func:`edgeprof.nn.head.steps_for`)
    head_on_device = False

    def unavailable(self, device: str) -> Optional[str]:
        """Why ``device`` cannot be used on this machine (one line), or None when it can."""
        return None

    def identity(self, device: str) -> str:
        """The device's kind and name, part of a calibration's cache key: ``cpu`` and the host CPU's model."""
        from edgeprof.host import cpu_model

        return f"{self.name} {cpu_model()}"

    def default_plan(self, device: str, module) -> ExecutionPlan:
        """The plan ``--execution auto`` takes where no calibration is stored: the CPU's
        :data:`~edgeprof.nn.execution.TABLE` (chunks that stay in the caches, channels_last for oneDNN)."""
        from edgeprof.nn.execution import table_plan

        return table_plan(module)

    def torch_device(self, device: str) -> "torch.device":
        import torch

        return torch.device(device)

    def to_device(self, t: "torch.Tensor", device: str) -> "torch.Tensor":
        """A host tensor on the device (the host tensor itself on the CPU)."""
        return t

    def to_host(self, t: "torch.Tensor") -> "torch.Tensor":
        """A device tensor on the host (the tensor itself on the CPU)."""
        return t

    def place_module(self, module, device: str):
        """``module`` moved onto the device (in place), returned."""
        return module

    def host_module(self, module):
        """``module`` on the host (a copy where it lies elsewhere), for what runs there: the ONNX export."""
        return module

    def synchronize(self, device: str) -> None:
        """Wait until the device has finished the work queued so far (nothing to wait for on the CPU)."""

    def ort_providers(self, device: str) -> list:
        """ONNX Runtime's execution providers for this device, in order of preference ([]: ONNX Runtime has none
        for it here, and the cached forward runs in torch on the device instead)."""
        return ["CPUExecutionProvider"]

    def nvml_device(self, device: str) -> str:
        """The torch device NVML is told runs the round (its GPU is ``gpu_j``): ``cpu`` for a device that is no
        NVIDIA GPU, whose rounds leave every GPU beside the total."""
        return "cpu"

    def reset_peak_memory(self, device: str) -> None:
        """Start a new peak-memory period of the device (nothing to do where none is kept apart)."""

    def peak_memory_mb(self, device: str) -> Optional[float]:
        """The device memory allocated at most since the last reset, MiB (None: the host's, in peak_rss_mb)."""
        return None

    def describe(self, device: str) -> dict:
        return {"kind": self.name, "device": device}

    def can_mark(self, device: str) -> bool:
        """Whether the device queues its work and can mark a point in that queue (:meth:`mark`: a CUDA event), so
        the profiler's phase edges need not wait for it (:mod:`edgeprof.measure.windows`); False on the CPU, whose
        work is done when the call returns."""
        return False

    def mark(self, device: str):
        """A marker put into the device's queue now: it is reached once the work queued before it is done (only
        where :meth:`can_mark`)."""
        raise NotImplementedError(f"the {self.name} kind has no queue to mark")

    def seconds_between(self, first, second) -> float:
        """The device's seconds from reaching marker ``first`` to reaching ``second`` (both reached: after a
        :meth:`synchronize`)."""
        raise NotImplementedError(f"the {self.name} kind has no queue to mark")

    def release(self, markers, device: str) -> None:
        """Markers whose times were read and that nothing uses again: the kind may reuse them (:meth:`mark`)."""

    def marker(self, device: str):
        """What puts a marker now (:meth:`mark` of ``device``) as one callable: a profiler calls it at every edge."""
        return functools.partial(self.mark, device)

    def can_capture(self, device: str) -> bool:
        """Whether repeated work can be captured once as one device program and replayed (a CUDA graph); where
        not (the CPU, the test kinds) the same program runs eagerly (:mod:`edgeprof.nn.head_program`)."""
        return False

    def capture(self, run, device: str, pool=None):
        """``run()`` warmed up, then captured as one device program; returns the callable that replays it (only
        where :meth:`can_capture`). ``pool``: a memory pool from :meth:`graph_pool` shared with other captures
        (None: one of its own)."""
        raise NotImplementedError(f"the {self.name} kind captures no device programs")

    def head_kernel_programs(self, device: str) -> tuple:
        """The program counts at which PFLEGO's head steps may run as one Triton kernel here
        (:mod:`edgeprof.nn.head_kernel`; tried beside the captured graphs, the fastest kept); () where none."""
        return ()

    def graph_pool(self, device: str):
        """A memory pool several captures may share (their replays sequential; :mod:`edgeprof.nn.step_program`
        says when that is safe), or None where captures keep their own."""
        return None

    def read_back(self, flat: "torch.Tensor") -> np.ndarray:
        """A flat device tensor's values in one host buffer (the tensor's own memory on the CPU)."""
        return self.to_host(flat).numpy()

    def uploader(self, device: str):
        """What copies host arrays into device tensors for :meth:`Compute.load` (kept by the compute for the run):
        here one copy per tensor; a GPU stages them all for one transfer (:class:`edgeprof.nn.cuda.StagedUpload`)."""
        return PerTensorUpload(self, device)


class PerTensorUpload:
    """Host arrays into device tensors one by one, each placed on the device (:meth:`DeviceKind.to_device`) and
    copied into its target. :meth:`load` runs under ``torch.no_grad`` (:meth:`Compute.load` holds it), as every
    uploader's does."""

    def __init__(self, kind: DeviceKind, device: str) -> None:
        self.kind, self.device = kind, device

    def load(self, targets: Sequence["torch.Tensor"], arrays: Sequence[np.ndarray]) -> None:
        import torch

        for target, value in zip(targets, arrays):
            host = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
            target.copy_(self.kind.to_device(host, self.device))

    def describe(self) -> str:
        return "one copy per tensor"


#: torch's float32 matmul precision by default (FP32) and with ``--tf32`` (TF32 where the device has it)
FP32_PRECISION, TF32_PRECISION = "highest", "high"
#: what the sidecar's ``numerics.compute.numerics.label`` says of a run with ``--tf32``
TF32_LABEL = "tf32: float32 matmuls and cuDNN convolutions in TF32 (10-bit mantissa), asked for with --tf32"


def tf32_refused(device: str) -> str:
    """The one line refusing ``--tf32`` on a device whose kind has no TF32 (the CPU)."""
    return (f"--tf32 asks for TF32 matmuls and convolutions on a CUDA GPU; --device {device} has none "
            f"(use --device cuda, or leave --tf32 out: float32 throughout)")


#: the device kinds, by the word before ``:`` in ``--device`` (``cuda:1`` -> ``cuda``): an instance, or where
#: its module imports this one, ``module:Class`` (built on first use)
DEVICE_KINDS: dict = {"cpu": DeviceKind(), "cuda": "edgeprof.nn.cuda:CudaKind"}
#: the ``--device`` word that picks a kind for this machine
AUTO = "auto"


def check_device(device: str) -> None:
    """ConfigError with one line unless ``device`` is ``auto``, a known kind, or ``KIND:N`` (N a device index)."""
    name, sep, index = str(device).partition(":")
    if device == AUTO:
        return
    kind_of(name)
    if sep and not (index.isascii() and index.isdigit() and len(index) <= 3):
        raise ConfigError(f"device must be KIND or KIND:N with N a device index (0, 1, ...), got {device!r}")


def kind_of(device: str) -> DeviceKind:
    """The :class:`DeviceKind` of a device word (ConfigError with one line for an unknown kind)."""
    name = str(device).partition(":")[0]
    if name not in DEVICE_KINDS:
        raise ConfigError(f"device must be {AUTO}, {', '.join(DEVICE_KINDS)} or KIND:N (a device index), "
                          f"got {device!r}")
    kind = DEVICE_KINDS[name]
    if isinstance(kind, str):
        import importlib

        module, _, cls = kind.partition(":")
        kind = DEVICE_KINDS[name] = getattr(importlib.import_module(module), cls)()
    if kind.name != name:  # the rows' device_kind is the kind's own name (Compute.kind_name)
        raise ConfigError(f"device kind {type(kind).__name__} is registered as {name!r} in DEVICE_KINDS but "
                          f"named {kind.name!r}: set its name to {name!r}")
    return kind


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` where torch sees a CUDA GPU, else ``cpu``; any other word as it is."""
    if device != AUTO:
        return device
    return "cuda" if kind_of("cuda").unavailable("cuda") is None else "cpu"


@dataclass(frozen=True)
class Compute:
    """Where (``device``) and how (``plan``, ``threads``) every torch forward and backward of a run runs."""

    device: str = "cpu"
    plan: ExecutionPlan = field(default_factory=ExecutionPlan)
    threads: Optional[int] = None
    kind: DeviceKind = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    #: float32 matmuls (and cuDNN's convolutions) in TF32: an explicit choice (``--tf32``), FP32 otherwise
    tf32: bool = False
    #: data already on the device, by the identity of its host arrays (kinds that keep data only)
    _kept: dict = field(default_factory=dict, compare=False, repr=False)
    #: the run's device programs by name (:meth:`programs`), described in the sidecar
    _programs: dict = field(default_factory=dict, compare=False, repr=False)
    #: the kind's uploader for :meth:`load`, made on first use (a GPU's keeps its staging buffers for the run)
    _upload: list = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind is None:
            object.__setattr__(self, "kind", kind_of(self.device))

    @property
    def kind_name(self) -> str:
        """The device's kind (``cpu``, ``cuda``: :attr:`DeviceKind.name`), each report row's ``device_kind``."""
        return self.kind.name

    def with_plan(self, plan: ExecutionPlan) -> "Compute":
        """The same device and threads with another plan."""
        return dataclasses.replace(self, plan=plan, _kept={}, _programs={})

    def with_execution(self, execution: str, module) -> "Compute":
        """The same device and threads with the plan the ``--execution`` word gives ``module`` on this device
        (:func:`edgeprof.nn.execution.resolve`: a calibration, when asked for, runs here, on this device)."""
        from edgeprof.nn import execution as executionlib

        return self.with_plan(executionlib.resolve(execution, module, self.threads, self.device, self.kind))

    # ---------------------------------------------------------------------------------------- host -> device

    def tensor(self, array: Any, *, dtype=np.float32, requires_grad: bool = False) -> "torch.Tensor":
        """A host array as a tensor on the device, ``dtype`` float32 unless said.

        With ``requires_grad`` the tensor is a leaf of its own (a copy, never the array's memory, so an in-place
        update of it leaves the caller's array as it was); otherwise on the CPU it may share the array's memory.
        """
        import torch

        host = np.array(array, dtype=dtype, order="C") if requires_grad else np.ascontiguousarray(array, dtype=dtype)
        t = self.kind.to_device(torch.from_numpy(host), self.device)
        return t.requires_grad_(True) if requires_grad else t

    def images(self, x: np.ndarray) -> "torch.Tensor":
        """The images as one float32 tensor on the device, in the plan's memory format (kept: see :meth:`batches`)."""
        return self._kept_or(x, self._images)

    def labels(self, y: np.ndarray) -> "torch.Tensor":
        """Integer labels as an int64 tensor on the device (kept: see :meth:`batches`)."""
        return self._kept_or(y, self._labels)

    def batches(self, x: np.ndarray, y: Optional[np.ndarray] = None) -> list:
        """[(images, labels)] on the device, in the plan's chunks (labels None when ``y`` is).

        A kind that keeps data on the device copies each host array once per run (the run keeps its clients'
        arrays, so their identity names them) and every later call chunks the same device tensors; on the CPU
        the tensors are views of the host arrays, made at each call.
        """
        xs = self.plan.split(self.images(x))
        ys = [None] * len(xs) if y is None else self.plan.split(self.labels(y))
        return list(zip(xs, ys))

    def _kept_or(self, array: np.ndarray, place) -> "torch.Tensor":
        if not self.kind.keeps_data:
            return place(array)
        kept = self._kept.get(id(array))
        if kept is None or kept[0] is not array:
            kept = self._kept[id(array)] = (array, place(array))
        return kept[1]

    def _images(self, x: np.ndarray) -> "torch.Tensor":
        import torch

        xt = self.kind.to_device(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), self.device)
        if self.plan.channels_last and xt.dim() == 4:
            xt = xt.contiguous(memory_format=torch.channels_last)
        return xt

    def _labels(self, y: np.ndarray) -> "torch.Tensor":
        import torch

        return self.kind.to_device(torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)), self.device)

    def split(self, t: "torch.Tensor") -> list:
        """A device tensor's chunks along its first axis, as the plan says."""
        return self.plan.split(t)

    def module(self, module):
        """``module`` on the device in the plan's memory format (in place; returned for chaining)."""
        return self.plan.prepare(self.kind.place_module(module, self.device))

    def load(self, module, arrays: Sequence[np.ndarray]) -> None:
        """Copy host ``arrays`` (in ``module.parameters()`` order) into the module's parameters on the device.

        Raises :class:`~edgeprof.errors.ModelError`, before changing anything, if the count or a shape differs.
        """
        import torch

        from edgeprof.nn.backbones import check_params

        targets = list(module.parameters())
        check_params([tuple(t.shape) for t in targets], arrays)
        if not self._upload:
            self._upload.append(self.kind.uploader(self.device))
        with torch.no_grad():
            self._upload[0].load(targets, arrays)

    # ---------------------------------------------------------------------------------------- device -> host

    def host(self, t: "torch.Tensor", *, copy: bool = True) -> np.ndarray:
        """A device tensor (detached) as a float32 C-order host array: a copy of its own, or with ``copy=False``
        for a fresh result nothing else writes to, the tensor's own memory where it already lies on the host."""
        out = self.kind.to_host(t.detach()).numpy()
        return np.array(out, dtype=np.float32, order="C") if copy else np.ascontiguousarray(out, dtype=np.float32)

    def hosts(self, ts: Sequence["torch.Tensor"]) -> list[np.ndarray]:
        """:meth:`host` of each tensor."""
        return [self.host(t) for t in ts]

    def host_labels(self, t: "torch.Tensor") -> np.ndarray:
        """Integer predictions (argmax and the like) back on the host."""
        return self.kind.to_host(t.detach()).numpy()

    def params(self, module) -> list[np.ndarray]:
        """Host copies of the module's parameters, in ``module.parameters()`` order."""
        return self.hosts(list(module.parameters()))

    # ---------------------------------------------------------------------------------------- running

    def forward(self, module, x: np.ndarray) -> "torch.Tensor":
        """``module`` over the images without autograd, chunk by chunk: one (N, ...) tensor on the device."""
        import torch

        with torch.no_grad():
            outs = [module(xb) for xb, _ in self.batches(x)]
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def mean_loss_and_grads(self, logits, batches: Sequence, n: int, params: Sequence) -> tuple[float, list]:
        """The mean cross-entropy over the ``n`` samples of ``batches`` and its gradients wrt ``params``.

        ``logits(images)`` maps one chunk's images to its logits. Each chunk contributes the gradient of its
        *summed* loss divided by ``n``; the sum over chunks is the full-batch gradient of the mean. Returns (the
        loss as a float, read back to the host once, after the last chunk; one gradient tensor per parameter on
        the device, [] when ``params`` is empty).
        """
        total, grads = self.loss_and_grads(logits, batches, n, params)
        return self.scalar(total), grads

    def scalar(self, t: "torch.Tensor") -> float:
        """A one-element device tensor as a host float."""
        return float(self.kind.to_host(t.detach()))

    def sync(self) -> None:
        """Wait for the device's queued work: the profiler calls this at every window edge, and at every phase edge
        of a device whose queue cannot be marked (:meth:`can_mark`), only there."""
        self.kind.synchronize(self.device)

    def can_mark(self) -> bool:
        """Whether the device's queue can be marked (:meth:`DeviceKind.can_mark`): the profiler's phase edges then
        put a marker in it instead of waiting for it."""
        return self.kind.can_mark(self.device)

    def mark(self):
        """A marker in the device's queue (:meth:`DeviceKind.mark`)."""
        return self.kind.mark(self.device)

    def seconds_between(self, first, second) -> float:
        """The device's seconds between two reached markers (:meth:`DeviceKind.seconds_between`)."""
        return self.kind.seconds_between(first, second)

    def release(self, markers) -> None:
        """Markers read and done with, for :meth:`mark` to reuse (:meth:`DeviceKind.release`)."""
        self.kind.release(markers, self.device)

    def marker(self):
        """:meth:`mark` as one callable, made once (:meth:`DeviceKind.marker`)."""
        return self.kind.marker(self.device)

    def ort_providers(self) -> list:
        return self.kind.ort_providers(self.device)

    def host_module(self, module):
        """``module`` on the host (itself on the CPU, a copy from another device), for the ONNX export."""
        return self.kind.host_module(module)

    def reset_peak_memory(self) -> None:
        self.kind.reset_peak_memory(self.device)

    def peak_memory_mb(self) -> Optional[float]:
        return self.kind.peak_memory_mb(self.device)

    def numerics(self) -> dict:
        """The float32 settings the seam decides for this compute (:func:`apply_numerics` applies them): torch's
        float32 matmul precision and, on a kind that runs cuDNN, ``cudnn.benchmark`` and cuDNN's TF32 switch;
        ``label`` says ``fp32``, or that TF32 is on."""
        out = {"float32_matmul_precision": TF32_PRECISION if self.tf32 else FP32_PRECISION, "tf32": self.tf32}
        if self.kind.cudnn:
            out.update(cudnn_benchmark=True, cudnn_allow_tf32=self.tf32)
        out["label"] = TF32_LABEL if self.tf32 else "fp32"
        return out

    def describe(self) -> dict:
        """What the sidecar records: the device, the plan (and how it was chosen), the threads, the numerics."""
        out = {**self.kind.describe(self.device), "execution": self.plan.describe(), "threads": self.threads,
               "numerics": self.numerics()}
        if self._programs:
            out["programs"] = {name: registry.describe() for name, registry in self._programs.items()}
        return out

    # ------------------------------------------------------------------ device programs (captured graphs)

    def programs(self, name: str, build):
        """The run's registry of device programs called ``name``, built by ``build(self)`` on first use (e.g.
        :class:`edgeprof.nn.head_program.HeadPrograms`); its ``describe()`` goes to the sidecar."""
        if name not in self._programs:
            self._programs[name] = build(self)
        return self._programs[name]

    def can_capture(self) -> bool:
        """Whether this device captures repeated work as one program (:meth:`DeviceKind.can_capture`)."""
        return self.kind.can_capture(self.device)

    def capture(self, run, pool=None):
        """``run`` captured as one device program; the callable that replays it (:meth:`DeviceKind.capture`), its
        memory in ``pool`` where one is given (:meth:`graph_pool`)."""
        if pool is None:
            return self.kind.capture(run, self.device)
        return self.kind.capture(run, self.device, pool=pool)

    def head_kernel_programs(self) -> tuple:
        """:meth:`DeviceKind.head_kernel_programs` of this device."""
        return tuple(self.kind.head_kernel_programs(self.device))

    def graph_pool(self):
        """A memory pool captures may share (:meth:`DeviceKind.graph_pool`; None: each keeps its own)."""
        return self.kind.graph_pool(self.device)

    # ------------------------------------------------------------------ a round's work queued, read back once

    def loss_and_grads(self, logits, batches: Sequence, n: int, params: Sequence) -> tuple["torch.Tensor", list]:
        """:meth:`mean_loss_and_grads` without its read-back: the loss stays on the device, a float64 scalar
        tensor (chunks summed in float64), so a loop of steps never waits for the device; the caller reads the
        one loss it reports with :meth:`scalar`."""
        import torch

        total = None
        grads: Optional[list] = None
        for xb, yb in batches:
            loss = torch.nn.functional.cross_entropy(logits(xb), yb, reduction="sum") / n
            if params:
                step = torch.autograd.grad(loss, list(params))
                grads = list(step) if grads is None else [g.add_(s) for g, s in zip(grads, step)]
            part = loss.detach().double()  # summed in float64, as a host float sum of the chunks would be
            total = part if total is None else total + part
        return (total if total is not None else torch.zeros((), dtype=torch.float64)), grads or []

    def hosts_flat(self, ts: Sequence["torch.Tensor"]) -> list[np.ndarray]:
        """:meth:`hosts` in one transfer: the tensors concatenated on the device, copied back once, split on the
        host into float32 C-order arrays (views of one fresh buffer, none sharing a device tensor's memory)."""
        import torch

        if not ts:
            return []
        flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in ts])
        buffer = self.kind.read_back(flat)
        out, start = [], 0
        for t in ts:
            out.append(buffer[start:start + t.numel()].reshape(tuple(t.shape)))
            start += t.numel()
        return out


def set_threads(threads: Optional[int]) -> None:
    """Limit torch's (and through FeatureRunner, ONNX Runtime's) intra-op threads.

    numpy's BLAS is not governed by it: the numpy head always runs it on one thread (:mod:`edgeprof.nn.head`).
    A seed's run is bitwise reproducible for a given thread count and machine, not promised across either.
    """
    if threads:
        import torch

        torch.set_num_threads(threads)


def apply_numerics(compute: Compute) -> None:
    """Set torch's float32 matmul precision, and on a kind that runs cuDNN ``cudnn.benchmark`` and cuDNN's TF32
    switch, as :meth:`Compute.numerics` says: process-wide, once per run, the same for every algorithm.

    The CPU's cuDNN switches are left alone. ``cudnn.benchmark`` times cuDNN's algorithms for each new input shape
    once and keeps the fastest: a run's shapes repeat every round (each client's set, the same chunks). cuDNN's TF32
    switch is on in torch by default; the seam turns it off unless the run asks for TF32, so the default is FP32.
    """
    import torch

    settings = compute.numerics()
    torch.set_float32_matmul_precision(settings["float32_matmul_precision"])
    if compute.kind.cudnn:
        torch.backends.cudnn.benchmark = settings["cudnn_benchmark"]
        torch.backends.cudnn.allow_tf32 = settings["cudnn_allow_tf32"]


def check_usable(device: str, tf32: bool = False) -> DeviceKind:
    """The kind of the resolved ``device``; ConfigError with one line when this machine cannot run rounds on it (no
    CUDA GPU, no such index) or ``tf32`` is asked of a kind without TF32."""
    kind = kind_of(device)
    why = kind.unavailable(device) or (tf32_refused(device) if tf32 and not kind.cudnn else None)
    if why:
        raise ConfigError(why)
    return kind


def check_threads(threads: Optional[int]) -> None:
    """ConfigError with one line when ``threads`` is more than this machine's cores
    (:func:`edgeprof.host.max_threads`): more intra-op threads only oversubscribe it. Checked where the threads are
    used (a run config itself allows up to :data:`edgeprof.config.MAX_THREADS`: a Flower app's run config is written
    for its devices, not for the machine that writes it)."""
    from edgeprof.host import max_threads

    if threads is not None and threads > max_threads():
        raise ConfigError(f"--threads {threads}: more than this machine's {max_threads()} cores (more intra-op "
                          "threads only oversubscribe it)")


def device_compute(device: str, threads: Optional[int] = None, tf32: bool = False) -> Compute:
    """The Compute of ``device`` before its execution plan (the default one): ``device`` resolved (``auto``:
    :func:`resolve_device`) and checked (one line when this machine cannot use it, or ``tf32`` asked of a kind
    without TF32), the threads checked (:func:`check_threads`) and set, the numerics set (:func:`apply_numerics`).
    A driver resolves it once per process (a Flower node: :func:`edgeprof.flower.mod.node_compute`) and hands it to
    its profiler and, for its plan (:meth:`Compute.with_execution`), to the runtime factory."""
    device = resolve_device(device)
    kind = check_usable(device, tf32)
    check_threads(threads)
    set_threads(threads)
    compute = Compute(device, ExecutionPlan(), threads, kind, tf32)
    apply_numerics(compute)
    return compute


def resolve(device: str, execution: str, module, threads: Optional[int] = None, tf32: bool = False) -> Compute:
    """The run's Compute: :func:`device_compute` (``device`` resolved and checked, the threads and the numerics
    set), then the ``--execution`` word resolved for ``module`` on this device (:meth:`Compute.with_execution`; a
    calibration runs under the run's numerics)."""
    return device_compute(device, threads, tf32).with_execution(execution, module)

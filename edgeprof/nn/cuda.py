"""The CUDA device kind: NVIDIA GPUs (desktop, laptop, data-centre) and Jetson boards, through torch.cuda.

What it does differently from the host CPU (:class:`~edgeprof.nn.compute.DeviceKind`):

* data is copied to the GPU once per run and kept there (``keeps_data``), modules are moved with ``.to``;
* :meth:`CudaKind.synchronize` waits for the GPU's queued kernels: torch launches them asynchronously, so a
  profiler edge that did not wait would charge a phase's GPU work to the next one. The compute seam calls it
  at window and phase edges only;
* ONNX Runtime runs on the GPU when the installed build offers a GPU execution provider (onnxruntime-gpu, or
  NVIDIA's build on a Jetson): TensorRT first, then CUDA, each pinned to this device's index, with the CPU
  provider last for the operators they lack (:func:`gpu_providers`);
* repeated work is captured once as a CUDA graph and replayed (:meth:`CudaKind.capture`: PFLEGO's head steps,
  :mod:`edgeprof.nn.head_program`, or their one Triton kernel, :mod:`edgeprof.nn.head_kernel`, where faster;
  the baselines' local step, :mod:`edgeprof.nn.step_program`, whose graphs share one memory pool,
  :meth:`CudaKind.graph_pool`), and flat read-backs land in pinned host memory (:meth:`CudaKind.read_back`);
* peak GPU memory per window: the allocator's peak of allocated bytes (the figure
  ``torch.cuda.max_memory_allocated`` gives, read from the nested stats), reset at each window's start;
* ``--execution auto`` without a stored calibration runs the whole local set at once, unless the GPU's free memory
  says otherwise (:meth:`CudaKind.default_plan`, :func:`edgeprof.nn.execution.whole_set_plan`), never the CPU's
  chunked table; a calibration times :data:`~edgeprof.nn.execution.GPU_CANDIDATES` and is stored under the GPU's
  name (:meth:`CudaKind.identity`);
* the seam turns ``torch.backends.cudnn.benchmark`` on and keeps float32 numerics (cuDNN's and cuBLAS's TF32 off)
  unless the run asks for TF32 with ``--tf32`` (:attr:`CudaKind.cudnn`, :func:`edgeprof.nn.compute.apply_numerics`).

``--device cuda`` on a machine whose torch sees no GPU is refused before anything runs (one line, exit 2).
"""

from __future__ import annotations

import functools

from typing import Callable, NamedTuple, Optional, Sequence

from edgeprof.nn.compute import DeviceKind
from edgeprof.nn.execution import GPU_CANDIDATES, whole_set_plan

#: ONNX Runtime's GPU execution providers, in order of preference
GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


def gpu_providers(available: Sequence[str], index: int) -> list:
    """ONNX Runtime providers for GPU ``index`` from the installed ``available`` ones: each GPU provider offered,
    in :data:`GPU_PROVIDERS` order, with its ``device_id``; then the CPU provider. [] when none is a GPU's."""
    chosen: list = [(name, {"device_id": index}) for name in GPU_PROVIDERS if name in available]
    return chosen + ["CPUExecutionProvider"] if chosen else []


def _index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index else 0


@functools.lru_cache(maxsize=None)
def _torch_device(device: str):
    """The torch device of a ``cuda`` or ``cuda:N`` word, made once (a profiler edge asks for it)."""
    import torch

    return torch.device("cuda", _index(device))


#: each GPU's current stream as a torch object, while it stays current (:meth:`CudaKind.current_stream`)
_STREAMS: dict = {}
#: each GPU's timing events that are free to be recorded again (:meth:`CudaKind.mark`, :meth:`CudaKind.release`)
_FREE_EVENTS: dict = {}


class _CFunctions(NamedTuple):
    current_device: Callable
    synchronize: Callable
    reset_peak: Callable
    memory_stats: Callable


@functools.lru_cache(maxsize=None)
def _direct() -> Optional[_CFunctions]:
    """torch's own C functions under ``torch.cuda.synchronize``, ``reset_peak_memory_stats`` and
    ``memory_stats_as_nested_dict`` (the current device's index, the sync, the peak's reset, the nested stats), or
    None where this torch lacks one: each Python wrapper around them turns the device into an index and back at every
    call, which cost a profiler window's begin and end 2..5 us each on an H200's host (``scripts/gpu_probe.py
    --parts edges``: 5.3 against 2.5 us a sync, 1.7 against 0.2 us a reset, in a tight loop)."""
    import torch

    names = ("_cuda_getDevice", "_cuda_synchronize", "_cuda_resetPeakMemoryStats", "_cuda_memoryStats")
    found = [getattr(torch._C, name, None) for name in names]
    return _CFunctions(*found) if all(callable(f) for f in found) else None


class CudaKind(DeviceKind):
    """A CUDA GPU as torch sees it (``cuda`` = ``cuda:0``; indices follow ``CUDA_VISIBLE_DEVICES``)."""

    name = "cuda"
    keeps_data = True
    #: the tau-1 head steps in torch on the GPU (a few small products per step, next to the features): chosen
    #: before any GPU measurement; scripts/bench_head_steps.py --device cuda (run by scripts/gpu_check.py) measures
    #: numpy on the host against it, and is the evidence this rule is to be checked against
    head_on_device = True
    candidates = GPU_CANDIDATES
    #: a local set of the size the reference runs use, where the whole set and chunks of it differ
    calibration_images = 600
    cudnn = True

    def unavailable(self, device: str) -> Optional[str]:
        import torch

        if not torch.cuda.is_available():
            return (f"--device {device}: torch {torch.__version__} sees no CUDA GPU on this machine "
                    f"(install a CUDA build of torch, or use --device cpu or auto)")
        count = torch.cuda.device_count()
        if _index(device) >= count:
            return f"--device {device}: torch sees {count} CUDA GPU(s) here (cuda:0..cuda:{count - 1})"
        return None

    def torch_device(self, device: str):
        return _torch_device(device)

    def identity(self, device: str) -> str:
        """``cuda`` and the GPU's name (as ``torch.cuda.get_device_name`` gives it): a calibration is kept per GPU
        model."""
        import torch

        return f"{self.name} {torch.cuda.get_device_properties(self.torch_device(device)).name}"

    def free_memory_bytes(self, device: str) -> int:
        """The GPU's free memory now (``torch.cuda.mem_get_info``), bytes."""
        import torch

        return int(torch.cuda.mem_get_info(self.torch_device(device))[0])

    def default_plan(self, device: str, module):
        """The whole local set at once, in chunks only where it would not fit in the GPU's free memory."""
        return whole_set_plan(module, self.free_memory_bytes(device), f"{device} ({self.identity(device)})")

    def to_device(self, t, device: str):
        return t.to(self.torch_device(device))

    def nvml_device(self, device: str) -> str:
        return device  # NVML maps cuda:N to its GPU by PCI id or UUID (edgeprof.meters.gpu_map)

    def to_host(self, t):
        return t.cpu()

    def read_back(self, flat):
        """One copy into pinned (page-locked) host memory, queued with ``non_blocking`` and waited for once: the
        DMA goes straight to the buffer, with no staging copy. A tensor already on the host is read as it is."""
        import torch

        if not flat.is_cuda:
            return flat.numpy()
        buffer = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
        buffer.copy_(flat, non_blocking=True)
        torch.cuda.current_stream(flat.device).synchronize()
        return buffer.numpy()

    def uploader(self, device: str):
        """:class:`StagedUpload` on a CUDA device; one copy per tensor on a host-backed stand-in of this kind."""
        if not self.can_capture(device):
            return super().uploader(device)
        return StagedUpload(self.torch_device(device))

    def can_mark(self, device: str) -> bool:
        """CUDA events, where the device is a CUDA one (a host-backed stand-in of this kind has no queue)."""
        return self.torch_device(device).type == "cuda"

    def mark(self, device: str):
        """A timing CUDA event recorded on the device's current stream (:meth:`current_stream`): one released by an
        earlier window (:meth:`release`) where there is one, else a new one (making an event costs as much again as
        recording it). A profiler calls :meth:`marker`'s closure instead, made once."""
        return self.marker(device)()

    def marker(self, device: str):
        """:meth:`mark` made one closure for ``device`` (its index, its free events and torch's event type looked up
        once), as a profiler calls it at every edge."""
        import torch

        free = self._free_events(device)
        event_type, stream = torch.cuda.Event, self.current_stream

        def mark():
            event = free.pop() if free else event_type(enable_timing=True)
            event.record(stream(device))
            return event
        return mark

    def release(self, markers, device: str) -> None:
        """Markers whose times were read (their window's figures are made): free to be recorded again."""
        self._free_events(device).extend(markers)

    def _free_events(self, device: str) -> list:
        """The device's events free to be recorded again (one list per GPU, kept for the process)."""
        return _FREE_EVENTS.setdefault(self.torch_device(device).index, [])

    def current_stream(self, device: str):
        """The device's current stream, the object kept while the stream stays current: ``torch.cuda.current_stream``
        makes a new one at each call (5 us on an H200's host, at every profiler edge); the raw stream handle, read
        first, says whether the kept one is still current."""
        import torch

        dev = self.torch_device(device)
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:  # a torch without it: a new object each time
            return torch.cuda.current_stream(dev)
        handle = raw(dev.index)
        kept = _STREAMS.get(dev.index)
        if kept is None or kept.cuda_stream != handle:
            kept = _STREAMS[dev.index] = torch.cuda.current_stream(dev)
        return kept

    def seconds_between(self, first, second) -> float:
        return first.elapsed_time(second) / 1000.0

    def can_capture(self, device: str) -> bool:
        """CUDA graphs, where the device is a CUDA one (a host-backed stand-in of this kind captures nothing)."""
        return self.torch_device(device).type == "cuda"

    def capture(self, run, device: str, pool=None):
        """``run`` once on a side stream (warm-up: cuBLAS handles and workspaces are made outside the graph), then
        captured as one CUDA graph, its memory in ``pool`` (:meth:`graph_pool`) where given, else a pool of its own;
        its ``replay`` runs every kernel of ``run`` with one launch."""
        import torch

        side, main = torch.cuda.Stream(self.torch_device(device)), torch.cuda.current_stream(self.torch_device(device))
        side.wait_stream(main)
        with torch.cuda.stream(side):
            run()
        main.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            run()
        return graph.replay

    def head_kernel_programs(self, device: str) -> tuple:
        """The kernel's program counts (:data:`edgeprof.nn.head_kernel.PROGRAM_COUNTS`, those up to the GPU's
        multiprocessor count) on a CUDA device where Triton is importable (a CUDA build of torch on Linux brings it);
        () elsewhere, and where ``EDGEPROF_HEAD_KERNEL=off`` (:func:`edgeprof.nn.head_kernel.switched_off`)."""
        from edgeprof.nn import head_kernel

        if not (self.can_capture(device) and head_kernel.available()) or head_kernel.switched_off():
            return ()
        import torch

        units = torch.cuda.get_device_properties(self.torch_device(device)).multi_processor_count
        return tuple(p for p in head_kernel.PROGRAM_COUNTS if p <= units)  # every program resident at once

    def graph_pool(self, device: str):
        """A fresh CUDA graph memory pool handle (``torch.cuda.graph_pool_handle``) for captures to share."""
        import torch

        with torch.cuda.device(self.torch_device(device)):
            return torch.cuda.graph_pool_handle()

    def place_module(self, module, device: str):
        return module.to(self.torch_device(device))

    def host_module(self, module):
        import copy

        return copy.deepcopy(module).cpu()

    def synchronize(self, device: str) -> None:
        import torch

        direct = _direct()
        # torch's CUDA state is up (as its wrapper would make it) and the device is the current one: its sync as it is
        if direct is not None and torch.cuda.is_initialized() \
                and direct.current_device() == self.torch_device(device).index:
            direct.synchronize()
            return
        torch.cuda.synchronize(self.torch_device(device))

    def ort_providers(self, device: str) -> list:
        import onnxruntime

        return gpu_providers(onnxruntime.get_available_providers(), _index(device))

    def reset_peak_memory(self, device: str) -> None:
        import torch

        direct = _direct()
        if direct is not None and torch.cuda.is_initialized():
            direct.reset_peak(self.torch_device(device).index)
            return
        torch.cuda.reset_peak_memory_stats(self.torch_device(device))

    def peak_memory_mb(self, device: str) -> Optional[float]:
        import torch

        # the one figure of the allocator's nested stats: torch.cuda.max_memory_allocated flattens and sorts all of
        # them first (~0.1 ms at every window's end on an H100's host)
        direct = _direct()
        if direct is not None and torch.cuda.is_initialized():
            stats = direct.memory_stats(self.torch_device(device).index)
        else:
            stats = torch.cuda.memory_stats_as_nested_dict(self.torch_device(device))
        return stats.get("allocated_bytes", {}).get("all", {}).get("peak", 0) / 2**20

    def describe(self, device: str) -> dict:
        import torch

        props = torch.cuda.get_device_properties(self.torch_device(device))
        return {"kind": self.name, "device": device, "name": props.name,
                "capability": f"{props.major}.{props.minor}", "memory_gib": round(props.total_memory / 2**30, 2),
                "uuid": str(getattr(props, "uuid", "") or ""), "torch_cuda": torch.version.cuda}


class StagedUpload:
    """Host arrays into a module's parameters on a CUDA device in one transfer: each array copied into one pinned
    (page-locked) host buffer (torch's CPU copy, on its intra-op threads), the buffer sent to one flat device buffer
    with one DMA queued with ``non_blocking``, then every parameter copied from its slice of it (one multi-tensor
    copy), all queued on the current stream: the host goes on to queue the forward while the GPU copies.

    A copy per parameter from pageable memory (what :class:`~edgeprof.nn.compute.PerTensorUpload` does) stages
    each through the driver and returns when it is done. On an H200's host (``scripts/gpu_probe.py``, best of 20,
    synchronised) cnn-cifar's 1.75 M parameters took 0.76 ms that way and 0.44 ms staged, and the upload then a
    forward of 600 images 2.20 ms against 1.81 ms (the forward alone 1.36 ms); cnn-omniglot's 0.11 M took 0.19 and
    0.20 ms. The buffers are kept and grown as needed; before the host buffer is written again the previous transfer out of it is waited for (an
    event recorded after it)."""

    def __init__(self, device) -> None:
        import threading

        self.device = device
        self._host = self._flat = self._sent = None
        self._lock = threading.Lock()  # one load at a time: the buffers are shared (the copies are stream-ordered)

    def _buffers(self, total: int):
        import torch

        if self._host is None or self._host.numel() < total:
            self._host = torch.empty(total, dtype=torch.float32, pin_memory=True)
            self._flat = torch.empty(total, dtype=torch.float32, device=self.device)
            self._sent = None
        elif self._sent is not None:
            self._sent.synchronize()  # the last transfer has read the host buffer
        return self._host, self._flat

    def load(self, targets, arrays) -> None:
        with self._lock:
            self._load(targets, arrays)

    def _load(self, targets, arrays) -> None:
        import numpy as np
        import torch

        sizes = [int(np.size(a)) for a in arrays]
        host, flat = self._buffers(sum(sizes))
        start = 0
        for value, size in zip(arrays, sizes):
            host[start:start + size].copy_(torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)).view(-1))
            start += size
        flat[:start].copy_(host[:start], non_blocking=True)
        self._sent = torch.cuda.Event()
        self._sent.record(torch.cuda.current_stream(self.device))
        slices, start = [], 0
        for target, size in zip(targets, sizes):
            slices.append(flat[start:start + size].view(target.shape))
            start += size
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(list(targets), slices)
        else:  # torch before 2.1
            for target, part in zip(targets, slices):
                target.copy_(part)

    def describe(self) -> str:
        return "staged in pinned host memory, one transfer"

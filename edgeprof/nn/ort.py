"""ONNX export of a backbone, and the ONNX Runtime runner that computes a client's features.

Theta changes every federated round and a client runs exactly one forward pass per round over its
whole local set, so what a round costs is "get the fresh weights into ONNX Runtime + one forward".
:class:`FeatureRunner` offers two ways to do that (``STRATEGIES``), measured side by side by
``scripts/bench_onnx_weights.py``:

* ``initializers-rebuild`` (default): the weights are initializers of the graph; for each new theta
  the raw bytes of those initializers are replaced in the exported model, which is serialised and
  opened as a new session. ONNX Runtime then optimises and pre-packs the weights like any static
  model, which makes the forward pass about twice as fast as with weights as inputs. All sessions
  share one process-wide CPU arena, so a new session does not page-fault its activations in again.
* ``inputs``: the weights are graph inputs of one session built once and fed with every run; nothing
  is rebuilt, but ONNX Runtime cannot pre-pack or constant-fold them.
* ``io-binding``: as ``inputs``, through ONNX Runtime's IO binding: on a GPU provider each client's images are
  copied to the GPU once per run and stay bound there, the weights are copied at each run and the features
  come back to host memory. The default where the session runs on a GPU provider (:func:`default_strategy`);
  ``scripts/bench_onnx_weights.py --device cuda`` measures the three there.

Every runner checks its export before its first use (:mod:`edgeprof.nn.verify`): ONNX Runtime
must give torch's features, within a float32 tolerance, for a perturbed theta fed through the runner's
own strategy; otherwise a one-line :class:`ModelError` names the first layer that differs. The export
keeps every parameter and buffer a tensor of its own (no de-duplication of equal initial values).

The rebuilding strategy keeps its session while theta is unchanged (several clients of one round
share it); "unchanged" is decided by comparing the values with a private copy, never by object
identity, so weights updated in place are picked up too.

Not offered: ``SessionOptions.add_initializer`` (no re-serialisation). With onnxruntime 1.31 and
``ORT_ENABLE_ALL`` the convolution weights it supplies are silently ignored (the ALL-level layout
transformation apparently keeps the exported values), so the conv backbones return features of
the stale theta; at ``ORT_ENABLE_EXTENDED`` it is correct but loses the fast convolution layout.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import torch

from edgeprof.atomic import make_folder, write_bytes
from edgeprof.errors import ConfigError, ModelError, OutputError
from edgeprof.nn.backbones import Backbone, check_params, file_stem
from edgeprof.nn.verify import check_export

STRATEGIES = ("initializers-rebuild", "inputs", "io-binding")
DEFAULT_STRATEGY = "initializers-rebuild"
#: the strategy when the session's first provider is a GPU's (measured by scripts/bench_onnx_weights.py)
GPU_STRATEGY = "io-binding"
INPUT_NAME = "x"
OUTPUT_NAME = "features"

#: exported model bytes, per (backbone name, input shape, opset, model folder, buffers): the graph depends
#: only on the architecture and the buffers' values, because every parameter is replaced before any run
_EXPORTS: dict[tuple, bytes] = {}


def export_backbone(module: torch.nn.Module, path: str | Path, opset: int = 17) -> Path:
    """Write the backbone as an ONNX file with input ``x``, output ``features`` and a dynamic ``batch`` axis.

    The weights are stored as initializers. The export is checked against torch first
    (:func:`edgeprof.nn.verify.check_export`). Creates the parent folder; the file is written whole or not at all
    (:mod:`edgeprof.atomic`: a full disk leaves no truncated model, and a previous one as it was), else
    :class:`OutputError`. An export failure or a mismatch is a :class:`ModelError`.
    """
    path = Path(path)
    data = _export_bytes(module, opset)
    model = onnx.load_from_string(data)
    names = _param_names(model, module)
    check_export(module, model, names, _RebuildFeed(model, names, threads=1).run)
    try:
        make_folder(path.parent)
        write_bytes(path, data)
    except OSError as err:
        raise OutputError(f"cannot write the ONNX model to {path}: {err.strerror or err}") from err
    return path


def _torchscript_exporter() -> dict:
    """``dynamo=False`` where ``torch.onnx.export`` has that choice (recent releases, whose default became the
    dynamo exporter); older ones (torch 2.1, the lowest pyproject allows) only have the TorchScript-based one."""
    import inspect

    return {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


def _export_bytes(module: torch.nn.Module, opset: int) -> bytes:
    """Export with the TorchScript-based exporter (the dynamo one needs onnxscript and is slower).

    ``keep_initializers_as_inputs=True`` turns off the exporter's de-duplication of initializers with equal
    values (it would serve batch-norm's running variance from its weight, both ones at initialisation, so a
    new weight would change the variance too); the initializers are then taken out of the graph's inputs
    again, so ONNX Runtime treats them as constants.
    """
    input_shape = getattr(module, "input_shape", None)
    if input_shape is None:
        raise ModelError("cannot export a module without an .input_shape (build it with build_backbone)")
    buffer = io.BytesIO()
    was_training = module.training
    module.eval()
    try:
        with warnings.catch_warnings(), _without_ir_dump():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, (torch.zeros((1, *input_shape), dtype=torch.float32),), buffer,
                input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
                opset_version=opset, do_constant_folding=False, keep_initializers_as_inputs=True,
                **_torchscript_exporter(),
            )  # fmt: skip
    except Exception as err:  # torch raises many unrelated types here
        raise ModelError(f"ONNX export failed: {type(err).__name__}: {err}".splitlines()[0]) from err
    finally:
        module.train(was_training)
    model = onnx.load_from_string(buffer.getvalue())
    constants = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in constants]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    return model.SerializeToString()


#: how torch's TorchScript exporter starts the graph its ONNX log writes when an export fails (the export turns the
#: log on whatever the setting; the log goes to standard output by default), before it raises the error edgeprof
#: says in one line
IR_DUMP = "Torch IR graph at exception: "


@contextlib.contextmanager
def _without_ir_dump():
    """Hold back what is written to standard output and error, at their file descriptors (torch's C++ log writes
    there, past ``sys.stdout``), while the export runs; then write it back without torch's dump of the graph: a
    failed export is one line, and anything else written meanwhile (a progress frame, another thread's log line)
    is still said, in its order."""
    with _held(1, "stdout"), _held(2, "stderr"):
        yield


@contextlib.contextmanager
def _held(fd: int, name: str):
    """Hold back what file descriptor ``fd`` (``sys.<name>``'s) is written while the block runs, then write it
    back to ``sys.<name>`` less any :data:`IR_DUMP` (which ends with the graph's return line and a blank line)."""
    stream = getattr(sys, name)
    try:
        stream.flush()
        saved = os.dup(fd)
    except (OSError, ValueError, AttributeError):  # no such descriptor to hold back: the block writes as it would
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
            os.dup2(saved, fd)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", "replace")
            at = text.find(IR_DUMP)
            if at >= 0:
                end = text.find("\n\n", at)
                text = text[:at] + ("" if end < 0 else text[end + 2:])
            if text:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    stream.write(text)
                    stream.flush()


def _buffers_digest(module: torch.nn.Module) -> str:
    """A hash of the module's buffers (batch-norm's running statistics, ...): constants of the export."""
    digest = hashlib.sha256()
    for name, buf in module.named_buffers():
        digest.update(name.encode())
        digest.update(buf.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path | None:
    """The per-node folder of exported models: ``$EDGEPROF_CACHE_DIR/onnx``, else ``~/.cache/edgeprof/onnx``;
    None when ``EDGEPROF_CACHE_DIR`` is set to an empty string (no disk cache)."""
    root = os.environ.get("EDGEPROF_CACHE_DIR")
    if root == "":
        return None
    return Path(root or Path.home() / ".cache" / "edgeprof") / "onnx"


def cache_key(module: torch.nn.Module, opset: int) -> str:
    """File name of ``module``'s export: backbone, input shape, opset and a hash of its weights' layout
    (parameter names and shapes; the weights themselves arrive with every round) and of its buffers."""
    name = file_stem(getattr(module, "backbone_name", type(module).__name__))
    layout = repr([(n, tuple(p.shape)) for n, p in module.named_parameters()])
    shape = tuple(getattr(module, "input_shape", ()))
    digest = hashlib.sha256(f"{layout}|{shape}|{_buffers_digest(module)}|{torch.__version__}".encode())
    return f"{name}-opset{opset}-{digest.hexdigest()[:16]}.onnx"


def _cached_export(module: torch.nn.Module, opset: int, fresh: bool = False) -> tuple[bytes, bool]:
    """The export from the per-node disk cache when present and loadable (and not ``fresh``), else a fresh
    export stored there; and whether it was exported just now.

    A process that serves one message (a Flower ClientApp) pays the ONNX export once per node, not per round.
    Writing is best effort (atomic rename); a damaged file is replaced.
    """
    folder = cache_dir()
    if folder is None:
        return _export_bytes(module, opset), True
    path = folder / cache_key(module, opset)
    try:
        if not fresh:
            data = path.read_bytes()
            onnx.load_from_string(data)
            return data, False
    except Exception:  # noqa: BLE001 - missing, unreadable or damaged: export again
        pass
    data = _export_bytes(module, opset)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes(path, data)
    except OSError:
        pass
    return data, True


def _export_key(module: torch.nn.Module, model_dir: Path | None, opset: int) -> tuple | None:
    """What the export of a :class:`Backbone` depends on (None for any other module: never reused)."""
    if not isinstance(module, Backbone):
        return None
    return (module.backbone_name, tuple(module.input_shape), opset, model_dir, _buffers_digest(module))


def _exported_model(module: torch.nn.Module, model_dir: Path | None, opset: int,
                    fresh: bool = False) -> tuple[onnx.ModelProto, bool]:
    """The exported model, exported at most once per process per architecture (and model folder), and
    read from the per-node disk cache (:func:`cache_dir`) when another process exported it already;
    ``fresh`` exports again whatever the caches hold. Also says whether it was exported just now."""
    name = getattr(module, "backbone_name", "backbone")
    key = _export_key(module, model_dir, opset)
    data = None if fresh or key is None else _EXPORTS.get(key)
    new = data is None
    if data is None:
        if model_dir is not None:
            data = export_backbone(module, Path(model_dir) / f"{file_stem(name)}.onnx", opset).read_bytes()
        elif key is not None:
            data, new = _cached_export(module, opset, fresh)
        else:
            data = _export_bytes(module, opset)
        if key is not None:
            _EXPORTS[key] = data
    try:
        return onnx.load_from_string(data), new
    except Exception as err:
        raise ModelError(f"cannot load the exported ONNX model: {err}".splitlines()[0]) from err


def _param_names(model: onnx.ModelProto, module: torch.nn.Module) -> list[str]:
    """Initializer names in ``module.parameters()`` order; ModelError if the export renamed or folded any."""
    initializers = {init.name: tuple(init.dims) for init in model.graph.initializer}
    names = [name for name, _ in module.named_parameters()]
    for name, param in module.named_parameters():
        if initializers.get(name) != tuple(param.shape):
            raise ModelError(f"parameter {name!r} is not a tensor of the exported model (the export baked it in as a "
                             "constant: a .item() or a Python number made of it in forward?), so ONNX Runtime "
                             "would never see its new values (docs: Your own model and code, Your own backbone)")
    return names


def _weights_as_inputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` where the named initializers have become graph inputs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    wanted = set(names)
    kept = [init for init in model.graph.initializer if init.name not in wanted]
    moved = {init.name: init for init in model.graph.initializer if init.name in wanted}
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    for name in names:
        info = onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(moved[name].dims))
        model.graph.input.append(info)
    return model


@functools.lru_cache(maxsize=None)
def _register_shared_allocator() -> bool:
    """Register one process-wide CPU arena that every session uses (idempotent; False if refused).

    A new session per round would otherwise start with an empty arena of its own, and its first run
    would page-fault in every activation buffer again (~0.05 s per round on cnn-omniglot, 600 images).
    The shared arena keeps the memory of the largest forward seen so far for the process's lifetime.
    """
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    try:
        ort.create_and_register_allocator(info, None)
    except Exception:  # already registered by someone else in this process: sessions may still share it
        return False
    return True


def _session_options(threads: int | None) -> ort.SessionOptions:
    """Sequential CPU execution, all graph optimisations, the shared arena, and no spin-waiting.

    Spinning is off because a client runs one forward per round: ONNX Runtime's idle workers would
    otherwise busy-wait after it and burn energy the profiler charges to the round (no measurable
    cost to the forward itself with 2 threads).
    """
    _register_shared_allocator()
    options = ort.SessionOptions()
    options.add_session_config_entry("session.use_env_allocators", "1")
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.intra_op_num_threads = 0 if threads is None else int(threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return options


#: the execution providers when the caller names none (the host CPU)
CPU_PROVIDERS = ("CPUExecutionProvider",)


def _session(model_bytes: bytes, options: ort.SessionOptions,
             providers: Sequence = CPU_PROVIDERS) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(model_bytes, options, providers=list(providers))
    except Exception as err:  # onnxruntime's own exception types are not importable portably
        raise ModelError(f"ONNX Runtime cannot load the backbone: {err}".splitlines()[0]) from err


class _RebuildFeed:
    """Weights as initializers; a new session per new theta, kept while theta is unchanged."""

    def __init__(self, model: onnx.ModelProto, names: Sequence[str], threads: int | None,
                 providers: Sequence = CPU_PROVIDERS):
        self._model = model
        self._names = list(names)
        self._threads = threads
        self._providers = providers
        by_name = {init.name: init for init in model.graph.initializer}
        self._initializers = [by_name[name] for name in self._names]
        self._theta: list[np.ndarray] | None = None
        self._session: ort.InferenceSession | None = None

    def run(self, x: np.ndarray, params: Sequence[np.ndarray]) -> np.ndarray:
        if self._session is None or not self._unchanged(params):
            self._session = None  # never keep a session whose weights are not self._theta
            theta = [np.array(p, dtype=np.float32, order="C", copy=True) for p in params]
            self._session = self._build(theta)
            self._theta = theta
        return self._session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]

    def _unchanged(self, params: Sequence[np.ndarray]) -> bool:
        """Exact value comparison with the private copy: in-place updates are caught, ids are not trusted."""
        assert self._theta is not None
        return all(np.array_equal(old, new) for old, new in zip(self._theta, params))

    def _build(self, theta: list[np.ndarray]) -> ort.InferenceSession:
        for init, value in zip(self._initializers, theta):
            del init.float_data[:]  # raw_data (little-endian, as ONNX requires) is the only copy
            init.raw_data = value.astype("<f4", copy=False).tobytes()
        return _session(self._model.SerializeToString(), _session_options(self._threads), self._providers)


class _InputsFeed:
    """Weights as graph inputs of one session built once, fed with every run."""

    def __init__(self, model: onnx.ModelProto, names: Sequence[str], threads: int | None,
                 providers: Sequence = CPU_PROVIDERS):
        self._names = list(names)
        model_bytes = _weights_as_inputs(model, names).SerializeToString()
        self._session = _session(model_bytes, _session_options(threads), providers)

    def run(self, x: np.ndarray, params: Sequence[np.ndarray]) -> np.ndarray:
        feeds = {INPUT_NAME: x}
        feeds.update((name, np.ascontiguousarray(p, dtype=np.float32)) for name, p in zip(self._names, params))
        return self._session.run([OUTPUT_NAME], feeds)[0]


class _BoundFeed:
    """Weights as graph inputs of one session, through IO binding: images bound once per array on the provider's
    device (kept while the run keeps the array), weights copied in at each run, features bound to host memory."""

    def __init__(self, model: onnx.ModelProto, names: Sequence[str], threads: int | None,
                 providers: Sequence = CPU_PROVIDERS):
        self._names = list(names)
        model_bytes = _weights_as_inputs(model, names).SerializeToString()
        self._session = _session(model_bytes, _session_options(threads), providers)
        self._device, self._device_id = ort_device(providers)
        self._images: dict[int, tuple[np.ndarray, ort.OrtValue]] = {}

    def _bound_images(self, x: np.ndarray) -> ort.OrtValue:
        if self._device == "cpu":  # an OrtValue over host memory shares the array's: nothing to keep
            return ort.OrtValue.ortvalue_from_numpy(x)
        kept = self._images.get(id(x))
        if kept is None or kept[0] is not x:
            kept = self._images[id(x)] = (x, ort.OrtValue.ortvalue_from_numpy(x, self._device, self._device_id))
        return kept[1]

    def run(self, x: np.ndarray, params: Sequence[np.ndarray]) -> np.ndarray:
        binding = self._session.io_binding()
        binding.bind_ortvalue_input(INPUT_NAME, self._bound_images(x))
        for name, p in zip(self._names, params):
            binding.bind_cpu_input(name, np.ascontiguousarray(p, dtype=np.float32))
        binding.bind_output(OUTPUT_NAME, "cpu")
        self._session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]


def ort_device(providers: Sequence) -> tuple[str, int]:
    """(ONNX Runtime's device name, device id) of the first provider: ``("cuda", N)`` for TensorRT and CUDA, else
    ``("cpu", 0)``."""
    first = providers[0] if providers else "CPUExecutionProvider"
    name, options = (first, {}) if isinstance(first, str) else first
    if name in ("TensorrtExecutionProvider", "CUDAExecutionProvider"):
        return "cuda", int(options.get("device_id", 0))
    return "cpu", 0


def default_strategy(providers: Sequence) -> str:
    """:data:`GPU_STRATEGY` when the first provider is a GPU's, else :data:`DEFAULT_STRATEGY` (measured on CPUs)."""
    return GPU_STRATEGY if ort_device(providers)[0] != "cpu" else DEFAULT_STRATEGY


_FEEDS = {"initializers-rebuild": _RebuildFeed, "inputs": _InputsFeed, "io-binding": _BoundFeed}


class FeatureRunner:
    """Runs the backbone's forward pass in ONNX Runtime with the current round's weights.

    The module supplies the architecture (it is exported once per process) and nothing else: every
    call to :meth:`features` says which theta to use. ``threads`` sets ONNX Runtime's intra-op
    threads (None: its default); ``model_dir``, when given, receives ``<backbone_name>.onnx``,
    otherwise the export stays in memory. See the module docstring for the strategies.
    """

    STRATEGIES = STRATEGIES

    def __init__(
        self,
        module: torch.nn.Module,
        threads: int | None = None,
        strategy: str | None = None,
        model_dir: Path | None = None,
        opset: int = 17,
        providers: Sequence = CPU_PROVIDERS,
    ):
        strategy = default_strategy(providers) if strategy is None else strategy
        if strategy not in STRATEGIES:
            raise ConfigError(f"unknown ONNX weight strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
        self.strategy = strategy
        self.threads = threads
        #: ONNX Runtime's execution providers, in order of preference (the run's Compute chooses them)
        self.providers = tuple(providers)
        self.input_shape = tuple(getattr(module, "input_shape", ()))
        self.feature_dim = getattr(module, "feature_dim", None)
        self._param_shapes = [tuple(p.shape) for p in module.parameters()]
        folder = None if model_dir is None else Path(model_dir)
        model, new = _exported_model(module, folder, opset)
        try:
            self._feed = self._checked_feed(module, model)
        except ModelError:
            if new:
                raise
            # a cached export (this process's, or the node's disk cache) may predate a change to the model's code
            self._feed = self._checked_feed(module, _exported_model(module, folder, opset, fresh=True)[0])

    def _checked_feed(self, module: torch.nn.Module, model: onnx.ModelProto):
        """The strategy's feed of ``model``, once the export has been checked against torch through it."""
        names = _param_names(model, module)
        feed = _FEEDS[self.strategy](model, names, self.threads, self.providers)
        check_export(module, model, names, feed.run)
        return feed

    def features(self, x: np.ndarray, params: Sequence[np.ndarray]) -> np.ndarray:
        """(N, M) float32 features of the images ``x`` (N, C, H, W) under theta = ``params``.

        ``params`` are in ``module.parameters()`` order (as :func:`get_params` returns them);
        a wrong count or shape is a :class:`ModelError`, a wrong image shape a :class:`ConfigError`.
        """
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 4 or tuple(x.shape[1:]) != self.input_shape:
            raise ConfigError(f"images must have shape (N, {', '.join(map(str, self.input_shape))}), got {x.shape}")
        check_params(self._param_shapes, params)
        if x.shape[0] == 0:
            return np.zeros((0, self.feature_dim or 0), dtype=np.float32)
        return self._feed.run(x, params)

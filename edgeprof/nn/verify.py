"""Is the exported backbone the same function as the torch one? Checked once per export, before any round.

PFLEGO computes a round's features in ONNX Runtime and its joint gradient in torch (Algorithm 1), and
FedRecon does the same, so both must compute one function of theta. :func:`check_export` runs both on a
few seeded images with a *perturbed* theta fed the way every round feeds it (through the runner's own
feed), so an export that ties two tensors together because they were equal at initialisation (batch-norm's
weight and running variance are both ones), bakes a parameter in as a constant, or fixes the batch size is
caught too. On a mismatch, :func:`locate` runs the export again with every intermediate value as an output
and ONNX Runtime's graph optimisations off, compares each layer's output with torch's (forward hooks), and
names the first layer that differs, its ONNX node and ops: one line in a :class:`ModelError`.

Tolerance (:func:`tolerance`): two float32 evaluations of a chain of ``depth`` dot products of length at
most ``n`` may differ by ``depth * gamma_n * scale`` (Higham, *Accuracy and Stability of Numerical
Algorithms*, 3.1; ``gamma_n = n u / (1 - n u)``, ``u = 2**-24``), where ``depth`` counts the layers with a
weight of two or more dimensions (at least 1), ``n`` is the largest fan-in of such a weight (at least 64,
so that element-wise functions implemented differently, a few ulps apart, fit) and ``scale`` is the
largest magnitude of either result. A wrong op is off by the size of the values themselves, orders of
magnitude above it.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import torch

from edgeprof.errors import ModelError

#: unit roundoff of float32
U32 = 2.0**-24
#: images the export is checked on: a batch of this many, other than the batch of 1 it was exported with
PROBE_BATCH = 4
#: the smallest reduction length the tolerance assumes (room for a few ulps per element-wise function)
MIN_FAN_IN = 64
SEE = "(docs: Your own model and code, Your own backbone)"

Run = Callable[[np.ndarray, Sequence[np.ndarray]], np.ndarray]


def gamma(n: int) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of an n-term float32 sum or dot product."""
    return n * U32 / (1.0 - n * U32)


def depth_and_fan_in(module: torch.nn.Module) -> tuple[int, int]:
    """(layers with a weight of >= 2 dimensions, at least 1; their largest fan-in, at least MIN_FAN_IN)."""
    fan_ins = [int(np.prod(p.shape[1:])) for p in module.parameters() if p.dim() >= 2]
    return max(1, len(fan_ins)), max([MIN_FAN_IN, *fan_ins])


def tolerance(module: torch.nn.Module, a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference two float32 evaluations of ``module`` giving ``a`` and ``b`` may show."""
    depth, n = depth_and_fan_in(module)
    scale = max(_max_abs(a), _max_abs(b))
    return depth * gamma(n) * scale


def difference(module: torch.nn.Module, want: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(max |got - want|, tolerance) over the values both give as finite numbers; the difference is infinite where
    one gives a NaN or an infinity the other does not (a NaN in ``want`` hid every difference beside it)."""
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)) or not np.array_equal(want[~finite], got[~finite],
                                                                             equal_nan=True):
        return float("inf"), tolerance(module, want[finite], want[finite])
    diff = float(np.max(np.abs(got[finite].astype(np.float64) - want[finite]))) if finite.any() else 0.0
    return diff, tolerance(module, want[finite], got[finite])


def probe_images(input_shape: Sequence[int], batch: int = PROBE_BATCH) -> np.ndarray:
    """Seeded images in [0, 1), like the data's."""
    return np.random.default_rng(0).random((batch, *input_shape), dtype=np.float32)


def perturbed(params: Sequence[np.ndarray]) -> list[np.ndarray]:
    """theta moved off its initial values by about 10% of each tensor's RMS (plus 0.01): tensors that were
    equal at initialisation (batch-norm's weight and running variance) are no longer equal."""
    rng = np.random.default_rng(1)
    out = []
    for p in params:
        rms = float(np.sqrt(np.mean(np.square(p, dtype=np.float64)))) if p.size else 0.0
        out.append((p + (0.1 * rms + 0.01) * rng.standard_normal(p.shape)).astype(np.float32))
    return out


def check_export(module: torch.nn.Module, model: onnx.ModelProto, names: Sequence[str], run: Run) -> None:
    """ModelError (one line) unless ``run(x, theta)``, the runner's feed of ``model``, gives torch's features.

    ``names`` are the initializers of the parameters, in ``module.parameters()`` order. The module's own
    weights are restored afterwards.
    """
    from edgeprof.nn.backbones import get_params, set_params

    label = _label(module)
    x = probe_images(module.input_shape)
    original = get_params(module)
    theta = perturbed(original)
    was_training = module.training
    module.eval()  # as it was exported
    try:
        set_params(module, theta)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        try:
            got = np.asarray(run(x, theta))
        except ModelError:
            raise
        except Exception as err:  # onnxruntime's own exception types are not importable portably
            raise ModelError(f"ONNX Runtime fails on a batch of {len(x)} images of the exported backbone {label}: "
                             f"{err} (did the export fix the batch size?) {SEE}".splitlines()[0]) from err
        if got.shape != want.shape:
            raise ModelError(f"the exported backbone {label} gives features of shape {got.shape} for {len(x)} images, "
                             f"torch {want.shape}: the export fixed a size (reshape with x.flatten(1), not a "
                             f"constant) {SEE}")
        diff, tol = difference(module, want, got)
        if diff > tol:
            raise ModelError(locate(module, model, names, x, theta, want, (diff, tol)))
    finally:
        set_params(module, original)
        module.train(was_training)


def locate(module: torch.nn.Module, model: onnx.ModelProto, names: Sequence[str], x: np.ndarray,
           theta: Sequence[np.ndarray], want: np.ndarray, overall: tuple[float, float]) -> str:
    """The one line that names the first layer whose ONNX output differs from torch's (see the module doc)."""
    label = _label(module)
    head = f"the ONNX export of backbone {label} differs from torch"
    try:
        values, final = _onnx_values(model, names, x, theta)
        outputs = _torch_outputs(module, x)
    except Exception as err:  # noqa: BLE001 - the search is best effort; the mismatch itself is certain
        return (f"{head}: max |difference| {overall[0]:.3g} > tolerance {overall[1]:.3g} (the layer could not "
                f"be found: {type(err).__name__}) {SEE}")
    modules = dict(module.named_modules())
    for path, node in _instances(model, modules):
        got = values.get(node.output[0])
        ref = outputs.get(path)
        if got is None or ref is None or got.shape != ref.shape:
            continue
        diff, tol = difference(module, ref, got)
        if diff > tol:
            name, ops = path[0], _ops(model, node, modules, path)
            where = _display(module, name, type(modules[name]).__name__)
            return (f"{head} {where}ONNX node {node.name!r}, ops {ops}): max |difference| {diff:.3g} > "
                    f"tolerance {tol:.3g} {SEE}")
    diff, tol = difference(module, want, final)
    if diff <= tol:
        return (f"{head} only with ONNX Runtime's graph optimisations on (every layer matches without them): "
                f"max |difference| {overall[0]:.3g} > tolerance {overall[1]:.3g} {SEE}")
    last = model.graph.node[-1]
    return (f"{head} (no layer could be matched to its ONNX nodes; last node {last.name!r}, op {last.op_type}): "
            f"max |difference| {diff:.3g} > tolerance {tol:.3g} {SEE}")


def _label(module: torch.nn.Module) -> str:
    return repr(getattr(module, "backbone_name", type(module).__name__))


def _max_abs(a: np.ndarray) -> float:
    finite = np.abs(a[np.isfinite(a)]) if a.size else a
    return float(np.max(finite)) if finite.size else 0.0


def _display(module: torch.nn.Module, name: str, kind: str) -> str:
    """Where it differs, as the user wrote the model: without the ``net.`` of edgeprof's Backbone wrapper."""
    from edgeprof.nn.backbones import Backbone

    if isinstance(module, Backbone) and name.startswith("net."):
        name = name[len("net."):]
    elif isinstance(module, Backbone) and name == "net" or not name:
        return f"in the forward of {kind} itself ("
    return f"at layer {name!r} ({kind}; "


def _onnx_values(model: onnx.ModelProto, names: Sequence[str], x: np.ndarray,
                 theta: Sequence[np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every float intermediate value of ``model`` under ``theta``, graph optimisations off; and its output."""
    from edgeprof.nn.ort import INPUT_NAME, OUTPUT_NAME

    probe = onnx.ModelProto.FromString(model.SerializeToString())
    by_name = {init.name: init for init in probe.graph.initializer}
    for name, value in zip(names, theta):
        del by_name[name].float_data[:]
        by_name[name].raw_data = np.asarray(value, dtype="<f4").tobytes()
    inferred = onnx.shape_inference.infer_shapes(probe)
    known = {o.name for o in probe.graph.output}
    for info in inferred.graph.value_info:
        if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and info.name not in known:
            probe.graph.output.append(info)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs()]
    values = dict(zip(wanted, session.run(wanted, {INPUT_NAME: x})))
    return values, values[OUTPUT_NAME]


def _torch_outputs(module: torch.nn.Module, x: np.ndarray) -> dict[tuple[str, int], np.ndarray]:
    """Each module call's tensor output under the module's current weights: (qualified name, call index)."""
    outputs: dict[tuple[str, int], np.ndarray] = {}
    calls: dict[str, int] = {}

    def hook(name: str):
        def record(_module, _inputs, output) -> None:
            index = calls.get(name, 0)
            calls[name] = index + 1
            if isinstance(output, torch.Tensor) and output.is_floating_point():
                outputs[name, index] = output.detach().numpy().copy()
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in module.named_modules()]
    try:
        with torch.no_grad():
            module(torch.from_numpy(x))
    finally:
        for handle in handles:
            handle.remove()
    return outputs


def _scope(node: onnx.NodeProto) -> list[str]:
    """The module scope of a node named by the TorchScript exporter: ``/net/blocks/blocks.0/conv/Conv``."""
    return node.name.split("/")[1:-1] if node.name.startswith("/") else []


def _resolve(components: Sequence[str], modules: dict) -> str | None:
    """The qualified module name of a scope path: each component is a module's name relative to one of the
    modules above it (``features.0.0`` under ``features``); a second call of a module ends in ``_1``."""
    qual = ""
    for comp in components:
        found = None
        for cand in (comp, comp.rpartition("_")[0] if comp.rpartition("_")[2].isdigit() else None):
            prefix = qual
            while cand and found is None:
                full = f"{prefix}.{cand}" if prefix else cand
                if full in modules:
                    found = full
                elif not prefix:
                    break
                prefix = prefix.rpartition(".")[0]
            if found:
                break
        if found is None:
            return None
        qual = found
    return qual


def _instances(model: onnx.ModelProto, modules: dict) -> list[tuple[tuple[str, int], onnx.NodeProto]]:
    """Every module call in the graph, (qualified name, call index) with its last node, in graph order
    (a layer before the blocks that contain it)."""
    last: dict[str, tuple[int, onnx.NodeProto]] = {}
    for position, node in enumerate(model.graph.node):
        parts = _scope(node)
        for depth in range(1, len(parts) + 1):
            last["/".join(parts[:depth])] = (position, node)
    calls: dict[str, int] = {}
    found = []
    for path, (position, node) in sorted(last.items(), key=lambda item: (item[1][0], -item[0].count("/"))):
        name = _resolve(path.split("/"), modules)
        if name is None:
            continue
        index = calls.get(name, 0)
        calls[name] = index + 1
        found.append(((name, index), node))
    return found


def _ops(model: onnx.ModelProto, last: onnx.NodeProto, modules: dict, path: tuple[str, int]) -> str:
    """The distinct op types of the layer's own nodes (those in its scope), in graph order."""
    scope = "/".join(_scope(last))
    while scope and _resolve(scope.split("/"), modules) != path[0]:
        scope = scope.rpartition("/")[0]
    scopes = ["/".join(_scope(node)) for node in model.graph.node]
    own = [n.op_type for n, inside in zip(model.graph.node, scopes) if scope and inside == scope]
    nested = [n.op_type for n, inside in zip(model.graph.node, scopes) if scope and inside.startswith(scope + "/")]
    return ", ".join(dict.fromkeys(own or nested)) or last.op_type

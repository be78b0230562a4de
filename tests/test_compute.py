"""The compute seam: a fake device kind plugged into the registry runs a round of every algorithm.

The fake kind keeps tensors in host memory (there is no second device here) but records every placement, every
copy back to the host and every synchronisation, so the tests can assert what a GPU kind would be asked to do:
the module placed before any data, each client's images copied once per run (not once per round), results read
back to the host through the seam.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from edgeprof.algorithms import ALGORITHMS
from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError
from edgeprof.nn import compute as computelib
from edgeprof.nn.head_program import SPLITS, TUNING_REPLAYS
from edgeprof.nn.compute import Compute, DeviceKind
from edgeprof.nn.cuda import CudaKind
from edgeprof.nn.execution import GPU_CANDIDATES
from edgeprof.nn.tolerances import float32_atol


class RecordingKind(DeviceKind):
    """A device kind that records what the seam asks of it; its tensors are copies in host memory."""

    name = "fake"
    keeps_data = True

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def to_device(self, t, device):
        self.log.append(("to_device", device, tuple(t.shape)))
        return t.clone()  # a copy, as a real device's would be: the host array is not shared

    def to_host(self, t):
        self.log.append(("to_host", tuple(t.shape)))
        return t

    def place_module(self, module, device):
        self.log.append(("module", device, type(module).__name__))
        return module

    def synchronize(self, device):
        self.log.append(("sync", device))

    def count(self, event: str, shape=None) -> int:
        return sum(1 for e in self.log if e[0] == event and (shape is None or e[-1] == shape))


@pytest.fixture
def fake(monkeypatch):
    kind = RecordingKind()
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", kind)
    return kind


class GpuLikeKind(RecordingKind):
    """A recording kind that plans as the CUDA kind does (its :meth:`default_plan` is CudaKind's: the whole set
    unless ``free_bytes`` says otherwise), calibrates the GPU candidates and runs "cuDNN"."""

    name = "fakegpu"
    cudnn = True
    candidates = GPU_CANDIDATES
    default_plan = CudaKind.default_plan

    def __init__(self, free_bytes: int = 80 * 2**30, model: str = "Fake H200") -> None:
        super().__init__()
        self.free_bytes, self.model = free_bytes, model

    def identity(self, device):
        return f"{self.name} {self.model}"

    def free_memory_bytes(self, device):
        return self.free_bytes


class TorchSwitches:
    """torch's process-wide float32 settings, faked: every assignment to ``torch.backends.cudnn`` and every call of
    ``torch.set_float32_matmul_precision`` is an event in ``log``."""

    def __init__(self, log: list) -> None:
        object.__setattr__(self, "log", log)

    def __setattr__(self, name, value) -> None:
        self.log.append((f"cudnn.{name}", value))


@pytest.fixture
def switches(monkeypatch):
    """The log of torch's float32 settings as the seam makes them (the real ones untouched, restored after)."""
    import torch

    log: list = []
    monkeypatch.setattr(torch.backends, "cudnn", TorchSwitches(log))
    monkeypatch.setattr(torch, "set_float32_matmul_precision", lambda precision: log.append(("matmul", precision)))
    return log


@pytest.fixture
def gpu_like(monkeypatch, switches):
    """A :class:`GpuLikeKind` registered as ``fakegpu`` (its cuDNN switches going to ``switches``)."""
    kind = GpuLikeKind()
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fakegpu", kind)
    return kind


def _federation(algo: str, device: str = "fake:1"):
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import load_clients

    cfg = RunConfig(algo=algo, dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=2,
                    participation=1.0, backbone="mlp", tau=3, threads=1, device=device).resolved()
    return Federation(cfg, load_clients(cfg))


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_runs_through_a_fake_device_kind(fake, algo):
    federation = _federation(algo)
    client = federation.clients[0]
    shape = tuple(client.x_train.shape)

    first = [federation.client_round(0) for _ in range(2)]
    federation.server_step(first)
    again = federation.client_round(0)
    result = federation.evaluate(0)

    assert federation.runtime.compute.device == "fake:1" and federation.runtime.compute.kind is fake
    assert fake.log[0][0] == "module", "the backbone is placed on the device before anything else"
    assert all(e[1] == "fake:1" for e in fake.log if e[0] in ("to_device", "module", "sync"))
    # the client's images reach the device once per run, however many rounds and evaluations use them
    assert fake.count("to_device", shape) == 1
    assert fake.count("to_device", tuple(client.y_train.shape)) >= 1
    assert fake.count("to_host") > 0, "results come back to the host through the seam"
    assert np.isfinite(again.loss) and 0.0 <= result.test_accuracy <= 1.0
    assert all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in again.payload)


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_a_round_through_the_fake_kind_equals_the_cpu_round(fake, algo):
    """The seam only moves tensors: the same seeded round gives the same reply on the fake kind as on the CPU."""
    on_cpu = _federation(algo, device="cpu").client_round(0)
    on_fake = _federation(algo).client_round(0)

    assert on_fake.loss == on_cpu.loss
    for a, b in zip(on_fake.payload, on_cpu.payload):
        np.testing.assert_array_equal(a, b)


def test_the_cpu_kind_shares_host_memory_and_keeps_nothing():
    compute = Compute()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
    images = compute.images(x)
    assert images.data_ptr() == x.__array_interface__["data"][0]
    assert compute._kept == {}


def test_a_trained_leaf_never_shares_the_callers_array():
    head = np.ones((2, 3), dtype=np.float32)
    w = Compute().tensor(head, requires_grad=True)
    w.data.sub_(1.0)
    assert head.sum() == 6.0


@pytest.mark.parametrize("device,message", [("tpu", "device must be auto, cpu, cuda or KIND:N"),
                                            ("cpu:x", "KIND:N"), ("cuda:²", "KIND:N"), ("cuda:-1", "KIND:N")])
def test_an_unknown_device_is_one_line(device, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(device=device).resolved()


def test_the_sidecar_records_the_runs_compute_and_what_ran_the_cached_forward(fake):
    from edgeprof.session.run import numerics

    federation = _federation("pflego", device="cpu")
    got = numerics(federation.runtime)
    assert got["compute"] == {"kind": "cpu", "device": "cpu", "threads": 1,
                              "execution": {"requested": "auto", "memory_format": "contiguous", "chunk": "all",
                                            "source": got["compute"]["execution"]["source"]},
                              "numerics": {"float32_matmul_precision": "highest", "tf32": False, "label": "fp32"}}
    assert got["execution"] == [federation.runtime.compute.plan.describe()]
    assert got["cached_forward"] == "onnxruntime (CPUExecutionProvider)"


def test_without_an_onnx_runtime_provider_the_cached_forward_runs_in_torch_on_the_device(fake, caplog):
    """A device ONNX Runtime has no provider for: PFLEGO's cached forward runs in torch there, said in one note."""
    fake.ort_providers = lambda device: []
    federation = _federation("pflego")
    reference = _federation("pflego", device="cpu")
    theta = federation.global_arrays
    x = federation.clients[0].x_train

    got = federation.runtime.features(x, theta)

    assert not federation.runtime.ort_here and not federation.runtime.has_runner
    assert federation.runtime.forward_engine == "torch on fake:1 (onnxruntime has no execution provider for it here)"
    assert sum("the cached forward runs in torch on fake:1" in r.getMessage() for r in caplog.records) == 1
    want = reference.runtime.features(x, theta)
    np.testing.assert_allclose(got, want, rtol=0, atol=_atol(reference.runtime.backbone, want))


def _atol(module, reference, extra_depth: int = 0, unit_ratio: float = 1.0) -> float:
    """float32_atol over the module's longest reduction and its number of layers (``unit_ratio``: a coarser
    arithmetic's unit roundoff over float32's, e.g. 2**13 for TF32)."""
    weights = [p for p in module.parameters() if p.dim() > 1]
    fan_in = max(int(np.prod(p.shape[1:])) for p in weights)
    return unit_ratio * float32_atol(reference, fan_in=fan_in, depth=len(weights) + extra_depth)


# ---------------------------------------------------------------------------------------------------- CUDA kind
# torch here is a CPU build: torch.cuda is faked at its function boundary, as NVML is at pynvml's.


@pytest.fixture
def gpus(monkeypatch):
    """``set(n)``: make torch report ``n`` CUDA GPUs."""
    import torch

    def set_count(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    set_count(0)
    return set_count


@pytest.mark.parametrize("count,want", [(0, "cpu"), (1, "cuda"), (2, "cuda")])
def test_auto_is_cuda_where_torch_sees_a_gpu_else_cpu(gpus, count, want):
    gpus(count)
    assert computelib.resolve_device("auto") == want
    assert computelib.resolve_device("cpu") == "cpu"


@pytest.mark.parametrize("count,device,message", [
    (0, "cuda", "--device cuda: torch .* sees no CUDA GPU on this machine"),
    (2, "cuda:2", r"--device cuda:2: torch sees 2 CUDA GPU\(s\) here \(cuda:0..cuda:1\)"),
])
def test_a_cuda_device_this_machine_lacks_is_refused_in_one_line(gpus, count, device, message):
    import torch

    gpus(count)
    with pytest.raises(ConfigError, match=message) as err:
        computelib.resolve(device, "contiguous:all", torch.nn.Linear(2, 2))
    assert "\n" not in str(err.value)


def test_the_rows_device_kind_is_the_computes_own_and_a_kind_named_unlike_its_registry_word_is_refused(monkeypatch):
    """``device_kind`` is read from the Compute (its kind's name, the kind's word in DEVICE_KINDS), not parsed from the
    device: a kind registered under a word other than its own name would label rows wrongly, so it is refused."""
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet

    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", RecordingKind())
    monkeypatch.setitem(computelib.DEVICE_KINDS, "other", RecordingKind())  # named "fake"
    compute = computelib.Compute("fake:3")

    assert compute.kind_name == "fake" and Profiler(MeterSet([]), device=compute).device_kind == "fake"
    with pytest.raises(ConfigError, match="registered as 'other' in DEVICE_KINDS but named 'fake'") as err:
        computelib.Compute("other:0")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("available,want", [
    (["CPUExecutionProvider"], []),
    (["CUDAExecutionProvider", "CPUExecutionProvider"],
     [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"]),
    (["CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"],
     [("TensorrtExecutionProvider", {"device_id": 1}), ("CUDAExecutionProvider", {"device_id": 1}),
      "CPUExecutionProvider"]),
])
def test_onnx_runtime_providers_for_a_gpu_follow_what_the_installed_build_offers(available, want):
    from edgeprof.nn.cuda import gpu_providers

    assert gpu_providers(available, 1) == want


def test_the_cuda_kind_asks_onnx_runtime_which_providers_it_has(monkeypatch):
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    kind = computelib.kind_of("cuda:3")
    assert kind.name == "cuda" and kind.keeps_data
    assert kind.ort_providers("cuda:3") == [("CUDAExecutionProvider", {"device_id": 3}), "CPUExecutionProvider"]
    assert kind.ort_providers("cuda") == [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]


def test_pflego_head_steps_on_a_device_take_the_cached_features_there_once_per_round(fake):
    fake.head_on_device = True
    federation = _federation("pflego")
    reference = _federation("pflego", device="cpu")
    n, m = len(federation.clients[0].y_train), federation.runtime.feature_dim

    on_device = federation.client_round(0)
    on_host = reference.client_round(0)

    assert fake.count("to_device", (n, m + 1)) == 1  # the bias-augmented features, once for tau-1 = 2 steps
    head_dev, head_host = federation.personal[0][0], reference.personal[0][0]
    np.testing.assert_allclose(head_dev, head_host, rtol=0, atol=float32_atol(head_host, fan_in=max(n, m + 1),
                                                                               depth=2 * 3 + 1))
    assert np.isfinite(on_device.loss) and on_device.loss == pytest.approx(on_host.loss, rel=1e-5)


# ---------------------------------------------------------------------------------------------------- numerics


def test_on_the_cpu_the_seam_keeps_fp32_and_leaves_cudnn_alone(switches):
    import torch

    compute = computelib.resolve("cpu", "contiguous:all", torch.nn.Linear(2, 2), threads=1)

    assert switches == [("matmul", "highest")]
    assert compute.describe()["numerics"] == {"float32_matmul_precision": "highest", "tf32": False, "label": "fp32"}


@pytest.mark.parametrize("tf32,precision", [(False, "highest"), (True, "high")])
def test_on_a_cudnn_kind_the_seam_sets_benchmark_and_tf32_only_when_asked(gpu_like, switches, tf32, precision):
    import torch

    compute = computelib.resolve("fakegpu:0", "contiguous:all", torch.nn.Linear(2, 2), threads=1, tf32=tf32)

    assert switches == [("matmul", precision), ("cudnn.benchmark", True), ("cudnn.allow_tf32", tf32)]
    assert compute.describe()["numerics"] == {
        "float32_matmul_precision": precision, "tf32": tf32, "cudnn_benchmark": True, "cudnn_allow_tf32": tf32,
        "label": computelib.TF32_LABEL if tf32 else "fp32"}


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_runs_under_the_settings_made_once_for_the_run(gpu_like, switches, algo):
    """The settings are the seam's, made once when the run's Compute is: no algorithm sets or changes them."""
    from edgeprof.session.run import numerics

    federation = _federation(algo, device="fakegpu:1")
    federation.server_step([federation.client_round(0), federation.client_round(1)])
    federation.evaluate(0)

    assert switches == [("matmul", "highest"), ("cudnn.benchmark", True), ("cudnn.allow_tf32", False)]
    assert numerics(federation.runtime)["compute"]["numerics"]["label"] == "fp32"


def test_a_tf32_run_is_labelled_in_its_sidecar(gpu_like, switches):
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import load_clients
    from edgeprof.session.run import numerics

    cfg = RunConfig(algo="pflego", dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=2,
                    participation=1.0, backbone="mlp", tau=2, threads=1, device="fakegpu:1", tf32=True).resolved()
    federation = Federation(cfg, load_clients(cfg))

    got = numerics(federation.runtime)["compute"]["numerics"]
    assert got["tf32"] and got["float32_matmul_precision"] == "high" and got["cudnn_allow_tf32"]
    assert got["label"] == computelib.TF32_LABEL and "--tf32" in got["label"]
    assert cfg.to_dict()["tf32"] is True


def test_tf32_is_refused_on_the_cpu_in_one_line(gpus, switches):
    """TF32 is a CUDA GPU's: asked of the CPU, by name or by ``auto`` on a machine without a GPU, it is refused
    before anything is set."""
    import torch

    from typer.testing import CliRunner

    from edgeprof.cli import app

    with pytest.raises(ConfigError, match="--tf32 .* --device cpu has none") as by_name:
        RunConfig(device="cpu", tf32=True)
    with pytest.raises(ConfigError, match="--tf32 .* --device cpu has none") as by_auto:
        computelib.resolve("auto", "contiguous:all", torch.nn.Linear(2, 2), tf32=True)
    result = CliRunner().invoke(app, ["measure", "--device", "cpu", "--tf32", "--no-progress"])

    assert "\n" not in str(by_name.value) and "\n" not in str(by_auto.value)
    assert switches == []
    assert result.exit_code == 2 and "--tf32" in result.output and "Traceback" not in result.output


def test_the_tf32_option_reaches_the_run_config():
    from edgeprof.cli import options

    assert options.run_config({"tf32": True, "device": "cuda"}).tf32 is True
    assert options.run_config({"device": "cuda"}).tf32 is False
    with pytest.raises(ConfigError, match="tf32 must be true or false"):
        RunConfig(tf32="yes")


def test_the_cuda_kind_names_its_gpu_and_plans_the_whole_set_in_its_free_memory(monkeypatch):
    """CudaKind's own identity and default plan, with torch.cuda faked at its function boundary."""
    import torch

    from edgeprof.nn.backbones import build_backbone

    asked: list = []
    props = types.SimpleNamespace(name="NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: asked.append(d) or props)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (140 * 2**30, 143 * 2**30))
    kind = computelib.kind_of("cuda:1")

    plan = kind.default_plan("cuda:1", build_backbone("cnn-omniglot", (1, 16, 16), seed=0))

    assert kind.identity("cuda:1") == "cuda NVIDIA H200" and asked[0] == torch.device("cuda", 1)
    assert plan.memory_format == "contiguous" and len(plan.split(torch.zeros(2400, 1, 16, 16))) == 1
    assert plan.source.startswith("whole set on cuda:1 (cuda NVIDIA H200)") and "140.0 GiB free" in plan.source


# ------------------------------------------------------------------------------- captured device programs


def _open_window() -> tuple:
    from edgeprof.measure.windows import current_window

    win = current_window()
    return (win.name, win.open_phase) if win else (None, None)


class CapturingKind(RecordingKind):
    """A recording kind that captures as the CUDA kind does, in host memory: :meth:`capture` warms the program up
    (one run) and returns a replay that runs it again; every capture and replay is logged with the profiler window
    and phase open at that moment (a capture also with the memory pool it was given: :meth:`graph_pool` hands out
    a new token at each call)."""

    name = "capfake"
    head_on_device = True

    def can_capture(self, device):
        return True

    def graph_pool(self, device):
        return object()

    def capture(self, run, device, pool=None):
        self.log.append(("capture", _open_window(), pool))
        run()

        def replay():
            self.log.append(("replay", _open_window()))
            run()
        return replay

    def at(self, event: str) -> list:
        return [e[1] for e in self.log if e[0] == event]


@pytest.fixture
def capturing(monkeypatch):
    kind = CapturingKind()
    monkeypatch.setitem(computelib.DEVICE_KINDS, "capfake", kind)
    return kind


def test_a_run_captures_the_head_steps_in_set_up_and_replays_them_in_every_window(capturing, tmp_path):
    """A whole measure run of PFLEGO on a kind that captures: every capture happens before any window opens, every
    client window's head_steps phase replays, nothing runs eagerly, and the sidecar says so."""
    import json

    from edgeprof.rounds.simulate import run

    cfg = RunConfig(algo="pflego", dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=3,
                    participation=1.0, backbone="mlp", tau=4, rounds=2, threads=1, device="capfake:0",
                    progress=False, out=tmp_path, run_name="captured")

    result = run(cfg)

    sidecar = json.loads(result.sidecar_path.read_text())
    programs = sidecar["numerics"]["compute"]["programs"]["head_steps"]
    keys = {(k["n"], k["classes"]) for k in programs["keys"]}
    # set-up, no window open: one capture per shape and split tried, and the replays that time them
    assert capturing.at("capture") == [(None, None)] * (len(keys) * len(SPLITS))
    replays = capturing.at("replay")
    assert replays[:len(keys) * len(SPLITS) * TUNING_REPLAYS] == [(None, None)] * (len(keys) * len(SPLITS)
                                                                                  * TUNING_REPLAYS)
    assert replays[len(keys) * len(SPLITS) * TUNING_REPLAYS:] == [("client", "head_steps")] * (2 * 3)
    assert {k["steps"] for k in programs["keys"]} == {3}
    assert (programs["head_steps"], programs["captures"], programs["programs_built"], programs["replays"],
            programs["eager_runs"]) == ("captured device graph, replayed", len(keys), len(keys), 6, 0)


def _one_client_federation(tau: int, samples: int = 60):
    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = RunConfig(algo="pflego", dataset="synthetic", synthetic_samples=samples, synthetic_classes=3, clients=1,
                    participation=1.0, backbone="mlp", tau=tau, threads=1, device="capfake:0").resolved()
    return cfg, build_federation(cfg, load_clients(cfg))


@pytest.mark.parametrize("change", ["tau", "samples", "lr"])
def test_the_head_program_is_built_once_per_shape_and_rebuilt_for_a_new_tau_or_n(capturing, change):
    """Rounds of the same shapes replay one captured program; a new tau or local set size (N) builds and captures
    another, in set-up; a new learning rate replays the same one (lr is a tensor of the program, not in its key)."""
    cfg, federation = _one_client_federation(tau=3)
    registry = federation.runtime.compute.programs("head_steps", None)
    for _ in range(3):
        federation.client_round(0)
    changed = {"tau": dict(tau=7), "lr": dict(beta=cfg.beta * 3), "samples": {}}[change]
    new = dataclasses.replace(cfg, **changed)
    if change == "samples":  # the same client with fewer samples: another N
        client = federation.clients[0]
        federation.clients[0] = dataclasses.replace(client, x_train=client.x_train[:-5], y_train=client.y_train[:-5])
    captured_before = len(capturing.at("capture"))

    federation.prepare(federation.settings_for(new))
    federation.client_round(0, settings=federation.settings_for(new))

    rebuilt = change != "lr"
    tried = len(SPLITS)  # a capture per split tried, for each shape prepared
    assert captured_before == tried and registry.builds == 1 + rebuilt and registry.captures == 1 + rebuilt
    assert len(capturing.at("capture")) == tried * (1 + rebuilt)
    assert registry.replays == 4 and registry.eager_runs == 0


def test_a_round_whose_shapes_were_not_prepared_runs_eagerly_and_captures_nothing(capturing):
    """A tau the driver did not prepare: the round runs the same program eagerly; no capture inside the round."""
    cfg, federation = _one_client_federation(tau=3)
    registry = federation.runtime.compute.programs("head_steps", None)
    settings = federation.settings_for(dataclasses.replace(cfg, tau=5))

    update = federation.client_round(0, settings=settings)

    assert len(capturing.at("capture")) == len(SPLITS) and registry.eager_runs == 1 and registry.replays == 0
    assert np.isfinite(update.loss) and registry.describe()["eager_runs"] == 1


class _RecordingUpload(computelib.PerTensorUpload):
    """The per-tensor upload, counting its loads (a GPU's kind gives a staged one; the seam is the same)."""

    made = 0

    def __init__(self, kind, device):
        super().__init__(kind, device)
        type(self).made += 1
        self.loads = 0

    def load(self, targets, arrays):
        self.loads += 1
        super().load(targets, arrays)


class _UploadKind(computelib.DeviceKind):
    def uploader(self, device):
        return _RecordingUpload(self, device)


def test_load_copies_through_the_kinds_uploader_made_once_per_run_and_refuses_a_wrong_shape_first():
    """Compute.load asks its kind for an uploader once and loads every round through it; the parameters equal the
    arrays; a wrong shape is refused before the uploader copies anything."""
    from edgeprof.errors import ModelError
    from edgeprof.nn.backbones import build_backbone, get_params

    compute = computelib.Compute(kind=_UploadKind())
    module = build_backbone("cnn-omniglot", seed=0)
    _RecordingUpload.made = 0
    for seed in (1, 2):
        arrays = get_params(build_backbone("cnn-omniglot", seed=seed))
        compute.load(module, arrays)
        assert all(np.array_equal(p.detach().numpy(), a) for p, a in zip(module.parameters(), arrays))
    uploader = compute._upload[0]
    assert _RecordingUpload.made == 1 and uploader.loads == 2
    with pytest.raises(ModelError):
        compute.load(module, [a[:1] if a.ndim else a for a in get_params(module)])
    assert uploader.loads == 2

"""Execution plans (memory format, chunks): every chunked, channels_last forward and backward gives the full-batch
result to float32 rounding, for the joint gradient, the baselines' steps, torch-reuse and the ONNX export."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from edgeprof.algorithms import fedavg, fedper, pflego
from edgeprof.errors import ConfigError
from edgeprof.nn import execution
from edgeprof.nn.backbones import build_backbone, get_params
from edgeprof.nn.execution import ExecutionPlan
from edgeprof.nn.ort import FeatureRunner
from edgeprof.nn.compute import Compute

from edgeprof.nn.tolerances import float32_atol, gamma

SHAPE = (1, 16, 16)
N = 37  # not a multiple of any chunk below: the last chunk is short
PLANS = [ExecutionPlan("contiguous", None), ExecutionPlan("contiguous", 8), ExecutionPlan("channels_last", None),
         ExecutionPlan("channels_last", 8), ExecutionPlan("channels_last", 64)]
#: the longest reduction of a gradient here: a conv weight's sum over images and pixels, N * 16 * 16
FAN_IN = N * SHAPE[1] * SHAPE[2]


def _data(rng, module):
    x = rng.random((N, *SHAPE), dtype=np.float32)
    y = np.arange(N) % 3
    head = rng.normal(scale=0.3, size=(3, module.feature_dim + 1)).astype(np.float32)
    return x, y, head


def _float64_reference(module, theta, head, x, y):
    """Full-batch loss and gradients in float64 (an independent computation), and the mean of the per-sample
    gradients' absolute values: the scale of the terms every float32 evaluation sums."""
    ref = copy.deepcopy(module).double().to(memory_format=torch.contiguous_format)
    with torch.no_grad():
        for p, v in zip(ref.parameters(), theta):
            p.copy_(torch.from_numpy(v.astype(np.float64)))
    w = torch.tensor(head.astype(np.float64), requires_grad=True)
    xt, yt = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(y)

    def grads_of(xb, yb):
        feats = ref(xb)
        logits = torch.cat([feats, torch.ones(len(xb), 1, dtype=torch.float64)], 1) @ w.T
        loss = torch.nn.functional.cross_entropy(logits, yb, reduction="mean")
        return loss.item(), [g.numpy() for g in torch.autograd.grad(loss, [w, *ref.parameters()])]

    loss, full = grads_of(xt, yt)
    abs_terms = [np.zeros_like(g) for g in full]
    for i in range(len(y)):
        _, one = grads_of(xt[i:i + 1], yt[i:i + 1])
        for acc, g in zip(abs_terms, one):
            acc += np.abs(g) / len(y)
    return loss, full, abs_terms


@pytest.mark.parametrize("backbone", ["mlp", "cnn-omniglot"])
@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.spec)
def test_the_joint_gradient_in_any_plan_is_the_full_batch_gradient(rng, backbone, plan):
    module = build_backbone(backbone, SHAPE, seed=2)
    theta = get_params(module)
    x, y, head = _data(rng, module)
    loss64, want, abs_terms = _float64_reference(module, theta, head, x, y)

    loss, grad_head, grad_theta = pflego.torch_joint_gradient(plan.prepare(module), theta, head, x, y, Compute(plan=plan))

    depth = 2 * 4 + 2  # forward and backward through at most 4 layers, the head, the sum over chunks
    for got, ref, scale in zip([grad_head, *grad_theta], want, abs_terms):
        assert got.dtype == np.float32 and got.flags["C_CONTIGUOUS"] and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=0, atol=float32_atol(scale, FAN_IN, depth) + 1e-12)
    assert loss == pytest.approx(loss64, abs=depth * gamma(FAN_IN) * loss64)


def test_chunks_change_the_gradient_only_by_rounding_not_by_weighting(rng):
    """A plan that dropped a chunk or forgot the 1/N of the whole set would be off by far more than rounding."""
    module = build_backbone("cnn-omniglot", SHAPE, seed=2)
    theta = get_params(module)
    x, y, head = _data(rng, module)
    _, g_all, th_all = pflego.torch_joint_gradient(module, theta, head, x, y, Compute(plan=ExecutionPlan("contiguous", None)))
    _, g_half, th_half = pflego.torch_joint_gradient(module, theta, head, x[:32], y[:32],
                                                     Compute(plan=ExecutionPlan("contiguous", None)))
    _, g_chunk, th_chunk = pflego.torch_joint_gradient(module, theta, head, x, y, Compute(plan=ExecutionPlan("contiguous", 32)))
    assert np.max(np.abs(g_chunk - g_all)) < 1e-3 * np.max(np.abs(g_all - g_half))
    for chunked, whole, first in zip(th_chunk, th_all, th_half):
        assert np.max(np.abs(chunked - whole)) < 1e-3 * np.max(np.abs(whole - first))


@pytest.mark.parametrize("plan", PLANS[1:], ids=lambda p: p.spec)
def test_torch_reuse_in_chunks_equals_the_joint_gradient(rng, plan):
    module = plan.prepare(build_backbone("cnn-omniglot", SHAPE, seed=4))
    theta = get_params(module)
    x, y, head = _data(rng, module)
    _, want, abs_terms = _float64_reference(module, theta, head, x, y)

    engine = pflego.GraphReuse(module, theta, Compute(plan=plan))
    feats = engine.features(x)
    loss, grad_head, grad_theta = engine.joint_grad(head, x, y)

    assert feats.shape == (N, module.feature_dim)
    for got, ref, scale in zip([grad_head, *grad_theta], want, abs_terms):
        np.testing.assert_allclose(got, ref, rtol=0, atol=float32_atol(scale, FAN_IN, 10) + 1e-12)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.spec)
def test_a_baseline_step_in_any_plan_is_the_full_batch_step(rng, plan):
    """FedAvg's and FedPer's local steps (every baseline's building blocks) move the weights by the full-batch
    gradient, which the float64 reference computes independently."""
    module = build_backbone("cnn-omniglot", SHAPE, seed=5)
    x, y, head = _data(rng, module)
    theta = get_params(module)
    _, want, abs_terms = _float64_reference(module, theta, head, x, y)
    lr = 0.5

    whole = plan.prepare(fedavg.BackboneWithHead(copy.deepcopy(module), 3))
    with torch.no_grad():
        whole.head.weight.copy_(torch.from_numpy(head[:, :-1]))
        whole.head.bias.copy_(torch.from_numpy(head[:, -1]))
    fedavg.local_gd(whole, x, y, steps=1, lr=lr, compute=Compute(plan=plan))
    moved = get_params(whole)  # backbone params, then the head's weight and bias
    for got, old, g, scale in zip(moved[:-2], theta, want[1:], abs_terms[1:]):
        np.testing.assert_allclose(got, old - lr * g, rtol=0, atol=lr * float32_atol(scale, FAN_IN, 10) + 4e-7)

    body = plan.prepare(copy.deepcopy(module))
    new_head, _ = fedper.local_steps(body, [head[:, :-1], head[:, -1]], x, y, steps=1, lr=lr, train_body=False,
                                     compute=Compute(plan=plan))
    np.testing.assert_allclose(np.concatenate([new_head[0], new_head[1][:, None]], 1), head - lr * want[0], rtol=0,
                               atol=lr * float32_atol(abs_terms[0], FAN_IN, 10) + 4e-7)


def test_the_onnx_export_of_a_channels_last_module_gives_torchs_features(rng):
    module = ExecutionPlan("channels_last", 64).prepare(build_backbone("cnn-omniglot", SHAPE, seed=6))
    assert module.net[0].weight.is_contiguous(memory_format=torch.channels_last)
    theta = [p + rng.normal(scale=0.01, size=p.shape).astype(np.float32) for p in get_params(module)]
    x = rng.random((N, *SHAPE), dtype=np.float32)

    got = FeatureRunner(module, threads=1).features(x, theta)

    ref = copy.deepcopy(module).double().to(memory_format=torch.contiguous_format)
    with torch.no_grad():
        for p, v in zip(ref.parameters(), theta):
            p.copy_(torch.from_numpy(v.astype(np.float64)))
        want = ref(torch.from_numpy(x.astype(np.float64))).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=float32_atol(want, fan_in=64 * 9, depth=4))


def test_get_params_of_a_channels_last_module_are_c_order_copies():
    module = ExecutionPlan("channels_last", None).prepare(build_backbone("cnn-omniglot", SHAPE, seed=0))
    params = get_params(module)
    assert all(p.flags["C_CONTIGUOUS"] for p in params)
    np.testing.assert_array_equal(params[0], module.net[0].weight.detach().contiguous().numpy())


def test_forward_in_chunks_concatenates_in_order(rng):
    module = build_backbone("cnn-omniglot", SHAPE, seed=0)
    x = rng.random((N, *SHAPE), dtype=np.float32)
    whole = Compute(plan=ExecutionPlan("contiguous", None)).forward(module, x).numpy()
    chunked_compute = Compute(plan=ExecutionPlan("channels_last", 5))
    chunked = chunked_compute.forward(chunked_compute.module(module), x).numpy()
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=float32_atol(whole, fan_in=64 * 9, depth=4))


@pytest.mark.parametrize("spec,plan", [("channels_last:64", ("channels_last", 64)),
                                       ("contiguous:all", ("contiguous", None))])
def test_a_given_plan_is_parsed(spec, plan):
    got = execution.parse(spec)
    assert (got.memory_format, got.chunk) == plan and got.spec == spec


@pytest.mark.parametrize("spec", ["nope", "channels_last", "nchw:64", "channels_last:0", "channels_last:-3",
                                  "contiguous:x", "channels_last:99999999", "channels_last:\u00b2",
                                  "channels_last:\u0664"])  # a superscript two, an Arabic-Indic four
def test_a_bad_plan_is_one_config_error(spec):
    with pytest.raises(ConfigError) as err:
        execution.check(spec)
    assert "\n" not in str(err.value)


def test_auto_is_the_table_until_a_calibration_is_stored_then_the_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEPROF_CACHE_DIR", str(tmp_path))
    conv = build_backbone("cnn-omniglot", SHAPE, seed=0)
    mlp = build_backbone("mlp", SHAPE, seed=0)
    assert execution.resolve("auto", conv, 1).spec == "channels_last:64"
    assert execution.resolve("auto", mlp, 1).spec == "contiguous:all"
    assert execution.resolve("auto", mlp, 1).source.startswith("table")

    calibrated = execution.resolve("calibrate", mlp, 1)
    assert calibrated.spec in execution.CANDIDATES[False]
    assert "calibrated on this machine" in calibrated.source
    stored = list((tmp_path / "execution").glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["spec"] == calibrated.spec

    again = execution.resolve("auto", mlp, 1)
    assert again.spec == calibrated.spec and "calibrated on this machine" in again.source
    assert execution.resolve("auto", mlp, 2).source.startswith("table")  # another thread count: not calibrated
    for damage in ("{damaged", "[" * 100_000 + "]" * 100_000):  # cut JSON; nesting deeper than the parser's stack
        stored[0].write_text(damage)
        assert execution.resolve("auto", mlp, 1).source.startswith("table")


def test_a_calibration_stored_for_one_device_is_not_taken_on_another(tmp_path, monkeypatch):
    """The device's kind and name are part of the calibration's key (issue 35, item 1): a plan calibrated on one
    device is never taken by ``auto`` on another of the same kind, which gets its own default until it is
    calibrated itself; each device then finds its own calibration."""
    from edgeprof.nn.compute import kind_of

    monkeypatch.setenv("EDGEPROF_CACHE_DIR", str(tmp_path))
    mlp = build_backbone("mlp", SHAPE, seed=0)
    kind = kind_of("cpu")
    names = {"now": "cpu Machine A"}
    monkeypatch.setattr(type(kind), "identity", lambda self, device: names["now"])

    calibrated = execution.resolve("calibrate", mlp, 1, kind=kind)
    assert "calibrated on this machine, cpu Machine A" in calibrated.source
    assert "calibrated on this machine" in execution.resolve("auto", mlp, 1, kind=kind).source

    names["now"] = "cpu Machine B"  # same kind, same module and threads: another device
    other = execution.resolve("auto", mlp, 1, kind=kind)
    assert other.source.startswith("table") and "Machine A" not in other.source
    on_b = execution.resolve("calibrate", mlp, 1, kind=kind)
    assert len(list((tmp_path / "execution").glob("*.json"))) == 2  # one entry a device
    assert "Machine B" in execution.resolve("auto", mlp, 1, kind=kind).source

    names["now"] = "cpu Machine A"
    back = execution.resolve("auto", mlp, 1, kind=kind)
    assert back.spec == calibrated.spec and "Machine A" in back.source and on_b.source != back.source


def test_the_calibration_times_every_candidate_and_picks_one_of_them():
    module = build_backbone("cnn-omniglot", SHAPE, seed=0)
    before = get_params(module)
    plan = execution.calibrate(module, threads=1, images=16, repeats=1)
    assert plan.spec in execution.CANDIDATES[True]
    for spec in execution.CANDIDATES[True]:
        assert f"{spec} " in plan.source
    for a, b in zip(before, get_params(module)):  # the calibration ran on a copy
        np.testing.assert_array_equal(a, b)
    assert module.net[0].weight.is_contiguous()

"""The numpy softmax head against torch autograd."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from edgeprof.nn import head as headlib
from edgeprof.nn.compute import DeviceKind


@pytest.mark.parametrize("n,m,k", [(1, 3, 2), (13, 8, 3), (50, 64, 5)])
def test_loss_and_grad_match_torch_autograd(rng, n, m, k):
    feats = rng.normal(size=(n, m)).astype(np.float32)
    labels = rng.integers(0, k, size=n)
    w = rng.normal(size=(k, m + 1)).astype(np.float32)

    loss, grad = headlib.loss_and_grad(w, headlib.with_bias(feats), labels)

    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    fb = torch.cat([torch.tensor(feats, dtype=torch.float64), torch.ones(n, 1, dtype=torch.float64)], 1)
    ref = torch.nn.functional.cross_entropy(fb @ wt.T, torch.tensor(labels))
    ref.backward()
    assert loss == pytest.approx(float(ref.detach()), rel=1e-5)
    np.testing.assert_allclose(grad, wt.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_gradient_steps_equal_torch_gradient_descent(rng):
    feats = rng.normal(size=(20, 6)).astype(np.float32)
    labels = rng.integers(0, 3, size=20)
    w0 = rng.normal(size=(3, 7)).astype(np.float32)

    out = headlib.gradient_steps(w0, headlib.with_bias(feats), labels, lr=0.3, steps=5)

    wt = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    fb = torch.cat([torch.tensor(feats, dtype=torch.float64), torch.ones(20, 1, dtype=torch.float64)], 1)
    opt = torch.optim.SGD([wt], lr=0.3)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(fb @ wt.T, torch.tensor(labels)).backward()
        opt.step()
    np.testing.assert_allclose(out, wt.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert not np.shares_memory(out, w0)


def test_zero_steps_returns_a_copy(rng):
    w0 = rng.normal(size=(2, 4)).astype(np.float32)
    out = headlib.gradient_steps(w0, np.ones((3, 4), np.float32), np.array([0, 1, 0]), 0.1, 0)
    np.testing.assert_array_equal(out, w0)
    out[0, 0] += 1
    assert out[0, 0] != w0[0, 0]


def test_init_head_shape_and_zero_bias(rng):
    w = headlib.init_head(4, 10, rng)
    assert w.shape == (4, 11) and w.dtype == np.float32
    assert np.all(w[:, -1] == 0) and np.all(np.abs(w[:, :-1]) <= 1 / np.sqrt(10))


@pytest.mark.parametrize("n,m,k,steps", [(7, 5, 2, 1), (120, 64, 5, 9)])
def test_the_device_head_steps_equal_float64_gradient_descent(rng, n, m, k, steps):
    """The torch head steps (run on a GPU by the cuda kind's rule; here on the CPU) against an independent
    float64 computation of the same steps, within float32 rounding of the chained products."""
    from edgeprof.nn.tolerances import float32_atol

    from edgeprof.nn.compute import Compute

    feats_b = headlib.with_bias(rng.normal(size=(n, m)).astype(np.float32))
    labels = rng.integers(0, k, size=n)
    w0 = rng.normal(scale=0.1, size=(k, m + 1)).astype(np.float32)
    lr = 0.3

    got = headlib.device_gradient_steps(Compute(), w0, feats_b, labels, lr, steps)

    ref = w0.astype(np.float64)
    f64 = feats_b.astype(np.float64)
    for _ in range(steps):
        z = f64 @ ref.T
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(n), labels] -= 1.0
        ref = ref - lr * (p.T @ f64) / n
    assert got.dtype == np.float32 and got.flags["C_CONTIGUOUS"]
    assert not np.shares_memory(got, w0) and np.array_equal(w0, w0.copy())
    np.testing.assert_allclose(got, ref, rtol=0, atol=float32_atol(ref, fan_in=max(n, m + 1), depth=2 * steps + 1))


def test_the_rule_picks_numpy_on_the_cpu_and_the_device_where_its_kind_says_so(monkeypatch):
    from edgeprof.nn import compute as computelib
    from edgeprof.nn.compute import Compute, DeviceKind

    class OnDevice(DeviceKind):
        name = "ondevice"
        head_on_device = True

    monkeypatch.setitem(computelib.DEVICE_KINDS, "ondevice", OnDevice())
    assert headlib.steps_for(Compute()) is headlib.HOST_HEAD and not headlib.HOST_HEAD.on_device
    steps = headlib.steps_for(Compute("ondevice"))
    assert isinstance(steps, headlib.DeviceHead) and steps.on_device and steps.compute.device == "ondevice"


def test_device_head_steps_on_device_features_equal_the_numpy_head(rng):
    """Features already a tensor get their bias column on the device; the steps equal the numpy head's."""
    from edgeprof.nn.tolerances import float32_atol

    from edgeprof.nn.compute import Compute

    n, m, k, steps = 40, 12, 4, 6
    feats = rng.normal(size=(n, m)).astype(np.float32)
    labels = rng.integers(0, k, size=n)
    w0 = rng.normal(scale=0.1, size=(k, m + 1)).astype(np.float32)
    on_device = headlib.DeviceHead(Compute())

    w = on_device.steps(w0, on_device.cache(torch.from_numpy(feats)), labels, 0.3, steps)

    want = headlib.gradient_steps(w0, headlib.with_bias(feats), labels, 0.3, steps)
    assert isinstance(w, torch.Tensor) and np.array_equal(w0, w0.copy())
    np.testing.assert_allclose(on_device.host(w), want, rtol=0,
                               atol=float32_atol(want, fan_in=max(n, m + 1), depth=2 * steps + 1))


def _head_problem(rng, n: int, m: int, k: int):
    feats_b = headlib.with_bias(rng.normal(size=(n, m)).astype(np.float32))
    labels = rng.integers(0, k, size=n)
    return feats_b, labels, rng.normal(scale=0.1, size=(k, m + 1)).astype(np.float32)


def _program_atol(want: np.ndarray, n: int, m: int, steps: int) -> float:
    """Each step chains three float32 roundings the numpy head rounds otherwise (the logits' dot of length M+1,
    the residual scaled by lr/N, the update's dot of length N); one more for the last subtraction."""
    from edgeprof.nn.tolerances import float32_atol

    return float32_atol(want, fan_in=max(n, m + 1), depth=3 * steps + 1)


@pytest.mark.parametrize("tau,n,k", [(2, 1, 2), (5, 37, 3), (20, 120, 5), (100, 60, 10)])
def test_the_head_program_run_eagerly_equals_the_numpy_head(rng, tau, n, k):
    """The head-steps program (a captured graph on a GPU; the CPU kind runs the same body eagerly) gives the numpy
    head's tau-1 steps to the float32 floor."""
    from edgeprof.nn.compute import Compute
    from edgeprof.nn.head_program import HeadPrograms

    m = 16
    feats_b, labels, w0 = _head_problem(rng, n, m, k)
    programs = HeadPrograms(Compute())

    got = programs.run(w0, torch.from_numpy(feats_b), torch.from_numpy(labels), 0.3, tau - 1)

    want = headlib.gradient_steps(w0, feats_b, labels, 0.3, tau - 1)
    assert (programs.eager_runs, programs.captures, programs.builds) == (1, 0, 1)
    assert not np.allclose(want, w0), "the steps moved the head"
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=_program_atol(want, n, m, tau - 1))


@pytest.mark.parametrize("n,split", [(37, 8), (64, 16), (5, 64), (600, 64), (120, 3)])
def test_a_program_that_splits_the_update_over_blocks_of_images_equals_the_numpy_head(rng, n, split):
    """The update's sum over the N images taken as ``split`` blocks side by side (zero rows pad N to a multiple of
    the split) gives the numpy head's steps to the float32 floor, whether or not N divides."""
    from edgeprof.nn.compute import Compute
    from edgeprof.nn.head_program import HeadProgram, ProgramKey, padded_rows

    m, k, steps = 16, 5, 9
    feats_b, labels, w0 = _head_problem(rng, n, m, k)
    compute = Compute()
    program = HeadProgram(compute, ProgramKey(steps, n, k, m + 1, "float32", "cpu"), torch.zeros(1), split)

    got = program.run(w0, torch.from_numpy(feats_b), torch.from_numpy(labels), 0.3).numpy()

    want = headlib.gradient_steps(w0, feats_b, labels, 0.3, steps)
    assert program.feats_b.shape[0] == padded_rows(n, split) >= n and not program.feats_b[n:].any()
    assert not np.allclose(want, w0), "the steps moved the head"
    np.testing.assert_allclose(got, want, rtol=0, atol=_program_atol(want, n, m, steps))


class _CapturingKind(DeviceKind):
    """The CPU kind, except that it "captures" (the replay runs the body eagerly): HeadPrograms.prepare then tunes
    the split as on a GPU."""

    def can_capture(self, device):
        return True

    def capture(self, run, device, pool=None):
        run()  # the warm-up a real capture does
        return run


@pytest.mark.parametrize("slow", ["one product", "every split"])
def test_prepare_captures_each_split_times_its_replays_and_keeps_the_fastest(rng, monkeypatch, slow):
    """On a kind that captures, prepare captures one program per split of SPLITS and times its replays; the one
    kept is the fastest (here the slow ones' replays are made 20 ms slower: the one product, or every split), it is
    what the rounds replay, and its head equals the numpy head's."""
    from edgeprof.nn import head_program
    from edgeprof.nn.compute import Compute

    real = head_program.scaled_steps
    slowed = {1} if slow == "one product" else set(head_program.SPLITS) - {1}

    def timed(w, feats_b, neg_target, scale, steps, split=1):
        if split in slowed:
            time.sleep(0.02)
        return real(w, feats_b, neg_target, scale, steps, split)

    monkeypatch.setattr(head_program, "scaled_steps", timed)
    n, m, k, steps = 50, 8, 3, 4
    feats_b, labels, w0 = _head_problem(rng, n, m, k)
    programs = head_program.HeadPrograms(Compute(kind=_CapturingKind()))

    prepared = programs.prepare(n, k, m + 1, steps)
    got = programs.run(w0, torch.from_numpy(feats_b), torch.from_numpy(labels), 0.3, steps).numpy()

    times = {int(name.split()[-1]): t for name, t in programs.tuning[prepared.key].items()}
    assert set(times) == set(head_program.SPLITS) and 1 in times and len(times) > 1
    assert prepared.split not in slowed and times[prepared.split] == min(times.values())
    assert min(times[s] for s in slowed) >= 0.02 > times[prepared.split]
    assert (programs.captures, programs.replays, programs.eager_runs) == (1, 1, 0)
    described = programs.describe()["keys"][0]
    assert described["split"] == prepared.split and described["variant"] == f"graph split {prepared.split}"
    assert set(described["variant_replay_s"]) == {f"graph split {s}" for s in head_program.SPLITS}
    want = headlib.gradient_steps(w0, feats_b, labels, 0.3, steps)
    np.testing.assert_allclose(got, want, rtol=0, atol=_program_atol(want, n, m, steps))


@pytest.mark.parametrize("lrs", [(0.3, 0.05), (0.1, 0.1, 0.8)])
def test_a_new_learning_rate_reuses_the_program_and_steps_with_it(rng, lrs):
    """lr is a tensor the program reads, not part of its key: one program, each run at its own lr."""
    from edgeprof.nn.compute import Compute
    from edgeprof.nn.head_program import HeadPrograms

    n, m, k, steps = 30, 8, 4, 6
    feats_b, labels, w0 = _head_problem(rng, n, m, k)
    programs = HeadPrograms(Compute())

    got = [programs.run(w0, torch.from_numpy(feats_b), torch.from_numpy(labels), lr, steps).numpy() for lr in lrs]

    assert programs.builds == 1 and programs.eager_runs == len(lrs)
    for lr, out in zip(lrs, got):
        want = headlib.gradient_steps(w0, feats_b, labels, lr, steps)
        np.testing.assert_allclose(out, want, rtol=0, atol=_program_atol(want, n, m, steps))


@pytest.mark.parametrize("value,off", [("off", True), ("0", True), (" False ", True), ("no", True), ("on", False),
                                       ("", False)])
def test_edgeprof_head_kernel_off_leaves_the_cuda_kind_no_kernel_programs(monkeypatch, value, off):
    """EDGEPROF_HEAD_KERNEL=off (0, no, false) turns the Triton head kernel off: the CUDA kind then offers no program
    counts (checked before it asks the GPU anything), so prepare tunes the graphs alone."""
    from edgeprof.nn import head_kernel
    from edgeprof.nn.cuda import CudaKind

    monkeypatch.setenv(head_kernel.SWITCH, value)
    assert head_kernel.switched_off() is off
    if off:
        monkeypatch.setattr(CudaKind, "can_capture", lambda self, device: True)
        monkeypatch.setattr(head_kernel, "available", lambda: True)
        assert CudaKind().head_kernel_programs("cuda") == ()

"""PFLEGO against independent torch autograd computations: exactness and unbiasedness (Section 3.3)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from edgeprof.algorithms import aggregation, pflego
from edgeprof.nn import head as headlib
from edgeprof.nn.backbones import build_backbone, get_params
from edgeprof.nn.ort import FeatureRunner
from edgeprof.nn.compute import Compute

SHAPE = (1, 4, 4)


def _heads(rng, clients, m):
    return [rng.normal(scale=0.5, size=(c.num_classes, m + 1)).astype(np.float32) for c in clients]


def _full_gradient(theta, heads, clients, alphas):
    """dL/dtheta and dL/dW_i of L = sum_i alpha_i l_i (equation (1)), by torch autograd in float64."""
    module = build_backbone("mlp", SHAPE, seed=0).double()
    params = list(module.parameters())
    with torch.no_grad():
        for p, value in zip(params, theta):
            p.copy_(torch.from_numpy(value.astype(np.float64)))
    ws = [torch.tensor(h, dtype=torch.float64, requires_grad=True) for h in heads]
    total = 0.0
    for alpha, w, c in zip(alphas, ws, clients):
        feats = module(torch.from_numpy(c.x_train.astype(np.float64)))
        fb = torch.cat([feats, torch.ones(len(feats), 1, dtype=torch.float64)], 1)
        total = total + alpha * torch.nn.functional.cross_entropy(fb @ w.T, torch.from_numpy(c.y_train))
    grads = torch.autograd.grad(total, params + ws)
    return [g.numpy() for g in grads[: len(params)]], [g.numpy() for g in grads[len(params):]]


def _client(module, runner, theta):
    features = lambda x: runner.features(x, theta)  # noqa: E731
    joint = lambda h, x, y: pflego.torch_joint_gradient(module, theta, h, x, y, Compute())  # noqa: E731
    return features, joint


def test_one_round_with_every_client_and_tau_1_is_a_full_gradient_step(rng, tiny_clients):
    module = build_backbone("mlp", SHAPE, seed=0)
    runner = FeatureRunner(module, threads=1)
    theta = get_params(module)
    heads = _heads(rng, tiny_clients, module.feature_dim)
    alphas = aggregation.alphas([c.n_train for c in tiny_clients])
    rho, scale = 0.05, 1.0  # every client participates: I/r = 1
    features, joint = _client(module, runner, theta)

    results = [pflego.client_round(features, joint, h, c.x_train, c.y_train, tau=1, beta=0.3, rho=rho,
                                   scale=scale) for h, c in zip(heads, tiny_clients)]
    new_theta = pflego.server_step(theta, [r.theta_grad for r in results], alphas, scale, aggregation.SGD(rho))

    g_theta, g_heads = _full_gradient(theta, heads, tiny_clients, alphas)
    for new, old, g in zip(new_theta, theta, g_theta):
        np.testing.assert_allclose(new, old - rho * g, rtol=1e-4, atol=1e-6)
    for r, old, g, alpha in zip(results, heads, g_heads, alphas):
        # equation (3): W_i moves by rho * grad l_i = rho * (dL/dW_i) / alpha_i
        np.testing.assert_allclose(r.head, old - rho * g / alpha, rtol=1e-4, atol=1e-6)


def test_head_steps_run_on_cached_features_then_joint_gradient_at_the_stepped_head(rng, tiny_clients):
    module = build_backbone("mlp", SHAPE, seed=0)
    runner = FeatureRunner(module, threads=1)
    theta = get_params(module)
    c = tiny_clients[0]
    h0 = _heads(rng, [c], module.feature_dim)[0]
    features, joint = _client(module, runner, theta)

    res = pflego.client_round(features, joint, h0, c.x_train, c.y_train, tau=6, beta=0.2, rho=0.1, scale=2.5)

    with torch.no_grad():
        fb = headlib.with_bias(module(torch.from_numpy(c.x_train)).numpy())
    stepped = headlib.gradient_steps(h0, fb, c.y_train, 0.2, 5)
    loss, g_head = headlib.loss_and_grad(stepped, fb, c.y_train)
    np.testing.assert_allclose(res.head, stepped - 0.1 * 2.5 * g_head, rtol=1e-4, atol=1e-6)
    assert res.loss == pytest.approx(loss, rel=1e-5)


def _client_grads(rng, clients):
    module = build_backbone("mlp", SHAPE, seed=0)
    theta = get_params(module)
    heads = _heads(rng, clients, module.feature_dim)
    return [pflego.torch_joint_gradient(module, theta, h, c.x_train, c.y_train, Compute())[2]
            for h, c in zip(heads, clients)]


def test_server_gradient_is_unbiased_over_every_subset_of_size_r(rng):
    from tests.conftest import make_clients

    clients = make_clients(rng, sizes=(4, 6, 3, 8), classes=(2, 2, 3, 2))
    grads = _client_grads(rng, clients)
    alphas = aggregation.alphas([c.n_train for c in clients])
    num, r = len(clients), 2

    subsets = list(itertools.combinations(range(num), r))
    estimates = [aggregation.unbiased_gradient([grads[i] for i in s], [alphas[i] for i in s], num / r)
                 for s in subsets]
    mean = [np.mean([e[k] for e in estimates], axis=0) for k in range(len(grads[0]))]

    full = aggregation.weighted_sum(grads, alphas)
    for m, f in zip(mean, full):
        np.testing.assert_allclose(m, f, rtol=1e-4, atol=1e-7)
    assert any(not np.allclose(e[0], full[0]) for e in estimates)  # single subsets are biased


def test_server_gradient_is_unbiased_under_bernoulli_participation(rng):
    from tests.conftest import make_clients

    clients = make_clients(rng, sizes=(4, 6, 3), classes=(2, 2, 3))
    grads = _client_grads(rng, clients)
    alphas = aggregation.alphas([c.n_train for c in clients])
    pi, num = 0.3, len(clients)

    expected = [np.zeros_like(g, dtype=np.float64) for g in grads[0]]
    for mask in itertools.product([0, 1], repeat=num):
        members = [i for i in range(num) if mask[i]]
        if not members:
            continue  # contributes a zero gradient
        prob = pi ** len(members) * (1 - pi) ** (num - len(members))
        est = aggregation.unbiased_gradient([grads[i] for i in members], [alphas[i] for i in members], 1 / pi)
        for acc, e in zip(expected, est):
            acc += prob * e
    for e, f in zip(expected, aggregation.weighted_sum(grads, alphas)):
        np.testing.assert_allclose(e, f, rtol=1e-4, atol=1e-7)


def test_server_sgd_step_is_equation_4_with_alpha_over_all_clients_not_the_sampled_ones(rng):
    """Equation (4), alpha_i = N_i / sum over all I clients; the reference code's N_i / sum over I_t is larger."""
    from tests.conftest import make_clients
    from edgeprof.nn.tolerances import float32_atol

    clients = make_clients(rng, sizes=(4, 6, 3, 8), classes=(2, 2, 3, 2))
    grads = _client_grads(rng, clients)
    n = [c.n_train for c in clients]
    sampled, rho = (1, 3), 0.05
    scale = len(clients) / len(sampled)  # I/r
    theta = get_params(build_backbone("mlp", SHAPE, seed=0))

    new = pflego.server_step(theta, [grads[i] for i in sampled], aggregation.alphas(n)[list(sampled)], scale,
                             aggregation.SGD(rho))

    step = [rho * scale * sum(n[i] / sum(n) * grads[i][k].astype(np.float64) for i in sampled)
            for k in range(len(theta))]
    for got, old, s in zip(new, theta, step):
        np.testing.assert_allclose(got, old - s, rtol=0, atol=float32_atol(old, fan_in=len(sampled) + 1, depth=2))
    # the reference code's step: N_i normalised over I_t, then times I/r: sum_j N_j / sum_{I_t} N_j = 21/14 larger
    ratio = sum(n) / sum(n[i] for i in sampled)
    assert ratio == pytest.approx(1.5)
    for got, old, s in zip(new, theta, step):
        assert not np.allclose(got, old - ratio * s, rtol=0, atol=1e-3 * np.abs(s).max())


# ------------------------------------------------------------------------------------- host/device traffic, issue 35
def _pflego_federation(engine: str, device: str, tau: int = 10):
    from edgeprof.config import RunConfig
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import load_clients

    cfg = RunConfig(algo="pflego", engine=engine, dataset="synthetic", synthetic_samples=60, synthetic_classes=3,
                    clients=2, participation=1.0, backbone="mlp", tau=tau, threads=1, device=device).resolved()
    return Federation(cfg, load_clients(cfg))


@pytest.fixture
def on_device(monkeypatch):
    """A recording device kind whose rule runs the head steps on the device."""
    from test_compute import RecordingKind

    from edgeprof.nn import compute as computelib

    kind = RecordingKind()
    kind.head_on_device = True
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", kind)
    return kind


#: (engine, whether ONNX Runtime has a provider for the device): the features computed in torch on the device
#: (torch-reuse; onnx without a provider) or by ONNX Runtime on the host
ENGINES = [("torch-reuse", True), ("onnx", False), ("onnx", True)]


@pytest.mark.parametrize("engine,ort", ENGINES)
def test_a_device_round_moves_theta_once_and_reads_back_in_one_transfer(on_device, engine, ort):
    """theta goes to the device once a round; the head once, and stays there from its steps through the joint
    gradient; every gradient comes back in one flat transfer, then the head and the loss; features computed on
    the device never visit the host for their bias column; nothing synchronises the device."""
    if not ort:
        on_device.ort_providers = lambda device: []
    federation = _pflego_federation(engine, "fake:0")
    theta = federation.global_arrays
    client = federation.clients[0]
    n, m, k = len(client.y_train), federation.runtime.feature_dim, client.num_classes
    federation.client_round(0)
    on_device.log.clear()

    federation.client_round(0)

    log = on_device.log
    assert on_device.count("to_device", tuple(theta[0].shape)) == 1, "theta loaded once a round"
    assert on_device.count("to_device", (k, m + 1)) == 1, "the head placed once"
    from_host = engine == "onnx" and ort  # ONNX Runtime's features are host arrays: they cross once, with bias
    assert on_device.count("to_device", (n, m + 1)) == int(from_host), "device features get their bias there"
    reads = [e[1] for e in log if e[0] == "to_host"]
    flat = sum(a.size for a in theta) + k * (m + 1)
    assert sorted(reads) == sorted([(flat,), (k, m + 1), ()]), "gradients in one transfer, the head, the loss"
    assert on_device.count("sync") == 0


@pytest.mark.parametrize("engine,ort", ENGINES)
def test_a_device_round_equals_the_host_round(on_device, engine, ort):
    """Head steps on the device and the flat read-back change nothing but float32 rounding: the reply, the new
    head and the loss equal the CPU round's (numpy head)."""
    from edgeprof.nn.tolerances import float32_atol

    if not ort:
        on_device.ort_providers = lambda device: []
    tau = 10
    got, want = _pflego_federation(engine, "fake:0", tau), _pflego_federation(engine, "cpu", tau)

    mine, theirs = got.client_round(0), want.client_round(0)

    n, m = len(got.clients[0].y_train), got.runtime.feature_dim
    fan_in, depth = max(n, m + 1, 16), 2 * tau + 4  # forward, tau-1 head steps (two products each), backward
    for a, b in zip([*mine.payload, got.personal[0][0]], [*theirs.payload, want.personal[0][0]]):
        np.testing.assert_allclose(a, b, rtol=0, atol=float32_atol(b, fan_in=fan_in, depth=depth))
    assert mine.loss == pytest.approx(theirs.loss, abs=float32_atol(np.array([theirs.loss]), fan_in, depth))

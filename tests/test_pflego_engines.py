"""PFLEGO's two client engines compute the same round: ``onnx`` (paper) and ``torch-reuse`` (one forward)."""

from __future__ import annotations

import numpy as np
import pytest

from edgeprof.algorithms import aggregation, pflego
from edgeprof.config import RunConfig
from edgeprof.nn.backbones import build_backbone, get_params
from edgeprof.nn.ort import FeatureRunner
from edgeprof.rounds.simulate import build_federation
from edgeprof.nn.compute import Compute

from conftest import make_clients
from edgeprof.nn.tolerances import adam_first_step_bound, float32_atol, gamma

SHAPE = (1, 16, 16)

@pytest.mark.parametrize("backbone,tau", [("mlp", 1), ("mlp", 7), ("cnn-omniglot", 4)])
def test_graph_reuse_gives_the_same_head_and_theta_gradient(rng, backbone, tau):
    module = build_backbone(backbone, SHAPE, seed=3)
    theta = get_params(module)
    x = rng.random((23, *SHAPE), dtype=np.float32)
    y = np.arange(23) % 3
    head = rng.normal(scale=0.3, size=(3, module.feature_dim + 1)).astype(np.float32)
    runner = FeatureRunner(module, threads=1)
    kwargs = dict(tau=tau, beta=0.2, rho=0.05, scale=2.5)

    paper = pflego.client_round(lambda a: runner.features(a, theta),
                                lambda h, a, b: pflego.torch_joint_gradient(module, theta, h, a, b, Compute()),
                                head, x, y, **kwargs)
    engine = pflego.GraphReuse(module, theta, Compute())
    reuse = pflego.client_round(engine.features, engine.joint_grad, head, x, y, **kwargs)

    np.testing.assert_allclose(reuse.head, paper.head, atol=1e-5)
    for g_reuse, g_paper in zip(reuse.theta_grad, paper.theta_grad):
        np.testing.assert_allclose(g_reuse, g_paper, atol=1e-5)
    assert reuse.loss == pytest.approx(paper.loss, abs=1e-5)


def test_joint_grad_without_the_forward_of_the_same_x_is_refused(rng):
    module = build_backbone("mlp", SHAPE, seed=0)
    engine = pflego.GraphReuse(module, get_params(module), Compute())
    x = rng.random((4, *SHAPE), dtype=np.float32)
    head = np.zeros((2, module.feature_dim + 1), dtype=np.float32)

    with pytest.raises(RuntimeError, match="preceding features"):
        engine.joint_grad(head, x, np.array([0, 1, 0, 1]))
    engine.features(x)
    with pytest.raises(RuntimeError):
        engine.joint_grad(head, x.copy(), np.array([0, 1, 0, 1]))


def test_both_engines_run_the_same_federation(rng):
    """Heads and the server's gradient agree to float32 rounding; theta after Adam agrees through the
    Adam map of those gradients (a gradient element near Adam's eps is amplified, on any CPU)."""
    clients = make_clients(rng, shape=(1, 28, 28))
    runs = {}
    for engine in ("onnx", "torch-reuse"):
        cfg = RunConfig(algo="pflego", engine=engine, tau=3, backbone="mlp", dataset="synthetic", clients=3,
                        participation=1.0).resolved()
        algorithm = build_federation(cfg, clients)
        theta_before = algorithm.global_arrays
        updates = [algorithm.client_round(c.client_id) for c in clients]
        grad = aggregation.unbiased_gradient([u.payload for u in updates],
                                             [algorithm.alphas[u.client_id] for u in updates], algorithm.scale)
        algorithm.server_step(updates)
        runs[engine] = (grad, [p[0] for p in algorithm.personal], algorithm.global_arrays, algorithm.evaluate(0),
                        theta_before)
        assert algorithm.runtime.has_runner == (engine == "onnx")

    (grad_a, heads_a, theta_a, eval_a, before), (grad_b, heads_b, theta_b, eval_b, _) = runs.values()
    fan_in = 28 * 28  # the mlp's widest reduction
    # forward, tau-1 head steps, backward: a handful of chained reductions
    depth = 2 + cfg.tau
    for a, b in zip(heads_a, heads_b):
        np.testing.assert_allclose(a, b, rtol=0, atol=float32_atol(a, fan_in, depth))
    tol = float32_atol(grad_a, fan_in, depth)
    for a, b in zip(grad_a, grad_b):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol)
    for a, b, g_a, g_b, old in zip(theta_a, theta_b, grad_a, grad_b, before):
        bound = adam_first_step_bound(g_a, g_b, cfg.rho) + np.spacing(np.abs(old).astype(np.float32)) * 2
        assert np.all(np.abs(a.astype(np.float64) - b) <= bound)
        assert not np.allclose(a, old)  # the step moved theta
    assert eval_a.train_loss == pytest.approx(eval_b.train_loss, abs=depth * gamma(fan_in) * eval_a.train_loss)

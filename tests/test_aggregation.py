"""Server math against direct computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeprof.algorithms import aggregation


def test_weighted_average_by_sample_counts():
    a = [np.array([1.0, 2.0], np.float32), np.array([[0.0]], np.float32)]
    b = [np.array([3.0, 6.0], np.float32), np.array([[4.0]], np.float32)]
    out = aggregation.weighted_average([a, b], [1, 3])
    np.testing.assert_allclose(out[0], [2.5, 5.0])
    np.testing.assert_allclose(out[1], [[3.0]])


def test_mismatched_shapes_are_rejected():
    with pytest.raises(ValueError):
        aggregation.weighted_sum([[np.zeros(2)], [np.zeros(3)]], [0.5, 0.5])


def test_alphas_sum_to_one():
    np.testing.assert_allclose(aggregation.alphas([1, 3, 4]), [0.125, 0.375, 0.5])


def test_adam_matches_torch_adam(rng):
    p0 = rng.normal(size=(3, 4)).astype(np.float32)
    grads = [rng.normal(size=(3, 4)).astype(np.float32) for _ in range(5)]
    ours = aggregation.Adam(0.01)
    params = [p0]
    for g in grads:
        params = ours.step(params, [g])

    pt = torch.tensor(p0, requires_grad=True)
    opt = torch.optim.Adam([pt], lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    for g in grads:
        opt.zero_grad()
        pt.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(params[0], pt.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_sgd_step():
    out = aggregation.SGD(0.5).step([np.ones(2, np.float32)], [np.array([2.0, -2.0], np.float32)])
    np.testing.assert_allclose(out[0], [0.0, 2.0])

"""FedAvg's client round and server step against an independent torch computation."""

from __future__ import annotations

import copy

import numpy as np
import torch

from edgeprof.algorithms import fedavg
from edgeprof.nn.backbones import build_backbone, get_params
from edgeprof.nn.compute import Compute


def test_local_steps_equal_torch_sgd_on_the_whole_model(tiny_clients):
    c = tiny_clients[0]
    model = fedavg.BackboneWithHead(build_backbone("mlp", (1, 4, 4), seed=3), 3, seed=3)
    reference = copy.deepcopy(model).double()
    weights = get_params(model)

    new, loss = fedavg.client_round(model, weights, c.x_train, c.y_train, tau=4, beta=0.1, compute=Compute())

    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = torch.from_numpy(c.x_train.astype(np.float64)), torch.from_numpy(c.y_train)
    first = None
    for _ in range(4):
        opt.zero_grad()
        value = torch.nn.functional.cross_entropy(reference(x), y)
        first = float(value.detach()) if first is None else first
        value.backward()
        opt.step()
    for ours, ref in zip(new, reference.parameters()):
        np.testing.assert_allclose(ours, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert abs(loss - first) < 1e-5
    assert not np.allclose(new[0], weights[0])


def test_server_averages_weights_by_sample_count():
    a = [np.full((2,), 1.0, np.float32)]
    b = [np.full((2,), 4.0, np.float32)]
    np.testing.assert_allclose(fedavg.server_step([a, b], [30, 10])[0], [1.75, 1.75])

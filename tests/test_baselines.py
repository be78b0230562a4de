"""The baselines' client rounds against independent torch computations, and every algorithm learning."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgeprof.algorithms import ALGORITHMS, ditto, fedbabu, fedper, fedprox, fedrecon, fedrep, partial
from edgeprof.config import RunConfig
from edgeprof.nn.backbones import build_backbone, get_params, set_params
from edgeprof.nn.compute import Compute

SHAPE = (1, 4, 4)


def _backbone(seed: int = 3) -> torch.nn.Module:
    return build_backbone("mlp", SHAPE, seed=seed)


def _federation(cfg, clients):
    """The in-process driver over ``clients`` with this file's small seeded backbone."""
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.runtime import build_runtime

    return Federation(cfg, clients, runtime=build_runtime(cfg.resolved(), max(c.num_classes for c in clients),
                                                          backbone=_backbone()))


def _data(client):
    return torch.from_numpy(client.x_train.astype(np.float64)), torch.from_numpy(client.y_train)


def _ce_of(body_params, head, x, y, backbone64):
    """Mean cross-entropy of head(backbone(x)) with the given float64 leaf tensors (reference)."""
    feats = torch.func.functional_call(backbone64, dict(zip([n for n, _ in backbone64.named_parameters()],
                                                            body_params)), (x,))
    return torch.nn.functional.cross_entropy(feats @ head[0].T + head[1], y)


def _leaves(arrays):
    return [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]


def _close(ours, ref, tol=1e-4):
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=tol, atol=tol * 0.1)


def test_fedprox_steps_include_the_proximal_term(tiny_clients, rng):
    c, model = tiny_clients[0], fedprox.fedavg.BackboneWithHead(_backbone(), 3, seed=3)
    reference = copy.deepcopy(model).double()
    anchor = [a + rng.normal(0, 0.1, a.shape).astype(np.float32) for a in get_params(model)]
    mu, lr = 0.7, 0.2

    loss = fedprox.prox_gd(model, c.x_train, c.y_train, steps=2, lr=lr, mu=mu, anchor=anchor, compute=Compute())

    x, y = _data(c)
    opt = torch.optim.SGD(reference.parameters(), lr=lr)
    anchors = [torch.from_numpy(a.astype(np.float64)) for a in anchor]
    for _ in range(2):
        opt.zero_grad()
        value = torch.nn.functional.cross_entropy(reference(x), y)
        value = value + mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(reference.parameters(), anchors))
        value.backward()
        opt.step()
    _close(get_params(model), list(reference.parameters()))
    assert np.isfinite(float(loss))


def test_fedprox_round_starts_and_anchors_at_the_global_weights(tiny_clients):
    c, model = tiny_clients[1], fedprox.fedavg.BackboneWithHead(_backbone(), 3, seed=3)
    weights = get_params(model)
    new, _ = fedprox.client_round(model, weights, c.x_train, c.y_train, tau=3, beta=0.1, mu=0.0, compute=Compute())
    plain, _ = fedprox.fedavg.client_round(model, weights, c.x_train, c.y_train, tau=3, beta=0.1, compute=Compute())
    _close(new, [torch.from_numpy(a) for a in plain], tol=1e-6)  # mu = 0 is FedAvg
    strong, _ = fedprox.client_round(model, weights, c.x_train, c.y_train, tau=3, beta=0.1, mu=5.0, compute=Compute())
    assert np.linalg.norm(strong[0] - weights[0]) < np.linalg.norm(new[0] - weights[0])


def _torch_head_step(backbone64, body, head, x, y, lr, *, train_body, train_head):
    """One reference GD step on the chosen blocks; returns (body, head) as float64 leaves."""
    loss = _ce_of(body, head, x, y, backbone64)
    params = (body if train_body else []) + (head if train_head else [])
    grads = torch.autograd.grad(loss, params)
    new = {id(p): (p - lr * g).detach().requires_grad_(True) for p, g in zip(params, grads)}
    return [new.get(id(p), p) for p in body], [new.get(id(p), p) for p in head]


def test_fedalt_body_step_sees_the_new_head_and_fedsim_does_not(tiny_clients):
    c, lr = tiny_clients[0], 0.3
    backbone = _backbone()
    body0 = get_params(backbone)
    head0 = fedper.initial_head(0, 0, c.num_classes, backbone.feature_dim)

    sim_body, sim_head, _ = partial.local_sim(backbone, body0, head0, c.x_train, c.y_train, tau=1, beta=lr,
                                              compute=Compute())
    alt_body, alt_head, _ = partial.local_alt(backbone, body0, head0, c.x_train, c.y_train, tau_v=1, tau_u=1,
                                              beta=lr, compute=Compute())

    ref64, x, y = copy.deepcopy(backbone).double(), *_data(c)
    sb, sh = _torch_head_step(ref64, _leaves(body0), _leaves(head0), x, y, lr, train_body=True, train_head=True)
    _, ah = _torch_head_step(ref64, _leaves(body0), _leaves(head0), x, y, lr, train_body=False, train_head=True)
    ab, _ = _torch_head_step(ref64, _leaves(body0), ah, x, y, lr, train_body=True, train_head=False)
    _close(sim_body, sb), _close(sim_head, sh), _close(alt_body, ab), _close(alt_head, ah)
    _close(alt_head, sh)  # both heads take the same first step from (u0, v0)
    assert not np.allclose(alt_body[0], sim_body[0], atol=1e-7)


def test_fedrep_head_epochs_then_body_epochs_match_torch(tiny_clients):
    c, lr = tiny_clients[2], 0.2
    backbone = _backbone()
    body0 = get_params(backbone)
    head0 = fedper.initial_head(0, 2, c.num_classes, backbone.feature_dim)

    body, head, _ = fedrep.client_round(backbone, body0, head0, c.x_train, c.y_train, head_steps=3,
                                        n_body_steps=2, beta=lr, compute=Compute())

    ref64, x, y = copy.deepcopy(backbone).double(), *_data(c)
    b, h = _leaves(body0), _leaves(head0)
    for _ in range(3):
        b, h = _torch_head_step(ref64, b, h, x, y, lr, train_body=False, train_head=True)
    for _ in range(2):
        b, h = _torch_head_step(ref64, b, h, x, y, lr, train_body=True, train_head=False)
    _close(body, b), _close(head, h)
    assert fedrep.body_steps(50) == 5 and fedrep.body_steps(3) == 1


def test_fedbabu_never_changes_the_head_and_steps_the_body_with_momentum(tiny_clients):
    """By default with the reference code's momentum 0.9 (0.999, the paper appendix's, overshoots: fedbabu.py)."""
    c, lr = tiny_clients[0], 0.05
    backbone = _backbone()
    body0 = get_params(backbone)
    head = fedbabu.orthogonal_head(3, backbone.feature_dim, seed=0)
    frozen = [a.copy() for a in head]

    body, _ = fedbabu.client_round(backbone, body0, head, c.x_train, c.y_train, tau=3, beta=lr, compute=Compute())

    ref = copy.deepcopy(backbone).double()
    set_params(ref, body0)
    opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=0.9)
    x, y = _data(c)
    w, b = (torch.from_numpy(a.astype(np.float64)) for a in head)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x) @ w.T + b, y).backward()
        opt.step()
    _close(body, list(ref.parameters()))
    for a, f in zip(head, frozen):
        np.testing.assert_array_equal(a, f)
    np.testing.assert_allclose(head[0] @ head[0].T, np.eye(3), atol=1e-5)


def test_fedbabu_head_stays_fixed_over_federated_rounds(tiny_clients):
    cfg = RunConfig(algo="fedbabu", tau=2, clients=3, participation=1.0, backbone="mlp").resolved()
    algo = _federation(cfg, tiny_clients)
    head = [a.copy() for a in fedbabu.fixed_head(algo.runtime)]
    body = [a.copy() for a in algo.global_arrays]

    for _ in range(2):
        algo.server_step([algo.client_round(i) for i in range(3)])
    algo.evaluate(0)  # fine-tunes a copy for evaluation only

    for a, f in zip(fedbabu.fixed_head(algo.runtime), head):
        np.testing.assert_array_equal(a, f)
    assert not np.allclose(algo.global_arrays[0], body[0])
    assert algo.personal == [None, None, None]  # nothing personal: the head is rebuilt from the seed


def test_ditto_personal_steps_include_lambda_times_v_minus_global(tiny_clients, rng):
    c, lr, lam = tiny_clients[1], 0.2, 0.8
    model = fedprox.fedavg.BackboneWithHead(_backbone(), 3, seed=3)
    global_w = get_params(model)
    personal = [a + rng.normal(0, 0.2, a.shape).astype(np.float32) for a in global_w]

    local_global, new_personal, _ = ditto.client_round(model, global_w, personal, c.x_train, c.y_train, tau=1,
                                                       beta=lr, lam=lam, compute=Compute())

    ref, x, y = copy.deepcopy(model).double(), *_data(c)
    set_params(ref, personal)
    loss = torch.nn.functional.cross_entropy(ref(x), y)
    anchors = [torch.from_numpy(a.astype(np.float64)) for a in global_w]
    loss = loss + lam / 2 * sum(((p - a) ** 2).sum() for p, a in zip(ref.parameters(), anchors))
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    _close(new_personal, [p - lr * g for p, g in zip(ref.parameters(), grads)])
    plain, _ = fedprox.fedavg.client_round(model, global_w, c.x_train, c.y_train, tau=1, beta=lr, compute=Compute())
    _close(local_global, [torch.from_numpy(a) for a in plain], tol=1e-6)


def test_fedrecon_reconstructs_on_one_cached_forward(tiny_clients):
    c, lr, tau = tiny_clients[0], 0.5, 6
    backbone = _backbone()
    theta = get_params(backbone)
    head0 = fedrecon.initial_head(0, 0, c.num_classes, backbone.feature_dim)
    calls = []

    def features(x):
        calls.append(len(x))
        with torch.no_grad():
            return backbone(torch.from_numpy(x)).numpy()

    def body_grad(head, x, y):
        loss, _, grad = fedrecon.torch_joint_gradient(backbone, theta, head, x, y, Compute())
        return loss, grad

    new_theta, head, _ = fedrecon.client_round(features, body_grad, theta, head0, c.x_train, c.y_train, tau=tau,
                                               beta=lr)

    with torch.no_grad():
        phi = np.concatenate([backbone(torch.from_numpy(c.x_train)).double().numpy(),
                              np.ones((c.n_train, 1))], axis=1)
    w = head0.astype(np.float64)
    for _ in range(tau - 1):  # independent softmax-regression steps in float64
        z = phi @ w.T
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(c.n_train), c.y_train] -= 1.0
        w -= lr * p.T @ phi / c.n_train
    np.testing.assert_allclose(head, w, rtol=1e-4, atol=1e-5)
    assert calls == [c.n_train]  # one forward pass for all tau - 1 head steps
    ref64 = copy.deepcopy(backbone).double()
    t = _leaves(theta)
    feats = torch.func.functional_call(ref64, dict(zip([n for n, _ in ref64.named_parameters()], t)),
                                       (torch.from_numpy(c.x_train.astype(np.float64)),))
    wt = torch.from_numpy(w)
    loss = torch.nn.functional.cross_entropy(feats @ wt[:, :-1].T + wt[:, -1], torch.from_numpy(c.y_train))
    grads = torch.autograd.grad(loss, t)
    _close(new_theta, [p - lr * g for p, g in zip(t, grads)])


PERSONAL_HEAD = ["fedper", "fedrep", "fedsim", "fedalt"]


@pytest.mark.parametrize("name", PERSONAL_HEAD)
def test_server_averages_only_the_body_and_heads_stay_personal(name, tiny_clients):
    cfg = RunConfig(algo=name, tau=2, clients=3, participation=1.0, backbone="mlp").resolved()
    algo = _federation(cfg, tiny_clients)
    n_body = len(list(algo.runtime.backbone.parameters()))
    m = algo.runtime.feature_dim

    updates = [algo.client_round(i) for i in (0, 2)]
    heads_after = [[a.copy() for a in algo.personal[i]] for i in range(3)]
    algo.server_step(updates)

    assert all(len(u.payload) == n_body for u in updates)
    n0, n2 = tiny_clients[0].n_train, tiny_clients[2].n_train
    expected = (n0 * updates[0].payload[0] + n2 * updates[1].payload[0]) / (n0 + n2)
    np.testing.assert_allclose(algo.global_arrays[0], expected, rtol=1e-5, atol=1e-7)
    for i in range(3):  # the server step leaves every head alone; each keeps its own K_i rows
        for a, b in zip(algo.personal[i], heads_after[i]):
            np.testing.assert_array_equal(a, b)
        assert algo.personal[i][0].shape == (tiny_clients[i].num_classes, m)
    untouched = fedper.initial_head(cfg.seed, 1, tiny_clients[1].num_classes, m)
    np.testing.assert_array_equal(algo.personal[1][0], untouched[0])
    assert not np.array_equal(algo.personal[0][0], fedper.initial_head(cfg.seed, 0, 2, m)[0])


def test_fedsim_is_fedper_with_the_output_layer_personal(tiny_clients):
    c, backbone = tiny_clients[0], _backbone()
    body, head = get_params(backbone), fedper.initial_head(0, 0, c.num_classes, backbone.feature_dim)
    a = partial.local_sim(backbone, body, head, c.x_train, c.y_train, tau=3, beta=0.1, compute=Compute())
    b = fedper.client_round(backbone, body, head, c.x_train, c.y_train, tau=3, beta=0.1, compute=Compute())
    for x, y in zip(a[0] + a[1], b[0] + b[1]):
        np.testing.assert_array_equal(x, y)


#: Adam at the tables' rho=0.003 oscillates on this 4-client toy problem; rho=0.001 is in the paper's grid
SMALL_PROBLEM_RHO = 0.001


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_training_lowers_the_loss(name, tmp_path):
    from edgeprof.report.writer import read_report
    from edgeprof.rounds.simulate import run

    cfg = RunConfig(algo=name, tau=5, rounds=4, clients=4, participation=1.0, dataset="synthetic",
                    synthetic_samples=240, synthetic_classes=4, backbone="mlp", out=tmp_path, evaluate=True,
                    progress=False, threads=1, run_name=name, rho=SMALL_PROBLEM_RHO)

    report = read_report(run(cfg).csv_path)

    losses = report.values("train_loss", sorted(report.where(kind="eval"), key=lambda r: int(r["round"])))
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert set(ALGORITHMS[name].phases) <= {c[:-2] for c in report.columns if c.endswith("_s")}
    assert all(r[f"{ALGORITHMS[name].phases[-1]}_s"] for r in report.where(kind="client"))


def test_fedbabus_orthogonal_head_is_seeded_orthonormal_and_leaves_the_global_rng_alone():
    from edgeprof.nn.tolerances import gamma

    head = fedbabu.orthogonal_head(10, 64, seed=7)[0]
    torch.manual_seed(1)
    drawn = torch.rand(3)
    torch.manual_seed(1)
    fedbabu.orthogonal_head(10, 64, seed=7)

    assert np.array_equal(head, fedbabu.orthogonal_head(10, 64, seed=7)[0])
    assert not np.array_equal(head, fedbabu.orthogonal_head(10, 64, seed=8)[0])
    # rows of a float32 QR factor: each dot product of 64 terms within a few gamma_64 of the identity's
    np.testing.assert_allclose(head.astype(np.float64) @ head.T.astype(np.float64), np.eye(10), rtol=0,
                               atol=4 * gamma(64))
    assert torch.equal(torch.rand(3), drawn)  # the global generator did not move


# ------------------------------------------------------------------------------------- host/device traffic, issue 35
#: every algorithm with a loop of local steps
LOOPS = ("fedavg", "fedprox", "ditto", "fedper", "fedrep", "fedsim", "fedalt", "fedbabu")


def _traffic(fake, algo: str, tau: int) -> list[tuple]:
    """The seam's events during one client round (after a first one has placed the data)."""
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import load_clients

    cfg = RunConfig(algo=algo, dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=2,
                    participation=1.0, backbone="mlp", tau=tau, threads=1, device="fake:0").resolved()
    federation = Federation(cfg, load_clients(cfg))
    federation.client_round(0)
    fake.log.clear()
    federation.client_round(0)
    return list(fake.log)


@pytest.mark.parametrize("algo", LOOPS)
def test_a_local_steps_round_reads_back_once_whatever_tau(fake_kind, algo):
    """No read inside the loop: the loss is read once a round (not once a step), every array the round replies
    or keeps in one transfer, and nothing synchronises the device (only the profiler does, at its edges)."""
    short, long = _traffic(fake_kind, algo, tau=1), _traffic(fake_kind, algo, tau=10)

    reads = [e for e in long if e[0] == "to_host"]
    assert len(reads) == 2 == len([e for e in short if e[0] == "to_host"])
    assert [e for e in long if e[0] == "sync"] == []
    assert sum(1 for e in reads if e[1] == ()) == 1, "one loss, a scalar"
    assert sorted(e for e in long if e[0] == "to_device") == sorted(e for e in short if e[0] == "to_device")


@pytest.fixture
def fake_kind(monkeypatch):
    from test_compute import RecordingKind

    from edgeprof.nn import compute as computelib

    kind = RecordingKind()
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", kind)
    return kind


def _plain_loop(model, x, y, steps, lr, *, mu=0.0, momentum=0.0):
    """An independent reference: torch's own SGD (per-tensor, foreach off) on a float32 copy of the model, the
    proximal term by autograd; returns (parameters, first loss)."""
    anchors = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, foreach=False)
    first = None
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        first = float(loss.detach()) if first is None else first
        prox = sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchors))
        (loss + mu / 2 * prox).backward()
        opt.step()
    return [p.detach().numpy() for p in model.parameters()], first


def _fedbabu_round(model, c, tau, lr):
    head = [model.head.weight.detach().numpy().copy(), model.head.bias.detach().numpy().copy()]
    body, loss = fedbabu.client_round(model.backbone, get_params(model.backbone), head, c.x_train, c.y_train,
                                      tau=tau, beta=lr, compute=Compute())
    return body + head, loss


ROUNDS = {
    "fedavg": (lambda m, c, tau, lr: fedprox.fedavg.client_round(m, get_params(m), c.x_train, c.y_train, tau=tau,
                                                                 beta=lr, compute=Compute()), {}),
    "fedprox": (lambda m, c, tau, lr: fedprox.client_round(m, get_params(m), c.x_train, c.y_train, tau=tau, beta=lr,
                                                           mu=0.7, compute=Compute()), {"mu": 0.7}),
    "fedbabu": (_fedbabu_round, {"momentum": fedbabu.MOMENTUM}),
}


@pytest.mark.parametrize("algo", sorted(ROUNDS))
def test_a_round_with_foreach_updates_equals_a_plain_sgd_loop(tiny_clients, algo):
    """The foreach updates and the single loss read give what torch's per-tensor SGD gives, within float32
    rounding of tau chained steps (forward, backward and update: a few reductions each)."""
    from edgeprof.nn.tolerances import float32_atol

    c, tau, lr = tiny_clients[0], 10, 0.2
    model = fedprox.fedavg.BackboneWithHead(_backbone(), 3, seed=3)
    reference, before = copy.deepcopy(model), get_params(model)
    if algo == "fedbabu":
        reference.head.requires_grad_(False)
    run, options = ROUNDS[algo]

    new, loss = run(model, c, tau, lr)

    want, first = _plain_loop(reference, *(torch.from_numpy(a) for a in (c.x_train, c.y_train)), tau, lr, **options)
    fan_in = max(len(c.y_train), int(np.prod(SHAPE)), model.backbone.feature_dim)
    atol = float32_atol(want, fan_in=fan_in, depth=4 * tau)
    for got, ref in zip(new, want):
        np.testing.assert_allclose(got, ref, rtol=0, atol=atol)
    assert loss == pytest.approx(first, abs=float32_atol(np.array([first]), fan_in=fan_in, depth=2))
    assert not np.allclose(new[0], before[0])

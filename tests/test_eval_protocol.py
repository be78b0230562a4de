"""The two evaluation protocols: ``paper`` checked against an independent computation on a tiny federation
(which clients are scored, when, and how the sum is formed), ``global`` against its definition."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeprof.algorithms import aggregation, fedavg, pflego
from edgeprof.algorithms.contract import EvalResult
from edgeprof.config import RunConfig
from edgeprof.rounds.evaluation import global_score, paper_score
from edgeprof.algorithms.participants import participant_rng, sample_participants
from edgeprof.report import read_report
from edgeprof.rounds.simulate import load_clients, run
from edgeprof.nn.compute import Compute


def _cfg(tmp_path, algo: str, protocol: str, **kw) -> RunConfig:
    return RunConfig(**kw, algo=algo, tau=3, rounds=3, clients=5, participation=0.4, dataset="synthetic",
                     synthetic_samples=300, synthetic_classes=4, backbone="mlp", seed=2, threads=1, out=tmp_path,
                     evaluate=True, eval_protocol=protocol, run_name=f"{algo}-{protocol}", progress=False,
                     server_optimizer="sgd").resolved()


def _eval_rows(cfg) -> list[dict]:
    report = read_report(run(cfg).csv_path)
    rows = sorted(report.where(kind="eval"), key=lambda r: int(r["round"]))
    assert {r["eval_protocol"] for r in rows} == {cfg.eval_protocol}
    return rows


def _correct(logits: torch.Tensor, y: np.ndarray) -> int:
    return int((logits.argmax(1).numpy() == y).sum())


def test_paper_protocol_scores_fedavgs_sampled_local_models_before_the_server_step(tmp_path):
    cfg = _cfg(tmp_path, "fedavg", "paper")
    rows = _eval_rows(cfg)
    # independent: the local models of the sampled clients, scored with torch, summed over them
    from edgeprof.nn.backbones import build_backbone, default_input_shape, set_params

    clients = load_clients(cfg)
    model = fedavg.BackboneWithHead(build_backbone("mlp", default_input_shape("mlp"), seed=cfg.seed),
                                    max(c.num_classes for c in clients), seed=cfg.seed)
    weights = [p.detach().numpy().copy() for p in model.parameters()]
    rng = participant_rng(cfg)
    for row in rows:
        sampled = sample_participants(rng, cfg.clients, cfg.participation, cfg.participation_mode)
        correct = total = 0
        local = []
        for cid in sampled:
            c = clients[cid]
            new, _ = fedavg.client_round(model, weights, c.x_train, c.y_train, tau=cfg.tau, beta=cfg.beta,
                                              compute=Compute())
            set_params(model, new)
            with torch.no_grad():
                correct += _correct(model(torch.from_numpy(c.x_test)), c.y_test)
            total += len(c.y_test)
            local.append((new, c.n_train))
        weights = aggregation.weighted_average([w for w, _ in local], [n for _, n in local])
        assert float(row["test_accuracy"]) == pytest.approx(correct / total, abs=5e-7)
        assert int(row["n_participants"]) == len(sampled)


def test_paper_protocol_scores_pflegos_new_heads_with_the_rounds_theta(tmp_path):
    cfg = _cfg(tmp_path, "pflego", "paper", engine="torch-reuse")  # torch features on both sides: same kernels
    rows = _eval_rows(cfg)
    from edgeprof.nn import head as headlib
    from edgeprof.nn.backbones import build_backbone, default_input_shape, get_params, set_params

    clients = load_clients(cfg)
    module = build_backbone("mlp", default_input_shape("mlp"), seed=cfg.seed)
    theta = get_params(module)
    heads = {c.client_id: pflego.initial_head(cfg.seed, c.client_id, c.num_classes, module.feature_dim)
             for c in clients}
    alphas = aggregation.alphas([c.n_train for c in clients])
    scale = cfg.clients / cfg.sampled_per_round
    optimizer = aggregation.SGD(cfg.rho)
    rng = participant_rng(cfg)

    def feats(x):
        set_params(module, theta)
        with torch.no_grad():
            return headlib.with_bias(module(torch.from_numpy(x)).numpy())

    for row in rows:
        sampled = sample_participants(rng, cfg.clients, cfg.participation, cfg.participation_mode)
        correct = total = 0
        grads = []
        for cid in sampled:
            c = clients[cid]
            res = pflego.client_round(lambda x: feats(x)[:, :-1],
                                      lambda h, x, y: pflego.torch_joint_gradient(module, theta, h, x, y, Compute()),
                                      heads[cid], c.x_train, c.y_train, tau=cfg.tau, beta=cfg.beta, rho=cfg.rho,
                                      scale=scale)
            heads[cid] = res.head
            correct += int((feats(c.x_test) @ res.head.T).argmax(1).__eq__(c.y_test).sum())  # round's theta
            total += len(c.y_test)
            grads.append(res.theta_grad)
        theta = pflego.server_step(theta, grads, [alphas[i] for i in sampled], scale, optimizer)
        assert float(row["test_accuracy"]) == pytest.approx(correct / total, abs=5e-7)


def test_global_protocol_scores_every_client_after_the_server_step(tmp_path):
    cfg = _cfg(tmp_path, "fedavg", "global")
    rows = _eval_rows(cfg)
    from edgeprof.rounds.simulate import build_federation

    federation = build_federation(cfg, load_clients(cfg))
    rng = participant_rng(cfg)
    for row in rows:
        sampled = sample_participants(rng, cfg.clients, cfg.participation, cfg.participation_mode)
        federation.server_step([federation.client_round(c) for c in sampled])
        accuracies = [federation.evaluate(i).test_accuracy for i in range(cfg.clients)]
        assert float(row["test_accuracy"]) == pytest.approx(np.mean(accuracies), abs=5e-7)


def test_the_two_sums_on_hand_numbers():
    results = [EvalResult(0, 1.0, 0.5, 10, 4), EvalResult(1, 2.0, 1.0, 30, 1)]

    assert paper_score(results) == pytest.approx(((1.0 * 10 + 2.0 * 30) / 40, (2 + 1) / 5))
    assert global_score(results) == pytest.approx(((1.0 * 10 + 2.0 * 30) / 40, (0.5 + 1.0) / 2))


def test_a_client_without_a_test_sample_has_no_accuracy_to_average_and_no_client_with_one_none_at_all():
    # Prepare: a client scored 0.5 on 4 samples, one with no test sample (its accuracy reads 0.0: nothing to score)
    results = [EvalResult(0, 1.0, 0.5, 10, 4), EvalResult(1, 2.0, 0.0, 30, 0)]
    # Execute / Assert: the mean is over the scored client alone, and none scored is NaN, never 0%
    assert global_score(results)[1] == 0.5 and paper_score(results)[1] == 0.5
    assert np.isnan(global_score(results[1:])[1]) and np.isnan(paper_score(results[1:])[1])


def test_a_run_whose_clients_have_no_test_sample_writes_no_accuracy_and_says_so(tmp_path):
    # Prepare: MNIST files whose official test files hold no image, scored by the paper split
    from typer.testing import CliRunner

    from edgeprof.cli import app
    from edgeprof.report import read_report
    from test_data_files import write_idx

    data = tmp_path / "mnist"
    data.mkdir()
    write_idx(data / "train-images-idx3-ubyte", np.zeros((40, 28, 28), np.uint8))
    write_idx(data / "train-labels-idx1-ubyte", (np.arange(40) % 10).astype(np.uint8))
    write_idx(data / "t10k-images-idx3-ubyte", np.zeros((0, 28, 28), np.uint8))
    write_idx(data / "t10k-labels-idx1-ubyte", np.zeros(0, np.uint8))
    # Execute
    result = CliRunner().invoke(app, ["measure", "--dataset", "mnist", "--data-dir", str(data), "--split", "paper",
                                      "--evaluate", "--backbone", "mlp", "--clients", "4", "--rounds", "1", "--tau",
                                      "2", "--no-progress", "--run-name", "r", "--out", str(tmp_path / "out")])
    # Assert: the eval row is whole with an empty accuracy (read back with no damaged row), and the line says why
    assert result.exit_code == 0, result.output
    (row,) = read_report(tmp_path / "out" / "r.csv").where(kind="eval")
    assert row["test_accuracy"] == "" and row["train_loss"] != ""
    assert "after round 1: training loss" in result.stdout and "no test sample to score" in result.stdout
    assert "damaged" not in result.output

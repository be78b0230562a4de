"""Run settings, the paper's default hyperparameters, client participation, and the top-level API."""

from __future__ import annotations

import numpy as np
import pytest

import edgeprof
from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError
from edgeprof.algorithms.participants import sample_participants


@pytest.mark.parametrize("algo,dataset,degree,expected", [
    ("pflego", "digits", "high", {"beta": 0.189, "rho": 0.003}),       # Table 6, MNIST column
    ("pflego", "cifar10", "high", {"beta": 0.002, "rho": 0.001}),      # Table 6, CIFAR-10 High-Pers
    ("pflego", "fashion-mnist", "none", {"beta": 0.007, "rho": 0.003}),
    ("pflego", "omniglot", "group", {"beta": 0.1341, "rho": 0.003}),   # Table 7
    ("fedavg", "cifar10", "none", {"beta": 0.006}),
    ("ditto", "mnist", "medium", {"beta": 0.007, "mu": 0.5}),
])
def test_defaults_come_from_tables_6_and_7(algo, dataset, degree, expected):
    cfg = RunConfig(algo=algo, dataset=dataset, degree=degree).resolved()
    assert {k: getattr(cfg, k) for k in expected} == expected


def test_explicit_rates_win_and_engine_defaults_per_algorithm():
    cfg = RunConfig(algo="pflego", beta=0.5).resolved()
    assert cfg.beta == 0.5 and cfg.rho == 0.003 and cfg.engine == "onnx"
    assert RunConfig(algo="fedavg").resolved().engine == "torch"
    with pytest.raises(ConfigError, match="engine for fedavg"):
        RunConfig(algo="fedavg", engine="onnx")


#: which of beta, rho, mu and the server optimizer each paper's update reads (Tables 6-7 and the algorithms' papers)
USED = {"pflego": {"beta", "rho", "server_optimizer"}, "fedrecon": {"beta", "rho", "server_optimizer"},
        "fedprox": {"beta", "mu"}, "ditto": {"beta", "mu"}, "fedavg": {"beta"}, "fedper": {"beta"},
        "fedrep": {"beta"}, "fedbabu": {"beta"}, "fedsim": {"beta"}, "fedalt": {"beta"}}


@pytest.mark.parametrize("algo", sorted(USED))
def test_a_resolved_config_holds_only_the_settings_its_algorithm_uses(algo):
    """The declaration says what an algorithm uses; the rest is cleared (None, or the default optimizer) and the
    sidecar's config says None for it, so a report never shows a rate its run did not use."""
    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.algorithms.hyperparams import used

    cfg = RunConfig(algo=algo, beta=0.5, rho=0.25, mu=0.125, server_optimizer="sgd").resolved()
    recorded = cfg.to_dict()

    assert used(ALGORITHMS[algo]) == USED[algo]
    assert {k for k in ("beta", "rho", "mu") if getattr(cfg, k) is not None} == USED[algo] - {"server_optimizer"}
    assert cfg.server_optimizer == ("sgd" if "server_optimizer" in USED[algo] else "adam")
    assert {k for k in ("beta", "rho", "mu", "server_optimizer") if recorded[k] is not None} == USED[algo]


@pytest.mark.parametrize("algos,given,expected", [
    (["fedavg"], ["rho"], "--rho does not apply to fedavg, which takes only --beta; leave it out"),
    (["fedavg", "fedprox"], ["server_optimizer"], "--server-optimizer applies to none of fedavg, fedprox"),
])
def test_a_setting_no_algorithm_uses_is_refused_and_one_that_any_uses_is_not(algos, given, expected):
    from edgeprof.config import check_used

    with pytest.raises(ConfigError) as err:
        check_used(algos, given)

    assert str(err.value).startswith(expected)
    check_used([*algos, "pflego"], given)  # pflego uses rho and a server optimizer: no error


@pytest.mark.parametrize("clients,pi,r", [(10, 0.2, 2), (100, 0.2, 20), (3, 0.1, 1), (5, 1.0, 5)])
def test_fixed_participation_samples_r_distinct_clients(clients, pi, r):
    rng = np.random.default_rng(0)
    rounds = [sample_participants(rng, clients, pi, "fixed") for _ in range(2000)]
    assert all(len(set(s)) == len(s) == r for s in rounds)
    counts = np.bincount(np.concatenate(rounds), minlength=clients) / len(rounds)
    np.testing.assert_allclose(counts, r / clients, atol=0.04)  # Pr(i in I_t) = r/I
    assert RunConfig(clients=clients, participation=pi).sampled_per_round == r


def test_bernoulli_participation_includes_each_client_with_probability_pi():
    rng = np.random.default_rng(1)
    rounds = [sample_participants(rng, 8, 0.3, "bernoulli") for _ in range(4000)]
    counts = np.bincount(np.concatenate([np.asarray(s, dtype=int) for s in rounds]), minlength=8) / len(rounds)
    np.testing.assert_allclose(counts, 0.3, atol=0.03)
    assert any(len(s) == 0 for s in rounds) and len({len(s) for s in rounds}) > 3
    assert RunConfig(clients=8, participation=0.3, participation_mode="bernoulli").sampled_per_round == \
        pytest.approx(2.4)


def test_top_level_api_runs_and_reads_back(tmp_path):
    result = edgeprof.run(edgeprof.RunConfig(algo="pflego", tau=3, rounds=2, clients=4, participation=0.5,
                                             dataset="synthetic", synthetic_samples=200, synthetic_classes=4,
                                             backbone="mlp", out=str(tmp_path), progress=False))
    report = edgeprof.read_report(result.csv_path)
    assert result.status == "complete" and result.rounds_completed == 2
    assert len(report.values("wall_s", report.where(kind="client"))) == 4
    assert report.sidecar["config"]["beta"] == 0.189  # resolved from Table 6


def test_the_public_run_function_survives_the_packages_being_imported():
    """``edgeprof.run`` is the API's function, whatever edgeprof's packages were imported first."""
    import edgeprof.rounds.simulate  # noqa: F401
    from edgeprof import api

    assert edgeprof.run is api.run and callable(edgeprof.run)


def test_the_record_says_null_for_the_data_and_evaluation_settings_a_run_does_not_use():
    """Through the API a RunConfig may carry a synthetic size on digits, or a protocol without --evaluate (the CLI
    refuses them given): the sidecar's config recorded them as if used."""
    cfg = RunConfig(dataset="digits", synthetic_samples=5000, synthetic_classes=7, eval_protocol="paper")
    used = RunConfig(dataset="synthetic", synthetic_samples=5000, synthetic_classes=7, evaluate=True,
                     eval_protocol="paper")

    record, kept = cfg.to_dict(), used.to_dict()

    assert [record[k] for k in ("synthetic_samples", "synthetic_classes", "eval_protocol", "data_dir")] == [None] * 4
    assert [kept[k] for k in ("synthetic_samples", "synthetic_classes", "eval_protocol")] == [5000, 7, "paper"]
    assert record["dataset"] == "digits" and kept["evaluate"] is True

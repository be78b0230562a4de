"""How many clients a fixed round samples: round(pi*I) by default, int(I*pi) like the reference code with the
paper split."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from edgeprof.config import RunConfig
from edgeprof.algorithms.participants import clients_per_round, sample_participants

#: (I, pi, r with round(pi*I), r with int(I*pi)); the reference code's expression is int(num_clients * fraction)
ROUNDS = [(14, 0.2, 3, 2), (10, 0.2, 2, 2), (3, 0.1, 1, 1), (100, 0.29, 29, 28), (7, 1.0, 7, 7)]


@pytest.mark.parametrize(("clients", "pi", "rounded", "floored"), ROUNDS)
def test_r_is_rounded_by_default_and_floored_like_the_reference_code(clients, pi, rounded, floored) -> None:
    # Execute / Assert: max(1, .) of the two expressions, written out independently
    assert clients_per_round(clients, pi) == clients_per_round(clients, pi, "round") == rounded
    assert clients_per_round(clients, pi, "floor") == floored == max(1, int(clients * pi))


@pytest.mark.parametrize(("split", "rounding", "r"), [("balanced", "round", 3), ("paper", "floor", 2)])
def test_the_split_sets_r_and_the_i_over_r_scale_at_i_14_pi_0_2(split: str, rounding: str, r: int) -> None:
    # Prepare
    cfg = RunConfig(clients=14, participation=0.2, split=split)
    rng = np.random.default_rng(0)
    # Execute
    rounds = [sample_participants(rng, 14, 0.2, "fixed", cfg.participant_rounding) for _ in range(200)]
    # Assert
    assert cfg.participant_rounding == rounding and cfg.sampled_per_round == r
    assert all(len(set(s)) == len(s) == r for s in rounds)


def test_bernoulli_participation_ignores_the_rounding() -> None:
    # Prepare
    cfg = RunConfig(clients=14, participation=0.2, participation_mode="bernoulli", split="paper")
    # Execute
    draws = [sample_participants(np.random.default_rng(3), 14, 0.2, "bernoulli", rounding) for rounding in
             ("round", "floor")]
    # Assert
    assert draws[0] == draws[1] and cfg.sampled_per_round == pytest.approx(2.8)


def test_an_unknown_rounding_is_refused() -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="rounding must be one of round, floor"):
        clients_per_round(10, 0.2, "ceil")


@pytest.mark.parametrize(("split", "r"), [("balanced", 3), ("paper", 2)])
def test_the_in_process_loop_samples_r_of_its_split(monkeypatch, split: str, r: int) -> None:
    # Prepare: record the participants instead of running the rounds
    from edgeprof.rounds import simulate
    seen: list = []
    monkeypatch.setattr(simulate, "run_round", lambda ctx, cfg, federation, t, participants: seen.append(participants))
    cfg = RunConfig(clients=14, participation=0.2, rounds=5, split=split)
    # Execute
    simulate.run_rounds(None, cfg, SimpleNamespace(num_clients=14))
    # Assert
    assert len(seen) == 5 and all(len(p) == r for p in seen)

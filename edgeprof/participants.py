"""Who takes part in a round: I_t, drawn the same way by the in-process loop and the Flower strategy.

Both drivers draw from :func:`participant_rng`, so a Flower federation with the same seed samples the same
clients in the same rounds as ``edgeprof measure`` (the equality tests depend on it).
"""

from __future__ import annotations

import numpy as np


def sample_participants(rng: np.random.Generator, num_clients: int, participation: float,
                        mode: str) -> list[int]:
    """I_t: r = max(1, round(pi*I)) clients uniformly without replacement (``fixed``), or every client
    independently with probability pi (``bernoulli``, possibly none)."""
    if mode == "fixed":
        r = max(1, round(participation * num_clients))
        return sorted(int(i) for i in rng.choice(num_clients, size=r, replace=False))
    return [i for i in range(num_clients) if rng.random() < participation]


def participant_rng(cfg) -> np.random.Generator:
    """The generator that draws I_t each round; the Flower strategy draws from the same stream."""
    return np.random.default_rng(cfg.seed + 2)

"""Who takes part in a round (the participation processes of the PFLEGO paper, Section 3.2.1): I_t, drawn the
same way by the in-process loop and the Flower strategy.

Both drivers draw from :func:`participant_rng`, so a Flower federation with the same seed samples the same
clients in the same rounds as ``edgeprof measure`` (the equality tests depend on it).
"""

from __future__ import annotations

import numpy as np

#: how a round's clients are drawn (``--participation-mode``; :func:`sample_participants`)
PARTICIPATION_MODES = ("fixed", "bernoulli")
#: how r follows from pi*I in ``fixed`` mode: ``round`` to the nearest (the default), ``floor`` as the PFLEGO
#: authors' reference code does (``int(num_clients * users_fraction)``; the ``paper`` split)
ROUNDINGS = ("round", "floor")


def clients_per_round(num_clients: int, participation: float, rounding: str = "round") -> int:
    """r, the clients of a ``fixed`` round: max(1, round(pi*I)), or max(1, int(I*pi)) with ``floor``.

    ``floor`` is the reference code's expression exactly, float rounding included (I=14, pi=0.2: 2, not 3).
    """
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    if rounding == "floor":
        return max(1, int(num_clients * participation))
    return max(1, round(participation * num_clients))


def sample_participants(rng: np.random.Generator, num_clients: int, participation: float,
                        mode: str, rounding: str = "round") -> list[int]:
    """I_t: r = :func:`clients_per_round` clients uniformly without replacement (``fixed``), or every client
    independently with probability pi (``bernoulli``, possibly none; ``rounding`` is not used)."""
    if mode == "fixed":
        r = clients_per_round(num_clients, participation, rounding)
        return sorted(int(i) for i in rng.choice(num_clients, size=r, replace=False))
    return [i for i in range(num_clients) if rng.random() < participation]


def participant_rng(cfg) -> np.random.Generator:
    """The generator that draws I_t each round; the Flower strategy draws from the same stream."""
    return np.random.default_rng(cfg.seed + 2)

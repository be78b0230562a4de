"""Default learning rates from Tables 6-7 of the PFLEGO paper (appendix A.3).

Keys: the dataset *family* (``mnist`` covers MNIST, Fashion-MNIST's own column is used for
``fashion-mnist``, the embedded ``digits`` and ``synthetic`` sets use the MNIST column as the closest
match), the degree of personalization and the algorithm. ``beta`` is the client's step size, ``rho``
PFLEGO's / FedRecon's server step size, ``mu`` FedProx's proximal coefficient and Ditto's lambda (the
paper's tables call both mu). Every value can be overridden from the CLI (``--beta``, ``--rho``,
``--mu``). Each algorithm declares which row it takes (``AlgorithmSpec.hyperparams``: its own, the row of
the tabulated algorithm whose local update it shares, or its own defaults); anything untabulated falls
back to :data:`FALLBACK`.
"""

from __future__ import annotations

DEGREES = ("high", "medium", "none")

# (family) -> algorithm -> (high, medium, none) tuples of dicts
_B = lambda b: {"beta": b}  # noqa: E731
_BM = lambda b, m: {"beta": b, "mu": m}  # noqa: E731
_BR = lambda b, r: {"beta": b, "rho": r}  # noqa: E731

TABLE6 = {
    "mnist": {
        "fedper": (_B(0.007), _B(0.007), _B(0.007)),
        "fedavg": (_B(0.007), _B(0.007), _B(0.007)),
        "fedprox": (_BM(0.007, 0.25), _BM(0.007, 0.25), _BM(0.007, 0.25)),
        "ditto": (_BM(0.007, 0.25), _BM(0.007, 0.5), _BM(0.007, 1.0)),
        "fedrep": (_B(0.007), _B(0.007), _B(0.007)),
        "fedbabu": (_B(0.007), _B(0.007), _B(0.007)),
        "pflego": (_BR(0.189, 0.003), _BR(0.189, 0.003), _BR(0.189, 0.003)),
    },
    "cifar10": {
        "fedper": (_B(0.007), _B(0.005), _B(0.005)),
        "fedavg": (_B(0.007), _B(0.007), _B(0.006)),
        "fedprox": (_BM(0.007, 0.25), _BM(0.007, 0.25), _BM(0.006, 0.25)),
        "ditto": (_BM(0.007, 0.25), _BM(0.007, 0.5), _BM(0.007, 1.0)),
        "fedrep": (_B(0.005), _B(0.007), _B(0.007)),
        "fedbabu": (_B(0.007), _B(0.007), _B(0.007)),
        "pflego": (_BR(0.002, 0.001), _BR(0.0189, 0.003), _BR(0.03, 0.003)),
    },
    "emnist": {
        "fedper": (_B(0.007), _B(0.007), _B(0.007)),
        "fedavg": (_B(0.007), _B(0.007), _B(0.007)),
        "fedprox": (_BM(0.007, 0.25), _BM(0.007, 0.25), _BM(0.007, 0.25)),
        "ditto": (_BM(0.007, 0.25), _BM(0.007, 0.25), _BM(0.007, 1.0)),
        "fedrep": (_B(0.007), _B(0.007), _B(0.007)),
        "fedbabu": (_B(0.007), _B(0.007), _B(0.007)),
        "pflego": (_BR(0.03, 0.003), _BR(0.03, 0.003), _BR(0.03, 0.003)),
    },
    "fashion-mnist": {
        "fedper": (_B(0.007), _B(0.007), _B(0.007)),
        "fedavg": (_B(0.007), _B(0.007), _B(0.007)),
        "fedprox": (_BM(0.007, 0.25), _BM(0.007, 0.25), _BM(0.007, 0.25)),
        "ditto": (_BM(0.005, 0.25), _BM(0.007, 0.25), _BM(0.007, 1.0)),
        "fedrep": (_B(0.003), _B(0.007), _B(0.007)),
        "fedbabu": (_B(0.007), _B(0.007), _B(0.007)),
        "pflego": (_BR(0.006, 0.002), _BR(0.006, 0.002), _BR(0.007, 0.003)),
    },
}

#: Table 7: Omniglot, high personalization only
TABLE7 = {
    "fedrep": _B(0.009),
    "fedbabu": _B(0.009),
    "fedprox": _BM(0.009, 0.25),
    "ditto": _BM(0.007, 0.5),
    "fedper": _B(0.009),
    "fedavg": _B(0.009),
    "fedrecon": _BR(0.009, 0.003),
    "pflego": _BR(0.1341, 0.003),
}

_FAMILY = {"digits": "mnist", "synthetic": "mnist", "mnist": "mnist", "fashion-mnist": "fashion-mnist",
           "emnist": "emnist", "cifar10": "cifar10", "omniglot": "omniglot"}

#: values the paper does not tabulate (documented fallbacks): beta = 0.007, the client step of almost
#: every baseline cell of Table 6; rho = 0.003, PFLEGO's and FedRecon's server step in Tables 6-7;
#: mu = lam = 0.25, FedProx's mu and Ditto's High-Pers mu. So FedRecon on MNIST-family data runs with
#: beta=0.007, rho=0.003 (its Omniglot cell has beta=0.009, rho=0.003).
FALLBACK = {"beta": 0.007, "rho": 0.003, "mu": 0.25, "lam": 0.25}


def defaults(row, dataset: str, degree: str = "high") -> dict[str, float]:
    """The paper's hyperparameters for this cell, completed with FALLBACK for anything untabulated.

    ``row`` is a row name of the tables (an algorithm's own or the one it borrows, e.g. FedSim takes
    ``fedper``'s) or a mapping of an algorithm's own defaults. FedRecon has a Table 7 cell only; elsewhere
    it gets FALLBACK.
    """
    if not isinstance(row, str):
        return {**FALLBACK, **row}
    algo = row
    family = _FAMILY.get(dataset, "mnist")
    if family == "omniglot":
        cell = TABLE7.get(algo, {})
    else:
        column = DEGREES.index(degree) if degree in DEGREES else 0
        row = TABLE6[family].get(algo)
        cell = row[column] if row else {}
    return {**FALLBACK, **cell}


#: the run settings an algorithm may or may not use, as :func:`used` answers for it
SETTINGS = ("beta", "rho", "mu", "server_optimizer")


def used(spec) -> frozenset[str]:
    """The settings among :data:`SETTINGS` that the algorithm ``spec`` (an ``AlgorithmSpec``) uses, read from its
    declaration: ``beta`` always (every client steps); ``rho`` and ``server_optimizer`` where its server step feeds a
    server optimizer (``has_optimizer``); and the rates of its row wherever Tables 6-7 give it one, or the keys of
    its own defaults. A row no table holds gets every rate (:data:`FALLBACK`), so none of them is called unused."""
    out = {"beta"} | ({"rho", "server_optimizer"} if spec.has_optimizer else set())
    row = spec.hyperparams
    if not isinstance(row, str):
        return frozenset(out | (set(row) & {"rho", "mu"}))
    cells = [TABLE7.get(row, {})] + [cell for table in TABLE6.values() for cell in table.get(row, ())]
    rates = {k for cell in cells for k in cell}
    return frozenset(out | (rates & {"rho", "mu"} if rates else {"rho", "mu"}))

"""The one runtime factory: every driver builds the :class:`~edgeprof.algorithms.contract.Runtime` of a run here.

The in-process driver (:class:`edgeprof.rounds.federation.Federation`), the Flower ClientApp and the Flower ServerApp
all call :func:`build_runtime`, so a run's backbone, its :class:`~edgeprof.nn.compute.Compute` (device,
execution plan, threads: resolved once, here) and its run-constant settings are made the same way wherever
the client or server program runs.
"""

from __future__ import annotations

from edgeprof.algorithms.contract import Runtime


def build_backbone_for(cfg):
    """A freshly seeded backbone of ``cfg`` in the input shape its data is loaded in."""
    from edgeprof.nn.backbones import build_backbone, input_shape_for

    return build_backbone(cfg.backbone, input_shape_for(cfg.backbone, cfg.dataset), seed=cfg.seed)


def resolve_compute(cfg, backbone, device=None):
    """The run's :class:`~edgeprof.nn.compute.Compute` for ``cfg`` and its backbone: ``cfg.device`` resolved here
    (sets torch's threads and float32 numerics), or ``device``, the Compute of that device already resolved in this
    process (:func:`edgeprof.nn.compute.device_compute`), either with the plan ``cfg.execution`` gives the
    backbone."""
    from edgeprof.nn.compute import resolve

    if device is not None:
        return device.with_execution(cfg.execution, backbone)
    return resolve(cfg.device, cfg.execution, backbone, cfg.threads, tf32=cfg.tf32)


def build_runtime(cfg, num_outputs: int, *, backbone=None, compute=None, device=None) -> Runtime:
    """The runtime of ``cfg``: a freshly seeded backbone (or the one given), ``num_outputs`` = max_i K_i outputs
    for the baselines' shared head, and the run's Compute (resolved here unless one is given; ``device``: its
    device's Compute, resolved already, given its plan here: :func:`resolve_compute`)."""
    if backbone is None:
        backbone = build_backbone_for(cfg)
    if compute is None:
        compute = resolve_compute(cfg, backbone, device)
    return Runtime(backbone, compute=compute, seed=cfg.seed, num_outputs=num_outputs, engine=cfg.engine,
                   server_optimizer=cfg.server_optimizer)

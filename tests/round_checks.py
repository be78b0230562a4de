"""One federated round on a backbone, checked the same way wherever a backbone is tried (your own, torchvision's)."""

from __future__ import annotations

import numpy as np
import torch


def one_round_moves_the_weights_and_no_running_statistic(federation, client_ids):
    """Run one round of ``client_ids`` and the server step, then the evaluation; assert the losses and weights are
    finite, the shared weights moved, and no buffer of the backbone (batch norm's running statistics) did.
    Returns the round's client updates."""
    backbone = federation.runtime.backbone
    buffers = {name: b.clone() for name, b in backbone.named_buffers()}
    before = [a.copy() for a in federation.global_arrays]

    updates = [federation.client_round(c) for c in client_ids]
    federation.server_step(updates)
    score = federation.evaluate(0)

    assert all(np.isfinite(u.loss) for u in updates) and np.isfinite(score.train_loss)
    assert all(np.all(np.isfinite(a)) for a in federation.global_arrays)
    assert any(not np.array_equal(a, b) for a, b in zip(federation.global_arrays, before))
    assert all(torch.equal(b, buffers[name]) for name, b in backbone.named_buffers())  # running stats never move
    return updates

"""A baseline's local step as one device program: built once per key, captured once as a CUDA graph, replayed tau
times a round.

FedAvg, FedProx, Ditto, FedBABU and the personal-head baselines (FedPer, FedRep, FedSim, FedAlt) take tau full-batch
gradient steps a round; eagerly, each step launches every kernel of a forward pass, a backward pass and the foreach
update one by one. A :class:`StepProgram` is ONE step (:meth:`~edgeprof.nn.compute.Compute.loss_and_grads`, then
:func:`sgd_update` with the anchors, velocity, mu, momentum and lr of its key) over static tensors:

* the module's parameters and buffers: ``Compute.load`` copies a round's weights into them in place, so their
  storage never moves;
* the client's placed chunks: a kind that keeps data copies each host array to the device once per run and keeps it
  by the array's identity (:meth:`~edgeprof.nn.compute.Compute.batches`); the chunks' addresses are part of the key
  and the program holds the chunks, so their memory is never freed or reused while it lives;
* :class:`Statics`, shared by the programs of one model and setting (every client's): the head [W, b] a
  personal-head step trains or reads, the anchors of the proximal term, the velocity, copied in (or zeroed) at the
  start of each round.

Where the device kind captures (:meth:`~edgeprof.nn.compute.DeviceKind.can_capture`: a CUDA GPU), the step is
captured once as a CUDA graph and a round replays it ``steps`` times; the first step's loss is copied out of the
graph's static loss right after the first replay, on the device, and read once a round as before. Elsewhere (the CPU,
the test kinds), and in a round whose key was not prepared, the same step runs eagerly on the caller's tensors
(:func:`gd_steps`, the plain loop), so results there are unchanged.

Key (:class:`StepKey`): the model, which of its parameters train, the head's shapes, the chunks' shapes and addresses
(one program per client's data), lr, mu, momentum, dtype and device. lr, mu and momentum are numbers baked into the
graph: they are fixed for a run (a sweep changes tau only), so a new value is a new key. tau is *not* in the key: a
round replays the one-step graph tau times, so a new tau replays the same program.

Capture is set-up: the baselines' ``prepare`` hook runs their client program once in :meth:`StepPrograms.preparing`
mode, before any window, which builds and captures each program the round will meet and takes no step; a round never
captures. The capture's warm-up runs a real step: the module's parameters and buffers are saved before and put back
after, and the statics are rewritten at every round's start, so nothing of the warm-up reaches a round.

Every step graph of a run is captured into ONE graph memory pool (:meth:`~edgeprof.nn.compute.DeviceKind.graph_pool`),
so 50 clients do not hold 50 pools of activations. That is safe because (1) replays are sequential, on one stream,
never overlapping; (2) no graph reads memory another graph's capture may have been handed: its inputs (parameters,
chunks, statics) are allocated outside any capture, and what a capture leaves alive in the pool (its static loss)
stays allocated, held by its program, so no later capture gets it; everything else a step allocates (activations,
gradients) is dead when its replay ends, and that is the memory later captures share; (3) the first loss is copied
out right after the round's first replay, before any other graph runs. :meth:`StepPrograms.describe` goes to the
sidecar (``numerics.compute.programs.local_steps``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

import torch

#: the registry's name in :meth:`~edgeprof.nn.compute.Compute.programs` (and in the sidecar)
NAME = "local_steps"


def sgd_update(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], lr: float, *,
               velocity: Sequence[torch.Tensor] | None = None, momentum: float = 0.0,
               anchors: Sequence[torch.Tensor] | None = None, mu: float = 0.0) -> None:
    """One gradient step on every parameter at once, in place, with torch's foreach ops (a few kernels a step
    for the whole model, not a few per tensor).

    ``anchors`` adds the proximal term: g <- g + mu (p - anchor) (FedProx, Ditto); ``velocity`` is heavy-ball
    momentum in torch's SGD convention: v <- momentum v + g (FedBABU). Then p <- p - lr g.
    """
    with torch.no_grad():
        if anchors is not None:
            step = torch._foreach_sub(list(params), list(anchors))
            torch._foreach_mul_(step, mu)
            torch._foreach_add_(step, list(grads))
            grads = step
        if velocity is not None:
            torch._foreach_mul_(list(velocity), momentum)
            torch._foreach_add_(list(velocity), list(grads))
            grads = velocity
        torch._foreach_add_(list(params), list(grads), alpha=-lr)


def gd_steps(loss_and_grads: Callable[[], "tuple[torch.Tensor, list]"], params: Sequence[torch.Tensor], *,
             steps: int, lr: float, momentum: float = 0.0, anchors: Sequence[torch.Tensor] | None = None,
             mu: float = 0.0) -> torch.Tensor:
    """``steps`` full-batch gradient steps run eagerly (:func:`sgd_update`); returns the first step's loss *on the
    device*.

    ``loss_and_grads()`` gives (loss, gradients of ``params``) at the current point without reading anything
    back (:meth:`~edgeprof.nn.compute.Compute.loss_and_grads`): the loop queues its work and never waits for the
    device; the caller reads the one loss it reports (``compute.scalar``), once a round. A velocity for
    ``momentum`` starts at zero. NaN (on the parameters' device) when ``steps`` is 0.
    """
    velocity = [torch.zeros_like(p) for p in params] if momentum else None
    first = None
    for _ in range(steps):
        loss, grads = loss_and_grads()
        sgd_update(params, grads, lr, velocity=velocity, momentum=momentum, anchors=anchors, mu=mu)
        first = loss if first is None else first
    return first if first is not None else params[0].new_full((), float("nan"), dtype=torch.float64)


def logits_of(module: torch.nn.Module, head: Optional[Sequence[torch.Tensor]], grad_body: bool):
    """What maps a chunk's images to its logits: the module itself, or ``linear(module(x), W, b)`` with the module
    run under autograd only when ``grad_body`` (a frozen body still gets its whole forward pass)."""
    if head is None:
        return module

    def logits(xb: torch.Tensor) -> torch.Tensor:
        with torch.set_grad_enabled(grad_body):
            feats = module(xb)
        return torch.nn.functional.linear(feats, head[0], head[1])

    return logits


@dataclass(frozen=True)
class StepKey:
    """What one step program's shapes, numbers and capture depend on (never tau)."""

    model: str  # the module's class
    body: tuple  # indices, in module.parameters(), of the parameters the step trains
    head: tuple  # shapes of the head [W, b] the logits go through (() when the module's output is the logits)
    train_head: bool
    batches: tuple  # each chunk's image shape
    n: int
    lr: float
    mu: Optional[float]  # None: no proximal term
    momentum: float
    dtype: str
    device: str
    module_id: int = field(default=0, repr=False)  # which module (its program holds it, so the id is not reused)
    data: tuple = field(default=(), repr=False)  # the chunks' addresses (images, labels): one program per data

    def describe(self) -> dict:
        out = dataclasses.asdict(self)
        del out["module_id"], out["data"]
        return out


def _on_device(compute, a) -> torch.Tensor:
    return a if isinstance(a, torch.Tensor) else compute.tensor(a)


class Statics:
    """The tensors a step reads and writes besides the module and the data, shared by every program of one model
    and setting: the head [W, b], the anchors, the velocity. Written at the start of each round (:meth:`load`)."""

    def __init__(self, compute, key: StepKey, body: Sequence[torch.Tensor], head: Optional[Sequence]) -> None:
        like = [_on_device(compute, h) for h in head] if head is not None else None
        self.head = None if like is None else [h.detach().clone().requires_grad_(key.train_head) for h in like]
        self.params = list(body) + (self.head if self.head is not None and key.train_head else [])
        self.anchors = [torch.empty_like(p) for p in self.params] if key.mu is not None else None
        self.velocity = [torch.zeros_like(p) for p in self.params] if key.momentum else None

    def load(self, compute, head: Optional[Sequence], anchors: Optional[Sequence]) -> None:
        """A round's head and anchors copied in, the velocity zeroed (it starts at zero each round)."""
        with torch.no_grad():
            for static, value in zip(self.head or [], head or []):
                static.copy_(_on_device(compute, value))
            for static, value in zip(self.anchors or [], anchors or []):
                static.copy_(_on_device(compute, value))
            if self.velocity is not None:
                torch._foreach_zero_(self.velocity)


class StepProgram:
    """One step of one :class:`StepKey` on static tensors, run eagerly (:meth:`step`) or replayed as a graph."""

    def __init__(self, compute, key: StepKey, module: torch.nn.Module, statics: Statics, batches: list) -> None:
        self.compute, self.key, self.module, self.statics, self.batches = compute, key, module, statics, batches
        self.logits = logits_of(module, statics.head, grad_body=bool(key.body))
        self.loss: Optional[torch.Tensor] = None  # the step's loss: after a capture, the graph's static output
        self._replay: Optional[Callable[[], object]] = None
        self.setup_s = 0.0

    @property
    def captured(self) -> bool:
        return self._replay is not None

    def step(self) -> None:
        """The program: one forward and backward over the chunks, one update (what a capture records)."""
        s, k = self.statics, self.key
        loss, grads = self.compute.loss_and_grads(self.logits, self.batches, k.n, s.params)
        sgd_update(s.params, grads, k.lr, velocity=s.velocity, momentum=k.momentum, anchors=s.anchors,
                   mu=k.mu or 0.0)
        self.loss = loss

    def capture(self, head, anchors, pool) -> None:
        """Capture :meth:`step` into ``pool`` (the kind warms it up first, with a round's real inputs); the module's
        parameters and buffers are put back as they were, so the warm-up's step leaves nothing behind."""
        start = time.perf_counter()
        saved = [t.detach().clone() for t in (*self.module.parameters(), *self.module.buffers())]
        self.statics.load(self.compute, head, anchors)
        self._replay = self.compute.capture(self.step, pool=pool)
        with torch.no_grad():
            for t, value in zip((*self.module.parameters(), *self.module.buffers()), saved):
                t.copy_(value)
        self.compute.sync()
        self.setup_s = time.perf_counter() - start

    def run(self, head, anchors, steps: int) -> tuple[Optional[list], torch.Tensor]:
        """A round: the statics written, the graph replayed ``steps`` times (``steps`` >= 1); (the head after the
        steps, fresh tensors; the first step's loss, a fresh device tensor)."""
        self.statics.load(self.compute, head, anchors)
        first = None
        for _ in range(steps):
            self._replay()
            if first is None:
                first = self.loss.detach().clone()  # before any other replay overwrites the static loss
        out = None if self.statics.head is None else [h.detach().clone() for h in self.statics.head]
        return out, first


class StepPrograms:
    """A run's step programs by key, with what was built, captured, replayed and run eagerly (for the sidecar)."""

    def __init__(self, compute) -> None:
        self.compute = compute
        self._programs: dict[StepKey, StepProgram] = {}
        self._statics: dict[StepKey, Statics] = {}
        self._pool = None
        self._preparing = False
        self.builds = self.captures = self.replays = self.step_replays = self.eager_runs = 0

    @contextlib.contextmanager
    def preparing(self) -> Iterator[None]:
        """Set-up, outside any window: inside it :meth:`run` builds and captures the program of each call's key
        (where the kind captures) and takes no step; its results are to be thrown away."""
        self._preparing = True
        try:
            yield
        finally:
            self._preparing = False

    def key(self, module, batches, n: int, body, head, train_head: bool, lr: float, mu: Optional[float],
            momentum: float) -> StepKey:
        index = {id(p): i for i, p in enumerate(module.parameters())}
        first = body[0] if body else next(iter(module.parameters()))
        return StepKey(type(module).__name__, tuple(index[id(p)] for p in body),
                       () if head is None else tuple(tuple(h.shape) for h in head), bool(train_head),
                       tuple(tuple(xb.shape) for xb, _ in batches), int(n), float(lr),
                       None if mu is None else float(mu), float(momentum), str(first.dtype).replace("torch.", ""),
                       str(self.compute.device), id(module),
                       tuple((xb.data_ptr(), yb.data_ptr()) for xb, yb in batches))

    def _build(self, key: StepKey, module, batches, body, head) -> StepProgram:
        shared = dataclasses.replace(key, data=(), batches=(), n=0)  # the statics do not depend on the data
        statics = self._statics.get(shared)
        if statics is None:
            statics = self._statics[shared] = Statics(self.compute, key, body, head)
        self.builds += 1
        program = self._programs[key] = StepProgram(self.compute, key, module, statics, list(batches))
        return program

    def run(self, module, batches: list, n: int, *, steps: int, lr: float, body: Sequence[torch.Tensor],
            head: Optional[Sequence] = None, train_head: bool = True, anchors: Optional[Sequence] = None,
            mu: float = 0.0, momentum: float = 0.0) -> tuple[Optional[list], torch.Tensor]:
        """``steps`` full-batch steps of ``module`` (through ``head`` [W, b] when given) over ``batches``; (the head
        after the steps as device tensors, None without one; the first loss on the device).

        ``body`` are the module's parameters that train (updated in place; [] freezes the body, whose forward then
        runs without autograd); the head, host arrays or device tensors, is never changed in place: the result is
        a copy. ``anchors`` (one per trained tensor) adds mu (p - anchor); ``momentum`` > 0 is heavy-ball with a
        velocity starting at zero. A prepared key replays its graph; any other call runs :func:`gd_steps` on the
        caller's tensors (counted where the kind captures; a round never captures).
        """
        body = list(body)
        capturing = steps > 0 and self.compute.can_capture()
        key = self.key(module, batches, n, body, head, train_head, lr, None if anchors is None else mu,
                       momentum) if capturing else None
        if self._preparing:
            if capturing:
                self._prepare(key, module, batches, body, head, anchors)
            nan = (body or [_on_device(self.compute, h) for h in head or []])[0]
            return (None if head is None else [_on_device(self.compute, h).detach().clone() for h in head],
                    nan.new_full((), float("nan"), dtype=torch.float64))
        program = self._programs.get(key) if capturing else None
        if program is not None and program.captured:
            self.replays += 1
            self.step_replays += steps
            return program.run(head, anchors, steps)
        self.eager_runs += 1
        return eager_steps(self.compute, module, batches, n, steps=steps, lr=lr, body=body, head=head,
                           train_head=train_head, anchors=anchors, mu=mu, momentum=momentum)

    def _prepare(self, key: StepKey, module, batches, body, head, anchors) -> None:
        """Set-up: the program of ``key`` built, and captured once, into the run's one pool."""
        program = self._programs.get(key) or self._build(key, module, batches, body, head)
        if not program.captured:
            if self._pool is None:
                self._pool = self.compute.graph_pool()
            program.capture(head, anchors, self._pool)
            self.captures += 1

    def describe(self) -> dict:
        """How the local steps ran: captured step graphs replayed, or eagerly; the set-up the captures took; one
        entry per model and setting, with how many programs (clients' data) it has."""
        captured = [p for p in self._programs.values() if p.captured]
        if not self.compute.can_capture():
            how = "eager torch on the device (this device kind captures no graphs)"
        elif captured:
            how = "one captured device graph per step, replayed tau times"
            if self.eager_runs:
                how += f"; {self.eager_runs} run(s) eagerly, their keys not prepared before the windows"
        else:
            how = "eager torch on the device (nothing prepared before the windows)"
        keys: dict = {}
        for key in self._programs:
            shared = dataclasses.replace(key, data=())
            keys.setdefault(shared, 0)
            keys[shared] += 1
        return {"local_steps": how, "programs_built": self.builds, "captures": self.captures,
                "replays": self.replays, "step_replays": self.step_replays, "eager_runs": self.eager_runs,
                "lr_in_key": True, "tau_in_key": False,
                "memory_pool": "one graph pool shared by every step program" if captured else None,
                "capture_setup_s": round(sum(p.setup_s for p in captured), 6),
                "keys": [{**k.describe(), "programs": count} for k, count in keys.items()]}


def eager_steps(compute, module, batches: list, n: int, *, steps: int, lr: float, body: Sequence[torch.Tensor],
                head: Optional[Sequence] = None, train_head: bool = True, anchors: Optional[Sequence] = None,
                mu: float = 0.0, momentum: float = 0.0) -> tuple[Optional[list], torch.Tensor]:
    """:meth:`StepPrograms.run`'s steps run eagerly on the caller's tensors: the head copied into fresh leaves (a
    device tensor cloned, host arrays placed), the anchors placed, then :func:`gd_steps`."""
    w = None if head is None else [h.detach().clone().requires_grad_(train_head) if isinstance(h, torch.Tensor)
                                   else compute.tensor(h, requires_grad=train_head) for h in head]
    params = list(body) + (w if w is not None and train_head else [])
    anchored = None if anchors is None else [_on_device(compute, a) for a in anchors]
    logits = logits_of(module, w, grad_body=bool(body))
    first = gd_steps(lambda: compute.loss_and_grads(logits, batches, n, params), params, steps=steps, lr=lr,
                     momentum=momentum, anchors=anchored, mu=mu)
    return w, first


def programs_of(compute) -> StepPrograms:
    """The run's step programs (kept on its :class:`~edgeprof.nn.compute.Compute`, described in the sidecar)."""
    return compute.programs(NAME, StepPrograms)


def local_steps(compute, module, batches: list, n: int, **kwargs) -> tuple[Optional[list], torch.Tensor]:
    """The baselines' local steps: :meth:`StepPrograms.run` on the run's registry."""
    return programs_of(compute).run(module, batches, n, **kwargs)

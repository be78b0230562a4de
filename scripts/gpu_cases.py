"""Checks that need a CUDA GPU, in plain Python (numpy and torch, no pytest) so that ``scripts/gpu_check.py`` runs
them on a machine that has only what a CUDA PyTorch image has; ``tests/test_gpu.py`` runs the same under pytest
(skipped, with the reason, where torch sees no GPU).

Each ``check_*`` raises AssertionError when it fails. Tolerances are derived from float32 rounding; where cuDNN
or cuBLAS may compute in TF32 (10-bit mantissa, torch's ``allow_tf32`` switches: off unless a run asks with
``--tf32``, :func:`edgeprof.nn.compute.apply_numerics`), its unit roundoff is 2**13 times float32's and the bound
is scaled by that.
"""

from __future__ import annotations

import numpy as np

from edgeprof.nn.tolerances import float32_atol


def _run_config(algo: str, device: str, backbone: str = "mlp"):
    from edgeprof.config import RunConfig

    return RunConfig(algo=algo, dataset="synthetic", synthetic_samples=120, synthetic_classes=3, clients=2,
                     participation=1.0, backbone=backbone, tau=3, threads=1, device=device,
                     execution="contiguous:all").resolved()


def _federation(algo: str, device: str, backbone: str = "mlp"):
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import load_clients

    cfg = _run_config(algo, device, backbone)
    return Federation(cfg, load_clients(cfg))


def _tf32_ratio() -> float:
    import torch

    return 2.0**13 if (torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32) else 1.0


def _atol(module, reference, extra_depth: int) -> float:
    weights = [p for p in module.parameters() if p.dim() > 1]
    fan_in = max(int(np.prod(p.shape[1:])) for p in weights)
    return _tf32_ratio() * float32_atol(reference, fan_in=fan_in, depth=len(weights) + extra_depth)


def check_every_algorithm_runs_a_round_on_the_gpu() -> None:
    """Every registered algorithm: one round and a server step on cuda, its module and data on the GPU."""
    from edgeprof.algorithms import ALGORITHMS

    for algo in sorted(ALGORITHMS):
        federation = _federation(algo, "cuda")
        update = federation.client_round(0)
        federation.server_step([update])
        assert next(federation.runtime.backbone.parameters()).is_cuda, algo
        assert np.isfinite(update.loss), algo
        assert all(np.all(np.isfinite(a)) for a in update.payload), algo


def check_a_round_on_the_gpu_equals_the_cpu_round() -> None:
    """PFLEGO's and FedAvg's replies on the GPU agree with the CPU's to float32 (or TF32) rounding."""
    for algo, backbone in (("pflego", "mlp"), ("fedavg", "mlp"), ("pflego", "cnn-omniglot"),
                           ("fedavg", "cnn-omniglot")):
        gpu, cpu = _federation(algo, "cuda", backbone), _federation(algo, "cpu", backbone)
        on_gpu, on_cpu = gpu.client_round(0), cpu.client_round(0)
        for a, b in zip(on_gpu.payload, on_cpu.payload):
            # forward, tau = 3 steps and a backward, each a chain through the layers
            np.testing.assert_allclose(a, b, rtol=0, atol=_atol(cpu.runtime.backbone, b, 2 * 3 + 2) + 1e-7,
                                       err_msg=f"{algo} on {backbone}")


def check_the_device_head_steps_equal_the_host_head_steps() -> None:
    from edgeprof.nn import head as headlib
    from edgeprof.nn.compute import resolve
    from edgeprof.nn.backbones import build_backbone

    rng = np.random.default_rng(0)
    compute = resolve("cuda", "contiguous:all", build_backbone("mlp"), None)
    feats_b = headlib.with_bias(rng.normal(size=(600, 64)).astype(np.float32))
    labels = rng.integers(0, 5, 600)
    w0 = rng.normal(scale=0.1, size=(5, 65)).astype(np.float32)
    host = headlib.gradient_steps(w0, feats_b, labels, 0.2, 9)
    device = headlib.device_gradient_steps(compute, w0, feats_b, labels, 0.2, 9)
    np.testing.assert_allclose(device, host, rtol=0,
                               atol=_tf32_ratio() * float32_atol(host, fan_in=600, depth=2 * 9 + 1))


def check_the_gpu_peak_memory_is_reset_per_window() -> None:
    import torch

    from edgeprof.nn.compute import resolve
    from edgeprof.nn.backbones import build_backbone

    compute = resolve("cuda", "contiguous:all", build_backbone("mlp"), None)
    big = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    del big
    compute.reset_peak_memory()
    # what this process still holds (the earlier checks' modules and data, in one process): the peak counts it
    held_mb = torch.cuda.memory_allocated() / 2**20
    small = torch.empty(2**20, dtype=torch.uint8, device="cuda")
    peak = compute.peak_memory_mb()
    del small
    # without the reset the peak would still hold the 64 MiB freed before it
    assert peak is not None and held_mb + 0.9 <= peak < held_mb + 64, (peak, held_mb)


def _resolve_without_a_stored_calibration(execution: str, module, **kwargs):
    """``resolve("cuda", execution, module)`` with an empty calibration cache (none of this node's is taken)."""
    import os
    import tempfile

    from edgeprof.nn.compute import resolve

    before = os.environ.get("EDGEPROF_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["EDGEPROF_CACHE_DIR"] = cache
        try:
            return resolve("cuda", execution, module, None, **kwargs)
        finally:
            if before is None:
                del os.environ["EDGEPROF_CACHE_DIR"]
            else:
                os.environ["EDGEPROF_CACHE_DIR"] = before


def check_auto_on_cuda_runs_the_whole_set_with_cudnn_benchmark_in_fp32() -> None:
    """``--execution auto`` on CUDA runs a 600-image local set in one pass (never the CPU's chunked table); the seam
    has turned ``cudnn.benchmark`` on and kept FP32 (no TF32) unless asked; a calibration on the GPU times the
    whole set among its candidates."""
    import torch

    from edgeprof.nn import execution
    from edgeprof.nn.backbones import build_backbone

    module = build_backbone("cnn-omniglot", (1, 28, 28))
    compute = _resolve_without_a_stored_calibration("auto", module)
    images = np.zeros((600, 1, 28, 28), dtype=np.float32)

    assert compute.plan.source.startswith("whole set on cuda"), compute.plan
    assert len(compute.batches(images)) == 1, compute.plan
    assert torch.backends.cudnn.benchmark is True
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"
    assert compute.describe()["numerics"] == {"float32_matmul_precision": "highest", "tf32": False,
                                              "cudnn_benchmark": True, "cudnn_allow_tf32": False, "label": "fp32"}

    calibrated = _resolve_without_a_stored_calibration("calibrate", module)
    assert calibrated.plan.spec in execution.GPU_CANDIDATES[True], calibrated.plan
    assert "contiguous:all " in calibrated.plan.source and "channels_last:all " in calibrated.plan.source


def check_tf32_is_on_only_when_asked() -> None:
    import torch

    from edgeprof.nn.backbones import build_backbone

    module = build_backbone("mlp")
    tf32 = _resolve_without_a_stored_calibration("contiguous:all", module, tf32=True)
    assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    assert tf32.describe()["numerics"]["label"].startswith("tf32")
    _resolve_without_a_stored_calibration("contiguous:all", module)  # the default again: FP32 for the checks after
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32


def _head_inputs(n: int, m: int = 64, k: int = 5, seed: int = 0):
    from edgeprof.nn import head as headlib

    rng = np.random.default_rng(seed)
    return (headlib.with_bias(rng.normal(size=(n, m)).astype(np.float32)), rng.integers(0, k, n),
            rng.normal(scale=0.1, size=(k, m + 1)).astype(np.float32))


def _cuda_compute():
    from edgeprof.nn.backbones import build_backbone
    from edgeprof.nn.compute import resolve

    return resolve("cuda", "contiguous:all", build_backbone("mlp"), None)


def check_the_captured_head_steps_replay_equals_eager_and_the_host_head() -> None:
    """The head steps captured as a CUDA graph and replayed give the eager program's head (the same kernels) and the
    numpy head's to float32 (or TF32) rounding; a changed lr replays the same graph."""
    from edgeprof.nn import head as headlib
    from edgeprof.nn.head_program import HeadPrograms

    compute = _cuda_compute()
    feats_b, labels, w0 = _head_inputs(600)
    f, y = compute.tensor(feats_b), compute.labels(labels)
    graphs, eager = HeadPrograms(compute), HeadPrograms(compute)
    graphs.prepare(600, 5, 65, 9)
    for lr in (0.2, 0.05):
        replayed = compute.host(graphs.run(w0, f, y, lr, 9))
        eagerly = compute.host(eager.run(w0, f, y, lr, 9))
        host = headlib.gradient_steps(w0, feats_b, labels, lr, 9)
        np.testing.assert_allclose(replayed, eagerly, rtol=0,
                                   atol=_tf32_ratio() * float32_atol(host, fan_in=600, depth=3 * 9 + 1))
        np.testing.assert_allclose(replayed, host, rtol=0,
                                   atol=_tf32_ratio() * float32_atol(host, fan_in=600, depth=3 * 9 + 1))
    assert (graphs.captures, graphs.replays, graphs.eager_runs, eager.eager_runs) == (1, 2, 0, 2)


def check_every_split_of_the_captured_head_steps_equals_the_host_head() -> None:
    """Each split prepare may keep (:data:`edgeprof.nn.head_program.SPLITS`), captured and replayed on the GPU,
    gives the numpy head for N=600 and an N no split divides, to float32 (or TF32) rounding."""
    from edgeprof.nn import head as headlib
    from edgeprof.nn.head_program import SPLITS, HeadProgram, ProgramKey

    compute = _cuda_compute()
    for n in (600, 301):
        feats_b, labels, w0 = _head_inputs(n)
        f, y = compute.tensor(feats_b), compute.labels(labels)
        host = headlib.gradient_steps(w0, feats_b, labels, 0.2, 19)
        for split in SPLITS:
            program = HeadProgram(compute, ProgramKey(19, n, 5, 65, "float32", "cuda"), f, split)
            program.capture()
            got = compute.host(program.run(w0, f, y, 0.2))
            np.testing.assert_allclose(got, host, rtol=0, err_msg=f"N={n}, split {split}",
                                       atol=_tf32_ratio() * float32_atol(host, fan_in=n, depth=3 * 19 + 1))


def check_every_program_count_of_the_head_kernel_equals_the_host_head() -> None:
    """The Triton head kernel at each program count the GPU offers (``CudaKind.head_kernel_programs``: several
    programs meet at a barrier each step), captured and replayed, gives the numpy head to float32 rounding for
    shapes whose images no count divides, one feature, more classes than a tile's 16 and a wide M; two replays
    give the same head (the programs' shares are summed in one order). Skipped with a line where Triton is
    missing."""
    from edgeprof.nn import head as headlib
    from edgeprof.nn import head_kernel
    from edgeprof.nn.head_program import HeadProgram, ProgramKey

    compute = _cuda_compute()
    counts = compute.head_kernel_programs()
    if not counts:
        print(f"  no head kernel here: {head_kernel.unavailable() or 'the kind offers none'}")
        return
    assert 1 in counts and len(counts) > 1, counts
    for n, m, k, steps in ((600, 64, 5, 49), (301, 16, 3, 5), (600, 384, 5, 9), (130, 1, 20, 4), (7, 8, 2, 3)):
        feats_b, labels, w0 = _head_inputs(n, m, k, seed=n + m)
        f, y = compute.tensor(feats_b), compute.labels(labels)
        host = headlib.gradient_steps(w0, feats_b, labels, 0.2, steps)
        for programs in counts:
            program = HeadProgram(compute, ProgramKey(steps, n, k, m + 1, "float32", "cuda"), f, 1, programs)
            program.capture()
            got = compute.host(program.run(w0, f, y, 0.2))
            again = compute.host(program.run(w0, f, y, 0.2))
            np.testing.assert_allclose(got, host, rtol=0, err_msg=f"N={n}, M={m}, K={k}, {programs} programs",
                                       atol=float32_atol(host, fan_in=max(n, m + 1), depth=3 * steps + 1))
            assert np.array_equal(got, again), (n, m, k, programs)
    print(f"  head kernel checked at {', '.join(map(str, counts))} programs")


def check_the_staged_upload_equals_the_arrays_and_the_per_tensor_copy() -> None:
    """``Compute.load`` on cuda stages a round's weights in pinned memory for one transfer: the parameters equal the
    arrays exactly (a conv's channels_last weights included), twice in a row with other arrays, and the forward
    after it equals the forward after one copy per tensor."""
    import torch

    from edgeprof.nn.backbones import build_backbone, input_shape_for
    from edgeprof.nn.compute import PerTensorUpload, resolve

    module = build_backbone("cnn-cifar", input_shape_for("cnn-cifar", "synthetic"))
    compute = resolve("cuda", "auto", module, None)
    module = compute.module(module)
    x = np.random.default_rng(0).random((64, *module.input_shape), dtype=np.float32)
    for seed in (1, 2):
        arrays = [np.random.default_rng(seed * 100 + i).normal(size=tuple(p.shape)).astype(np.float32) * 0.05
                  for i, p in enumerate(module.parameters())]
        compute.load(module, arrays)
        staged = compute.host(compute.forward(module, x))
        for p, a in zip(module.parameters(), arrays):
            assert np.array_equal(compute.host(p), a)
        with torch.no_grad():
            PerTensorUpload(compute.kind, compute.device).load(list(module.parameters()), arrays)
        assert np.array_equal(compute.host(compute.forward(module, x)), staged)
    assert compute._upload[0].describe().startswith("staged")


def check_a_new_tau_or_n_recaptures_the_head_steps() -> None:
    """One capture per (steps, N): the same shapes again capture nothing; each replay gives the numpy head."""
    from edgeprof.nn import head as headlib
    from edgeprof.nn.head_program import HeadPrograms

    compute = _cuda_compute()
    programs = HeadPrograms(compute)
    for n, steps, captures in ((600, 9, 1), (600, 19, 2), (300, 19, 3), (600, 9, 3)):
        programs.prepare(n, 5, 65, steps)
        feats_b, labels, w0 = _head_inputs(n)
        got = compute.host(programs.run(w0, compute.tensor(feats_b), compute.labels(labels), 0.2, steps))
        host = headlib.gradient_steps(w0, feats_b, labels, 0.2, steps)
        np.testing.assert_allclose(got, host, rtol=0,
                                   atol=_tf32_ratio() * float32_atol(host, fan_in=n, depth=3 * steps + 1))
        assert programs.captures == captures, (n, steps, programs.captures)
    assert programs.eager_runs == 0 and programs.builds == 3


def check_the_replayed_head_steps_are_not_slower_than_eager() -> None:
    """tau=100 (99 steps, N=600, M=64, K=5): the replayed graph against the same steps launched eagerly, best of 20
    each, synchronised; printed, and checked loosely (a replay at most 1.5x eager: it should be several times faster)."""
    import time

    from edgeprof.nn.head_program import HeadPrograms

    compute = _cuda_compute()
    feats_b, labels, w0 = _head_inputs(600)
    f, y = compute.tensor(feats_b), compute.labels(labels)
    graphs, eager = HeadPrograms(compute), HeadPrograms(compute)
    graphs.prepare(600, 5, 65, 99)

    def best(programs) -> float:
        times = []
        for _ in range(21):
            compute.sync()
            start = time.perf_counter()
            programs.run(w0, f, y, 0.2, 99)
            compute.sync()
            times.append(time.perf_counter() - start)
        return min(times[1:])

    eagerly, replayed = best(eager), best(graphs)
    tuning = ", ".join(f"{k}: {v * 1e3:.3f} ms" for k, v in next(iter(graphs.tuning.values())).items())
    print(f"  head steps at tau=100 (N=600): eager {eagerly * 1e3:.3f} ms, captured graph {replayed * 1e3:.3f} ms "
          f"({eagerly / replayed:.1f}x); capture set-up {graphs.describe()['capture_setup_s'] * 1e3:.1f} ms; "
          f"replays at set-up: {tuning}")
    assert replayed <= 1.5 * eagerly, (replayed, eagerly)


def check_a_pflego_run_on_the_gpu_replays_its_captured_head_steps_and_reads_back_pinned() -> None:
    """build_federation captures PFLEGO's head steps before any round; the round replays them (no eager run), its
    reply equals the CPU round's, and the flat read-back lands in pinned host memory."""
    import torch

    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = _run_config("pflego", "cuda")
    gpu, cpu = build_federation(cfg, load_clients(cfg)), _federation("pflego", "cpu")
    on_gpu, on_cpu = gpu.client_round(0), cpu.client_round(0)
    programs = gpu.runtime.compute.describe()["programs"]["head_steps"]
    assert programs["captures"] >= 1 and programs["replays"] == 1 and programs["eager_runs"] == 0, programs
    for a, b in zip(on_gpu.payload, on_cpu.payload):
        np.testing.assert_allclose(a, b, rtol=0, atol=_atol(cpu.runtime.backbone, b, 3 * 3 + 2) + 1e-7)
    flat = gpu.runtime.compute.kind.read_back(torch.arange(10, dtype=torch.float32, device="cuda"))
    assert torch.from_numpy(flat).is_pinned() and np.array_equal(flat, np.arange(10, dtype=np.float32))


def check_the_captured_local_steps_replay_equals_eager_and_a_second_round_captures_nothing() -> None:
    """The baselines on cuda: build_federation captures each client's one-step graph (all in one memory pool)
    before any round; two rounds of client 0 replay it tau times each, their replies, losses and personal states
    equal to the same rounds run eagerly (a federation never prepared) to float32 (or TF32) rounding; the second
    round replays without capturing."""
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import build_federation, load_clients
    from edgeprof.nn.step_program import NAME

    for algo, backbone in (("fedavg", "mlp"), ("fedprox", "mlp"), ("fedavg", "cnn-omniglot"),
                           ("fedprox", "cnn-omniglot"), ("ditto", "mlp"), ("fedbabu", "mlp"), ("fedper", "mlp")):
        cfg = _run_config(algo, "cuda", backbone)
        clients = load_clients(cfg)
        graphs, eager = build_federation(cfg, clients), Federation(cfg, clients)
        registry = graphs.runtime.compute.programs(NAME, None)
        prepared = registry.captures
        for round_ in range(2):
            replayed, eagerly = graphs.client_round(0), eager.client_round(0)
            mine, theirs = graphs.personal[0] or [], eager.personal[0] or []
            for a, b in zip([*replayed.payload, *mine], [*eagerly.payload, *theirs]):
                # two rounds of tau = 3 steps, each a forward and a backward through the layers
                np.testing.assert_allclose(a, b, rtol=0, atol=_atol(eager.runtime.backbone, b, 2 * (2 * 3 + 2)) + 1e-7,
                                           err_msg=f"{algo} on {backbone}, round {round_ + 1}")
            assert abs(replayed.loss - eagerly.loss) <= 1e-5 * max(1.0, abs(eagerly.loss)), (algo, replayed.loss,
                                                                                          eagerly.loss)
            graphs.server_step([replayed])
            eager.server_step([eagerly])
        described = registry.describe()
        modes = 2 if algo == "ditto" else 1
        assert prepared == 2 * modes and registry.captures == prepared, (algo, described)  # none in the rounds
        assert (registry.replays, registry.step_replays, registry.eager_runs) == (2 * modes, 2 * 3 * modes, 0), \
            (algo, described)
        assert eager.runtime.compute.programs(NAME, None).eager_runs == 2 * modes
        assert described["memory_pool"] is not None


def check_a_profiled_round_on_the_gpu_marks_its_phase_edges_and_waits_only_at_the_window_edges() -> None:
    """On cuda the profiler's phase edges put CUDA events in the queue instead of waiting for the device: a profiled
    PFLEGO round synchronises the device twice (the window's edges), its three phases are resolved to the moments
    the device reached their edges (each positive, in order inside the window, adding up to at most the window)."""
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.meters.estimate import CpuTimeEstimateMeter
    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = _run_config("pflego", "cuda", "cnn-omniglot")
    federation = build_federation(cfg, load_clients(cfg))
    compute = federation.runtime.compute
    federation.client_round(0)  # warm-up
    kind, syncs = compute.kind, []
    real = type(kind).synchronize
    kind.synchronize = lambda device: (syncs.append(device), real(kind, device))[1]  # this object only
    profiler = Profiler(MeterSet([CpuTimeEstimateMeter()]), device=compute)
    try:
        with profiler.window("client") as win:
            federation.client_round(0, win.phase, federation.settings_for(cfg))
        result = win.result
    finally:
        del kind.synchronize
        profiler.close()
    assert profiler.marks and len(syncs) == 2, syncs
    phases = result.phases
    assert list(phases) == ["cache_forward", "head_steps", "joint_grad"], list(phases)
    assert all(p.wall_s > 0 for p in phases.values()), {n: p.wall_s for n, p in phases.items()}
    assert sum(p.wall_s for p in phases.values()) <= result.wall_s + 1e-6, (phases, result.wall_s)
    import time

    marks = 2000  # what one marker costs the host here (a timing CUDA event made and recorded)
    start = time.perf_counter()
    for _ in range(marks):
        compute.mark()
    mark_us = (time.perf_counter() - start) / marks * 1e6
    compute.sync()
    described = profiler.describe()
    print("  a profiled PFLEGO round on cuda: " + ", ".join(f"{n} {p.wall_s * 1e3:.3f} ms" for n, p in phases.items())
          + f", window {result.wall_s * 1e3:.3f} ms, {len(syncs)} waits for the device; the profiler's own "
          f"{result.overhead_wall_s * 1e6:.0f} us in the window ({described['edges']} edges, "
          f"{described.get('edge_wall_us_mean', 0):.1f} us each); a marker costs the host {mark_us:.2f} us")


def check_the_profiler_records_its_events_again_once_their_window_is_read() -> None:
    """A window's CUDA events go back to the kind once its figures are made (``CudaKind.release``), and the next
    window records those same events again: its phases are valid as the first's, and a reused pair of events times
    the device's work (within the host's wall time of it)."""
    import time

    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.meters.estimate import CpuTimeEstimateMeter
    from edgeprof.nn import cuda as cudalib
    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = _run_config("pflego", "cuda", "cnn-omniglot")
    federation = build_federation(cfg, load_clients(cfg))
    compute = federation.runtime.compute
    federation.client_round(0)  # warm-up
    index = compute.kind.torch_device(compute.device).index
    profiler = Profiler(MeterSet([CpuTimeEstimateMeter()]), device=compute)
    results, used, pools = [], [], []
    try:
        for _ in range(2):
            with profiler.window("client") as win:
                federation.client_round(0, win.phase, federation.settings_for(cfg))
                # the window's events, before its end (no slow meter here: its figures are made as it ends)
                used.append({id(m) for m in (win.start_marker, *win.markers.values())})
            results.append(win.result)
            pools.append({id(e) for e in cudalib._FREE_EVENTS.get(index, [])})
    finally:
        profiler.close()
    assert len(used[0]) == len(used[1]) == 7, used
    assert used[0] <= pools[0] and used[1] <= pools[1], "a read window's events were not given back"
    assert used[1] <= pools[0] and pools[1] == pools[0], "the second window made new events"
    for result in results:
        phases = result.phases
        assert list(phases) == ["cache_forward", "head_steps", "joint_grad"] and all(
            p.wall_s > 0 for p in phases.values()), phases
        assert sum(p.wall_s for p in phases.values()) <= result.wall_s + 1e-6
    # a reused pair times the device's work: 20 products of 4096x4096 matrices between two reused events, against
    # the host's wall time of the same work between two waits for the device (at least the device's own time)
    a = compute.tensor(np.random.default_rng(0).random((4096, 4096), dtype=np.float32))
    compute.sync()
    wall = time.perf_counter()
    first = compute.mark()
    for _ in range(20):
        a @ a
    second = compute.mark()
    compute.sync()
    wall = time.perf_counter() - wall
    device_s = compute.seconds_between(first, second)
    compute.release([first, second])
    assert {id(first), id(second)} <= pools[1], "the pair was not recorded from the released events"
    assert 0.5 * wall <= device_s <= wall, (device_s, wall)
    print(f"  events recorded again: a second window used {len(used[1] & used[0])} of the first's 7; 20 products "
          f"of 4096x4096 took {device_s * 1e3:.3f} ms between two reused events, {wall * 1e3:.3f} ms of the host's")


CHECKS = [check_every_algorithm_runs_a_round_on_the_gpu, check_a_round_on_the_gpu_equals_the_cpu_round,
          check_the_device_head_steps_equal_the_host_head_steps, check_the_gpu_peak_memory_is_reset_per_window,
          check_auto_on_cuda_runs_the_whole_set_with_cudnn_benchmark_in_fp32, check_tf32_is_on_only_when_asked,
          check_the_captured_head_steps_replay_equals_eager_and_the_host_head,
          check_every_split_of_the_captured_head_steps_equals_the_host_head,
          check_every_program_count_of_the_head_kernel_equals_the_host_head,
          check_the_staged_upload_equals_the_arrays_and_the_per_tensor_copy,
          check_a_new_tau_or_n_recaptures_the_head_steps, check_the_replayed_head_steps_are_not_slower_than_eager,
          check_a_pflego_run_on_the_gpu_replays_its_captured_head_steps_and_reads_back_pinned,
          check_the_captured_local_steps_replay_equals_eager_and_a_second_round_captures_nothing,
          check_a_profiled_round_on_the_gpu_marks_its_phase_edges_and_waits_only_at_the_window_edges,
          check_the_profiler_records_its_events_again_once_their_window_is_read]

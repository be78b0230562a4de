"""The Triton source of :mod:`edgeprof.nn.head_kernel` (imported only when the kernel is first launched: importing
this module imports Triton, and decides, by ``TRITON_INTERPRET``, whether its kernels are compiled or interpreted).
"""

import triton
import triton.language as tl


@triton.jit
def _barrier(count_ptr, target):
    """Arrive (after every thread of the program has written what it must) and wait until ``target`` arrivals
    are counted."""
    tl.debug_barrier()
    tl.atomic_add(count_ptr, 1, sem="release", scope="gpu")
    arrived = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
    while arrived < target:
        arrived = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def head_steps(w_ptr, f_ptr, y_ptr, scale_ptr, share_ptr, count_ptr, n, k, width, steps, rows,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, PROGRAMS: tl.constexpr,
               KD: tl.constexpr, SLICE: tl.constexpr):
    # the features' M = width - 1 columns are a tile (BLOCK_D: M's next power of two), the bias column a vector
    # KD = BLOCK_K * BLOCK_D (the update's tile), SLICE = KD // PROGRAMS (each program's part of the sum)
    pid = tl.program_id(0)
    m = width - 1
    offs_k = tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    k_ok = offs_k < k
    d_ok = offs_d < m
    kd = offs_k[:, None] * width + offs_d[None, :]
    kd_ok = k_ok[:, None] & d_ok[None, :]
    w = tl.load(w_ptr + kd, mask=kd_ok, other=0.0)
    wb = tl.load(w_ptr + offs_k * width + m, mask=k_ok, other=0.0)
    scale = tl.load(scale_ptr)
    first = pid * rows
    last = tl.minimum(first + rows, n)
    flat_kd = offs_k[:, None] * BLOCK_D + offs_d[None, :]
    for s in range(steps):
        grad = tl.zeros((BLOCK_K, BLOCK_D), dtype=tl.float32)
        grad_b = tl.zeros((BLOCK_K,), dtype=tl.float32)
        for start in range(first, last, BLOCK_N):
            r_idx = start + offs_n
            r_ok = r_idx < last
            f = tl.load(f_ptr + r_idx[:, None] * width + offs_d[None, :], mask=r_ok[:, None] & d_ok[None, :],
                        other=0.0)
            fb = tl.load(f_ptr + r_idx * width + m, mask=r_ok, other=0.0)
            logits = tl.dot(f, tl.trans(w), input_precision="ieee") + fb[:, None] * wb[None, :]
            logits = tl.where(k_ok[None, :], logits, float("-inf"))
            p = tl.exp(logits - tl.max(logits, axis=1)[:, None])
            p = p / tl.sum(p, axis=1)[:, None]
            y = tl.load(y_ptr + r_idx, mask=r_ok, other=0)
            residual = p - (offs_k[None, :] == y[:, None]).to(tl.float32)
            residual = tl.where(r_ok[:, None] & k_ok[None, :], residual, 0.0)
            grad += tl.dot(tl.trans(residual), f, input_precision="ieee")
            grad_b += tl.sum(residual * fb[:, None], axis=0)
        if PROGRAMS > 1:
            # shares: [parity][program][KD + BLOCK_K]; sums: [parity][KD + BLOCK_K] (the update's bias last)
            parity = s % 2
            own = share_ptr + (parity * PROGRAMS + pid) * (KD + BLOCK_K)
            tl.store(own + flat_kd, grad)
            tl.store(own + KD + offs_k, grad_b)
            _barrier(count_ptr, 2 * PROGRAMS * s + PROGRAMS)
            # each program sums one slice of the shares over the programs, in program order (deterministic)
            sums = share_ptr + 2 * PROGRAMS * (KD + BLOCK_K) + parity * (KD + BLOCK_K)
            offs_q = tl.arange(0, PROGRAMS)
            offs_s = pid * SLICE + tl.arange(0, SLICE)
            shares = share_ptr + (parity * PROGRAMS + offs_q[:, None]) * (KD + BLOCK_K) + offs_s[None, :]
            tl.store(sums + offs_s, tl.sum(tl.load(shares, cache_modifier=".cg"), axis=0))
            if pid == 0:
                bias = share_ptr + (parity * PROGRAMS + offs_q[:, None]) * (KD + BLOCK_K) + KD + offs_k[None, :]
                tl.store(sums + KD + offs_k, tl.sum(tl.load(bias, cache_modifier=".cg"), axis=0))
            _barrier(count_ptr, 2 * PROGRAMS * (s + 1))
            grad = tl.load(sums + flat_kd, cache_modifier=".cg")
            grad_b = tl.load(sums + KD + offs_k, cache_modifier=".cg")
        w = w - scale * grad
        wb = wb - scale * grad_b
    if pid == 0:
        tl.store(w_ptr + kd, w, mask=kd_ok)
        tl.store(w_ptr + offs_k * width + m, wb, mask=k_ok)

#!/usr/bin/env python3
"""CPU model of the precision of the bf16-logits (lg16) FLCE variants, next to
the fp32-logits ones, on the GPU test cases of tests/flce/test_flce_gpu.cpp
(shapes and options copied; inputs drawn the same way in distribution, not in
bits: X ~ N(0,1), W ~ N(0, std^2/D), bf16-rounded; a logit offset through
column 0). A model, not a measurement: GEMMs in float64 then rounded to fp32
(the kernels accumulate in fp32), the row pass as row_kernel_lg16 computes it
(bf16 logits; the target and the two best columns exact; sum z from bf16), the
gradient rounded to bf16, dX and dW from it in float64. Errors are the tests'
relative norm errors against float64 on the same rounded inputs; the tests'
tolerances for bf16 variants: loss and LSE 1e-4, dX and dW 1e-2.

Usage: python3 experiments/flce_lg16_emulation.py   (needs numpy; ~1 min)
"""
import sys

import numpy as np


def bf16(a):
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def rel(a, b):
    nb = np.linalg.norm(b)
    return np.linalg.norm(a - b) / nb if nb else np.linalg.norm(a)


def case(seed, N, D, V, std=2.0, offset=0.0, eps=0.0, zs=0.0, cap=0.0, go=1.0, ign=0.05, red="mean"):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)).astype(np.float32)
    W = (rng.standard_normal((V, D)) * std / np.sqrt(D - 1 if offset else D)).astype(np.float32)
    if offset:
        X[:, 0] = np.where(rng.random(N) < 0.5, -1.0, 1.0)
        W[:, 0] = offset
    X, W = bf16(X).astype(np.float64), bf16(W).astype(np.float64)
    y = rng.integers(0, V, N)
    y[rng.random(N) < ign] = -100
    valid = y >= 0
    nv = int(valid.sum())
    rows = np.arange(N)
    dl = rng.standard_normal(N) if red == "none" else None
    coef = np.where(valid, go, 0.0)
    if red == "mean":
        coef = coef / max(nv, 1)
    if red == "none":
        coef = coef * dl

    def capf(z):
        return cap * np.tanh(z / cap) if cap else z

    def grad(Z, lse):
        P = np.exp(Z - lse[:, None]) * (1 + 2 * zs * lse)[:, None] - eps / V
        P[rows[valid], y[valid]] -= 1 - eps
        if cap:
            P *= 1 - (Z / cap) ** 2
        return P * coef[:, None]

    def lse_of(Z):
        m = Z.max(1)
        return m + np.log(np.exp(Z - m[:, None]).sum(1))

    def loss_of(lse, zt, sz):
        return np.where(valid, lse - (1 - eps) * zt - eps / V * sz + zs * lse ** 2, 0.0)

    Z = capf(X @ W.T)  # float64 reference
    ref_lse = lse_of(Z)
    ref_loss = loss_of(ref_lse, Z[rows, np.maximum(y, 0)], Z.sum(1))
    Gr = grad(Z, ref_lse)
    ref = (ref_loss, ref_lse, Gr @ W, Gr.T @ X)
    Z32 = capf((X @ W.T).astype(np.float32).astype(np.float64)).astype(np.float32).astype(np.float64)
    out = {}
    # fp32 logits (today's variants)
    lse = lse_of(Z32)
    G = bf16(grad(Z32, lse)).astype(np.float64)
    out["fp32"] = (loss_of(lse, Z32[rows, np.maximum(y, 0)], Z32.sum(1)), lse, G @ W, G.T @ X)
    # bf16 logits (lg16): cuBLASLt rounds to bf16, softcap pass on bf16
    Zb = bf16((X @ W.T).astype(np.float32)).astype(np.float64)
    if cap:
        Zb = bf16(capf(Zb)).astype(np.float64)
    order = np.argsort(-Zb, axis=1, kind="stable")[:, :2]  # the two best, ties to the first column
    Zu = Zb.copy()
    Zu[rows[:, None], order] = Z32[rows[:, None], order]
    zt = Z32[rows, np.maximum(y, 0)]
    Zu[rows[valid], y[valid]] = zt[valid]
    lse = lse_of(Zu)
    G = bf16(grad(Zu, lse)).astype(np.float64)
    out["lg16"] = (loss_of(lse, zt, Zb.sum(1)), lse, G @ W, G.T @ X)
    res = {}
    for k, (loss, lse, dX, dW) in out.items():
        if red == "none":
            el = rel(loss, ref[0])
        else:
            t, tr = loss.sum(), ref[0].sum()
            if red == "mean":
                t, tr = t / max(nv, 1), tr / max(nv, 1)
            el = abs(t - tr) / abs(tr) if tr else abs(t)
        cols = slice(1, None) if offset else slice(None)
        res[k] = (el, rel(lse, ref[1]), rel(dX[:, cols], ref[2][:, cols]), rel(dW, ref[3]))
    return res


CASES = [
    ("single_row_prime_V", dict(N=1, D=64, V=1009, ign=0.0)),
    ("all_options_mean", dict(N=301, D=200, V=4099, eps=0.1, zs=1e-3, cap=15.0, go=0.7, ign=0.2)),
    ("reduction_none", dict(N=130, D=136, V=2053, red="none")),
    ("wide_logits", dict(N=96, D=128, V=3001, std=300.0)),
    ("large_logits", dict(N=96, D=128, V=3001, offset=1e4)),
    ("several_chunks (100 of 2600 rows)", dict(N=100, D=64, V=200003, eps=0.05)),
    ("determinism (300 of 1500 rows)", dict(N=300, D=256, V=32003)),
]


def main():
    seeds = [int(s) for s in sys.argv[1:]] or [1, 2, 3]
    print("| case | logits | loss | LSE | dX | dW | within 1e-4 / 1e-2 |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, kw in CASES:
        runs = [case(s, **kw) for s in seeds]
        for k in ("fp32", "lg16"):
            worst = np.max([r[k] for r in runs], axis=0)
            ok = worst[0] <= 1e-4 and worst[1] <= 1e-4 and worst[2] <= 1e-2 and worst[3] <= 1e-2
            print(f"| {name} | {k} | {worst[0]:.1e} | {worst[1]:.1e} | {worst[2]:.1e} | {worst[3]:.1e} | "
                  f"{'yes' if ok else 'NO'} |")
    print(f"\n(worst of seeds {seeds})")


if __name__ == "__main__":
    main()

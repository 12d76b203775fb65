"""The forward kernels of detfuse and FlashAttention-4 under ncu at one clock (issue 16).

Python-timed ratios mix kernel speed, host time and the clocks a kernel
sustains under load. Run under ncu with locked clocks to compare the kernels
themselves, per clock:
  ncu --clock-control base --nvtx --nvtx-include "measure/" \
      --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum \
      python3 experiments/attention_fwd_clock.py [B,H,Hkv,S,d,causal ...]
Each row: three warm-up calls of each implementation (FA4 compiles at its
first), then one call of each inside the NVTX range "measure".
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import peers_site  # noqa: E402,F401  (the peers' site folder first on sys.path)
import torch  # noqa: E402


def main():
    rows = sys.argv[1:] or ["4,32,32,4096,128,0", "4,32,32,4096,128,1"]
    if not torch.cuda.is_available():
        print("attention_fwd_clock: no CUDA device; nothing run")
        return 0
    import detfuse.torch as dt
    from flash_attn.cute import flash_attn_func
    impls = {
        "detfuse": lambda q, k, v, c: dt.attention(q, k, v, causal=c),
        "fa4": lambda q, k, v, c: flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=c),
    }
    for row in rows:
        B, H, Hkv, S, d, causal = (int(s) for s in row.split(","))
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, generator=g)
        with torch.no_grad():
            for name, f in impls.items():
                for _ in range(3):
                    f(q, k, v, bool(causal))
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push(f"measure {row} {name}")
                f(q, k, v, bool(causal))
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
                print(f"{row} {name}: ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

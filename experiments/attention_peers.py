#!/usr/bin/env python3
"""detfuse attention beside its peers, in one process on one GPU.

Measured per row (B, H, Hkv, S, d, causal), bf16, Sq = Sk = S:
  - detfuse through Python (detfuse.torch.attention): the heuristic's choice and
    any variants named with --variant (forward and backward by that variant);
  - FlashAttention-4 (flash_attn.cute.flash_attn_func, the flash-attn-4 wheel)
    with deterministic=True and deterministic=False;
  - PyTorch SDPA with the cuDNN backend and with the FlashAttention-2 backend.
Each peer is optional: one that does not import or refuses a row is reported
with its error text, and the script goes on.

Metrics: forward and forward+backward TFLOP/s (FLOP conventions of DESIGN.md:
forward 4*B*H*Sq*Sk*d, half when causal; backward 2.5x forward; so
forward+backward is 3.5x forward, whatever a kernel recomputes), the number of
distinct dQ and dK digests over --digest-runs backward runs on the same inputs
(1 means bitwise reproducible on those runs), and the peak memory the
forward+backward allocates beyond its inputs and outputs
(torch.cuda.max_memory_allocated after reset, minus what was allocated
before the call and minus the gradients it returns).

Timing: CUDA events around each call, --warmup calls first, the median of
--reps. Inputs: random normal, fresh per row (never zeros). Before timing, each
implementation's forward is checked against a float32 SDPA reference on the
same inputs (relative L2 error printed; a failing check marks the row).

Sustained load (--sustain S): after a row's other timings, each implementation
runs fwd+bwd back to back for S seconds after --cool seconds idle; the first
calls' ms and the ms it settles to say what the GPU's power limit does to it
(the clock, power and reasons: an nvidia-smi log summarised per --phases line by
experiments/smi_summary.py; experiments/device/s42.sh PART=power).

Usage: attention_peers.py [--rows issue|all|B,H,Hkv,S,d,causal ...] [--variant NAME ...]
                          [--json FILE] [--reps N] [--warmup N] [--digest-runs N]
                          [--sustain S [--cool S] [--phases FILE]]
Writes one JSON object per (row, implementation) to --json as it goes (so a
run cut short keeps what it measured) and prints a markdown table last.
"""
import argparse
import datetime
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import peers_site  # noqa: E402  (puts experiments/peers/install.sh's site folder first on sys.path)

PEERS_SITE = peers_site.activate()
from measure import profile_interleaved, sustained_summary, time_interleaved, time_ms, time_sustained  # noqa: E402  (experiments/peers/measure.py)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# The issue's five rows, then the two it adds (d=128 non-causal GQA 32/8 and
# 2,32,8,8192,128 causal): (B, H, Hkv, S, d, causal).
ISSUE_ROWS = [
    (4, 32, 32, 4096, 128, False),
    (4, 32, 32, 4096, 128, True),
    (4, 32, 8, 4096, 128, True),
    (4, 32, 32, 4096, 64, True),
    (1, 16, 16, 8192, 128, True),
    (4, 32, 8, 4096, 128, False),
    (2, 32, 8, 8192, 128, True),
]


def parse_row(text):
    parts = text.split(",")
    if len(parts) != 6:
        raise argparse.ArgumentTypeError(f"row {text!r}: expected B,H,Hkv,S,d,causal (causal 0 or 1)")
    B, H, Hkv, S, d, c = (int(x) for x in parts)
    if c not in (0, 1):
        raise argparse.ArgumentTypeError(f"row {text!r}: causal must be 0 or 1")
    return (B, H, Hkv, S, d, bool(c))


def flops_forward(B, H, S, d, causal):
    f = 4.0 * B * H * S * S * d
    return f / 2 if causal else f


def tensor_digest(t):
    return hashlib.blake2b(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes(), digest_size=16).hexdigest()


# ----------------------------------------------------------------- implementations
# Each maker returns fwd(q, k, v) -> O, all tensors in [B, H, S, d] layout, or
# raises ImportError / RuntimeError with the reason it cannot run.

def make_detfuse(variant):
    """variant: a name (its forward and backward), or FWD+BWD: a forward-only
    variant's forward with another variant's backward."""
    import detfuse.torch as dt
    fwd_name, _, bwd_name = variant.partition("+")

    def fwd(q, k, v, causal):
        return dt.attention(q, k, v, causal=causal, variant=fwd_name, backward_variant=bwd_name or None)
    return fwd


def make_fa4(deterministic):
    from flash_attn.cute import flash_attn_func  # flash-attn-4 (CuTe DSL)

    def fwd(q, k, v, causal):
        # FA4 takes [B, S, H, d]; transpose views in and out (the copies are
        # part of neither the kernel nor the timing difference that matters,
        # but they are timed: the same layout change a user would write).
        o = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal,
                            deterministic=deterministic)
        if isinstance(o, tuple):
            o = o[0]
        return o.transpose(1, 2)
    return fwd


def make_sdpa(backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}[backend_name]

    def fwd(q, k, v, causal):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    return fwd


def reference_forward(q, k, v, causal):
    """float32 SDPA (math backend) on upcast inputs; Sq == Sk so top-left and
    bottom-right causal masks agree."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        G = q.shape[1] // k.shape[1]
        kf = k.float().repeat_interleave(G, dim=1)
        vf = v.float().repeat_interleave(G, dim=1)
        return F.scaled_dot_product_attention(q.float(), kf, vf, is_causal=causal)


def rel_err(a, ref):
    return float((a.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def measure(name, fwd, row, args, ref_cache):
    B, H, Hkv, S, d, causal = row
    gen = torch.Generator(device="cuda").manual_seed(1234)
    q = torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    do = torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    rec = {"impl": name, "B": B, "H": H, "Hkv": Hkv, "S": S, "d": d, "causal": causal}

    # Correctness first: the forward against float32 on a 1-batch, few-head
    # slice when the row is large (the float32 reference of the whole row
    # would not fit in reasonable memory/time).
    with torch.no_grad():
        o = fwd(q, k, v, causal)
        torch.cuda.synchronize()
        key = (row,)
        if key not in ref_cache:
            hs = min(H, 4 * (H // Hkv))  # whole GQA groups
            ref_cache[key] = (hs, reference_forward(q[:1, :hs], k[:1, :hs // (H // Hkv)], v[:1, :hs // (H // Hkv)],
                                                    causal))
        hs, ref = ref_cache[key]
        rec["fwd_rel_err"] = rel_err(o[:1, :hs], ref)
        rec["fwd_ok"] = bool(rec["fwd_rel_err"] < 2e-2 and torch.isfinite(o).all().item())
        del o

    def run_fwd():
        with torch.no_grad():
            fwd(q, k, v, causal)

    def run_fwd_bwd():
        q.grad = k.grad = v.grad = None
        fwd(q, k, v, causal).backward(do)

    ff = flops_forward(B, H, S, d, causal)
    t_f, _ = time_ms(run_fwd, args.warmup, args.reps)
    t_fb, samples = time_ms(run_fwd_bwd, args.warmup, args.reps)
    rec["fwd_ms"], rec["fwd_tflops"] = t_f, ff / t_f / 1e9
    rec["fwd_bwd_ms"], rec["fwd_bwd_tflops"] = t_fb, 3.5 * ff / t_fb / 1e9
    rec["fwd_bwd_samples_ms"] = samples

    dq, dk = set(), set()
    for _ in range(args.digest_runs):
        run_fwd_bwd()
        torch.cuda.synchronize()
        dq.add(tensor_digest(q.grad))
        dk.add(tensor_digest(k.grad))
    rec["dq_digests"], rec["dk_digests"] = len(dq), len(dk)

    q.grad = k.grad = v.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run_fwd_bwd()
    torch.cuda.synchronize()
    grads = sum(t.grad.numel() * t.grad.element_size() for t in (q, k, v))
    rec["peak_extra_mib"] = (torch.cuda.max_memory_allocated() - base - grads) / 2**20
    q.grad = k.grad = v.grad = None
    return rec, run_fwd, run_fwd_bwd


def host_profile(name, row, step, calls):
    """`calls` calls of step, then as many under cProfile, the GPU left to run
    behind (a synchronise before each loop): the host's time per call (while
    the queue does not fill, a call's host time, not the GPU's) and the
    functions with the most own time."""
    import cProfile
    import io
    import pstats
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    plain_ms = (time.perf_counter() - t0) * 1e3 / calls
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(calls):
        step()
    prof.disable()
    host_ms = (time.perf_counter() - t0) * 1e3 / calls
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
    print(f"{row} {name} host time per fwd+bwd call (the GPU behind): {plain_ms:.3f} ms; under cProfile "
          f"{host_ms:.3f} ms", flush=True)
    for line in buf.getvalue().splitlines():
        if line.strip() and not line.startswith(("   Ordered", "         ")):
            print(f"    {line[:150]}", flush=True)


def phase(path, name):
    """One line of smi_summary.py's phases file: local time to the ms, then the phase's name."""
    if path:
        with open(path, "a") as f:
            f.write(datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:23] + " " + name + "\n")


def sustain_row(row, steps, args, out):
    """Each implementation's fwd+bwd under sustained load (--sustain s after --cool s idle), in turn; a line per
    implementation, a JSON line per row, phases for smi_summary.py."""
    tag = ",".join(str(int(x)) for x in row)
    recs = {}
    for n, st in steps.items():
        time.sleep(args.cool)
        phase(args.phases, f"sustain {tag} {n}")
        recs[n] = sustained_summary(time_sustained(st[1], args.sustain))
        phase(args.phases, "idle")
        r = recs[n]
        print(f"{row} {n} sustained {args.sustain:g} s: {r['calls']} fwd+bwd calls, first {r['first_ms']:.3f} ms, "
              f"settled {r['settled_ms']:.3f} ms, mean {r['mean_ms']:.3f} ms", flush=True)
    if out:
        out.write(json.dumps({"row": list(row), "sustained": recs, "seconds": args.sustain, "cool": args.cool}) + "\n")
        out.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="+", default=["issue"],
                    help="'issue' (the seven rows), or B,H,Hkv,S,d,causal ...")
    ap.add_argument("--variant", action="append", default=[],
                    help="detfuse variant name to measure besides the heuristic (repeatable); FWD+BWD: a "
                         "forward-only variant's forward with BWD's backward")
    ap.add_argument("--impl", action="append", default=[],
                    help="only these implementations (detfuse, fa4-det, fa4, cudnn, fa2; repeatable)")
    ap.add_argument("--json", default=None, help="append one JSON line per measurement here")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--digest-runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="after the interleaved timing, 4 interleaved fwd+bwd passes under torch.profiler: per "
                         "implementation the GPU busy time, the host's lead and tail per call")
    ap.add_argument("--interleave", type=int, default=None,
                    help="after a row's implementations are measured apart, this many passes timing each once, "
                         "the order shuffled per pass (measure.py's time_interleaved; default --reps; 0: off): "
                         "the table's 'ilv' columns, the ratios' basis")
    ap.add_argument("--host-hidden-ms", type=float, default=0.0,
                    help="after the interleaved timing, each implementation's fwd+bwd timed again (--reps) with a GPU "
                         "spin of this many ms queued before the first event (measure.py's time_ms): what the "
                         "host's launch time adds to the timed window is then hidden; 0: off")
    ap.add_argument("--cprofile", type=int, default=0,
                    help="this many fwd+bwd calls of each implementation under cProfile (after a synchronise; the "
                         "GPU runs behind): the host's Python time per call, top functions by own time; 0: off")
    ap.add_argument("--sustain", type=float, default=0.0,
                    help="after a row's other timings, each implementation's fwd+bwd back to back for this many "
                         "seconds (measure.py's time_sustained), --cool seconds of idle GPU before each: the first "
                         "calls' and the settled ms per call (the clock a kernel holds under the power limit); 0: off")
    ap.add_argument("--cool", type=float, default=3.0, help="idle seconds before each --sustain run")
    ap.add_argument("--phases", default=None,
                    help="append a 'YYYY/MM/DD HH:MM:SS.mmm name' line at each --sustain run's start and end (the "
                         "phases file of experiments/smi_summary.py, against an nvidia-smi log of the same run)")
    args = ap.parse_args()
    if args.reps < 1 or args.warmup < 0 or args.digest_runs < 1:
        ap.error("--reps and --digest-runs must be >= 1, --warmup >= 0")
    if args.sustain < 0 or args.cool < 0:
        ap.error("--sustain and --cool must be >= 0")
    rows = []
    for r in args.rows:
        rows.extend(ISSUE_ROWS if r == "issue" else [parse_row(r)])
    if not torch.cuda.is_available():
        print("attention_peers: no CUDA device", file=sys.stderr)
        return 2

    makers = [("detfuse", lambda: make_detfuse("heuristic"))]
    makers += [(f"detfuse:{v}", (lambda v=v: make_detfuse(v))) for v in args.variant]
    makers += [("fa4-det", lambda: make_fa4(True)), ("fa4", lambda: make_fa4(False)),
               ("cudnn", lambda: make_sdpa("cudnn")), ("fa2", lambda: make_sdpa("fa2"))]
    if args.impl:
        makers = [(n, m) for n, m in makers if n in args.impl or n.split(":")[0] in args.impl]
    impls = []
    for name, make in makers:
        try:
            impls.append((name, make(), None))
        except Exception as e:  # an absent peer is a finding, not a crash
            impls.append((name, None, f"{type(e).__name__}: {e}".splitlines()[0][:160]))

    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    print(f"# peers site: {PEERS_SITE or 'none (experiments/peers/install.sh installs one)'}", flush=True)
    try:
        import detfuse
        print(f"# detfuse {detfuse.__version__} from {detfuse.library_path()}", flush=True)
    except Exception as e:
        print(f"# detfuse: {e}", flush=True)
    out = open(args.json, "a") if args.json else None
    results, ref_cache = [], {}
    n_ilv = args.reps if args.interleave is None else args.interleave
    for row in rows:
        steps, row_recs = {}, {}
        for name, fwd, err in impls:
            t0 = time.time()
            if fwd is None:
                rec = {"impl": name, "row": row, "error": err}
            else:
                try:
                    rec, run_f, run_fb = measure(name, fwd, row, args, ref_cache)
                    steps[name] = (run_f, run_fb)
                    row_recs[name] = rec
                except Exception as e:
                    rec = {"impl": name, "row": row, "error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
                torch.cuda.empty_cache()
            rec["row"] = list(row)
            rec["seconds"] = round(time.time() - t0, 1)
            results.append(rec)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            if "error" in rec:
                print(f"{row} {name}: {rec['error']}", flush=True)
            else:
                print(f"{row} {name}: fwd {rec['fwd_tflops']:.1f} fwd+bwd {rec['fwd_bwd_tflops']:.1f} TFLOP/s "
                      f"dQ digests {rec['dq_digests']} err {rec['fwd_rel_err']:.1e} ({rec['seconds']} s)", flush=True)
        if n_ilv > 0 and len(steps) > 1:
            # Every implementation once per pass, the order shuffled per pass:
            # the GPU's clock and power state falls on all alike (FA4's forward
            # moved 10-12% between two runs of one call in session 12).
            ff = flops_forward(*row[:2], row[3], row[4], row[5])
            for key, idx, mult in (("ilv_fwd", 0, 1.0), ("ilv_fwd_bwd", 1, 3.5)):
                timed = time_interleaved({n: st[idx] for n, st in steps.items()}, args.warmup, n_ilv)
                for n, (med, samples) in timed.items():
                    row_recs[n][key + "_ms"], row_recs[n][key + "_tflops"] = med, mult * ff / med / 1e9
            if args.profile:
                prof = profile_interleaved({n: st[1] for n, st in steps.items()}, 4)
                for n, r in prof.items():
                    row_recs[n]["ilv_profile"] = r
                    print(f"{row} {n} fwd+bwd under the profiler ({r['calls']} calls, medians ms): window "
                          f"{r.get('window', 0):.3f}, GPU busy {r.get('busy', 0):.3f}, lead {r.get('lead', 0):.3f}, "
                          f"tail {r.get('tail', 0):.3f}", flush=True)
                    for kname, kms in list(r["kernels_ms"].items())[:8]:  # GPU ms per call, largest first
                        print(f"    {kms:8.3f} ms  {kname[:110]}", flush=True)
            if args.host_hidden_ms > 0:
                for n, st in steps.items():
                    med, _ = time_ms(st[1], 1, args.reps, args.host_hidden_ms)
                    row_recs[n]["host_hidden_fwd_bwd_ms"] = med
                print(f"{row} fwd+bwd ms, host hidden ({args.host_hidden_ms:g} ms spin) / interleaved: " + ", ".join(
                    f"{n} {row_recs[n]['host_hidden_fwd_bwd_ms']:.3f} / {row_recs[n]['ilv_fwd_bwd_ms']:.3f}"
                    for n in steps), flush=True)
            if args.cprofile > 0:
                for n, st in steps.items():
                    host_profile(n, row, st[1], args.cprofile)
            print(f"{row} interleaved ({n_ilv} passes) fwd / fwd+bwd TFLOP/s: " + ", ".join(
                f"{n} {row_recs[n]['ilv_fwd_tflops']:.1f} / {row_recs[n]['ilv_fwd_bwd_tflops']:.1f}" for n in steps),
                flush=True)
            if out:
                out.write(json.dumps({"row": list(row), "interleaved": {
                    n: {k: row_recs[n][k] for k in ("ilv_fwd_ms", "ilv_fwd_bwd_ms", "ilv_profile") if k in row_recs[n]}
                    for n in steps}}) + "\n")
                out.flush()
        if args.sustain > 0 and steps:
            sustain_row(row, steps, args, out)
        del steps
        torch.cuda.empty_cache()
        ref_cache.clear()

    print("\nilv: interleaved with the row's other implementations (the ratios' basis); apart: timed alone")
    print("| B,H,Hkv,S,d,causal | impl | fwd ilv | fwd+bwd ilv | fwd apart | fwd+bwd apart | fwd+bwd ms | "
          "dQ/dK digests | peak extra MiB | fwd err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        row = ",".join(str(int(x)) for x in r["row"])
        if "error" in r:
            print(f"| {row} | {r['impl']} | error: {r['error'][:80]} | | | | | | | |")
            continue
        flag = "" if r["fwd_ok"] else " (FAILED check)"
        ilv = " | ".join(f"{r[k]:.1f}" if k in r else "" for k in ("ilv_fwd_tflops", "ilv_fwd_bwd_tflops"))
        print(f"| {row} | {r['impl']} | {ilv} | {r['fwd_tflops']:.1f} | {r['fwd_bwd_tflops']:.1f} | {r['fwd_bwd_ms']:.3f} | "
              f"{r['dq_digests']}/{r['dk_digests']} | {r['peak_extra_mib']:.0f} | {r['fwd_rel_err']:.1e}{flag} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

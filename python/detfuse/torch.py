"""PyTorch front end: detfuse's fused linear + cross-entropy and exact
attention (see ``attention``'s docstring) as torch.library custom ops
(torch.ops.detfuse.*, detfuse/_ops.py) with fake implementations and autograd
formulas, so torch.compile traces them (fullgraph=True included). The ctypes
layer (_lib.py) runs underneath on the current CUDA stream. ``import
detfuse.torch`` works without torch (calls then raise ImportError saying so);
with torch installed it registers the ops.

Memory modes (``grad_in_forward``):
  True (default for reduction 'mean'/'sum'): the forward computes loss, dX and
    dW in one fused pass (mode forward_backward) and holds dX, dW until
    backward, which only scales them by the upstream gradient (Liger's way:
    one pass over the vocabulary, holds N*D + V*D gradient elements).
  False: the forward computes loss and the per-row LSE only and saves x,
    weight, target, LSE; backward runs the backward mode (a second pass over
    the vocabulary; the least memory between forward and backward).
  reduction='none' always uses the second way (the per-row upstream gradient
  is only known in backward).

Inputs: x [..., D] and weight [V, D] (nn.Linear layout) in bfloat16 or
float32, the same dtype, on one CUDA device; target [...] int64 with x's
leading shape (flattened like F.cross_entropy). Non-contiguous inputs are
copied with .contiguous() (a copy: pass contiguous tensors to avoid it).
Gradients come back in the input dtype. The loss is float32. Work runs on the
current CUDA stream; workspace comes from PyTorch's caching allocator.
"""
from __future__ import annotations

import ctypes
import os
from typing import Optional

from . import _lib
from . import _ops as _ops_mod

_cache = {}


def _torch():
    try:
        import torch  # noqa: WPS433 (lazy on purpose)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("detfuse.torch needs PyTorch (pip install torch); `import detfuse` works without it") from e
    return torch


def _dtype_code(torch, dt, name):
    if dt == torch.bfloat16:
        return _lib.DTYPE_BF16
    if dt == torch.float32:
        return _lib.DTYPE_F32
    raise TypeError(f"{name}: dtype must be torch.bfloat16 or torch.float32, got {dt}")


def _check_inputs(x, weight, target, bias, reduction):
    """All checks before the library is called (types, bias, dtypes, shapes,
    reduction; _check_devices after the options); returns contiguous 2-D tensors."""
    torch = _torch()
    for name, t in (("x", x), ("weight", weight), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: must be a torch.Tensor, got {type(t).__name__}")
    if bias is not None:
        raise ValueError("bias: not supported by detfuse's fused kernels (pass bias=None; fold a bias into weight "
                         "by appending a ones column to x and the bias as a column of weight)")
    _dtype_code(torch, x.dtype, "x")
    if weight.dtype != x.dtype:
        raise TypeError(f"weight: dtype must equal x's ({x.dtype}), got {weight.dtype}")
    if target.dtype != torch.int64:
        raise TypeError(f"target: dtype must be torch.int64 (class indices), got {target.dtype}; use target.long()")
    if x.dim() < 1:
        raise ValueError("x: must have shape [..., D], got a 0-d tensor")
    if weight.dim() != 2:
        raise ValueError(f"weight: must have shape [V, D] (nn.Linear layout), got {tuple(weight.shape)}")
    D = x.shape[-1]
    if weight.shape[1] != D:
        raise ValueError(f"weight: shape {tuple(weight.shape)} does not match x's last dimension D={D} "
                         f"(weight must be [V, D])")
    if tuple(target.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"target: shape must be x.shape[:-1] = {tuple(x.shape[:-1])}, got {tuple(target.shape)}")
    if reduction not in _lib.REDUCTIONS:
        raise ValueError(f"reduction: must be 'mean', 'sum' or 'none', got {reduction!r}")
    x2 = x.reshape(-1, D).contiguous()
    return x2, weight.contiguous(), target.reshape(-1).contiguous()


def _check_main_grad(main_grad, weight, reduction, grad_in_forward):
    torch = _torch()
    if not isinstance(main_grad, torch.Tensor):
        raise TypeError(f"main_grad: must be a torch.Tensor (fp32 [V, D]) or None, got {type(main_grad).__name__}")
    if main_grad.dtype != torch.float32:
        raise TypeError(f"main_grad: dtype must be torch.float32 (dW is summed in fp32), got {main_grad.dtype}")
    if tuple(main_grad.shape) != tuple(weight.shape):
        raise ValueError(f"main_grad: shape must be weight's {tuple(weight.shape)}, got {tuple(main_grad.shape)}")
    if main_grad.device != weight.device:
        raise ValueError(f"main_grad: must be on weight's device {weight.device}, got {main_grad.device}")
    if not main_grad.is_contiguous():
        raise ValueError("main_grad: must be contiguous (it is written in place)")
    if reduction == "none":
        raise ValueError("main_grad: needs reduction 'mean' or 'sum' (with 'none' the per-row upstream gradient is "
                         "known only in the backward)")
    if not grad_in_forward:
        raise ValueError("main_grad: dW is summed into it in the forward; grad_in_forward=False is not supported with it")


def _check_devices(x, weight, target):
    # "meta" tensors run the ops' fake implementations (shapes only: tracing,
    # tests without a GPU); everything else must be on CUDA.
    for name, t in (("x", x), ("weight", weight), ("target", target)):
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(f"{name}: is on {t.device}; detfuse runs on CUDA devices only (move it with .cuda())")
    if not (x.device == weight.device == target.device):
        raise ValueError(f"x, weight, target: must be on one device, got {x.device}, {weight.device}, {target.device}")


def _problem(x2, weight, reduction, ignore_index, label_smoothing, z_loss, softcap):
    """The checked C problem, kept per shape, dtype and options (with their
    types: the library's type checks are not skipped by an equal value of
    another type) once it passed: no ctypes validation per call."""
    opts = (reduction, ignore_index, label_smoothing, z_loss, softcap)
    key = ("checked", tuple(x2.shape), int(weight.shape[0]), x2.dtype) + tuple((type(o), o) for o in opts)
    return _ops_mod._cached(_ops_mod._problems, key, lambda: _make_problem(x2, weight, *opts))


def _make_problem(x2, weight, reduction, ignore_index, label_smoothing, z_loss, softcap):
    """A new C problem, checked by the library."""
    torch = _torch()
    p = _lib.make_problem(int(x2.shape[0]), int(x2.shape[1]), int(weight.shape[0]),
                          dtype=_dtype_code(torch, x2.dtype, "x"), grad_dtype=_dtype_code(torch, x2.dtype, "x"),
                          ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
                          z_loss=z_loss, softcap=softcap, grad_output=1.0)
    _lib.validate(p)  # the library's own checks (no GPU), before any launch
    return p


def _ptr(t) -> Optional[int]:
    return None if t is None else t.data_ptr()


def _compiling() -> bool:
    """True while torch.compile (dynamo) traces: then the ctypes checks are
    left to the custom ops, which run them when the graph runs."""
    torch = _torch()
    comp = getattr(torch, "compiler", None)
    return bool(comp is not None and hasattr(comp, "is_compiling") and comp.is_compiling())


def _ops():
    torch = _torch()
    _ops_mod.register()
    return torch.ops.detfuse


def _db_arg(db, what="db"):
    if db is None:
        return ""
    if not isinstance(db, (str, os.PathLike)):
        raise TypeError(f"{what}: must be a path, got {type(db).__name__}")
    return os.fspath(db)


def _check_variant(variant, what):
    if not isinstance(variant, str):
        raise TypeError(f"{what}: must be a str ('tuned', 'heuristic' or a variant name), got {type(variant).__name__}")


def linear_cross_entropy(x, weight, target, *, bias=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                         z_loss=0.0, softcap=0.0, variant="tuned", db="detfuse.db", return_lse=False,
                         grad_in_forward=True, allow_nondeterministic=False, level=None, main_grad=None):
    """cross_entropy(x @ weight.T, target) fused, with bitwise-reproducible
    gradients. variant: "tuned" (the store `db`, then the nearest tuned shape,
    then the heuristic), "heuristic", or a canonical variant name. Returns the
    loss (float32; shape x.shape[:-1] for reduction 'none'), and with
    return_lse=True also the per-row log-sum-exp (shape x.shape[:-1]).
    level: with variant="tuned", only stored results that have this
    determinism level ("run_to_run", "sm_count", "config", "portable"; "none":
    any) are chosen (chosen_variant(..., level=) says which and why); resolved
    before the op runs, so not inside torch.compile (pass the chosen name as
    variant= there).
    main_grad: an fp32 [V, D] tensor on x's device (Megatron's weight.main_grad):
    dW is summed into it in the forward (main_grad += dW, fp32, in the fixed
    order of the variant) and weight gets no .grad; no V x D fp32 accumulator
    or bf16 dW is made. The returned loss must get an upstream gradient of 1
    (loss.backward(), or a sum with other terms); otherwise an error is raised
    by the next main_grad= call or check_main_grad() (the backward copies the
    gradient to the host without a synchronisation; with
    detfuse._ops.SYNC_FREE_BACKWARD = False the backward reads and raises at
    once). Needs grad_in_forward and reduction 'mean' or 'sum'.
    grad_in_forward (the default): dX and dW are computed in the forward and
    handed to autograd as x.grad and weight.grad, scaled in place on the GPU by
    the loss's upstream gradient unless it is 1 (no synchronisation: the host
    never reads it). A second backward through a retained graph
    (retain_graph=True) is refused by PyTorch's saved-tensor version check
    (the saved gradients count as changed in place); grad_in_forward=False
    recomputes in the backward: any number of backwards.
    (detfuse._ops.SYNC_FREE_BACKWARD = False restores the host-read backward:
    one synchronisation, g = 1 hands the tensors over unscaled, any other value
    scales a copy, and a second backward adds into them.)
    Runs the custom ops torch.ops.detfuse.flce_* (torch.compile traces them,
    fullgraph=True included)."""
    torch = _torch()
    x2, w, y = _check_inputs(x, weight, target, bias, reduction)
    if main_grad is not None:
        _check_main_grad(main_grad, w, reduction, grad_in_forward)
    _check_variant(variant, "variant")
    _lib.check_level(level, variant)
    dbs = _db_arg(db)
    if level is not None:
        if _compiling():
            raise RuntimeError("level=: the tuned choice at a level is looked up outside torch.compile; call "
                               "detfuse.torch.chosen_variant(..., level=...) first and pass its name as variant=")
        variant = chosen_variant(x, weight, target, ignore_index=ignore_index, reduction=reduction,
                                 label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap, variant="tuned",
                                 db=db, grad_in_forward=grad_in_forward,
                                 allow_nondeterministic=allow_nondeterministic, level=level).name
    if not _compiling():
        _problem(x2, w, reduction, ignore_index, label_smoothing, z_loss, softcap)
        _ops_mod.selection(variant, dbs, allow_nondeterministic)  # checked once, then kept
    _check_devices(x, weight, target)
    opts = (int(ignore_index), reduction, float(label_smoothing), float(z_loss), float(softcap), variant, dbs,
            bool(allow_nondeterministic))
    ops = _ops()
    needs = torch.is_grad_enabled() and (x2.requires_grad or w.requires_grad)
    if needs and main_grad is not None:
        loss, lse = _ops_mod.flce_main_grad(x2, w, y, main_grad, *opts)
    elif needs and grad_in_forward and reduction != "none":
        if _ops_mod.EAGER_FUNCTION and x2.is_cuda and not _compiling():
            loss, lse = _ops_mod.flce_forward_backward_eager(x2, w, y, *opts)
        else:
            loss, lse, _, _ = ops.flce_forward_backward(x2, w, y, *opts)
    else:
        loss, lse = ops.flce_forward(x2, w, y, *opts)
    lead = tuple(x.shape[:-1])
    if reduction == "none":
        loss = loss.reshape(lead)
    return (loss, lse.reshape(lead)) if return_lse else loss


def check_main_grad(wait=True) -> None:
    """Raise RuntimeError if a linear_cross_entropy(main_grad=...) loss got an
    upstream gradient other than 1 in a backward since the last check (its
    main_grad then holds dW unscaled). wait=False checks only the backwards
    whose gradient has reached the host, without a synchronisation; the next
    main_grad= call does that itself."""
    _ops_mod.check_main_grad(wait)


def chosen_variant(x, weight, target=None, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, z_loss=0.0,
                   softcap=0.0, variant="tuned", db="detfuse.db", grad_in_forward=True, allow_nondeterministic=False,
                   level=None):
    """What linear_cross_entropy would run for these inputs and options, and why:
    a detfuse.Choice(name, source, deterministic, note, tuned_problem_key, distance).
    level: as in linear_cross_entropy (source "heuristic" when no stored result has it)."""
    torch = _torch()
    _lib.check_level(level, variant)
    if target is None:
        target = torch.empty(x.shape[:-1], dtype=torch.int64, device=x.device)
    x2, w, _ = _check_inputs(x, weight, target, None, reduction)
    p = _problem(x2, w, reduction, ignore_index, label_smoothing, z_loss, softcap)
    sel = _lib.make_selection(variant, db, allow_nondeterministic)
    _check_devices(x, weight, target)
    mode = _lib.MODE_FORWARD_BACKWARD if (grad_in_forward and reduction != "none") else _lib.MODE_FORWARD
    with torch.cuda.device(x.device):
        return _lib.choose_level(p, mode, sel, level) if level is not None else _lib.choose(p, mode, sel)


# ------------------------------------------------------------------ attention

def _attention_selection(variant, what, db, allow_nondeterministic):
    if not isinstance(variant, str):
        raise TypeError(f"{what}: must be a str ('heuristic', 'tuned' or an attention variant name), got "
                        f"{type(variant).__name__}")
    return _ops_mod.selection(variant, db, allow_nondeterministic)


def _attention_options(causal, scale, softcap, window):
    """Python-level checks of the options (the library checks values again);
    returns (scale, softcap, window) as the C problem holds them (0 = off)."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal: must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale = 0.0  # the library's 1/sqrt(d)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale: must be a float or None, got {type(scale).__name__}")
    elif not scale > 0:
        raise ValueError(f"scale: must be > 0 (None means 1/sqrt(d)), got {scale}")
    if softcap is None:
        softcap = 0.0
    elif isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap: must be a float or None, got {type(softcap).__name__}")
    elif not softcap >= 0:
        raise ValueError(f"softcap: must be >= 0 (None or 0 disables), got {softcap}")
    if window is None:
        window = 0
    elif isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window: must be an int or None, got {type(window).__name__}")
    elif window < 0:
        raise ValueError(f"window: must be >= 0 (None or 0 disables), got {window}")
    return float(scale), float(softcap), int(window)


def _check_attention(q, k, v, causal, scale, softcap=None, window=None, validate=True):
    """Checks before the library runs anything (types, dtypes, ranks, shapes;
    then, unless validate is False, the library's own problem checks: Hkv
    dividing H, sizes, scale, softcap, window); returns the C problem (None
    without validation), contiguous q, k, v and the (scale, softcap, window)
    numbers."""
    torch = _torch()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: must be a torch.Tensor, got {type(t).__name__}")
    code = _dtype_code(torch, q.dtype, "q")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype must equal q's ({q.dtype}), got {t.dtype}")
    if q.dim() != 4:
        raise ValueError(f"q: must have shape [B, H, Sq, d], got {tuple(q.shape)}")
    if k.dim() != 4:
        raise ValueError(f"k: must have shape [B, Hkv, Sk, d], got {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v: shape must equal k's {tuple(k.shape)}, got {tuple(v.shape)}")
    B, H, Sq, d = q.shape
    Bk, Hkv, Sk, dk = k.shape
    if Bk != B:
        raise ValueError(f"k: batch {Bk} does not match q's {B} (q [B, H, Sq, d], k [B, Hkv, Sk, d])")
    if dk != d:
        raise ValueError(f"k: head dim {dk} does not match q's {d} (q [B, H, Sq, d], k [B, Hkv, Sk, d])")
    scale, softcap, window = _attention_options(causal, scale, softcap, window)
    p = None
    if validate:
        # The library's checks (no GPU): "problem.Hkv: must divide H (GQA), ..."; the
        # problem is kept per shape and options (_ops.attention_problem) once it passed.
        p = _ops_mod.attention_problem(torch, q, k, causal, scale, softcap, window)
    return p, q.contiguous(), k.contiguous(), v.contiguous(), (scale, softcap, window)


def _check_attention_devices(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type not in ("cuda", "meta"):  # meta: shapes only (the ops' fake implementations)
            raise ValueError(f"{name}: is on {t.device}; detfuse runs on CUDA devices only (move it with .cuda())")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v: must be on one device, got {q.device}, {k.device}, {v.device}")


def _attention_setup(q, k, v, causal, scale, softcap, window, variant, backward_variant, db, allow_nondeterministic,
                     validate=True):
    p, q2, k2, v2, nums = _check_attention(q, k, v, causal, scale, softcap, window, validate)
    bvariant = variant if backward_variant is None else backward_variant
    dbs = _db_arg(db)
    if validate:
        sel_f = _attention_selection(variant, "variant", db, allow_nondeterministic)
        sel_b = _attention_selection(bvariant, "backward_variant", db, allow_nondeterministic)
    else:
        _check_variant(variant, "variant")
        _check_variant(bvariant, "backward_variant")
        sel_f = sel_b = None
    _check_attention_devices(q, k, v)
    return p, q2, k2, v2, nums, sel_f, sel_b, bvariant, dbs


_backward_checked = {}  # (problem, backward selection, device) -> True: the library chose a backward for it


def _choose_backward(p, sel_b, device, backward_variant, key=None):
    """Refuses, before the forward runs, a backward the library would refuse.
    key: where the answer may be kept (None for variant="tuned", whose choice
    follows the store)."""
    torch = _torch()
    if key is not None and key in _backward_checked:
        return None
    try:
        with torch.cuda.device(device):
            choice = _lib.attention_choose(p, _lib.ATTENTION_BACKWARD, sel_b)
        if key is not None:
            if len(_backward_checked) >= 4096:
                _backward_checked.clear()
            _backward_checked[key] = True
        return choice
    except _lib.InvalidArgument as e:
        if backward_variant is None and sel_b.kind == _lib.SELECT_NAME:
            raise _lib.InvalidArgument(f"{e} (backward_variant=None uses `variant` for the backward too; pass "
                                       f"backward_variant='heuristic' or a variant that runs the backward)",
                                       e.status) from None
        raise


# attention()'s checks, kept per call signature once they passed: key (_attention_plan_key) ->
# ((the C problem, (scale, softcap, window), the backward's variant, db), whether the backward was
# chosen too). A training step calls attention() with the same signature every layer and
# step; the checks (7 us of Python on the H100 machine's host) then run once, not before every launch.
_attention_plans = {}


def _attention_plan_key(torch, q, k, v, causal, scale, softcap, window, variant, backward_variant, db,
                        allow_nondeterministic):
    """The key under which attention() keeps its checks, or None where they must run every call: inputs
    other than plain tensors, variant="tuned" (its choice follows the store). An unhashable option makes
    the key unhashable: attention() then checks as without a key.
    Each option's type is part of the key (causal=1 is refused where causal=True is not)."""
    T = torch.Tensor
    if type(q) is not T or type(k) is not T or type(v) is not T or not isinstance(variant, str) or variant == "tuned":
        return None
    if isinstance(backward_variant, str) and backward_variant == "tuned":
        return None
    return (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device,
            type(causal), causal, type(scale), scale, type(softcap), softcap, type(window), window,
            type(variant), variant, type(backward_variant), backward_variant, type(db), db,
            type(allow_nondeterministic), allow_nondeterministic)


def _needs_grad(torch, q, k, v):
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def attention(q, k, v, *, causal=False, scale=None, softcap=None, window=None, variant="heuristic",
              backward_variant=None, db="detfuse.db", allow_nondeterministic=False, return_lse=False, level=None):
    """Exact softmax attention, softmax(scale * q k^T [+ causal mask]) v, with
    gradients for q, k and v that are bitwise reproducible run to run
    (deterministic variants: every one but the `atomic` dQ strategy).

    q [B, H, Sq, d]; k, v [B, Hkv, Sk, d] with Hkv dividing H (GQA: head h
    reads kv head h // (H // Hkv)); bfloat16 or float32, one CUDA device;
    non-contiguous inputs are copied. Head dims 64 and 128 are built.
    causal: bottom-right aligned (query i sees key j iff j <= i + Sk - Sq, as
    FlashAttention >= 2.1; torch's SDPA is_causal is top-left aligned, the two
    agree when Sq == Sk). A query row that sees no key gets O = 0 and zero
    gradients. scale: None means 1/sqrt(d).
    softcap: None/0 off; > 0 caps every scaled score as softcap*tanh(s/softcap)
    before the mask and softmax (Gemma-2's attn_logit_softcapping).
    window: None/0 off; W > 0: query i sees only keys j with
    i + (Sk - Sq) - W < j (Hugging Face's sliding_window, bottom-right aligned;
    with causal, the W most recent keys including its own). A variant that
    lacks either feature refuses the call with the library's message
    ("softcap: ..." / "window: ..."); nothing is ignored.
    variant: "heuristic" (the library's built-in choice: the fastest
    deterministic variant measured for the head dim, causal and GQA), "tuned" (the store `db`: the best forward+backward
    result tuned on this GPU for this problem, else the nearest tuned shape,
    else the heuristic; `chosen_attention_variants` says which), or a
    canonical name (detfuse.attention_variants()) for the forward;
    backward_variant the same for the backward (None: the same as `variant`;
    a forward-only variant such as the wgmma ones is then refused when
    gradients are needed, with the reason). allow_nondeterministic: let
    "tuned" pick an atomic (nondeterministic) variant. level: with
    variant="tuned" (and backward_variant None or "tuned"), only stored results
    that have this determinism level ("run_to_run", "sm_count", "config",
    "portable"; "none": any) are chosen, for both passes; resolved before the
    ops run, so not inside torch.compile (pass the names
    chosen_attention_variants(..., level=) gives there).
    Returns O [B, H, Sq, d] in q's dtype; with return_lse=True also the
    per-row log-sum-exp [B, H, Sq] float32 (natural log, -inf for rows that
    see no key; not differentiable). The forward saves q, k, v, O and the LSE
    for the backward. Work runs on the current CUDA stream; workspace comes
    from PyTorch's caching allocator. Runs the custom ops
    torch.ops.detfuse.attention_forward/backward (torch.compile traces them,
    fullgraph=True included; the library's argument checks then run when the
    graph runs)."""
    torch = _torch()
    validate = not _compiling()
    if level is not None:
        _check_attention_level(level, variant, backward_variant)
        if not validate:
            raise RuntimeError("level=: the tuned choice at a level is looked up outside torch.compile; call "
                               "detfuse.torch.chosen_attention_variants(..., level=...) first and pass its names as "
                               "variant= and backward_variant=")
        fwd, bwd = chosen_attention_variants(q, k, v, causal=causal, scale=scale, softcap=softcap, window=window,
                                             variant="tuned", db=db, allow_nondeterministic=allow_nondeterministic,
                                             level=level)
        variant, backward_variant = fwd.name, bwd.name
    plan_key = _attention_plan_key(torch, q, k, v, causal, scale, softcap, window, variant, backward_variant, db,
                                   allow_nondeterministic) if validate else None
    try:
        plan = _attention_plans.get(plan_key) if plan_key is not None else None
    except TypeError:  # an unhashable option (its check below says what is wrong with it)
        plan_key = plan = None
    # (q, k, v are tensors where a plan exists; otherwise _attention_setup checks that first.)
    needs_grad = plan is not None and _needs_grad(torch, q, k, v)
    if plan is not None and (plan[1] or not needs_grad):
        # Seen before with these shapes, dtypes, devices and options: the checks passed (and the
        # backward was chosen, where it is needed), so only the contiguous copies remain.
        p, (sc, cap, win), bvariant, dbs = plan[0]
        q2, k2, v2 = q.contiguous(), k.contiguous(), v.contiguous()
    else:
        p, q2, k2, v2, (sc, cap, win), sel_f, sel_b, bvariant, dbs = _attention_setup(
            q, k, v, causal, scale, softcap, window, variant, backward_variant, db, allow_nondeterministic, validate)
        needs_grad = _needs_grad(torch, q, k, v)
        if validate and q.device.type == "cuda" and needs_grad:
            key = None if bvariant == "tuned" else (tuple(q.shape), tuple(k.shape), q.dtype, q.device, causal, sc,
                                                     cap, win, bvariant, dbs, bool(allow_nondeterministic),
                                                     backward_variant)
            _choose_backward(p, sel_b, q.device, backward_variant, key)  # refuse a forward-only backward first
        if plan_key is not None:
            if len(_attention_plans) >= 4096:
                _attention_plans.clear()
            chosen = bool(needs_grad or (plan is not None and plan[1]))
            _attention_plans[plan_key] = ((p, (sc, cap, win), bvariant, dbs), chosen)
    if validate and q.device.type == "cuda":
        # Eager: the ops' bodies through a plain autograd function (no custom-op dispatch); the
        # same kernels, so the same bits (tests/test_torch_attention.py checks it).
        if _ops_mod.attention_eager is None:
            _ops()
        O, lse = _ops_mod.attention_eager(q2, k2, v2, causal, sc, cap, win, variant, bvariant, dbs,
                                          bool(allow_nondeterministic))
    else:
        O, lse = _ops().attention_forward(q2, k2, v2, causal, sc, cap, win, variant, bvariant, dbs,
                                          bool(allow_nondeterministic))
    return (O, lse) if return_lse else O


def _check_attention_level(level, variant, backward_variant):
    _lib.check_level(level, variant)
    if backward_variant not in (None, "tuned"):
        raise ValueError(f"level: '{level}' needs backward_variant None or 'tuned', got {backward_variant!r}")


def chosen_attention_variants(q, k, v, *, causal=False, scale=None, softcap=None, window=None, variant="heuristic",
                              backward_variant=None, db="detfuse.db", allow_nondeterministic=False, level=None):
    """What attention() would run for these inputs: (forward Choice, backward
    Choice), each a detfuse.Choice(name, source, deterministic, note,
    tuned_problem_key, distance); source is named, tuned, nearest or heuristic.
    level: as in attention() (source "heuristic" when no stored result has it)."""
    torch = _torch()
    if level is not None:
        _check_attention_level(level, variant, backward_variant)
    p, _, _, _, _, sel_f, sel_b, _, _ = _attention_setup(q, k, v, causal, scale, softcap, window, variant,
                                                         backward_variant, db, allow_nondeterministic)
    if level is not None:
        with torch.cuda.device(q.device):
            return (_lib.attention_choose_level(p, _lib.ATTENTION_FORWARD, sel_f, level),
                    _lib.attention_choose_level(p, _lib.ATTENTION_BACKWARD, sel_b, level))
    with torch.cuda.device(q.device):
        fwd = _lib.attention_choose(p, _lib.ATTENTION_FORWARD, sel_f)
    return fwd, _choose_backward(p, sel_b, q.device, backward_variant)


def digest(t) -> str:
    """XXH3-128 of a tensor's raw bytes (32 hex digits); CUDA tensors are hashed
    after the current stream's work. Non-contiguous tensors are refused."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"digest: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError("digest: tensor is not contiguous (its bytes are not one block); call .contiguous() first")
    nbytes = t.numel() * t.element_size()
    if t.device.type == "cuda":
        with torch.cuda.device(t.device):
            return _lib.digest_device(t.data_ptr(), nbytes, torch.cuda.current_stream(t.device).cuda_stream)
    if t.device.type != "cpu":
        raise ValueError(f"digest: tensor on {t.device}; only CUDA and CPU tensors are supported")
    hexbuf = ctypes.create_string_buffer(33)
    _lib.check(_lib.load_library().detfuse_digest_host(ctypes.c_void_p(t.data_ptr() or None), nbytes, hexbuf, 33))
    return hexbuf.value.decode()


def __getattr__(name):
    # The nn.Module class is built when first asked for, so importing this
    # module does not import torch.
    if name == "LinearCrossEntropy":
        return _module()
    if name in ("LinearCrossEntropyFunction", "AttentionFunction"):
        raise AttributeError(f"detfuse.torch.{name} was replaced by the torch.library custom ops "
                             f"torch.ops.detfuse.* (torch.compile traces them); call linear_cross_entropy / attention")
    raise AttributeError(f"module 'detfuse.torch' has no attribute {name!r}")


def register_ops() -> None:
    """Registers detfuse's torch.library custom ops (torch.ops.detfuse.*).
    Done when detfuse.torch is imported with torch installed; idempotent."""
    _ops_mod.register()


def _module():
    if "module" in _cache:
        return _cache["module"]
    torch = _torch()

    class LinearCrossEntropy(torch.nn.Module):
        """nn.Module form: LinearCrossEntropy(**options)(x, weight, target);
        the options are those of linear_cross_entropy."""

        def __init__(self, **options):
            super().__init__()
            self.options = dict(options)

        def forward(self, x, weight, target):
            return linear_cross_entropy(x, weight, target, **self.options)

        def extra_repr(self):
            return ", ".join(f"{k}={v!r}" for k, v in self.options.items())

    _cache["module"] = LinearCrossEntropy
    return LinearCrossEntropy


try:  # register the custom ops now, so that torch.compile never traces the registration
    import torch as _torch_probe  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    pass
else:
    _ops_mod.register()

"""detfuse's kernels as torch.library custom ops, so that torch.compile (also
with fullgraph=True) traces through them instead of breaking the graph:

  detfuse::flce_forward(x, w, y, ...) -> (loss, lse)
  detfuse::flce_forward_backward(x, w, y, ...) -> (loss, lse, dX, dW)
  detfuse::flce_backward(x, w, y, lse, dloss, ...) -> (dX, dW)
  detfuse::attention_forward(q, k, v, ...) -> (O, lse)
  detfuse::attention_backward(dO, q, k, v, O, lse, ...) -> (dQ, dK, dV)

Each op has a fake (meta) implementation giving output shapes and dtypes, and
the two forward ops have autograd formulas (torch.library.register_autograd)
that call the backward ops. The real implementations are the ctypes calls of
_lib.py on the current CUDA stream, with workspace from PyTorch's caching
allocator; only CUDA kernels are registered (device_types="cuda").

The arguments are plain values (ints, floats, bools, strings), the C problem
struct is rebuilt from them (cached), so the ops need no Python objects. The
public functions in detfuse/torch.py check their arguments first and call
these ops; call those, not the ops, unless you know why.
"""

import contextlib
from typing import Tuple

from . import _lib

REGISTERED = False
# detfuse.torch.linear_cross_entropy's eager path (gradient in forward) calls
# the autograd.Function flce_forward_backward_eager instead of the custom op
# when True (the default); False keeps the op everywhere (for measuring the
# difference: experiments/flce_host_time.py, flce_peers.py --op-path; no gain
# was measurable in session 13).
EAGER_FUNCTION = True
# The gradient-in-forward backward (loss, not main_grad) applies the loss's
# upstream gradient g to the forward's dX and dW in place on the device
# (detfuse_scale_unless_one: nothing is read or written when g == 1) instead of
# reading g on the host, when True at the forward call. The host read was one
# synchronisation after which the rest of the backward ran on the host while
# the GPU waited: 0.8 ms of tail per call against 0.16 without it, and 20.22
# against 19.66 ms per call at 4096,4096,128256 (Liger-Kernel's CuTe FLCE
# 20.02 in the same passes; experiments/flce_bench_log.md, session 13). The
# saved dX and dW then count as changed in place, so a second backward through
# a retained graph is refused (PyTorch's saved-tensor check) where the
# host-read path (False) summed them again; grad_in_forward=False allows any
# number of backwards.
SYNC_FREE_BACKWARD = True
# main_grad='s backward (main_grad already holds dW for an upstream gradient of
# 1): with SYNC_FREE_BACKWARD at the forward, the gradient is copied to pinned
# host memory without a synchronisation and checked when that copy has landed:
# at the next main_grad= call or detfuse.torch.check_main_grad(), which raise if
# it was not 1. Without it the backward reads it at once (one synchronisation
# that waits for the forward's kernels; the host's rest of the backward then
# runs with the GPU idle). Entries: (event, pinned copy of g).
_MAIN_GRAD_PENDING: list = []
_problems: dict = {}
_selections: dict = {}
_CACHE_CAP = 4096  # entries; the caches are cleared when they grow past it


def _cached(cache, key, make):
    v = cache.get(key)
    if v is None:
        if len(cache) >= _CACHE_CAP:
            cache.clear()
        v = cache[key] = make()
    return v


def selection(variant: str, db: str, allow_nondeterministic: bool):
    """The C selection for (variant, db, policy); db "" means the library's default path."""
    return _cached(_selections, (variant, db, bool(allow_nondeterministic)),
                   lambda: _lib.make_selection(variant, db or None, bool(allow_nondeterministic)))


def _main_grad_error(g):
    return RuntimeError(f"linear_cross_entropy(main_grad=...): main_grad already holds dW for an upstream gradient of 1 "
                        f"(loss.backward() on the returned loss), but the loss's gradient is {g}; scale after the "
                        f"call (e.g. main_grad /= steps) or use main_grad=None")


def check_main_grad(wait: bool = True) -> None:
    """Raise if a main_grad= backward got an upstream gradient other than 1.
    wait=False checks only the gradients whose copy to the host has landed
    (no synchronisation); the others stay pending."""
    while _MAIN_GRAD_PENDING:
        event, host = _MAIN_GRAD_PENDING[0]
        if not wait and not event.query():
            return
        event.synchronize()
        _MAIN_GRAD_PENDING.pop(0)
        g = host.reshape(-1)
        if not bool((g == 1).all()):
            _MAIN_GRAD_PENDING.clear()  # reported once; main_grad is wrong from that call on
            bad = g[g != 1]
            raise _main_grad_error(float(bad[0]) if bad.numel() else float("nan"))


def _dtype_code(torch, dt):
    if dt == torch.bfloat16:
        return _lib.DTYPE_BF16
    if dt == torch.float32:
        return _lib.DTYPE_F32
    raise TypeError(f"dtype must be torch.bfloat16 or torch.float32, got {dt}")


def flce_problem(torch, x, w, ignore_index, reduction, label_smoothing, z_loss, softcap, accumulate_dW=False):
    N, D, V = int(x.shape[0]), int(x.shape[1]), int(w.shape[0])
    code = _dtype_code(torch, x.dtype)

    def make():
        p = _lib.make_problem(N, D, V, dtype=code, grad_dtype=code, ignore_index=int(ignore_index), reduction=reduction,
                              label_smoothing=float(label_smoothing), z_loss=float(z_loss), softcap=float(softcap),
                              grad_output=1.0, accumulate_dW=bool(accumulate_dW))
        _lib.validate(p)
        return p

    return _cached(_problems, ("flce", N, D, V, code, ignore_index, reduction, label_smoothing, z_loss, softcap,
                               bool(accumulate_dW)), make)


def attention_problem(torch, q, k, causal, scale, softcap, window):
    B, H, Sq, d = (int(s) for s in q.shape)
    Hkv, Sk = int(k.shape[1]), int(k.shape[2])
    code = _dtype_code(torch, q.dtype)

    def make():
        p = _lib.make_attention_problem(B, H, Hkv, Sq, Sk, d, dtype=code, causal=bool(causal), scale=float(scale),
                                        softcap=float(softcap), window=int(window))
        _lib.attention_validate(p)
        return p

    return _cached(_problems, ("attention", B, H, Hkv, Sq, Sk, d, code, causal, scale, softcap, window), make)


def _ptr(t):
    return None if t is None else t.data_ptr()


# (problem, mode, selection, device) -> (the selection to run, workspace bytes)
# for "heuristic" and named variants: one selection per call (issue 17). The
# heuristic's choice is resolved once (detfuse_flce_choose) and then run by
# name, so the C ABI neither resolves it again in workspace_size nor in run.
_flce_resolved: dict = {}


def _flce_key(x, w, mode, ignore_index, reduction, label_smoothing, z_loss, softcap, variant, db,
              allow_nondeterministic, accumulate_dW=False):
    """The key under which _flce_launch may keep the resolved selection and the
    workspace size, or None for variant="tuned" (its choice follows the store)."""
    if variant == "tuned":
        return None
    return (int(x.shape[0]), int(x.shape[1]), int(w.shape[0]), x.dtype, x.device, mode, ignore_index, reduction,
            label_smoothing, z_loss, softcap, bool(accumulate_dW), variant, db, bool(allow_nondeterministic))


def _flce_resolve(p, mode, sel):
    """(selection to run, workspace bytes) of a heuristic or named selection."""
    if sel.kind == _lib.SELECT_HEURISTIC:
        sel = _lib.make_selection(_lib.choose(p, mode, sel).name)
    return sel, _lib.workspace_size(p, mode, sel)


def _flce_launch(torch, p, mode, sel, device, key=None, *, X, W, y, loss=None, lse=None, dX=None, dW=None,
                 lse_in=None, dloss=None):
    """Runs the FLCE `mode` on the current stream. key: from _flce_key (None:
    ask the library for the workspace at every call, and let it resolve the
    selection in the run too)."""
    with _on(torch, device):
        stream = _raw_stream(torch, device)
        hit = None if key is None else _flce_resolved.get(key)
        if hit is not None:
            run_sel, ws_bytes = hit
        elif key is not None:
            run_sel, ws_bytes = _cached(_flce_resolved, key, lambda: _flce_resolve(p, mode, sel))
        else:
            run_sel, ws_bytes = sel, _lib.workspace_size(p, mode, sel)
        ws = torch.empty(ws_bytes, dtype=torch.uint8, device=device) if ws_bytes else None
        a = _lib.FlceArgs()
        a.X, a.W, a.y = X.data_ptr(), W.data_ptr(), y.data_ptr()
        a.dloss, a.lse_in, a.loss, a.lse = _ptr(dloss), _ptr(lse_in), _ptr(loss), _ptr(lse)
        a.dX, a.dW = _ptr(dX), _ptr(dW)
        a.workspace, a.workspace_size = _ptr(ws), ws_bytes
        _lib.run(p, mode, a, run_sel, stream, choice=False)


def _raw_stream(torch, device):
    """The cudaStream_t (an int) of `device`'s current stream, for the C ABI. torch's
    _cuda_getCurrentRawStream (what Triton's launcher calls) costs ~0.5 us; the public
    torch.cuda.current_stream(device).cuda_stream builds a Stream object first (~5 us of host
    time before every launch, measured on the H100 machine). The public form where this torch
    lacks the private one."""
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is None:
        return torch.cuda.current_stream(device).cuda_stream
    return raw(torch.cuda.current_device() if device.index is None else device.index)


def _on(torch, device):
    """torch.cuda.device(device), or nothing when it is already the current device."""
    if device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


_workspace_sizes: dict = {}


def _attention_launch(torch, p, mode, sel, device, ws_key=None, **ptrs):
    """Runs the attention `mode` on the current stream. ws_key: a hashable key
    of (problem, mode, selection, device) under which the workspace size may be
    kept (None: ask the library at every call, as for variant="tuned", whose
    choice follows the store)."""
    with _on(torch, device):
        stream = _raw_stream(torch, device)
        ws_bytes = None if ws_key is None else _workspace_sizes.get(ws_key)
        if ws_bytes is None:
            ws_bytes = _lib.attention_workspace_size(p, mode, sel)
            if ws_key is not None:
                _cached(_workspace_sizes, ws_key, lambda: ws_bytes)
        ws = torch.empty(ws_bytes, dtype=torch.uint8, device=device) if ws_bytes else None
        a = _lib.AttentionArgs()
        for name, t in ptrs.items():
            setattr(a, name, _ptr(t))
        a.workspace, a.workspace_size = _ptr(ws), ws_bytes
        _lib.attention_run(p, mode, a, sel, stream, choice=False)


def _attention_ws_key(q, k, mode, causal, scale, softcap, window, variant, db, allow_nondeterministic):
    if variant == "tuned":
        return None
    return (tuple(q.shape), int(k.shape[1]), int(k.shape[2]), q.dtype, q.device, mode, causal, scale, softcap, window,
            variant, db, bool(allow_nondeterministic))


def attention_forward_impl(torch, q, k, v, causal, scale, softcap, window, variant, db, allow_nondeterministic):
    """The forward op's body (the custom op and the eager autograd function both run it): (O, lse)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    p = attention_problem(torch, q, k, causal, scale, softcap, window)
    sel = selection(variant, db, allow_nondeterministic)
    O = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    key = _attention_ws_key(q, k, _lib.ATTENTION_FORWARD, causal, scale, softcap, window, variant, db,
                            allow_nondeterministic)
    _attention_launch(torch, p, _lib.ATTENTION_FORWARD, sel, q.device, key, Q=q, K=k, V=v, O=O, lse=lse)
    return O, lse


def attention_backward_impl(torch, dO, q, k, v, O, lse, causal, scale, softcap, window, variant, db,
                            allow_nondeterministic):
    """The backward op's body: (dQ, dK, dV)."""
    q, k, v, O, lse = q.contiguous(), k.contiguous(), v.contiguous(), O.contiguous(), lse.contiguous()
    dO = dO.to(q.dtype).contiguous()
    p = attention_problem(torch, q, k, causal, scale, softcap, window)
    sel = selection(variant, db, allow_nondeterministic)
    dQ = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dK = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dV = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    key = _attention_ws_key(q, k, _lib.ATTENTION_BACKWARD, causal, scale, softcap, window, variant, db,
                            allow_nondeterministic)
    _attention_launch(torch, p, _lib.ATTENTION_BACKWARD, sel, q.device, key, Q=q, K=k, V=v, dO=dO, O_in=O, lse_in=lse,
                      dQ=dQ, dK=dK, dV=dV)
    return dQ, dK, dV


# The eager path (attention() outside torch.compile): a plain autograd
# function running the same bodies as the ops, without the custom-op
# dispatch (about 40-80 us of host time per op call; with the sample timed
# from an event before the call, as the peer scripts do, that is time the GPU
# waits). Set by register().
attention_eager = None


flce_main_grad = None  # MainGrad.apply once register() ran: (x, w, y, main_grad, *opts) -> (loss, lse)
flce_forward_backward_eager = None  # ForwardBackward.apply once register() ran: (x, w, y, *opts) -> (loss, lse)


def register() -> bool:
    """Registers the ops (once; needs torch >= 2.4 for torch.library.custom_op).
    Returns True when they are registered."""
    global REGISTERED
    if REGISTERED:
        return True
    import torch
    from torch import Tensor

    if not hasattr(torch.library, "custom_op") or not hasattr(torch.library, "register_autograd"):
        raise ImportError(f"detfuse.torch needs torch >= 2.4 (torch.library.custom_op), found {torch.__version__}")

    # ------------------------------------------------------------ FLCE

    def _loss_shape(N, reduction):
        return (N,) if reduction == "none" else ()

    @torch.library.custom_op("detfuse::flce_forward", mutates_args=(), device_types="cuda")
    def flce_forward(x: Tensor, w: Tensor, y: Tensor, ignore_index: int, reduction: str, label_smoothing: float,
                     z_loss: float, softcap: float, variant: str, db: str,
                     allow_nondeterministic: bool) -> Tuple[Tensor, Tensor]:
        x, w, y = x.contiguous(), w.contiguous(), y.contiguous()
        p = flce_problem(torch, x, w, ignore_index, reduction, label_smoothing, z_loss, softcap)
        sel = selection(variant, db, allow_nondeterministic)
        N = x.shape[0]
        loss = torch.empty(_loss_shape(N, reduction), dtype=torch.float32, device=x.device)
        lse = torch.empty((N,), dtype=torch.float32, device=x.device)
        key = _flce_key(x, w, _lib.MODE_FORWARD, ignore_index, reduction, label_smoothing, z_loss, softcap, variant,
                        db, allow_nondeterministic)
        _flce_launch(torch, p, _lib.MODE_FORWARD, sel, x.device, key, X=x, W=w, y=y, loss=loss, lse=lse)
        return loss, lse

    @flce_forward.register_fake
    def _(x, w, y, ignore_index, reduction, label_smoothing, z_loss, softcap, variant, db, allow_nondeterministic):
        N = x.shape[0]
        return (x.new_empty(_loss_shape(N, reduction), dtype=torch.float32),
                x.new_empty((N,), dtype=torch.float32))

    def _forward_backward(x, w, y, ignore_index, reduction, label_smoothing, z_loss, softcap, variant, db,
                          allow_nondeterministic):
        if reduction == "none":
            raise ValueError("detfuse::flce_forward_backward: reduction 'none' needs the per-row upstream gradient; "
                             "use flce_forward and flce_backward")
        x, w, y = x.contiguous(), w.contiguous(), y.contiguous()
        p = flce_problem(torch, x, w, ignore_index, reduction, label_smoothing, z_loss, softcap)
        sel = selection(variant, db, allow_nondeterministic)
        N = x.shape[0]
        loss = torch.empty((), dtype=torch.float32, device=x.device)
        lse = torch.empty((N,), dtype=torch.float32, device=x.device)
        dX, dW = torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty(w.shape, dtype=w.dtype,
                                                                                     device=w.device)
        key = _flce_key(x, w, _lib.MODE_FORWARD_BACKWARD, ignore_index, reduction, label_smoothing, z_loss, softcap,
                        variant, db, allow_nondeterministic)
        _flce_launch(torch, p, _lib.MODE_FORWARD_BACKWARD, sel, x.device, key, X=x, W=w, y=y, loss=loss, lse=lse,
                     dX=dX, dW=dW)
        return loss, lse, dX, dW

    @torch.library.custom_op("detfuse::flce_forward_backward", mutates_args=(), device_types="cuda")
    def flce_forward_backward(x: Tensor, w: Tensor, y: Tensor, ignore_index: int, reduction: str,
                              label_smoothing: float, z_loss: float, softcap: float, variant: str, db: str,
                              allow_nondeterministic: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        return _forward_backward(x, w, y, ignore_index, reduction, label_smoothing, z_loss, softcap, variant, db,
                                 allow_nondeterministic)

    @flce_forward_backward.register_fake
    def _(x, w, y, ignore_index, reduction, label_smoothing, z_loss, softcap, variant, db, allow_nondeterministic):
        N = x.shape[0]
        return (x.new_empty((), dtype=torch.float32), x.new_empty((N,), dtype=torch.float32), x.new_empty(x.shape),
                w.new_empty(w.shape))

    @torch.library.custom_op("detfuse::flce_forward_backward_main_grad", mutates_args=("main_grad",),
                             device_types="cuda")
    def flce_forward_backward_main_grad(x: Tensor, w: Tensor, y: Tensor, main_grad: Tensor, ignore_index: int,
                                        reduction: str, label_smoothing: float, z_loss: float, softcap: float,
                                        variant: str, db: str,
                                        allow_nondeterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        """loss, lse, dX; main_grad (fp32 [V, D]) += dW (the problem's accumulate_dW)."""
        if reduction == "none":
            raise ValueError("detfuse::flce_forward_backward_main_grad: reduction 'none' needs the per-row upstream "
                             "gradient; main_grad needs reduction 'mean' or 'sum'")
        x, w, y = x.contiguous(), w.contiguous(), y.contiguous()
        p = flce_problem(torch, x, w, ignore_index, reduction, label_smoothing, z_loss, softcap, accumulate_dW=True)
        sel = selection(variant, db, allow_nondeterministic)
        loss = torch.empty((), dtype=torch.float32, device=x.device)
        lse = torch.empty((x.shape[0],), dtype=torch.float32, device=x.device)
        dX = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        key = _flce_key(x, w, _lib.MODE_FORWARD_BACKWARD, ignore_index, reduction, label_smoothing, z_loss, softcap,
                        variant, db, allow_nondeterministic, accumulate_dW=True)
        _flce_launch(torch, p, _lib.MODE_FORWARD_BACKWARD, sel, x.device, key, X=x, W=w, y=y, loss=loss, lse=lse,
                     dX=dX, dW=main_grad)
        return loss, lse, dX

    @flce_forward_backward_main_grad.register_fake
    def _(x, w, y, main_grad, ignore_index, reduction, label_smoothing, z_loss, softcap, variant, db,
          allow_nondeterministic):
        return (x.new_empty((), dtype=torch.float32), x.new_empty((x.shape[0],), dtype=torch.float32),
                x.new_empty(x.shape))

    @torch.library.custom_op("detfuse::flce_backward", mutates_args=(), device_types="cuda")
    def flce_backward(x: Tensor, w: Tensor, y: Tensor, lse: Tensor, dloss: Tensor, ignore_index: int, reduction: str,
                      label_smoothing: float, z_loss: float, softcap: float, variant: str, db: str,
                      allow_nondeterministic: bool) -> Tuple[Tensor, Tensor]:
        """dX, dW for an upstream gradient of 1 (mean/sum: the caller scales by
        the upstream scalar) or of dloss [N] (reduction 'none')."""
        x, w, y, lse = x.contiguous(), w.contiguous(), y.contiguous(), lse.contiguous()
        p = flce_problem(torch, x, w, ignore_index, reduction, label_smoothing, z_loss, softcap)
        sel = selection(variant, db, allow_nondeterministic)
        dX, dW = torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty(w.shape, dtype=w.dtype,
                                                                                     device=w.device)
        dl = dloss.to(torch.float32).contiguous() if reduction == "none" else None
        key = _flce_key(x, w, _lib.MODE_BACKWARD, ignore_index, reduction, label_smoothing, z_loss, softcap, variant,
                        db, allow_nondeterministic)
        _flce_launch(torch, p, _lib.MODE_BACKWARD, sel, x.device, key, X=x, W=w, y=y, lse_in=lse, dloss=dl, dX=dX,
                     dW=dW)
        return dX, dW

    @flce_backward.register_fake
    def _(x, w, y, lse, dloss, ignore_index, reduction, label_smoothing, z_loss, softcap, variant, db,
          allow_nondeterministic):
        return x.new_empty(x.shape), w.new_empty(w.shape)

    _FLCE_OPTS = 8  # non-tensor arguments after x, w, y

    def _scale(g, t):
        # g: the upstream gradient of the scalar loss (float32, 0-d); t * 1.0 is
        # exact, so with g = 1 the bits are the kernel's. A 0-d float32 tensor
        # does not promote t: the product is computed in fp32 and rounded to t's dtype.
        return t * g.to(torch.float32)

    def _is_one(g):
        # loss.backward() gives g = 1: then dX and dW need no product (a read and
        # a write of dW, ~1 GiB at a 128k vocabulary: 2.3-2.7 ms in session 9's
        # profile, and as much extra memory). Knowing g costs one synchronisation,
        # as Liger-Kernel's check of its grad_output does. Traced graphs
        # (torch.compile: fake or functional tensors) and meta tensors keep the
        # product: the value is not known there.
        if type(g) is not torch.Tensor or g.is_meta or g.numel() != 1:
            return False
        if bool(getattr(torch.compiler, "is_compiling", lambda: False)()):
            return False
        return bool(g == 1)

    def _sync_free_ok(g, dX, dW):
        # A plain CUDA fp32 scalar on the gradients' device, outside tracing.
        return (type(g) is torch.Tensor and g.is_cuda and g.numel() == 1 and g.dtype == torch.float32
                and g.device == dX.device == dW.device and hasattr(torch.autograd.graph, "increment_version")
                and not bool(getattr(torch.compiler, "is_compiling", lambda: False)()))

    def _scale_on_device(g, dX, dW):
        # In place, on the current stream (the one the backward runs on); the
        # saved tensors' versions are bumped since the host cannot know whether
        # the kernel wrote them.
        g = g.contiguous()
        with _on(torch, dX.device):
            stream = torch.cuda.current_stream(dX.device).cuda_stream
            for t in (dX, dW):
                _lib.scale_unless_one(t.data_ptr(), t.numel(), _dtype_code(torch, t.dtype), g.data_ptr(), stream)
                torch.autograd.graph.increment_version(t)

    def fb_setup(ctx, inputs, output):
        _, _, dX, dW = output
        ctx.sync_free = SYNC_FREE_BACKWARD
        ctx.save_for_backward(dX, dW)
        ctx.mark_non_differentiable(output[1], dX, dW)
        # The non-differentiable outputs get no gradient: without this autograd
        # would fill a zero tensor of each one's shape for the backward (a dW-sized
        # fill, 0.3 ms at a 128k vocabulary, measured in session 9's profile).
        ctx.set_materialize_grads(False)

    def fb_backward(ctx, g_loss, g_lse, g_dX, g_dW):
        if g_loss is None:  # the loss is not in the graph being differentiated
            return (None, None, None) + (None,) * _FLCE_OPTS
        # Autograd gets the forward's dX, dW themselves (x.grad and weight.grad
        # may become them): sync-free (SYNC_FREE_BACKWARD at the forward), scaled
        # in place on the device, their versions bumped, so a second backward
        # through a retained graph is refused; host-read, handed over as they are
        # when g = 1 (a second backward then accumulates into them in place and
        # PyTorch's version check refuses a third), a scaled copy otherwise.
        dX, dW = ctx.saved_tensors
        if getattr(ctx, "sync_free", False) and _sync_free_ok(g_loss, dX, dW):
            _scale_on_device(g_loss, dX, dW)
            return (dX, dW, None) + (None,) * _FLCE_OPTS
        if _is_one(g_loss):
            return (dX, dW, None) + (None,) * _FLCE_OPTS
        return (_scale(g_loss, dX), _scale(g_loss, dW), None) + (None,) * _FLCE_OPTS

    torch.library.register_autograd("detfuse::flce_forward_backward", fb_backward, setup_context=fb_setup)

    # The eager path of flce_forward_backward (detfuse.torch.linear_cross_entropy
    # outside torch.compile, on CUDA tensors, when EAGER_FUNCTION is True): the
    # same launch and the same backward, as an autograd.Function, without the
    # dispatcher's custom-op layers (the op's argument checks, its autograd
    # kernel, setup_context), which run on the host while the GPU waits for the
    # call's first kernel (issue 17: the per-call time at 4096 rows). Same
    # bits: the same library call on the same stream.
    class ForwardBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, y, *opts):
            loss, lse, dX, dW = _forward_backward(x, w, y, *opts)
            ctx.sync_free = SYNC_FREE_BACKWARD
            ctx.save_for_backward(dX, dW)
            ctx.mark_non_differentiable(lse)
            ctx.set_materialize_grads(False)
            return loss, lse

        @staticmethod
        def backward(ctx, g_loss, g_lse):
            return fb_backward(ctx, g_loss, g_lse, None, None)

    global flce_forward_backward_eager
    flce_forward_backward_eager = ForwardBackward.apply

    # The main-grad op mutates main_grad, so PyTorch takes no autograd formula
    # for it (register_autograd wants a functional op): an autograd.Function
    # around it gives x its gradient and weight none.
    class MainGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, y, main_grad, *opts):
            check_main_grad(wait=False)  # an earlier backward's gradient, if its copy has landed
            loss, lse, dX = torch.ops.detfuse.flce_forward_backward_main_grad(x, w, y, main_grad, *opts)
            ctx.sync_free = SYNC_FREE_BACKWARD
            ctx.save_for_backward(dX)
            ctx.mark_non_differentiable(lse)
            return loss, lse

        @staticmethod
        def backward(ctx, g_loss, g_lse):
            # dW went into main_grad in the forward for an upstream gradient of
            # 1; any other would have needed it scaled. Sync-free: g is copied
            # to pinned memory on the stream and checked later (check_main_grad);
            # host-read: checked here (one synchronisation).
            (dX,) = ctx.saved_tensors
            if ctx.sync_free and type(g_loss) is torch.Tensor and g_loss.is_cuda and not bool(
                    getattr(torch.compiler, "is_compiling", lambda: False)()):
                check_main_grad(wait=False)
                host = torch.empty(g_loss.shape, dtype=g_loss.dtype, pin_memory=True)
                with _on(torch, g_loss.device):
                    host.copy_(g_loss, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(torch.cuda.current_stream(g_loss.device))
                _MAIN_GRAD_PENDING.append((event, host))
            elif not bool((g_loss == 1).all()):
                raise _main_grad_error(float(g_loss.reshape(-1)[0]))
            return (dX, None, None, None) + (None,) * _FLCE_OPTS

    global flce_main_grad
    flce_main_grad = MainGrad.apply

    def f_setup(ctx, inputs, output):
        x, w, y = inputs[:3]
        ctx.opts = inputs[3:]
        ctx.save_for_backward(x, w, y, output[1])
        ctx.mark_non_differentiable(output[1])

    def f_backward(ctx, g_loss, g_lse):
        x, w, y, lse = ctx.saved_tensors
        reduction = ctx.opts[1]
        if reduction == "none":
            return torch.ops.detfuse.flce_backward(x, w, y, lse, g_loss, *ctx.opts) + (None,) * (1 + _FLCE_OPTS)
        one = _is_one(g_loss)  # read before the launch: the sync waits for the forward only
        dX, dW = torch.ops.detfuse.flce_backward(x, w, y, lse, g_loss, *ctx.opts)
        if one:  # fresh tensors of this backward: no product needed
            return (dX, dW, None) + (None,) * _FLCE_OPTS
        return (_scale(g_loss, dX), _scale(g_loss, dW), None) + (None,) * _FLCE_OPTS

    torch.library.register_autograd("detfuse::flce_forward", f_backward, setup_context=f_setup)

    # ------------------------------------------------------------ attention

    @torch.library.custom_op("detfuse::attention_forward", mutates_args=(), device_types="cuda")
    def attention_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, softcap: float, window: int,
                          variant: str, backward_variant: str, db: str,
                          allow_nondeterministic: bool) -> Tuple[Tensor, Tensor]:
        return attention_forward_impl(torch, q, k, v, causal, scale, softcap, window, variant, db,
                                      allow_nondeterministic)

    @attention_forward.register_fake
    def _(q, k, v, causal, scale, softcap, window, variant, backward_variant, db, allow_nondeterministic):
        return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)

    @torch.library.custom_op("detfuse::attention_backward", mutates_args=(), device_types="cuda")
    def attention_backward(dO: Tensor, q: Tensor, k: Tensor, v: Tensor, O: Tensor, lse: Tensor, causal: bool,
                           scale: float, softcap: float, window: int, variant: str, db: str,
                           allow_nondeterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        return attention_backward_impl(torch, dO, q, k, v, O, lse, causal, scale, softcap, window, variant, db,
                                       allow_nondeterministic)

    @attention_backward.register_fake
    def _(dO, q, k, v, O, lse, causal, scale, softcap, window, variant, db, allow_nondeterministic):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def a_setup(ctx, inputs, output):
        q, k, v, causal, scale, softcap, window, _variant, backward_variant, db, allow = inputs
        O, lse = output
        ctx.save_for_backward(q, k, v, O, lse)
        ctx.opts = (causal, scale, softcap, window, backward_variant, db, allow)
        ctx.mark_non_differentiable(lse)

    def a_backward(ctx, dO, g_lse):
        q, k, v, O, lse = ctx.saved_tensors
        dQ, dK, dV = torch.ops.detfuse.attention_backward(dO, q, k, v, O, lse, *ctx.opts)
        return (dQ, dK, dV) + (None,) * 8

    torch.library.register_autograd("detfuse::attention_forward", a_backward, setup_context=a_setup)

    class AttentionEager(torch.autograd.Function):
        """attention_forward / its autograd formula without the custom-op dispatch (eager mode)."""

        @staticmethod
        def forward(ctx, q, k, v, causal, scale, softcap, window, variant, backward_variant, db, allow):
            O, lse = attention_forward_impl(torch, q, k, v, causal, scale, softcap, window, variant, db, allow)
            ctx.save_for_backward(q, k, v, O, lse)
            ctx.opts = (causal, scale, softcap, window, backward_variant, db, allow)
            ctx.mark_non_differentiable(lse)
            return O, lse

        @staticmethod
        def backward(ctx, dO, g_lse):
            q, k, v, O, lse = ctx.saved_tensors
            dQ, dK, dV = attention_backward_impl(torch, dO, q, k, v, O, lse, *ctx.opts)
            return (dQ, dK, dV) + (None,) * 8

    global attention_eager
    attention_eager = AttentionEager.apply

    REGISTERED = True
    return True

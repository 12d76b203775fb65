"""The ctypes layer: library loading, the C structs, status to exception."""
from __future__ import annotations

import ctypes
import os
import pathlib
from typing import NamedTuple, Optional

# Must equal DETFUSE_C_ABI_VERSION in capi/detfuse_c.h (the structs below mirror it).
ABI_VERSION = 6

OK, ERR_INVALID_ARGUMENT, ERR_NO_DEVICE, ERR_RUNTIME, ERR_OUT_OF_MEMORY, ERR_INTERNAL = range(6)
DTYPE_F32, DTYPE_BF16 = 0, 1
REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}
MODE_FORWARD, MODE_FORWARD_BACKWARD, MODE_BACKWARD = 0, 1, 2
ATTENTION_FORWARD, ATTENTION_BACKWARD = 0, 1
SELECT_NAME, SELECT_HEURISTIC, SELECT_TUNED = 0, 1, 2
SOURCES = {0: "named", 1: "tuned", 2: "nearest", 3: "heuristic"}
NAME_CAP, NOTE_CAP = 256, 1024
DEFAULT_DB = "detfuse.db"


class DetfuseError(Exception):
    """A failing library call; ``status`` is the C status code."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class InvalidArgument(DetfuseError, ValueError):
    """Bad argument (the message names it)."""


class NoDevice(DetfuseError, RuntimeError):
    """The call needs a CUDA device and there is none."""


class RuntimeFailure(DetfuseError, RuntimeError):
    """CUDA or library failure at run time."""


class FlceProblem(ctypes.Structure):
    _fields_ = [
        ("N", ctypes.c_int64),
        ("D", ctypes.c_int64),
        ("V", ctypes.c_int64),
        ("dtype", ctypes.c_int32),
        ("grad_dtype", ctypes.c_int32),
        ("ignore_index", ctypes.c_int64),
        ("reduction", ctypes.c_int32),
        ("accumulate_dW", ctypes.c_int32),
        ("label_smoothing", ctypes.c_double),
        ("z_loss", ctypes.c_double),
        ("softcap", ctypes.c_double),
        ("grad_output", ctypes.c_double),
    ]


class FlceArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("X", "W", "y", "dloss", "lse_in", "loss", "lse", "dX", "dW",
                                               "workspace")] + [("workspace_size", ctypes.c_size_t)]


class AttentionProblem(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("B", "H", "Hkv", "Sq", "Sk", "d")] + [
        ("dtype", ctypes.c_int32),
        ("causal", ctypes.c_int32),
        ("scale", ctypes.c_double),
        ("softcap", ctypes.c_double),
        ("window", ctypes.c_int64),
    ]


class AttentionArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("Q", "K", "V", "dO", "O_in", "lse_in", "O", "lse", "dQ", "dK", "dV",
                                               "workspace")] + [("workspace_size", ctypes.c_size_t)]


class Selection(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int32),
        ("allow_nondeterministic", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("db_path", ctypes.c_char_p),
    ]


class CChoice(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * NAME_CAP),
        ("source", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("distance", ctypes.c_double),
        ("tuned_problem_key", ctypes.c_char * NOTE_CAP),
        ("note", ctypes.c_char * NOTE_CAP),
    ]


class Choice(NamedTuple):
    """The variant a selection picked and why (source: named, tuned, nearest, heuristic)."""

    name: str
    source: str
    deterministic: bool
    note: str
    tuned_problem_key: str
    distance: float


_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def _candidates():
    env = os.environ.get("DETFUSE_LIB")
    if env:
        return [pathlib.Path(env)], True
    here = pathlib.Path(__file__).resolve().parent
    return [here / "libdetfuse_c.so", here.parent.parent / "build" / "capi" / "libdetfuse_c.so"], False


def _declare(lib: ctypes.CDLL) -> None:
    P = ctypes.POINTER
    i32, i64, sz, vp, cp = ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
    sigs = {
        "detfuse_abi_version": (i32, []),
        "detfuse_version": (cp, []),
        "detfuse_last_error": (cp, []),
        "detfuse_status_name": (cp, [i32]),
        "detfuse_device_count": (i32, []),
        "detfuse_flce_problem_init": (i32, [P(FlceProblem)]),
        "detfuse_flce_problem_key": (i32, [P(FlceProblem), ctypes.c_char_p, sz]),
        "detfuse_flce_variant_count": (i32, [P(i64)]),
        "detfuse_flce_variant_name": (i32, [i64, ctypes.c_char_p, sz]),
        "detfuse_flce_choose": (i32, [P(FlceProblem), i32, P(Selection), P(CChoice)]),
        "detfuse_flce_choose_level": (i32, [P(FlceProblem), i32, P(Selection), cp, P(CChoice)]),
        "detfuse_flce_workspace_size": (i32, [P(FlceProblem), i32, P(Selection), P(sz)]),
        "detfuse_flce_run": (i32, [P(FlceProblem), i32, P(FlceArgs), P(Selection), vp, P(CChoice)]),
        "detfuse_attention_problem_init": (i32, [P(AttentionProblem)]),
        "detfuse_attention_problem_key": (i32, [P(AttentionProblem), ctypes.c_char_p, sz]),
        "detfuse_attention_variant_count": (i32, [P(i64)]),
        "detfuse_attention_variant_name": (i32, [i64, ctypes.c_char_p, sz]),
        "detfuse_attention_choose": (i32, [P(AttentionProblem), i32, P(Selection), P(CChoice)]),
        "detfuse_attention_choose_level": (i32, [P(AttentionProblem), i32, P(Selection), cp, P(CChoice)]),
        "detfuse_attention_workspace_size": (i32, [P(AttentionProblem), i32, P(Selection), P(sz)]),
        "detfuse_attention_run": (i32, [P(AttentionProblem), i32, P(AttentionArgs), P(Selection), vp, P(CChoice)]),
        "detfuse_digest_device": (i32, [vp, sz, vp, ctypes.c_char_p, sz]),
        "detfuse_scale_unless_one": (i32, [vp, ctypes.c_int64, i32, vp, vp]),
        "detfuse_digest_host": (i32, [vp, sz, ctypes.c_char_p, sz]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


def load_library() -> ctypes.CDLL:
    """Loads libdetfuse_c.so once and checks its ABI version."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    paths, from_env = _candidates()
    found = [p for p in paths if p.is_file()]
    if not found:
        where = "DETFUSE_LIB=" + str(paths[0]) if from_env else ", ".join(str(p) for p in paths)
        raise OSError(f"detfuse: libdetfuse_c.so not found (looked at {where}); build it with "
                      f"`make python` or `cmake --build build --target detfuse_c`, or set DETFUSE_LIB")
    lib = ctypes.CDLL(str(found[0]))
    _declare(lib)
    got = lib.detfuse_abi_version()
    if got != ABI_VERSION:
        raise OSError(f"detfuse: {found[0]} has C ABI version {got}, this package expects {ABI_VERSION}; "
                      f"rebuild the library and reinstall the package from the same checkout")
    _lib, _lib_path = lib, str(found[0])
    return lib


def library_path() -> str:
    load_library()
    return _lib_path  # type: ignore[return-value]


def check(status: int) -> None:
    """Raises the exception for a failing status with the library's message."""
    if status == OK:
        return
    msg = load_library().detfuse_last_error().decode("utf-8", "replace")
    cls = {ERR_INVALID_ARGUMENT: InvalidArgument, ERR_NO_DEVICE: NoDevice}.get(status, RuntimeFailure)
    raise cls(msg, status)


def abi_version() -> int:
    return load_library().detfuse_abi_version()


def version() -> str:
    return load_library().detfuse_version().decode()


def device_count() -> int:
    return load_library().detfuse_device_count()


def make_problem(N, D, V, *, dtype=DTYPE_BF16, grad_dtype=None, ignore_index=-100, reduction="mean",
                 label_smoothing=0.0, z_loss=0.0, softcap=0.0, grad_output=1.0, accumulate_dW=False) -> FlceProblem:
    """A C problem struct; Python-level type errors here, the rest checked by the library."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: must be 'mean', 'sum' or 'none', got {reduction!r}")
    p = FlceProblem()
    check(load_library().detfuse_flce_problem_init(ctypes.byref(p)))
    for name, v in (("N", N), ("D", D), ("V", V), ("ignore_index", ignore_index)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}: must be an int, got {type(v).__name__}")
    for name, v in (("label_smoothing", label_smoothing), ("z_loss", z_loss), ("softcap", softcap),
                    ("grad_output", grad_output)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name}: must be a float, got {type(v).__name__}")
    for name, v in (("N", N), ("D", D), ("V", V), ("ignore_index", ignore_index)):
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"{name}: does not fit in int64, got {v}")
    p.N, p.D, p.V = N, D, V
    p.dtype = dtype
    p.grad_dtype = DTYPE_F32 if grad_dtype is None else grad_dtype
    p.ignore_index = ignore_index
    p.reduction = REDUCTIONS[reduction]
    p.label_smoothing, p.z_loss, p.softcap, p.grad_output = (float(label_smoothing), float(z_loss),
                                                             float(softcap), float(grad_output))
    if not isinstance(accumulate_dW, bool):
        raise TypeError(f"accumulate_dW: must be a bool, got {type(accumulate_dW).__name__}")
    p.accumulate_dW = int(accumulate_dW)
    return p


def validate(p: FlceProblem) -> str:
    """Checks the problem in the library (no GPU) and returns its canonical key."""
    buf = ctypes.create_string_buffer(512)
    check(load_library().detfuse_flce_problem_key(ctypes.byref(p), buf, len(buf)))
    return buf.value.decode()


def problem_key(N, D, V, **options) -> str:
    """The canonical key of an FLCE problem ("flce:N=..,D=..,..."), validated by the library."""
    return validate(make_problem(N, D, V, **options))


def variants() -> list:
    """Names of every FLCE variant compiled into the library."""
    lib = load_library()
    n = ctypes.c_int64()
    check(lib.detfuse_flce_variant_count(ctypes.byref(n)))
    out = []
    buf = ctypes.create_string_buffer(NAME_CAP)
    for i in range(n.value):
        check(lib.detfuse_flce_variant_name(i, buf, NAME_CAP))
        out.append(buf.value.decode())
    return out


def make_selection(variant: str = "tuned", db: Optional[str] = DEFAULT_DB,
                   allow_nondeterministic: bool = False) -> Selection:
    """variant: "tuned" (from the store `db`), "heuristic", or a canonical variant name."""
    if not isinstance(variant, str):
        raise TypeError(f"variant: must be a str ('tuned', 'heuristic' or a variant name), got {type(variant).__name__}")
    s = Selection()
    s.allow_nondeterministic = 1 if allow_nondeterministic else 0
    if variant == "tuned":
        if db is not None and not isinstance(db, (str, os.PathLike)):
            raise TypeError(f"db: must be a path, got {type(db).__name__}")
        s.kind = SELECT_TUNED
        s.db_path = os.fsencode(db) if db is not None else None
    elif variant == "heuristic":
        s.kind = SELECT_HEURISTIC
    else:
        s.kind = SELECT_NAME
        s.name = variant.encode()
    return s


# Determinism levels (db/records.h), weakest first. A stored result HAS a level
# when that level's check and run_to_run were shown on the GPU.
LEVELS = ("none", "run_to_run", "sm_count", "config", "portable")


def check_level(level, variant="tuned"):
    """None, or a level name for a tuned choice; raises ValueError/TypeError otherwise (no GPU)."""
    if level is None:
        return None
    if not isinstance(level, str):
        raise TypeError(f"level: must be a str ({', '.join(LEVELS)}) or None, got {type(level).__name__}")
    if level not in LEVELS:
        raise ValueError(f"level: unknown determinism level '{level}' (one of {', '.join(LEVELS)})")
    if variant != "tuned":
        raise ValueError(f"level: '{level}' needs variant='tuned' (only stored results have a level), got "
                         f"variant={variant!r}")
    return level


def choose_level(p: FlceProblem, mode: int, sel: Selection, level: Optional[str]) -> Choice:
    """The choice of a tuned selection among stored results that have `level` (None: the default rule)."""
    c = CChoice()
    check(load_library().detfuse_flce_choose_level(ctypes.byref(p), mode, ctypes.byref(sel),
                                                   level.encode() if level else None, ctypes.byref(c)))
    return to_choice(c)


def attention_choose_level(p: AttentionProblem, mode: int, sel: Selection, level: Optional[str]) -> Choice:
    c = CChoice()
    check(load_library().detfuse_attention_choose_level(ctypes.byref(p), mode, ctypes.byref(sel),
                                                        level.encode() if level else None, ctypes.byref(c)))
    return to_choice(c)


def to_choice(c: CChoice) -> Choice:
    return Choice(c.name.decode(), SOURCES.get(c.source, "?"), bool(c.deterministic), c.note.decode(),
                  c.tuned_problem_key.decode(), c.distance)


def choose(p: FlceProblem, mode: int, sel: Selection) -> Choice:
    c = CChoice()
    check(load_library().detfuse_flce_choose(ctypes.byref(p), mode, ctypes.byref(sel), ctypes.byref(c)))
    return to_choice(c)


def workspace_size(p: FlceProblem, mode: int, sel: Selection) -> int:
    n = ctypes.c_size_t()
    check(load_library().detfuse_flce_workspace_size(ctypes.byref(p), mode, ctypes.byref(sel), ctypes.byref(n)))
    return n.value


def run(p: FlceProblem, mode: int, args: FlceArgs, sel: Selection, stream: int = 0,
        choice: bool = True) -> Optional[Choice]:
    """Runs FLCE; returns the choice, or None with choice=False (then no
    choice struct is filled or decoded: the per-call path of the torch ops)."""
    c = CChoice() if choice else None
    check(load_library().detfuse_flce_run(ctypes.byref(p), mode, ctypes.byref(args), ctypes.byref(sel),
                                          ctypes.c_void_p(stream or None), ctypes.byref(c) if choice else None))
    return to_choice(c) if choice else None


# ------------------------------------------------------------------ attention

def make_attention_problem(B, H, Hkv, Sq, Sk, d, *, dtype=DTYPE_BF16, causal=False, scale=0.0, softcap=0.0,
                           window=0) -> AttentionProblem:
    """A C attention problem struct; Python-level type errors here, the rest checked by the library."""
    p = AttentionProblem()
    check(load_library().detfuse_attention_problem_init(ctypes.byref(p)))
    dims = (("B", B), ("H", H), ("Hkv", Hkv), ("Sq", Sq), ("Sk", Sk), ("d", d))
    for name, v in dims:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}: must be an int, got {type(v).__name__}")
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"{name}: does not fit in int64, got {v}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: must be a bool, got {type(causal).__name__}")
    for name, v in (("scale", scale), ("softcap", softcap)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name}: must be a float, got {type(v).__name__}")
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window: must be an int, got {type(window).__name__}")
    if not -(2**63) <= window < 2**63:
        raise ValueError(f"window: does not fit in int64, got {window}")
    p.B, p.H, p.Hkv, p.Sq, p.Sk, p.d = B, H, Hkv, Sq, Sk, d
    p.dtype = dtype
    p.causal = 1 if causal else 0
    p.scale = float(scale)
    p.softcap = float(softcap)
    p.window = window
    return p


def attention_validate(p: AttentionProblem) -> str:
    """Checks the attention problem in the library (no GPU) and returns its key."""
    buf = ctypes.create_string_buffer(512)
    check(load_library().detfuse_attention_problem_key(ctypes.byref(p), buf, len(buf)))
    return buf.value.decode()


def attention_problem_key(B, H, Hkv, Sq, Sk, d, **options) -> str:
    """The canonical key of an attention problem ("attention:B=..,H=..,..."), validated by the library."""
    return attention_validate(make_attention_problem(B, H, Hkv, Sq, Sk, d, **options))


def attention_variants() -> list:
    """Names of every attention variant compiled into the library."""
    lib = load_library()
    n = ctypes.c_int64()
    check(lib.detfuse_attention_variant_count(ctypes.byref(n)))
    out = []
    buf = ctypes.create_string_buffer(NAME_CAP)
    for i in range(n.value):
        check(lib.detfuse_attention_variant_name(i, buf, NAME_CAP))
        out.append(buf.value.decode())
    return out


def attention_choose(p: AttentionProblem, mode: int, sel: Selection) -> Choice:
    c = CChoice()
    check(load_library().detfuse_attention_choose(ctypes.byref(p), mode, ctypes.byref(sel), ctypes.byref(c)))
    return to_choice(c)


def attention_workspace_size(p: AttentionProblem, mode: int, sel: Selection) -> int:
    n = ctypes.c_size_t()
    check(load_library().detfuse_attention_workspace_size(ctypes.byref(p), mode, ctypes.byref(sel),
                                                          ctypes.byref(n)))
    return n.value


def attention_run(p: AttentionProblem, mode: int, args: AttentionArgs, sel: Selection, stream: int = 0,
                  choice: bool = True) -> Optional[Choice]:
    """Runs attention; returns the choice, or None with choice=False (no
    choice struct filled or decoded: the per-call path of the torch ops)."""
    c = CChoice() if choice else None
    check(load_library().detfuse_attention_run(ctypes.byref(p), mode, ctypes.byref(args), ctypes.byref(sel),
                                               ctypes.c_void_p(stream or None), ctypes.byref(c) if choice else None))
    return to_choice(c) if choice else None


def scale_unless_one(ptr: int, n: int, dtype: int, scale_ptr: int, stream: int = 0) -> None:
    """data[i] *= g on `stream` for the n elements (DTYPE_F32 / DTYPE_BF16) at
    device address ptr, g the float at device address scale_ptr, unless g == 1;
    the host does not wait (capi/detfuse_c.h, detfuse_scale_unless_one)."""
    check(load_library().detfuse_scale_unless_one(ctypes.c_void_p(ptr or None), n, dtype,
                                                  ctypes.c_void_p(scale_ptr or None), ctypes.c_void_p(stream or None)))


def digest_device(ptr: int, nbytes: int, stream: int = 0) -> str:
    hexbuf = ctypes.create_string_buffer(33)
    check(load_library().detfuse_digest_device(ctypes.c_void_p(ptr or None), nbytes, ctypes.c_void_p(stream or None),
                                               hexbuf, 33))
    return hexbuf.value.decode()


def digest_host(data) -> str:
    mv = memoryview(data).cast("B")
    if not mv.contiguous:
        raise ValueError("digest: the buffer must be contiguous")
    n = mv.nbytes
    hexbuf = ctypes.create_string_buffer(33)
    if n == 0:
        check(load_library().detfuse_digest_host(None, 0, hexbuf, 33))
    else:
        buf = (ctypes.c_char * n).from_buffer_copy(mv) if mv.readonly else (ctypes.c_char * n).from_buffer(mv)
        check(load_library().detfuse_digest_host(ctypes.addressof(buf), n, hexbuf, 33))
    return hexbuf.value.decode()


def digest(obj) -> str:
    """XXH3-128 (32 hex digits) of the raw bytes of a tensor (CUDA or CPU; must
    be contiguous) or of a bytes-like object. Equal digests mean equal bits."""
    mod = type(obj).__module__
    if mod.startswith("torch"):
        from .torch import digest as torch_digest

        return torch_digest(obj)
    try:
        return digest_host(obj)
    except TypeError:
        raise TypeError(f"digest: expected a torch.Tensor or a bytes-like object, got {type(obj).__name__}") from None

"""detfuse: bitwise-reproducible fused GPU kernels (ctypes over libdetfuse_c.so).

``import detfuse`` needs neither torch nor a GPU; ``detfuse.torch`` imports torch
when first used. The library is found through $DETFUSE_LIB (a path to the .so),
then next to this file (``make python`` puts it there), then in the source
tree's ``build/capi/``.
"""
from ._lib import (  # noqa: F401
    ABI_VERSION,
    Choice,
    DetfuseError,
    InvalidArgument,
    NoDevice,
    RuntimeFailure,
    abi_version,
    attention_problem_key,
    attention_variants,
    device_count,
    digest,
    library_path,
    load_library,
    problem_key,
    variants,
    version,
)

__version__ = "0.1.0"

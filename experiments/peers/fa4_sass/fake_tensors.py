"""What compile_fwd.py and compile_bwd.py share: the build switches from the
environment and fake tensors for cute.compile (no GPU, no torch)."""
import os

import cutlass
import cutlass.cute as cute

D = int(os.environ.get("FA4_HDIM", "64"))
CAUSAL = os.environ.get("FA4_CAUSAL", "1") == "1"
DTYPE = cutlass.BFloat16


def fake(dt, shape, leading_dim, div):
    """A fake tensor with dynamic strides of the divisibility interface.py's
    mark_layout_dynamic would infer from a contiguous torch tensor: the real
    alignment is assumed, not known."""
    stride = tuple(1 if i == leading_dim else cute.sym_int64(divisibility=div) for i in range(len(shape)))
    return cute.runtime.make_fake_tensor(dt, shape, stride=stride, assumed_align=max(div * dt.width // 8, 4))

"""Compile FlashAttention-4's Hopper forward kernel (FlashAttentionForwardSm90, bf16) without a GPU.

Why: to read FA4's PTX/SASS beside detfuse's without spending device time. The
kernel is built the way flash_attn.cute.interface builds it for sm_90 (tile
config from its own heuristic, num_stages=2, 384 threads, --enable-tvm-ffi),
but from fake tensors (cute.runtime.make_fake_tensor), so neither torch nor a
device is touched. The DSL writes the PTX/cubin into $CUTE_DSL_DUMP_DIR when
CUTE_DSL_KEEP=ptx,cubin (run.sh sets this up).

Env: FA4_HDIM (default 64), FA4_CAUSAL (default 1).
"""
import math
import os
import time

import cutlass
import cutlass.cute as cute
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
from flash_attn.cute.interface import _tile_size_fwd_sm90
from flash_attn.cute.utils import AuxData

from fake_tensors import CAUSAL, D, DTYPE, fake

dtype = DTYPE
cfg = _tile_size_fwd_sm90(D, D, CAUSAL, False)
print(f"fwd hdim={D} causal={CAUSAL}", cfg)


b, s, h = cute.sym_int(), cute.sym_int(), cute.sym_int()
q, k, v, o = [fake(dtype, (b, s, h, D), 3, 8) for _ in range(4)]
lse = fake(cutlass.Float32, (b, h, s), 2, 1)

fa_fwd = FlashAttentionForwardSm90(
    dtype, D, D, 1,
    is_causal=CAUSAL, is_local=False, pack_gqa=False,
    tile_m=cfg.m_block_size, tile_n=cfg.n_block_size,
    num_stages=2, num_threads=384, Q_in_regs=False,
    intra_wg_overlap=cfg.intra_wg_overlap, mma_pv_is_rs=cfg.mma_pv_is_rs,
    mask_mod=None, score_mod=None, has_aux_tensors=False,
    q_subtile_factor=1, paged_kv_non_tma=False,
)
stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
# Positional order as in interface.py's compile call.
args = [fa_fwd, q, k, v, o, lse, 1.0 / math.sqrt(D),
        None, None, None, None, None, None, None, None,  # cu_seqlens_q/k, seqused_q/k, page_table, window l/r, sink
        None, AuxData(None, None), None, None, stream]
t = time.time()
cute.compile(*args, options="--enable-tvm-ffi")
print("fwd compiled in %.1f s" % (time.time() - t))

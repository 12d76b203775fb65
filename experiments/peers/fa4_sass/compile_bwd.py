"""Compile FlashAttention-4's Hopper backward kernel (FlashAttentionBackwardSm90, bf16) without a GPU.

Why: as compile_fwd.py, for the backward main kernel only (the preprocess and
postprocess kernels interface.py also launches are not built). Tile config from
interface.py's _tile_size_bwd_sm90, fake tensors instead of torch ones.

Env: FA4_HDIM (default 64), FA4_CAUSAL (default 1), FA4_DETERMINISTIC (default 0;
1 builds the deterministic backward that attention_peers.py measures with
flash_attn_func(deterministic=True): MHA, so only the dQ semaphore is passed).
"""
import math
import os
import time

import cutlass
import cutlass.cute as cute
from flash_attn.cute.flash_bwd_sm90 import FlashAttentionBackwardSm90
from flash_attn.cute.interface import _tile_size_bwd_sm90
from flash_attn.cute.utils import AuxData

from fake_tensors import CAUSAL, D, DTYPE, fake

DETERMINISTIC = os.environ.get("FA4_DETERMINISTIC", "0") == "1"
dtype = DTYPE
cfg = _tile_size_bwd_sm90(D, D, CAUSAL, False)
print(f"bwd hdim={D} causal={CAUSAL} deterministic={DETERMINISTIC}", cfg)


b, s, h = cute.sym_int(), cute.sym_int(), cute.sym_int()
s_rounded = cute.sym_int()        # seqlen_q rounded up to tile_m
sd_rounded = cute.sym_int()       # seqlen_q_rounded * head_dim_rounded (dQ accumulator)
q, k, v, do, dk, dv = [fake(dtype, (b, s, h, D), 3, 8) for _ in range(6)]
lse_log2 = fake(cutlass.Float32, (b, h, s_rounded), 2, 1)
dpsum = fake(cutlass.Float32, (b, h, s_rounded), 2, 1)
dq_accum = fake(cutlass.Float32, (b, h, sd_rounded), 2, 1)
# interface.py: int32 (batch, heads, m_blocks, cluster_size=1), only when deterministic.
dq_semaphore = fake(cutlass.Int32, (b, h, cute.sym_int(), 1), 3, 1) if DETERMINISTIC else None

obj = FlashAttentionBackwardSm90(
    dtype, D, D, 1, CAUSAL, is_local=False, deterministic=DETERMINISTIC,
    tile_m=cfg.m_block_size, tile_n=cfg.n_block_size,
    Q_stage=cfg.num_stages_Q, dO_stage=cfg.num_stages_dO, PdS_stage=cfg.num_stages_PdS,
    SdP_swapAB=cfg.SdP_swapAB, dKV_swapAB=cfg.dKV_swapAB, dQ_swapAB=cfg.dQ_swapAB,
    AtomLayoutMSdP=cfg.AtomLayoutMSdP, AtomLayoutNdKV=cfg.AtomLayoutNdKV, AtomLayoutMdQ=cfg.AtomLayoutMdQ,
    num_threads=(cfg.num_wg + 1) * 128, V_in_regs=False,
    score_mod=None, score_mod_bwd=None, mask_mod=None, has_aux_tensors=False,
    q_subtile_factor=1, dQ_single_wg=cfg.dQ_single_wg,
)
stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
# Positional order of FlashAttentionBackwardSm90.__call__.
args = [obj, q, k, v, do, lse_log2, dpsum, dq_accum, dk, dv, 1.0 / math.sqrt(D),
        None, None, None, None, None, None,  # cu_seqlens_q/k, seqused_q/k, window l/r
        dq_semaphore, None, None,            # dQ, dK, dV semaphores
        AuxData(None, None), None, None, stream]
t = time.time()
cute.compile(*args, options="--enable-tvm-ffi")
print("bwd compiled in %.1f s" % (time.time() - t))

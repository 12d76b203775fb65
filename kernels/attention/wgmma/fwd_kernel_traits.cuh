// The forward's kernel traits (FlashAttention-3's kernel_traits role, read to
// learn, not copied): from a FwdConfig (attention_wgmma.h) the tile sizes, the
// two TiledMMAs, the swizzled shared-memory layouts, the shared storage, the
// TMA copy types and the kernel's Params (made once on the host by
// launch_fwd_impl, attention_wgmma.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/attention/wgmma/attention_wgmma.h"
#include "kernels/attention/wgmma/fwd_tile_scheduler.h"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace detfuse::attention::wg {

using namespace cute;

template <class Cfg>
struct Fwd {
  using T = cutlass::bfloat16_t;
  static constexpr int D = Cfg::D, BR = Cfg::BR, BC = Cfg::BC, ST = Cfg::STAGES, QS = Cfg::QSTAGES;
  // One producer warpgroup and BR / 64 consumer warpgroups of 64 query rows:
  // two (384 threads) at BR = 128, three (512 threads) at BR = 192.
  static constexpr int kConsumerWGs = BR / 64;
  static_assert(kConsumerWGs * 64 == BR && (kConsumerWGs == 2 || kConsumerWGs == 3), "64 query rows per warpgroup");
  static constexpr int THREADS = 128 * (1 + kConsumerWGs);
  static constexpr int kConsumers = 128 * kConsumerWGs;
  // setmaxnreg (multiples of 8): two consumer warpgroups 128 * (24 + 2 * 240)
  // <= 64K registers; three 128 * (32 + 3 * 160) = 64K (FlashAttention-3's
  // split for three MMA warpgroups; 168 each would need 24 + 3 * 168 = 528).
  static constexpr int kProducerRegs = kConsumerWGs == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;
  static_assert(128 * (kProducerRegs + kConsumerWGs * kConsumerRegs) <= 64 * 1024, "the register file");
  static_assert(kProducerRegs % 8 == 0 && kConsumerRegs % 8 == 0, "setmaxnreg takes multiples of 8");
  static constexpr uint32_t kTileBytes = uint32_t(BC) * D * sizeof(T);
  static constexpr uint32_t kQBytes = uint32_t(BR) * D * sizeof(T);
  static constexpr int kQElems = BR * D;  // one Q buffer (a multiple of 1024 bytes)

  // The consumer warpgroups along M (Int<2> is _2: the two-warpgroup types are unchanged).
  using WgLayout = Layout<Shape<Int<kConsumerWGs>, _1, _1>>;
  // S = Q K^T: M 64 per warpgroup, N = BC keys, K = D; both operands K-major.
  using MmaQK =
      decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BC>, Int<D>>>(), WgLayout{}));
  // O += P V: M 64, N = D, K = BC; P from registers (K-major), V MN-major.
  using MmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Shape<_64, Int<D>, Int<BC>>, GMMA::Major::K, GMMA::Major::MN>(),
      WgLayout{}));

  // 128-byte swizzled tiles (64 bf16 = one swizzle row along d), as TMA writes
  // them and wgmma reads them.
  using Atom = GMMA::Layout_K_SW128_Atom<T>;
  using SmemQ = decltype(tile_to_shape(Atom{}, Shape<Int<BR>, Int<D>>{}));
  using SmemK = decltype(tile_to_shape(Atom{}, Shape<Int<BC>, Int<D>, Int<ST>>{}));
  using SmemV = SmemK;
  // V seen as (d, key, stage): the B operand of P V, MN-major in shared memory.
  using SmemVt =
      decltype(composition(SmemV{}, make_layout(Shape<Int<D>, Int<BC>, Int<ST>>{}, Stride<Int<BC>, _1, Int<BC * D>>{})));

  using Pipeline = cutlass::PipelineTmaAsync<ST>;
  using PipelineState = typename Pipeline::PipelineState;

  // TMA_O: the O tile of the epilogue (BR x D, the layout of Q), as a base so
  // the other configurations' storage is unchanged (empty base).
  struct OBuf {
    cute::array_aligned<T, cosize_v<SmemQ>, 1024> o;
  };
  struct NoOBuf {};
  struct SharedStorage : std::conditional_t<Cfg::TMA_O != 0, OBuf, NoOBuf> {
    cute::array_aligned<T, QS * cosize_v<SmemQ>, 1024> q;  // QS buffers of kQElems
    cute::array_aligned<T, cosize_v<SmemK>, 1024> k;
    cute::array_aligned<T, cosize_v<SmemV>, 1024> v;
    typename Pipeline::SharedStorage pipe_k;
    typename Pipeline::SharedStorage pipe_v;
    alignas(8) uint64_t q_bar[QS];
    alignas(8) uint64_t q_empty[QS];  // persistent: the consumers are done with that Q buffer
  };

  // Global tensors (S, d, heads, B) with d contiguous.
  using GShape = Shape<int32_t, int32_t, int32_t, int32_t>;
  using GStride = Stride<int64_t, _1, int64_t, int64_t>;
  using GTensor = decltype(make_tensor(make_gmem_ptr(static_cast<T const*>(nullptr)), GShape{}, GStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, SmemQ{}, Shape<Int<BR>, Int<D>>{}, _1{}));
  using TmaKV =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GTensor{}, take<0, 2>(SmemK{}), Shape<Int<BC>, Int<D>>{}, _1{}));
  // TMA_O: the store of one O tile (rows past Sq are clipped by the tensor map).
  using GTensorO = decltype(make_tensor(make_gmem_ptr(static_cast<T*>(nullptr)), GShape{}, GStride{}));
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{}, GTensorO{}, SmemQ{}, Shape<Int<BR>, Int<D>>{}, _1{}));
  struct NoTmaO {};
  using TmaOField = std::conditional_t<Cfg::TMA_O != 0, TmaO, NoTmaO>;

  struct Params {
    TmaQ tma_q;
    TmaKV tma_k;
    TmaKV tma_v;
    int B, H, Hkv, Sq, Sk, group;  // group = H / Hkv
    int m_blocks;
    int causal;
    float scale;       // softmax scale (natural)
    float scale_log2;  // scale * log2(e)
    T* O;
    float* lse;
    int window;        // 0: off (also when >= Sk: it hides nothing then)
    int softcap;       // 0: off; else cap_* below (detail::softcap_raw)
    float cap_k, cap_c;
    FwdTileOrder order;  // persistent: the tile order (fwd_tile_scheduler.h)
    TmaOField tma_o;     // TMA_O: the O store
  };
};

}  // namespace detfuse::attention::wg

// The forward's O-by-TMA epilogue (FwdConfig TMA_O, param ot1) on the host,
// without a GPU: each consumer thread writes its accumulator values v, v + 1
// into the shared O tile through the PV product's partition_C of the tile
// (one 4-byte store per pair), and the TMA store then reads the tile as
// SmemQ(row, col) = O(row, col). Checked here element by element: the
// partition puts value v of consumer thread t at SmemQ(row, col) of the
// documented accumulator fragment (attention_wgmma.cuh), v + 1 right after v
// in memory at a 4-byte aligned offset, and the 256 threads cover the BR x D
// tile exactly once. Also the shared storage: the O tile first, 1024-byte
// aligned, the other configurations' storage unchanged by the new member.
// Since session 15 also the S fragment and the consumer warpgroups of the
// three-warpgroup (BR = 192) configurations.
#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

#include "kernels/attention/wgmma/attention_wgmma.cuh"
#include "kernels/attention/wgmma/bwd_kernel_traits.cuh"

namespace {

using namespace detfuse::attention::wg;

template <class Cfg>
void check_o_tile() {
  using K_ = Fwd<Cfg>;
  using T = typename K_::T;
  constexpr int BR = K_::BR, D = K_::D;
  alignas(1024) static T buf[BR * D];
  auto sO = cute::make_tensor(cute::make_smem_ptr(buf), typename K_::SmemQ{});
  typename K_::MmaPV mma_pv;
  std::vector<int> seen(BR * D, 0);
  int bad_pos = 0, bad_pair = 0, bad_align = 0;
  for (int ctid = 0; ctid < K_::kConsumers; ++ctid) {
    auto thr = mma_pv.get_thread_slice(ctid);
    auto tOsO = thr.partition_C(sO);
    ASSERT_EQ(int(cute::size(tOsO)), D / 2);
    const int lane = ctid % 32, w = (ctid % 128) / 32;
    for (int v = 0; v < D / 2; ++v) {
      const int off = int(&tOsO(v) - buf);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, BR * D);
      ++seen[off];
      const int row = (ctid / 128) * 64 + 16 * w + lane / 4 + 8 * ((v / 2) % 2);
      const int col = 8 * (v / 4) + 2 * (lane % 4) + v % 2;
      bad_pos += &tOsO(v) != &sO(row, col);
      if (v % 2 == 0) {
        bad_pair += &tOsO(v + 1) != &tOsO(v) + 1;
        bad_align += off % 2 != 0;
      }
    }
  }
  EXPECT_EQ(bad_pos, 0) << "partition_C(sO) is not the accumulator fragment's (row, col) in SmemQ";
  EXPECT_EQ(bad_pair, 0) << "values v, v + 1 are not adjacent in the tile";
  EXPECT_EQ(bad_align, 0) << "a pair is not 4-byte aligned";
  int once = 0;
  for (int s : seen) once += s == 1;
  EXPECT_EQ(once, BR * D) << "the consumers do not cover the O tile exactly once";
}

TEST(AttentionWgmmaFwdLayout, OTileStoresMatchTmaLayoutD128) { check_o_tile<FwdD128Bc128St2OvPsRdOt>(); }
TEST(AttentionWgmmaFwdLayout, OTileStoresMatchTmaLayoutD64) { check_o_tile<FwdD64Bc128St3OvPsRdOt>(); }
// Three consumer warpgroups (BR = 192): 384 consumer threads over the 192 x 64 tile.
TEST(AttentionWgmmaFwdLayout, OTileStoresMatchTmaLayoutD64Br192) { check_o_tile<FwdD64Br192Bc128St3OvPsRdOt>(); }

// The score fragment of the S = Q K^T TiledMMA (its partition_C of a
// row-major BR x BC tile): value v of consumer thread ctid at the row and
// column the mask, the softmax and the epilogue assume (attention_wgmma.cuh:
// warpgroup ctid / 128 owns rows 64 (ctid / 128) ..+ 63), every element once;
// with two and with three consumer warpgroups.
template <class Cfg>
void check_s_fragment() {
  using K_ = Fwd<Cfg>;
  constexpr int BR = K_::BR, BC = K_::BC;
  static int buf[BR * BC];
  auto sS = cute::make_tensor(&buf[0], cute::make_layout(cute::make_shape(cute::Int<BR>{}, cute::Int<BC>{}),
                                                         cute::make_stride(cute::Int<BC>{}, cute::_1{})));
  typename K_::MmaQK mma_qk;
  ASSERT_EQ(int(cute::size(mma_qk)), K_::kConsumers);
  std::vector<int> seen(BR * BC, 0);
  int bad = 0;
  for (int ctid = 0; ctid < K_::kConsumers; ++ctid) {
    auto tSsS = mma_qk.get_thread_slice(ctid).partition_C(sS);
    ASSERT_EQ(int(cute::size(tSsS)), BC / 2);
    const int lane = ctid % 32, w = (ctid % 128) / 32;
    for (int v = 0; v < BC / 2; ++v) {
      const int off = int(&tSsS(v) - buf);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, BR * BC);
      ++seen[off];
      const int row = (ctid / 128) * 64 + 16 * w + lane / 4 + 8 * ((v / 2) % 2);
      const int col = 8 * (v / 4) + 2 * (lane % 4) + v % 2;
      bad += off != row * BC + col;
    }
  }
  EXPECT_EQ(bad, 0) << "the S fragment is not at the documented (row, col)";
  int once = 0;
  for (int x : seen) once += x == 1;
  EXPECT_EQ(once, BR * BC) << "the consumers do not cover the score tile exactly once";
}

TEST(AttentionWgmmaFwdLayout, ScoreFragmentRowsPerWarpgroup) {
  check_s_fragment<FwdD64Bc128St3OvPsRdOt>();
  check_s_fragment<FwdD128Bc128St2OvPsRdOt>();
  check_s_fragment<FwdD64Br192Bc128St3OvPsRd>();
  check_s_fragment<FwdD64Br192Bc128St3OvPsRdOt>();
}

// The consumer warpgroups follow from BR: two at 128 (384 threads,
// setmaxnreg 24 / 240, as before), three at 192 (512 threads, 32 / 160:
// the whole 64K register file).
TEST(AttentionWgmmaFwdLayout, ConsumerWarpgroupsFromTheTile) {
  using F128 = Fwd<FwdD64Bc128St3OvPsRdOt>;
  using F192 = Fwd<FwdD64Br192Bc128St3OvPsRdOt>;
  EXPECT_EQ(F128::kConsumerWGs, 2);
  EXPECT_EQ(F128::THREADS, 384);
  EXPECT_EQ(F128::kConsumers, 256);
  EXPECT_EQ(F128::kProducerRegs, 24);
  EXPECT_EQ(F128::kConsumerRegs, 240);
  EXPECT_EQ(F192::kConsumerWGs, 3);
  EXPECT_EQ(F192::THREADS, 512);
  EXPECT_EQ(F192::kConsumers, 384);
  EXPECT_EQ(F192::kProducerRegs, 32);
  EXPECT_EQ(F192::kConsumerRegs, 160);
  EXPECT_EQ(128 * (F192::kProducerRegs + 3 * F192::kConsumerRegs), 64 * 1024);
  EXPECT_EQ(int(cute::size(typename F192::MmaPV{})), 384);
  // The Q tile (and TMA box) of 192 rows: 24 KB, a multiple of 1024 bytes.
  EXPECT_EQ(F192::kQBytes, 24u * 1024u);
  EXPECT_EQ(int(cute::cosize_v<typename F192::SmemQ>), 192 * 64);
}

template <class Cfg>
size_t offset_of_q() {
  using S = typename Fwd<Cfg>::SharedStorage;
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  return size_t(reinterpret_cast<const unsigned char*>(s.q.data()) - raw);
}

template <class Cfg>
void check_ot_storage() {
  using K_ = Fwd<Cfg>;
  using S = typename K_::SharedStorage;
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  const size_t o = size_t(reinterpret_cast<const unsigned char*>(s.o.data()) - raw);
  EXPECT_EQ(o, 0u);
  EXPECT_EQ(offset_of_q<Cfg>(), size_t(Cfg::BR * Cfg::D * 2)) << "Q right after the O tile";
  EXPECT_EQ(offset_of_q<Cfg>() % 1024, 0u);
  EXPECT_LE(sizeof(S) + 1024, size_t(227 * 1024));
  EXPECT_GE(sizeof(S), size_t(Cfg::kSmemTiles));
}

TEST(AttentionWgmmaFwdLayout, OTileStorage) {
  check_ot_storage<FwdD128Bc128St2OvPsRdOt>();
  check_ot_storage<FwdD128Bc128St2OvPpPsRdOt>();
  check_ot_storage<FwdD128Bc128St2OvRdOt>();
  check_ot_storage<FwdD128Bc160St2OvPsRdOt>();
  check_ot_storage<FwdD64Bc128St3OvPsRdOt>();
  check_ot_storage<FwdD64Br192Bc128St3OvPsRdOt>();
  // bc160 st2 d128 with the O tile: 32 + 32 + 2 x 80 KB = 224 KB of tiles.
  EXPECT_EQ(FwdD128Bc160St2OvPsRdOt::kSmemTiles, 224 * 1024);
  // br192 bc128 st3 d64 with the O tile: 24 + 24 + 2 x 3 x 16 KB = 144 KB of tiles; without it 120 KB.
  EXPECT_EQ(FwdD64Br192Bc128St3OvPsRdOt::kSmemTiles, 144 * 1024);
  EXPECT_EQ(FwdD64Br192Bc128St3OvPsRd::kSmemTiles, 120 * 1024);
}

// Without the O tile the storage is what it was (the empty base adds nothing):
// Q first, and the same size as the rd1 configuration of the same tiles.
TEST(AttentionWgmmaFwdLayout, OtherStorageUnchanged) {
  EXPECT_EQ(offset_of_q<FwdD128Bc128St2OvPs>(), 0u);
  EXPECT_EQ(offset_of_q<FwdD128Bc128St2OvPsRd>(), 0u);
  EXPECT_EQ(sizeof(Fwd<FwdD128Bc128St2OvPs>::SharedStorage), sizeof(Fwd<FwdD128Bc128St2OvPsRd>::SharedStorage));
  EXPECT_EQ(sizeof(Fwd<FwdD128Bc128St2OvPsRdOt>::SharedStorage),
            sizeof(Fwd<FwdD128Bc128St2OvPs>::SharedStorage) + 128 * 128 * 2);
  // 32 KB Q + 2 x 2 x 32 KB K/V + barriers, rounded to the 1024-byte alignment.
  EXPECT_EQ(sizeof(Fwd<FwdD128Bc128St2OvPs>::SharedStorage), size_t(161 * 1024));
}

// The build's CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (kernels/attention/wgmma/
// CMakeLists.txt, session 23): a tile N of 80, 160 or 176 is now one wgmma
// (64x80x16, 64x160x16, 64x176x16) where it was 64x16 or 64x32 pieces. The
// kernels' hand-written fragment arithmetic (the mask's and the softmax's
// column of value v, the dS^T / P^T stores, dq_row / dq_col) assumes an
// order of the values: both atoms give every value of every thread the same
// (row, column), so nothing but the instruction issue changes. Also that the
// forward's S product and the kv kernels' S^T / dP^T (pds4) take the full-N
// atom.
template <int N, class Piece, class Whole>
void expect_same_c_fragment() {
  using namespace cute;
  auto piece = make_tiled_mma(Piece{}, Layout<Shape<_2, _1, _1>>{});
  auto whole = make_tiled_mma(Whole{}, Layout<Shape<_2, _1, _1>>{});
  const auto id = make_identity_tensor(Shape<_128, Int<N>>{});
  int bad = 0;
  for (int t = 0; t < 256; ++t) {
    const auto a = piece.get_thread_slice(t).partition_C(id);
    const auto b = whole.get_thread_slice(t).partition_C(id);
    ASSERT_EQ(int(size(a)), int(size(b)));
    for (int i = 0; i < int(size(a)); ++i) bad += get<0>(a(i)) != get<0>(b(i)) || get<1>(a(i)) != get<1>(b(i));
  }
  EXPECT_EQ(bad, 0) << "N = " << N;
}

TEST(AttentionWgmmaFwdLayout, ExtendedWgmmaAtomsKeepTheFragmentOrder) {
  using namespace cute::SM90::GMMA;
  using K = cute::GMMA::Major;
  expect_same_c_fragment<176, MMA_64x16x16_F32BF16BF16_SS<K::K, K::K>, MMA_64x176x16_F32BF16BF16_SS<K::K, K::K>>();
  expect_same_c_fragment<160, MMA_64x32x16_F32BF16BF16_SS<K::K, K::K>, MMA_64x160x16_F32BF16BF16_SS<K::K, K::K>>();
  expect_same_c_fragment<80, MMA_64x16x16_F32BF16BF16_SS<K::K, K::K>, MMA_64x80x16_F32BF16BF16_SS<K::K, K::K>>();
  static_assert(std::is_same_v<typename Fwd<FwdD128Bc176St2OvPsRd>::MmaQK::Atom::MMA_Op,
                               MMA_64x176x16_F32BF16BF16_SS<K::K, K::K>>);
  static_assert(std::is_same_v<typename Fwd<FwdD128Bc160St2OvPsRdOt>::MmaQK::Atom::MMA_Op,
                               MMA_64x160x16_F32BF16BF16_SS<K::K, K::K>>);
  static_assert(std::is_same_v<typename BwdKv<KvD128Br80St2OTS4E2B5>::MmaSdP::Atom::MMA_Op,
                               MMA_64x80x16_F32BF16BF16_SS<K::K, K::K>>);
}

}  // namespace

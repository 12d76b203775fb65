// The pds kv kernels (kernels/attention/wgmma, BwdKvPdsConfig)
// store P^T and dS^T with hand-swizzled addresses (BwdKv::pt_offset) into
// tiles that their wgmma products read through cute layouts (SmemPt, and
// SmemPtT, the transposed view the dQ product reads dS through). On the host,
// element by element: pt_offset(r, c) is where the SmemPt layout puts (r, c)
// in a 1024-byte aligned tile, and SmemPtT(q, k) is SmemPt(k, q). A mismatch
// would give wrong dV, dK, dQ on the GPU, so it is checked here without one.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/attention/wgmma/attention_wgmma_bwd.cuh"

namespace {

using namespace detfuse::attention::wg;

template <class Cfg>
void check_pt_layout() {
  using K_ = BwdKv<Cfg>;
  using T = typename K_::T;
  constexpr int BR = K_::BR, BC = K_::BC;
  alignas(1024) static T buf[BC * BR];
  auto sPt = cute::make_tensor(cute::make_smem_ptr(buf), typename K_::SmemPt{});
  auto sPtT = cute::make_tensor(cute::make_smem_ptr(buf), typename K_::SmemPtT{});
  int bad = 0, bad_view = 0;
  std::vector<int> seen(BC * BR, 0);
  for (int r = 0; r < BC; ++r)
    for (int c = 0; c < BR; ++c) {
      const int off = int(&sPt(r, c) - buf);
      bad += off != K_::pt_offset(r, c);
      if (off >= 0 && off < BC * BR) ++seen[off];
      bad_view += &sPtT(c, r) != &sPt(r, c);
    }
  EXPECT_EQ(bad, 0) << "pt_offset differs from the SmemPt layout";
  EXPECT_EQ(bad_view, 0) << "SmemPtT is not the transpose of SmemPt";
  int once = 0;
  for (int s : seen) once += s == 1;
  EXPECT_EQ(once, BC * BR) << "SmemPt is not a bijection onto the tile";
  // Keys r + 8 are 8 * 64 elements on (the kernel's stores rely on it; pds3:
  // in each of the two 64-query columns of atoms).
  for (int r = 0; r + 8 < BC; ++r)
    for (int c = 0; c < BR; ++c) ASSERT_EQ(K_::pt_offset(r + 8, c), K_::pt_offset(r, c) + 8 * 64) << r << "," << c;
}

TEST(AttentionWgmmaPds, PtOffsetMatchesCuteLayoutD128) { check_pt_layout<KvD128Br64St2OTS>(); }
TEST(AttentionWgmmaPds, PtOffsetMatchesCuteLayoutD64) { check_pt_layout<KvD64Br64St3ATS>(); }
TEST(AttentionWgmmaPds, PtOffsetMatchesCuteLayoutPds2) {
  check_pt_layout<KvD128Br64St2OTS2>();
  check_pt_layout<KvD64Br64St2ATS2>();
}
// pds3: 128 queries per row of P^T / dS^T, two columns of swizzle atoms.
TEST(AttentionWgmmaPds, PtOffsetMatchesCuteLayoutPds3) {
  check_pt_layout<KvD64Br128St2OTS3>();
  check_pt_layout<KvD64Br128St2ATS3>();
}
// pds3's stores address the tile by pt3_offset (a per-block base and swizzle,
// chunk by chunk): the same element as pt_offset for every thread's keys kl0,
// kl0 + 8 and query chunks.
TEST(AttentionWgmmaPds, Pds3StoreOffsetsArePtOffset) {
  using K_ = BwdKv<KvD64Br128St2OTS3>;
  constexpr int BC = K_::BC, BR = K_::BR;
  int bad = 0;
  for (int ctid = 0; ctid < 256; ++ctid) {
    const int lane = ctid % 32, wq = (ctid % 128) / 32, wg = ctid / 128;
    const int kl0 = wg * 64 + wq * 16 + lane / 4, col_lane = 2 * (lane % 4);
    for (int v = 0; v < BR / 2; v += 2) {
      const int got = pt3_offset<BC>(kl0 * 64 + col_lane, (kl0 & 7) << 3, v / 4, (v / 2) % 2);
      bad += got != K_::pt_offset(kl0 + 8 * ((v / 2) % 2), 8 * (v / 4) + col_lane);
    }
  }
  EXPECT_EQ(bad, 0);
}

// The stacked dS^T tiles (SmemPt2, SmemPtT2: the wgmma descriptors of the dK
// and dQ products, buffer i = query-block parity in pds2) against the stores'
// addresses: tile i starts BC * BR elements after tile i - 1 and holds
// pt_offset inside; the transposed view is the transpose tile by tile.
template <class Cfg>
void check_stacked_layout() {
  using K_ = BwdKv<Cfg>;
  using T = typename K_::T;
  constexpr int BR = K_::BR, BC = K_::BC;
  alignas(1024) static T buf[2 * BC * BR];
  auto s2 = cute::make_tensor(cute::make_smem_ptr(buf), typename K_::SmemPt2{});
  auto s2t = cute::make_tensor(cute::make_smem_ptr(buf), typename K_::SmemPtT2{});
  int bad = 0, bad_view = 0;
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < BC; ++r)
      for (int c = 0; c < BR; ++c) {
        bad += int(&s2(r, c, i) - buf) != i * BC * BR + K_::pt_offset(r, c);
        bad_view += &s2t(c, r, i) != &s2(r, c, i);
      }
  EXPECT_EQ(bad, 0) << "a stacked dS^T tile differs from pt_offset + i BC BR";
  EXPECT_EQ(bad_view, 0) << "SmemPtT2 is not the transpose of SmemPt2";
}
TEST(AttentionWgmmaPds, StackedDsTilesMatchStores) {
  check_stacked_layout<KvD128Br64St2OTS2>();
  check_stacked_layout<KvD64Br64St2OTS2>();
  check_stacked_layout<KvD64Br128St2OTS3>();
}

// The dQ product's C partition (MmaDQpds over the BR x D part, thread t of
// `threads`) puts value i of thread t at (dq_row(t, i), dq_col(t, i)): the
// fragment order the tile stores and the convert kernel rely on.
template <class K_>
void expect_dq_fragment_is_mma_c(int threads) {
  constexpr int BR = K_::BR, D = K_::D;
  typename K_::MmaDQpds mma;
  for (int t = 0; t < threads; ++t) {
    auto thr = mma.get_thread_slice(t);
    auto coord = thr.partition_C(cute::make_identity_tensor(cute::Shape<cute::Int<BR>, cute::Int<D>>{}));
    ASSERT_EQ(int(cute::size(coord)), K_::kDqPerThread);
    for (int i = 0; i < K_::kDqPerThread; ++i) {
      EXPECT_EQ(int(cute::get<0>(coord(i))), K_::dq_row(t, i)) << t << "," << i;
      EXPECT_EQ(int(cute::get<1>(coord(i))), K_::dq_col(t, i)) << t << "," << i;
    }
  }
}

// pds3's dQ product reads dS (queries x keys) through the transposed view,
// warpgroup w its queries [64 w, 64 w + 64): the tiled MMA's A partition of
// thread t addresses only rows of its warpgroup's half, and the two halves
// cover the tile. And the dQ tile's fragment order (dq_row, dq_col, inverted
// by the convert kernel) is a bijection onto the 128 x 64 tile, thread t's
// rows in its warpgroup's half.
TEST(AttentionWgmmaPds, Pds3DqSplitByQueries) {
  using K_ = BwdKv<KvD64Br128St2OTS3>;
  static_assert(K_::kDqSplitM && K_::kDqWhole && !K_::kDqSplitN);
  static_assert(K_::kDqWriters == 256 && K_::kDqPerThread == 32 && K_::kDqBufs == 1);
  constexpr int BR = K_::BR, D = K_::D;
  std::vector<int> seen(BR * D, 0);
  for (int t = 0; t < 256; ++t)
    for (int i = 0; i < K_::kDqPerThread; ++i) {
      const int r = K_::dq_row(t, i), c = K_::dq_col(t, i);
      ASSERT_GE(r, 0);
      ASSERT_LT(r, BR);
      ASSERT_GE(c, 0);
      ASSERT_LT(c, D);
      EXPECT_EQ(r / 64, t / 128) << "thread " << t << " value " << i;
      ++seen[r * D + c];
      // The tile offsets are a permutation too (the convert kernel inverts them).
      const int off = K_::dq_tile_offset(t, i);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, BR * D);
    }
  int once = 0;
  for (int s : seen) once += s == 1;
  EXPECT_EQ(once, BR * D) << "dq_row / dq_col do not cover the 128 x 64 tile once";
  expect_dq_fragment_is_mma_c<K_>(256);
}

// pds2 shared storage (pds3: the same at BR = 128, 32 KB tiles): two dS^T tiles then P^T (16 KB each, 1024-byte
// aligned), one fp32 dQ tile at d128 (two would not fit: 240 KB) and two at
// d64, one LSE and one D row per Q / dO stage, 16-byte aligned (bulk copies).
template <class Cfg>
void check_pds2_storage(size_t dq_tiles) {
  using K_ = BwdKv<Cfg>;
  using S = typename K_::SharedStorage;
  constexpr int BR = K_::BR, BC = K_::BC, D = K_::D, ST = K_::ST;
  EXPECT_LE(sizeof(S) + 1024, size_t(227 * 1024));
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  const auto at = [](const void* p) { return size_t(static_cast<const char*>(p) - reinterpret_cast<const char*>(raw)); };
  EXPECT_EQ(at(s.dst(0)) % 1024, 0u);
  EXPECT_EQ(at(s.dst(1)) - at(s.dst(0)), size_t(BC * BR * 2));
  EXPECT_EQ(at(s.pt()) - at(s.dst(1)), size_t(BC * BR * 2)) << "P^T after the two dS^T tiles";
  EXPECT_EQ(at(s.pt()) % 1024, 0u);
  EXPECT_GE(at(&s.dqs[0][0]) - at(s.pt()), size_t(BC * BR * 2)) << "P^T (16 KB) before the dQ tiles";
  EXPECT_EQ(sizeof(s.dqs), dq_tiles * BR * D * sizeof(float));
  // pds3: one LSE / D stage (two would not fit).
  const int lst = K_::kLOne ? 1 : ST;
  EXPECT_EQ(K_::kLStages, lst);
  EXPECT_EQ(sizeof(s.lse2), size_t(lst) * BR * sizeof(float));
  EXPECT_EQ(sizeof(s.dvec), size_t(lst) * BR * sizeof(float));
  for (int i = 0; i < lst; ++i) {
    EXPECT_EQ(at(&s.lse2[0][i][0]) % 16, 0u);
    EXPECT_EQ(at(&s.dvec[0][i][0]) % 16, 0u);
  }
  EXPECT_EQ(int(Cfg::kSmemBytes), 2 * (2 * BC * D + 2 * ST * BR * D + 3 * BR * BC) + int(dq_tiles) * BR * D * 4);
}
TEST(AttentionWgmmaPds, Pds2SharedStorage) {
  check_pds2_storage<KvD128Br64St2OTS2>(1);
  check_pds2_storage<KvD128Br64St2ATS2>(1);
  check_pds2_storage<KvD64Br64St2OTS2>(2);
  check_pds2_storage<KvD64Br64St2ATS2>(2);
  // d128 arithmetic: K, V 64 KB + Q / dO 64 KB + dS^T 2 x 16 KB + P^T 16 KB + one dQ tile 32 KB.
  EXPECT_EQ(KvD128Br64St2OTS2::kSmemBytes, 208 * 1024);
}
// sp1, sp2 (pds2 with dQ before dK, dK in flight into the next query block)
// changes the consumers' schedule only: pds2's storage, layout and
// configuration constants, byte for byte.
TEST(AttentionWgmmaPds, SpIsPds2Storage) {
  check_pds2_storage<KvD128Br64St2OTS2P>(1);
  check_pds2_storage<KvD128Br64St2ATS2P>(1);
  check_stacked_layout<KvD128Br64St2OTS2P>();
  check_pt_layout<KvD128Br64St2OTS2P>();
  EXPECT_EQ(sizeof(BwdKv<KvD128Br64St2OTS2P>::SharedStorage), sizeof(BwdKv<KvD128Br64St2OTS2>::SharedStorage));
  EXPECT_EQ(sizeof(BwdKv<KvD128Br64St2ATS2P>::SharedStorage), sizeof(BwdKv<KvD128Br64St2ATS2>::SharedStorage));
  EXPECT_EQ(KvD128Br64St2OTS2P::kSmemBytes, KvD128Br64St2OTS2::kSmemBytes);
  EXPECT_TRUE(BwdKv<KvD128Br64St2OTS2P>::kSp);
  EXPECT_TRUE(BwdKv<KvD128Br64St2ATS2P>::kSp);
  EXPECT_FALSE(BwdKv<KvD128Br64St2OTS2>::kSp);
  EXPECT_FALSE(BwdKv<KvD64Br128St2OTS3>::kSp);
  EXPECT_EQ(KvD128Br64St2OTS2P::SP, 1);
  EXPECT_EQ(KvD128Br64St2OTS2P::PDS, 2);
  EXPECT_EQ(KvD128Br64St2OTS2::SP, 0);
  EXPECT_EQ(KvD128Br64St2OTS::SP, 0);
  EXPECT_EQ(KvD128Br64St2OT::SP, 0);
  // sp2: the same storage; the carried dQ part lives in registers.
  check_pds2_storage<KvD128Br64St2OTS2P2>(1);
  EXPECT_EQ(sizeof(BwdKv<KvD128Br64St2OTS2P2>::SharedStorage), sizeof(BwdKv<KvD128Br64St2OTS2>::SharedStorage));
  EXPECT_TRUE(BwdKv<KvD128Br64St2OTS2P2>::kSp);
  EXPECT_TRUE(BwdKv<KvD128Br64St2OTS2P2>::kSp2);
  EXPECT_FALSE(BwdKv<KvD128Br64St2OTS2P>::kSp2);
}
// dc1 (sp1 d128 with the consumer warpgroups decoupled): one dS^T tile, P^T
// right after it (16 KB each, 1024-byte aligned), one fp32 dQ tile per
// warpgroup (32 KB each): K, V 64 KB + Q / dO 64 KB + 16 + 16 + 64 KB = 224 KB;
// with the LSE / D ring (1 KB), the barriers, kv_bar and m_stop 230508 bytes,
// 231424 (226 KB) after the 1024-byte alignment: with the 1 KB every sm_90
// block reserves, the 227 KB (232448 bytes) a block may have.
template <class Cfg>
void check_dc1_storage() {
  using K_ = BwdKv<Cfg>;
  using S = typename K_::SharedStorage;
  constexpr int BR = K_::BR, BC = K_::BC, D = K_::D, ST = K_::ST;
  static_assert(K_::kDc && K_::kSp && !K_::kSp2 && K_::kPds2);
  static_assert(K_::kDsBufs == 1 && K_::kDqBufs == 2 && K_::kDqAdds == 2);
  static_assert(!K_::kDqSplitN && !K_::kDqWhole && K_::kDqWriters == 128 && K_::kDqPerThread == D / 2);
  static_assert(K_::kBarDqThreads == 128 + 32, "full / empty barriers: one warpgroup and the writer warp");
  EXPECT_EQ(sizeof(S), size_t(226 * 1024));
  EXPECT_EQ(sizeof(S) + 1024, size_t(232448));
  EXPECT_EQ(int(Cfg::kSmemBytes), 224 * 1024);
  EXPECT_EQ(int(Cfg::kSmemBytes), 2 * (2 * BC * D + 2 * ST * BR * D + 2 * BR * BC) + 2 * BR * D * 4);
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  const auto at = [](const void* p) { return size_t(static_cast<const char*>(p) - reinterpret_cast<const char*>(raw)); };
  EXPECT_EQ(at(s.dst(0)) % 1024, 0u);
  EXPECT_EQ(at(s.pt()) - at(s.dst(0)), size_t(BC * BR * 2)) << "P^T right after the one dS^T tile";
  EXPECT_EQ(at(s.pt()) % 1024, 0u);
  EXPECT_GE(at(&s.dqs[0][0]) - at(s.pt()), size_t(BC * BR * 2)) << "P^T (16 KB) before the dQ tiles";
  EXPECT_EQ(sizeof(s.dqs), size_t(2 * BR * D * sizeof(float)));
  EXPECT_EQ(at(&s.dqs[1][0]) - at(&s.dqs[0][0]), size_t(BR * D * sizeof(float)));
  EXPECT_EQ(at(&s.dqs[0][0]) % 16, 0u);  // bulk copy sources
  for (int i = 0; i < ST; ++i) {
    EXPECT_EQ(at(&s.lse2[0][i][0]) % 16, 0u);
    EXPECT_EQ(at(&s.dvec[0][i][0]) % 16, 0u);
  }
}

// dc1's dQ product per warpgroup: dS (64 queries x its own 64 keys) K (its
// own 64 keys x 128), through the transposed views, read only from its own
// rows of the dS^T tile and of K; the part's C fragment (dq_row, dq_col,
// inverted by the convert kernel) a bijection onto the 64 x 128 tile, and its
// tile offsets a permutation of the tile.
template <class Cfg>
void check_dc1_dq_split() {
  using K_ = BwdKv<Cfg>;
  using T = typename K_::T;
  constexpr int BR = K_::BR, BC = K_::BC, D = K_::D;
  alignas(1024) static T ds[2 * BC * BR];
  alignas(1024) static T k[BC * D];
  auto sdS = cute::make_tensor(cute::make_smem_ptr(ds), typename K_::SmemPtT2{});  // (BR, BC, 2)
  auto sK = cute::make_tensor(cute::make_smem_ptr(k), typename K_::SmemK{});       // (BC, D)
  auto sKt = cute::make_tensor(cute::make_smem_ptr(k), typename K_::SmemKt{});     // (D, BC)
  for (int wg = 0; wg < 2; ++wg) {
    // The kernel's views (kv_consume_pds, the K-split branch), dS^T tile 0.
    auto sdS_half = cute::local_tile(sdS(cute::_, cute::_, 0), cute::Shape<cute::Int<BR>, cute::_64>{},
                                     cute::make_coord(0, wg));
    auto sKt_half = cute::local_tile(sKt, cute::Shape<cute::Int<D>, cute::_64>{}, cute::make_coord(0, wg));
    int bad_ds = 0, bad_k = 0;
    for (int q = 0; q < BR; ++q)
      for (int kk = 0; kk < 64; ++kk) bad_ds += &sdS_half(q, kk) != ds + K_::pt_offset(64 * wg + kk, q);
    for (int d = 0; d < D; ++d)
      for (int kk = 0; kk < 64; ++kk) bad_k += &sKt_half(d, kk) != &sK(64 * wg + kk, d);
    EXPECT_EQ(bad_ds, 0) << "warpgroup " << wg << " reads dS^T rows other than its own keys";
    EXPECT_EQ(bad_k, 0) << "warpgroup " << wg << " reads K rows other than its own keys";
  }
  expect_dq_fragment_is_mma_c<K_>(128);  // each warpgroup's part: threads 0 .. 127 of its slice
  std::vector<int> seen(BR * D, 0), seen_off(BR * D, 0);
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < K_::kDqPerThread; ++i) {
      // Thread t of either warpgroup: the same place in its own tile.
      EXPECT_EQ(K_::dq_row(t, i), K_::dq_row(t + 128, i));
      EXPECT_EQ(K_::dq_col(t, i), K_::dq_col(t + 128, i));
      const int r = K_::dq_row(t, i), c = K_::dq_col(t, i);
      ASSERT_TRUE(r >= 0 && r < BR && c >= 0 && c < D) << r << "," << c;
      ++seen[r * D + c];
      const int off = K_::dq_tile_offset(t, i);
      ASSERT_TRUE(off >= 0 && off < BR * D) << off;
      ++seen_off[off];
    }
  }
  int once = 0, once_off = 0;
  for (int x : seen) once += x == 1;
  for (int x : seen_off) once_off += x == 1;
  EXPECT_EQ(once, BR * D) << "dq_row / dq_col do not cover the 64 x 128 tile once";
  EXPECT_EQ(once_off, BR * D) << "dq_tile_offset is not a permutation of the tile";
}

TEST(AttentionWgmmaPds, Dc1Storage) {
  check_dc1_storage<KvD128Br64St2OTS2PD>();
  check_dc1_storage<KvD128Br64St2ATS2PD>();
  check_pt_layout<KvD128Br64St2OTS2PD>();
  EXPECT_EQ(KvD128Br64St2OTS2PD::DC, 1);
  EXPECT_EQ(KvD128Br64St2OTS2PD::SP, 1);
  EXPECT_EQ(KvD128Br64St2OTS2P::DC, 0);
  EXPECT_EQ(KvD128Br64St2OT::DC, 0);
  EXPECT_FALSE(BwdKv<KvD128Br64St2OTS2P>::kDc);
  // sp1 keeps the N split over both warpgroups and its storage.
  EXPECT_TRUE(BwdKv<KvD128Br64St2OTS2P>::kDqSplitN);
  EXPECT_EQ(BwdKv<KvD128Br64St2OTS2P>::kDqAdds, 1);
  EXPECT_EQ(BwdKv<KvD128Br64St2OTS2P>::kBarDqThreads, 256 + 32);
}

TEST(AttentionWgmmaPds, Dc1DqSplitByKeys) {
  check_dc1_dq_split<KvD128Br64St2OTS2PD>();
}

TEST(AttentionWgmmaPds, Pds3SharedStorage) {
  check_pds2_storage<KvD64Br128St2OTS3>(1);
  check_pds2_storage<KvD64Br128St2ATS3>(1);
  // K, V 32 KB + Q / dO (st2) 64 KB + dS^T 2 x 32 KB + P^T 32 KB + one dQ tile 32 KB.
  EXPECT_EQ(KvD64Br128St2OTS3::kSmemBytes, 224 * 1024);
  // + one LSE / D stage 1 KB + the barriers (Q, dO: 2 stages, LSE / D: 1),
  // kv_bar, m_stop: 230492 bytes, 231424 (226 KB) after the 1024-byte
  // alignment, + the 1 KB every sm_90 block reserves = 227 KB. (Two LSE / D
  // stages: 231532 bytes, 232448 after alignment: 1 KB over.)
  EXPECT_EQ(sizeof(BwdKv<KvD64Br128St2OTS3>::SharedStorage), size_t(226 * 1024));
}

// rs1 (pds3 with dV, dK from registers): value v of a consumer thread's S^T
// (or dP^T) C fragment, 64 keys x BR queries per warpgroup, is value v of
// its A fragment of dV += P^T dO (K = BR), the same (key, query) element:
// what the kernel's element-wise conversion (detail::set_a_pair) relies on.
template <class Cfg>
void check_rs_a_is_c() {
  using K_ = BwdKv<Cfg>;
  constexpr int BR = K_::BR, BC = K_::BC;
  typename K_::MmaSdP mma_sdp;
  typename K_::MmaKV mma_kv;
  const auto id = cute::make_identity_tensor(cute::Shape<cute::Int<BC>, cute::Int<BR>>{});
  int bad = 0, values = 0;
  std::vector<int> seen(BC * BR, 0);
  for (int t = 0; t < K_::kConsumers; ++t) {
    const auto c = mma_sdp.get_thread_slice(t).partition_C(id);
    const auto a = mma_kv.get_thread_slice(t).partition_A(id);
    ASSERT_EQ(int(cute::size(c)), BR / 2);
    ASSERT_EQ(int(cute::size(a)), BR / 2);
    // The kernel's fragments: partition_fragment_C and partition_shape_A.
    EXPECT_EQ(int(cute::size(cute::partition_shape_A(mma_kv, cute::Shape<cute::Int<BC>, cute::Int<BR>>{}))),
              int(cute::size(a)));  // the kernel's tPr / tdSr
    for (int v = 0; v < BR / 2; ++v) {
      const int r = cute::get<0>(c(v)), q = cute::get<1>(c(v));
      bad += r != int(cute::get<0>(a(v))) || q != int(cute::get<1>(a(v)));
      ASSERT_TRUE(r >= 0 && r < BC && q >= 0 && q < BR);
      ++seen[r * BR + q];
      ++values;
    }
  }
  EXPECT_EQ(bad, 0) << "an A fragment value is not the C fragment value of the same index";
  int once = 0;
  for (int x : seen) once += x == 1;
  EXPECT_EQ(once, BC * BR) << "the consumers' fragments do not cover the 128 x BR tile once";
  EXPECT_EQ(values, BC * BR);
}

TEST(AttentionWgmmaPds, Rs1AFragmentIsCFragment) {
  check_rs_a_is_c<KvD64Br128St2OTS3R>();
  check_rs_a_is_c<KvD64Br128St2ATS3R>();
  check_rs_a_is_c<KvD128Br64St2OTS2R>();
  check_rs_a_is_c<KvD128Br64St2ATS2R>();
}

// A SharedStorage of two dS^T tiles and no P^T tile (rs1, pds4): the tiles
// 1024-byte aligned one after the other, one fp32 dQ tile, LSE / D stages of
// the Q / dO depth, each 16-byte aligned (the producer's bulk copies).
template <class K_>
void expect_two_ds_tiles_one_dq_tile() {
  using S = typename K_::SharedStorage;
  constexpr int BR = K_::BR, BC = K_::BC, D = K_::D, ST = K_::ST;
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  const auto at = [](const void* p) { return size_t(static_cast<const char*>(p) - reinterpret_cast<const char*>(raw)); };
  EXPECT_EQ(at(s.dst(0)) % 1024, 0u);
  EXPECT_EQ(at(s.dst(1)) - at(s.dst(0)), size_t(BC * BR * 2));
  EXPECT_EQ(sizeof(s.ds), size_t(2 * BC * BR * 2)) << "two dS^T tiles, no P^T";
  EXPECT_EQ(sizeof(s.dqs), size_t(BR * D * sizeof(float)));
  EXPECT_EQ(sizeof(s.lse2), size_t(ST) * BR * sizeof(float));
  EXPECT_EQ(sizeof(s.dvec), size_t(ST) * BR * sizeof(float));
  for (int i = 0; i < ST; ++i) {
    EXPECT_EQ(at(&s.lse2[0][i][0]) % 16, 0u);
    EXPECT_EQ(at(&s.dvec[0][i][0]) % 16, 0u);
  }
}

// rs1's storage: the base's (pds3 at d64, pds2 at d128) without the P^T
// tile, with LSE / D stages of the Q / dO depth (d64: two again): d64 K, V
// 32 KB + Q / dO 64 KB + dS^T 2 x 32 KB + one dQ tile 32 KB = 192 KB; d128
// K, V 64 KB + Q / dO 64 KB + dS^T 2 x 16 KB + one dQ tile 32 KB = 192 KB.
template <class Cfg, class Base>
void check_rs1_storage(size_t bytes) {
  using K_ = BwdKv<Cfg>;
  using S = typename K_::SharedStorage;
  constexpr int BR = K_::BR, BC = K_::BC, ST = K_::ST;
  static_assert(K_::kRs && K_::kPds2 && !K_::kLOne && !K_::kSp && !K_::kDc);
  static_assert(K_::kLStages == ST && K_::kDsBufs == 2 && K_::kDqBufs == 1);
  EXPECT_EQ(int(Cfg::kSmemBytes), 192 * 1024);
  EXPECT_EQ(int(Cfg::kSmemBytes), int(Base::kSmemBytes) - 2 * BC * BR);
  expect_two_ds_tiles_one_dq_tile<K_>();
  EXPECT_EQ(sizeof(S), bytes);
  EXPECT_LE(sizeof(S) + 16384, sizeof(typename BwdKv<Base>::SharedStorage)) << "at least the P^T tile below the base";
}

TEST(AttentionWgmmaPds, Rs1Storage) {
  // d64: + two LSE / D stages 2 KB + the barriers (Q, dO, LSE / D: 2 stages
  // each), kv_bar, m_stop: 198764 bytes, 199680 (195 KB) after the 1024-byte
  // alignment: 31 KB below pds3's. d128: + 1 KB of LSE / D and the same
  // barriers: 197740 bytes, 198656 (194 KB), 15 KB below pds2's.
  check_rs1_storage<KvD64Br128St2OTS3R, KvD64Br128St2OTS3>(195 * 1024);
  check_rs1_storage<KvD64Br128St2ATS3R, KvD64Br128St2ATS3>(195 * 1024);
  check_rs1_storage<KvD128Br64St2OTS2R, KvD128Br64St2OTS2>(194 * 1024);
  check_rs1_storage<KvD128Br64St2ATS2R, KvD128Br64St2ATS2>(194 * 1024);
  check_stacked_layout<KvD64Br128St2OTS3R>();
  check_stacked_layout<KvD128Br64St2OTS2R>();
  EXPECT_EQ(KvD64Br128St2OTS3R::RS, 1);
  EXPECT_EQ(KvD64Br128St2OTS3::RS, 0);
  EXPECT_EQ(KvD128Br64St2OTS2P::RS, 0);
  EXPECT_FALSE(BwdKv<KvD64Br128St2OTS3>::kRs);
  EXPECT_TRUE(BwdKv<KvD64Br128St2OTS3>::kLOne);
}

// pds2 staging workspace: LSE and D padded to whole query blocks, two
// 256-byte aligned halves.
TEST(AttentionWgmmaPds, Pds2StageBytes) {
  detfuse::AttentionProblem p;
  p.B = 2, p.H = 3, p.Hkv = 3, p.Sq = 65, p.Sk = 70, p.d = 64;
  EXPECT_EQ(pds_stage_bytes(p, 64), size_t(2 * 3072));  // 2 * 3 * 2 blocks * 64 * 4 = 3072 bytes a half
  p.B = 1, p.H = 1, p.Sq = 1;
  EXPECT_EQ(pds_stage_bytes(p, 64), size_t(2 * 256));
}

// The pds configurations fit the 227 KB of an sm_90 block with the static
// 1 KB the kernels reserve, and P^T sits right after dS^T, both 1024-byte
// aligned (the wgmma descriptors' swizzle assumes it).
TEST(AttentionWgmmaPds, SharedStorageFitsAndAligns) {
  using S = BwdKv<KvD128Br64St2OTS>::SharedStorage;
  EXPECT_LE(sizeof(S) + 1024, size_t(227 * 1024));
  // Host bytes viewed as the storage (it has no default constructor on the
  // host); only member addresses are taken.
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  // (SharedStorage::pt() is device code: the same pointer here.)
  const auto* pt = s.ds.data() + cute::cosize_v<BwdKv<KvD128Br64St2OTS>::SmemDS>;
  const auto at = [](const void* p) { return size_t(static_cast<const char*>(p) - reinterpret_cast<const char*>(raw)); };
  EXPECT_EQ(at(s.ds.data()) % 1024, 0u);
  EXPECT_EQ(at(pt) - at(s.ds.data()), size_t(64 * 128 * 2)) << "P^T right after dS^T";
  EXPECT_EQ(at(pt) % 1024, 0u);
  EXPECT_GE(at(&s.dqs[0][0]) - at(pt), size_t(64 * 128 * 2)) << "P^T (16 KB) before the dQ tiles";
}

}  // namespace

// A dQ tile order against a base's: every value i of consumer thread t of K_
// at the same (dq_row, dq_col) as in KB, at offset want(t, i) of the tile,
// inverted by dq_tile_thread / dq_tile_value (the convert kernel); the
// offsets a permutation of the BR x D tile.
template <class K_, class KB, class Want>
void expect_dq_tile_order(Want want) {
  constexpr int BR = K_::BR, D = K_::D;
  static_assert(K_::kDqWriters == 256 && K_::kDqPerThread == KB::kDqPerThread);
  std::vector<int> seen(BR * D, 0);
  for (int t = 0; t < 256; ++t)
    for (int i = 0; i < K_::kDqPerThread; ++i) {
      EXPECT_EQ(K_::dq_row(t, i), KB::dq_row(t, i));
      EXPECT_EQ(K_::dq_col(t, i), KB::dq_col(t, i));
      const int off = K_::dq_tile_offset(t, i);
      ASSERT_TRUE(off >= 0 && off < BR * D) << off;
      EXPECT_EQ(off, want(t, i)) << "thread " << t << " value " << i;
      EXPECT_EQ(K_::dq_tile_thread(off), t);
      EXPECT_EQ(K_::dq_tile_value(off), i);
      ++seen[off];
    }
  int once = 0;
  for (int x : seen) once += x == 1;
  EXPECT_EQ(once, BR * D) << "dq_tile_offset is not a permutation of the tile";
}

// wq1 (issue 16, session 14): the one dQ tile in two contiguous halves,
// warpgroup w's values in half w (pds3: its 64 query rows; sp1 d128: its 64
// columns), each half in the base's order over its 128 threads; the offsets
// a permutation of the tile, inverted by dq_tile_thread / dq_tile_value (the
// convert kernel); the same fragments (dq_row, dq_col) as the ew base; its
// barriers over one warpgroup and the writer warp, ids of their own; the ew
// base's shared storage.
template <class Cfg, class Base>
void check_wq_tile() {
  using K_ = BwdKv<Cfg>;
  using KB = BwdKv<Base>;
  static_assert(K_::kWq && !KB::kWq && K_::kDqWhole && K_::kDqBufs == 1 && K_::kDqWriters == 256);
  static_assert(K_::kBarDqThreads == 128 + 32 && KB::kBarDqThreads == 256 + 32);
  static_assert(K_::kBarFull == barrier_id(BwdBarrier::kDqWgFull0) &&
                K_::kBarEmpty == barrier_id(BwdBarrier::kDqWgEmpty0));
  static_assert(K_::kBarFull + 1 == barrier_id(BwdBarrier::kDqWgFull1) &&
                K_::kBarEmpty + 1 == barrier_id(BwdBarrier::kDqWgEmpty1) && K_::kBarEmpty + 1 < 16);
  static_assert(sizeof(typename K_::SharedStorage) == sizeof(typename KB::SharedStorage));
  constexpr int BR = K_::BR, D = K_::D, HALF = BR * D / 2;
  // Half t / 128, in it consecutive threads' consecutive float2.
  expect_dq_tile_order<K_, KB>(
      [](int t, int i) { return (t / 128) * HALF + (i / 2) * 2 * 128 + 2 * (t % 128) + i % 2; });
  // The base's inverse, as the convert kernel had it.
  for (int off = 0; off < BR * D; ++off)
    EXPECT_EQ(KB::dq_tile_offset(KB::dq_tile_thread(off), KB::dq_tile_value(off)), off);
}

// The TMA dQ convert kernel (bwd_dq_writer.cuh) reads the tile-blocked
// accumulator four values at a time and stores offsets 2 k, 2 k + 1 as one bf16
// pair at (dq_row, dq_col) of the first in a row-major shared tile of D + 8
// columns: the pair must be values i, i + 1 (i even) of one thread, at columns
// c, c + 1 (c even) of one row (pds4: rows r, r + 1, r even, of one column),
// and the padded positions must cover the BR x D tile once.
template <class Cfg>
void check_convert_pairs() {
  using K_ = BwdKv<Cfg>;
  constexpr int BR = K_::BR, D = K_::D, P = D + 8;
  std::vector<int> seen(BR * P, 0);
  for (int off = 0; off < BR * D; off += 2) {
    const int t = K_::dq_tile_thread(off), i = K_::dq_tile_value(off);
    ASSERT_EQ(i % 2, 0) << off;
    ASSERT_EQ(K_::dq_tile_offset(t, i), off);
    ASSERT_EQ(K_::dq_tile_offset(t, i + 1), off + 1);
    ASSERT_EQ(K_::dq_tile_thread(off + 1), t);
    ASSERT_EQ(K_::dq_tile_value(off + 1), i + 1);
    const int r = K_::dq_row(t, i), c = K_::dq_col(t, i);
    if constexpr (K_::kDqT) {  // pds4: rows r, r + 1 of column c (two bf16 stores)
      ASSERT_TRUE(r >= 0 && r + 1 < BR && r % 2 == 0 && c >= 0 && c < D) << off << ": " << r << "," << c;
      ASSERT_EQ(K_::dq_row(t, i + 1), r + 1);
      ASSERT_EQ(K_::dq_col(t, i + 1), c);
      ++seen[r * P + c];
      ++seen[(r + 1) * P + c];
      continue;
    }
    ASSERT_TRUE(r >= 0 && r < BR && c >= 0 && c + 1 < D && c % 2 == 0) << off << ": " << r << "," << c;
    ASSERT_EQ(K_::dq_row(t, i + 1), r);
    ASSERT_EQ(K_::dq_col(t, i + 1), c + 1);
    ++seen[r * P + c];
    ++seen[r * P + c + 1];
  }
  int once = 0;
  for (int r = 0; r < BR; ++r)
    for (int c = 0; c < D; ++c) once += seen[r * P + c] == 1;
  EXPECT_EQ(once, BR * D) << "the pairs do not cover the tile once";
}

TEST(AttentionWgmmaPds, DqConvertPairs) {
  check_convert_pairs<KvD64Br128St2OTS3E2>();   // pds3: each warpgroup its 64 rows
  check_convert_pairs<KvD64Br128St2OTS3E2W>();  // wq1 halves
  check_convert_pairs<KvD64Br128St2OTS3E2B5W>();  // wq1 over pb5
  check_convert_pairs<KvD128Br64St2OTS2PE1>();  // sp1 d128: each warpgroup its 64 columns
  check_convert_pairs<KvD128Br64St2OTS2PE1W>();
  check_convert_pairs<KvD64Br64St2OT>();        // tma1 d64 (warpgroup 0 writes the tile)
}

// pb1 (issue 16, session 15; d128 on ew2 pds2, session 19): ew2 pds3 with P^T as dV's A fragment and
// dS^T as dK's (the C fragment of S^T / dP^T, value for value: the rs1
// identity on pb1's own traits), since session 31 rs1's storage (no P^T
// tile, the LSE / D ring at the Q / dO depth), ew2's dQ tile order.
// Two kv kernels' dQ tiles in the same order: every element's (thread, value)
// placed at the same offset (the convert pass of one reads the other's tile).
template <class K_, class KB>
void expect_same_dq_tile_order() {
  for (int off = 0; off < K_::BR * K_::D; ++off)
    EXPECT_EQ(K_::dq_tile_offset(K_::dq_tile_thread(off), K_::dq_tile_value(off)),
              KB::dq_tile_offset(KB::dq_tile_thread(off), KB::dq_tile_value(off)));
}

template <class Cfg, class Base, class Rs>
void check_pb1() {
  using K_ = BwdKv<Cfg>;
  using KB = BwdKv<Base>;
  // Since session 31 rs1's storage (Rs: the rs1 configuration of the same tile): no P^T tile, the LSE / D
  // ring at the Q / dO depth (pds3 too), ew2's dS^T and dQ buffers.
  static_assert(K_::kPb && !KB::kPb && K_::kEw == 2 && K_::kPds2 && !K_::kLOne && !K_::kRs && !K_::kWq);
  static_assert(K_::kLStages == K_::ST && K_::kDsBufs == KB::kDsBufs && K_::kDqBufs == KB::kDqBufs);
  static_assert(sizeof(typename K_::SharedStorage) == sizeof(typename BwdKv<Rs>::SharedStorage));
  static_assert(int(Cfg::kSmemBytes) == int(Rs::kSmemBytes));
  static_assert(int(Cfg::kSmemBytes) == int(Base::kSmemBytes) - 2 * K_::BR * K_::BC);
  expect_two_ds_tiles_one_dq_tile<K_>();
  check_rs_a_is_c<Cfg>();
  expect_same_dq_tile_order<K_, KB>();
}

TEST(AttentionWgmmaPds, Pb1IsEw2StorageWithRegisterFragments) {
  check_pb1<KvD64Br128St2OTS3E2B, KvD64Br128St2OTS3E2, KvD64Br128St2OTS3R>();
  check_pb1<KvD64Br128St2ATS3E2B, KvD64Br128St2ATS3E2, KvD64Br128St2ATS3R>();
  check_pb1<KvD128Br64St2OTS2E2B, KvD128Br64St2OTS2E2, KvD128Br64St2OTS2R>();  // d128 (session 19)
  check_pb1<KvD128Br64St2ATS2E2B, KvD128Br64St2ATS2E2, KvD128Br64St2ATS2R>();
  // d128: pds2 ew1's storage less the 16 KB P^T tile.
  EXPECT_EQ(sizeof(BwdKv<KvD128Br64St2OTS2E2B>::SharedStorage) + 64 * 128 * 2,
            sizeof(BwdKv<KvD128Br64St2OTS2PE1>::SharedStorage));
  EXPECT_EQ(KvD64Br128St2OTS3E2B::PB, 1);
  EXPECT_EQ(KvD64Br128St2OTS3E2::PB, 0);
  EXPECT_EQ(KvD64Br128St2OTS3E2B::EW, 2);
  EXPECT_EQ(KvD64Br128St2OTS3E2B::RS, 0);
}

// pb3 (session 21), pb5 (session 22), pb10 (session 32): pb1's storage and dQ tile order; the A fragments
// written as 32-bit words (detail::a_words): the kernel's tPr / tdSr are
// compact and 16-byte aligned, value v at byte 2 v, and the uint32_t view
// cute's RS wgmma reads them through has word w at byte 4 w (values 2 w,
// 2 w + 1).
template <class Cfg, class Pb1>
void check_pbn() {
  using K_ = BwdKv<Cfg>;
  using KB = BwdKv<Pb1>;
  static_assert(K_::kPb && KB::kPb && K_::kWgUniform && K_::kDqLate && !KB::kWgUniform && !KB::kDqLate);
  static_assert(K_::kPbFa == (Cfg::PB >= 3) && !KB::kPbFa && K_::kPds2 && K_::kPds3 == KB::kPds3 && K_::kTma);
  static_assert(K_::kExpInLoop == ((Cfg::PB >= 5 && Cfg::PB <= 7) || Cfg::PB == 10) && !KB::kExpInLoop);
  static_assert(K_::kLogitFirst == (Cfg::PB == 10) && !KB::kLogitFirst);
  static_assert(K_::kDvSplit == (Cfg::PB == 6));
  static_assert(K_::kDq4 == (Cfg::PB == 7 || Cfg::PB == 8) && !KB::kDq4);
  static_assert(sizeof(typename K_::SharedStorage) == sizeof(typename KB::SharedStorage));
  static_assert(int(Cfg::kSmemBytes) == int(Pb1::kSmemBytes));
  check_rs_a_is_c<Cfg>();
  expect_same_dq_tile_order<K_, KB>();
  typename K_::MmaKV mma_kvr;
  auto tPr = cute::make_tensor<typename K_::T>(
      cute::partition_shape_A(mma_kvr, cute::Shape<cute::Int<K_::BC>, cute::Int<K_::BR>>{}));
  const char* base = reinterpret_cast<const char*>(cute::raw_pointer_cast(tPr.data()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 16, 0u);
  for (int v = 0; v < int(cute::size(tPr)); ++v)
    EXPECT_EQ(reinterpret_cast<const char*>(&tPr(v)) - base, 2 * v) << "value " << v;
  auto words = cute::recast<uint32_t>(tPr);
  ASSERT_EQ(int(cute::size(words)), int(cute::size(tPr)) / 2);
  for (int w = 0; w < int(cute::size(words)); ++w)
    EXPECT_EQ(reinterpret_cast<const char*>(&words(w)) - base, 4 * w) << "word " << w;
}

TEST(AttentionWgmmaPds, PbNIsPb1StorageWithWordFragments) {
  check_pbn<KvD64Br128St2OTS3E2B3, KvD64Br128St2OTS3E2B>();
  check_pbn<KvD64Br128St2ATS3E2B3, KvD64Br128St2ATS3E2B>();
  check_pbn<KvD128Br64St2OTS2E2B3, KvD128Br64St2OTS2E2B>();  // pb3 at d128 (pds2)
  check_pbn<KvD128Br64St2ATS2E2B3, KvD128Br64St2ATS2E2B>();
  check_pbn<KvD64Br128St2OTS3E2B5, KvD64Br128St2OTS3E2B>();  // pb5 (d64)
  check_pbn<KvD64Br128St2ATS3E2B5, KvD64Br128St2ATS3E2B>();
  check_pbn<KvD64Br128St2OTS3E2B6, KvD64Br128St2OTS3E2B>();  // pb6 (d64, d128)
  check_pbn<KvD64Br128St2ATS3E2B6, KvD64Br128St2ATS3E2B>();
  check_pbn<KvD128Br64St2OTS2E2B6, KvD128Br64St2OTS2E2B>();
  check_pbn<KvD128Br64St2ATS2E2B6, KvD128Br64St2ATS2E2B>();
  check_pbn<KvD64Br128St2OTS3E2B10, KvD64Br128St2OTS3E2B>();  // pb10 (d64)
  EXPECT_EQ(KvD64Br128St2OTS3E2B10::PB, 10);
  EXPECT_EQ(KvD64Br128St2ATS3E2B3::PB, 3);
  EXPECT_EQ(KvD64Br128St2OTS3E2B5::PB, 5);
}

// pb7 (branch s22-pb6): pb5 with the dQ tile in groups of 4 values a thread
// (value i of thread t at 4 (i / 4) 256 + 4 t + i % 4: 128-bit stores,
// consecutive threads' groups consecutive), inverted by dq_tile_thread /
// dq_tile_value for the convert pass; the same values (dq_row, dq_col) and
// storage as pb5. pb8 (d128): the same against pb3.
template <class Cfg, class Pb5>
void check_pb7() {
  using K_ = BwdKv<Cfg>;
  using K5 = BwdKv<Pb5>;
  static_assert(K_::kDq4 && !K5::kDq4 && K_::kExpInLoop == K5::kExpInLoop && K_::kDvSplit == K5::kDvSplit && K_::kDqWhole);
  static_assert(K_::kPbFa && K5::kPbFa && K_::D == K5::D && K_::BR == K5::BR);
  static_assert(sizeof(typename K_::SharedStorage) == sizeof(typename K5::SharedStorage));
  // Groups of 4 (16 bytes, 16-byte aligned: i % 4 == 0 at a multiple of 4).
  expect_dq_tile_order<K_, K5>([](int t, int i) { return (i / 4) * 4 * 256 + 4 * t + i % 4; });
  check_convert_pairs<Cfg>();
}

TEST(AttentionWgmmaPds, Pb7DqTileInGroupsOfFour) {
  check_pb7<KvD64Br128St2OTS3E2B7, KvD64Br128St2OTS3E2B5>();
  check_pb7<KvD64Br128St2ATS3E2B7, KvD64Br128St2ATS3E2B5>();
  check_pb7<KvD128Br64St2OTS2E2B8, KvD128Br64St2OTS2E2B3>();  // pb8: d128, against pb3
  check_pb7<KvD128Br64St2ATS2E2B8, KvD128Br64St2ATS2E2B3>();
  check_pb7<KvD128Br80St2OTS4E2B7, KvD128Br80St2OTS4E2B5>();  // pds4 (branch s23-br80)
  check_pb7<KvD128Br80St2ATS4E2B7, KvD128Br80St2ATS4E2B5>();
}

// pds4 (branch s23-br80, d128, 80 queries a step): the dS^T tiles (SmemDsT4,
// MN-major, 32-byte swizzle: the B of dQ^T = K^T dS^T) where dst4_offset says,
// buffer i BC BR elements on; each consumer thread's pair stores (dst4_pair
// from dst4_base / dst4_sw) at the pair's two elements; a warp's 32 stores of
// one (chunk, key row) in 32 distinct banks; the stmatrix form's row
// addresses (dst4_stsm) the same places, a matrix in 32 banks; the dQ^T product's C fragment at
// (dq_row, dq_col) transposed and covering the 80 x 128 part once, each
// warpgroup's A (K^T) its own 64 columns; P^T / dS^T's A fragments of dV, dK
// the S^T C fragment value for value (N = 80); the storage: K, V, Q / dO (st2),
// two dS^T tiles (no P^T), one 80 x 128 fp32 dQ tile, in 227 KB less 1 KB.
template <class Cfg>
void check_pds4() {
  using K_ = BwdKv<Cfg>;
  constexpr int BR = K_::BR, BC = K_::BC, D = K_::D;
  static_assert(K_::kPds4 && K_::kPds2 && !K_::kPds3 && K_::kDqT && K_::kDqWhole && !K_::kDqSplitN);
  static_assert(BR == 80 && D == 128 && K_::kDqPerThread == 40 && K_::kDqWriters == 256);
  alignas(1024) static cutlass::bfloat16_t tile[2 * BC * BR];
  auto st = cute::make_tensor(cute::make_smem_ptr(tile), typename K_::SmemDsT4{});
  ASSERT_EQ(int(cute::size(st)), 2 * BC * BR);
  int bad = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < BR; ++j)
      for (int r = 0; r < BC; ++r) bad += int(&st(j, r, i) - tile) != i * BC * BR + K_::dst4_offset(j, r);
  EXPECT_EQ(bad, 0) << "dst4_offset differs from the SmemDsT4 layout";
  for (int w = 0; w < 8; ++w)  // the 8 consumer warps
    for (int k = 0; k < BR / 8; ++k)
      for (int h = 0; h < 2; ++h) {
        std::vector<int> banks(32, 0);
        for (int lane = 0; lane < 32; ++lane) {
          const int kl0 = (w / 4) * 64 + (w % 4) * 16 + lane / 4, col_lane = 2 * (lane % 4);
          const int at = K_::dst4_pair(K_::dst4_base(kl0, col_lane), K_::dst4_sw(kl0), k, h);
          ASSERT_EQ(at, K_::dst4_offset(8 * k + col_lane, kl0 + 8 * h)) << w << "," << lane << "," << k << "," << h;
          ASSERT_EQ(at + 1, K_::dst4_offset(8 * k + col_lane + 1, kl0 + 8 * h));
          ASSERT_EQ(at % 2, 0);
          ++banks[(at / 2) % 32];
        }
        for (int b = 0; b < 32; ++b) EXPECT_EQ(banks[b], 1) << "bank " << b << " of warp " << w << " chunk " << k;
      }
  // The stmatrix form (fa_ds_dv): lane i's row address (dst4_stsm, slice s 128 s elements on) is where the
  // pair stores put row i % 8 of matrix i / 8, i.e. word i / 8 of the lanes holding that row (lane / 4 = i % 8),
  // each at 2 (lane % 4) elements on, 16-byte aligned; a matrix's 8 rows in 32 distinct banks.
  for (int w = 0; w < 8; ++w) {
    const int kw = (w / 4) * 64 + (w % 4) * 16;
    for (int s = 0; s < BR / 16; ++s)
      for (int m = 0; m < 4; ++m) {
        std::vector<int> banks(32, 0);
        for (int r = 0; r < 8; ++r) {
          const int row = K_::dst4_stsm(kw, 8 * m + r) + 128 * s;
          ASSERT_EQ(row % 8, 0) << "stmatrix rows are 16-byte aligned";
          for (int c = 0; c < 4; ++c) {
            const int lane = 4 * r + c, kl0 = kw + lane / 4, col_lane = 2 * c;
            const int k = 2 * s + m / 2, h = m % 2;  // word 4 s + m: v / 2 = 2 k + h
            EXPECT_EQ(row + col_lane, K_::dst4_pair(K_::dst4_base(kl0, col_lane), K_::dst4_sw(kl0), k, h))
                << "warp " << w << " slice " << s << " matrix " << m << " row " << r << " lane " << lane;
            ++banks[((row + col_lane) / 2) % 32];
          }
        }
        for (int b = 0; b < 32; ++b) EXPECT_EQ(banks[b], 1) << "stmatrix bank " << b << " warp " << w << " slice " << s;
      }
  }
  typename K_::MmaDQpds mma;
  const auto id = cute::make_identity_tensor(cute::Shape<cute::Int<D>, cute::Int<BR>>{});
  std::vector<int> seen(BR * D, 0);
  for (int t = 0; t < 256; ++t) {
    const auto c = mma.get_thread_slice(t).partition_C(id);
    ASSERT_EQ(int(cute::size(c)), K_::kDqPerThread);
    for (int i = 0; i < K_::kDqPerThread; ++i) {
      EXPECT_EQ(int(cute::get<0>(c(i))), K_::dq_col(t, i)) << t << "," << i;
      EXPECT_EQ(int(cute::get<1>(c(i))), K_::dq_row(t, i)) << t << "," << i;
      ++seen[K_::dq_row(t, i) * D + K_::dq_col(t, i)];
    }
    const auto a = mma.get_thread_slice(t).partition_A(cute::make_identity_tensor(cute::Shape<cute::Int<D>, cute::Int<BC>>{}));
    for (int e = 0; e < int(cute::size(a)); ++e) {
      const int col = cute::get<0>(a(e));
      ASSERT_TRUE(col >= 64 * (t / 128) && col < 64 * (t / 128) + 64) << t << ": column " << col;
    }
  }
  int once = 0;
  for (int x : seen) once += x == 1;
  EXPECT_EQ(once, BR * D) << "dq_row / dq_col do not cover the 80 x 128 part once";
  check_rs_a_is_c<Cfg>();
  using S = typename K_::SharedStorage;
  EXPECT_EQ(int(Cfg::kSmemBytes), 224 * 1024);
  EXPECT_LE(sizeof(S) + 1024, size_t(227 * 1024));
  EXPECT_GT(sizeof(S) + 2048, size_t(227 * 1024)) << "a block with 1 KB less cannot hold it (can_run refuses)";
  expect_two_ds_tiles_one_dq_tile<K_>();
}

TEST(AttentionWgmmaPds, Pds4EightyQueriesTransposedDq) {
  check_pds4<KvD128Br80St2OTS4E2B5>();
  check_pds4<KvD128Br80St2ATS4E2B5>();
  check_pds4<KvD128Br80St2OTS4E2B7>();
  check_convert_pairs<KvD128Br80St2OTS4E2B5>();
}

TEST(AttentionWgmmaPds, Wq1DqTileHalves) {
  check_wq_tile<KvD64Br128St2OTS3E2W, KvD64Br128St2OTS3E2>();
  check_wq_tile<KvD64Br128St2ATS3E2W, KvD64Br128St2ATS3E2>();
  check_wq_tile<KvD128Br64St2OTS2PE1W, KvD128Br64St2OTS2PE1>();
  check_wq_tile<KvD128Br64St2ATS2PE1W, KvD128Br64St2ATS2PE1>();
  check_wq_tile<KvD64Br128St2OTS3E2B5W, KvD64Br128St2OTS3E2B5>();  // over pb5 (session 32)
  EXPECT_EQ(KvD64Br128St2OTS3E2B5W::PB, 5);
  EXPECT_EQ(KvD64Br128St2OTS3E2B5W::WQ, 1);
  EXPECT_EQ(KvD64Br128St2OTS3E2W::WQ, 1);
  EXPECT_EQ(KvD64Br128St2OTS3E2::WQ, 0);
  EXPECT_EQ(KvD64Br128St2OTS3E2W::EW, 2);
  EXPECT_EQ(KvD128Br64St2OTS2PE1W::EW, 1);
}

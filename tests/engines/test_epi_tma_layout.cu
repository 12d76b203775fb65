// The wgmma engine's TMA epilogue (WgConfig EPI_TMA, variant token ot1) on the
// host, without a GPU: each consumer thread writes its accumulator pairs into
// the warpgroup's shared C tile at Kernel::c_tile_offset (hand-swizzled, one
// XOR a pair), and the TMA store then reads the tile through SmemLayoutC. A
// mismatch would scramble the ex16 chunk on the GPU, so here, for every
// thread of the warpgroup and every value of its fragment: c_tile_offset of
// the value's (row, col) is SmemLayoutC(row, col); the value at column col + 1
// is the next element (one 4-byte store, 4-byte aligned); the 128 threads
// cover the BM x BN tile exactly once. Cooperative tiles (both warpgroups, 256
// threads, one BM x EPI_N shared tile): the same per pass of EPI_N columns,
// SmemLayoutC at (row, col % EPI_N), each pass covered exactly once. Also the shared storage: the epilogue
// tiles first and 1024-byte aligned, the ring after them, the whole within
// sm_90's 227 KiB, and the storage of the configurations without EPI_TMA
// unchanged by the new (empty) base.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "kernels/flce/wgmma_configs.h"

namespace {

using namespace detfuse::flce;
using detfuse::Major;

template <class Cfg>
void check_c_tile() {
  using K_ = wg::Kernel<Cfg, Major::K, Major::K>;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, EN = Cfg::EPI_N, PASSES = Cfg::EPI_PASSES;
  constexpr int kThreads = Cfg::PINGPONG ? 128 : 128 * Cfg::CONSUMERS;  // the threads that fill one shared tile
  ASSERT_EQ(K_::kCElems, BM * EN);
  ASSERT_EQ(PASSES * EN, BN);
  typename K_::TiledMma mma;
  auto cD = cute::make_identity_tensor(cute::make_shape(cute::Int<BM>{}, cute::Int<BN>{}));
  // Through a 1024-byte aligned smem pointer, as the kernel's tile: cute
  // applies the swizzle (given in bytes) to the pointer, not to a bare offset.
  alignas(1024) static cutlass::bfloat16_t buf[BM * EN];
  auto sCt = cute::make_tensor(cute::make_smem_ptr(buf), typename K_::SmemLayoutC{});
  auto sC = [&](int r, int c) { return int(&sCt(r, c) - buf); };
  std::vector<int> seen(size_t(PASSES) * BM * EN, 0);  // pass p's tile at p * BM * EN
  int bad_off = 0, bad_pair = 0, bad_align = 0, bad_step = 0, bad_first = 0, bad_pass = 0;
  for (int tid = 0; tid < kThreads; ++tid) {
    auto tCcD = mma.get_thread_slice(tid).partition_C(cD);
    ASSERT_EQ(int(cute::size(tCcD)), BM * BN / kThreads);
    const int r0 = cute::get<0>(tCcD(0)), c0 = cute::get<1>(tCcD(0));
    bad_first += c0 >= 8 || c0 % 2 != 0;
    for (int i = 0; i < int(cute::size(tCcD)); i += 2) {
      const int row = cute::get<0>(tCcD(i)), col = cute::get<1>(tCcD(i));
      bad_step += (row - r0) % 8 != 0 || (col - c0) % 8 != 0;  // c_tile_offset's premise
      const int pass = col / EN;
      bad_pass += (col - c0) / EN != pass;  // the kernel's test of a value's pass
      const int off = K_::c_tile_offset(r0, c0, row - r0, col - c0);
      ASSERT_GE(off, 0);
      ASSERT_LT(off + 1, BM * EN);
      bad_off += off != int(sC(row, col % EN));
      bad_pair += cute::get<0>(tCcD(i + 1)) != row || cute::get<1>(tCcD(i + 1)) != col + 1 ||
                  (col + 1) / EN != pass || int(sC(row, (col + 1) % EN)) != off + 1;
      bad_align += off % 2 != 0;
      ++seen[size_t(pass) * BM * EN + off];
      ++seen[size_t(pass) * BM * EN + off + 1];
    }
  }
  EXPECT_EQ(bad_first, 0) << "a thread's first value is not at an even column < 8";
  EXPECT_EQ(bad_step, 0) << "fragment values not 8 rows / 8 columns apart";
  EXPECT_EQ(bad_pass, 0) << "(col - c0) / EPI_N is not the value's pass";
  EXPECT_EQ(bad_off, 0) << "c_tile_offset is not SmemLayoutC's (row, col % EPI_N)";
  EXPECT_EQ(bad_pair, 0) << "values v, v + 1 are not adjacent columns, adjacent in the tile";
  EXPECT_EQ(bad_align, 0) << "a pair is not 4-byte aligned";
  int once = 0;
  for (int s : seen) once += s == 1;
  EXPECT_EQ(once, BM * BN) << "the threads do not cover each pass's C tile exactly once";
}

TEST(WgmmaEpiTmaLayout, CTileStoresMatchTmaLayoutPing128c2t) { check_c_tile<WgPing128c2t>(); }
TEST(WgmmaEpiTmaLayout, CTileStoresMatchTmaLayoutPing128c22t) { check_c_tile<WgPing128c22t>(); }
TEST(WgmmaEpiTmaLayout, CTileStoresMatchTmaLayoutCoop256c2t) { check_c_tile<WgCoop256c2t>(); }
TEST(WgmmaEpiTmaLayout, CTileStoresMatchTmaLayoutCoop256x128c12t) { check_c_tile<WgCoop256x128c12t>(); }

// The cooperative tiles' passes: one 32 KiB shared tile, two passes.
TEST(WgmmaEpiTmaLayout, CoopPasses) {
  static_assert(WgCoop256c2t::EPI_N == 128 && WgCoop256c2t::EPI_PASSES == 2 && WgCoop256c2t::EPI_TILES == 1);
  static_assert(WgCoop256x128c12t::EPI_N == 64 && WgCoop256x128c12t::EPI_PASSES == 2 &&
                WgCoop256x128c12t::EPI_TILES == 1);
  static_assert(WgPing128c2t::EPI_N == 128 && WgPing128c2t::EPI_PASSES == 1 && WgPing128c2t::EPI_TILES == 2);
  EXPECT_EQ(WgCoop256c2t::epi_tile_bytes(), size_t(32 * 1024));
  EXPECT_EQ(WgCoop256x128c12t::epi_tile_bytes(), size_t(32 * 1024));
  // The 1x2 cluster: one CTA along M, two along N (name token c12).
  static_assert(WgCoop256x128c12t::CLUSTER_M == 1 && WgCoop256x128c12t::CLUSTER_N == 2);
}

// The SharedStorage of a configuration as it was before EPI_TMA.
template <class Cfg>
struct PlainStorage {
  using K_ = wg::Kernel<Cfg, Major::K, Major::K>;
  typename K_::Mainloop::TensorStorage tensors;
  alignas(16) typename K_::Mainloop::PipelineStorage pipeline;
  alignas(16) typename K_::OrderBarrier::SharedStorage order;
};

template <class Cfg>
size_t offset_of_tensors() {
  using S = typename wg::Kernel<Cfg, Major::K, Major::K>::SharedStorage;
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  return size_t(reinterpret_cast<const unsigned char*>(&s.tensors) - raw);
}

template <class Cfg>
void check_epi_storage() {
  using K_ = wg::Kernel<Cfg, Major::K, Major::K>;
  using S = typename K_::SharedStorage;
  alignas(1024) static unsigned char raw[sizeof(S)];
  S& s = *reinterpret_cast<S*>(raw);
  EXPECT_EQ(size_t(reinterpret_cast<const unsigned char*>(s.c.data()) - raw), 0u) << "C tiles first";
  EXPECT_EQ(offset_of_tensors<Cfg>(), Cfg::epi_tile_bytes()) << "the ring right after the C tiles";
  EXPECT_EQ(Cfg::epi_tile_bytes(), size_t(Cfg::EPI_TILES * Cfg::BM * Cfg::EPI_N * 2));
  EXPECT_EQ(offset_of_tensors<Cfg>() % 1024, 0u);
  // The tiles' 1024-byte alignment rounds the whole up to a multiple of 1 KiB.
  EXPECT_EQ(sizeof(S), (sizeof(PlainStorage<Cfg>) + Cfg::epi_tile_bytes() + 1023) / 1024 * 1024);
  // 5 stages x (128 + 128) x 64 x 2 bytes + 2 x 128 x 128 x 2 bytes = 224 KiB of
  // tiles (ping-pong); 4 x (128 + 256) x 64 x 2 + 32 KiB = 224 KiB (cooperative).
  EXPECT_EQ(Cfg::tile_smem_bytes(), size_t(224 * 1024));
  EXPECT_GE(K_::smem_bytes, Cfg::tile_smem_bytes());
  // can_run's rule (engine_wgmma.cuh: tiles + 1 KiB for the barriers) against the H200's 227 KiB opt-in.
  EXPECT_LE(K_::smem_bytes, size_t(227 * 1024));
  EXPECT_LE(Cfg::tile_smem_bytes() + 1024, size_t(227 * 1024));
}

TEST(WgmmaEpiTmaLayout, StoragePing128c2t) { check_epi_storage<WgPing128c2t>(); }
TEST(WgmmaEpiTmaLayout, StoragePing128c22t) { check_epi_storage<WgPing128c22t>(); }
TEST(WgmmaEpiTmaLayout, StorageCoop256c2t) { check_epi_storage<WgCoop256c2t>(); }
TEST(WgmmaEpiTmaLayout, StorageCoop256x128c12t) { check_epi_storage<WgCoop256x128c12t>(); }

// Without EPI_TMA the storage is what it was (the empty base adds nothing).
TEST(WgmmaEpiTmaLayout, OtherStorageUnchanged) {
  EXPECT_EQ(offset_of_tensors<WgPing128c2>(), 0u);
  EXPECT_EQ(offset_of_tensors<WgCoop256c2>(), 0u);
  EXPECT_EQ(sizeof(wg::Kernel<WgPing128c2, Major::K, Major::K>::SharedStorage), sizeof(PlainStorage<WgPing128c2>));
  EXPECT_EQ(sizeof(wg::Kernel<WgCoop256c22, Major::K, Major::K>::SharedStorage), sizeof(PlainStorage<WgCoop256c22>));
  EXPECT_EQ(WgPing128c2::epi_tile_bytes(), 0u);
  EXPECT_EQ(WgPing128c2::tile_smem_bytes(), WgPing128c2::ring_bytes());
  // A 6-stage ring with the tiles would not fit: 192 + 64 KiB.
  using Ping128c2St6Tma = WgConfig<128, 128, 64, 2, 6, true, 1, true>;
  EXPECT_GT(Ping128c2St6Tma::tile_smem_bytes() + 1024, size_t(227 * 1024));
}

// The launcher's rule for the TMA store: any N (the tensor map's extent is
// exact), a 16-byte aligned base and row stride, rows that do not overlap.
TEST(WgmmaEpiTmaLayout, TmaStoreRule) {
  alignas(16) static cutlass::bfloat16_t c[64];
  EXPECT_TRUE(wg_tma_store_ok(c, 1048, 1032));
  EXPECT_TRUE(wg_tma_store_ok(c, 8192, 8192));
  // N % 8 != 0: the H200's TMA store writes the 16-byte chunk that holds column
  // N - 1 whole (measured, session 9), so these take the register epilogue.
  EXPECT_FALSE(wg_tma_store_ok(c, 1048, 1031)) << "N % 8 != 0";
  EXPECT_FALSE(wg_tma_store_ok(c, 304, 300)) << "N % 8 != 0";
  EXPECT_FALSE(wg_tma_store_ok(c, 1033, 1031)) << "row stride not a multiple of 16 bytes";
  EXPECT_FALSE(wg_tma_store_ok(c, 1024, 1031)) << "rows overlap";
  EXPECT_FALSE(wg_tma_store_ok(c + 4, 1048, 1031)) << "base 8 bytes past a 16-byte boundary";
  EXPECT_FALSE(wg_tma_store_ok(nullptr, 1048, 1031)) << "no C (ex16 in forward mode)";
}

// What an EPI_TMA launch runs when it cannot take the TMA store: the same
// tile, cluster and schedule with the register epilogue.
template <class Cfg>
void check_fallback() {
  using F = typename WgTmaFallback<Cfg>::type;
  static_assert(Cfg::EPI_TMA && !F::EPI_TMA);
  static_assert(F::BM == Cfg::BM && F::BN == Cfg::BN && F::BK == Cfg::BK);
  static_assert(F::CLUSTER_M == Cfg::CLUSTER_M && F::CLUSTER_N == Cfg::CLUSTER_N && F::PINGPONG == Cfg::PINGPONG);
  EXPECT_GE(F::STAGES, Cfg::STAGES);
}
TEST(WgmmaEpiTmaLayout, FallbackPing128c2t) { check_fallback<WgPing128c2t>(); }
TEST(WgmmaEpiTmaLayout, FallbackPing128c22t) { check_fallback<WgPing128c22t>(); }
TEST(WgmmaEpiTmaLayout, FallbackCoop256c2t) { check_fallback<WgCoop256c2t>(); }
TEST(WgmmaEpiTmaLayout, FallbackCoop256x128c12t) { check_fallback<WgCoop256x128c12t>(); }

// The tensor map's boxes (64 columns, one 128-byte swizzle row, x BM rows)
// are the 64-column halves of SmemLayoutC, BM x 64 elements apart: the
// element (row, col) of the tile lies in box col / 64 at SmemLayoutC's offset
// minus the box's start, and within the box at the 128-byte swizzle of
// (row, col % 64), as the TMA reads it.
template <class Cfg>
void check_boxes() {
  using K_ = wg::Kernel<Cfg, Major::K, Major::K>;
  constexpr int BM = Cfg::BM, BN = Cfg::EPI_N, W = K_::kTmaBoxN;  // one pass's tile
  alignas(1024) static cutlass::bfloat16_t buf[BM * BN];
  auto sC = cute::make_tensor(cute::make_smem_ptr(buf), typename K_::SmemLayoutC{});
  int bad = 0;
  for (int row = 0; row < BM; ++row)
    for (int col = 0; col < BN; ++col) {
      const int off = int(&sC(row, col) - buf);
      const int box = col / W, c = col % W;
      // TMA's 128B swizzle: 16-byte chunk (c / 8) XOR (row % 8), rows of 128 bytes.
      const int want = box * BM * W + row * W + (((c / 8) ^ (row % 8)) * 8) + c % 8;
      bad += off != want;
    }
  EXPECT_EQ(bad, 0) << "SmemLayoutC's 64-column halves are not the TMA boxes";
}
TEST(WgmmaEpiTmaLayout, BoxesPing128c2t) { check_boxes<WgPing128c2t>(); }
TEST(WgmmaEpiTmaLayout, BoxesCoop256c2t) { check_boxes<WgCoop256c2t>(); }
TEST(WgmmaEpiTmaLayout, BoxesCoop256x128c12t) { check_boxes<WgCoop256x128c12t>(); }

}  // namespace

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
#include <gtest/gtest.h>

#include <vector>

#include "kernels/attention/wgmma/attention_wgmma.cuh"

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
  // bc160 st2 d128 with the O tile: 32 + 32 + 2 x 80 KB = 224 KB of tiles.
  EXPECT_EQ(FwdD128Bc160St2OvPsRdOt::kSmemTiles, 224 * 1024);
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

}  // namespace

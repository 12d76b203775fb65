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
  // Keys r + 8 are 8 * BR elements on (the kernel's stores rely on it).
  for (int r = 0; r + 8 < BC; ++r)
    for (int c = 0; c < BR; ++c) ASSERT_EQ(K_::pt_offset(r + 8, c), K_::pt_offset(r, c) + 8 * BR) << r << "," << c;
}

TEST(AttentionWgmmaPds, PtOffsetMatchesCuteLayoutD128) { check_pt_layout<KvD128Br64St2OTS>(); }
TEST(AttentionWgmmaPds, PtOffsetMatchesCuteLayoutD64) { check_pt_layout<KvD64Br64St3ATS>(); }

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

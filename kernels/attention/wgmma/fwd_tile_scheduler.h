// The static tile scheduler of the persistent Hopper attention forward
// (FwdConfig PERSISTENT, param ps1; FlashAttention-3's tile_scheduler role,
// read to learn, not copied). The grid is min(tiles, SMs) CTAs; CTA c runs
// tiles t = c, c + gridDim.x, c + 2 gridDim.x, ... and this header's pure
// function maps t to the (query block, head, batch) it computes. Plain C++ on
// the host (tests/attention_wgmma/test_fwd_tile_order.cpp checks it on the
// CPU) and inlined in the kernel through FwdTileScheduler (CUDA only), which
// also serves the one-tile-per-CTA grid of the other configurations (causal:
// the CTA's linear index in the same order, fwd_lpt_group's groups).
//
//   non-causal: head-major, query block fastest (t = bh * m_blocks + m): the
//               CTAs of one wave work on a few heads at a time, so those heads'
//               K and V are read from DRAM about once and from L2 after that;
//   causal:     longest tiles first. The (batch, head) pairs are cut into
//               groups of `group` consecutive pairs (the last group may be
//               smaller); groups run one after the other, and inside a group
//               the query blocks go from the last (the most key blocks) to the
//               first, all the group's heads at each query block. With group =
//               H * B this is "m_block descending over every head"; a smaller
//               group keeps the K/V of the heads in flight inside L2
//               (fwd_l2_head_group below) while each group still starts with
//               its longest tiles, so no CTA ends on a tail of long blocks.
//               Within a group, tiles are non-increasing in length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#if defined(__CUDACC__)
#define DETFUSE_FWD_HD __host__ __device__ __forceinline__
#else
#define DETFUSE_FWD_HD inline
#endif

namespace detfuse::attention::wg {

struct FwdTile {
  int m_block, h, b;
};

struct FwdTileOrder {
  int m_blocks = 0, H = 0, B = 0;
  int causal = 0;  // 1: longest first (by groups of `group` (batch, head) pairs)
  int group = 1;   // causal only: (batch, head) pairs per group, 1 <= group <= H * B
  int snake = 0;   // 1: the CTAs take the order's rounds alternately forward and back (fwd_snake_slot)

  DETFUSE_FWD_HD int tiles() const { return m_blocks * H * B; }

  // Tile t in [0, tiles()).
  DETFUSE_FWD_HD FwdTile operator()(int t) const {
    int m, bh;
    if (!causal) {
      bh = t / m_blocks;
      m = t - bh * m_blocks;
    } else {
      const int per_group = group * m_blocks;
      const int g = t / per_group;
      const int r = t - g * per_group;
      const int g0 = g * group;
      const int left = H * B - g0;
      const int gn = left < group ? left : group;  // heads in this group
      const int idx = r / gn;
      m = m_blocks - 1 - idx;
      bh = g0 + (r - idx * gn);
    }
    const int b = bh / H;
    return FwdTile{m, bh - b * H, b};
  }
};

// Snake (FwdTileOrder::snake, issue 16, session 18): a grid of G CTAs takes
// the order in rounds of G tiles, CTA c the c-th of even rounds and the
// (G - 1 - c)-th of odd ones, so a CTA that drew a long tile of a
// longest-first order draws a short one next. (Plain round robin, CTA c every
// c-th, gives CTA 0 the longest tile of every round: at 1,16,16,8192 causal
// with the L2 groups a model of the grid puts its slowest CTA 30% above the
// mean.) The CTA still walks t = c, c + G, ... (the scheduler's loop); slot t
// is order tile fwd_snake_slot(t, G), a permutation of [0, rounds G); the
// last, partial round holds the tiles below `tiles`, so CTA c stops before
// t = fwd_snake_end(c, G, tiles).
DETFUSE_FWD_HD int fwd_snake_slot(int t, int G) {
  const int r = t / G, c = t - r * G;
  return r % 2 == 0 ? t : r * G + (G - 1 - c);
}
DETFUSE_FWD_HD int fwd_snake_end(int c, int G, int tiles) {
  if (tiles <= 0) return 0;
  const int R = (tiles - 1) / G;          // the last round
  const int rem = tiles - R * G;          // its tiles, 1 .. G
  const int slot = R % 2 == 0 ? c : G - 1 - c;
  return slot < rem ? R * G + c + 1 : R * G;
}

// The causal forward's order choices (host) model a tile's load as 1 + its
// key blocks (bottom-right causal, no window; +1: a tile's fixed cost, so
// tiles without keys count).
inline int64_t fwd_tile_load(int m_block, int br, int bc, int sq, int sk) {
  const int64_t nk = (int64_t(sk) + bc - 1) / bc;
  const int64_t last = (int64_t(m_block) + 1) * br + sk - sq;  // one past the last visible key
  const int64_t n = last <= 0 ? 0 : (last + bc - 1) / bc;
  return 1 + (n < nk ? n : nk);
}

// The persistent causal forward's order choice (host): the largest CTA load
// over the mean for a grid of G CTAs walking `o` in round robin or as a snake.
inline double fwd_static_imbalance(const FwdTileOrder& o, int G, bool snake, int br, int bc, int sq, int sk) {
  const int tiles = o.tiles();
  if (G <= 0 || tiles <= 0) return 1.0;
  int64_t worst = 0, total = 0;
  for (int c = 0; c < G && c < tiles; ++c) {
    int64_t load = 0;
    const int end = snake ? fwd_snake_end(c, G, tiles) : tiles;
    for (int t = c; t < end; t += G) load += fwd_tile_load(o(snake ? fwd_snake_slot(t, G) : t).m_block, br, bc, sq, sk);
    worst = load > worst ? load : worst;
    total += load;
  }
  return total > 0 ? double(worst) * (G < tiles ? G : tiles) / double(total) : 1.0;
}

// The non-persistent causal forward (one tile a CTA, one CTA an SM: the shared
// memory allows no second): the hardware hands the CTAs out in the order of
// their linear index as SMs free up, so tile t of `o` starts on the first of G
// SMs to be free (a list schedule). The last SM's finish over the mean load.
inline double fwd_dynamic_imbalance(const FwdTileOrder& o, int G, int br, int bc, int sq, int sk) {
  const int tiles = o.tiles();
  if (G <= 0 || tiles <= 0) return 1.0;
  std::vector<int64_t> sm(size_t(G < tiles ? G : tiles), 0);  // a min-heap of the SMs' finish times
  auto later = std::greater<int64_t>();
  int64_t total = 0;
  for (int t = 0; t < tiles; ++t) {
    const int64_t load = fwd_tile_load(o(t).m_block, br, bc, sq, sk);
    std::pop_heap(sm.begin(), sm.end(), later);
    sm.back() += load;
    std::push_heap(sm.begin(), sm.end(), later);
    total += load;
  }
  return double(*std::max_element(sm.begin(), sm.end())) * double(sm.size()) / double(total);
}

// The last 8 answers of one order choice (`compute`, a lambda: each call site
// has its own cache), per thread: a model's layers use a few shapes, and the
// choice walks every tile of every candidate.
template <class Key, class Answer, class F>
Answer fwd_order_cached(const Key& k, F compute) {
  struct Entry {
    Key key;
    Answer answer;
    bool used = false;
  };
  thread_local Entry cache[8];
  thread_local int next = 0;
  for (const Entry& e : cache)
    if (e.used && e.key == k) return e.answer;
  const Answer answer = compute();
  cache[next] = {k, answer, true};
  next = (next + 1) % 8;
  return answer;
}

// Session 18 (H200, `detfuse bench attention`, forward ms, the order switched
// per launch): one group over every head taken as a snake against round robin
// over the L2 groups: 1,16,16,8192 causal 0.461-0.488 against 0.509-0.533
// (ncu: slowest SM 16% above the mean -> 2%; the model: 1.305 -> 1.003); but
// 4,32,32,4096 causal 1.231-1.255 against 1.081-1.092 (the groups keep K, V
// of 12 heads in L2, not 128; the model: 1.002 either way), d64 0.75-0.80
// against 0.70-0.72 (the model: 1.129 -> 1.002, yet slower: 128 heads' K, V,
// 128 MB, against 64 MB at 8192). So the snake over every head only where
// round robin leaves a CTA well above the mean, the snake does not, and every
// head's K and V (kv_bytes) are within 1.5 times the L2 (l2_bytes).
// (The model walks every tile twice, ~0.1 ms for a few thousand tiles: the
// launch asks through fwd_causal_order, whose answers are kept per shape.)
inline bool fwd_snake_pays(const FwdTileOrder& l2_groups, int G, int br, int bc, int sq, int sk, int64_t kv_bytes,
                           int64_t l2_bytes) {
  if (!l2_groups.causal || l2_groups.tiles() > (1 << 20) || 2 * kv_bytes > 3 * l2_bytes) return false;
  FwdTileOrder all = l2_groups;
  all.group = l2_groups.H * l2_groups.B;
  const double rr = fwd_static_imbalance(l2_groups, G, false, br, bc, sq, sk);
  return rr > 1.10 && fwd_static_imbalance(all, G, true, br, bc, sq, sk) < rr - 0.05;
}

// The persistent causal forward's order (host; issue 16, session 39): the
// group size and whether the CTAs take it as a snake. The rule before, kept as
// the base: round robin over the L2 rule's groups (fwd_l2_head_group), or the
// snake over every head where fwd_snake_pays. The search: every group size g
// from the L2 rule's down to 1 (no larger: the groups' K and V must stay in
// L2), walked in round robin or as a snake (snake over the groups: each group
// still longest first), by the model above; its least imbalanced order (the
// larger group and round robin on ties within 0.002) replaces the base where
// the model puts the base's slowest CTA at least 1% further above the mean.
// Why: the L2 rule's group alone ignores how the rounds of G tiles fall on the
// groups' tiles. An H100's probe of every group in turn and as a snake
// (experiments/attention_fwd_group_probe, session 39) followed the model: at
// 4,32,32,4096,64 causal (br192: 22 query blocks) round robin over the L2
// rule's 25 heads leaves a CTA 5.4% above the mean and ran 0.676 ms, the snake
// over groups of 24 (1.6%) 0.623 ms, of 8 or 12 (2.4%) 0.634 / 0.632 ms, while
// the orders the model put 20-84% above the mean ran 0.74-1.16 ms.
// Without GQA (heads_per_kv 1) the order then takes the smallest group of those
// the model puts within 1 point of its best (the least imbalanced of that
// group's two), the base among them: each query head reads its own K and V, so
// the L2 holds fewer heads' K and V at once. Session 41 (H100, `detfuse bench`,
// forward ms, in alternation, six rounds over two machine starts): at
// 4,32,32,4096,128 causal, which reads K and V ~2.3 times from DRAM (ncu,
// session 35), the snake over groups of 11 (1.1% above the mean) ran
// 0.937-0.984 against 1.002-1.040 for round robin over the L2 rule's 12 (0.4%),
// the snake over 12 0.977-1.011, over 10 (6.3%) 0.999-1.033. With GQA the same
// rule measured flat or slower (4,32,8,4096,128 causal, groups of 11: 0.956 /
// 0.973 against 0.956 / 0.981; 2,32,8,8192,128 causal, groups of 6: 1.792-1.838
// against 1.770-1.825), so there the least imbalanced order stays. The search
// walks each candidate's tiles (capped at 2^20 tile visits, a few ms: the
// smaller groups left unvisited are not candidates), and the answers for the
// last 8 shapes are kept per thread.
struct FwdOrderKey {
  int m_blocks, H, B, group, G, br, bc, sq, sk, heads_per_kv;
  int64_t kv_bytes, l2_bytes;
  bool operator==(const FwdOrderKey&) const = default;
};
struct FwdOrderChoice {
  int group = 1;
  int snake = 0;
  bool operator==(const FwdOrderChoice&) const = default;
};
inline FwdOrderChoice fwd_causal_order(const FwdTileOrder& l2_groups, int G, int br, int bc, int sq, int sk,
                                       int64_t kv_bytes, int64_t l2_bytes, int heads_per_kv) {
  FwdOrderChoice base{l2_groups.group, 0};
  if (!l2_groups.causal) return base;
  const FwdOrderKey k{l2_groups.m_blocks, l2_groups.H, l2_groups.B, l2_groups.group, G, br, bc, sq, sk, heads_per_kv,
                      kv_bytes, l2_bytes};
  return fwd_order_cached<FwdOrderKey, FwdOrderChoice>(k, [&]() {
    if (fwd_snake_pays(l2_groups, G, br, bc, sq, sk, kv_bytes, l2_bytes)) base = {l2_groups.H * l2_groups.B, 1};
    const int tiles = l2_groups.tiles();
    if (tiles <= 0 || tiles > (1 << 20)) return base;
    auto imbalance = [&](const FwdOrderChoice& c) {
      FwdTileOrder o = l2_groups;
      o.group = c.group;
      return fwd_static_imbalance(o, G, c.snake != 0, br, bc, sq, sk);
    };
    struct Scored {
      FwdOrderChoice c;
      double imb;
    };
    std::vector<Scored> seen{{base, imbalance(base)}};
    const double base_imb = seen[0].imb;
    Scored best = seen[0];
    int64_t visits = tiles;
    for (int g = l2_groups.group; g >= 1 && visits + 2 * int64_t(tiles) <= (int64_t(1) << 20); --g)
      for (int snake = 0; snake <= 1; ++snake) {
        const Scored s{{g, snake}, imbalance({g, snake})};
        visits += tiles;
        seen.push_back(s);
        if (s.imb < best.imb - 0.002) best = s;
      }
    if (best.imb > base_imb - 0.01) best = seen[0];
    if (heads_per_kv != 1) return best.c;
    Scored small = best;  // without GQA: the smallest group within 1 point of the best
    for (const Scored& s : seen)
      if (s.imb <= best.imb + 0.01 &&
          (s.c.group < small.c.group || (s.c.group == small.c.group && s.imb < small.imb - 0.002)))
        small = s;
    return small.c;
  });
}

// The non-persistent causal forward's group (host; issue 16, session 40).
// Before: the grid (query block, head, batch) walked head after head, each
// head's query blocks longest first (group 1), so the long tiles of the last
// heads start last and the list schedule ends on them: at 4,32,32,4096,64
// causal (br192, 132 SMs, the H200's d64 causal heuristic forward) the model
// puts the last SM 4.9% above the mean. FlashAttention-3's LPT scheduler (read
// to learn) takes the heads in groups that fit the L2, longest first over each
// group's heads; here every group size from the L2 rule's (l2_groups.group)
// down to 2 is tried by fwd_dynamic_imbalance, and the least imbalanced (the
// larger group on ties within 0.002) replaces group 1 where it puts the last SM
// at least 1% nearer the mean (4,32,32,4096,64: groups of 13, 0.3%). Capped at
// 2^20 tile visits like fwd_causal_order.
inline int fwd_lpt_group(const FwdTileOrder& l2_groups, int G, int br, int bc, int sq, int sk) {
  if (!l2_groups.causal || l2_groups.group <= 1) return 1;
  const FwdOrderKey k{l2_groups.m_blocks, l2_groups.H, l2_groups.B, l2_groups.group, G, br, bc, sq, sk, 0, 0};
  return fwd_order_cached<FwdOrderKey, int>(k, [&]() {
    const int tiles = l2_groups.tiles();
    if (tiles <= 0 || tiles > (1 << 20)) return 1;
    auto imbalance = [&](int g) {
      FwdTileOrder o = l2_groups;
      o.group = g;
      return fwd_dynamic_imbalance(o, G, br, bc, sq, sk);
    };
    const double base_imb = imbalance(1);
    int best = 1;
    double best_imb = base_imb;
    int64_t visits = tiles;
    for (int g = l2_groups.group; g >= 2 && visits + int64_t(tiles) <= (int64_t(1) << 20); --g) {
      const double imb = imbalance(g);
      visits += tiles;
      if (imb < best_imb - 0.002) best = g, best_imb = imb;
    }
    return best_imb <= base_imb - 0.01 ? best : 1;
  });
}

#if defined(__CUDACC__)
// The tiles of one CTA in the forward kernel, walked as
//   for (int t = s.t_first; t < s.t_end; t += s.t_step) s.tile(t) ...
// by the producer and the consumers alike. Persistent: t = blockIdx.x + k
// gridDim.x in the order of FwdTileOrder (Params::order); else the one tile of
// (blockIdx.x, y, z), causal: tile blockIdx.x + gridDim.x (y + gridDim.y z) of
// the order (the CTAs' dispatch order: the groups' longest tiles first).
// Params: the forward's (fields order, causal, m_blocks; attention_wgmma.cuh).
template <bool kPersistent, class Params>
struct FwdTileScheduler {
  const Params& p;
  int t_first, t_end, t_step;

  __device__ __forceinline__ explicit FwdTileScheduler(const Params& params)
      : p(params),
        t_first(kPersistent ? int(blockIdx.x) : 0),
        t_end(kPersistent ? (params.order.snake ? fwd_snake_end(int(blockIdx.x), int(gridDim.x), params.order.tiles())
                                                 : params.order.tiles())
                          : 1),
        t_step(kPersistent ? int(gridDim.x) : 1) {}

  __device__ __forceinline__ FwdTile tile(int t) const {
    if constexpr (kPersistent) {
      return p.order(p.order.snake ? fwd_snake_slot(t, int(gridDim.x)) : t);
    } else if (p.causal) {
      // Longest first by groups of heads (fwd_lpt_group; group 1: head after head) in the CTAs' dispatch order.
      return p.order(int(blockIdx.x) + int(gridDim.x) * (int(blockIdx.y) + int(gridDim.y) * int(blockIdx.z)));
    } else {
      return FwdTile{int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
    }
  }
};
#endif

// The causal group size: as many (batch, head) pairs as keep their K and V
// (kv_bytes_per_kv_head = 2 * Sk * d * 2 bytes) within half of the L2 cache
// (l2_bytes, the device attribute), times the query heads that share one K/V
// head (GQA, `ratio` = H / Hkv), at least 1, at most H * B.
inline int fwd_l2_head_group(int64_t l2_bytes, int64_t kv_bytes_per_kv_head, int ratio, int64_t bh_total) {
  int64_t g = kv_bytes_per_kv_head > 0 ? (l2_bytes / 2) / kv_bytes_per_kv_head : bh_total;
  if (g < 1) g = 1;
  g *= ratio > 0 ? ratio : 1;
  if (g > bh_total) g = bh_total;
  return int(g < 1 ? 1 : g);
}

}  // namespace detfuse::attention::wg

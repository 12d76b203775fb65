// The ordered kv kernel's dQ order of `spt1` (kernels/attention/wgmma/bwd_dq_order.h)
// on the CPU: each key block's walk visits its query blocks [m_begin, m_stop)
// once each; the turn formulas (causal, shift, desc) against a brute-force
// count of the key blocks that reach query block m before key block n; every
// query block's walkers get the distinct turns 0 .. count - 1; and a
// lock-step simulation of the semaphores (one add per key block per round,
// an add only after the ones before it landed in an earlier round) finishes
// without a deadlock, and no key block ever waits (holds its SM without
// adding) where the orders promise it (today's order: a chain of waits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "kernels/attention/wgmma/bwd_dq_order.h"

namespace {

using namespace detfuse::attention::wg;

// A problem's key-block ranges as the kv kernel computes them
// (attention_wgmma_bwd.cuh, the kernel's m_begin / m_stop).
struct Shape {
  int Sq, Sk, BR, BC, causal, window;
  int M() const { return (Sq + BR - 1) / BR; }
  int NK() const { return (Sk + BC - 1) / BC; }
  void range(int n, int& m_begin, int& m_stop) const {
    m_begin = 0;
    m_stop = M();
    if (causal) {
      const int first_q = n * BC - (Sk - Sq);
      m_begin = first_q <= 0 ? 0 : first_q / BR;
    }
    if (window > 0) {
      const int last_k = std::min(n * BC + BC, Sk) - 1;
      const int last_q = last_k - (Sk - Sq) + window - 1;
      m_stop = last_q < 0 ? 0 : std::min(M(), last_q / BR + 1);
    }
    m_begin = std::min(m_begin, m_stop);
  }
  // The kernel's n_lo (the window's first key block of query block m).
  int n_lo(int m) const {
    if (window <= 0) return 0;
    const int first_key = m * BR + (Sk - Sq) - window + 1;
    return first_key <= 0 ? 0 : first_key / BC;
  }
};

// The query blocks key block n walks, in order (bwd_dq_order.h dq_walk),
// and the unwrapped step coordinates u they come from.
std::vector<int> walk(const Shape& s, int order, int n, std::vector<int>* us = nullptr) {
  int mb, ms;
  s.range(n, mb, ms);
  std::vector<int> out;
  if (mb >= ms) return out;
  const DqWalk w = dq_walk(order, n, mb, ms, s.M(), s.NK());
  for (int u = w.u_first; u != w.u_end; ++u) {
    out.push_back(dq_walk_m(u, s.M()));
    if (us) us->push_back(u);
    if (out.size() > size_t(s.M()) + 1) break;  // a runaway walk fails below
  }
  return out;
}

// The turn as the kernel's dQ writer computes it (BwdKv::dq_turn: the line
// in the parameters, the base in shared memory, step u); the closed forms
// must agree with it.
int turn_of(const Shape& s, int order, int n, int m, int u) {
  const DqTurnLine l = dq_turn_line(order, s.BR, s.BC, s.Sq, s.Sk, s.window, s.M(), s.NK());
  const DqDiv dv = dq_div(l.c);
  EXPECT_GE(l.c, 2);
  EXPECT_GE((u + 1) * l.a + l.b, 0) << "the line's dividend";
  const int t = dq_turn_at(l.a, l.b, dv.mul, dv.sh32, l.cap, dq_turn_base(order, n, s.M(), s.NK(), l.base0), u);
  const int closed = order == kDqOrderCausal ? dq_causal_turn(n, m, s.BR, s.BC, s.Sq, s.Sk, s.NK())
                     : order == kDqOrderShift ? dq_shift_turn(n, m, s.M(), s.NK())
                                              : n - s.n_lo(m);  // today's (BwdKv::n_lo)
  EXPECT_EQ(t, closed) << "the kernel's form against the closed form, n " << n << " m " << m;
  return t;
}

// Brute force: the key blocks that walk m, ranked by the order's definition.
int brute_turn(const Shape& s, int order, int n, int m) {
  std::vector<std::tuple<int, int>> keys;  // (rank key, n')
  const int M = s.M(), NK = s.NK();
  auto key_of = [&](int k) {
    if (order == kDqOrderCausal) return -k;  // descending key blocks
    if (order == kDqOrderShift) return ((m - (k * M) / NK) % M + M) % M;
    return k;
  };
  int mine = -1;
  for (int k = 0; k < NK; ++k) {
    int mb, ms;
    s.range(k, mb, ms);
    if (mb <= m && m < ms) keys.emplace_back(key_of(k), k);
    if (k == n) mine = key_of(k);
  }
  int t = 0;
  for (auto& [kk, k] : keys) t += std::make_tuple(kk, k) < std::make_tuple(mine, n);
  return t;
}

struct Sim {
  int rounds = -1, waits = -1;  // rounds to finish; (key block, round) pairs spent waiting
};

// Checks one shape under one order and simulates it.
Sim check(const Shape& s, int order) {
  const int M = s.M(), NK = s.NK();
  std::vector<std::vector<int>> walks{size_t(NK)}, steps{size_t(NK)};
  std::vector<int> count(static_cast<size_t>(M), 0);
  size_t longest = 0;
  for (int n = 0; n < NK; ++n) {
    walks[size_t(n)] = walk(s, order, n, &steps[size_t(n)]);
    int mb, ms;
    s.range(n, mb, ms);
    std::vector<int> sorted = walks[size_t(n)];
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> want;
    for (int m = mb; m < ms; ++m) want.push_back(m);
    EXPECT_EQ(sorted, want) << "key block " << n << " walks its query blocks once each";
    for (int m : want) ++count[size_t(m)];
    longest = std::max(longest, want.size());
  }
  // Turns: the formula equals the brute force, distinct 0 .. count - 1 per m.
  std::vector<std::vector<int>> seen{static_cast<size_t>(M)};
  for (int n = 0; n < NK; ++n)
    for (size_t i = 0; i < walks[size_t(n)].size(); ++i) {
      const int m = walks[size_t(n)][i];
      const int t = turn_of(s, order, n, m, steps[size_t(n)][i]);
      EXPECT_EQ(t, brute_turn(s, order, n, m)) << "n " << n << " m " << m << " order " << order;
      seen[size_t(m)].push_back(t);
    }
  for (int m = 0; m < M; ++m) {
    std::sort(seen[size_t(m)].begin(), seen[size_t(m)].end());
    for (int i = 0; i < int(seen[size_t(m)].size()); ++i) EXPECT_EQ(seen[size_t(m)][size_t(i)], i) << "m " << m;
    EXPECT_EQ(int(seen[size_t(m)].size()), count[size_t(m)]);
  }
  if (::testing::Test::HasFailure()) return {};
  // Lock-step simulation: in a round every key block whose next add's turn
  // equals the semaphore as it stood at the round's start adds (and moves on).
  std::vector<int> sem(size_t(M), 0), pos(size_t(NK), 0);
  int rounds = 0, left = 0, waits = 0;
  for (auto& w : walks) left += int(w.size());
  while (left > 0) {
    std::vector<int> inc(size_t(M), 0);
    int done = 0;
    for (int n = 0; n < NK; ++n) {
      const auto& w = walks[size_t(n)];
      if (pos[size_t(n)] == int(w.size())) continue;
      const int m = w[size_t(pos[size_t(n)])];
      if (sem[size_t(m)] == turn_of(s, order, n, m, steps[size_t(n)][size_t(pos[size_t(n)])])) {
        ++inc[size_t(m)];
        ++pos[size_t(n)];
        ++done;
      } else {
        ++waits;
      }
    }
    EXPECT_GT(done, 0) << "deadlock after " << rounds << " rounds";
    if (done == 0) return {};
    for (int m = 0; m < M; ++m) sem[size_t(m)] += inc[size_t(m)];
    left -= done;
    ++rounds;
  }
  EXPECT_GE(rounds, int(longest));
  return {rounds, waits};
}

TEST(BwdDqOrder, CausalEveryShape) {
  for (int br : {64, 128})
    for (int sq : {1, 63, 128, 200, 1000, 2048})
      for (int sk : {1, 100, 128, 300, 1000, 2048})
        for (int window : {0, 1, 77, 300}) {
          const Shape s{sq, sk, br, 128, 1, window};
          SCOPED_TRACE(::testing::Message() << "Sq " << sq << " Sk " << sk << " br " << br << " window " << window);
          check(s, kDqOrderCausal);
          check(s, kDqOrderDesc);
        }
}

TEST(BwdDqOrder, ShiftEveryMNK) {
  // M, NK from 1 to 40 (key blocks above and below the query blocks).
  for (int br : {64, 128})
    for (int M = 1; M <= 40; ++M)
      for (int NK = 1; NK <= 40; ++NK) {
        const Shape s{M * br - (M % 3 == 0 ? br / 2 : 0), NK * 128 - (NK % 2 ? 5 : 0), br, 128, 0, 0};
        ASSERT_EQ(s.M(), M);
        ASSERT_EQ(s.NK(), NK);
        SCOPED_TRACE(::testing::Message() << "M " << M << " NK " << NK << " br " << br);
        const Sim r = check(s, kDqOrderShift);
        // Distinct starts (NK <= M): each key block reaches every query block
        // after the ones before it there, nobody waits. (NK > M: the key
        // blocks that share a start chain behind each other.)
        if (NK <= M) {
          EXPECT_EQ(r.waits, 0);
          EXPECT_EQ(r.rounds, M);
        }
        if (HasFailure()) return;
      }
}

TEST(BwdDqOrder, DescWithWindowNonCausal) {
  for (int sq : {100, 1000, 2048})
    for (int sk : {100, 1000, 2048})
      for (int window : {0, 1, 130, 700}) {
        const Shape s{sq, sk, 64, 128, 0, window};
        SCOPED_TRACE(::testing::Message() << "Sq " << sq << " Sk " << sk << " window " << window);
        check(s, kDqOrderDesc);
      }
}

// The point of the new orders at the benchmark's shape (S = 4096: d64 BR =
// 128, d128 BR = 64) and a few others with Sq = Sk: with the new orders no
// key block waits; today's descending order: key block n waits n rounds at
// its first query block (the chain).
TEST(BwdDqOrder, NoChainWhereSqEqualsSk) {
  for (int br : {64, 128})
    for (int S : {4096, 1000, 129}) {
      SCOPED_TRACE(::testing::Message() << "S " << S << " br " << br);
      const Shape c{S, S, br, 128, 1, 0};
      const int nk = c.NK();
      EXPECT_EQ(check(c, kDqOrderCausal).waits, 0);
      EXPECT_EQ(check(c, kDqOrderDesc).waits, nk * (nk - 1) / 2);
      const Shape nc{S, S, br, 128, 0, 0};
      const Sim sh = check(nc, kDqOrderShift);
      EXPECT_EQ(sh.waits, 0);
      EXPECT_EQ(sh.rounds, nc.M());
      EXPECT_EQ(check(nc, kDqOrderDesc).waits, nk * (nk - 1) / 2);
    }
}

// ws (dq_walk_part): a key block's walk split over S parts, part s taking
// the steps u = s (mod S). The parts of every key block partition its walk
// (each step once, in the same order), the kernel's step count is theirs,
// and the lock-step simulation with the (key block, part) pairs as walkers
// finishes without a deadlock; causal with Sq = Sk and S = 2, nobody waits
// (part s of key block n waits only for part s of the key blocks after it,
// one step ahead of it). The desc order keeps its chain (the parts do not
// remove it).
TEST(BwdDqOrder, WalkPartsPartitionAndNeverDeadlock) {
  for (int order : {int(kDqOrderCausal), int(kDqOrderDesc)})
    for (int S : {2, 3, 4})
      for (int sq : {1, 100, 1000, 2048})
        for (int sk : {1, 300, 1000, 2048})
          for (int window : {0, 77, 300}) {
            const Shape sh{sq, sk, 64, 128, order == kDqOrderCausal, window};
            SCOPED_TRACE(::testing::Message() << "order " << order << " S " << S << " Sq " << sq << " Sk " << sk
                                              << " window " << window);
            const int M = sh.M(), NK = sh.NK();
            struct Walker {
              int n;
              std::vector<int> ms, us;
            };
            std::vector<Walker> ws;
            for (int n = 0; n < NK; ++n) {
              int mb, ms;
              sh.range(n, mb, ms);
              std::vector<int> whole_us;
              walk(sh, order, n, &whole_us);
              std::vector<int> got;
              for (int part = 0; part < S; ++part) {
                Walker w{n, {}, {}};
                const DqWalk full = mb < ms ? dq_walk(order, n, mb, ms, M, NK) : DqWalk{mb, mb};
                const DqWalk pw = dq_walk_part(full, part, S);
                EXPECT_EQ((pw.u_end - pw.u_first) % S, 0);
                for (int u = pw.u_first; u != pw.u_end; u += S) {
                  ASSERT_TRUE(u >= full.u_first && u < full.u_end) << "u " << u << " outside the walk";
                  EXPECT_EQ(((u % S) + S) % S, part);
                  w.us.push_back(u);
                  w.ms.push_back(dq_walk_m(u, M));
                  got.push_back(u);
                }
                EXPECT_EQ(dq_walk_steps(pw, S), int(w.us.size()));
                ws.push_back(w);
              }
              std::sort(got.begin(), got.end());
              std::sort(whole_us.begin(), whole_us.end());
              EXPECT_EQ(got, whole_us) << "key block " << n << ": the parts partition its walk";
            }
            if (HasFailure()) return;
            std::vector<int> sem(size_t(M), 0);
            std::vector<size_t> pos(ws.size(), 0);
            int left = 0, waits = 0;
            for (auto& w : ws) left += int(w.ms.size());
            while (left > 0) {
              std::vector<int> inc(size_t(M), 0);
              int done = 0;
              for (size_t i = 0; i < ws.size(); ++i) {
                const Walker& w = ws[i];
                if (pos[i] == w.ms.size()) continue;
                const int m = w.ms[pos[i]];
                if (sem[size_t(m)] == turn_of(sh, order, w.n, m, w.us[pos[i]])) {
                  ++inc[size_t(m)];
                  ++pos[i];
                  ++done;
                } else {
                  ++waits;
                }
              }
              ASSERT_GT(done, 0) << "deadlock";
              for (int m = 0; m < M; ++m) sem[size_t(m)] += inc[size_t(m)];
              left -= done;
            }
            // S = 2 keeps the walks' parity (at BR = 64, BC = 128 a key block's
            // walk starts 2 query blocks after the next one's): nobody waits.
            // S = 3, 4 (not registered): a part can land on the step of the
            // next key block's part and fall a round behind it, and the lags
            // add up along the key blocks (here 240 rounds of waits for 64
            // walkers at S = 4, 16 key blocks).
            if (order == kDqOrderCausal && sq == sk && window == 0 && S == 2) EXPECT_EQ(waits, 0);
            if (order == kDqOrderCausal && sq == 2048 && sk == 2048 && window == 0 && S == 4) EXPECT_GT(waits, 200);
          }
}

// The writer's division by multiply and shift (dq_div): x / c for every
// divisor from 2 up to 70000 on dividends near 0, near multiples of c, and up
// to 2^31 - 1.
TEST(BwdDqOrder, DivisionByMultiplyIsExact) {
  uint64_t r = 12345;
  auto next = [&r]() {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    return unsigned(r >> 33);  // 31 bits
  };
  for (int c = 2; c <= 70000; c += (c < 5000 ? 1 : 7)) {
    const DqDiv d = dq_div(c);
    std::vector<unsigned> xs = {0u, 1u, unsigned(c) - 1, unsigned(c), unsigned(c) + 1, 0x7fffffffu, 0x7ffffffeu,
                                0x7fffffffu / unsigned(c) * unsigned(c), 0x7fffffffu / unsigned(c) * unsigned(c) - 1};
    for (int i = 0; i < 40; ++i) xs.push_back(next());
    for (int k = 1; k < 2000; k += 37) {
      xs.push_back(unsigned(k) * unsigned(c));
      xs.push_back(unsigned(k) * unsigned(c) - 1);
    }
    for (unsigned x : xs) {
      if (x > 0x7fffffffu) continue;
      ASSERT_GE(d.sh32, 0);
      ASSERT_EQ(dq_div_apply(x, d.mul, d.sh32), int(x / unsigned(c))) << "x " << x << " c " << c;
    }
  }
}

TEST(BwdDqOrder, OrderChoice) {
  EXPECT_EQ(dq_order_for(false, true, 0, 32, 32, 132), kDqOrderDesc);
  EXPECT_EQ(dq_order_for(true, true, 0, 32, 32, 132), kDqOrderCausal);
  EXPECT_EQ(dq_order_for(true, true, 100, 512, 512, 132), kDqOrderCausal);
  EXPECT_EQ(dq_order_for(true, false, 0, 32, 32, 132), kDqOrderShift);
  EXPECT_EQ(dq_order_for(true, false, 0, 132, 264, 132), kDqOrderShift);
  // More key blocks than SMs: not all resident at once, today's order.
  EXPECT_EQ(dq_order_for(true, false, 0, 133, 266, 132), kDqOrderDesc);
  EXPECT_EQ(dq_order_for(true, false, 100, 32, 32, 132), kDqOrderDesc);
  // The causal grid runs the last key block first.
  EXPECT_EQ(dq_walk_key_block(kDqOrderCausal, 0, 32), 31);
  EXPECT_EQ(dq_walk_key_block(kDqOrderShift, 0, 32), 0);
  EXPECT_EQ(dq_walk_key_block(kDqOrderDesc, 5, 32), 5);
}

}  // namespace

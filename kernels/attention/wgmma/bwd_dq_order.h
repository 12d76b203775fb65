// The order of the ordered (DQ 5) kv kernel's dQ adds, `spt1` (issue 16,
// FlashAttention-3's deterministic order, read to learn, not copied): which
// query blocks a key block walks in which order (one mapping from the step
// to the query block, used by every role of the kernel: the Q / dO producer,
// the LSE / D producer, the consumers and the dQ writer warp), and the turn
// of key block n among the key blocks that add into query block m (the value
// of m's semaphore its bulk add waits for). Plain C++ on the host
// (tests/attention_wgmma/test_bwd_dq_order.cpp checks it on the CPU against
// a brute-force count) and inlined in the kernel (attention_wgmma_bwd.cuh).
//
// Key block n walks the query blocks [m_begin(n), m_stop(n)) (causal and the
// window bound them; both grow with n), so the key blocks that walk m are a
// range [n_lo(m), n_hi(m)). Orders (BwdKv Params::order):
//   desc    (0, every variant without spt1, and spt1 where neither order
//           below applies): query blocks descending, m's adds in ascending
//           key-block order, turn = n - n_lo(m). All key blocks start on the
//           last query block together, so at each step the adds form a chain
//           (key block n adds after n - 1, ..., n_lo): key block n runs
//           about n adds behind key block n_lo.
//   causal  (1, causal, with or without a window): query blocks ascending
//           from the diagonal, m's adds in descending key-block order (the
//           key block on m's diagonal first), turn = n_hi(m) - 1 - n. Key
//           block n reaches m at step m - m_begin(n); the key blocks above it
//           start no earlier, so they reached m no later: nobody waits in
//           steady state. The grid runs the key blocks from the last to the
//           first (blockIdx.x 0 is key block NK - 1): a key block waits only
//           for key blocks with a smaller blockIdx.x, which have started.
//   shift   (2, non-causal without a window, NK <= SMs): key block n starts
//           at m0(n) = n M / NK and walks m0, m0 + 1, ... cyclically (all M
//           query blocks); m's adds come in the order the key blocks reach
//           it: by ((m - m0) mod M, n). A key block may wait for one with a
//           larger blockIdx.x, so every key block of a (batch, kv head) must
//           be able to be resident at once: NK <= the SMs (one CTA per SM at
//           the kv kernel's 227 KB of shared memory); above that, desc.
// The step -> query block mapping in "unwrapped" coordinates: u runs from
// u_first up by one until u_end (exclusive; a constant step: no register for
// it in the consumers' loop), m = |u| (desc walks u = 1 - m_stop .. -m_begin),
// less M where that is >= M (shift only).
#pragma once

#if defined(__CUDACC__)
#define DETFUSE_ORD_HD __host__ __device__ __forceinline__
#else
#define DETFUSE_ORD_HD inline
#endif

namespace detfuse::attention::wg {

enum DqOrder : int { kDqOrderDesc = 0, kDqOrderCausal = 1, kDqOrderShift = 2 };

// The order a launch takes: spt (the variant's `spt1`), causal, the window
// that matters (Options::window, 0: none), NK key blocks, M query blocks, the
// device's SMs.
inline int dq_order_for(bool spt, bool causal, int window, int n_blocks, int m_blocks, int sms) {
  if (!spt) return kDqOrderDesc;
  if (causal) return kDqOrderCausal;
  // (the shift turn's products: 2 M NK + M below 2^31)
  if (window == 0 && n_blocks <= sms && (long long)m_blocks * n_blocks < (1ll << 29)) return kDqOrderShift;
  return kDqOrderDesc;
}

// Shift: key block n's first query block, m0(n) = floor(n M / NK).
DETFUSE_ORD_HD int dq_shift_start(int n, int m_blocks, int n_blocks) { return n * m_blocks / n_blocks; }

// Shift: the number of key blocks n with m0(n) < x (0 <= x <= M):
// n M < x NK, so ceil(x NK / M).
DETFUSE_ORD_HD int dq_shift_below(int x, int m_blocks, int n_blocks) { return (x * n_blocks + m_blocks - 1) / m_blocks; }

// Shift: key block n's turn at query block m, the number of key blocks n'
// with ((m - m0(n')) mod M, n') < ((m - m0(n)) mod M, n). With s = m0(n):
// those that start in the cyclic range (s, m] (closer below m), plus those
// that start on s with a smaller index (the key blocks with start s are
// [below(s), below(s + 1)), m0 being non-decreasing in n).
DETFUSE_ORD_HD int dq_shift_turn(int n, int m, int m_blocks, int n_blocks) {
  const int s = dq_shift_start(n, m_blocks, n_blocks);
  const int closer = dq_shift_below(m + 1, m_blocks, n_blocks) - dq_shift_below(s + 1, m_blocks, n_blocks) +
                     (s <= m ? 0 : n_blocks);
  return closer + n - dq_shift_below(s, m_blocks, n_blocks);
}

// Causal: n_hi(m), one past the last key block that walks query block m
// (bottom-right aligned: query i sees key j <= i + Sk - Sq). Key block n
// walks m iff n BC - (Sk - Sq) < (m + 1) BR (and m is below its window
// bound): n < ceil(((m + 1) BR + Sk - Sq) / BC). Only asked for an m that
// some key block walks (the numerator is then positive).
DETFUSE_ORD_HD int dq_causal_end(int m, int br, int bc, int sq, int sk, int n_blocks) {
  const int e = ((m + 1) * br + (sk - sq) + bc - 1) / bc;
  return e < n_blocks ? e : n_blocks;
}

// Causal: key block n's turn at query block m (the key block on m's diagonal first).
DETFUSE_ORD_HD int dq_causal_turn(int n, int m, int br, int bc, int sq, int sk, int n_blocks) {
  return dq_causal_end(m, br, bc, sq, sk, n_blocks) - 1 - n;
}

// The kernel's form of every order's turn (the dQ writer warp runs on 24
// registers: no division, no branch on the order, a launch's constants in the
// kernel's parameters, one per key block in shared memory): at unwrapped step
// coordinate u,
//   turn = min(cap, ((u + 1) a + b) / c) + base,
// the division by the launch's c as the high word of a multiply by mul =
// ceil(2^sh / c), sh = 31 + ceil(log2 c) >= 32 (c >= 2: dq_turn_line doubles
// a line with c = 1), shifted right by sh - 32 (exact for dividends below
// 2^31: mul c - 2^sh < c <= 2^(sh - 31); measured: a division there cost
// ptxas 12 bytes of spills in pds3, a 64-bit product 8, and a branch between
// this line and today's n - n_lo(m) 8: each alone 0).
// Desc (today's turn n - n_lo(m) as a line; m = -u): without a window n (a =
// 0, b = 0, cap = 0, base = n); with one, n_lo(m) = max(0, floor((m BR + K) /
// BC)), K = Sk - Sq - window + 1, so n - n_lo(m) = n + min(0, floor((u BR - K
// + BC - 1) / BC)) = n - k + min(k, floor((u BR - K + BC - 1 + k BC) / BC)),
// with k BC > Sq + Sk keeping the dividend positive: a = BR, b = BC - 1 - K +
// k BC - BR, cap = k, base = n - k.
// Causal (u = m): n_hi(m) - 1 - n, a = BR, b = Sk - Sq + BC - 1, c = BC,
// cap = NK, base = -1 - n. Shift: with s = m0(n), closer = below(m + 1) -
// below(s + 1) (+ NK where m < s, i.e. u = m + M >= M), and below(m + 1) + NK
// = below(u + 1 - M) + NK = ceil((u + 1) NK / M) = below(u + 1) (below()
// read past M): a = NK, b = M - 1, c = M, cap = 2 NK (none reached), base =
// n - below(s) - below(s + 1).
struct DqDiv {
  unsigned mul;
  int sh32;  // sh - 32
};
inline DqDiv dq_div(int c) {  // c >= 2
  int l = 0;
  while ((1ll << l) < c) ++l;
  const int sh = 31 + l;
  return {unsigned(((1ull << sh) + unsigned(c) - 1) / unsigned(c)), sh - 32};
}
// x / c for 0 <= x < 2^31 (d = dq_div(c)).
DETFUSE_ORD_HD unsigned dq_umulhi(unsigned x, unsigned y) {
#if defined(__CUDA_ARCH__)
  return __umulhi(x, y);
#else
  return unsigned((static_cast<unsigned long long>(x) * y) >> 32);
#endif
}
DETFUSE_ORD_HD int dq_div_apply(unsigned x, unsigned mul, int sh32) { return int(dq_umulhi(x, mul) >> sh32); }
struct DqTurnLine {
  int a, b, c, cap, base0;  // base0: the base's part that does not depend on n
};
// window: Options::window (0: none).
inline DqTurnLine dq_turn_line(int order, int br, int bc, int sq, int sk, int window, int m_blocks, int n_blocks) {
  if (order == kDqOrderCausal) return {br, sk - sq + bc - 1, bc, n_blocks, -1};
  if (order == kDqOrderShift) {
    if (m_blocks == 1) return {2 * n_blocks, 0, 2, 2 * n_blocks, 0};  // ((u + 1) NK + 0) / 1, doubled (c >= 2)
    return {n_blocks, m_blocks - 1, m_blocks, 2 * n_blocks, 0};
  }
  if (window <= 0) return {0, 0, 2, 0, 0};
  const int K = sk - sq - window + 1;
  const int k = (sq + sk + br + bc) / bc + 1;
  return {br, bc - 1 - K + k * bc - br, bc, k, -k};
}
DETFUSE_ORD_HD int dq_turn_base(int order, int n, int m_blocks, int n_blocks, int base0) {
  if (order == kDqOrderCausal) return base0 - n;
  if (order == kDqOrderShift) {
    const int s = dq_shift_start(n, m_blocks, n_blocks);
    return n - dq_shift_below(s, m_blocks, n_blocks) - dq_shift_below(s + 1, m_blocks, n_blocks);
  }
  return n + base0;
}
// 0 <= (u + 1) a + b < 2^31 wherever key block n walks (causal: (m + 1) BR +
// Sk - Sq > n BC >= 0; shift: at most 2 M NK + M, dq_order_for's bound; desc:
// between k BC - Sq - Sk and k BC + 2 (Sq + Sk), lengths below 2^28).
DETFUSE_ORD_HD int dq_turn_at(int a, int b, unsigned mul, int sh32, int cap, int base, int u) {
  const int q = dq_div_apply(unsigned((u + 1) * a + b), mul, sh32);
  return (q < cap ? q : cap) + base;
}

// Key block n's walk over [m_begin, m_stop) (m_begin < m_stop) in the order's
// unwrapped coordinates (see above). Shift: m_begin = 0, m_stop = M.
struct DqWalk {
  int u_first, u_end;
};
DETFUSE_ORD_HD DqWalk dq_walk(int order, int n, int m_begin, int m_stop, int m_blocks, int n_blocks) {
  if (order == kDqOrderCausal) return {m_begin, m_stop};
  if (order == kDqOrderShift) {
    const int s = dq_shift_start(n, m_blocks, n_blocks);
    return {s, s + m_blocks};
  }
  return {1 - m_stop, 1 - m_begin};
}
DETFUSE_ORD_HD int dq_walk_m(int u, int m_blocks) {
  const int a = u < 0 ? -u : u;
  return a >= m_blocks ? a - m_blocks : a;
}

// ws (issue 16, session 18): a key block's walk split over S CTAs, part s
// taking the steps u = s (mod S) of [u_first, u_end) (u_first rounded up to
// that class, u_end to a whole number of steps S past it: the loops run u !=
// u_end). With the class fixed by u itself, not by the walk's first step,
// part s of every key block walks the same query blocks (causal: u = m;
// desc: u = -m), so a key block's turn at m waits only for the same part of
// the key blocks before it (launched before it: the parts are units, each
// unit's key blocks in one run of blockIdx.x). Empty where no such step.
DETFUSE_ORD_HD DqWalk dq_walk_part(DqWalk w, int s, int S) {
  const int r = ((w.u_first % S) + S) % S;  // u_first's class
  const int first = w.u_first + (s - r + S) % S;
  const int n = first < w.u_end ? (w.u_end - first + S - 1) / S : 0;
  return {first, first + n * S};
}
// The steps of a part's walk (its u_end - u_first over the step S); for a
// whole walk (S = 1), u_end - u_first.
DETFUSE_ORD_HD int dq_walk_steps(DqWalk w, int S) { return (w.u_end - w.u_first) / S; }

// The key block of blockIdx.x = x (causal: the last first; see above).
DETFUSE_ORD_HD int dq_walk_key_block(int order, int x, int n_blocks) {
  return order == kDqOrderCausal ? n_blocks - 1 - x : x;
}

}  // namespace detfuse::attention::wg

// Internal to the emulation (reference/emulate*.cpp): the parsed variant name
// and the vectorised fma row kernel. Not part of the public API.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kernels/common/strategy.h"

// Functions whose hot loops use std::fma carry an x86-64-v3 clone (hardware
// fma inlined, vectorised) beside the baseline one (glibc's fmaf): the same
// correctly rounded results either way.
#if defined(__x86_64__) && !defined(__clang__)
#define DETFUSE_EMU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DETFUSE_EMU_CLONES
#endif

namespace detfuse::reference::emu {

// family.dtype.engine.strategy.k1v1_k2v2...
struct ParsedName {
  std::string family, dtype, engine;
  Strategy strategy = Strategy::owning;
  std::map<std::string, int64_t> params;
  std::string param_keys;  // the keys in name order, '_'-joined ("bm_bn_bk_tm_tn_mb")
};
std::optional<ParsedName> parse_name(const std::string& name);
// The parsed name when `name` has an emulation, else nullopt (has_emulation).
std::optional<ParsedName> emulated(const std::string& name);

// acc[j] = fma(a, b[j], acc[j]) for j < n: one correctly rounded fma per
// element (std::fma; vectorised in the x86-64-v3 clone), each acc[j] its own
// chain. Every GEMM of the emulation is a sequence of these calls in the
// GPU's k order.
void fma_row(float* __restrict__ acc, float a, const float* __restrict__ b, int64_t n);

// pm::add(pm::mul(a, b), c) compiled as the emulation is (the test that the
// build does not contract it into an fma).
float mul_add_probe(float a, float b, float c);

int64_t ceil_div(int64_t a, int64_t b);
int64_t round_up(int64_t a, int64_t b);

}  // namespace detfuse::reference::emu

namespace detfuse {
struct FlceProblem;
}

namespace detfuse::reference::emu {

// The chunking of an FLCE fp32 variant (kernels/flce/driver.cuh make_plan for
// mode forward_backward): rows per chunk and the K splits of the dX GEMM.
struct FlceChunking {
  int64_t chunk_rows = 0;
  int dx_splits = 1;
};
FlceChunking flce_chunking(const FlceProblem& p, const ParsedName& n);

}  // namespace detfuse::reference::emu

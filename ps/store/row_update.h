// Whole-row optimizer updates in SIMD (the formulas of optimizer.h, which ApplyUpdate runs with
// the best set here): SSE2, which every x86-64 CPU has, and AVX2 where the CPU has it, chosen
// once at run time; the build stays portable x86-64 (no -march). Bit for bit the scalar
// formulas: lane by lane the same float operations in the same order, no fused multiply-add (the
// AVX2 code is compiled for avx2 only, not fma), so a row's bytes never depend on the machine
// that applied the update (tests/ps/row_update_test.cc).
//
// Thread-safety: pure functions (BestRowIsa reads the CPU once).
#pragma once

#include <cstdint>
#include <string_view>

#include "ps/store/optimizer.h"

namespace ferry::ps {

enum class RowIsa : uint8_t { kScalar, kSse2, kAvx2 };

// kAvx2 when the CPU has AVX2, else kSse2 (kScalar off x86-64).
RowIsa BestRowIsa();
std::string_view RowIsaName(RowIsa isa);
// Whether this build and CPU can run `isa`.
bool RowIsaAvailable(RowIsa isa);

// ApplyUpdate with the given instruction set's kernels (tests and benchmarks choose one;
// kScalar is ApplyUpdateScalar). `isa` must be available.
void ApplyUpdateWith(RowIsa isa, const OptimizerSpec& spec, uint32_t dim, float* w, float* state,
                     const float* g, uint32_t step);

}  // namespace ferry::ps

// Axis ranges and ticks for tools/plot: pure functions, unit-tested on their own.
//
//   log axis, byte format   powers of two, every 1st/2nd/5th/10th exponent so at most ~12
//                           labels: 2..8M -> 4 16 64 256 1K 4K 16K 64K 256K 1M 4M
//   log axis, numbers       decades (every k-th if many); within two decades also 2x and 5x
//   linear axis             1-2-5 steps, about `target` of them; starts at 0 when no value
//                           is negative (bandwidth from zero is the honest picture)
//
// Thread-safety: pure functions over value types.
#pragma once

#include <string>
#include <vector>

namespace ferry::plot {

enum class TickFormat { kNumber, kBytes };

struct Tick {
  double value = 0;
  std::string label;
};

struct Axis {
  double lo = 0, hi = 1;  // lo < hi; on a log axis lo > 0
  bool log = false;
  std::vector<Tick> ticks;  // ascending, inside [lo, hi]

  // Where `v` lies between lo (0) and hi (1), on the axis' scale.
  double Fraction(double v) const;
};

// The axis for data in [min, max] (min <= max, both > 0 on a log axis).
Axis MakeAxis(double min, double max, bool log, TickFormat format, int target = 6);

// A tick label: bytes as 2, 512, 1K, 64K, 1M, 2G when exact, else a number with as many
// decimals as `step` (the tick spacing; 0: shortest form) needs.
std::string FormatTick(double value, TickFormat format, double step);

// The shortest decimal that reads back as exactly `v` (for data-x / data-y attributes).
std::string ExactNumber(double v);

}  // namespace ferry::plot

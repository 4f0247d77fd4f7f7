#include "tools/plot/axis.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>

namespace ferry::plot {
namespace {

// floor(log2 v) and ceil(log2 v), exact for powers of two (frexp: v = m * 2^e, m in [0.5, 1)).
int FloorLog2(double v) {
  int e = 0;
  std::frexp(v, &e);
  return e - 1;
}

int CeilLog2(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);
  return m == 0.5 ? e - 1 : e;
}

// log10 is exact for powers of ten in glibc, but a tolerance keeps 1000 from becoming 2.9999.
int FloorLog10(double v) {
  return static_cast<int>(std::floor(std::log10(v) + 1e-9));
}
int CeilLog10(double v) {
  return static_cast<int>(std::ceil(std::log10(v) - 1e-9));
}

// The first of 1, 2, 5, 10, 20, ... that leaves at most `max_ticks` ticks over `span` steps.
int ExponentStride(int span, int max_ticks) {
  for (int s : {1, 2, 5, 10, 20, 50, 100, 200, 500}) {
    if (span / s + 1 <= max_ticks) return s;
  }
  return 1000;
}

bool Multiple(int e, int stride) {
  return ((e % stride) + stride) % stride == 0;
}

// 1, 2 or 5 times a power of ten, near `raw`.
double NiceStep(double raw) {
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

Axis LogBytes(double min, double max) {
  int lo_e = FloorLog2(min), hi_e = CeilLog2(max);
  if (lo_e == hi_e) --lo_e, ++hi_e;  // one value: centre it
  Axis a;
  a.log = true;
  a.lo = std::ldexp(1.0, lo_e);
  a.hi = std::ldexp(1.0, hi_e);
  const int stride = ExponentStride(hi_e - lo_e, 12);
  for (int e = lo_e; e <= hi_e; ++e) {
    if (Multiple(e, stride)) {
      const double v = std::ldexp(1.0, e);
      a.ticks.push_back({v, FormatTick(v, TickFormat::kBytes, 0)});
    }
  }
  return a;
}

Axis LogDecades(double min, double max, TickFormat format) {
  int lo_e = FloorLog10(min), hi_e = CeilLog10(max);
  if (lo_e == hi_e) --lo_e, ++hi_e;
  Axis a;
  a.log = true;
  if (hi_e - lo_e <= 2) {
    // Few decades: bound the axis by 1-2-5 values and label them, so 3..40 reads 2 5 10 20 50.
    std::vector<double> marks;
    for (int e = lo_e; e <= hi_e; ++e) {
      for (double m : {1.0, 2.0, 5.0}) marks.push_back(m * std::pow(10.0, e));
    }
    a.lo = marks.front();
    a.hi = marks.back();
    for (double v : marks) {
      if (v <= min * (1 + 1e-12)) a.lo = v;
    }
    for (auto it = marks.rbegin(); it != marks.rend(); ++it) {
      if (*it >= max * (1 - 1e-12)) a.hi = *it;
    }
    if (a.lo >= a.hi) a.hi = marks.back();
    for (double v : marks) {
      if (v >= a.lo && v <= a.hi) a.ticks.push_back({v, FormatTick(v, format, 0)});
    }
    return a;
  }
  a.lo = std::pow(10.0, lo_e);
  a.hi = std::pow(10.0, hi_e);
  const int stride = ExponentStride(hi_e - lo_e, 10);
  for (int e = lo_e; e <= hi_e; ++e) {
    if (Multiple(e, stride)) {
      const double v = std::pow(10.0, e);
      a.ticks.push_back({v, FormatTick(v, format, 0)});
    }
  }
  return a;
}

Axis Linear(double min, double max, TickFormat format, int target) {
  double a_min = min, a_max = max;
  if (a_min >= 0) {
    a_min = 0;
  } else if (a_max <= 0) {
    a_max = 0;
  }
  if (a_max == a_min) a_max = a_min + 1;
  const double step = NiceStep((a_max - a_min) / std::max(target, 1));
  Axis a;
  a.lo = std::floor(a_min / step) * step;
  a.hi = std::ceil(a_max / step) * step;
  const long n = std::lround((a.hi - a.lo) / step);
  for (long i = 0; i <= n; ++i) {
    double v = a.lo + static_cast<double>(i) * step;
    if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0" or 1e-17 from the sum
    a.ticks.push_back({v, FormatTick(v, format, step)});
  }
  return a;
}

}  // namespace

double Axis::Fraction(double v) const {
  if (log) return (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
  return (v - lo) / (hi - lo);
}

Axis MakeAxis(double min, double max, bool log, TickFormat format, int target) {
  if (!log) return Linear(min, max, format, target);
  if (format == TickFormat::kBytes) return LogBytes(min, max);
  return LogDecades(min, max, format);
}

std::string FormatTick(double value, TickFormat format, double step) {
  char buf[64];
  if (format == TickFormat::kBytes && value >= 0 && value < 0x1p63 && value == std::floor(value)) {
    const auto v = static_cast<uint64_t>(value);
    const char* unit = "";
    uint64_t n = v;
    for (const auto& [suffix, shift] :
         {std::pair{"G", 30}, std::pair{"M", 20}, std::pair{"K", 10}}) {
      if (v >= (uint64_t{1} << shift) && v % (uint64_t{1} << shift) == 0) {
        unit = suffix;
        n = v >> shift;
        break;
      }
    }
    std::snprintf(buf, sizeof buf, "%llu%s", static_cast<unsigned long long>(n), unit);
    return buf;
  }
  // Linear ticks share the decimals their step needs (0.5 1.0 1.5, not 0.5 1 1.5); decade ticks
  // (step 0) and extreme magnitudes take the shortest form.
  const int decimals = step > 0 ? -FloorLog10(step) : 0;
  if (step <= 0 || std::fabs(value) >= 1e12 || decimals > 10) {
    std::snprintf(buf, sizeof buf, "%g", value);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.*f", std::max(decimals, 0), value);
  return buf;
}

std::string ExactNumber(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "0";  // cannot happen with 64 bytes
  return std::string(buf, end);
}

}  // namespace ferry::plot

// What every Ferry tool's report is written with: numbers made safe for JSON/CSV, printf into a
// std::string, the perftest-style header block (rule lines and " key : value" lines), and the
// one way a --json/--csv/--plot FILE ("-": stdout) is written.
//
// Thread-safety: pure functions, except WriteOutput, which writes the file (or stdout) it is
// given and blocks until the bytes are out.
#pragma once

#include <cstdio>
#include <string>

#include "transport/status.h"

namespace ferry::tools {

// The rule line above and below a perftest-style header block.
inline constexpr const char* kReportRule =
    "---------------------------------------------------------------------------------------\n";

// A finite number for JSON/CSV (the formats have no NaN or infinity): v, or 0.
double Finite(double v);

// snprintf into a std::string of the length it needs.
std::string Printf(const char* fmt, auto... args) {
  const int n = std::snprintf(nullptr, 0, fmt, args...);
  std::string out(static_cast<size_t>(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, fmt, args...);
  return out;
}

// " key             : value\n", one line of a report's header block.
std::string ReportLine(const char* key, const std::string& value);

// Writes `text` to `path`, or to stdout for "-". IoError naming the path on failure.
Status WriteOutput(const std::string& path, const std::string& text);

}  // namespace ferry::tools

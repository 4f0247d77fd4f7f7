// RELIABILITY lines: one per fault scenario a test ran, printed to stdout and appended to the file
// $FERRY_RELIABILITY_RESULTS names (./test.sh and scripts/reliability-report.sh collect them into
// docs/reliability.md). Format: space-separated key=value fields, `error=` last (it runs to the
// end of the line):
//   RELIABILITY scenario=S backend=B outcome=O ops=N errors=N bytes=N detect_ms=N drain_ms=N
//     elapsed_ms=N proxy_bytes=N note=WORD error=TEXT
// ("-" for a field that does not apply). Thread-safe: one line is written at a time.
// Header-only so that any test binary can use it without linking a test library.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ferry::testing {

// `s` as one field value: no spaces or line breaks ("signal 9" -> "signal-9"); "-" when empty.
inline std::string ReliabilityWord(std::string s) {
  for (char& c : s) {
    if (c == ' ' || c == '\n' || c == '\r') c = '-';
  }
  return s.empty() ? "-" : s;
}

// `s` as the trailing error text: line breaks become spaces; "-" when empty.
inline std::string ReliabilityText(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.empty() ? "-" : s;
}

// Prints `line` (which ends with '\n') and appends it to $FERRY_RELIABILITY_RESULTS.
inline void WriteReliabilityLine(const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
  if (const char* path = std::getenv("FERRY_RELIABILITY_RESULTS"); path && *path) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fputs(line.c_str(), f);
      std::fclose(f);
    }
  }
}

}  // namespace ferry::testing

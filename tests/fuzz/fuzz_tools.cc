// What ferry-lat / ferry-bw read from outside: the command line (sizes such as `-s 8,4K,1M`,
// --row-size, --param KEY=VALUE, numbers) and, on the server, the benchmark configuration the
// client sends in its handshake (JSON, hostile). The first input byte picks the path:
//   0: DecodeConfig(rest)      1: ParseByteSize(rest)
//   2: ferry-lat's flags       3: ferry-bw's flags   (rest split at '\n' into argv)
// Every path must return a clear error or a value that passes its own validation; a decoded or
// resolved config must survive EncodeConfig -> DecodeConfig unchanged. Nothing is executed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tools/bench/cli.h"
#include "tools/bench/config.h"

namespace {

void RoundTrip(const ferry::bench::BenchConfig& c) {
  const std::vector<uint8_t> bytes = ferry::bench::EncodeConfig(c);
  auto again = ferry::bench::DecodeConfig(bytes);
  if (!again.ok() || ferry::bench::EncodeConfig(*again) != bytes) __builtin_trap();
}

void Flags(ferry::bench::Mode mode, std::string_view text) {
  std::vector<std::string> args;
  size_t start = 0;
  while (start <= text.size() && args.size() < 64) {
    const size_t end = std::min(text.find('\n', start), text.size());
    args.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::reverse(args.begin(), args.end());  // CLI::App::parse takes them last-first
  CLI::App app("fuzz");
  ferry::bench::ToolOptions o;
  ferry::bench::AddFlags(app, o, mode);
  try {
    app.parse(args);
  } catch (const CLI::Error&) {
    return;  // CLI11 reports usage errors by exception; the tools print them and exit 2
  }
  ferry::Status s = ferry::bench::Resolve(o);
  if (!s.ok()) {
    if (s.message().empty()) __builtin_trap();
    return;
  }
  if (!ferry::bench::ValidateConfig(o.config).ok()) __builtin_trap();
  RoundTrip(o.config);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  const std::string_view text(reinterpret_cast<const char*>(rest.data()), rest.size());
  switch (data[0] % 4) {
    case 0: {
      auto c = ferry::bench::DecodeConfig(rest);
      if (c.ok()) {
        RoundTrip(*c);
      } else if (c.status().message().empty()) {
        __builtin_trap();
      }
      break;
    }
    case 1: {
      auto v = ferry::bench::ParseByteSize(text);
      if (v.ok() && (*v == 0 || *v > (1ull << 40))) __builtin_trap();
      break;
    }
    case 2:
      Flags(ferry::bench::Mode::kLatency, text);
      break;
    case 3:
      Flags(ferry::bench::Mode::kBandwidth, text);
      break;
  }
  return 0;
}

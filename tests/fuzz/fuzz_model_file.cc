// Model files come from disk (an export, a copy, a hand-edited text model): models/io's
// ParseModel must refuse anything malformed, truncated or inconsistent with a clear status, never
// crash. What it accepts must encode back and parse to the same tables (both formats).
#include <cstdint>
#include <span>

#include "models/io/model_reader.h"
#include "models/io/model_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = ferry::models::ParseModel(std::span<const uint8_t>(data, size));
  if (!m.ok()) return 0;
  for (auto format : {ferry::models::ModelFormat::kBinary, ferry::models::ModelFormat::kText}) {
    auto bytes = ferry::models::EncodeModel(*m, format);
    if (!bytes.ok()) continue;  // e.g. a name the text format cannot carry
    auto back = ferry::models::ParseModel(std::string_view(*bytes));
    if (!back.ok() || back->tables.size() != m->tables.size()) __builtin_trap();
    for (size_t t = 0; t < m->tables.size(); ++t) {
      if (back->tables[t].size() != m->tables[t].size()) __builtin_trap();
    }
  }
  return 0;
}

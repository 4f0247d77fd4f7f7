// Internal to models/io: the byte sinks and the per-format encoders and parsers behind
// ModelWriter and ParseModel. Callers validate arguments (names, dims, call order) before
// reaching an encoder; encoders only serialise. Formats: docs/model-format.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "models/io/model.h"
#include "transport/status.h"

namespace ferry::models::io_internal {

// Where encoded bytes go. Write may buffer; Commit makes everything durable and visible.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(const void* data, size_t size) = 0;
  virtual Status Commit() = 0;
};

// "<path>.tmp" renamed over path on Commit; removed if destroyed uncommitted.
Result<std::unique_ptr<ByteSink>> OpenFileSink(const std::string& path);
std::unique_ptr<ByteSink> MakeStringSink(std::string* out);

class ModelEncoder {
 public:
  virtual ~ModelEncoder() = default;
  virtual Status Begin(ModelKind kind, const ModelParams& params) = 0;
  virtual Status BeginTable(std::string_view name, uint32_t dim) = 0;
  // values.size() == keys.size() * dim, keys non-empty.
  virtual Status AppendRows(std::span<const uint64_t> keys, std::span<const float> values) = 0;
  virtual Status EndTable() = 0;
  virtual Status Finish() = 0;  // end record / line; does not commit the sink
};

std::unique_ptr<ModelEncoder> MakeBinaryEncoder(ByteSink* sink);
std::unique_ptr<ModelEncoder> MakeTextEncoder(ByteSink* sink);

// Parsers: the whole encoded model in `bytes`; kProtocol naming the damaged part.
Result<Model> ParseBinaryModel(std::span<const uint8_t> bytes);
Result<Model> ParseTextModel(std::span<const uint8_t> bytes);

// Binary layout constants (docs/model-format.md, "Binary format").
inline constexpr char kBinaryMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'M', 'D', 'L'};
inline constexpr uint32_t kBinaryVersion = 1;
inline constexpr size_t kPreambleBytes = 16;  // magic, version, flags
// Text: the first line is "ferry-model text <version>".
inline constexpr std::string_view kTextMagic = "ferry-model";
inline constexpr uint32_t kTextVersion = 1;

}  // namespace ferry::models::io_internal

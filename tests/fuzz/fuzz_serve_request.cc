// ferry-serve's request decoder (models/serve/request.h) takes bodies from any HTTP client:
// every byte is hostile. The first input byte picks the model's input format (bits 0-1: 0 libsvm,
// 1 criteo, 2 libffm, 3 libsvm with hash_bits 16); the rest is the body.
// Checks, beyond "no crash, no sanitizer report":
//  - success yields one valid sample per instance (Batch::Validate), every label 0, masked ids
//    below 2^hash_bits;
//  - failure is InvalidArgument with a message, and leaves the batch empty;
//  - the answer for the samples encodes as JSON that parses back with one prediction each.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/batch.h"
#include "models/serve/request.h"

namespace {

using ferry::models::Batch;
using ferry::models::Format;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  const uint8_t mode = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  ferry::models::InputSpec spec;
  spec.format = (mode & 3) == 1   ? Format::kCriteo
                : (mode & 3) == 2 ? Format::kLibffm
                                  : Format::kLibsvm;
  spec.hash_seed = 7;
  spec.hash_bits = (mode & 3) == 3 ? 16 : 0;
  Batch b;
  ferry::Status s = ferry::models::DecodePredictRequest(body, spec, &b);
  if (!s.ok()) {
    Check(s.code() == ferry::Code::kInvalidArgument);
    Check(!s.message().empty());
    Check(b.size() == 0 && b.nnz() == 0);
    return 0;
  }
  Check(b.Validate().ok());
  Check(b.size() >= 1);
  for (float l : b.labels) Check(l == 0.0f);
  if (spec.hash_bits == 16) {
    for (uint64_t id : b.ids) Check(id < (uint64_t{1} << 16));
  }
  std::vector<float> probs(b.size(), 0.5f);
  auto j = nlohmann::json::parse(ferry::models::EncodePredictResponse(probs, 3));
  Check(j["predictions"].size() == b.size());
  return 0;
}

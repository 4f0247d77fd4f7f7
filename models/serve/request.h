// ferry-serve's request and response bodies (TensorFlow Serving's REST conventions), as pure
// functions: the HTTP layer (server.h) hands them bytes and sends back what they return.
//
//   POST /v1/models/NAME:predict
//   {"instances": [INSTANCE, ...]}        INSTANCE is one of
//     "3:1 17:0.5"                         a line's feature part in the model's input format:
//                                          libsvm idx:val ..., libffm field:idx:val ...,
//                                          criteo the 39 columns I1..I13 C1..C26 (tab-separated)
//     {"features": [[idx, val], ...]}      libsvm models
//     {"features": [[field, idx, val], ...]}  libffm models
//   -> {"predictions": [p, ...], "model_version": V}
//
// Hashing and feature ids are training's: every instance becomes the text of a line with a
// dummy label and goes through the format's own parser (models/data/parse.h), with the model's
// hash seed, hash bits and field map. There is no second parser.
//
// Decoding is one pass of nlohmann-json's SAX parser: no DOM of the body is built; a string
// instance goes to the format's parser from the lexer's buffer as soon as it is read, and only an
// object instance ({"features": ...}) becomes a json value of its own.
//
// Thread-safety: pure functions. Ownership: nothing is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "models/data/batch.h"
#include "models/data/parse.h"
#include "transport/status.h"

namespace ferry::models {

class FieldMap;  // models/data/field_map.h

// How a model reads its samples (Scorer's format(), hash_seed(), hash_bits(), field_map()).
struct InputSpec {
  Format format = Format::kLibsvm;
  uint64_t hash_seed = 0;
  uint32_t hash_bits = 0;
  const FieldMap* field_map = nullptr;  // borrowed for the call; libsvm only
};

// Bounds beyond the HTTP body limit (--max-body).
struct RequestLimits {
  size_t max_instances = 100000;
  size_t max_depth = 8;  // JSON nesting; the request needs 4
};

// Decodes a predict request's body into `out` (cleared first), one sample per instance, labels
// 0. InvalidArgument with a message naming what is wrong: "malformed JSON: ...", "the body has
// no \"instances\" array", "instance 3: bad feature ...: ..." (the parser's words), ...; `out`
// is then cleared.
Status DecodePredictRequest(std::string_view body, const InputSpec& spec, Batch* out,
                            const RequestLimits& limits = {});

// {"predictions":[...],"model_version":V}: each probability the shortest decimal that reads back
// as the same float (std::to_chars), so a client recovers the model's float bit for bit.
std::string EncodePredictResponse(std::span<const float> probs, uint64_t version);

// {"error":"<message>"}, TensorFlow Serving's error body, JSON-escaped.
std::string EncodeError(std::string_view message);

}  // namespace ferry::models

// Loading exported models (binary or text, told apart by their first bytes) into memory.
//
// Every input is treated as hostile: a truncated, corrupt, mismatched or foreign file is refused
// with kProtocol and a message naming the damaged part ("model file is truncated in a row block
// of table 'factors' at offset 1056: ...", "checksum mismatch in the header record",
// "binary model version 2 is not supported"), never with a crash or an unbounded allocation
// (allocations are bounded by the input size). ParseModel is the fuzzing entry point.
// Formats: docs/model-format.md.
//
// Thread-safety: pure functions. Blocking: ReadModelFile reads the whole file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "models/io/model.h"
#include "models/io/model_writer.h"
#include "transport/status.h"

namespace ferry::models {

// The format of an encoded model from its first bytes; kProtocol when it is neither.
Result<ModelFormat> DetectModelFormat(std::span<const uint8_t> bytes);

// Parses a whole encoded model held in memory.
Result<Model> ParseModel(std::span<const uint8_t> bytes);
Result<Model> ParseModel(std::string_view bytes);

// Reads and parses the file at `path` (mapped read-only, not copied; the file must not be
// truncated in place while it is read -- ModelWriter never does, it renames a new file over it).
// kNotFound / kIoError when it cannot be read; kProtocol, prefixed with the path, when its content
// is refused.
Result<Model> ReadModelFile(const std::string& path);

}  // namespace ferry::models

// Streaming export of a model: header first, then tables one after another, rows appended
// without knowing their count up front. Binary or text; both are specified byte by byte / line
// by line in docs/model-format.md and read back by models/io/model_reader.h.
//
// Usage:
//   FERRY_ASSIGN_OR_RETURN(ModelWriter w, ModelWriter::Create(path, ModelFormat::kBinary,
//                                                              ModelKind::kFm, params));
//   FERRY_RETURN_IF_ERROR(w.BeginTable("linear", 1));
//   for (each chunk of rows) FERRY_RETURN_IF_ERROR(w.AppendRows(keys, values));
//   FERRY_RETURN_IF_ERROR(w.EndTable());
//   ...
//   FERRY_RETURN_IF_ERROR(w.Finish());
//
// Files are written to "<path>.tmp" and renamed over <path> by Finish() after an fsync, so a
// crash or an error never leaves a partial model under <path>; a writer destroyed before
// Finish() deletes the temporary file. Memory: one block of rows (about 1 MiB) is buffered.
//
// Errors: misuse (a call out of order, an invalid name, a row of the wrong width, a repeated
// table name) returns kInvalidArgument and writes nothing, the writer stays usable; an I/O
// failure returns kIoError and every later call returns the same error. Keys must be unique
// within a table (the reader refuses duplicates; the writer does not keep the keys to check).
// Thread-safety: none. Move-only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "models/io/model.h"
#include "transport/status.h"

namespace ferry::models {

enum class ModelFormat : uint8_t { kBinary, kText };

// "binary", "text".
std::string_view ModelFormatName(ModelFormat format);
// Inverse of ModelFormatName; kInvalidArgument otherwise.
Result<ModelFormat> ParseModelFormat(std::string_view name);

class ModelWriter {
 public:
  // Writes `path` (through "<path>.tmp"). kInvalidArgument for invalid params (names, sizes),
  // kIoError when the temporary file cannot be created.
  static Result<ModelWriter> Create(const std::string& path, ModelFormat format, ModelKind kind,
                                    const ModelParams& params);
  // Appends the encoded model to *out (tests, fuzz seeds, sending a model over the wire).
  // *out must outlive the writer; it holds a complete model only after Finish() succeeded.
  static Result<ModelWriter> CreateInMemory(std::string* out, ModelFormat format, ModelKind kind,
                                            const ModelParams& params);

  ModelWriter(ModelWriter&&) noexcept;
  ModelWriter& operator=(ModelWriter&&) noexcept;
  ~ModelWriter();

  // Starts table `name` (a valid, not yet used name) with rows of `dim` floats
  // (1 <= dim <= kMaxModelDim). The previous table must have been ended.
  Status BeginTable(std::string_view name, uint32_t dim);
  // Appends one row (row.size() == dim) or a run of rows (values.size() == keys.size() * dim,
  // row i = values[i * dim, (i + 1) * dim)).
  Status AppendRow(uint64_t key, std::span<const float> row);
  Status AppendRows(std::span<const uint64_t> keys, std::span<const float> values);
  Status EndTable();
  // Ends the model: writes the end record / line, flushes, fsyncs and renames into place.
  // The writer accepts no further calls afterwards.
  Status Finish();

 private:
  struct State;
  explicit ModelWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Writes a whole in-memory model (tables in order) through ModelWriter.
Status WriteModel(const Model& model, const std::string& path, ModelFormat format);
Result<std::string> EncodeModel(const Model& model, ModelFormat format);

}  // namespace ferry::models

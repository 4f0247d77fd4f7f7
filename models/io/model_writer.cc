// ModelWriter: argument and call-order checks in front of a format encoder.
//
// States:  header written --BeginTable--> in table --EndTable--> header written ... --Finish-->
// finished. Misuse is refused before any byte is produced, so it never poisons the writer;
// a sink (I/O) failure is sticky.
#include "models/io/model_writer.h"

#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "models/io/codec.h"

namespace ferry::models {

using io_internal::ByteSink;
using io_internal::ModelEncoder;

struct ModelWriter::State {
  std::unique_ptr<ByteSink> sink;
  std::unique_ptr<ModelEncoder> encoder;  // writes into *sink; declared after it, dies first
  std::set<std::string, std::less<>> table_names;
  bool in_table = false;
  bool finished = false;
  std::string table;
  uint32_t dim = 0;
  uint64_t rows = 0;
  Status failed;  // sticky I/O failure
};

std::string_view ModelFormatName(ModelFormat format) {
  return format == ModelFormat::kBinary ? "binary" : "text";
}

Result<ModelFormat> ParseModelFormat(std::string_view name) {
  if (name == "binary") return ModelFormat::kBinary;
  if (name == "text") return ModelFormat::kText;
  return InvalidArgument("unknown model format '" + std::string(name) +
                         "'; use 'binary' or 'text'");
}

namespace {

Status ValidateParams(const ModelParams& params) {
  if (params.size() > kMaxModelParams) {
    return InvalidArgument("model has " + std::to_string(params.size()) + " parameters; at most " +
                           std::to_string(kMaxModelParams));
  }
  for (const auto& [key, value] : params) {
    FERRY_RETURN_IF_ERROR(ValidateModelName(key, "parameter key"));
    if (value.size() > kMaxModelParamValueBytes) {
      return InvalidArgument("parameter '" + key + "' has a " + std::to_string(value.size()) +
                             "-byte value; at most " + std::to_string(kMaxModelParamValueBytes));
    }
  }
  return Status::Ok();
}

std::unique_ptr<ModelEncoder> MakeEncoder(ModelFormat format, ByteSink* sink) {
  return format == ModelFormat::kBinary ? io_internal::MakeBinaryEncoder(sink)
                                        : io_internal::MakeTextEncoder(sink);
}

}  // namespace

ModelWriter::ModelWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
ModelWriter::ModelWriter(ModelWriter&&) noexcept = default;
ModelWriter& ModelWriter::operator=(ModelWriter&&) noexcept = default;
ModelWriter::~ModelWriter() = default;

Result<ModelWriter> ModelWriter::Create(const std::string& path, ModelFormat format, ModelKind kind,
                                        const ModelParams& params) {
  FERRY_RETURN_IF_ERROR(ValidateParams(params));
  auto state = std::make_unique<State>();
  FERRY_ASSIGN_OR_RETURN(state->sink, io_internal::OpenFileSink(path));
  state->encoder = MakeEncoder(format, state->sink.get());
  FERRY_RETURN_IF_ERROR(state->encoder->Begin(kind, params));
  return ModelWriter(std::move(state));
}

Result<ModelWriter> ModelWriter::CreateInMemory(std::string* out, ModelFormat format,
                                                ModelKind kind, const ModelParams& params) {
  if (out == nullptr) return InvalidArgument("model writer: output string is null");
  FERRY_RETURN_IF_ERROR(ValidateParams(params));
  auto state = std::make_unique<State>();
  state->sink = io_internal::MakeStringSink(out);
  state->encoder = MakeEncoder(format, state->sink.get());
  FERRY_RETURN_IF_ERROR(state->encoder->Begin(kind, params));
  return ModelWriter(std::move(state));
}

Status ModelWriter::BeginTable(std::string_view name, uint32_t dim) {
  if (!state_) return InvalidArgument("model writer was moved from");
  State& s = *state_;
  if (!s.failed.ok()) return s.failed;
  if (s.finished) return InvalidArgument("model writer: BeginTable after Finish");
  if (s.in_table) {
    return InvalidArgument("model writer: BeginTable('" + std::string(name) + "') while table '" +
                           s.table + "' is open; call EndTable first");
  }
  FERRY_RETURN_IF_ERROR(ValidateModelName(name, "table name"));
  if (dim == 0 || dim > kMaxModelDim) {
    return InvalidArgument("table '" + std::string(name) + "': dim " + std::to_string(dim) +
                           " is outside [1, " + std::to_string(kMaxModelDim) + "]");
  }
  if (s.table_names.count(name) > 0) {
    return InvalidArgument("model writer: table '" + std::string(name) + "' was already written");
  }
  if (s.table_names.size() >= kMaxModelTables) {
    return InvalidArgument("model writer: at most " + std::to_string(kMaxModelTables) + " tables");
  }
  s.failed = s.encoder->BeginTable(name, dim);
  if (!s.failed.ok()) return s.failed;
  s.table_names.emplace(name);
  s.in_table = true;
  s.table = std::string(name);
  s.dim = dim;
  s.rows = 0;
  return Status::Ok();
}

Status ModelWriter::AppendRow(uint64_t key, std::span<const float> row) {
  return AppendRows(std::span<const uint64_t>(&key, 1), row);
}

Status ModelWriter::AppendRows(std::span<const uint64_t> keys, std::span<const float> values) {
  if (!state_) return InvalidArgument("model writer was moved from");
  State& s = *state_;
  if (!s.failed.ok()) return s.failed;
  if (!s.in_table) return InvalidArgument("model writer: rows appended outside a table");
  if (values.size() != keys.size() * s.dim) {
    return InvalidArgument("table '" + s.table + "': " + std::to_string(keys.size()) +
                           " rows of dim " + std::to_string(s.dim) + " need " +
                           std::to_string(keys.size() * s.dim) + " values, got " +
                           std::to_string(values.size()));
  }
  if (keys.empty()) return Status::Ok();
  if (s.rows + keys.size() > kMaxModelTableRows) {
    return InvalidArgument("table '" + s.table + "' would exceed " +
                           std::to_string(kMaxModelTableRows) + " rows");
  }
  s.failed = s.encoder->AppendRows(keys, values);
  if (!s.failed.ok()) return s.failed;
  s.rows += keys.size();
  return Status::Ok();
}

Status ModelWriter::EndTable() {
  if (!state_) return InvalidArgument("model writer was moved from");
  State& s = *state_;
  if (!s.failed.ok()) return s.failed;
  if (!s.in_table) return InvalidArgument("model writer: EndTable without an open table");
  s.failed = s.encoder->EndTable();
  if (!s.failed.ok()) return s.failed;
  s.in_table = false;
  return Status::Ok();
}

Status ModelWriter::Finish() {
  if (!state_) return InvalidArgument("model writer was moved from");
  State& s = *state_;
  if (!s.failed.ok()) return s.failed;
  if (s.finished) return InvalidArgument("model writer: Finish called twice");
  if (s.in_table) {
    return InvalidArgument("model writer: Finish while table '" + s.table +
                           "' is open; call EndTable first");
  }
  s.failed = s.encoder->Finish();
  if (s.failed.ok()) s.failed = s.sink->Commit();
  if (!s.failed.ok()) return s.failed;
  s.finished = true;
  return Status::Ok();
}

namespace {

Status WriteTables(const Model& model, ModelWriter& writer) {
  for (const ModelTable& t : model.tables) {
    FERRY_RETURN_IF_ERROR(writer.BeginTable(t.name(), t.dim()));
    FERRY_RETURN_IF_ERROR(writer.AppendRows(t.keys(), t.values()));
    FERRY_RETURN_IF_ERROR(writer.EndTable());
  }
  return writer.Finish();
}

}  // namespace

Status WriteModel(const Model& model, const std::string& path, ModelFormat format) {
  FERRY_ASSIGN_OR_RETURN(ModelWriter writer,
                         ModelWriter::Create(path, format, model.kind, model.params));
  return WriteTables(model, writer);
}

Result<std::string> EncodeModel(const Model& model, ModelFormat format) {
  std::string out;
  {
    FERRY_ASSIGN_OR_RETURN(ModelWriter writer,
                           ModelWriter::CreateInMemory(&out, format, model.kind, model.params));
    FERRY_RETURN_IF_ERROR(WriteTables(model, writer));
  }
  return out;
}

}  // namespace ferry::models

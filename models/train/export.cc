// Checkpoint -> model file or in-memory model (export.h).
#include "models/train/export.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "ps/job/checkpoint.h"

namespace ferry::models {
namespace {

// Each table's rows in key order: (key, offset into weights) and the weights, dim floats a row.
using TableRows = std::function<Status(const ps::TableSpec& spec,
                                       const std::vector<std::pair<uint64_t, size_t>>& order,
                                       const std::vector<float>& weights)>;

Status ForEachTableInKeyOrder(const std::string& dir, const ps::JobSpec& job, const TableRows& fn) {
  FERRY_ASSIGN_OR_RETURN(ps::CheckpointManifest m, ps::ReadManifest(dir));
  FERRY_RETURN_IF_ERROR(ps::CheckManifestMatches(m, job));
  for (const ps::TableSpec& spec : job.tables) {
    const ps::TableOptions o = ps::ServerTableOptions(spec);
    const ps::RowLayout layout = ps::RowLayout::For(o.dim, o.state_floats, o.metadata);
    size_t index = 0;
    while (m.tables[index].name != spec.name) ++index;
    // Rows in key order: a server's slot order depends on which worker's pull created a row
    // first, and the same model must give the same file (a BSP run is reproducible bit for bit).
    std::vector<std::pair<uint64_t, size_t>> order;
    std::vector<float> weights;
    FERRY_RETURN_IF_ERROR(
        ps::ForEachCheckpointRow(dir, m, index, o, [&](uint64_t key, const uint8_t* row) -> Status {
          const float* wr = reinterpret_cast<const float*>(row + layout.embedding_offset);
          order.emplace_back(key, weights.size());
          weights.insert(weights.end(), wr, wr + spec.dim);
          return Status::Ok();
        }));
    std::sort(order.begin(), order.end());
    FERRY_RETURN_IF_ERROR(fn(spec, order, weights));
  }
  return Status::Ok();
}

}  // namespace

Status ExportCheckpoint(const std::string& dir, const ps::JobSpec& job, const ModelDef& def,
                        const ModelParams& params, const std::string& path, ModelFormat format) {
  FERRY_ASSIGN_OR_RETURN(ModelWriter w, ModelWriter::Create(path, format, def.kind, params));
  FERRY_RETURN_IF_ERROR(ForEachTableInKeyOrder(
      dir, job, [&](const ps::TableSpec& spec, const auto& order, const auto& weights) -> Status {
        FERRY_RETURN_IF_ERROR(w.BeginTable(spec.name, spec.dim));
        for (const auto& [key, at] : order) {
          FERRY_RETURN_IF_ERROR(
              w.AppendRow(key, std::span<const float>(weights.data() + at, spec.dim)));
        }
        return w.EndTable();
      }));
  return w.Finish();
}

Result<Model> CheckpointModel(const std::string& dir, const ps::JobSpec& job, const ModelDef& def,
                              const ModelParams& params) {
  Model model;
  model.kind = def.kind;
  model.params = params;
  FERRY_RETURN_IF_ERROR(ForEachTableInKeyOrder(
      dir, job, [&](const ps::TableSpec& spec, const auto& order, const auto& weights) -> Status {
        ModelTable t(spec.name, spec.dim);
        std::vector<uint64_t> keys;
        std::vector<float> values;
        keys.reserve(order.size());
        values.reserve(order.size() * spec.dim);
        for (const auto& [key, at] : order) {
          keys.push_back(key);
          values.insert(values.end(), weights.begin() + static_cast<ptrdiff_t>(at),
                        weights.begin() + static_cast<ptrdiff_t>(at + spec.dim));
        }
        FERRY_RETURN_IF_ERROR(t.Append(keys, values));
        model.tables.push_back(std::move(t));
        return Status::Ok();
      }));
  return model;
}

}  // namespace ferry::models

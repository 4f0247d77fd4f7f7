// Base or delta, file then manifest, then pruning (export_writer.h).
//
// A delta file is an ordinary binary model file (docs/model-format.md) of the model's kind:
//   params  := the model's + export.format=1, export.kind=delta, export.version=N,
//              export.previous=N-1
//   tables  := per model table T, in the model's order: T (dim d: the rows changed or new since
//              N-1, by key), then "removed:T" (dim 1: the keys gone since N-1, values 0)
// so the model format's checksums and truncation checks cover deltas too.
#include "models/io/export_writer.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>

#include "models/io/export_dir.h"
#include "models/io/model_writer.h"

namespace ferry::models {
namespace {

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::vector<size_t> KeyOrder(const ModelTable& t) {
  std::vector<size_t> order(t.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto keys = t.keys();
  if (!std::is_sorted(keys.begin(), keys.end())) {
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  }
  return order;
}

}  // namespace

Result<ExportDirWriter> ExportDirWriter::Open(const std::string& dir, const ExportDirOptions& o) {
  if (o.base_every == 0) return InvalidArgument("export: a base every 0 versions; use 1 or more");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("create the export directory " + dir, ec.value());
  auto m = ReadExportManifest(dir);
  if (!m.ok() && m.status().code() != Code::kNotFound) return m.status();
  return ExportDirWriter(dir, o, m.ok() ? std::move(*m) : ExportManifest{});
}

bool ExportDirWriter::NeedsBase(const Model& model) const {
  if (tables_.empty() || since_base_ >= o_.base_every || tables_.size() != model.tables.size()) {
    return true;
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (tables_[t].name != model.tables[t].name() || tables_[t].dim != model.tables[t].dim()) {
      return true;
    }
  }
  return false;
}

Result<ExportEntry> ExportDirWriter::Publish(const Model& model, uint64_t samples) {
  ExportEntry e;
  e.version = manifest_.entries.empty() ? 1 : manifest_.entries.back().version + 1;
  e.base = NeedsBase(model);
  e.file = ExportFileName(e.version, e.base);
  e.samples = samples;
  e.unix_ms = NowMs();
  std::vector<TableState> next;
  FERRY_RETURN_IF_ERROR(WriteVersion(model, e, &next));
  ExportManifest m = manifest_;
  m.entries.push_back(e);
  FERRY_RETURN_IF_ERROR(WriteExportManifest(dir_, m));
  manifest_ = std::move(m);
  tables_ = std::move(next);
  since_base_ = e.base ? 1 : since_base_ + 1;
  FERRY_RETURN_IF_ERROR(Prune());
  return e;
}

Status ExportDirWriter::WriteVersion(const Model& model, const ExportEntry& e,
                                     std::vector<TableState>* next) {
  ModelParams params = WithoutExportParams(model.params);
  const std::string p(kExportParamPrefix);
  params[p + "format"] = std::to_string(kExportFormatVersion);
  params[p + "kind"] = e.base ? "base" : "delta";
  params[p + "version"] = std::to_string(e.version);
  if (!e.base) params[p + "previous"] = std::to_string(manifest_.entries.back().version);
  const std::string path = dir_ + "/" + e.file;
  FERRY_ASSIGN_OR_RETURN(ModelWriter w,
                         ModelWriter::Create(path, ModelFormat::kBinary, model.kind, params));
  next->resize(model.tables.size());
  static const float kZero = 0;
  for (size_t t = 0; t < model.tables.size(); ++t) {
    const ModelTable& table = model.tables[t];
    const uint32_t dim = table.dim();
    TableState& now = (*next)[t];
    now.name = table.name();
    now.dim = dim;
    now.rows.reserve(table.size());
    const std::vector<std::pair<uint64_t, uint64_t>>* before = e.base ? nullptr : &tables_[t].rows;
    size_t b = 0;
    std::vector<uint64_t> removed;
    FERRY_RETURN_IF_ERROR(w.BeginTable(table.name(), dim));
    for (size_t i : KeyOrder(table)) {
      const uint64_t key = table.keys()[i];
      const uint64_t hash = XXH3_64bits(table.Row(i), dim * sizeof(float));
      now.rows.emplace_back(key, hash);
      bool changed = true;
      if (before != nullptr) {
        while (b < before->size() && (*before)[b].first < key)
          removed.push_back((*before)[b++].first);
        if (b < before->size() && (*before)[b].first == key)
          changed = (*before)[b++].second != hash;
      }
      if (changed)
        FERRY_RETURN_IF_ERROR(w.AppendRow(key, std::span<const float>(table.Row(i), dim)));
    }
    FERRY_RETURN_IF_ERROR(w.EndTable());
    if (e.base) continue;
    for (; b < before->size(); ++b) removed.push_back((*before)[b].first);
    FERRY_RETURN_IF_ERROR(w.BeginTable(RemovedTableName(table.name()), 1));
    for (uint64_t key : removed) FERRY_RETURN_IF_ERROR(w.AppendRow(key, {&kZero, 1}));
    FERRY_RETURN_IF_ERROR(w.EndTable());
  }
  return w.Finish();
}

Status ExportDirWriter::Prune() {
  if (o_.keep_bases == 0) return Status::Ok();
  std::vector<ExportEntry>& v = manifest_.entries;
  size_t bases = 0, keep_from = v.size();
  while (keep_from > 0 && bases < o_.keep_bases) {
    if (v[--keep_from].base) ++bases;
  }
  if (keep_from == 0) return Status::Ok();
  ExportManifest kept;
  kept.entries.assign(v.begin() + static_cast<ptrdiff_t>(keep_from), v.end());
  FERRY_RETURN_IF_ERROR(WriteExportManifest(dir_, kept));
  // Only once no manifest lists them.
  for (size_t i = 0; i < keep_from; ++i) {
    std::error_code ec;
    std::filesystem::remove(dir_ + "/" + v[i].file, ec);
  }
  manifest_ = std::move(kept);
  return Status::Ok();
}

}  // namespace ferry::models

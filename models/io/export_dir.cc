// Base + deltas -> one model (export_dir.h).
//
// Applying a delta is a merge of three lists in key order per table:
//   current rows (version N-1)   1 3 5 7
//   delta rows (changed or new)    3     8
//   removed keys                     5
//   -> version N                 1 3' 7 8
// so a table of R rows and a delta of D rows cost O(R + D log D) and one new copy of the table.
#include "models/io/export_dir.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <utility>
#include <vector>

#include "models/io/model_reader.h"

namespace ferry::models {
namespace {

// Row indices of `keys` in increasing key order.
std::vector<size_t> KeyOrder(std::span<const uint64_t> keys) {
  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!std::is_sorted(keys.begin(), keys.end())) {
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  }
  return order;
}

Result<uint64_t> ExportParam(const Model& m, std::string_view name) {
  const auto it = m.params.find(std::string(kExportParamPrefix) + std::string(name));
  uint64_t v = 0;
  if (it == m.params.end() ||
      std::from_chars(it->second.data(), it->second.data() + it->second.size(), v).ec !=
          std::errc()) {
    return ProtocolError("not an export file: parameter " + std::string(kExportParamPrefix) +
                         std::string(name) + " is missing or not a number");
  }
  return v;
}

Status CheckExportFile(const Model& m, const ExportEntry& e) {
  const auto kind = m.params.find(std::string(kExportParamPrefix) + "kind");
  const std::string want = e.base ? "base" : "delta";
  if (kind == m.params.end() || kind->second != want) {
    return ProtocolError("the manifest lists it as a " + want + " but the file is not one");
  }
  FERRY_ASSIGN_OR_RETURN(uint64_t format, ExportParam(m, "format"));
  if (format != kExportFormatVersion) {
    return ProtocolError("export format " + std::to_string(format) +
                         " is not supported; this build reads " +
                         std::to_string(kExportFormatVersion));
  }
  FERRY_ASSIGN_OR_RETURN(uint64_t version, ExportParam(m, "version"));
  if (version != e.version) {
    return ProtocolError("the file holds version " + std::to_string(version) +
                         ", the manifest says " + std::to_string(e.version));
  }
  return Status::Ok();
}

// One table of version N from version N-1's table and the delta's rows and removals.
Result<ModelTable> MergeTable(const ModelTable& cur, const ModelTable* rows,
                              const ModelTable* removed) {
  const std::vector<size_t> a = KeyOrder(cur.keys());
  const std::vector<size_t> b = rows ? KeyOrder(rows->keys()) : std::vector<size_t>();
  std::vector<uint64_t> gone;
  if (removed != nullptr) gone.assign(removed->keys().begin(), removed->keys().end());
  std::sort(gone.begin(), gone.end());
  ModelTable out(cur.name(), cur.dim());
  out.Reserve(cur.size() + b.size());
  const uint32_t dim = cur.dim();
  size_t i = 0, j = 0, k = 0, found = 0;
  while (i < a.size() || j < b.size()) {
    const bool take_cur = j == b.size() || (i < a.size() && cur.keys()[a[i]] <= rows->keys()[b[j]]);
    const uint64_t key = take_cur ? cur.keys()[a[i]] : rows->keys()[b[j]];
    const bool replaced = take_cur && j < b.size() && rows->keys()[b[j]] == key;
    while (k < gone.size() && gone[k] < key) ++k;
    const bool drop = k < gone.size() && gone[k] == key;
    if (drop && (!take_cur || replaced)) {
      return ProtocolError("delta both changes and removes key " + std::to_string(key) +
                           " of table '" + cur.name() + "'");
    }
    if (drop) {
      ++found;
    } else {
      const float* row = take_cur && !replaced ? cur.Row(a[i]) : rows->Row(b[j]);
      FERRY_RETURN_IF_ERROR(
          out.Append(std::span<const uint64_t>(&key, 1), std::span<const float>(row, dim)));
    }
    if (take_cur) ++i;
    if (!take_cur || replaced) ++j;
  }
  if (found != gone.size()) {
    return ProtocolError("delta removes " + std::to_string(gone.size() - found) +
                         " keys of table '" + cur.name() + "' that the version before it lacks");
  }
  return out;
}

Result<Model> LoadOnce(const std::string& dir, uint64_t* version, uint64_t up_to) {
  FERRY_ASSIGN_OR_RETURN(ExportManifest m, ReadExportManifest(dir));
  size_t last = m.entries.size();
  while (last > 0 && m.entries[last - 1].version > up_to) --last;
  if (last == 0)
    return NotFound(dir + ": no exported version at or before " + std::to_string(up_to));
  size_t first = last - 1;
  while (!m.entries[first].base) --first;  // the manifest starts with a base
  Model model;
  for (size_t i = first; i < last; ++i) {
    const ExportEntry& e = m.entries[i];
    const std::string path = dir + "/" + e.file;
    auto file = ReadModelFile(path);
    if (!file.ok()) return file.status();
    Status s = CheckExportFile(*file, e);
    if (s.ok() && e.base) {
      model = std::move(*file);
      // A base written by ExportDirWriter is in key order; anything else is sorted here.
      for (ModelTable& t : model.tables) {
        if (std::is_sorted(t.keys().begin(), t.keys().end())) continue;
        FERRY_ASSIGN_OR_RETURN(t, MergeTable(t, nullptr, nullptr));
      }
      model.params = WithoutExportParams(model.params);
    } else if (s.ok()) {
      auto previous = ExportParam(*file, "previous");
      s = previous.status();
      if (s.ok() && *previous != m.entries[i - 1].version) {
        s = ProtocolError("the delta follows version " + std::to_string(*previous) +
                          ", the manifest puts it after " +
                          std::to_string(m.entries[i - 1].version));
      }
      if (s.ok()) s = ApplyExportDelta(&model, *file, *previous);
    }
    if (!s.ok()) return s.Annotate(path);
  }
  if (version != nullptr) *version = m.entries[last - 1].version;
  return model;
}

}  // namespace

ModelParams WithoutExportParams(const ModelParams& params) {
  ModelParams out;
  for (const auto& [k, v] : params) {
    if (!k.starts_with(kExportParamPrefix)) out.emplace(k, v);
  }
  return out;
}

Status ApplyExportDelta(Model* model, const Model& delta, uint64_t previous) {
  if (delta.kind != model->kind) {
    return ProtocolError("the delta is a " + std::string(ModelKindName(delta.kind)) +
                         " model on a " + std::string(ModelKindName(model->kind)) + " base");
  }
  const std::string removed_prefix = RemovedTableName("");
  for (const ModelTable& t : delta.tables) {
    const bool removal = t.name().starts_with(removed_prefix);
    const std::string name = removal ? t.name().substr(removed_prefix.size()) : t.name();
    const ModelTable* mine = model->FindTable(name);
    if (mine == nullptr || (!removal && mine->dim() != t.dim())) {
      return ProtocolError("the delta's table '" + t.name() + "' does not match version " +
                           std::to_string(previous) + " (missing there, or of another dim)");
    }
  }
  std::vector<ModelTable> tables;
  tables.reserve(model->tables.size());
  for (const ModelTable& t : model->tables) {
    FERRY_ASSIGN_OR_RETURN(
        ModelTable merged,
        MergeTable(t, delta.FindTable(t.name()), delta.FindTable(RemovedTableName(t.name()))));
    tables.push_back(std::move(merged));
  }
  model->tables = std::move(tables);
  model->params = WithoutExportParams(delta.params);
  return Status::Ok();
}

Result<Model> LoadExportDir(const std::string& dir, uint64_t* version, uint64_t up_to) {
  auto model = LoadOnce(dir, version, up_to);
  // A file pruned between reading the manifest and opening it: the manifest has moved on.
  if (!model.ok() && model.status().code() == Code::kNotFound) {
    auto again = LoadOnce(dir, version, up_to);
    if (again.ok() || again.status().code() != Code::kNotFound) return again;
  }
  return model;
}

}  // namespace ferry::models

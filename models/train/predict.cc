// ferry-predict's engine (predict.h).
#include "models/train/predict.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "models/data/field_map.h"
#include "models/data/reader.h"
#include "models/eval/calibration.h"
#include "models/eval/metrics.h"
#include "models/kernels/mlp_shape.h"
#include "models/train/model_def.h"
#include "models/train/model_kernel.h"
#include "models/train/step.h"

namespace ferry::models {

namespace {

Result<uint64_t> ParamU64(const Model& m, std::string_view key) {
  FERRY_ASSIGN_OR_RETURN(std::string_view v, m.RequireParam(key));
  uint64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) {
    return ProtocolError("model parameter " + std::string(key) + " = '" + std::string(v) +
                         "' is not a number");
  }
  return out;
}

// Rows of one table for the batch's unique ids, looked up once per batch.
class TableRows {
 public:
  struct Accessor {
    const std::vector<const float*>* rows;
    const float* operator()(uint32_t u) const { return (*rows)[u]; }
  };
  explicit TableRows(const ModelTable* t) : t_(t), zero_(t->dim(), 0.0f) {}
  void Lookup(const std::vector<uint64_t>& ids) {
    rows_.resize(ids.size());
    for (size_t u = 0; u < ids.size(); ++u) {
      const float* r = t_->Find(ids[u]);
      rows_[u] = r != nullptr ? r : zero_.data();
    }
  }
  Accessor accessor() const { return Accessor{&rows_}; }

 private:
  const ModelTable* t_;
  std::vector<float> zero_;
  std::vector<const float*> rows_;
};

bool IsDense(const ModelLayout& m, size_t t) {
  return std::find(m.dense.begin(), m.dense.end(), static_cast<int>(t)) != m.dense.end();
}

// The model file's tables in the roles of ModelLayout (names as in model_def.h).
struct ModelTables {
  ModelLayout layout;
  std::vector<const ModelTable*> tables;
};

Result<ModelTables> TablesOf(const Model& model) {
  ModelTables m;
  m.layout.kind = model.kind;
  auto add = [&m](const ModelTable* t) {
    m.tables.push_back(t);
    return static_cast<int>(m.tables.size() - 1);
  };
  auto require = [&](std::string_view name, uint32_t dim) -> Result<int> {
    FERRY_ASSIGN_OR_RETURN(const ModelTable* t, model.RequireTable(name, dim));
    return add(t);
  };
  switch (model.kind) {
    case ModelKind::kLr:
    case ModelKind::kFtrl: {
      FERRY_ASSIGN_OR_RETURN(m.layout.linear, require("weights", 1));
      return m;
    }
    case ModelKind::kFm:
    case ModelKind::kFfm: {
      FERRY_ASSIGN_OR_RETURN(uint64_t k, ParamU64(model, "factors"));
      uint64_t fields = 1;
      if (model.kind == ModelKind::kFfm) {
        FERRY_ASSIGN_OR_RETURN(fields, ParamU64(model, "fields"));
      }
      if (k == 0 || fields == 0 || k * fields > kMaxFfmRowFloats) {
        return ProtocolError("model parameters factors = " + std::to_string(k) +
                             ", fields = " + std::to_string(fields) + " are out of range");
      }
      m.layout.k = static_cast<uint32_t>(k);
      m.layout.fields = static_cast<uint32_t>(fields);
      FERRY_ASSIGN_OR_RETURN(m.layout.linear, require("linear", 1));
      FERRY_ASSIGN_OR_RETURN(m.layout.factors,
                             require(model.kind == ModelKind::kFm ? "factors" : "field_factors",
                                     static_cast<uint32_t>(k * fields)));
      return m;
    }
    case ModelKind::kMlp:
    case ModelKind::kDeepFm: {
      FERRY_ASSIGN_OR_RETURN(std::string_view enc, model.RequireParam("mlp_shape"));
      FERRY_ASSIGN_OR_RETURN(m.layout.shape, MlpShape::Parse(enc));
      const char* wide = model.kind == ModelKind::kMlp ? "wide" : "linear";
      if (const ModelTable* t = model.FindTable(wide)) {
        if (t->dim() != 1) return ProtocolError(std::string("table ") + wide + " is not 1 wide");
        m.layout.linear = add(t);
      }
      FERRY_ASSIGN_OR_RETURN(m.layout.embeddings, require("embeddings", m.layout.shape.embed_dim));
      for (size_t l = 0; l < m.layout.shape.NumLayers(); ++l) {
        const std::string name = "dense." + std::to_string(l);
        FERRY_ASSIGN_OR_RETURN(
            int t, require(name, static_cast<uint32_t>(m.layout.shape.LayerParamCount(l))));
        if (m.tables[t]->Find(0) == nullptr) {
          return ProtocolError("table " + name + " lacks its row (key 0)");
        }
        m.layout.dense.push_back(t);
      }
      return m;
    }
  }
  return ProtocolError("unknown model kind");
}

// The model's intercept calibration (0 without one). kProtocol for a value that is not a
// finite number.
Result<double> OffsetOf(const Model& model) {
  auto it = model.params.find(kLogitOffsetParam);
  if (it == model.params.end()) return 0.0;
  char* end = nullptr;
  const double d = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || end != it->second.c_str() + it->second.size() || !std::isfinite(d) ||
      std::abs(d) > kMaxOffset) {
    return ProtocolError("model parameter " + std::string(kLogitOffsetParam) + " = '" + it->second +
                         "' is not an offset");
  }
  return d;
}

// The field map the model was trained with (or the one given instead), for libsvm input.
Result<std::shared_ptr<const FieldMap>> FieldMapOf(const Model& model, const PredictOptions& o,
                                                   Format format) {
  std::shared_ptr<const FieldMap> out;
  if (!o.field_map.empty()) {
    FERRY_ASSIGN_OR_RETURN(FieldMap map, FieldMap::Load(o.field_map));
    out = std::make_shared<const FieldMap>(std::move(map));
    return out;
  }
  auto it = model.params.find("field_map");
  if (it == model.params.end() || format != Format::kLibsvm) return out;
  if (it->second == kExternalFieldMap) {
    return InvalidArgument(
        "the model was trained with a field map too large to carry in the model file: give it "
        "again with --field-map");
  }
  auto map = FieldMap::Parse(it->second);
  if (!map.ok()) return map.status().Annotate("the model's field_map parameter");
  out = std::make_shared<const FieldMap>(std::move(*map));
  return out;
}

// How the model was trained to read its data (format, hashing, field map), with what the options
// override.
Result<ReaderOptions> ReaderOptionsFor(const Model& model, const PredictOptions& o) {
  ReaderOptions ro;
  ro.files = o.files;
  std::string_view format = o.format;
  if (format.empty()) {
    FERRY_ASSIGN_OR_RETURN(format, model.RequireParam("format"));
  }
  FERRY_ASSIGN_OR_RETURN(ro.format, ParseFormat(format));
  FERRY_ASSIGN_OR_RETURN(ro.hash_seed, ParamU64(model, "hash_seed"));
  FERRY_ASSIGN_OR_RETURN(uint64_t bits, ParamU64(model, "hash_bits"));
  ro.hash_bits = static_cast<uint32_t>(bits);
  ro.threads = o.parse_threads;
  ro.strict = o.strict;
  FERRY_ASSIGN_OR_RETURN(ro.field_map, FieldMapOf(model, o, ro.format));
  return ro;
}

}  // namespace

Status Predict(const Model& model, const PredictOptions& o, std::FILE* out, PredictReport* report) {
  FERRY_ASSIGN_OR_RETURN(ReaderOptions ro, ReaderOptionsFor(model, o));
  // Malformed lines go to stderr as they come; the first also names what a file of no sample
  // held instead.
  std::string first_malformed;
  ro.on_malformed = [&first_malformed](const std::string& m) {
    if (first_malformed.empty()) first_malformed = m;
    std::fprintf(stderr, "%s\n", m.c_str());
  };
  FERRY_ASSIGN_OR_RETURN(ModelTables m, TablesOf(model));
  FERRY_ASSIGN_OR_RETURN(const double offset, OffsetOf(model));
  FERRY_ASSIGN_OR_RETURN(auto reader, Reader::Open(ro));
  std::vector<TableRows> rows;
  for (const ModelTable* t : m.tables) rows.emplace_back(t);
  std::vector<TableRows::Accessor> access;
  for (const TableRows& r : rows) access.push_back(r.accessor());
  std::vector<const float*> dense_rows;
  for (int t : m.layout.dense) dense_rows.push_back(m.tables[t]->Find(0));
  UniqueIds ids;
  MlpWorkspace ws;
  std::vector<float> probs;
  LoglossAccumulator loss;
  AucAccumulator auc;
  Batch b;
  while (true) {
    b.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t n, reader->Next(o.batch_size, &b));
    if (n == 0) break;
    ids.Build(b, m.layout.linear >= 0);
    for (size_t t = 0; t < rows.size(); ++t) {
      if (!IsDense(m.layout, t)) rows[t].Lookup(ids.ids());
    }
    probs.resize(n);
    auto l = RunModelKernel<false>(m.layout, b, ids.uidx(), ids.bias(),
                                   std::span<const TableRows::Accessor>(access),
                                   std::span<const NoTable>(), dense_rows, {}, ws, probs);
    FERRY_RETURN_IF_ERROR(l.status());
    // As ferry-train's evaluation does (step.cc): the same floats, the same loss.
    if (offset != 0) l = ApplyOffset(offset, probs, b.labels);
    loss.AddSum(*l, n);
    FERRY_RETURN_IF_ERROR(auc.Add(probs, b.labels));
    for (float p : probs) {
      if (std::fprintf(out, "%.6g\n", static_cast<double>(p)) < 0) {
        return IoError("write the predictions", errno);
      }
    }
  }
  // Nothing to score is a mistake (the wrong file or --format), not an empty result.
  if (loss.count() == 0) return NoSampleError("sample", o.files, reader->stats(), first_malformed);
  if (report != nullptr) {
    report->samples = loss.count();
    report->logloss = loss.Mean();
    report->auc = auc.Compute().auc;
    report->malformed = reader->stats().malformed;
  }
  return Status::Ok();
}

}  // namespace ferry::models

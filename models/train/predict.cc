// ferry-predict's engine (predict.h).
#include "models/train/predict.h"

#include <charconv>

#include "models/data/reader.h"
#include "models/eval/metrics.h"
#include "models/kernels/fm.h"
#include "models/kernels/lr.h"
#include "models/kernels/mlp.h"
#include "models/kernels/mlp_shape.h"
#include "models/train/model_def.h"
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
  TableRows(const ModelTable* t) : t_(t), zero_(t != nullptr ? t->dim() : 1, 0.0f) {}
  void Lookup(const std::vector<uint64_t>& ids) {
    rows_.resize(ids.size());
    for (size_t u = 0; u < ids.size(); ++u) {
      const float* r = t_->Find(ids[u]);
      rows_[u] = r != nullptr ? r : zero_.data();
    }
  }
  auto Accessor() const {
    return [this](uint32_t u) { return rows_[u]; };
  }

 private:
  const ModelTable* t_;
  std::vector<float> zero_;
  std::vector<const float*> rows_;
};

}  // namespace

Status Predict(const Model& model, const PredictOptions& o, std::FILE* out,
               PredictReport* report) {
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

  // The model's tables (names as in model_def.h).
  const ModelTable* linear = nullptr;
  const ModelTable* factors = nullptr;
  const ModelTable* embeddings = nullptr;
  std::vector<const ModelTable*> dense;
  uint32_t k = 0;
  MlpShape shape;
  switch (model.kind) {
    case ModelKind::kLr:
    case ModelKind::kFtrl: {
      FERRY_ASSIGN_OR_RETURN(linear, model.RequireTable("weights", 1));
      break;
    }
    case ModelKind::kFm: {
      FERRY_ASSIGN_OR_RETURN(uint64_t kk, ParamU64(model, "factors"));
      k = static_cast<uint32_t>(kk);
      FERRY_ASSIGN_OR_RETURN(linear, model.RequireTable("linear", 1));
      FERRY_ASSIGN_OR_RETURN(factors, model.RequireTable("factors", k));
      break;
    }
    case ModelKind::kMlp: {
      FERRY_ASSIGN_OR_RETURN(std::string_view enc, model.RequireParam("mlp_shape"));
      FERRY_ASSIGN_OR_RETURN(shape, MlpShape::Parse(enc));
      linear = model.FindTable("wide");
      if (linear != nullptr && linear->dim() != 1) return ProtocolError("table wide is not 1 wide");
      FERRY_ASSIGN_OR_RETURN(embeddings, model.RequireTable("embeddings", shape.embed_dim));
      for (size_t l = 0; l < shape.NumLayers(); ++l) {
        FERRY_ASSIGN_OR_RETURN(const ModelTable* t,
                               model.RequireTable("dense." + std::to_string(l),
                                                  static_cast<uint32_t>(shape.LayerParamCount(l))));
        if (t->Find(0) == nullptr) {
          return ProtocolError("table dense." + std::to_string(l) + " lacks its row (key 0)");
        }
        dense.push_back(t);
      }
      break;
    }
  }
  FERRY_ASSIGN_OR_RETURN(auto reader, Reader::Open(ro));
  TableRows lin(linear), fac(factors), emb(embeddings);
  std::vector<const float*> dense_rows;
  for (const ModelTable* t : dense) dense_rows.push_back(t->Find(0));
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
    ids.Build(b, linear != nullptr);
    const uint32_t bias = linear != nullptr ? ids.bias() : kNoBias;
    if (linear != nullptr) lin.Lookup(ids.ids());
    if (factors != nullptr) fac.Lookup(ids.ids());
    if (embeddings != nullptr) emb.Lookup(ids.ids());
    probs.resize(n);
    Result<double> l = 0.0;
    switch (model.kind) {
      case ModelKind::kLr:
      case ModelKind::kFtrl:
        l = LrForward(b, ids.uidx(), bias, lin.Accessor(), probs);
        break;
      case ModelKind::kFm:
        l = FmForward(k, b, ids.uidx(), bias, lin.Accessor(), fac.Accessor(), probs);
        break;
      case ModelKind::kMlp:
        l = linear != nullptr
                ? MlpForward(shape, b, ids.uidx(), bias, lin.Accessor(), emb.Accessor(),
                             dense_rows, ws, probs)
                : MlpForward(shape, b, ids.uidx(), kNoBias, NoTable{}, emb.Accessor(),
                             dense_rows, ws, probs);
        break;
    }
    FERRY_RETURN_IF_ERROR(l.status());
    loss.AddSum(*l, n);
    FERRY_RETURN_IF_ERROR(auc.Add(probs, b.labels));
    for (float p : probs) {
      if (std::fprintf(out, "%.6g\n", static_cast<double>(p)) < 0) {
        return IoError("write the predictions", errno);
      }
    }
  }
  if (report != nullptr) {
    report->samples = loss.count();
    report->logloss = loss.Mean();
    report->auc = auc.Compute().auc;
    report->malformed = reader->stats().malformed;
  }
  return Status::Ok();
}

}  // namespace ferry::models

// Model kinds as parameter-server tables, and their default hyper-parameters (model_def.h).
#include "models/train/model_def.h"

#include <algorithm>
#include <cmath>

#include "models/data/reader.h"

namespace ferry::models {

namespace {

float Or(float v, float fallback) {
  return v >= 0.0f ? v : fallback;
}

// FTRL-Proximal as McMahan et al. run it on sparse CTR data; the per-coordinate adaptive rate
// makes it insensitive to the batch size (gradients are sums over the batch).
ps::OptimizerSpec Ftrl(const TrainOptions& o) {
  ps::OptimizerSpec s;
  s.kind = ps::Optimizer::kFtrl;
  s.alpha = Or(o.alpha, 0.1f);
  s.beta = Or(o.beta, 1.0f);
  s.l1 = Or(o.l1, 0.05f);
  s.l2 = Or(o.l2, 0.1f);
  return s;
}

ps::OptimizerSpec Adagrad(float lr, float l2) {
  ps::OptimizerSpec s;
  s.kind = ps::Optimizer::kAdagrad;
  s.learning_rate = lr;
  s.l2 = l2;
  s.initial_accumulator = 0.1f;
  return s;
}

ps::TableSpec Table(std::string name, uint32_t dim, ps::OptimizerSpec opt) {
  ps::TableSpec t;
  t.name = std::move(name);
  t.dim = dim;
  t.optimizer = opt;
  t.initial_rows = 1u << 16;
  return t;
}

// Fields of the first lines of the first train file (libffm), for the MLP's input width.
Result<uint32_t> CountFields(const TrainOptions& o) {
  if (o.format == Format::kCriteo) return 39u;
  if (o.format == Format::kLibsvm) return 1u;
  ReaderOptions ro;
  ro.format = o.format;
  ro.files = {o.train_files.front()};
  ro.hash_seed = o.hash_seed;
  ro.hash_bits = o.hash_bits;
  ro.on_malformed = [](const std::string&) {};
  FERRY_ASSIGN_OR_RETURN(auto reader, Reader::Open(ro));
  Batch b;
  FERRY_ASSIGN_OR_RETURN(size_t n, reader->Next(10000, &b));
  if (n == 0) return InvalidArgument(o.train_files.front() + " holds no sample to count fields in");
  uint32_t fields = 0;
  for (uint32_t f : b.fields) fields = std::max(fields, f + 1);
  return std::max(fields, 1u);
}

}  // namespace

Status ValidateTrainOptions(const TrainOptions& o) {
  if (o.train_files.empty()) return InvalidArgument("no training file (--train FILE...)");
  if (o.epochs == 0) return InvalidArgument("--epochs must be at least 1");
  if (o.batch_size == 0 || o.batch_size > (1u << 22)) {
    return InvalidArgument("--batch-size must be 1..4194304");
  }
  if (o.optimizer != "sgd" && o.optimizer != "adagrad") {
    return InvalidArgument("--optimizer '" + o.optimizer + "' is not sgd or adagrad");
  }
  if (o.model == ModelKind::kFm && (o.factors == 0 || o.factors > 1024)) {
    return InvalidArgument("--factors must be 1..1024");
  }
  if (o.servers == 0 || o.workers == 0) return InvalidArgument("--servers/--workers must be >= 1");
  if (!(o.init_std >= 0.0f)) return InvalidArgument("--init-std must be >= 0");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    return InvalidArgument("--checkpoint-every needs --checkpoint-dir");
  }
  if (!o.checkpoint_dir.empty() && o.consistency.kind != ps::Consistency::kBsp) {
    return InvalidArgument(
        "--checkpoint-dir needs --consistency bsp (only a bsp clock boundary "
        "is the same point on every server)");
  }
  return Status::Ok();
}

Result<ModelDef> DefineModel(const TrainOptions& o) {
  FERRY_RETURN_IF_ERROR(ValidateTrainOptions(o));
  ModelDef d;
  d.kind = o.model;
  switch (o.model) {
    case ModelKind::kLr: {
      ps::OptimizerSpec s;
      if (o.optimizer == "sgd") {
        s.kind = ps::Optimizer::kSgd;
        // Gradients are sums over the batch: scale the step by the batch size.
        s.learning_rate = Or(o.learning_rate, 0.5f / static_cast<float>(o.batch_size));
        s.l2 = Or(o.l2, 0.0f);
      } else {
        s = Adagrad(Or(o.learning_rate, 0.1f), Or(o.l2, 0.0f));
      }
      d.tables.push_back(Table("weights", 1, s));
      d.linear = 0;
      break;
    }
    case ModelKind::kFtrl:
      d.tables.push_back(Table("weights", 1, Ftrl(o)));
      d.linear = 0;
      break;
    case ModelKind::kFm: {
      d.k = o.factors;
      d.tables.push_back(Table("linear", 1, Ftrl(o)));
      // Factor step 0.01, not 0.05. Gradients are batch sums, so Adagrad's first steps are about
      // lr * sign(g) on every coordinate of every frequent value at once; those moves are
      // coherent across the fields, and the pairwise term grows with (fields * lr)^2. At 0.05,
      // asp runs on ordinary many-field data diverged: ferry-gen --format criteo --vocab 100,
      // 40k samples: test logloss 2.00 and 0.55 (lr: 0.486); 26 fields x 50 values, 50k
      // samples: 0.64 and 0.64 (lr: 0.468). At 0.01: 0.473-0.486 and 0.458-0.475, and as good or
      // better on every lr-truth set tried (100k-400k samples). It grows fm-truth interactions
      // more slowly per epoch (--truth fm, 10 fields, 400k samples: AUC 0.742 against 0.784 at
      // 0.05), so --lr 0.05 remains the flag for few-field data with strong interactions.
      ps::TableSpec f = Table("factors", o.factors, Adagrad(Or(o.learning_rate, 0.01f), 1e-5f));
      f.init.kind = ps::InitializerSpec::Kind::kNormal;
      f.init.b = o.init_std;
      f.init.seed = o.seed;
      d.tables.push_back(f);
      d.linear = 0;
      d.factors = 1;
      break;
    }
    case ModelKind::kMlp: {
      uint32_t fields = o.fields;
      if (fields == 0) {
        FERRY_ASSIGN_OR_RETURN(fields, CountFields(o));
      }
      d.shape.num_fields = fields;
      d.shape.embed_dim = o.embed_dim;
      d.shape.hidden = o.hidden;
      FERRY_RETURN_IF_ERROR(d.shape.Validate());
      if (o.wide) {
        d.tables.push_back(Table("wide", 1, Ftrl(o)));
        d.linear = 0;
      }
      ps::TableSpec e =
          Table("embeddings", o.embed_dim, Adagrad(Or(o.learning_rate, 0.05f), 1e-5f));
      e.init.kind = ps::InitializerSpec::Kind::kNormal;
      e.init.b = o.init_std;
      e.init.seed = o.seed;
      d.embeddings = static_cast<int>(d.tables.size());
      d.tables.push_back(e);
      for (size_t l = 0; l < d.shape.NumLayers(); ++l) {
        ps::OptimizerSpec adam;
        adam.kind = ps::Optimizer::kAdam;
        adam.learning_rate = o.dense_learning_rate;
        ps::TableSpec t = Table("dense." + std::to_string(l),
                                static_cast<uint32_t>(d.shape.LayerParamCount(l)), adam);
        t.initial_rows = 64;
        // He-uniform for the ReLU layers, Glorot-uniform for the output (biases start small
        // too: the initializer is per row, and each layer is one row).
        const double in = static_cast<double>(d.shape.LayerIn(l));
        const double out = static_cast<double>(d.shape.LayerOut(l));
        const double bound =
            l + 1 < d.shape.NumLayers() ? std::sqrt(6.0 / in) : std::sqrt(6.0 / (in + out));
        t.init.kind = ps::InitializerSpec::Kind::kUniform;
        t.init.a = static_cast<float>(-bound);
        t.init.b = static_cast<float>(bound);
        t.init.seed = o.seed + 1000 + l;
        d.dense.push_back(static_cast<int>(d.tables.size()));
        d.tables.push_back(t);
      }
      break;
    }
  }
  return d;
}

ModelParams DescribeModel(const TrainOptions& o, const ModelDef& def) {
  ModelParams p;
  p["format"] = std::string(FormatName(o.format));
  p["hash_seed"] = std::to_string(o.hash_seed);
  p["hash_bits"] = std::to_string(o.hash_bits);
  p["bias_id"] = std::to_string(kBiasId);
  for (const ps::TableSpec& t : def.tables) {
    const ps::OptimizerSpec& s = t.optimizer;
    std::string d = std::string(ps::OptimizerName(s.kind));
    if (s.kind == ps::Optimizer::kFtrl) {
      d += " alpha=" + std::to_string(s.alpha) + " beta=" + std::to_string(s.beta) +
           " l1=" + std::to_string(s.l1) + " l2=" + std::to_string(s.l2);
    } else {
      d += " lr=" + std::to_string(s.learning_rate) + " l2=" + std::to_string(s.l2);
    }
    p["optimizer." + t.name] = d;
  }
  if (def.kind == ModelKind::kFm) p["factors"] = std::to_string(def.k);
  if (def.kind == ModelKind::kMlp) {
    p["mlp_shape"] = def.shape.Encode();
    p["wide"] = def.linear >= 0 ? "1" : "0";
  }
  return p;
}

Result<ps::JobSpec> MakeJob(const TrainOptions& o, const ModelDef& def) {
  ps::JobSpec job;
  job.tables = def.tables;
  job.servers = o.servers;
  job.workers = o.workers;
  job.replicas = o.replicas;
  job.peer_timeout = ps::Millis(static_cast<int64_t>(o.peer_timeout_s * 1000));
  job.transport = o.transport;
  job.consistency = o.consistency;
  job.secret = o.secret;
  job.fp16_push = o.fp16_push;
  job.push_filter = o.push_filter;
  job.restore_dir = o.resume;
  job.checkpoint_dir = o.checkpoint_dir;
  if (!o.checkpoint_dir.empty()) {
    job.checkpoint_every =
        o.checkpoint_every > 0 ? o.checkpoint_every : TrainOptions::kDefaultCheckpointEvery;
  }
  // Requests of a batch: its unique ids (at most every feature occurrence) fit one request.
  job.max_keys_per_request = 1u << 16;
  uint64_t widest = 1;
  for (const ps::TableSpec& t : def.tables) widest = std::max<uint64_t>(widest, t.dim);
  // The arena holds two batches' rows per table (the next batch is pulled while this one
  // computes); the send buffer their keys and gradients. Generous: it is virtual memory.
  job.arena_bytes = std::max<uint64_t>(64ull << 20, widest * 4 * 4 + (1u << 20));
  job.send_bytes = job.arena_bytes;
  job.staging_bytes = std::max<uint64_t>(16ull << 20, widest * 4 * 4 + (1u << 20));
  FERRY_RETURN_IF_ERROR(ps::ValidateJob(job));
  return job;
}

}  // namespace ferry::models

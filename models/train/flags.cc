#include "models/train/flags.h"

#include <CLI/CLI.hpp>
#include <charconv>

#include "models/train/feature_flags.h"

namespace ferry::models {

void AddTrainFlags(CLI::App& app, TrainOptions* o, TrainFlagText* t) {
  app.add_option("--model", t->model, "lr, ftrl, fm, ffm, mlp or deepfm")
      ->check(CLI::IsMember({"lr", "ftrl", "fm", "ffm", "mlp", "deepfm"}))
      ->capture_default_str();
  app.add_option("--train", o->train_files,
                 "training files (plain or gzip), or - (stdin) or a FIFO: a stream");
  app.add_option("--test", o->test_files, "held-out files: logloss and exact AUC at the end");
  app.add_option("--format", t->format, "libsvm, criteo or libffm")
      ->check(CLI::IsMember({"libsvm", "svmlight", "criteo", "libffm"}))
      ->capture_default_str();
  app.add_option("--validation", o->validation_files,
                 "held-out files for early stopping (default: a fraction of the training lines)");
  app.add_option("--epochs", t->epochs,
                 "passes over the training files, or auto: while the held-out logloss improves")
      ->capture_default_str();
  app.add_option("--batch-size", t->batch_size,
                 "samples per minibatch per worker, or auto: from the data size")
      ->capture_default_str();
  app.add_option("--servers", o->servers, "servers of the local cluster (or of the launcher's job)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--server-threads", o->server_threads,
                 "shard servers per server, each on its own thread (and core) with its own\n"
                 "share of the keys, transport and progress")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--replicas", o->replicas,
                 "copies of each server's shard (chain replication): with 2 or more a server\n"
                 "that dies fails over to its replicas while training goes on (1: off)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--spares", o->spares,
                 "with --replicas 2 or more: this many more server ranks that hold nothing at\n"
                 "the start; when a server dies one of them copies its shards from their\n"
                 "replicas while training goes on, so every shard is back to --replicas copies")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_flag("--elastic", o->elastic,
               "an elastic job: a server rank may leave while training goes on (SIGTERM to\n"
               "it: its shards move to the other servers, then it exits 0); with --shards 0\n"
               "the keys are cut into 4 shards a server, so a leave spreads its rows evenly");
  app.add_option("--join-slots", o->join_slots,
                 "with --elastic: this many more server ranks that the job does not wait for;\n"
                 "each joins the running job when started with --join J (and FERRY_COORDINATOR\n"
                 "naming the job's coordinator, which the job's launch prints), and takes its\n"
                 "share of the shards while training goes on")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--join", o->join,
                 "start only join slot J's server rank, which joins the running job named by\n"
                 "FERRY_COORDINATOR (the job's other flags the same as its own launch's)")
      ->check(CLI::Range(0, 63));
  app.add_option("--worker-join-slots", o->worker_join_slots,
                 "with --elastic: this many more worker ranks that the job does not wait for;\n"
                 "each joins the running job when started with --join-worker J (and\n"
                 "FERRY_COORDINATOR). The training data is then dealt to the workers piece by\n"
                 "piece as they ask, so a joining worker takes a share of what is left, and a\n"
                 "worker sent SIGTERM leaves once it read the piece it holds (worker 0 stays:\n"
                 "it writes the model). Needs --epochs N")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--join-worker", o->join_worker,
                 "start only worker join slot J's rank, which joins the running job named by\n"
                 "FERRY_COORDINATOR (the job's other flags the same as its own launch's)")
      ->check(CLI::Range(0, 63));
  app.add_option("--shards", o->shards,
                 "parts the keys are cut into, spread over the shard servers (0: one per shard\n"
                 "server); a checkpoint restores into any count")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--backup-workers", o->backup_workers,
                 "bsp: a batch's clock completes once all workers but this many pushed for it;\n"
                 "the late workers' pushes for it are dropped and they skip to the job's clock\n"
                 "(stragglers cost no time; 0: every worker, every batch)")
      ->capture_default_str();
  app.add_option("--peer-timeout", o->peer_timeout_s,
                 "seconds: a dead or silent rank is reported to every other within it")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--workers", o->workers, "workers of the local cluster")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--transport", o->transport, "auto, verbs, ucx or tcp")
      ->check(CLI::IsMember({"auto", "verbs", "ucx", "tcp"}))
      ->capture_default_str();
  app.add_option("--consistency", t->consistency, "bsp, ssp:S or asp")->capture_default_str();
  app.add_option("--model-out", o->model_out, "write the trained model here");
  app.add_option("--model-format", t->model_format, "binary or text")
      ->check(CLI::IsMember({"binary", "text"}))
      ->capture_default_str();
  app.add_option("--metrics-json", o->metrics_json,
                 "JSON lines: one per evaluation, the last has the final test logloss and auc");
  app.add_option("--eval-every", o->eval_every,
                 "batches between streaming evaluations on the test file (0: only at the end)")
      ->capture_default_str();
  app.add_option("--eval-samples", o->eval_samples, "test samples a streaming evaluation reads")
      ->capture_default_str();
  auto* stopping = "When training stops (--epochs auto)";
  app.add_option("--validation-fraction", o->validation_fraction,
                 "share of the training lines held out (by a hash of the line) when there is no\n"
                 "--validation file (default with --epochs auto: 0.2 before a refit, else 0.1)")
      ->check(CLI::Range(0.0, 0.9))
      ->group(stopping);
  app.add_option("--max-epochs", o->max_epochs,
                 "cap on the automatic passes (default: from the data size, at most 100)")
      ->check(CLI::PositiveNumber)
      ->group(stopping);
  app.add_option("--patience", o->patience,
                 "stop after this many passes without an improvement of the held-out logloss\n"
                 "(default: from the data size, 2 to 10)")
      ->check(CLI::PositiveNumber)
      ->group(stopping);
  app.add_option("--min-improvement", o->min_improvement,
                 "relative gain of the held-out logloss that counts as an improvement")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str()
      ->group(stopping);
  app.add_option("--refit", t->refit,
                 "after automatic passes on held-out training lines, train a fresh model on all\n"
                 "the lines for the best pass count: auto (small data, no checkpoints), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str()
      ->group(stopping);
  app.add_flag("!--no-calibrate", o->calibrate,
               "do not fit the logit offset that calibrates the model on the held-out data")
      ->group(stopping);
  auto* hyper = "Hyper-parameters (defaults work on ordinary sparse data)";
  app.add_option("--optimizer", o->optimizer, "lr model: sgd or adagrad")
      ->check(CLI::IsMember({"sgd", "adagrad"}))
      ->capture_default_str()
      ->group(hyper);
  app.add_option("--lr", o->learning_rate,
                 "learning rate: lr model (sgd, adagrad; default 0.1 per unit of feature value),\n"
                 "factors and embeddings (fm 0.04, ffm 0.08; mlp 0.05; deepfm 0.02)")
      ->group(hyper);
  app.add_option("--alpha", o->alpha, "FTRL alpha (default 0.4 per unit of feature value)")
      ->group(hyper);
  app.add_option("--beta", o->beta, "FTRL beta (default 10)")->group(hyper);
  app.add_option("--l1", o->l1, "L1 regularisation (FTRL; default 0.05 per unit of feature value)")
      ->group(hyper);
  app.add_option(
         "--l2", o->l2,
         "L2 regularisation of the linear weights (default: FTRL 1 per unit of value, lr 0)")
      ->group(hyper);
  app.add_option("--initial-accumulator", o->initial_accumulator,
                 "Adagrad: the squared-gradient sum a new row starts with (larger: more cautious\n"
                 "first steps on rare features; default: lr 30; fm, ffm 10; mlp, deepfm 0.1)")
      ->check(CLI::NonNegativeNumber)
      ->group(hyper);
  app.add_option("--factor-l2", o->factor_l2,
                 "L2 of factors and embeddings (Adagrad weight decay; default fm 0.01, ffm 1e-4,\n"
                 "mlp and deepfm 1e-5)")
      ->group(hyper);
  app.add_option("--factors", o->factors, "FM / FFM factors k (default: fm 8, ffm 4)")
      ->group(hyper);
  app.add_option("--embed-dim", o->embed_dim, "MLP / DeepFM embedding width")
      ->capture_default_str()
      ->group(hyper);
  app.add_option("--hidden", t->hidden, "MLP hidden layer widths, e.g. 64,32")
      ->capture_default_str()
      ->group(hyper);
  app.add_option("--fields", o->fields, "fields of ffm, mlp and deepfm (0: from the data)")
      ->group(hyper);
  app.add_flag("!--no-wide", o->wide, "MLP without the linear (wide) part")->group(hyper);
  app.add_option("--dense-lr", o->dense_learning_rate, "MLP: Adam step on the dense layers")
      ->capture_default_str()
      ->group(hyper);
  app.add_option(
         "--init-std", o->init_std,
         "stddev of the factor / embedding initialisation (default fm, ffm 0.03; mlp, deepfm 0.01)")
      ->check(CLI::NonNegativeNumber)
      ->group(hyper);
  app.add_option("--seed", o->seed, "initialisation seed")->capture_default_str()->group(hyper);
  auto* data = "Data";
  app.add_option("--hash-bits", o->hash_bits, "keep this many bits of the feature hash (0: 64)")
      ->group(data);
  app.add_option("--hash-seed", o->hash_seed, "feature hash seed")->group(data);
  app.add_option("--field-map", o->field_map,
                 "libsvm: file of 'FIRST-LAST FIELD' lines giving each feature index a field\n"
                 "(for ffm, mlp and deepfm on libsvm data)")
      ->group(data);
  app.add_option("--threads", o->parse_threads, "parsing threads per worker")
      ->check(CLI::Range(1, 64))
      ->capture_default_str()
      ->group(data);
  app.add_flag("--strict", o->strict, "a malformed line is fatal (default: report, skip, count)")
      ->group(data);
  app.add_option("--progress", t->progress, "auto (a bar on a terminal), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  app.add_flag("-q,--quiet", o->quiet, "only errors and the final summary");
  app.add_flag("--fp16-push", o->fp16_push, "pushes ship gradients as fp16 (halves push bytes)")
      ->group(hyper);
  app.add_option("--push-filter", o->push_filter,
                 "significance filter: drop gradient rows whose largest |g| is below this (0: off)")
      ->check(CLI::Range(0.0f, 1e30f))
      ->group(hyper);
  auto* ckpt = "Checkpoints";
  app.add_option("--checkpoint-dir", o->checkpoint_dir,
                 "write a consistent checkpoint here periodically (bsp; DIR/clock-C, DIR/LATEST)")
      ->group(ckpt);
  app.add_option("--checkpoint-every", o->checkpoint_every,
                 "batches between checkpoints (default 1000 with --checkpoint-dir)")
      ->group(ckpt);
  app.add_option("--resume", o->resume,
                 "restore from this checkpoint (or the newest in a --checkpoint-dir) and go on "
                 "where it was taken (a stream: --follow DIR or FILE under bsp, see --follow)")
      ->group(ckpt);
  AddStreamFlags(app, &o->stream);
  AddFeatureFlags(app, &o->features);
  AddExportFlags(app, &o->exports);
  app.add_option("--secret", o->secret, "shared secret every connection of the job proves")
      ->group("");
}

namespace {

// "auto" -> 0, else a positive integer.
Status AutoOrCount(const std::string& text, const char* flag, uint32_t* out) {
  if (text == "auto") {
    *out = 0;
    return Status::Ok();
  }
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v == 0) {
    return InvalidArgument(std::string(flag) + " '" + text + "' is not auto or a positive number");
  }
  *out = v;
  return Status::Ok();
}

}  // namespace

Status FinalizeTrainFlags(const TrainFlagText& t, TrainOptions* o) {
  if (!o->stream.follow.empty()) {
    // The followed directory or file stands where the training input goes (a stream: the
    // launcher deals it; auto_settings.h StreamTraining).
    if (!o->train_files.empty()) {
      return InvalidArgument("--follow " + o->stream.follow + " replaces --train: give one");
    }
    o->train_files = {o->stream.follow};
  }
  FERRY_RETURN_IF_ERROR(AutoOrCount(t.epochs, "--epochs", &o->epochs));
  o->refit = t.refit == "on"    ? TrainOptions::Refit::kOn
             : t.refit == "off" ? TrainOptions::Refit::kOff
                                : TrainOptions::Refit::kAuto;
  FERRY_RETURN_IF_ERROR(AutoOrCount(t.batch_size, "--batch-size", &o->batch_size));
  FERRY_ASSIGN_OR_RETURN(o->model, ParseModelKind(t.model));
  FERRY_ASSIGN_OR_RETURN(o->format, ParseFormat(t.format));
  auto c = ps::ParseConsistency(t.consistency);
  if (!c.ok()) return c.status().Annotate("--consistency");
  o->consistency = *c;
  o->model_format = t.model_format == "text" ? ModelFormat::kText : ModelFormat::kBinary;
  o->progress = t.progress == "always"  ? TrainOptions::Progress::kAlways
                : t.progress == "never" ? TrainOptions::Progress::kNever
                                        : TrainOptions::Progress::kAuto;
  o->hidden.clear();
  std::string_view h = t.hidden;
  while (!h.empty()) {
    const size_t comma = h.find(',');
    const std::string_view item = h.substr(0, comma);
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v == 0) {
      return InvalidArgument("--hidden '" + t.hidden + "' is not a comma-separated list of widths");
    }
    o->hidden.push_back(v);
    h = comma == std::string_view::npos ? std::string_view() : h.substr(comma + 1);
  }
  return ValidateTrainOptions(*o);
}

}  // namespace ferry::models

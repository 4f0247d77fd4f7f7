// The data-size rule and the estimate it is applied to (auto_settings.h).
#include "models/train/auto_settings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "models/data/input.h"
#include "models/data/reader.h"

namespace ferry::models {

namespace {

// Uncompressed bytes of one input. A gzip member ends with ISIZE, its uncompressed size mod
// 2^32: for a file of several members or of 4 GiB and more that is only the remainder, so the
// multiple of 2^32 that makes the ratio to the compressed size plausible (at least 1:1) is
// added. Good enough for a rule that works in powers of two.
Result<uint64_t> UncompressedBytes(const InputFile& in) {
  if (!in.gzip) return in.size;
  if (in.size < 18) return in.size;
  Fd fd(::open(in.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return IoError("open " + in.path, errno);
  uint8_t tail[4];
  if (::pread(fd.get(), tail, 4, static_cast<off_t>(in.size - 4)) != 4) {
    return IoError("read the gzip trailer of " + in.path, errno);
  }
  uint64_t isize = uint64_t{tail[0]} | uint64_t{tail[1]} << 8 | uint64_t{tail[2]} << 16 |
                   uint64_t{tail[3]} << 24;
  while (isize < in.size) isize += uint64_t{1} << 32;
  return isize;
}

uint32_t NearestPowerOfTwo(double x) {
  if (!(x > 1.0)) return 1;
  const double e = std::round(std::log2(x));
  return static_cast<uint32_t>(std::min(std::exp2(e), 2147483648.0));
}

}  // namespace

Result<SampleEstimate> EstimateTrainingSamples(const TrainOptions& o) {
  ReaderOptions ro;
  ro.format = o.format;
  ro.files = o.train_files;
  ro.hash_seed = o.hash_seed;
  ro.hash_bits = o.hash_bits;
  // The workers report malformed lines; the probe keeps the first for a "no sample" error.
  std::string first_malformed;
  ro.on_malformed = [&first_malformed](const std::string& m) {
    if (first_malformed.empty()) first_malformed = m;
  };
  FERRY_ASSIGN_OR_RETURN(auto reader, Reader::Open(ro));
  Batch b;
  uint64_t probed = 0;
  bool exact = false;
  double squares = 0;
  uint64_t values = 0;
  while (probed < kProbeSamples) {
    b.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t n, reader->Next(kProbeSamples - probed, &b));
    if (n == 0) {
      exact = true;
      break;
    }
    probed += n;
    for (float v : b.values) squares += static_cast<double>(v) * v;
    values += b.values.size();
  }
  if (!exact) {
    // One sample more tells whether the probe happened to end exactly at the end.
    b.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t n, reader->Next(1, &b));
    exact = n == 0;
    probed += n;
  }
  SampleEstimate e;
  e.exact = exact;
  if (values > 0 && squares > 0) e.value_rms = std::sqrt(squares / static_cast<double>(values));
  if (exact) {
    if (probed == 0) {
      return NoSampleError("training sample", o.train_files, reader->stats(), first_malformed);
    }
    e.samples = probed;
    return e;
  }
  uint64_t total = 0;
  for (const std::string& path : o.train_files) {
    FERRY_ASSIGN_OR_RETURN(InputFile in, ProbeInput(path));
    FERRY_ASSIGN_OR_RETURN(uint64_t bytes, UncompressedBytes(in));
    total += bytes;
  }
  const ReaderStats& s = reader->stats();
  const double per_byte =
      static_cast<double>(probed) / static_cast<double>(std::max<uint64_t>(s.bytes, 1));
  e.samples =
      std::max<uint64_t>(probed, static_cast<uint64_t>(per_byte * static_cast<double>(total)));
  return e;
}

AutoRule AutoRuleFor(ModelKind kind, uint64_t train_samples, double value_rms) {
  (void)kind;  // one rule for every model so far: the sweep found no model that wants another
  const double n = static_cast<double>(std::max<uint64_t>(train_samples, 1));
  AutoRule r;
  r.batch_size = std::clamp(NearestPowerOfTwo(n / kUpdatesPerEpoch), kMinBatch, kMaxBatch);
  r.max_epochs = static_cast<uint32_t>(
      std::clamp(std::ceil(kSampleBudget / n), 1.0, static_cast<double>(kMaxEpochs)));
  r.patience = static_cast<uint32_t>(std::clamp(std::ceil(kPatienceSamples / n),
                                                static_cast<double>(kMinPatience),
                                                static_cast<double>(kMaxPatience)));
  r.step_scale = value_rms > 0 ? std::clamp(1.0 / value_rms, 1e-3, 1e3) : 1.0;
  return r;
}

bool CanRefit(const TrainOptions& o) {
  return o.epochs == 0 && o.validation_files.empty() && o.validation_fraction > 0 &&
         o.checkpoint_dir.empty() && o.resume.empty();
}

bool StreamTraining(const TrainOptions& o) {
  return !o.stream.follow.empty() ||
         (o.train_files.size() == 1 && IsStreamInput(o.train_files.front()));
}

bool DealtTraining(const TrainOptions& o) {
  return o.worker_join_slots > 0 && !StreamTraining(o);
}

Status CheckDealtTraining(const TrainOptions& o) {
  if (o.worker_join_slots == 0) {
    if (o.join_worker >= 0) {
      return InvalidArgument("--join-worker " + std::to_string(o.join_worker) +
                             " needs the job's --worker-join-slots");
    }
    return Status::Ok();
  }
  const auto refuse = [](const std::string& what) {
    return InvalidArgument("--worker-join-slots: the workers change while the job runs, so " +
                           what);
  };
  if (o.join_worker >= static_cast<int>(o.worker_join_slots)) {
    return InvalidArgument("--join-worker " + std::to_string(o.join_worker) +
                           " is out of range: the job has " + std::to_string(o.worker_join_slots) +
                           " (--worker-join-slots)");
  }
  if (StreamTraining(o)) {
    // Rank 0 deals the stream (tools/train/stream_ranks.h): a joining worker connects to it, a
    // leaving one asks it to stop.
    if (LockstepStream(o)) {
      return refuse(
          "a followed stream cannot be read in lockstep (--consistency bsp: each worker's files "
          "are fixed at the start): use --consistency asp, and the stream is dealt");
    }
    if (!o.exports.dir.empty()) return refuse("no --export-dir (its versions count windows)");
    if (o.backup_workers > 0) return refuse("no --backup-workers");
    return Status::Ok();
  }
  if (o.epochs == 0 || !o.validation_files.empty() || o.validation_fraction > 0) {
    return refuse(
        "nothing is decided between passes: give --epochs N (no held-out data, no early "
        "stopping)");
  }
  if (!o.checkpoint_dir.empty() || o.checkpoint_every > 0 || !o.resume.empty()) {
    return refuse(
        "no worker has a fixed place in the data to checkpoint or resume (no "
        "--checkpoint-dir, --checkpoint-every or --resume)");
  }
  if (!o.exports.dir.empty()) return refuse("no --export-dir (its versions count clocks)");
  if (o.backup_workers > 0) return refuse("no --backup-workers");
  return Status::Ok();
}

bool LockstepStream(const TrainOptions& o) {
  return StreamTraining(o) && !o.stream.follow.empty() &&
         o.consistency.kind == ps::Consistency::kBsp;
}

bool StreamStopOnStdin() {
  const char* v = std::getenv(kStreamDealtEnv);
  return v != nullptr && std::string_view(v) == kStreamStopOnStdin;
}

bool StreamFromLauncher() {
  const char* v = std::getenv(kStreamDealtEnv);
  return v != nullptr && std::string_view(v) == kStreamRankZero;
}

bool StreamDealtHere() {
  const char* v = std::getenv(kStreamDealtEnv);
  return v != nullptr && std::string_view(v) == "dealt";
}

namespace {

Result<TrainOptions> ResolveStreamSettings(const TrainOptions& o) {
  TrainOptions r = o;
  const std::string in = o.stream.follow.empty()
                             ? "--train " + InputName(o.train_files.front()) + " is a stream"
                             : "--follow " + o.stream.follow + " is followed as a stream";
  if (r.epochs > 1) return InvalidArgument(in + ": it is read once (--epochs 1 or auto)");
  if (!r.validation_files.empty() || r.validation_fraction > 0) {
    return InvalidArgument(in + ": it has no held-out data (--validation, --validation-fraction);" +
                           " each sample is scored before it is trained on instead (--window)");
  }
  if (r.refit == TrainOptions::Refit::kOn) return InvalidArgument(in + ": --refit needs files");
  const bool bsp = r.consistency.kind == ps::Consistency::kBsp;
  // --follow DIR or FILE: every worker can read it again (lockstep, trainer_lockstep.cc).
  const bool followed = !r.stream.follow.empty();
  if (r.consistency.kind != ps::Consistency::kAsp && !(bsp && followed)) {
    return InvalidArgument(
        in + ": it trains asp (--consistency " + ps::ConsistencyName(r.consistency) +
        (bsp ? " works with --follow DIR or FILE, which every worker can read)"
             : " needs every worker's step count, which a stream does not have)"));
  }
  if ((!r.checkpoint_dir.empty() || !r.resume.empty()) && !bsp) {
    return InvalidArgument(in + ": --checkpoint-dir and --resume need --consistency bsp and " +
                           "--follow DIR or FILE (which can be read again from a checkpoint's " +
                           "clock); a pipe is read once, so its job resumes at most once");
  }
  if (bsp && r.stream.max_samples > 0) {
    return InvalidArgument(in + " in lockstep (--consistency bsp): --max-samples is not " +
                           "supported (each worker reads its own files); end with --idle-exit");
  }
  if (bsp && r.stream.window_seconds > 0) {
    return InvalidArgument(
        in + " in lockstep (--consistency bsp): --window-seconds is not " +
        "supported (windows close on the same clock on every worker: " + "--window N)");
  }
  const bool needs_fields =
      r.model == ModelKind::kFfm || r.model == ModelKind::kMlp || r.model == ModelKind::kDeepFm;
  if (r.format == Format::kLibffm && needs_fields && r.fields == 0 && r.field_map.empty()) {
    return InvalidArgument(in + ": give --fields (counting them would read the stream)");
  }
  r.epochs = r.max_epochs = 1;
  r.validation_fraction = 0;
  r.refit = TrainOptions::Refit::kOff;
  r.calibrate = false;
  r.data_samples = 0;
  r.step_scale = 1.0;
  if (r.batch_size == 0) r.batch_size = kMaxBatch;
  if (r.patience == 0) r.patience = kMinPatience;
  return r;
}

}  // namespace

Result<TrainOptions> ResolveAutoSettings(const TrainOptions& o) {
  for (const std::string& f : o.train_files) {
    if (o.train_files.size() > 1 && IsStreamInput(f)) {
      return InvalidArgument("--train " + InputName(f) +
                             " is a stream: it must be the only training input");
    }
  }
  if (StreamTraining(o)) return ResolveStreamSettings(o);
  TrainOptions r = o;
  if (r.epochs != 0) r.max_epochs = r.epochs;
  FERRY_ASSIGN_OR_RETURN(SampleEstimate e, EstimateTrainingSamples(r));
  const auto train_after = [&](double fraction) {
    return static_cast<uint64_t>(std::ceil(static_cast<double>(e.samples) * (1.0 - fraction)));
  };
  const bool automatic_fraction = r.validation_fraction < 0;
  if (automatic_fraction) {
    // Held back by default only when automatic passes need it and no --validation file does.
    r.validation_fraction = r.epochs == 0 && r.validation_files.empty() ? kValidationFraction : 0.0;
  }
  if (r.refit == TrainOptions::Refit::kAuto) {
    r.refit = CanRefit(r) && train_after(kValidationFraction) <= kRefitMaxSamples
                  ? TrainOptions::Refit::kOn
                  : TrainOptions::Refit::kOff;
  }
  if (automatic_fraction && r.validation_fraction > 0 && r.refit == TrainOptions::Refit::kOn) {
    // A job that refits trains its final model on the held-out lines too: a larger fraction
    // then only makes the choice of the pass count more reliable.
    r.validation_fraction = kRefitValidationFraction;
  }
  const uint64_t train = train_after(r.validation_fraction);
  r.data_samples = train;
  const AutoRule rule = AutoRuleFor(r.model, train, e.value_rms);
  r.step_scale = rule.step_scale;
  if (r.batch_size == 0) r.batch_size = rule.batch_size;
  if (r.max_epochs == 0) r.max_epochs = rule.max_epochs;
  if (r.patience == 0) r.patience = rule.patience;
  return r;
}

}  // namespace ferry::models

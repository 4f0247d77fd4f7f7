// Worker 0's exports (worker_loop.h): the model file at the end (--model-out) and the export
// directory (--export-dir): the model published as versions while it trains
// (models/io/export_writer.h), and once more at the end, from the same checkpoint as the file.
//
// When a version is taken, and why it is safe there:
//   bsp, ssp  a collective at a clock boundary (MaybeExportAtClock), decided alike by every
//        worker: by samples from the clock number, by time from worker 0's clock through a
//        one-flag all-gather each clock. Worker 0 checkpoints while the others wait in a Barrier.
//        Under bsp no push of the next clock is applied before worker 0 clocks again, but the
//        others' pulls of their next batch would create rows (with their initial values): the
//        barrier keeps them out, so the version is the model at the boundary exactly (the
//        version a job that ended there exports).
//   asp  after a batch of worker 0 (TrainPipelined) or a window's round (the stream loop),
//        worker 0 alone (MaybeExport): the others keep pushing; the version is whatever the
//        servers hold when they get the command.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "models/eval/calibration.h"
#include "models/train/auto_settings.h"
#include "models/train/export.h"
#include "models/train/gather_sums.h"
#include "models/train/worker_loop.h"

namespace ferry::models {

Status WorkerLoop::OpenExportDir() {
  if (!lead_ || o_.exports.dir.empty()) return Status::Ok();
  ExportDirOptions x;
  x.base_every = o_.exports.base_every;
  x.keep_bases = o_.exports.keep_bases;
  auto w = ExportDirWriter::Open(o_.exports.dir, x);
  if (!w.ok()) return w.status().Annotate("--export-dir " + o_.exports.dir);
  exporter_.emplace(std::move(*w));
  last_export_ = TrainClock::now();
  next_export_samples_ = o_.exports.every_samples;
  return Status::Ok();
}

uint64_t WorkerLoop::ExportSamples() const {
  // A stream: the windows' merged count; a pass: worker 0's own, scaled by the workers.
  return StreamTraining(o_) ? window_total_ : samples_ * w_.num_workers();
}

Status WorkerLoop::MaybeExport() {
  if (!exporter_ || refitting_) return Status::Ok();
  const ExportOptions& x = o_.exports;
  const uint64_t samples = ExportSamples();
  const bool by_samples = x.every_samples > 0 && samples >= next_export_samples_;
  const bool by_time = x.every_seconds > 0 && SecondsSince(last_export_) >= x.every_seconds;
  if (!by_samples && !by_time) return Status::Ok();
  while (x.every_samples > 0 && next_export_samples_ <= samples) {
    next_export_samples_ += x.every_samples;
  }
  return TakeVersion("");
}

Status WorkerLoop::MaybeExportAtClock(uint64_t clock) {
  if (o_.exports.dir.empty() || refitting_) return Status::Ok();
  const ExportOptions& x = o_.exports;
  bool due = false;
  if (x.every_samples > 0) {
    // Every worker counts the same clocks: --export-every N is every N / (batch x workers) of them.
    const uint64_t per_clock = uint64_t{o_.batch_size} * w_.num_workers();
    due = clock % std::max<uint64_t>(1, (x.every_samples + per_clock - 1) / per_clock) == 0;
  }
  if (x.every_seconds > 0) {
    const uint64_t mine = lead_ && SecondsSince(last_export_) >= x.every_seconds ? 1 : 0;
    FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> all,
                           GatherSums(w_, mine, /*to_all=*/true, "bad export flag from a worker"));
    due = due || all.front() != 0;
  }
  if (!due) return Status::Ok();
  if (lead_) FERRY_RETURN_IF_ERROR(TakeVersion(""));
  return w_.Barrier();
}

ModelParams WorkerLoop::ExportParams() const {
  ModelParams params = DescribeModel(o_, def_);
  if (offset_ != 0) params[std::string(kLogitOffsetParam)] = FormatOffset(offset_);
  return params;
}

Status WorkerLoop::TakeVersion(const std::string& from_dir) {
  const TrainClock::time_point t0 = TrainClock::now();
  const ModelParams params = ExportParams();
  std::string dir = from_dir;
  Status s;
  if (dir.empty()) {
    // The servers write their shards into the export directory (a file system they all reach,
    // as for --model-out); the shards go once the version is written.
    dir = o_.exports.dir + "/.shards." + std::to_string(getpid());
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("create " + dir + " for an export", errno);
    }
    s = w_.Checkpoint(dir);
  }
  Result<ExportEntry> e = Internal("no checkpoint");
  if (s.ok()) {
    auto model = CheckpointModel(dir, w_.job(), def_, params);
    e = model.ok() ? exporter_->Publish(*model, ExportSamples())
                   : Result<ExportEntry>(model.status());
  } else {
    e = s;
  }
  if (from_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  if (!e.ok()) return e.status().Annotate("export a version into " + o_.exports.dir);
  last_export_ = TrainClock::now();
  const double ms = 1e3 * std::chrono::duration<double>(last_export_ - t0).count();
  export_ms_ += ms;
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(o_.exports.dir + "/" + e->file, ec);
  Log("ferry-train: exported version " + std::to_string(e->version) + " (" +
      (e->base ? "base" : "delta") + ", " + std::to_string(ec ? 0 : bytes) + " bytes, " +
      Figure("%.1f", ms) + " ms) to " + o_.exports.dir + "/" + e->file);
  return Status::Ok();
}

Status WorkerLoop::ExportKept(bool current) {
  if (!o_.model_out.empty() || exporter_) FERRY_RETURN_IF_ERROR(Export(current ? "" : kept_.dir));
  if (!current && o_.checkpoint_dir.empty() && !kept_.dir.empty() && kept_.ours) {
    std::error_code ec;
    std::filesystem::remove_all(kept_.dir, ec);
  }
  return Status::Ok();
}

Status WorkerLoop::Export(const std::string& from_dir) {
  const ModelParams params = ExportParams();
  if (!from_dir.empty()) {
    Status s = o_.model_out.empty() ? Status::Ok()
                                    : ExportCheckpoint(from_dir, w_.job(), def_, params,
                                                       o_.model_out, o_.model_format);
    if (!s.ok()) return s.Annotate("export the kept model to " + o_.model_out);
    return exporter_ ? TakeVersion(from_dir) : Status::Ok();
  }
  // The servers write their shards next to the model file (a file system they all reach), this
  // worker turns them into the model (and the export directory's last version), and the shards
  // go.
  const std::string dir = (o_.model_out.empty() ? o_.exports.dir + "/" : o_.model_out) +
                          ".shards." + std::to_string(getpid());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("create " + dir + " for the model export", errno);
  }
  Status s = w_.Checkpoint(dir);
  if (s.ok() && !o_.model_out.empty()) {
    s = ExportCheckpoint(dir, w_.job(), def_, params, o_.model_out, o_.model_format);
    if (!s.ok()) s = s.Annotate("export the model to " + o_.model_out);
  }
  if (s.ok() && exporter_) s = TakeVersion(dir);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return s;
}

}  // namespace ferry::models

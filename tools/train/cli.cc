// ferry-train's and ferry-predict's runs (see cli.h).
#include "tools/train/cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "models/io/export_dir.h"
#include "models/io/model_reader.h"
#include "models/train/auto_settings.h"
#include "models/train/flags.h"
#include "models/train/model_def.h"
#include "models/train/predict.h"
#include "ps/launch/launch_env.h"
#include "ps/launch/local_cluster.h"
#include "ps/node.h"
#include "tools/common/command.h"
#include "tools/common/output.h"
#include "tools/train/stream_launch.h"
#include "tools/train/stream_ranks.h"

namespace ferry::train {
namespace {

using tools::Printf;

// "ferry-train: <who><status>"; a failed job exits 1.
int TrainFailed(const std::string& who, const Status& s) {
  std::fprintf(stderr, "ferry-train: %s%s\n", who.c_str(), s.ToString().c_str());
  return 1;
}

std::string SelfPath(const char* argv0) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return argv0;
  buf[n] = '\0';
  return buf;
}

// The embedded default: a local cluster of copies of this program. Unreadable data or a model
// that cannot be defined fails here, once, before any rank starts.
int RunAsLocalCluster(const models::TrainOptions& o, int argc, char** argv) {
  auto resolved = models::ResolveAutoSettings(o);
  if (!resolved.ok()) return TrainFailed("", resolved.status());
  auto def = models::DefineModel(*resolved);
  if (!def.ok()) return TrainFailed("", def.status());
  // The job's own checks (ps::ValidateJob: flags that do not go together) too.
  if (auto job = models::MakeJob(*resolved, *def); !job.ok()) return TrainFailed("", job.status());
  ps::LocalClusterOptions lc;
  lc.argv.push_back(SelfPath(argv[0]));
  for (int i = 1; i < argc; ++i) lc.argv.push_back(argv[i]);
  lc.servers = o.servers;
  lc.workers = o.workers;
  lc.replicas = o.replicas;
  lc.spares = o.spares;
  lc.join_slots = o.join_slots;
  lc.join = o.join;
  lc.worker_join_slots = o.worker_join_slots;
  lc.join_worker = o.join_worker;
  lc.transport = o.transport;
  lc.name = "ferry-train";
  // A lockstep stream is read by the workers themselves (each follows the directory). A join
  // slot's launch (--join) starts one server rank: it reads and deals nothing. With worker join
  // slots rank 0 deals the stream, as under a launcher (stream_ranks.h: workers may connect and
  // go while it runs), from this process's standard input when the stream is "-"; the first
  // signal goes to rank 0, which ends the stream.
  Result<int> rc = 0;
  const bool rank_zero_deals = models::StreamTraining(*resolved) && o.worker_join_slots > 0;
  if (rank_zero_deals) {
    lc.env.emplace_back(models::kStreamDealtEnv, models::kStreamRankZero);
    if (o.join_worker < 0) {
      lc.rank0_stdin = STDIN_FILENO;
      lc.signal_rank0_first = true;
    }
  }
  if (o.join >= 0 || o.join_worker >= 0 || rank_zero_deals) {
    rc = ps::RunLocalCluster(lc);
  } else if (models::LockstepStream(*resolved)) {
    rc = RunLockstepLocalCluster(std::move(lc));
  } else if (models::StreamTraining(*resolved)) {
    rc = RunStreamingLocalCluster(*resolved, std::move(lc));
  } else {
    rc = ps::RunLocalCluster(lc);
  }
  if (!rc.ok()) return TrainFailed("", rc.status());
  return *rc;
}

// Whether rank 0 can deal o's stream under `env`'s launcher: it must have the stream.
Status CheckRankDealing(const models::TrainOptions& o, const ps::LaunchEnv& env) {
  // ferry-train's own local cluster gives rank 0 its standard input when workers may join.
  if (o.stream.follow.empty() && o.train_files.front() == "-" &&
      env.launcher == ps::Launcher::kFerry && !models::StreamFromLauncher()) {
    return InvalidArgument(
        "--train - under ferry-launch: ferry-launch gives no rank its standard input (every "
        "rank's is /dev/null); name a FIFO (mkfifo) or --follow DIR or FILE, which rank 0 "
        "opens, or run ferry-train without a launcher (its own local cluster deals its "
        "standard input)");
  }
  return Status::Ok();
}

// One rank of a job: every rank resolves the data-size rule alike (the servers' steps may depend
// on it), then defines the same model, joins and runs its part.
int RunJobRank(const CLI::App& app, models::TrainOptions o, const ps::LaunchEnv& env) {
  auto resolved = models::ResolveAutoSettings(o);
  if (!resolved.ok()) return TrainFailed("", resolved.status());
  o = *resolved;
  auto def = models::DefineModel(o);
  if (!def.ok()) return TrainFailed("", def.status());
  auto job = models::MakeJob(o, *def);
  if (!job.ok()) return TrainFailed("", job.status());
  if (env.launcher != ps::Launcher::kFerry) {
    // mpirun/srun: the counts not given on the command line follow from the job's size.
    if (app.count("--workers") == 0) job->workers = 0;
    if (app.count("--servers") == 0 && app.count("--workers") == 0) {
      job->servers = static_cast<uint32_t>(std::max(1, env.size / 2));
    }
  }
  auto shape = ps::ReadLaunchShape();
  if (!shape.ok()) return TrainFailed("", shape.status());
  if (Status s = ps::ApplyLaunchShape(*shape, env, &*job); !s.ok()) return TrainFailed("", s);
  o.servers = job->servers;
  o.workers = job->workers;
  // A stream not dealt by ferry-train's own local cluster (nor followed by every worker in
  // lockstep): rank 0 reads it and deals it to the workers (stream_ranks.h).
  const bool rank_dealt =
      models::StreamTraining(o) && !models::StreamDealtHere() && !models::LockstepStream(o);
  if (rank_dealt) {
    if (Status s = CheckRankDealing(o, env); !s.ok()) return TrainFailed("", s);
    // Before Node::Start's threads: setenv must not race a getenv.
    ::setenv(models::kStreamDealtEnv, "dealt", 1);
    // Rank 0 deals the stream: its death ends the workers' input, which they would take for the
    // stream's end. The job must end with it then (no standby coordinator), not finish short.
    job->coordinator_standby = false;
    const bool stdin_stream = o.stream.follow.empty() && o.train_files.front() == "-";
    if (stdin_stream && env.rank != 0 && env.launcher == ps::Launcher::kSrun) {
      DrainStandardInput();
    }
  }
  const std::string who = "rank " + std::to_string(env.rank) + ": ";
  auto node = ps::Node::Start(*job, env);
  if (!node.ok()) return TrainFailed(who, node.status());
  std::unique_ptr<RankStreamDealer> dealer;
  if (rank_dealt && env.rank == 0) {
    ps::Worker* own = (*node)->worker();  // colocated: rank 0 is worker 0 too
    auto started = RankStreamDealer::Start(o, (*node)->coordinator_address(), job->workers,
                                           own != nullptr ? static_cast<int>(own->index()) : -1,
                                           job->worker_join_slots);
    if (!started.ok()) return TrainFailed(who, started.status());
    dealer = std::move(*started);
    if (job->worker_join_slots > 0) {
      // A worker that joined once the stream ended would miss the rounds that end it
      // (trainer_stream.cc): the slot is turned away (its rank ends cleanly).
      (*node)->SetWorkerJoinGate([ended = dealer->ended_flag()] {
        return ended->load() ? std::string("the stream has ended") : std::string();
      });
    }
  } else if (rank_dealt && (*node)->worker() != nullptr) {
    Status s = ReceiveDealtStream((*node)->coordinator_address(), (*node)->worker()->index());
    if (!s.ok()) return TrainFailed(who, s);
  }
  models::TrainReport report;
  Status s = models::RunTraining(**node, o, *def, &report);
  ps::Worker* w = (*node)->worker();
  if (s.ok() && w != nullptr && w->index() == 0) {
    auto transport = ps::ResolveTransportName(*job);
    std::fputs(FormatTrainSummary(models::ModelKindName(o.model), job->servers, job->workers,
                                  transport.ok() ? *transport : "?", report)
                   .c_str(),
               stdout);
    std::fflush(stdout);
  }
  const int code = s.ok() ? 0 : TrainFailed(who, s);
  return dealer != nullptr ? dealer->Finish(o, code) : code;
}

}  // namespace

std::string FormatTrainSummary(std::string_view model, uint32_t servers, uint32_t workers,
                               const std::string& transport, const models::TrainReport& report) {
  std::string out = Printf("ferry-train: %s on %u servers + %u workers over %s",
                           std::string(model).c_str(), servers, workers, transport.c_str());
  // An elastic job's joins and leaves (or replicas' failovers) change its servers and workers
  // meanwhile.
  const auto change = [](uint32_t joined, uint32_t gone, const char* what, const char* went) {
    if (joined == 0 && gone == 0) return std::string();
    std::string s = std::to_string(joined > 0 ? joined : gone) + " " + what +
                    ((joined > 0 ? joined : gone) == 1 ? "" : "s");
    if (joined > 0) s += " joined";
    if (joined > 0 && gone > 0) s += " and " + std::to_string(gone);
    if (gone > 0) s += std::string(" ") + went;
    return s;
  };
  const std::string servers_changed =
      change(report.servers_joined, report.servers_removed, "server", "removed");
  const std::string workers_changed =
      change(report.workers_joined, report.workers_left, "worker", "left");
  if (!servers_changed.empty() || !workers_changed.empty()) {
    out += " (" + servers_changed +
           (servers_changed.empty() || workers_changed.empty() ? "" : "; ") + workers_changed +
           " while training)";
  }
  out += Printf(": %llu samples in %.1f s (%.0f samples/s)",
                static_cast<unsigned long long>(report.samples), report.train_seconds,
                report.samples_per_sec);
  out += Printf(", %u epoch%s", report.epochs, report.epochs == 1 ? "" : "s");
  if (report.refit) {
    out += Printf(" (refit: %u on all lines)", report.kept_epoch);
  } else if (report.kept_epoch != report.epochs) {
    out += Printf(" (kept epoch %u)", report.kept_epoch);
  }
  if (report.test.count > 0) {
    out += Printf("; test logloss %.5f, AUC %.5f (%llu samples), calibration %.3f",
                  report.test.logloss, report.test.auc,
                  static_cast<unsigned long long>(report.test.count), report.test.calibration);
  }
  if (report.malformed > 0) {
    out +=
        Printf("; %llu malformed lines skipped", static_cast<unsigned long long>(report.malformed));
  }
  return out + "\n";
}

namespace {

// Parses argv into `o` / `text` and runs this process's part of the job; the exit code.
int TrainParseAndExecute(CLI::App& app, models::TrainOptions& o, models::TrainFlagText& text,
                         int argc, char** argv) {
  if (std::optional<int> code = tools::ParseCommandLine(app, argc, argv)) return *code;
  if (Status s = models::FinalizeTrainFlags(text, &o); !s.ok()) {
    std::fprintf(stderr, "ferry-train: error: %s\n", s.message().c_str());
    return 2;
  }
  auto env = ps::DetectLaunchEnv();
  if (!env.ok()) return TrainFailed("", env.status());
  if (env->launcher == ps::Launcher::kNone) return RunAsLocalCluster(o, argc, argv);
  return RunJobRank(app, o, *env);
}

struct PredictFlags {
  models::PredictOptions options;
  std::string model_path, out_path = "-";
  bool summary = false;
};

void AddPredictFlags(CLI::App& app, PredictFlags& f) {
  models::PredictOptions& o = f.options;
  app.add_option("MODEL", f.model_path,
                 "model file (binary or text), or an export directory (ferry-train --export-dir):\n"
                 "its newest version, the newest base with the deltas after it")
      ->required();
  app.add_option("FILE", o.files, "samples to score (plain or gzip)")->required();
  app.add_option("--format", o.format, "libsvm, criteo or libffm (default: the model's)")
      ->check(CLI::IsMember({"libsvm", "svmlight", "criteo", "libffm"}));
  app.add_option("-o,--out", f.out_path, "where the probabilities go (- for stdout)")
      ->capture_default_str();
  app.add_option("--field-map", o.field_map,
                 "libsvm field map (default: the one the model was trained with)");
  app.add_option("--threads", o.parse_threads, "parsing threads")->check(CLI::Range(1, 64));
  app.add_flag("--strict", o.strict, "a malformed line is fatal (default: report, skip, count)");
  app.add_flag("--summary", f.summary, "print logloss and AUC against the files' labels on stderr");
}

int PredictParseAndExecute(CLI::App& app, PredictFlags& f, int argc, char** argv) {
  if (std::optional<int> code = tools::ParseCommandLine(app, argc, argv)) return *code;
  std::error_code ec;
  auto model = std::filesystem::is_directory(f.model_path, ec)
                   ? models::LoadExportDir(f.model_path)
                   : models::ReadModelFile(f.model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "ferry-predict: %s: %s\n", f.model_path.c_str(),
                 model.status().ToString().c_str());
    return 1;
  }
  std::FILE* out = stdout;
  if (f.out_path != "-") {
    out = std::fopen(f.out_path.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "ferry-predict: cannot write %s: %s\n", f.out_path.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }
  models::PredictReport report;
  Status s = models::Predict(*model, f.options, out, &report);
  if (out != stdout && std::fclose(out) != 0 && s.ok()) {
    s = IoError("close " + f.out_path, errno);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "ferry-predict: %s\n", s.ToString().c_str());
    return 1;
  }
  if (f.summary) {
    std::fprintf(stderr, "ferry-predict: %llu samples, logloss %.5f, AUC %.5f\n",
                 static_cast<unsigned long long>(report.samples), report.logloss, report.auc);
  }
  return 0;
}

}  // namespace

int TrainMain(int argc, char** argv) {
  CLI::App app;
  tools::SetUpCommand(
      app, {.name = "ferry-train",
            .summary = "train LR, FTRL, FM, FFM, an embedding MLP or DeepFM on Ferry's parameter "
                       "server",
            .description = "Without a launcher it runs a local cluster (--servers, --workers); "
                           "under mpirun or srun\nit joins that job. By default passes go on "
                           "while the logloss on held-out data\nimproves (--epochs auto), and "
                           "the batch size follows the data size.\n"
                           "A stream (--train - or a FIFO) is trained in one pass, each sample "
                           "scored before it\nis trained on; its end, --max-samples, --idle-exit "
                           "or Ctrl-C end the job\n(resume: at most once). Under a launcher, "
                           "rank 0 reads the stream and deals it to the\nworkers (srun: "
                           "--input=0; docs/launchers.md).",
            .examples = {"ferry-gen --samples 200000 --test-samples 20000 --out tr.txt --test-out "
                         "te.txt",
                         "ferry-train --model ftrl --train tr.txt --test te.txt",
                         "ferry-train --model fm --train tr.txt --test te.txt --metrics-json "
                         "m.jsonl --model-out fm.model",
                         "ferry-train --model ffm --format libffm --train tr.ffm --validation "
                         "va.ffm --test te.ffm",
                         "ferry-gen --stream --drift 0.05 | ferry-train --train - --window 100000 "
                         "--model-out m.bin",
                         "mpirun -np 4 ferry-train --servers 2 --model lr --train tr.txt --test "
                         "te.txt"},
            .exit_status = "0 success; 2 bad command line; 1 the job failed (the reason is on "
                           "stderr).",
            .see_also = {"ferry-gen", "ferry-predict", "ferry-launch", "docs/training.md"}});
  models::TrainOptions o;
  models::TrainFlagText text;
  models::AddTrainFlags(app, &o, &text);
  return TrainParseAndExecute(app, o, text, argc, argv);
}

int PredictMain(int argc, char** argv) {
  CLI::App app;
  tools::SetUpCommand(
      app, {.name = "ferry-predict",
            .summary = "score samples with a model exported by ferry-train --model-out",
            .description = "Writes one probability per line, in input order. Runs in one process; "
                           "no parameter server.",
            .examples = {"ferry-train --model fm --train tr.txt --model-out fm.model",
                         "ferry-predict fm.model te.txt > p.txt"},
            .see_also = {"ferry-train", "docs/model-format.md"}});
  PredictFlags flags;
  AddPredictFlags(app, flags);
  return PredictParseAndExecute(app, flags, argc, argv);
}

}  // namespace ferry::train

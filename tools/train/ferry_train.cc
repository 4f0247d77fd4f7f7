// ferry-train: trains a sparse model on the parameter server.
//
//   ferry-train --model ftrl --train train.txt --test test.txt          # a local cluster
//   mpirun -np 4 ferry-train --servers 2 --model fm --train ...           # joins mpirun's job
//   srun -n 4 --mpi=pmix ferry-train --servers 2 ...                      # joins srun's job
//
// Not under a launcher, it starts a local cluster of --servers + --workers copies of itself
// (ps/launch/local_cluster.h) and exits with the job's status; each copy (and each rank under
// mpirun/srun) joins the job (ps/node.h) and runs its part (models/train/trainer.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "models/train/auto_settings.h"
#include "models/train/flags.h"
#include "models/train/model_def.h"
#include "models/train/trainer.h"
#include "ps/launch/launch_env.h"
#include "ps/launch/local_cluster.h"
#include "ps/node.h"
#include "tools/common/command.h"

namespace {

int Fail(const std::string& who, const ferry::Status& s) {
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app, {.name = "ferry-train",
            .summary = "train LR, FTRL, FM, FFM, an embedding MLP or DeepFM on Ferry's parameter "
                       "server",
            .description = "Without a launcher it runs a local cluster (--servers, --workers); "
                           "under mpirun or srun\nit joins that job. By default passes go on "
                           "while the logloss on held-out data\nimproves (--epochs auto), and "
                           "the batch size follows the data size.",
            .examples = {"ferry-gen --samples 200000 --test-samples 20000 --out tr.txt --test-out "
                         "te.txt",
                         "ferry-train --model ftrl --train tr.txt --test te.txt",
                         "ferry-train --model fm --train tr.txt --test te.txt --metrics-json "
                         "m.jsonl --model-out fm.model",
                         "ferry-train --model ffm --format libffm --train tr.ffm --validation "
                         "va.ffm --test te.ffm",
                         "mpirun -np 4 ferry-train --servers 2 --model lr --train tr.txt --test "
                         "te.txt"},
            .exit_status = "0 success; 2 bad command line; 1 the job failed (the reason is on "
                           "stderr).",
            .see_also = {"ferry-gen", "ferry-predict", "ferry-launch", "docs/training.md"}});
  ferry::models::TrainOptions o;
  ferry::models::TrainFlagText text;
  ferry::models::AddTrainFlags(app, &o, &text);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (ferry::Status s = ferry::models::FinalizeTrainFlags(text, &o); !s.ok()) {
    std::fprintf(stderr, "ferry-train: error: %s\n", s.message().c_str());
    return 2;
  }
  auto env = ferry::ps::DetectLaunchEnv();
  if (!env.ok()) return Fail("", env.status());

  if (env->launcher == ferry::ps::Launcher::kNone) {
    // The embedded default: a local cluster of copies of this program. Unreadable data or a
    // model that cannot be defined fails here, once, before any rank starts.
    auto resolved = ferry::models::ResolveAutoSettings(o);
    if (!resolved.ok()) return Fail("", resolved.status());
    if (auto def = ferry::models::DefineModel(*resolved); !def.ok()) return Fail("", def.status());
    ferry::ps::LocalClusterOptions lc;
    lc.argv.push_back(SelfPath(argv[0]));
    for (int i = 1; i < argc; ++i) lc.argv.push_back(argv[i]);
    lc.servers = o.servers;
    lc.workers = o.workers;
    lc.replicas = o.replicas;
    lc.transport = o.transport;
    lc.name = "ferry-train";
    auto rc = ferry::ps::RunLocalCluster(lc);
    if (!rc.ok()) return Fail("", rc.status());
    return *rc;
  }

  // One rank of a job: every rank resolves the data-size rule alike (the servers' steps may
  // depend on it), then defines the same model.
  auto resolved = ferry::models::ResolveAutoSettings(o);
  if (!resolved.ok()) return Fail("", resolved.status());
  o = *resolved;
  auto def = ferry::models::DefineModel(o);
  if (!def.ok()) return Fail("", def.status());
  auto job = ferry::models::MakeJob(o, *def);
  if (!job.ok()) return Fail("", job.status());
  if (env->launcher != ferry::ps::Launcher::kFerry) {
    // mpirun/srun: the counts not given on the command line follow from the job's size.
    if (app.count("--workers") == 0) job->workers = 0;
    if (app.count("--servers") == 0 && app.count("--workers") == 0) {
      job->servers = static_cast<uint32_t>(std::max(1, env->size / 2));
    }
  }
  auto shape = ferry::ps::ReadLaunchShape();
  if (!shape.ok()) return Fail("", shape.status());
  if (ferry::Status s = ferry::ps::ApplyLaunchShape(*shape, *env, &*job); !s.ok()) {
    return Fail("", s);
  }
  o.servers = job->servers;
  o.workers = job->workers;
  const std::string who = "rank " + std::to_string(env->rank) + ": ";
  auto node = ferry::ps::Node::Start(*job, *env);
  if (!node.ok()) return Fail(who, node.status());
  ferry::models::TrainReport report;
  ferry::Status s = ferry::models::RunTraining(**node, o, *def, &report);
  ferry::ps::Worker* w = (*node)->worker();
  const bool lead = w != nullptr && w->index() == 0;
  if (s.ok() && lead) {
    auto transport = ferry::ps::ResolveTransportName(*job);
    std::printf(
        "ferry-train: %s on %u servers + %u workers over %s: %llu samples in %.1f s "
        "(%.0f samples/s)",
        std::string(ferry::models::ModelKindName(o.model)).c_str(), job->servers, job->workers,
        transport.ok() ? transport->c_str() : "?", static_cast<unsigned long long>(report.samples),
        report.train_seconds, report.samples_per_sec);
    std::printf(", %u epoch%s", report.epochs, report.epochs == 1 ? "" : "s");
    if (report.refit) {
      std::printf(" (refit: %u on all lines)", report.kept_epoch);
    } else if (report.kept_epoch != report.epochs) {
      std::printf(" (kept epoch %u)", report.kept_epoch);
    }
    if (report.test.count > 0) {
      std::printf("; test logloss %.5f, AUC %.5f (%llu samples), calibration %.3f",
                  report.test.logloss, report.test.auc,
                  static_cast<unsigned long long>(report.test.count), report.test.calibration);
    }
    if (report.malformed > 0) {
      std::printf("; %llu malformed lines skipped",
                  static_cast<unsigned long long>(report.malformed));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (!s.ok()) return Fail(who, s);
  return 0;
}

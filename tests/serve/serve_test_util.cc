// Helpers of the ferry-serve tests (serve_test_util.h).
#include "tests/serve/serve_test_util.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

namespace ferry::serve_test {

std::string FeaturePart(const std::string& line, models::Format format) {
  const size_t cut = line.find(format == models::Format::kCriteo ? '\t' : ' ');
  return cut == std::string::npos ? "" : line.substr(cut + 1);
}

Data Generate(const std::string& dir, models::Format format) {
  const std::string ext(models::FormatName(format));
  Data d{dir + "/train." + ext, dir + "/test." + ext, ext};
  std::vector<std::string> args = {"--samples", "3000", "--test-samples", "300",
                                   "--format",  ext,    "--seed",         "7"};
  if (format != models::Format::kCriteo) {
    for (const char* a : {"--fields", "8", "--features", "4000"}) args.push_back(a);
  } else {
    for (const char* a : {"--vocab", "200", "--numeric", "13"}) args.push_back(a);
  }
  train_test::Generate(d.train, d.test, args);
  return d;
}

void TrainExport(const Data& data, const std::string& model, const std::string& ex,
                 const std::vector<std::string>& more) {
  std::vector<std::string> args = {train_test::TrainBin(), "--model", model, "--train"};
  for (const std::string& f :
       {data.train, std::string("--format"), data.format, std::string("--export-dir"), ex}) {
    args.push_back(f);
  }
  for (const char* f : {"--servers", "2", "--workers", "2", "--transport", "tcp", "--batch-size",
                        "100", "-q", "--progress", "never"}) {
    args.push_back(f);
  }
  args.insert(args.end(), more.begin(), more.end());
  Proc p = train_test::Exec(args, 60);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
}

Background::Background(std::vector<std::string> argv, double timeout_s) {
  thread_ = std::thread([this, argv = std::move(argv), timeout_s] {
    result_ = train_test::Exec(argv, timeout_s, [this](pid_t pid) {
      pid_.store(pid);
      if (int sig = pending_.exchange(0); sig != 0) kill(-pid, sig);
    });
  });
}

Background::~Background() {
  if (thread_.joinable()) {
    Signal(SIGKILL);
    thread_.join();
  }
}

void Background::Signal(int sig) {
  pending_.store(sig);
}

Proc Background::Wait() {
  if (thread_.joinable()) thread_.join();
  return result_;
}

}  // namespace ferry::serve_test

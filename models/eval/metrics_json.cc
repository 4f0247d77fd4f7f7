// JSON-lines metrics via nlohmann::ordered_json (keys in insertion order, readable lines).
//
// Why write(2) and not a FILE*/ofstream: a line must be complete in the file as soon as Write()
// returns (a dashboard tails the file; a killed run keeps every finished line), and a failed
// write must surface as a Status at the call that caused it, not at some later flush.
#include "models/eval/metrics_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

namespace ferry::models {

MetricsLine::MetricsLine(std::string_view event) {
  Set("event", event);
}

MetricsLine& MetricsLine::SetValue(std::string_view key, Value value) {
  for (auto& [k, v] : fields_) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  fields_.emplace_back(std::string(key), std::move(value));
  return *this;
}

MetricsLine& MetricsLine::Set(std::string_view key, double value) {
  return SetValue(key, value);
}
MetricsLine& MetricsLine::Set(std::string_view key, int64_t value) {
  return SetValue(key, value);
}
MetricsLine& MetricsLine::Set(std::string_view key, uint64_t value) {
  return SetValue(key, value);
}
MetricsLine& MetricsLine::Set(std::string_view key, bool value) {
  return SetValue(key, value);
}
MetricsLine& MetricsLine::Set(std::string_view key, std::string_view value) {
  return SetValue(key, std::string(value));
}

std::string MetricsLine::ToJson() const {
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (const auto& [key, value] : fields_) {
    nlohmann::ordered_json& slot = object[key];
    std::visit(
        [&slot](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, double>) {
            // JSON has no NaN or infinity; null is the conventional "no value".
            if (std::isfinite(v)) {
              slot = v;
            } else {
              slot = nullptr;
            }
          } else {
            slot = v;
          }
        },
        value);
  }
  // error_handler_t::replace: invalid UTF-8 in a string becomes U+FFFD instead of throwing.
  return object.dump(-1, ' ', /*ensure_ascii=*/false,
                     nlohmann::ordered_json::error_handler_t::replace);
}

MetricsLine EvalLine(std::string_view event, const EvalRecord& r) {
  MetricsLine line(event);
  line.Set("epoch", r.epoch)
      .Set("batches", r.batches)
      .Set("samples", r.samples)
      .Set("train_logloss", r.train_logloss)
      .Set("logloss", r.logloss)
      .Set("auc", r.auc)
      .Set("samples_per_sec", r.samples_per_sec)
      .Set("elapsed_s", r.elapsed_s);
  return line;
}

Result<MetricsJsonWriter> MetricsJsonWriter::Open(const std::string& path) {
  if (path == "-") return MetricsJsonWriter(STDOUT_FILENO, /*owned=*/false, path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("open metrics file " + path, errno);
  return MetricsJsonWriter(fd, /*owned=*/true, path);
}

MetricsJsonWriter::MetricsJsonWriter(MetricsJsonWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      owned_(std::exchange(other.owned_, false)),
      path_(std::move(other.path_)) {}

MetricsJsonWriter& MetricsJsonWriter::operator=(MetricsJsonWriter&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    owned_ = std::exchange(other.owned_, false);
    path_ = std::move(other.path_);
  }
  return *this;
}

MetricsJsonWriter::~MetricsJsonWriter() {
  Close();
}

void MetricsJsonWriter::Close() {
  if (owned_ && fd_ >= 0) ::close(fd_);
  fd_ = -1;
  owned_ = false;
}

Status MetricsJsonWriter::Write(const MetricsLine& line) {
  if (fd_ < 0) return InvalidArgument("metrics writer for " + path_ + " is closed (moved from)");
  const std::string text = line.ToJson() + '\n';
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("write metrics file " + path_, errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace ferry::models

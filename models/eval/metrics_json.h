// JSON-lines metrics (`--metrics-json FILE`): one JSON object per line, written and flushed as
// soon as it is known, so a crashed or killed run still leaves every completed line.
//
//   {"event":"eval","epoch":1,"batches":1200,"samples":1228800,"train_logloss":0.4712,
//    "logloss":0.4655,"auc":0.7788,"samples_per_sec":152003.2,"elapsed_s":8.08}
//   ...
//   {"event":"final","epoch":3,...,"logloss":0.4601,"auc":0.7853}
//
// Every line is strictly valid JSON (RFC 8259): NaN and infinities are written as null, strings
// are escaped and invalid UTF-8 is replaced by U+FFFD. Keys keep the order they were set in.
//
// Thread-safety: none; one writer, used from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "transport/status.h"

namespace ferry::models {

// One line: an "event" field followed by fields in the order they are set.
class MetricsLine {
 public:
  using Value = std::variant<double, int64_t, uint64_t, bool, std::string>;

  explicit MetricsLine(std::string_view event);

  // Setting a key again replaces its value (keeping its position).
  MetricsLine& Set(std::string_view key, double value);  // NaN / +-inf -> null
  MetricsLine& Set(std::string_view key, int64_t value);
  MetricsLine& Set(std::string_view key, uint64_t value);
  MetricsLine& Set(std::string_view key, int value) { return Set(key, int64_t{value}); }
  MetricsLine& Set(std::string_view key, bool value);
  MetricsLine& Set(std::string_view key, std::string_view value);
  MetricsLine& Set(std::string_view key, const char* value) {
    return Set(key, std::string_view(value));
  }

  const std::vector<std::pair<std::string, Value>>& fields() const { return fields_; }
  // The object on one line, without the trailing newline.
  std::string ToJson() const;

 private:
  MetricsLine& SetValue(std::string_view key, Value value);
  std::vector<std::pair<std::string, Value>> fields_;
};

// The fields of a periodic evaluation ("eval") or the last line ("final").
struct EvalRecord {
  int64_t epoch = 0;
  uint64_t batches = 0;
  uint64_t samples = 0;        // training samples seen so far
  double train_logloss = 0.0;  // mean over the training samples since the previous record
  double logloss = 0.0;        // on the evaluation set
  double auc = 0.0;            // on the evaluation set; NaN when undefined
  double samples_per_sec = 0.0;
  double elapsed_s = 0.0;
};
// {"event": event, "epoch", "batches", "samples", "train_logloss", "logloss", "auc",
//  "samples_per_sec", "elapsed_s"} in that order.
MetricsLine EvalLine(std::string_view event, const EvalRecord& record);

// Appends lines to a file (or stdout for "-"). Move-only; the file is closed on destruction.
class MetricsJsonWriter {
 public:
  // Creates or truncates `path`; "-" writes to standard output (not closed). kIoError naming the
  // path when it cannot be opened.
  static Result<MetricsJsonWriter> Open(const std::string& path);

  MetricsJsonWriter(MetricsJsonWriter&& other) noexcept;
  MetricsJsonWriter& operator=(MetricsJsonWriter&& other) noexcept;
  MetricsJsonWriter(const MetricsJsonWriter&) = delete;
  MetricsJsonWriter& operator=(const MetricsJsonWriter&) = delete;
  ~MetricsJsonWriter();

  // Writes line.ToJson() + '\n' with write(2) (no user-space buffering): the line is in the
  // file when this returns. kIoError on a failed or short write (disk full, closed pipe).
  Status Write(const MetricsLine& line);

  const std::string& path() const { return path_; }

 private:
  MetricsJsonWriter(int fd, bool owned, std::string path)
      : fd_(fd), owned_(owned), path_(std::move(path)) {}
  void Close();

  int fd_ = -1;
  bool owned_ = false;
  std::string path_;
};

}  // namespace ferry::models

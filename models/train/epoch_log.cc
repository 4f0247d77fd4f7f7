// The EPOCHS file of a job with periodic checkpoints (epoch_log.h).
#include "models/train/epoch_log.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ps/job/checkpoint.h"

namespace ferry::models {

namespace {

constexpr std::string_view kMagic = "ferry-train-epochs 1";

bool SameDouble(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

bool SameMetrics(const EvalMetrics& a, const EvalMetrics& b) {
  return a.count == b.count && SameDouble(a.logloss, b.logloss) && SameDouble(a.auc, b.auc) &&
         SameDouble(a.calibration, b.calibration);
}

void AppendMetrics(std::string* out, const char* name, const EvalMetrics& m) {
  char buf[160];
  std::snprintf(buf, sizeof buf, " %s %llu %.17g %.17g %.17g", name,
                static_cast<unsigned long long>(m.count), m.logloss, m.auc, m.calibration);
  *out += buf;
}

bool ReadDouble(std::istringstream& in, double* v) {
  std::string word;
  if (!(in >> word)) return false;
  if (word == "nan") {
    *v = EvalMetrics::kNaN;
    return true;
  }
  char* end = nullptr;
  errno = 0;
  *v = std::strtod(word.c_str(), &end);
  return errno == 0 && end == word.c_str() + word.size();
}

bool ReadMetrics(std::istringstream& in, std::string_view name, EvalMetrics* m) {
  std::string word;
  unsigned long long count = 0;
  if (!(in >> word) || word != name || !(in >> count)) return false;
  m->count = count;
  return ReadDouble(in, &m->logloss) && ReadDouble(in, &m->auc) && ReadDouble(in, &m->calibration);
}

}  // namespace

bool EpochEntry::operator==(const EpochEntry& o) const {
  return epoch == o.epoch && kept == o.kept && SameMetrics(validation, o.validation) &&
         SameMetrics(test, o.test) && SameDouble(offset, o.offset);
}

std::string EncodeEpochLog(const std::vector<EpochEntry>& entries) {
  std::string out(kMagic);
  out += '\n';
  for (const EpochEntry& e : entries) {
    out += "epoch " + std::to_string(e.epoch) + " kept " + (e.kept ? "1" : "0");
    AppendMetrics(&out, "validation", e.validation);
    AppendMetrics(&out, "test", e.test);
    char buf[48];
    std::snprintf(buf, sizeof buf, " offset %.17g", e.offset);
    out += buf;
    out += '\n';
  }
  out += "end\n";
  return out;
}

Result<std::vector<EpochEntry>> ParseEpochLog(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || line != kMagic) {
    return ProtocolError("epoch log: the first line is not '" + std::string(kMagic) + "'");
  }
  std::vector<EpochEntry> entries;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line == "end") return entries;
    std::istringstream row(line);
    std::string word, extra;
    EpochEntry e;
    int kept = -1;
    unsigned long epoch = 0;
    const bool ok = (row >> word) && word == "epoch" && (row >> epoch) && (row >> word) &&
                    word == "kept" && (row >> kept) && (kept == 0 || kept == 1) &&
                    ReadMetrics(row, "validation", &e.validation) &&
                    ReadMetrics(row, "test", &e.test) && (row >> word) && word == "offset" &&
                    ReadDouble(row, &e.offset) && std::isfinite(e.offset) && !(row >> extra);
    e.epoch = static_cast<uint32_t>(epoch);
    e.kept = kept == 1;
    if (!ok || epoch == 0 || epoch > 0xffffffffu ||
        (!entries.empty() && e.epoch != entries.back().epoch + 1)) {
      return ProtocolError("epoch log line " + std::to_string(number) + " is malformed: '" + line +
                           "'");
    }
    entries.push_back(e);
  }
  return ProtocolError("epoch log is truncated (no 'end' line)");
}

Status WriteEpochLog(const std::string& dir, const std::vector<EpochEntry>& entries) {
  return ps::WriteFileAtomic(dir, "EPOCHS", EncodeEpochLog(entries));
}

Result<std::optional<std::vector<EpochEntry>>> ReadEpochLog(const std::string& dir) {
  const std::string path = dir + "/EPOCHS";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::optional<std::vector<EpochEntry>>();
    return IoError("open " + path, errno);
  }
  std::ostringstream s;
  s << in.rdbuf();
  auto entries = ParseEpochLog(s.str());
  if (!entries.ok()) return entries.status().Annotate(path);
  return std::optional<std::vector<EpochEntry>>(std::move(*entries));
}

std::string KeptModelDir(const std::string& dir, uint32_t epoch) {
  return dir + "/kept-" + std::to_string(epoch);
}

}  // namespace ferry::models

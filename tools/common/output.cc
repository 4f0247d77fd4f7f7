#include "tools/common/output.h"

#include <cerrno>
#include <cmath>
#include <fstream>

namespace ferry::tools {

double Finite(double v) {
  return std::isfinite(v) ? v : 0.0;
}

std::string ReportLine(const char* key, const std::string& value) {
  return Printf(" %-16s: %s\n", key, value.c_str());
}

Status WriteOutput(const std::string& path, const std::string& text) {
  if (path == "-") {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) {
      return IoError("write stdout", errno);
    }
    std::fflush(stdout);
    return Status::Ok();
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("open " + path, errno);
  out << text;
  out.close();
  if (!out) return IoError("write " + path, errno);
  return Status::Ok();
}

}  // namespace ferry::tools

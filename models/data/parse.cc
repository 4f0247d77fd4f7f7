// Format names, blank-line rules and the parser dispatch shared by the three formats.
#include "models/data/parse.h"

#include <string>

#include "models/data/parse_internal.h"

namespace ferry::models {

Result<Format> ParseFormat(std::string_view name) {
  if (name == "libsvm" || name == "svmlight") return Format::kLibsvm;
  if (name == "criteo") return Format::kCriteo;
  if (name == "libffm") return Format::kLibffm;
  return InvalidArgument("unknown data format '" + std::string(name) +
                         "'; expected libsvm, criteo or libffm");
}

std::string_view FormatName(Format format) {
  switch (format) {
    case Format::kLibsvm:
      return "libsvm";
    case Format::kCriteo:
      return "criteo";
    case Format::kLibffm:
      return "libffm";
  }
  return "unknown";
}

bool IsBlankLine(Format format, std::string_view line) {
  line = internal::StripCr(line);
  if (format == Format::kCriteo) return line.empty();  // "\t\t..." is a (malformed) record
  for (char c : line) {
    if (c == '#') return true;
    if (!internal::IsSpace(c)) return false;
  }
  return true;
}

Status ParseLine(Format format, std::string_view line, uint64_t seed, uint32_t hash_bits,
                 Batch* out, const FieldMap* field_map) {
  if (field_map && format != Format::kLibsvm) {
    return InvalidArgument("a field map applies to libsvm input only, not " +
                           std::string(FormatName(format)));
  }
  switch (format) {
    case Format::kLibsvm:
      return ParseLibsvmLine(line, seed, hash_bits, out, field_map);
    case Format::kCriteo:
      return ParseCriteoLine(line, seed, hash_bits, out);
    case Format::kLibffm:
      return ParseLibffmLine(line, seed, hash_bits, out);
  }
  return Internal("unknown format");
}

}  // namespace ferry::models

// ferry-serve's request decoding and response encoding (request.h).
#include "models/serve/request.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace ferry::models {

namespace {

using nlohmann::json;

// nlohmann's parser keeps its own stack, but a body of a million '[' still builds a value a
// million levels deep before we look at it; a scan first refuses what no request needs.
bool NestedDeeperThan(std::string_view body, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

std::string Dump(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// The text of a line (label 0 first) from a feature list: "0 idx:val ..." (libsvm) or
// "0 field:idx:val ..." (libffm), numbers written so the parser reads back what JSON held.
Result<std::string> LineOfFeatures(const json& features, Format format) {
  if (format == Format::kCriteo) {
    return InvalidArgument(
        "a criteo model takes an instance as a string: the row's 39 tab-separated columns "
        "without the label");
  }
  if (!features.is_array()) return InvalidArgument("\"features\" is not an array");
  const size_t width = format == Format::kLibffm ? 3 : 2;
  const char* shape = format == Format::kLibffm ? "[field, idx, val]" : "[idx, val]";
  std::string line = "0";
  char buf[64];
  for (size_t i = 0; i < features.size(); ++i) {
    const json& f = features[i];
    if (!f.is_array() || f.size() != width) {
      return InvalidArgument("feature " + std::to_string(i) + " is " + Dump(f) + ", not " + shape);
    }
    line += ' ';
    for (size_t k = 0; k + 1 < width; ++k) {
      if (!f[k].is_number_unsigned()) {
        return InvalidArgument("feature " + std::to_string(i) + " " + Dump(f) +
                               ": field and index must be non-negative integers");
      }
      line += std::to_string(f[k].get<uint64_t>());
      line += ':';
    }
    const json& v = f[width - 1];
    const double d = v.is_number() ? v.get<double>() : NAN;
    if (!std::isfinite(d)) {
      return InvalidArgument("feature " + std::to_string(i) + " " + Dump(f) +
                             ": the value must be a finite number");
    }
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
    line.append(buf, end);
  }
  return line;
}

// One instance as the text of a line with label 0, in the model's format.
Result<std::string> LineOf(const json& instance, Format format) {
  if (instance.is_string()) {
    const std::string& s = instance.get_ref<const std::string&>();
    if (s.find_first_of("\n\r") != std::string::npos) {
      return InvalidArgument("a line break inside the string: send one sample per instance");
    }
    return (format == Format::kCriteo ? "0\t" : "0 ") + s;
  }
  if (instance.is_object()) {
    auto it = instance.find("features");
    if (it == instance.end() || instance.size() != 1) {
      return InvalidArgument("an instance object has one key, \"features\"; got " + Dump(instance));
    }
    return LineOfFeatures(*it, format);
  }
  return InvalidArgument(
      "an instance is a string (a line's features) or {\"features\": [...]}; "
      "got " +
      Dump(instance));
}

Status Decode(std::string_view body, const InputSpec& spec, Batch* out,
              const RequestLimits& limits) {
  if (NestedDeeperThan(body, limits.max_depth)) {
    return InvalidArgument("malformed JSON: nested deeper than " +
                           std::to_string(limits.max_depth) + " levels");
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) return InvalidArgument("the body is not a JSON object");
  auto it = j.find("instances");
  if (it == j.end() || !it->is_array()) {
    return InvalidArgument("the body has no \"instances\" array ({\"instances\": [...]})");
  }
  const json& instances = *it;
  if (instances.empty()) return InvalidArgument("\"instances\" is empty");
  if (instances.size() > limits.max_instances) {
    return InvalidArgument(std::to_string(instances.size()) + " instances; at most " +
                           std::to_string(limits.max_instances) + " per request");
  }
  for (size_t i = 0; i < instances.size(); ++i) {
    auto line = LineOf(instances[i], spec.format);
    Status s = line.ok() ? ParseLine(spec.format, *line, spec.hash_seed, spec.hash_bits, out,
                                     spec.field_map)
                         : line.status();
    if (!s.ok()) return s.Annotate("instance " + std::to_string(i));
  }
  return Status::Ok();
}

}  // namespace

Status DecodePredictRequest(std::string_view body, const InputSpec& spec, Batch* out,
                            const RequestLimits& limits) {
  out->Clear();
  Status s;
  try {
    s = Decode(body, spec, out, limits);
  } catch (const std::exception& e) {
    // nlohmann throws only on misuse (a type mismatch we did not check for); keep it a 4xx.
    s = InvalidArgument(std::string("bad request: ") + e.what());
  }
  if (!s.ok()) out->Clear();
  return s;
}

std::string EncodePredictResponse(std::span<const float> probs, uint64_t version) {
  std::string s = "{\"predictions\":[";
  s.reserve(s.size() + probs.size() * 14 + 40);
  char buf[32];
  for (size_t i = 0; i < probs.size(); ++i) {
    if (i > 0) s += ',';
    if (!std::isfinite(probs[i])) {  // a model with NaN weights: JSON has no NaN
      s += "null";
      continue;
    }
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, probs[i]);
    s.append(buf, end);
  }
  s += "],\"model_version\":";
  s += std::to_string(version);
  s += "}\n";
  return s;
}

std::string EncodeError(std::string_view message) {
  json j = {{"error", std::string(message)}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace ferry::models

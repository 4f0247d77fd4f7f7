// ferry-serve's request decoding and response encoding (request.h).
#include "models/serve/request.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ferry::models {

namespace {

using nlohmann::json;

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

// A string instance: a line's feature part, parsed as the line "0 <features>" (criteo: "0\t...")
// by the format's parser. The label goes in front of the text in the lexer's own buffer (shifted
// in place), so the text is not copied into a line of its own.
Status ParseStringInstance(std::string& features, const InputSpec& spec, Batch* out) {
  if (std::memchr(features.data(), '\n', features.size()) != nullptr ||
      std::memchr(features.data(), '\r', features.size()) != nullptr) {
    return InvalidArgument("a line break inside the string: send one sample per instance");
  }
  features.insert(0, spec.format == Format::kCriteo ? "0\t" : "0 ");
  return ParseLine(spec.format, features, spec.hash_seed, spec.hash_bits, out, spec.field_map);
}

// An instance that is not a string, as the text of a line with label 0, in the model's format.
Result<std::string> LineOf(const json& instance, Format format) {
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

// One instance that is not a string ({"features": ...}, or what is wrong), as the json value
// json::parse would have built, from the parser's events. Pointers on the stack stay valid:
// only the innermost open container grows, and none of its elements is on the stack.
class ValueBuilder {
 public:
  void Add(json v) { Place(std::move(v)); }
  void Open(json v) { stack_.push_back(Place(std::move(v))); }
  // True when the instance is complete.
  bool Close() {
    stack_.pop_back();
    return stack_.empty();
  }
  void Key(const std::string& k) { key_ = k; }
  const json& value() const { return root_; }

 private:
  json* Place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];  // a repeated key: the last value, as json::parse keeps
    slot = std::move(v);
    return &slot;
  }

  json root_;
  std::vector<json*> stack_;
  std::string key_;
};

// nlohmann's SAX events for a predict body: the instances go into the batch as the parser meets
// them, each string instance straight from the lexer's buffer; no DOM of the body is built.
// Outcomes that depend on the whole body (malformed JSON, the instance count) are decided at the
// end with the same precedence as decoding a parsed document: malformed JSON, not an object, no
// "instances" array, empty, too many instances, then the first bad instance. Once an instance
// failed or the count passed the limit, the rest are counted, not parsed. A repeated
// "instances" key starts over (json::parse keeps the last).
//
//   depth_ 1: inside the body's object;  2: inside "instances" (in_instances_): each value there
//   is an instance; build_depth_ > 0: inside an instance container (ValueBuilder).
class RequestHandler {
 public:
  RequestHandler(const InputSpec& spec, const RequestLimits& limits, Batch* out)
      : spec_(spec), limits_(limits), out_(out) {}

  Status Finish(bool parsed) const {
    if (too_deep_) {
      return InvalidArgument("malformed JSON: nested deeper than " +
                             std::to_string(limits_.max_depth) + " levels");
    }
    if (!parsed) return InvalidArgument("malformed JSON: " + json_error_);
    if (!root_object_) return InvalidArgument("the body is not a JSON object");
    if (!instances_array_) {
      return InvalidArgument("the body has no \"instances\" array ({\"instances\": [...]})");
    }
    if (count_ == 0) return InvalidArgument("\"instances\" is empty");
    if (count_ > limits_.max_instances) {
      return InvalidArgument(std::to_string(count_) + " instances; at most " +
                             std::to_string(limits_.max_instances) + " per request");
    }
    return error_;
  }

  // The SAX interface (nlohmann::json_sax).
  bool null() { return Scalar(json(nullptr)); }
  bool boolean(bool v) { return Scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return Scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Scalar(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return Scalar(json(v)); }
  bool binary(json::binary_t&) { return Scalar(json()); }  // not in JSON text
  bool string(std::string& v) {
    if (build_depth_ == 0 && At() == Slot::kInstance) {
      if (Take()) Check(ParseStringInstance(v, spec_, out_));
      return true;
    }
    return Scalar(json(v));
  }
  bool start_object(size_t) { return Open(json::object()); }
  bool start_array(size_t) { return Open(json::array()); }
  bool key(std::string& k) {
    if (build_depth_ > 0) {
      if (building_) builder_.Key(k);
    } else if (depth_ == 1) {
      instances_key_ = k == "instances";
    }
    return true;
  }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool parse_error(size_t, const std::string&, const json::exception& e) {
    json_error_ = e.what();
    return false;
  }

 private:
  // Where the next value goes.
  enum class Slot { kRoot, kInstances, kInstance, kOther };
  Slot At() const {
    if (depth_ == 0) return Slot::kRoot;
    if (in_instances_ && depth_ == 2) return Slot::kInstance;
    if (depth_ == 1 && instances_key_) return Slot::kInstances;
    return Slot::kOther;
  }

  // The value of an "instances" key: an array to fill, or not.
  void StartInstances(bool array) {
    out_->Clear();
    count_ = 0;
    error_ = Status::Ok();
    instances_array_ = array;
    in_instances_ = array;
  }

  // Counts an instance; true when it is to be parsed.
  bool Take() { return ++count_ <= limits_.max_instances && error_.ok(); }

  void Check(Status s) {
    if (!s.ok()) error_ = s.Annotate("instance " + std::to_string(count_ - 1));
  }

  // An instance that is not a string: its line through the format's parser.
  void ParseValue(const json& instance) {
    auto line = LineOf(instance, spec_.format);
    Check(line.ok() ? ParseLine(spec_.format, *line, spec_.hash_seed, spec_.hash_bits, out_,
                                spec_.field_map)
                    : line.status());
  }

  bool Scalar(json v) {
    if (build_depth_ > 0) {
      if (building_) builder_.Add(std::move(v));
      return true;
    }
    switch (At()) {
      case Slot::kRoot:
        root_object_ = false;
        break;
      case Slot::kInstances:
        StartInstances(false);
        break;
      case Slot::kInstance:
        if (Take()) ParseValue(v);
        break;
      case Slot::kOther:
        break;
    }
    return true;
  }

  bool Open(json container) {
    const Slot slot = build_depth_ > 0 ? Slot::kOther : At();
    if (++depth_ > limits_.max_depth) {
      too_deep_ = true;  // stops the parser before it holds a deep stack
      return false;
    }
    if (build_depth_ > 0) {
      ++build_depth_;
      if (building_) builder_.Open(std::move(container));
      return true;
    }
    switch (slot) {
      case Slot::kRoot:
        root_object_ = container.is_object();
        break;
      case Slot::kInstances:
        StartInstances(container.is_array());
        break;
      case Slot::kInstance:
        build_depth_ = 1;
        building_ = Take();
        if (building_) builder_.Open(std::move(container));
        break;
      case Slot::kOther:
        break;
    }
    return true;
  }

  bool Close() {
    if (build_depth_ > 0) {
      --build_depth_;
      if (building_ && builder_.Close()) ParseValue(builder_.value());
    } else if (in_instances_ && depth_ == 2) {
      in_instances_ = false;
    }
    --depth_;
    return true;
  }

  const InputSpec& spec_;
  const RequestLimits& limits_;
  Batch* out_;
  size_t depth_ = 0;
  bool too_deep_ = false;
  std::string json_error_;
  bool root_object_ = false;
  bool instances_key_ = false;    // the last key of the body's object is "instances"
  bool instances_array_ = false;  // the (last) "instances" value is an array
  bool in_instances_ = false;
  size_t count_ = 0;
  Status error_;  // the first bad instance's
  size_t build_depth_ = 0;
  bool building_ = false;
  ValueBuilder builder_;
};

Status Decode(std::string_view body, const InputSpec& spec, Batch* out,
              const RequestLimits& limits) {
  RequestHandler handler(spec, limits, out);
  const bool parsed = json::sax_parse(body, &handler, json::input_format_t::json, true, false);
  return handler.Finish(parsed);
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

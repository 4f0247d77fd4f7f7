// ferry-serve's request decoding and response encoding alone (models/serve/request.h): each
// instance form gives the ids training's parser gives; every bad body is InvalidArgument with a
// message that says what is wrong and leaves no sample behind.
#include "models/serve/request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "models/data/parse.h"

namespace ferry::models {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 42;
constexpr uint32_t kBits = 20;

InputSpec Spec(Format f) {
  return InputSpec{f, kSeed, kBits, nullptr};
}

Batch Parsed(Format f, const std::vector<std::string>& lines) {
  Batch b;
  for (const std::string& l : lines) EXPECT_TRUE(ParseLine(f, l, kSeed, kBits, &b).ok()) << l;
  return b;
}

void ExpectSame(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.fields, b.fields);
  EXPECT_EQ(a.labels, b.labels);
}

Status Decode(std::string_view body, Format f, Batch* b, RequestLimits limits = {}) {
  return DecodePredictRequest(body, Spec(f), b, limits);
}

TEST(ServeRequest, LibsvmStringsAndFeatureListsHashAsTrainingDoes) {
  Batch b;
  ASSERT_TRUE(Decode(R"({"instances": ["3:1 17:0.5", {"features": [[3, 1], [17, 0.5]]}, ""]})",
                     Format::kLibsvm, &b)
                  .ok());
  ExpectSame(b, Parsed(Format::kLibsvm, {"0 3:1 17:0.5", "0 3:1 17:0.5", "0"}));
  ASSERT_TRUE(b.Validate().ok());
}

TEST(ServeRequest, LibffmStringsAndTriples) {
  Batch b;
  ASSERT_TRUE(
      Decode(R"({"instances": ["2:17:1 5:901:0.25", {"features": [[2, 17, 1], [5, 901, 0.25]]}]})",
             Format::kLibffm, &b)
          .ok());
  ExpectSame(b, Parsed(Format::kLibffm, {"0 2:17:1 5:901:0.25", "0 2:17:1 5:901:0.25"}));
}

TEST(ServeRequest, CriteoRowsWithoutTheLabel) {
  std::string row = "5";
  for (int c = 1; c < 13; ++c) row += "\t" + std::to_string(c);
  for (int c = 0; c < 26; ++c) row += "\t68fd1e" + std::to_string(c);
  nlohmann::json body = {{"instances", {row}}};
  Batch b;
  ASSERT_TRUE(Decode(body.dump(), Format::kCriteo, &b).ok());
  ExpectSame(b, Parsed(Format::kCriteo, {"0\t" + row}));
  Status s = Decode(R"({"instances": [{"features": [[1, 1]]}]})", Format::kCriteo, &b);
  EXPECT_THAT(s.message(), HasSubstr("criteo model takes an instance as a string"));
}

TEST(ServeRequest, EveryBadBodySaysWhatIsWrong) {
  struct Case {
    std::string body, message;
  };
  const std::vector<Case> cases = {
      {"", "malformed JSON"},
      {R"({"instances": ["1:1"])", "malformed JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"inputs": ["1:1"]})", "no \"instances\" array"},
      {R"({"instances": "1:1"})", "no \"instances\" array"},
      {R"({"instances": []})", "\"instances\" is empty"},
      {R"({"instances": ["1:1", "3:x"]})", "instance 1: feature 1 '3:x'"},
      {R"({"instances": ["1:1 2"]})", "instance 0"},
      {R"({"instances": ["1:1\n2:1"]})", "line break"},
      {R"({"instances": [7]})", "an instance is a string"},
      {R"({"instances": [{"feature": []}]})", "one key, \"features\""},
      {R"({"instances": [{"features": [[1, 1]], "x": 1}]})", "one key, \"features\""},
      {R"({"instances": [{"features": 3}]})", "\"features\" is not an array"},
      {R"({"instances": [{"features": [[1, 1, 1]]}]})", "not [idx, val]"},
      {R"({"instances": [{"features": [[-1, 1]]}]})", "non-negative integers"},
      {R"({"instances": [{"features": [[1.5, 1]]}]})", "non-negative integers"},
      {R"({"instances": [{"features": [[1, "a"]]}]})", "finite number"},
      {R"({"instances": [{"features": [[1, 1e999]]}]})", "malformed JSON"},
      {R"({"instances": [[[[[[[[[[1]]]]]]]]]]})", "nested deeper than 8"},
      {R"({"instances": ["1:1", "2:1", "3:1"]})", "3 instances; at most 2"},
  };
  for (const Case& c : cases) {
    Batch b;
    ASSERT_TRUE(ParseLine(Format::kLibsvm, "1 5:1", kSeed, kBits, &b).ok());
    Status s = Decode(c.body, Format::kLibsvm, &b, RequestLimits{.max_instances = 2});
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.body;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.body;
    EXPECT_EQ(b.size(), 0u) << c.body;
    EXPECT_EQ(b.nnz(), 0u) << c.body;
  }
}

// The decoder reads the body in one streaming pass (no DOM): what depends on the whole body is
// decided as if the body had been parsed first.
TEST(ServeRequest, StreamingDecodeDecidesAsAParsedBodyWould) {
  struct Case {
    std::string body, message;
  };
  const std::vector<Case> cases = {
      // A bad instance, then the body turns out malformed: the JSON error wins.
      {R"({"instances": ["3:x", "1:1")", "malformed JSON"},
      // Too many instances wins over a bad one before the limit.
      {R"({"instances": ["3:x", "1:1", "2:1"]})", "3 instances; at most 2"},
      // The first bad instance is named, whatever follows.
      {R"({"instances": ["1:1", {"features": [[1, "a"]]}]})", "instance 1: feature 0"},
      {R"({"instances": [{"features": [[1, 1]]}, "2:x"]})", "instance 1: feature 1 '2:x'"},
      // The last "instances" key counts, as json::parse keeps it.
      {R"({"instances": ["1:1"], "instances": 3})", "no \"instances\" array"},
      {R"({"instances": ["1:1"], "instances": []})", "\"instances\" is empty"},
      {R"({"x": {"instances": ["1:1"]}})", "no \"instances\" array"},
      {R"(["1:1"])", "not a JSON object"},
      {R"("1:1")", "not a JSON object"},
      {R"({"instances": ["1:1"]} [)", "malformed JSON"},
      {R"({"instances": ["1:1"], "x": [[[[[[[[1]]]]]]]]})", "nested deeper than 8"},
  };
  for (const Case& c : cases) {
    Batch b;
    Status s = Decode(c.body, Format::kLibsvm, &b, RequestLimits{.max_instances = 2});
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.body;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.body;
    EXPECT_EQ(b.size(), 0u) << c.body;
  }
  // What is fine: other keys anywhere, a repeated key whose last value is good, nesting up to
  // the limit elsewhere in the body.
  Batch b;
  ASSERT_TRUE(Decode(R"({"signature_name": "x", "instances": ["9:1"], "meta": {"a": [[1]]},
                         "instances": ["3:1 17:0.5", {"features": [[3, 1], [17, 0.5]]}]})",
                     Format::kLibsvm, &b)
                  .ok());
  ExpectSame(b, Parsed(Format::kLibsvm, {"0 3:1 17:0.5", "0 3:1 17:0.5"}));
  // Escapes in a string instance are the JSON string's value.
  ASSERT_TRUE(Decode(R"({"instances": ["3:1\t17:0.5", "\u0033:1"]})", Format::kLibsvm, &b).ok());
  ExpectSame(b, Parsed(Format::kLibsvm, {"0 3:1\t17:0.5", "0 3:1"}));
}

TEST(ServeRequest, PredictionsReadBackAsTheSameFloats) {
  const std::vector<float> p = {
      0.1f, 1.0f / 3, 1e-30f, 0.99999994f, 0.0f, 1.0f, std::nextafter(0.5f, 1.0f)};
  const std::string body = EncodePredictResponse(p, 17);
  auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["model_version"], 17);
  ASSERT_EQ(j["predictions"].size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(static_cast<float>(j["predictions"][i].get<double>()), p[i]) << i;
  }
  const std::vector<float> bad = {NAN};
  EXPECT_EQ(nlohmann::json::parse(EncodePredictResponse(bad, 1))["predictions"][0], nullptr);
}

TEST(ServeRequest, ErrorBodiesAreJsonWhateverTheMessageHolds) {
  const std::string message = "bad \"quote\" \\ \n and \xff\xfe bytes";
  auto j = nlohmann::json::parse(EncodeError(message));
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("bad \"quote\" \\ \n and"));
}

}  // namespace
}  // namespace ferry::models

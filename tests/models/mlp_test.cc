#include "models/kernels/mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/models/kernel_test_util.h"

namespace ferry::models {
namespace {

using testing::KernelCase;
using testing::RandomCase;
using testing::RecordingTable;

TEST(MlpShape, LayoutAndParamCounts) {
  const MlpShape s{3, 4, {5, 2}};
  ASSERT_TRUE(s.Validate().ok());
  EXPECT_EQ(s.InputDim(), 12u);
  EXPECT_EQ(s.NumLayers(), 3u);
  EXPECT_EQ(s.LayerParamCount(0), 12u * 5 + 5);
  EXPECT_EQ(s.LayerParamCount(1), 5u * 2 + 2);
  EXPECT_EQ(s.LayerParamCount(2), 2u * 1 + 1);
  EXPECT_EQ(s.TotalParamCount(), 65u + 12 + 3);
  const MlpShape linear{2, 3, {}};
  EXPECT_EQ(linear.NumLayers(), 1u);
  EXPECT_EQ(linear.LayerParamCount(0), 7u);
}

TEST(MlpShape, EncodeParseRoundTripAndErrors) {
  const MlpShape s{39, 8, {256, 128}};
  EXPECT_EQ(s.Encode(), "fields=39,embed_dim=8,hidden=256x128");
  auto parsed = MlpShape::Parse(s.Encode());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, s);
  const MlpShape none{2, 3, {}};
  EXPECT_EQ(none.Encode(), "fields=2,embed_dim=3,hidden=");
  ASSERT_TRUE(MlpShape::Parse(none.Encode()).ok());
  EXPECT_EQ(*MlpShape::Parse(none.Encode()), none);
  for (const char* bad :
       {"", "fields=39", "fields=39,embed_dim=8",
        "fields=0,embed_dim=8,hidden=", "fields=3,embed_dim=8,hidden=4x0",
        "fields=3,embed_dim=x,hidden=", "fields=3,embed_dim=8,hidden=4,fields=3",
        "fields=3,embed_dim=8,hidden=4x", "fields=3,embed_dim=8,hidden=4,bogus=1"}) {
    auto r = MlpShape::Parse(bad);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(MlpShape, InitIsDeterministicAndScaled) {
  const MlpShape s{4, 8, {16}};
  std::vector<float> a(s.LayerParamCount(0));
  std::vector<float> b(a.size());
  std::vector<float> c(a.size());
  ASSERT_TRUE(InitMlpLayer(s, 0, 42, a).ok());
  ASSERT_TRUE(InitMlpLayer(s, 0, 42, b).ok());
  ASSERT_TRUE(InitMlpLayer(s, 0, 43, c).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const double limit = std::sqrt(6.0 / 32.0);  // He-uniform, in = 32
  double sum_sq = 0;
  for (size_t i = 0; i < 16 * 32; ++i) {
    EXPECT_LE(std::fabs(a[i]), limit);
    sum_sq += a[i] * a[i];
  }
  // Variance of U(-l, l) is l^2 / 3 = 2 / in.
  EXPECT_NEAR(sum_sq / (16 * 32), 2.0 / 32.0, 0.2 * 2.0 / 32.0);
  for (size_t i = 16 * 32; i < a.size(); ++i) EXPECT_EQ(a[i], 0.0f);
  std::vector<float> out(s.LayerParamCount(1));
  ASSERT_TRUE(InitMlpLayer(s, 1, 42, out).ok());
  for (size_t i = 0; i < 16; ++i) EXPECT_LE(std::fabs(out[i]), std::sqrt(6.0 / 17.0));
  EXPECT_EQ(InitMlpLayer(s, 2, 42, out).code(), Code::kInvalidArgument);
  EXPECT_EQ(InitMlpLayer(s, 0, 42, out).code(), Code::kInvalidArgument);
}

// Parameters of the whole model, in double, for the reference.
struct RefParams {
  std::vector<double> wide;                // rows x 1 (empty: no wide part)
  std::vector<double> emb;                 // rows x E
  std::vector<std::vector<double>> dense;  // per layer
};

double RefMlpLoss(const MlpShape& shape, const KernelCase& c, const RefParams& p, uint32_t bias_u) {
  const size_t e_dim = shape.embed_dim;
  double loss = 0;
  for (size_t i = 0; i < c.batch.size(); ++i) {
    std::vector<double> h(shape.InputDim(), 0.0);
    double z = 0;
    if (!p.wide.empty() && bias_u != kNoBias) z += p.wide[bias_u];
    for (uint32_t j = c.batch.offsets[i]; j < c.batch.offsets[i + 1]; ++j) {
      const uint32_t u = c.uidx[j];
      for (size_t t = 0; t < e_dim; ++t) {
        h[c.batch.fields[j] * e_dim + t] += c.batch.values[j] * p.emb[u * e_dim + t];
      }
      if (!p.wide.empty()) z += p.wide[u] * c.batch.values[j];
    }
    for (size_t l = 0; l < shape.NumLayers(); ++l) {
      const size_t in = shape.LayerIn(l);
      const size_t out = shape.LayerOut(l);
      std::vector<double> next(out);
      for (size_t o = 0; o < out; ++o) {
        double a = p.dense[l][out * in + o];
        for (size_t k = 0; k < in; ++k) a += p.dense[l][o * in + k] * h[k];
        next[o] = l + 1 < shape.NumLayers() ? std::max(a, 0.0) : a;
      }
      h = std::move(next);
    }
    loss += testing::RefLogLoss(z + h[0], c.batch.labels[i]);
  }
  return loss;
}

struct MlpCaseParam {
  std::vector<uint32_t> hidden;
  bool wide;
};

class MlpGradient : public ::testing::TestWithParam<MlpCaseParam> {};

TEST_P(MlpGradient, MatchesFiniteDifferences) {
  const MlpShape shape{3, 4, GetParam().hidden};
  const bool wide = GetParam().wide;
  MlpWorkspace ws;  // reused across cases of different batch sizes
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const KernelCase c = RandomCase(seed, 5 + seed * 2, 8, shape.num_fields);
    const uint32_t bias_u = wide ? c.num_unique : kNoBias;
    RecordingTable lin(c.num_unique + 1, 1, seed, 0.3f);
    RecordingTable emb(c.num_unique + 1, shape.embed_dim, seed + 7, 0.7f);
    std::vector<std::vector<float>> dense(shape.NumLayers());
    std::vector<std::vector<float>> dense_g(shape.NumLayers());
    std::vector<const float*> dense_ptr;
    std::vector<float*> grad_ptr;
    for (size_t l = 0; l < shape.NumLayers(); ++l) {
      dense[l].resize(shape.LayerParamCount(l));
      ASSERT_TRUE(InitMlpLayer(shape, l, seed, dense[l]).ok());
      // Non-zero biases so their gradients and the ReLU pattern are exercised. Never exactly 0:
      // the empty sample's pre-activation is the bias itself, and a finite difference across
      // the ReLU kink at 0 is meaningless.
      for (size_t o = 0; o < shape.LayerOut(l); ++o) {
        dense[l][shape.LayerOut(l) * shape.LayerIn(l) + o] =
            0.1f * static_cast<float>(o % 3) - 0.15f;
      }
      dense_g[l].assign(dense[l].size(), 0.0f);
      dense_ptr.push_back(dense[l].data());
      grad_ptr.push_back(dense_g[l].data());
    }
    std::vector<float> probs(c.batch.size());
    Result<double> loss =
        wide ? MlpForwardBackward(shape, c.batch, c.uidx, bias_u, lin.Reader(), lin.Writer(),
                                  emb.Reader(), emb.Writer(), dense_ptr, grad_ptr, ws, probs)
             : MlpForwardBackward(shape, c.batch, c.uidx, kNoBias, NoTable{}, NoTable{},
                                  emb.Reader(), emb.Writer(), dense_ptr, grad_ptr, ws, probs);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();

    RefParams p;
    if (wide) p.wide = testing::ToDouble(lin.w);
    p.emb = testing::ToDouble(emb.w);
    for (const auto& d : dense) p.dense.push_back(testing::ToDouble(d));
    EXPECT_NEAR(*loss, RefMlpLoss(shape, c, p, bias_u), 1e-4);

    testing::ExpectGradientNear(emb.g,
                                testing::NumericGradient(
                                    [&](const std::vector<double>& x) {
                                      RefParams q = p;
                                      q.emb = x;
                                      return RefMlpLoss(shape, c, q, bias_u);
                                    },
                                    p.emb),
                                "mlp embedding gradient");
    for (size_t l = 0; l < shape.NumLayers(); ++l) {
      testing::ExpectGradientNear(dense_g[l],
                                  testing::NumericGradient(
                                      [&](const std::vector<double>& x) {
                                        RefParams q = p;
                                        q.dense[l] = x;
                                        return RefMlpLoss(shape, c, q, bias_u);
                                      },
                                      p.dense[l]),
                                  "mlp dense gradient");
    }
    if (wide) {
      testing::ExpectGradientNear(lin.g,
                                  testing::NumericGradient(
                                      [&](const std::vector<double>& x) {
                                        RefParams q = p;
                                        q.wide = x;
                                        return RefMlpLoss(shape, c, q, bias_u);
                                      },
                                      p.wide),
                                  "mlp wide gradient");
      EXPECT_EQ(lin.read, testing::ExpectedRows(c, bias_u));
      EXPECT_EQ(lin.written, testing::ExpectedRows(c, bias_u));
    } else {
      EXPECT_TRUE(lin.read.empty());
    }
    EXPECT_EQ(emb.read, testing::ExpectedRows(c, kNoBias));
    EXPECT_EQ(emb.written, testing::ExpectedRows(c, kNoBias));

    // Forward only: same probabilities and loss, no gradient written.
    std::vector<float> probs2(c.batch.size());
    Result<double> loss2 = wide ? MlpForward(shape, c.batch, c.uidx, bias_u, lin.Reader(),
                                             emb.Reader(), dense_ptr, ws, probs2)
                                : MlpForward(shape, c.batch, c.uidx, kNoBias, NoTable{},
                                             emb.Reader(), dense_ptr, ws, probs2);
    ASSERT_TRUE(loss2.ok()) << loss2.status().ToString();
    EXPECT_NEAR(*loss2, *loss, 1e-9);
    for (size_t i = 0; i < probs.size(); ++i) EXPECT_FLOAT_EQ(probs2[i], probs[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlpGradient,
                         ::testing::Values(MlpCaseParam{{5, 3}, false}, MlpCaseParam{{6}, true},
                                           MlpCaseParam{{}, true}),
                         [](const auto& info) {
                           return "Hidden" + std::to_string(info.param.hidden.size()) +
                                  (info.param.wide ? "Wide" : "Deep");
                         });

// F = 1, E = 1, one hidden layer of 2: pool = 2 * 0.5 = 1, pre = [1, -1], h = [1, 0],
// logit = 2 * 1 + 5 * 0 + 0.5 = 2.5, y = 1.
TEST(MlpKernel, HandComputed) {
  const MlpShape shape{1, 1, {2}};
  Batch b;
  b.labels = {1.0f};
  b.offsets = {0, 1};
  b.ids = {77};
  b.values = {2.0f};
  b.fields = {0};
  const std::vector<uint32_t> uidx = {0};
  float e = 0.5f;
  float ge = 0.0f;
  std::vector<float> l0 = {1.0f, -1.0f, 0.0f, 0.0f};  // W0 = [[1], [-1]], b0 = [0, 0]
  std::vector<float> l1 = {2.0f, 5.0f, 0.5f};         // W1 = [2, 5], b1 = 0.5
  std::vector<float> g0(4, 0.0f);
  std::vector<float> g1(3, 0.0f);
  const std::vector<const float*> dense = {l0.data(), l1.data()};
  const std::vector<float*> grads = {g0.data(), g1.data()};
  MlpWorkspace ws;
  std::vector<float> probs(1);
  auto loss = MlpForwardBackward(
      shape, b, uidx, kNoBias, NoTable{}, NoTable{}, [&](uint32_t) { return &e; },
      [&](uint32_t) { return &ge; }, dense, grads, ws, probs);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const double p = 1.0 / (1.0 + std::exp(-2.5));
  const double dz = p - 1.0;
  EXPECT_NEAR(*loss, std::log1p(std::exp(-2.5)), 1e-6);
  EXPECT_NEAR(probs[0], p, 1e-6);
  EXPECT_NEAR(g1[0], dz * 1.0, 1e-6);
  EXPECT_NEAR(g1[1], 0.0, 1e-7);  // h[1] = 0
  EXPECT_NEAR(g1[2], dz, 1e-6);
  EXPECT_NEAR(g0[0], 2 * dz, 1e-6);  // d pre0 = W1[0] dz, times pool 1
  EXPECT_NEAR(g0[1], 0.0, 1e-7);     // ReLU closed
  EXPECT_NEAR(g0[2], 2 * dz, 1e-6);
  EXPECT_NEAR(g0[3], 0.0, 1e-7);
  EXPECT_NEAR(ge, 2.0 * 2 * dz, 1e-6);  // value * d pool
}

TEST(MlpKernel, RefusesBadInputsWithoutTouchingGradients) {
  const MlpShape shape{2, 2, {3}};
  KernelCase c = RandomCase(5, 4, 5, 2);
  RecordingTable emb(c.num_unique, 2, 1, 0.5f);
  std::vector<std::vector<float>> dense = {std::vector<float>(shape.LayerParamCount(0), 0.1f),
                                           std::vector<float>(shape.LayerParamCount(1), 0.1f)};
  std::vector<float> g0(shape.LayerParamCount(0), 0.0f);
  std::vector<float> g1(shape.LayerParamCount(1), 0.0f);
  const std::vector<const float*> ptrs = {dense[0].data(), dense[1].data()};
  const std::vector<float*> grads = {g0.data(), g1.data()};
  MlpWorkspace ws;
  std::vector<float> probs(c.batch.size());
  auto run = [&](const KernelCase& k, std::span<const float* const> p, std::span<float* const> g,
                 uint32_t bias_u) {
    return MlpForwardBackward(shape, k.batch, k.uidx, bias_u, NoTable{}, NoTable{}, emb.Reader(),
                              emb.Writer(), p, g, ws, probs)
        .status();
  };
  KernelCase bad_field = c;
  bad_field.batch.fields[0] = 2;
  Status s = run(bad_field, ptrs, grads, kNoBias);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("field 2"), std::string::npos) << s.message();
  KernelCase no_fields = c;
  no_fields.batch.fields.clear();
  EXPECT_EQ(run(no_fields, ptrs, grads, kNoBias).code(), Code::kInvalidArgument);
  EXPECT_EQ(run(c, std::span<const float* const>(ptrs).first(1), grads, kNoBias).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(run(c, ptrs, std::span<float* const>(grads).first(1), kNoBias).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(run(c, ptrs, grads, 0).code(), Code::kInvalidArgument);  // bias without wide table
  EXPECT_TRUE(emb.written.empty());
  for (float g : g0) EXPECT_EQ(g, 0.0f);
  for (float g : g1) EXPECT_EQ(g, 0.0f);
}

}  // namespace
}  // namespace ferry::models

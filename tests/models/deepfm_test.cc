#include "models/kernels/deepfm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "models/kernels/mlp.h"
#include "tests/models/kernel_test_util.h"

namespace ferry::models {
namespace {

using testing::KernelCase;
using testing::RandomCase;
using testing::RecordingTable;

// F = 2, E = 2, no hidden layer (the dense part is one linear layer 4 -> 1), y = 0.
//   u0 in field 0 with x = 1, e0 = [1, 0];  u1 in field 1 with x = 2, e1 = [0.5, 1]
//   linear  = bias 0.3 + 0.1 * 1 - 0.2 * 2                          = 0
//   fm      = <e0, e1> x0 x1 = 0.5 * 2                               = 1
//   input   = [pool0 | pool1] = [1, 0 | 1, 2]
//   deep    = [0.5, -1, 0.25, 0.5] . input - 0.5 = 0.5 + 0.25 + 1 - 0.5 = 1.25
//   z       = 2.25, dz = p = sigmoid(2.25)
// Embedding gradients: s = e0 x0 + e1 x1 = [2, 2], dpool = dz W = dz [0.5, -1 | 0.25, 0.5]
//   g_e0 = x0 dpool0 + dz x0 (s - e0 x0) = dz ([0.5, -1] + [1, 2])  = dz [1.5, 1]
//   g_e1 = x1 dpool1 + dz x1 (s - e1 x1) = dz ([0.5, 1] + [2, 0])   = dz [2.5, 1]
TEST(DeepFmKernel, HandComputed) {
  const MlpShape shape{2, 2, {}};
  Batch b;
  b.labels = {0.0f};
  b.offsets = {0, 2};
  b.ids = {10, 11};
  b.values = {1.0f, 2.0f};
  b.fields = {0, 1};
  const std::vector<uint32_t> uidx = {0, 1};
  std::vector<float> w = {0.1f, -0.2f, 0.3f};
  std::vector<float> gw(3, 0.0f);
  std::vector<float> e = {1.0f, 0.0f, 0.5f, 1.0f};
  std::vector<float> ge(4, 0.0f);
  std::vector<float> layer = {0.5f, -1.0f, 0.25f, 0.5f, -0.5f};
  std::vector<float> glayer(5, 0.0f);
  const std::vector<const float*> dense = {layer.data()};
  const std::vector<float*> grads = {glayer.data()};
  MlpWorkspace ws;
  std::vector<float> probs(1);
  auto loss = DeepFmForwardBackward(
      shape, b, uidx, 2, [&](uint32_t u) { return &w[u]; }, [&](uint32_t u) { return &gw[u]; },
      [&](uint32_t u) { return &e[2 * u]; }, [&](uint32_t u) { return &ge[2 * u]; }, dense, grads,
      ws, probs);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const double dz = 1.0 / (1.0 + std::exp(-2.25));
  EXPECT_NEAR(*loss, std::log1p(std::exp(2.25)), 1e-6);
  EXPECT_NEAR(probs[0], dz, 1e-6);
  EXPECT_NEAR(gw[0], dz, 1e-6);
  EXPECT_NEAR(gw[1], 2 * dz, 1e-6);
  EXPECT_NEAR(gw[2], dz, 1e-6);
  const std::vector<double> want_layer = {dz, 0.0, dz, 2 * dz, dz};
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(glayer[i], want_layer[i], 1e-6) << "layer " << i;
  const std::vector<double> want_e = {1.5 * dz, dz, 2.5 * dz, dz};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(ge[i], want_e[i], 1e-6) << "ge " << i;
}

// All parameters in double for the reference.
struct RefModel {
  std::vector<double> lin;                 // rows x 1; empty: no linear part
  std::vector<double> emb;                 // rows x E
  std::vector<std::vector<double>> dense;  // layer l: W (out x in, row-major) then b (out)
};

// out = W in + b, ReLU unless it is the last layer: one layer of the straightforward MLP.
std::vector<double> RefLayer(const MlpShape& shape, const std::vector<double>& params, size_t l,
                             const std::vector<double>& in) {
  const size_t rows = shape.LayerOut(l);
  const size_t cols = shape.LayerIn(l);
  std::vector<double> out(params.begin() + rows * cols, params.end());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t col = 0; col < cols; ++col) out[r] += params[r * cols + col] * in[col];
    if (l + 1 < shape.NumLayers()) out[r] = std::max(0.0, out[r]);
  }
  return out;
}

// DeepFM's loss, the FM part as the explicit pairwise sum over occurrences (not the kernel's
// sum-of-squares identity).
double RefDeepFmLoss(const MlpShape& shape, const KernelCase& c, const RefModel& m,
                     uint32_t bias_u) {
  const Batch& b = c.batch;
  const size_t dim = shape.embed_dim;
  auto emb = [&](uint32_t j, size_t t) { return m.emb[c.uidx[j] * dim + t]; };
  double loss = 0;
  for (size_t s = 0; s < b.size(); ++s) {
    double z = m.lin.empty() || bias_u == kNoBias ? 0.0 : m.lin[bias_u];
    std::vector<double> act(shape.InputDim(), 0.0);
    for (uint32_t i = b.offsets[s]; i < b.offsets[s + 1]; ++i) {
      if (!m.lin.empty()) z += m.lin[c.uidx[i]] * b.values[i];
      for (size_t t = 0; t < dim; ++t) act[b.fields[i] * dim + t] += emb(i, t) * b.values[i];
      for (uint32_t j = i + 1; j < b.offsets[s + 1]; ++j) {
        for (size_t t = 0; t < dim; ++t) z += emb(i, t) * emb(j, t) * b.values[i] * b.values[j];
      }
    }
    for (size_t l = 0; l < shape.NumLayers(); ++l) act = RefLayer(shape, m.dense[l], l, act);
    loss += testing::RefLogLoss(z + act[0], b.labels[s]);
  }
  return loss;
}

// Dense layers initialised as the trainer does, with biases moved off 0 (an empty sample's
// pre-activations are the biases; a finite difference across the ReLU kink means nothing).
struct DenseLayers {
  DenseLayers(const MlpShape& shape, uint64_t seed) {
    for (size_t l = 0; l < shape.NumLayers(); ++l) {
      std::vector<float>& p = params.emplace_back(shape.LayerParamCount(l));
      EXPECT_TRUE(InitMlpLayer(shape, l, seed, p).ok());
      const size_t weights = shape.LayerIn(l) * shape.LayerOut(l);
      for (size_t o = weights; o < p.size(); ++o) p[o] = 0.05f * static_cast<float>(o % 4) + 0.02f;
      grads.emplace_back(p.size(), 0.0f);
    }
    for (size_t l = 0; l < params.size(); ++l) {
      param_ptrs.push_back(params[l].data());
      grad_ptrs.push_back(grads[l].data());
    }
  }
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> grads;
  std::vector<const float*> param_ptrs;
  std::vector<float*> grad_ptrs;
};

struct DeepFmParam {
  const char* name;
  std::vector<uint32_t> hidden;
  bool linear;
};

void PrintTo(const DeepFmParam& p, std::ostream* os) {
  *os << p.name << ": " << p.hidden.size() << " hidden layers, " << (p.linear ? "with" : "without")
      << " the linear part";
}

class DeepFmGradient : public ::testing::TestWithParam<DeepFmParam> {};

TEST_P(DeepFmGradient, MatchesFiniteDifferences) {
  const MlpShape shape{3, 4, GetParam().hidden};
  const bool linear = GetParam().linear;
  MlpWorkspace ws;  // reused across batches of different sizes
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const KernelCase c = RandomCase(seed, 4 + seed * 2, 8, shape.num_fields);
    // With a linear part, alternate bias / no bias.
    const uint32_t bias_u = linear && seed % 2 == 1 ? c.num_unique : kNoBias;
    RecordingTable lin(c.num_unique + 1, 1, seed, 0.3f);
    RecordingTable emb(c.num_unique + 1, shape.embed_dim, seed + 11, 0.5f);
    DenseLayers dense(shape, seed);
    std::vector<float> probs(c.batch.size());
    Result<double> loss = linear
                              ? DeepFmForwardBackward(shape, c.batch, c.uidx, bias_u, lin.Reader(),
                                                      lin.Writer(), emb.Reader(), emb.Writer(),
                                                      dense.param_ptrs, dense.grad_ptrs, ws, probs)
                              : DeepFmForwardBackward(shape, c.batch, c.uidx, kNoBias, NoTable{},
                                                      NoTable{}, emb.Reader(), emb.Writer(),
                                                      dense.param_ptrs, dense.grad_ptrs, ws, probs);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();

    RefModel m;
    if (linear) m.lin = testing::ToDouble(lin.w);
    m.emb = testing::ToDouble(emb.w);
    for (const auto& p : dense.params) m.dense.push_back(testing::ToDouble(p));
    EXPECT_NEAR(*loss, RefDeepFmLoss(shape, c, m, bias_u), 1e-4);

    // Every coordinate of every table, touched or not.
    auto numeric = [&](auto set) {
      return [&, set](const std::vector<double>& x) {
        RefModel q = m;
        set(q, x);
        return RefDeepFmLoss(shape, c, q, bias_u);
      };
    };
    testing::ExpectGradientNear(
        emb.g,
        testing::NumericGradient(numeric([](RefModel& q, const auto& x) { q.emb = x; }), m.emb),
        "deepfm embedding gradient");
    for (size_t l = 0; l < shape.NumLayers(); ++l) {
      const std::string what = "deepfm dense layer " + std::to_string(l) + " gradient";
      testing::ExpectGradientNear(
          dense.grads[l],
          testing::NumericGradient(numeric([l](RefModel& q, const auto& x) { q.dense[l] = x; }),
                                   m.dense[l]),
          what.c_str());
    }
    if (linear) {
      testing::ExpectGradientNear(
          lin.g,
          testing::NumericGradient(numeric([](RefModel& q, const auto& x) { q.lin = x; }), m.lin),
          "deepfm linear gradient");
      testing::ExpectTouchedRows(lin, c, bias_u, "deepfm linear table");
    } else {
      EXPECT_TRUE(lin.read.empty());
    }
    testing::ExpectTouchedRows(emb, c, kNoBias, "deepfm embedding table");

    // Forward only: the same probabilities and loss.
    std::vector<float> probs2(c.batch.size());
    Result<double> loss2 = linear ? DeepFmForward(shape, c.batch, c.uidx, bias_u, lin.Reader(),
                                                  emb.Reader(), dense.param_ptrs, ws, probs2)
                                  : DeepFmForward(shape, c.batch, c.uidx, kNoBias, NoTable{},
                                                  emb.Reader(), dense.param_ptrs, ws, probs2);
    ASSERT_TRUE(loss2.ok()) << loss2.status().ToString();
    EXPECT_DOUBLE_EQ(*loss2, *loss);
    EXPECT_EQ(probs2, probs);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeepFmGradient,
                         ::testing::Values(DeepFmParam{"TwoHiddenNoLinear", {5, 3}, false},
                                           DeepFmParam{"OneHiddenLinear", {6}, true},
                                           DeepFmParam{"NoHiddenLinear", {}, true},
                                           DeepFmParam{"OneHiddenNoLinear", {4}, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// DeepFM is the MLP plus the FM term: with the same tables, the logits differ by exactly the
// FM pairs, so on a batch with no pairs (one feature per sample) the two kernels agree.
TEST(DeepFmKernel, EqualsMlpWhenNoSampleHasAPair) {
  const MlpShape shape{2, 3, {4}};
  Batch b;
  b.labels = {1.0f, 0.0f, 1.0f};
  b.offsets = {0, 1, 1, 2};
  b.ids = {3, 4};
  b.values = {0.7f, -1.2f};
  b.fields = {1, 0};
  const std::vector<uint32_t> uidx = {0, 1};
  RecordingTable emb(2, shape.embed_dim, 3, 0.5f);
  DenseLayers dense(shape, 9);
  MlpWorkspace ws;
  std::vector<float> p_fm(3);
  std::vector<float> p_mlp(3);
  auto a =
      DeepFmForward(shape, b, uidx, kNoBias, NoTable{}, emb.Reader(), dense.param_ptrs, ws, p_fm);
  auto m =
      MlpForward(shape, b, uidx, kNoBias, NoTable{}, emb.Reader(), dense.param_ptrs, ws, p_mlp);
  ASSERT_TRUE(a.ok() && m.ok());
  EXPECT_DOUBLE_EQ(*a, *m);
  EXPECT_EQ(p_fm, p_mlp);
}

TEST(DeepFmKernel, RefusesBadInputsWithoutTouchingGradients) {
  const MlpShape shape{2, 2, {3}};
  const KernelCase good = RandomCase(5, 4, 5, 2);
  KernelCase bad_field = good;
  bad_field.batch.fields[1] = 2;
  KernelCase no_fields = good;
  no_fields.batch.fields.clear();
  RecordingTable lin(good.num_unique + 1, 1, 1, 0.5f);
  RecordingTable emb(good.num_unique, 2, 2, 0.5f);
  DenseLayers dense(shape, 4);
  const std::span<const float* const> params(dense.param_ptrs);
  const std::span<float* const> grads(dense.grad_ptrs);
  const std::vector<float*> null_grad = {dense.grad_ptrs[0], nullptr};
  struct Bad {
    const char* why;
    MlpShape shape;
    const KernelCase& input;
    std::span<const float* const> params;
    std::span<float* const> grads;
    size_t probs;
  };
  const size_t n = good.batch.size();
  const Bad cases[] = {
      {"field out of range", shape, bad_field, params, grads, n},
      {"batch without fields", shape, no_fields, params, grads, n},
      {"invalid shape (E = 0)", MlpShape{2, 0, {3}}, good, params, grads, n},
      {"shape with fewer layers than the dense arrays", MlpShape{2, 2, {}}, good, params, grads, n},
      {"one parameter pointer short", shape, good, params.first(1), grads, n},
      {"one gradient pointer short", shape, good, params, grads.first(1), n},
      {"null gradient pointer", shape, good, params, null_grad, n},
      {"probs of the wrong size", shape, good, params, grads, n + 1},
  };
  MlpWorkspace ws;
  for (const Bad& b : cases) {
    std::vector<float> probs(b.probs);
    const Status s = DeepFmForwardBackward(b.shape, b.input.batch, b.input.uidx, good.num_unique,
                                           lin.Reader(), lin.Writer(), emb.Reader(), emb.Writer(),
                                           b.params, b.grads, ws, probs)
                         .status();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << b.why;
  }
  // Forward only refuses the same way, naming the model and the occurrence.
  std::vector<float> probs(n);
  const Status s = DeepFmForward(shape, bad_field.batch, bad_field.uidx, kNoBias, NoTable{},
                                 emb.Reader(), params, ws, probs)
                       .status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(s.message().starts_with("deepfm: feature 1 has field 2")) << s.message();
  // A bias index without the linear table.
  EXPECT_EQ(DeepFmForwardBackward(shape, good.batch, good.uidx, 0, NoTable{}, NoTable{},
                                  emb.Reader(), emb.Writer(), params, grads, ws, probs)
                .status()
                .code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(lin.written.empty());
  EXPECT_TRUE(emb.written.empty());
  EXPECT_EQ(lin.g, std::vector<float>(lin.g.size(), 0.0f));
  EXPECT_EQ(emb.g, std::vector<float>(emb.g.size(), 0.0f));
  for (const auto& layer : dense.grads) EXPECT_EQ(layer, std::vector<float>(layer.size(), 0.0f));
  // The same input with good arguments runs and writes.
  EXPECT_TRUE(DeepFmForwardBackward(shape, good.batch, good.uidx, good.num_unique, lin.Reader(),
                                    lin.Writer(), emb.Reader(), emb.Writer(), params, grads, ws,
                                    probs)
                  .ok());
  EXPECT_FALSE(emb.written.empty());
}

}  // namespace
}  // namespace ferry::models

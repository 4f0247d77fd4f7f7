#include "tests/models/kernel_test_util.h"

#include <cmath>

namespace ferry::models::testing {

KernelCase RandomCase(uint64_t seed, size_t samples, uint32_t num_unique, uint32_t num_fields) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> pick_u(0, num_unique - 1);
  std::uniform_int_distribution<uint32_t> pick_f(0, num_fields - 1);
  std::uniform_int_distribution<int> pick_n(1, 6);
  std::uniform_real_distribution<float> pick_v(-1.5f, 1.5f);
  KernelCase c;
  c.num_unique = num_unique;
  c.batch.offsets.assign(1, 0);
  auto add = [&](uint32_t u, uint32_t f) {
    c.uidx.push_back(u);
    c.batch.ids.push_back(1000 + u * 7919ull);
    c.batch.values.push_back(pick_v(rng));
    c.batch.fields.push_back(f);
  };
  for (size_t i = 0; i < samples; ++i) {
    c.batch.labels.push_back(static_cast<float>(rng() & 1));
    if (i == 0) {
      const uint32_t u = pick_u(rng);
      add(u, 0);
      add(u, 0);               // repeated id, same field
      add(u, num_fields - 1);  // and in another field (hashed crosses can collide)
      add(pick_u(rng), pick_f(rng));
    } else if (i != 1) {  // sample 1 stays empty
      const int n = pick_n(rng);
      for (int k = 0; k < n; ++k) add(pick_u(rng), pick_f(rng));
    }
    c.batch.offsets.push_back(static_cast<uint32_t>(c.uidx.size()));
  }
  return c;
}

RecordingTable::RecordingTable(uint32_t rows_in, uint32_t dim_in, uint64_t seed, float scale)
    : rows(rows_in),
      dim(dim_in),
      w(static_cast<size_t>(rows_in) * dim_in),
      g(static_cast<size_t>(rows_in) * dim_in, 0.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> v(-scale, scale);
  for (float& x : w) x = v(rng);
}

std::set<uint32_t> ExpectedRows(const KernelCase& c, uint32_t bias_u) {
  std::set<uint32_t> rows(c.uidx.begin(), c.uidx.end());
  if (bias_u != 0xffffffffu) rows.insert(bias_u);
  return rows;
}

void ExpectTouchedRows(const RecordingTable& table, const KernelCase& c, uint32_t bias_u,
                       const char* what) {
  const std::set<uint32_t> rows = ExpectedRows(c, bias_u);
  EXPECT_EQ(table.read, rows) << what << ": rows read";
  EXPECT_EQ(table.written, rows) << what << ": rows written";
}

std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                    std::vector<double> x, double h) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = f(x);
    x[i] = saved - h;
    const double minus = f(x);
    x[i] = saved;
    grad[i] = (plus - minus) / (2 * h);
  }
  return grad;
}

std::vector<double> ToDouble(std::span<const float> v) {
  return {v.begin(), v.end()};
}

void ExpectGradientNear(std::span<const float> analytic, std::span<const double> numeric,
                        const char* what, double rtol, double atol) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < analytic.size() && failures < 10; ++i) {
    const double tol = atol + rtol * std::fabs(numeric[i]);
    if (!(std::fabs(analytic[i] - numeric[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: kernel " << analytic[i] << ", finite difference "
                    << numeric[i];
      ++failures;
    }
  }
}

double RefSigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

// Direct form -y log p - (1-y) log(1-p), fine in double for the small logits of these tests.
double RefLogLoss(double z, double y) {
  const double p = RefSigmoid(z);
  return -(y * std::log(p) + (1.0 - y) * std::log(1.0 - p));
}

}  // namespace ferry::models::testing

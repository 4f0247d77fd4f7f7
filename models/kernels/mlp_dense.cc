// Dense layers of the MLP kernel with Eigen, batched: one matrix-matrix product per layer and
// direction instead of per-sample matrix-vector products.
//
// Shapes for layer l (out x in weights W, bias b), n samples, activations column-major:
//   forward   Z = W X + b 1^T            X: in x n (previous activations), Z: out x n
//             H = max(Z, 0)              (hidden layers; the last layer keeps Z: the logits)
//   backward  dW += D X^T                D: out x n (d loss / d Z)
//             db += D 1
//             dX  = W^T D,  then  * [X > 0] if X itself came out of a ReLU
// [X > 0] is the ReLU derivative: H > 0 exactly when Z > 0, so only post-ReLU activations are
// kept (the derivative at Z == 0 is taken as 0).
#include "models/kernels/mlp_dense.h"

#include <Eigen/Core>
#include <string>
#include <utility>

namespace ferry::models {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Index = Eigen::Index;

Status CheckPointers(const MlpShape& shape, size_t count, bool any_null, const char* what) {
  if (count != shape.NumLayers()) {
    return InvalidArgument(std::string("mlp: ") + std::to_string(count) + " " + what +
                           " pointers for a " + std::to_string(shape.NumLayers()) + "-layer shape");
  }
  if (any_null) return InvalidArgument(std::string("mlp: a layer's ") + what + " pointer is null");
  return Status::Ok();
}

template <typename P>
bool AnyNull(std::span<P* const> ptrs) {
  for (P* p : ptrs) {
    if (p == nullptr) return true;
  }
  return false;
}

}  // namespace

Status MlpDenseForward(const MlpShape& shape, std::span<const float* const> params, size_t n,
                       MlpWorkspace& ws) {
  FERRY_RETURN_IF_ERROR(CheckPointers(shape, params.size(), AnyNull(params), "parameter"));
  if (ws.input.size() < shape.InputDim() * n) {
    return InvalidArgument("mlp: workspace input holds " + std::to_string(ws.input.size()) +
                           " floats, the batch needs " + std::to_string(shape.InputDim() * n));
  }
  const size_t layers = shape.NumLayers();
  ws.hidden.resize(layers - 1);
  ws.logits.resize(n);
  const float* prev = ws.input.data();
  for (size_t l = 0; l < layers; ++l) {
    const Index in = static_cast<Index>(shape.LayerIn(l));
    const Index out = static_cast<Index>(shape.LayerOut(l));
    const Eigen::Map<const RowMajor> w(params[l], out, in);
    const Eigen::Map<const Eigen::VectorXf> b(params[l] + out * in, out);
    const Eigen::Map<const ColMajor> x(prev, in, static_cast<Index>(n));
    float* dst = ws.logits.data();
    if (l + 1 < layers) {
      ws.hidden[l].resize(static_cast<size_t>(out) * n);
      dst = ws.hidden[l].data();
    }
    Eigen::Map<ColMajor> z(dst, out, static_cast<Index>(n));
    z.noalias() = w * x;
    z.colwise() += b;
    if (l + 1 < layers) z = z.cwiseMax(0.0f);
    prev = dst;
  }
  return Status::Ok();
}

Status MlpDenseBackward(const MlpShape& shape, std::span<const float* const> params,
                        std::span<float* const> grads, size_t n, std::span<const float> dlogit,
                        MlpWorkspace& ws) {
  FERRY_RETURN_IF_ERROR(CheckPointers(shape, params.size(), AnyNull(params), "parameter"));
  FERRY_RETURN_IF_ERROR(CheckPointers(shape, grads.size(), AnyNull(grads), "gradient"));
  const size_t layers = shape.NumLayers();
  if (dlogit.size() != n || ws.hidden.size() != layers - 1 ||
      ws.input.size() < shape.InputDim() * n) {
    return InvalidArgument("mlp: backward called without a matching forward pass (" +
                           std::to_string(dlogit.size()) + " logit gradients for " +
                           std::to_string(n) + " samples)");
  }
  for (size_t l = 0; l + 1 < layers; ++l) {
    if (ws.hidden[l].size() < shape.LayerOut(l) * n) {
      return InvalidArgument("mlp: backward called without a matching forward pass");
    }
  }
  ws.delta.assign(dlogit.begin(), dlogit.end());
  ws.input_grad.resize(shape.InputDim() * n);
  for (size_t l = layers; l-- > 0;) {
    const Index in = static_cast<Index>(shape.LayerIn(l));
    const Index out = static_cast<Index>(shape.LayerOut(l));
    const Eigen::Map<const RowMajor> w(params[l], out, in);
    Eigen::Map<RowMajor> gw(grads[l], out, in);
    Eigen::Map<Eigen::VectorXf> gb(grads[l] + out * in, out);
    const float* x_data = l == 0 ? ws.input.data() : ws.hidden[l - 1].data();
    const Eigen::Map<const ColMajor> x(x_data, in, static_cast<Index>(n));
    const Eigen::Map<const ColMajor> d(ws.delta.data(), out, static_cast<Index>(n));
    gw.noalias() += d * x.transpose();
    gb += d.rowwise().sum();
    float* dst = ws.input_grad.data();
    if (l > 0) {
      ws.delta_prev.resize(static_cast<size_t>(in) * n);
      dst = ws.delta_prev.data();
    }
    Eigen::Map<ColMajor> dx(dst, in, static_cast<Index>(n));
    dx.noalias() = w.transpose() * d;
    if (l > 0) {
      dx.array() *= (x.array() > 0.0f).cast<float>();
      std::swap(ws.delta, ws.delta_prev);
    }
  }
  return Status::Ok();
}

}  // namespace ferry::models

// Lazy Adam's sparse step (TensorFlow Addons' LazyAdam) as one kernel: for each touched row i,
//
//   m_i <- b1 m_i + (1 - b1) g_i;   v_i <- b2 v_i + (1 - b2) g_i^2
//   var_i <- var_i - (alpha m_i) / (sqrt(v_i) + eps)
//
// TFA runs it as two gathers, nine element-wise ops on the gathered rows (each writing a temporary)
// and three scatters: each touched row goes through memory over a dozen times. Here each row of the
// variable and its moments is read and written once,
// with the same rounded operations in TFA's order, so the results are its bits. The indices must
// be unique (the optimizer sums repeated ones first): rows are updated in parallel. Every index
// is checked before any row is written, so a refused step changes nothing.
#include <cmath>

#include "fused_step.h"

namespace {

using namespace optimizers_kernels;  // NOLINT: this file's kernels are written in its terms

// One row of `n` elements; a plain loop, which -O3 vectorizes (the same rounded operations in
// packets: no contraction, exact square roots and divisions).
template <typename T>
inline void LazyAdamRow(T* __restrict var, T* __restrict m, T* __restrict v, const T* __restrict g, Eigen::Index n,
                        T alpha, T beta1, T one_minus_beta1, T beta2, T one_minus_beta2, T epsilon) {
  for (Eigen::Index j = 0; j < n; ++j) {
    const T m_j = beta1 * m[j] + one_minus_beta1 * g[j];
    const T v_j = beta2 * v[j] + one_minus_beta2 * (g[j] * g[j]);
    m[j] = m_j;
    v[j] = v_j;
    var[j] = var[j] - (alpha * m_j) / (std::sqrt(v_j) + epsilon);
  }
}

template <typename T, typename Index>
class FusedSparseApplyLazyAdamOp : public tf::OpKernel {
 public:
  explicit FusedSparseApplyLazyAdamOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    auto locks = tf::MaybeLockVariableInputMutexesInOrder<CPUDevice, T>(ctx, /*do_lock=*/true, /*sparse=*/true,
                                                                         {0, 1, 2});
    tf::Tensor arrays[3];  // var, m, v
    for (int i = 0; i < 3; ++i) {
      OP_REQUIRES_OK(ctx, tf::GetInputTensorFromVariable<CPUDevice, T>(ctx, i, true, true, &arrays[i]));
      OP_REQUIRES(ctx, arrays[i].IsInitialized(),
                  absl::FailedPreconditionError(absl::StrCat(name(), ": input ", i, " is not initialized")));
    }
    const tf::TensorShape& shape = arrays[0].shape();
    OP_REQUIRES(ctx, shape.dims() >= 1,
                absl::InvalidArgumentError(absl::StrCat(name(), ": var must have rows. Received: a scalar")));
    for (int i = 1; i < 3; ++i) {
      OP_REQUIRES(ctx, arrays[i].shape().IsSameSize(shape),
                  absl::InvalidArgumentError(absl::StrCat(name(), ": m and v must have var's shape ",
                                                          shape.DebugString(), ". Received: input ", i, " of shape ",
                                                          arrays[i].shape().DebugString())));
    }
    for (int i = 3; i < 7; ++i) {
      OP_REQUIRES(ctx, tf::TensorShapeUtils::IsScalar(ctx->input(i).shape()),
                  absl::InvalidArgumentError(absl::StrCat(name(), ": input ", i, " must be a scalar. Received: ",
                                                          ctx->input(i).shape().DebugString())));
    }
    const tf::Tensor& grad = ctx->input(7);
    const tf::Tensor& indices = ctx->input(8);
    OP_REQUIRES(ctx, tf::TensorShapeUtils::IsVector(indices.shape()),
                absl::InvalidArgumentError(absl::StrCat(name(), ": indices must be a vector. Received: shape ",
                                                        indices.shape().DebugString())));
    tf::TensorShape rows_shape = shape;
    rows_shape.set_dim(0, indices.dim_size(0));
    OP_REQUIRES(ctx, grad.shape().IsSameSize(rows_shape),
                absl::InvalidArgumentError(absl::StrCat(name(), ": grad must hold one row of var per index, shape ",
                                                        rows_shape.DebugString(), ". Received: shape ",
                                                        grad.shape().DebugString())));
    const auto index = indices.vec<Index>();
    const Eigen::Index touched = index.size(), rows = shape.dim_size(0);
    for (Eigen::Index i = 0; i < touched; ++i) {
      OP_REQUIRES(ctx, index(i) >= 0 && index(i) < rows,
                  absl::InvalidArgumentError(absl::StrCat(name(), ": indices[", i, "] = ", index(i),
                                                          " is not in [0, ", rows, ")")));
    }
    if (touched == 0 || shape.num_elements() == 0) return;
    const Eigen::Index width = shape.num_elements() / rows;

    const T alpha = ctx->input(3).scalar<T>()(), beta1 = ctx->input(4).scalar<T>()();
    const T beta2 = ctx->input(5).scalar<T>()(), epsilon = ctx->input(6).scalar<T>()();
    const T one_minus_beta1 = T(1) - beta1, one_minus_beta2 = T(1) - beta2;
    T* var = arrays[0].flat<T>().data();
    T* m = arrays[1].flat<T>().data();
    T* v = arrays[2].flat<T>().data();
    const T* g = grad.flat<T>().data();
    // About 3 cycles an element in packets (a square root and a division each); software prefetch of
    // the rows ahead measured no faster.
    const Eigen::TensorOpCost cost(4 * width * sizeof(T), 3 * width * sizeof(T), 3 * width);
    ctx->eigen_device<CPUDevice>().parallelFor(touched, cost, [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i) {
        const Eigen::Index row = static_cast<Eigen::Index>(index(i)) * width;
        LazyAdamRow<T>(var + row, m + row, v + row, g + i * width, width, alpha, beta1, one_minus_beta1, beta2,
                       one_minus_beta2, epsilon);
      }
    });
  }
};

}  // namespace

REGISTER_OP("FusedSparseApplyLazyAdam")
    .Input("var: resource").Input("m: resource").Input("v: resource")
    .Input("alpha: T").Input("beta1: T").Input("beta2: T").Input("epsilon: T").Input("grad: T")
    .Input("indices: Tindices")
    .Attr("T: {float, double}").Attr("Tindices: {int32, int64}").SetShapeFn(optimizers_kernels::NoOutputs);

#define REGISTER_CPU(T, Index)                                                           \
  REGISTER_KERNEL_BUILDER(Name("FusedSparseApplyLazyAdam")                               \
                              .Device(::tensorflow::DEVICE_CPU)                          \
                              .TypeConstraint<T>("T")                                    \
                              .TypeConstraint<Index>("Tindices"),                        \
                          FusedSparseApplyLazyAdamOp<T, Index>)
REGISTER_CPU(float, tf::int32);
REGISTER_CPU(float, tf::int64);
REGISTER_CPU(double, tf::int32);
REGISTER_CPU(double, tf::int64);
#undef REGISTER_CPU

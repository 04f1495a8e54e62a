// Adam's sparse steps as kernels, each row of the variable and its slots read and written once.
//
//   FusedSparseApplyLazyAdam       the touched rows only (TensorFlow Addons' LazyAdam):
//                                  m_i <- b1 m_i + (1 - b1) g_i;   v_i <- b2 v_i + (1 - b2) g_i^2
//                                  var_i <- var_i - (alpha m_i) / (sqrt(v_i) + eps)
//   FusedSparseApplyAdam           every row (Keras 2's sparse Adam): the moments of every row decay,
//                                  the touched rows' gradients are added, every row moves:
//                                  m <- b1 m, then m_i <- m_i + (1 - b1) g_i (v likewise),
//                                  var <- var - (alpha m) / (sqrt(v) + eps)
//   DecayedSparseApplyAdam         the touched rows decayed first (TensorFlow Addons' sparse AdamW):
//                                  var_i <- var_i - decay var_i
//   SparseApplyAdamAverage         then a moving average of every row: a <- a - (a - var) rate
//   DecayedSparseApplyAdamAverage  both
//
// TFA's LazyAdam gathers the rows, runs nine element-wise ops on them (each writing a temporary)
// and scatters them back: each touched row goes through memory over a dozen times. Keras's sparse
// Adam takes a pass per element-wise op over the whole table (seven), plus TFA's gather and
// scatter of the decay, plus the average's pass. Here each array is read and written once, with the
// same rounded operations in their order, so the results are those ops' bits. Every index is
// checked before any row is written, so a refused step changes nothing.
#include <cmath>
#include <utility>

#include "fused_step.h"

namespace {

using namespace optimizers_kernels;  // NOLINT: this file's kernels are written in its terms

// A sparse step's inputs: `resources` variables of T with rows (var first, the others of its
// shape), `scalars` scalars of T, the gradient's rows and their indices, every index checked.
// Its variables' locks are shared for a step that writes the touched rows only (`dense` false),
// exclusive for one that writes every row.
template <typename T, typename Index>
class SparseInputs : public VariableInputs<T> {
 public:
  SparseInputs(tf::OpKernelContext* ctx, int resources, int scalars, bool dense)
      : VariableInputs<T>(ctx, resources, scalars, /*sparse=*/!dense) {
    if (!this->ok()) return;
    const tf::TensorShape& shape = this->array(0).shape();
    if (shape.dims() < 1) {
      this->Fail(absl::InvalidArgumentError(absl::StrCat(this->Name(), ": var must have rows. Received: a scalar")));
      return;
    }
    for (int i = 1; i < resources; ++i) {
      if (!this->array(i).shape().IsSameSize(shape)) {
        this->Fail(absl::InvalidArgumentError(absl::StrCat(this->Name(), ": every slot must have var's shape ",
                                                           shape.DebugString(), ". Received: input ", i,
                                                           " of shape ", this->array(i).shape().DebugString())));
        return;
      }
    }
    const tf::Tensor& grad = ctx->input(resources + scalars);
    const tf::Tensor& indices = ctx->input(resources + scalars + 1);
    if (!tf::TensorShapeUtils::IsVector(indices.shape())) {
      this->Fail(absl::InvalidArgumentError(absl::StrCat(this->Name(), ": indices must be a vector. Received: shape ",
                                                         indices.shape().DebugString())));
      return;
    }
    tf::TensorShape rows_shape = shape;
    rows_shape.set_dim(0, indices.dim_size(0));
    if (!grad.shape().IsSameSize(rows_shape)) {
      this->Fail(absl::InvalidArgumentError(absl::StrCat(this->Name(),
                                                         ": grad must hold one row of var per index, shape ",
                                                         rows_shape.DebugString(), ". Received: shape ",
                                                         grad.shape().DebugString())));
      return;
    }
    rows_ = shape.dim_size(0);
    touched_ = indices.dim_size(0);
    index_ = indices.vec<Index>().data();
    for (Eigen::Index i = 0; i < touched_; ++i) {
      if (index_[i] < 0 || index_[i] >= rows_) {
        this->Fail(absl::InvalidArgumentError(absl::StrCat(this->Name(), ": indices[", i, "] = ", index_[i],
                                                           " is not in [0, ", rows_, ")")));
        return;
      }
    }
    width_ = rows_ == 0 ? 0 : shape.num_elements() / rows_;
    grad_ = grad.flat<T>().data();
  }

  const T* grad() const { return grad_; }        // touched() rows of width() elements
  const Index* indices() const { return index_; }
  Eigen::Index rows() const { return rows_; }
  Eigen::Index width() const { return width_; }  // elements per row
  Eigen::Index touched() const { return touched_; }

 private:
  const T* grad_ = nullptr;
  const Index* index_ = nullptr;
  Eigen::Index rows_ = 0, width_ = 0, touched_ = 0;
};

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

// The indices must be unique (the optimizer sums repeated ones first): rows are updated in parallel.
template <typename T, typename Index>
class FusedSparseApplyLazyAdamOp : public tf::OpKernel {
 public:
  explicit FusedSparseApplyLazyAdamOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    SparseInputs<T, Index> in(ctx, /*resources=*/3, /*scalars=*/4, /*dense=*/false);  // var, m, v; alpha, b1, b2, eps
    if (!in.ok() || in.touched() == 0 || in.width() == 0) return;
    const T alpha = in.scalar(0), beta1 = in.scalar(1), beta2 = in.scalar(2), epsilon = in.scalar(3);
    const T one_minus_beta1 = T(1) - beta1, one_minus_beta2 = T(1) - beta2;
    const Eigen::Index width = in.width();
    // About 3 cycles an element in packets (a square root and a division each); software prefetch of
    // the rows ahead measured no faster.
    const Eigen::TensorOpCost cost(4 * width * sizeof(T), 3 * width * sizeof(T), 3 * width);
    ctx->eigen_device<CPUDevice>().parallelFor(in.touched(), cost, [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i) {
        const Eigen::Index row = static_cast<Eigen::Index>(in.indices()[i]) * width;
        LazyAdamRow<T>(in.data(0) + row, in.data(1) + row, in.data(2) + row, in.grad() + i * width, width, alpha,
                       beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon);
      }
    });
  }
};

// Keras's sparse Adam on every row, with TFA's decay of the touched rows before it and the moving
// average after it. A repeated index adds its rows in their order (TensorFlow's scatter_add) and
// decays its row once per occurrence from the value before the step (TFA's gather, then scatter).
template <typename T, typename Index, bool kDecay, bool kAverage>
class FusedSparseApplyAdamOp : public tf::OpKernel {
 public:
  explicit FusedSparseApplyAdamOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    // var, m, v[, average]; alpha, beta1, beta2, epsilon[, decay][, average_rate]
    SparseInputs<T, Index> in(ctx, 3 + kAverage, 4 + kDecay + kAverage, /*dense=*/true);
    if (!in.ok() || in.rows() == 0 || in.width() == 0) return;
    Scalars s;
    s.alpha = in.scalar(0), s.beta1 = in.scalar(1), s.beta2 = in.scalar(2), s.epsilon = in.scalar(3);
    s.decay = kDecay ? in.scalar(4) : T(0);
    s.rate = kAverage ? in.scalar(4 + kDecay) : T(0);
    s.one_minus_beta1 = T(1) - s.beta1, s.one_minus_beta2 = T(1) - s.beta2;
    const Eigen::Index width = in.width();
    // The gradient's rows ordered by the row they touch (stable: repeated indices in their order).
    std::vector<std::pair<Index, Eigen::Index>> order(in.touched());
    for (Eigen::Index i = 0; i < in.touched(); ++i) order[i] = {in.indices()[i], i};
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    T* const x[4] = {in.data(0), in.data(1), in.data(2), kAverage ? in.data(3) : nullptr};
    const Eigen::TensorOpCost cost((4 + kAverage) * width * sizeof(T), (3 + kAverage) * width * sizeof(T),
                                   3 * width);
    ctx->eigen_device<CPUDevice>().parallelFor(in.rows(), cost, [&](Eigen::Index b, Eigen::Index e) {
      auto it = std::lower_bound(order.begin(), order.end(), b,
                                 [](const auto& p, Eigen::Index row) { return p.first < row; });
      for (Eigen::Index row = b; row < e;) {
        const Eigen::Index next = it != order.end() && it->first < e ? static_cast<Eigen::Index>(it->first) : e;
        Rows(s, x, row * width, (next - row) * width);  // the untouched rows before the next touched one
        if (next == e) break;
        auto last = it;
        while (last != order.end() && last->first == it->first) ++last;
        TouchedRow(s, x, next * width, width, in.grad(), it, last);
        it = last;
        row = next + 1;
      }
    });
  }

 private:
  struct Scalars {
    T alpha, beta1, beta2, epsilon, decay, rate, one_minus_beta1, one_minus_beta2;
  };

  // Element j of every row's last operations, from its new moments: the variable moves, then the average.
  static inline void Move(const Scalars& s, T* __restrict w, T* __restrict a, Eigen::Index j, T m_j, T v_j) {
    const T w_j = w[j] - (s.alpha * m_j) / (std::sqrt(v_j) + s.epsilon);
    w[j] = w_j;
    if (kAverage) a[j] = a[j] - (a[j] - w_j) * s.rate;
  }

  // Elements [at, at + n) of rows no gradient touches: the moments decay, the variable moves.
  static void Rows(const Scalars& s, T* const* x, Eigen::Index at, Eigen::Index n) {
    T* __restrict w = x[0] + at;
    T* __restrict m = x[1] + at;
    T* __restrict v = x[2] + at;
    T* __restrict a = kAverage ? x[3] + at : nullptr;
    for (Eigen::Index j = 0; j < n; ++j) {
      const T m_j = m[j] * s.beta1, v_j = v[j] * s.beta2;
      m[j] = m_j;
      v[j] = v_j;
      Move(s, w, a, j, m_j, v_j);
    }
  }

  // The row at element `at`, touched by the gradient rows `first`..`last` (positions in `grad`).
  template <typename It>
  static void TouchedRow(const Scalars& s, T* const* x, Eigen::Index at, Eigen::Index n, const T* grad, It first,
                         It last) {
    T* __restrict w = x[0] + at;
    T* __restrict m = x[1] + at;
    T* __restrict v = x[2] + at;
    if (kDecay && last - first == 1) {
      for (Eigen::Index j = 0; j < n; ++j) w[j] = w[j] - w[j] * s.decay;
    } else if (kDecay) {
      const std::vector<T> before(w, w + n);
      for (It p = first; p != last; ++p) {
        for (Eigen::Index j = 0; j < n; ++j) w[j] = w[j] - before[j] * s.decay;
      }
    }
    for (Eigen::Index j = 0; j < n; ++j) {
      m[j] = m[j] * s.beta1;
      v[j] = v[j] * s.beta2;
    }
    for (It p = first; p != last; ++p) {
      const T* __restrict g = grad + p->second * n;
      for (Eigen::Index j = 0; j < n; ++j) {
        m[j] = m[j] + g[j] * s.one_minus_beta1;
        v[j] = v[j] + (g[j] * g[j]) * s.one_minus_beta2;
      }
    }
    T* __restrict a = kAverage ? x[3] + at : nullptr;
    for (Eigen::Index j = 0; j < n; ++j) Move(s, w, a, j, m[j], v[j]);
  }
};

}  // namespace

#define SPARSE_ADAM(op) \
  REGISTER_OP(op).Input("var: resource").Input("m: resource").Input("v: resource")
#define SPARSE_ADAM_SCALARS .Input("alpha: T").Input("beta1: T").Input("beta2: T").Input("epsilon: T")
#define SPARSE_ADAM_ROWS                                                                        \
  .Input("grad: T").Input("indices: Tindices").Attr("T: {float, double}").Attr("Tindices: {int32, int64}") \
      .SetShapeFn(optimizers_kernels::NoOutputs)

SPARSE_ADAM("FusedSparseApplyLazyAdam") SPARSE_ADAM_SCALARS SPARSE_ADAM_ROWS;
SPARSE_ADAM("FusedSparseApplyAdam") SPARSE_ADAM_SCALARS SPARSE_ADAM_ROWS;
SPARSE_ADAM("DecayedSparseApplyAdam") SPARSE_ADAM_SCALARS.Input("decay: T") SPARSE_ADAM_ROWS;
SPARSE_ADAM("SparseApplyAdamAverage").Input("average: resource") SPARSE_ADAM_SCALARS
    .Input("average_rate: T") SPARSE_ADAM_ROWS;
SPARSE_ADAM("DecayedSparseApplyAdamAverage").Input("average: resource") SPARSE_ADAM_SCALARS
    .Input("decay: T").Input("average_rate: T") SPARSE_ADAM_ROWS;
#undef SPARSE_ADAM_ROWS
#undef SPARSE_ADAM_SCALARS
#undef SPARSE_ADAM

#define REGISTER_CPU(op, T, Index, ...)                                                                      \
  REGISTER_KERNEL_BUILDER(                                                                                    \
      Name(op).Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindices"), \
      __VA_ARGS__)
#define REGISTER_ALL(T, Index)                                                                                  \
  REGISTER_CPU("FusedSparseApplyLazyAdam", T, Index, FusedSparseApplyLazyAdamOp<T, Index>);                  \
  REGISTER_CPU("FusedSparseApplyAdam", T, Index, FusedSparseApplyAdamOp<T, Index, false, false>);            \
  REGISTER_CPU("DecayedSparseApplyAdam", T, Index, FusedSparseApplyAdamOp<T, Index, true, false>);           \
  REGISTER_CPU("SparseApplyAdamAverage", T, Index, FusedSparseApplyAdamOp<T, Index, false, true>);           \
  REGISTER_CPU("DecayedSparseApplyAdamAverage", T, Index, FusedSparseApplyAdamOp<T, Index, true, true>)
REGISTER_ALL(float, tf::int32);
REGISTER_ALL(float, tf::int64);
REGISTER_ALL(double, tf::int32);
REGISTER_ALL(double, tf::int64);
#undef REGISTER_ALL
#undef REGISTER_CPU

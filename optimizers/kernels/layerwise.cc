// The per-variable norm of LAMB, NovoGrad and ConditionalGradient, and their element-wise passes
// around it (TensorFlow has no kernel for them; TensorFlow Addons runs each as several ops, a pass
// over memory per op):
//
//   SumOfSquares         sum(x^2): the bits of TensorFlow's Sum over its Square, reading x once
//   FusedLambDirection   m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//                        u = (m / c1) / (sqrt(v / c2) + eps) (+ wd var if decayed); returns u
//   FusedApplyNovoGrad   d = g / denominator (+ wd var if decayed and wd > 0) ((1 - b1) d if averaged)
//                        m <- m b1 - d lr;  var <- var + m   (TensorFlow's momentum kernel)
//   FusedApplyConditionalGradient
//                        var <- var lr - step_size (g / denominator)   (ConditionalGradient: TFA's
//                        product, then TensorFlow's gradient-descent kernel on g / denominator)
//
// In float32 and float64. The norms of LAMB's trust ratio and NovoGrad's second moment are sums
// whose bits depend on how TensorFlow's Sum splits them between threads: SumOfSquares splits
// them as that Sum would split the materialized squares (Eigen's cost model, at the same thread
// pool), and reduces each share with Eigen's own reducer over the squares computed on the fly.
#include <cmath>

#include "fused_step.h"

namespace {

using namespace optimizers_kernels;  // NOLINT: this file's kernels are written in its terms

// TensorFlow's Sum of the materialized x * x, without materializing it.
template <typename T>
T SumOfSquares(const T* data, Eigen::Index n, const CPUDevice& device) {
  using Map = Eigen::TensorMap<Eigen::Tensor<const T, 1, Eigen::RowMajor, Eigen::DenseIndex>, Eigen::Aligned>;
  using Reducer = Eigen::internal::SumReducer<T>;
  const Map x(data, n);
  const auto sum = x.square().reduce(Eigen::IndexList<Eigen::type2index<0>>(), Reducer());
  using Self = Eigen::TensorEvaluator<const decltype(sum), CPUDevice>;
  constexpr bool kVectorized = Self::InputPacketAccess && Self::ReducerTraits::PacketAccess;
  constexpr int kPacket = Eigen::internal::unpacket_traits<typename Self::PacketReturnType>::size;
  const Self self(sum, device);
  Reducer reducer;
  using Shard = Eigen::internal::InnerMostDimReducer<Self, Reducer, kVectorized>;
  if (n == 0) return reducer.finalize(reducer.initialize());
  // Eigen's full reduction on a thread pool: the thread count of a Sum reading a stored tensor
  // (TensorFlow's, over the Square op's output), equal shares, the rest on the calling thread,
  // then the shares added in order.
  const Eigen::TensorOpCost cost =
      Eigen::TensorEvaluator<const Map, CPUDevice>(x, device).costPerCoeff(kVectorized) +
      Eigen::TensorOpCost(0, 0, Eigen::internal::functor_traits<Reducer>::Cost, kVectorized, kPacket);
  const Eigen::Index threads = Eigen::TensorCostModel<CPUDevice>::numThreads(n, cost, device.numThreads());
  if (threads == 1) return Shard::reduce(self, 0, n, reducer);
  const Eigen::Index size = n / threads, count = size > 0 ? n / size : 0;
  std::vector<T> shards(count, reducer.initialize());
  // One share per task (the bits do not depend on which thread computes which share).
  device.parallelFor(count, Eigen::TensorOpCost(0, 0, 1e9), [&](Eigen::Index b, Eigen::Index e) {
    for (Eigen::Index i = b; i < e; ++i) shards[i] = Shard::reduce(self, i * size, size, reducer);
  });
  T total = count * size < n ? Shard::reduce(self, count * size, n - count * size, reducer) : reducer.initialize();
  for (const T& shard : shards) reducer.reduce(shard, &total);
  return reducer.finalize(total);
}

template <typename T>
class SumOfSquaresOp : public tf::OpKernel {
 public:
  explicit SumOfSquaresOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    const tf::Tensor& x = ctx->input(0);
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<T>()() = SumOfSquares(x.flat<T>().data(), x.NumElements(), ctx->eigen_device<CPUDevice>());
  }
};

template <typename T, bool kDecayed>
void LambLoop(T* __restrict__ m, T* __restrict__ v, const T* __restrict__ w, const T* __restrict__ g,
              T* __restrict__ u, Eigen::Index n, T beta1, T beta2, T epsilon, T c1, T c2, T weight_decay) {
  const T one_minus_beta1 = T(1) - beta1, one_minus_beta2 = T(1) - beta2;
  for (Eigen::Index i = 0; i < n; ++i) {
    const T m_t = m[i] * beta1 + g[i] * one_minus_beta1;
    const T v_t = v[i] * beta2 + (g[i] * g[i]) * one_minus_beta2;
    T update = (m_t / c1) / (std::sqrt(v_t / c2) + epsilon);
    if (kDecayed) update = update + weight_decay * w[i];
    u[i] = update;
    m[i] = m_t;
    v[i] = v_t;
  }
}

template <typename T>
class FusedLambDirectionOp : public tf::OpKernel {
 public:
  explicit FusedLambDirectionOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decayed", &decayed_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/3, /*scalars=*/6);  // m, v, var
    if (!in.ok()) return;
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(9).shape(), &out));
    T* const u = out->flat<T>().data();
    const T* const grad = ctx->input(9).flat<T>().data();
    const T beta1 = in.scalar(0), beta2 = in.scalar(1), epsilon = in.scalar(2), c1 = in.scalar(3);
    const T c2 = in.scalar(4), weight_decay = in.scalar(5);
    in.ForEachBlock(20, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      const auto loop = decayed_ ? LambLoop<T, true> : LambLoop<T, false>;
      loop(x[0].data(), x[1].data(), x[2].data(), g.data(), u + (g.data() - grad), g.size(), beta1, beta2,
           epsilon, c1, c2, weight_decay);
    });
  }

 private:
  bool decayed_ = false;
};

template <typename T, bool kDecayed, bool kAveraged>
void NovoGradLoop(T* __restrict__ w, T* __restrict__ m, const T* __restrict__ g, Eigen::Index n, T lr, T beta1,
                  T denominator, T weight_decay) {
  const T one_minus_beta1 = T(1) - beta1;
  for (Eigen::Index i = 0; i < n; ++i) {
    T d = g[i] / denominator;
    if (kDecayed) d = d + weight_decay * w[i];
    if (kAveraged) d = d * one_minus_beta1;
    const T m_t = m[i] * beta1 - d * lr;
    w[i] = w[i] + m_t;
    m[i] = m_t;
  }
}

template <typename T>
class FusedApplyNovoGradOp : public tf::OpKernel {
 public:
  explicit FusedApplyNovoGradOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decayed", &decayed_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("grad_averaging", &grad_averaging_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/2, /*scalars=*/5);  // var, m
    if (!in.ok()) return;
    const T lr = in.scalar(0), beta1 = in.scalar(1), denominator = in.scalar(2), weight_decay = in.scalar(3);
    const bool decayed = decayed_ && weight_decay > T(0), averaged = grad_averaging_ && in.scalar(4) == T(0);
    const auto loop = decayed ? (averaged ? NovoGradLoop<T, true, true> : NovoGradLoop<T, true, false>)
                              : (averaged ? NovoGradLoop<T, false, true> : NovoGradLoop<T, false, false>);
    in.ForEachBlock(12, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      loop(x[0].data(), x[1].data(), g.data(), g.size(), lr, beta1, denominator, weight_decay);
    });
  }

 private:
  bool decayed_ = false, grad_averaging_ = false;
};

template <typename T>
void ConditionalGradientLoop(T* __restrict__ w, const T* __restrict__ g, Eigen::Index n, T lr, T step_size,
                             T denominator) {
  for (Eigen::Index i = 0; i < n; ++i) w[i] = w[i] * lr - (g[i] / denominator) * step_size;
}

template <typename T>
class FusedApplyConditionalGradientOp : public tf::OpKernel {
 public:
  explicit FusedApplyConditionalGradientOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/1, /*scalars=*/3);  // var
    if (!in.ok()) return;
    const T lr = in.scalar(0), step_size = in.scalar(1), denominator = in.scalar(2);
    in.ForEachBlock(4, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      ConditionalGradientLoop(x[0].data(), g.data(), g.size(), lr, step_size, denominator);
    });
  }
};

}  // namespace

#define TYPES "T: {float, double}"
REGISTER_OP("SumOfSquares").Input("x: T").Output("sum: T").Attr(TYPES).SetShapeFn(
    ::tensorflow::shape_inference::ScalarShape);
REGISTER_OP("FusedLambDirection")
    .Input("m: resource").Input("v: resource").Input("var: resource")
    .Input("beta1: T").Input("beta2: T").Input("epsilon: T").Input("c1: T").Input("c2: T").Input("weight_decay: T")
    .Input("grad: T").Output("direction: T").Attr(TYPES).Attr("decayed: bool")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(9));
      return absl::OkStatus();
    });
REGISTER_OP("FusedApplyNovoGrad")
    .Input("var: resource").Input("m: resource").Input("lr: T").Input("beta1: T").Input("denominator: T")
    .Input("weight_decay: T").Input("first_step: T").Input("grad: T")
    .Attr(TYPES).Attr("decayed: bool").Attr("grad_averaging: bool").SetShapeFn(optimizers_kernels::NoOutputs);
REGISTER_OP("FusedApplyConditionalGradient")
    .Input("var: resource").Input("lr: T").Input("step_size: T").Input("denominator: T").Input("grad: T")
    .Attr(TYPES).SetShapeFn(optimizers_kernels::NoOutputs);
#undef TYPES

#define REGISTER_CPU(op, T, kernel)                                                                \
  REGISTER_KERNEL_BUILDER(Name(op).Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), kernel<T>)
#define REGISTER_ALL(T)                                          \
  REGISTER_CPU("SumOfSquares", T, SumOfSquaresOp);               \
  REGISTER_CPU("FusedLambDirection", T, FusedLambDirectionOp);   \
  REGISTER_CPU("FusedApplyNovoGrad", T, FusedApplyNovoGradOp);   \
  REGISTER_CPU("FusedApplyConditionalGradient", T, FusedApplyConditionalGradientOp)
REGISTER_ALL(float);
REGISTER_ALL(double);
#undef REGISTER_ALL
#undef REGISTER_CPU

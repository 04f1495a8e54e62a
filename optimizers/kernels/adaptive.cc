// Dense steps of Yogi, AdaBelief, RectifiedAdam, COCOB and Lion, each as one kernel (TensorFlow has none
// for them; TensorFlow Addons runs each as a dozen element-wise ops, a pass over memory per op),
// and of ProximalAdagrad (TensorFlow's kernel takes three passes):
//
//   FusedApplyYogi            m <- m b1 + g (1 - b1);  v <- v + (1 - b2) sign(g^2 - v) g^2
//                             r = alpha / (sqrt(v) + eps);  u = var - r m
//                             var <- (u - r l1 sign(u)) / (1 + r l2) * [|u| > r l1]
//   FusedApplyAdaBelief       m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) (g - m)^2 + eps
//                             m' = m / c1;  s = sqrt(v / c2)
//                             u = rectified ? r_t m' / (s + eps) : (rectify ? m' : m' / (s + eps))
//   FusedApplyRectifiedAdam   m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//                             m' = m c1;  u = rectified ? r_t m' / (sqrt(v c2) + eps) : m'
//   (both)                    var <- var - lr_t (u + wd var)   (without "+ wd var" unless decayed)
//   FusedApplyCocob           L <- max(L, |g|);  S <- S + g;  G <- G + |g|;  R <- max(R - g w~, 0)
//                             w' = -S / (L max(G + L, alpha L)) (R + L);  var <- var - w~ + w';  w~ <- w'
//   FusedApplyProximalAdagrad a <- a + g^2;  r = lr rsqrt(a);  u = var - g r
//                             var <- (l1 > 0 ? sign(u) max(|u| - r l1, 0) : u) / (1 + l2 r)
//   FusedApplyLion            s = lr sign(m b1 + g (1 - b1));  m <- m b2 + g (1 - b2)
//                             var <- var - var wd - s   (without "- var wd" unless decayed)
//
// In float32 and float64 (16-bit variables take the rule's own step). The per-step scalars
// (alpha, c1, c2, r_t, lr_t, rectified as 0 or 1) come computed by the rule's `prepare`. Each
// element goes through the rounded operations of TensorFlow Addons' ops, in their order
// (a * b * c is (a * b) * c), so the results are TFA's bits, in one pass over memory.
#include <cmath>

#include "fused_step.h"

namespace {

using namespace optimizers_kernels;  // NOLINT: this file's kernels are written in its terms

// TensorFlow's Sign op: -1 or 1, +0 for either zero, and a NaN with its sign bit cleared (its
// payload kept: the bits TensorFlow's kernel gives, measured); |x| is both of the last two.
template <typename T>
inline T Sign(T x) {
  return x > T(0) ? T(1) : x < T(0) ? T(-1) : std::fabs(x);  // selections of T only: full-width vectors
}

// TensorFlow's Maximum of two tensors of one shape: NaN if either is, `a` where they are equal.
template <typename T>
inline T Max(T a, T b) {
  return b > a || b != b ? b : a;
}

// Eigen's prsqrt of a packet (TensorFlow's Rsqrt in float32): an approximation refined by one
// Newton step, the approximation kept where the step gives NaN. Eigen's own code ends in
// _mm256_blendv_ps, which GCC folds into a select on the mask's sign bit; built for AVX (this
// library's baseline), without AVX2's 256-bit integer compares, that became eight branches per
// packet (7x slower than this, measured on 16M random floats; the same bits on all of them). Here the select is bitwise operations on
// the compare's mask, and the multiply-adds are a product then a sum, as Eigen's are without FMA.
template <typename Packet>
inline Packet RsqrtPacket(const Packet& a) {
  return Eigen::internal::prsqrt(a);
}
#if defined(__AVX__) && !defined(__FMA__)
template <>
inline __m256 RsqrtPacket(const __m256& a) {
  const __m256 approx = _mm256_rsqrt_ps(a);
  const __m256 r2 = _mm256_mul_ps(a, approx);
  const __m256 half_r = _mm256_mul_ps(approx, _mm256_set1_ps(-0.5f));
  const __m256 h_n = _mm256_add_ps(_mm256_mul_ps(r2, approx), _mm256_set1_ps(-1.0f));
  const __m256 refined = _mm256_add_ps(_mm256_mul_ps(half_r, h_n), approx);
  const __m256 nan = _mm256_cmp_ps(refined, refined, _CMP_UNORD_Q);
  return _mm256_or_ps(_mm256_and_ps(nan, approx), _mm256_andnot_ps(nan, refined));
}
#endif

// TensorFlow's Rsqrt of a block: Eigen's vectorized reciprocal square root on whole packets (in
// float32 an approximation refined by a Newton step, not 1 / sqrt), 1 / sqrt on the last elements.
template <typename T>
void Rsqrt(const T* __restrict__ x, T* __restrict__ out, Eigen::Index n) {
  using Packet = typename Eigen::internal::packet_traits<T>::type;
  constexpr Eigen::Index kSize = Eigen::internal::unpacket_traits<Packet>::size;
  Eigen::Index i = 0;
  for (; i + kSize <= n; i += kSize) {
    Eigen::internal::pstoreu(out + i, RsqrtPacket(Eigen::internal::ploadu<Packet>(x + i)));
  }
  for (; i < n; ++i) out[i] = Eigen::numext::rsqrt(x[i]);
}

// Each step is a plain loop over the elements, one statement per TensorFlow op, which the compiler
// vectorizes (Eigen's sign and select in a tensor expression are not: 4x slower), in a function of
// its own: pointers that alias nothing and scalars passed by value.
template <typename T>
void YogiLoop(T* __restrict__ w, T* __restrict__ v, T* __restrict__ m, const T* __restrict__ g, Eigen::Index n,
              T alpha, T beta1, T beta2, T epsilon, T l1, T l2) {
  const T one_minus_beta1 = T(1) - beta1, one_minus_beta2 = T(1) - beta2;
  for (Eigen::Index i = 0; i < n; ++i) {
    const T m_t = m[i] * beta1 + g[i] * one_minus_beta1;
    const T g2 = g[i] * g[i];
    const T v_t = v[i] + one_minus_beta2 * Sign(g2 - v[i]) * g2;
    const T rate = alpha / (std::sqrt(v_t) + epsilon);
    const T u = w[i] - rate * m_t;
    const T l1_rate = l1 * rate;
    const T shrunk = (u - l1_rate * Sign(u)) / (T(1) + l2 * rate);
    w[i] = shrunk * (std::fabs(u) > l1_rate ? T(1) : T(0));
    m[i] = m_t;
    v[i] = v_t;
  }
}

template <typename T, bool kDecayed>
void LionLoop(T* __restrict__ w, T* __restrict__ m, const T* __restrict__ g, Eigen::Index n, T lr, T beta1, T beta2,
              T weight_decay) {
  const T one_minus_beta1 = T(1) - beta1, one_minus_beta2 = T(1) - beta2;
  for (Eigen::Index i = 0; i < n; ++i) {
    const T step = lr * Sign(m[i] * beta1 + g[i] * one_minus_beta1);
    m[i] = m[i] * beta2 + g[i] * one_minus_beta2;
    w[i] = kDecayed ? (w[i] - w[i] * weight_decay) - step : w[i] - step;
  }
}

// AdaBelief's (kBelief) or RectifiedAdam's step; kAdaptive: the step divided by the second moment
// (rectified, or AdaBelief without rectification), scaled by r_t when kScaled; else the momentum's.
template <typename T, bool kBelief, bool kAdaptive, bool kScaled, bool kDecayed>
void RectifiedLoop(T* __restrict__ w, T* __restrict__ m, T* __restrict__ v, const T* __restrict__ g, Eigen::Index n,
                   T lr, T beta1, T beta2, T epsilon, T c1, T c2, T r_t, T weight_decay) {
  const T one_minus_beta1 = T(1) - beta1, one_minus_beta2 = T(1) - beta2;
  for (Eigen::Index i = 0; i < n; ++i) {
    const T m_t = beta1 * m[i] + one_minus_beta1 * g[i];
    T v_t, m_corr, denominator;
    if (kBelief) {
      const T belief = g[i] - m_t;
      v_t = beta2 * v[i] + one_minus_beta2 * (belief * belief) + epsilon;
      m_corr = m_t / c1;
      denominator = std::sqrt(v_t / c2) + epsilon;
    } else {
      v_t = beta2 * v[i] + one_minus_beta2 * (g[i] * g[i]);
      m_corr = m_t * c1;
      denominator = std::sqrt(v_t * c2) + epsilon;
    }
    T update = !kAdaptive ? m_corr : kScaled ? r_t * m_corr / denominator : m_corr / denominator;
    if (kDecayed) update = update + weight_decay * w[i];
    w[i] = w[i] - lr * update;
    m[i] = m_t;
    v[i] = v_t;
  }
}

template <typename T>
void CocobLoop(T* __restrict__ w, T* __restrict__ lr, T* __restrict__ grad_norm_sum, T* __restrict__ gradients_sum,
               T* __restrict__ tilde_w, T* __restrict__ reward, const T* __restrict__ g, Eigen::Index n, T alpha) {
  for (Eigen::Index i = 0; i < n; ++i) {
    const T abs_g = std::fabs(g[i]);
    const T l = Max(lr[i], abs_g);
    const T s = gradients_sum[i] + g[i];
    const T a = grad_norm_sum[i] + abs_g;
    const T r_minus = reward[i] - g[i] * tilde_w[i];
    const T r = r_minus <= T(0) ? T(0) : r_minus;  // Maximum with a scalar 0: +0 for -0, NaN stays
    const T new_w = -s / (l * Max(a + l, alpha * l)) * (r + l);
    w[i] = w[i] - tilde_w[i] + new_w;
    lr[i] = l;
    grad_norm_sum[i] = a;
    gradients_sum[i] = s;
    tilde_w[i] = new_w;
    reward[i] = r;
  }
}

// kL1: the l1 shrinkage (l1 > 0), a loop of its own so that each loop vectorizes.
template <typename T, bool kL1>
void ProximalAdagradLoop(T* __restrict__ w, T* __restrict__ a, const T* __restrict__ g, Eigen::Index n, T lr,
                         T l1, T l2) {
  T rate[kBlock];
  for (Eigen::Index i = 0; i < n; ++i) a[i] = a[i] + g[i] * g[i];
  Rsqrt(a, rate, n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const T r = lr * rate[i];
    const T u = w[i] - g[i] * r;
    T shrunk = u;
    if (kL1) {
      const T excess = std::fabs(u) - r * l1;
      shrunk = Sign(u) * (excess <= T(0) ? T(0) : excess);  // Maximum with a scalar 0: +0 for -0, NaN stays
    }
    w[i] = shrunk / (T(1) + l2 * r);
  }
}

template <typename T>
class FusedApplyProximalAdagradOp : public tf::OpKernel {
 public:
  explicit FusedApplyProximalAdagradOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/2, /*scalars=*/3);  // var, accumulator
    if (!in.ok()) return;
    const T lr = in.scalar(0), l1 = in.scalar(1), l2 = in.scalar(2);
    in.ForEachBlock(20, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      if (l1 > T(0)) {
        ProximalAdagradLoop<T, true>(x[0].data(), x[1].data(), g.data(), g.size(), lr, l1, l2);
      } else {
        ProximalAdagradLoop<T, false>(x[0].data(), x[1].data(), g.data(), g.size(), lr, l1, l2);
      }
    });
  }
};

template <typename T>
class FusedApplyCocobOp : public tf::OpKernel {
 public:
  explicit FusedApplyCocobOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/6, /*scalars=*/1);  // var, lr, grad_norm_sum, gradients_sum, tilde_w, reward
    if (!in.ok()) return;
    const T alpha = in.scalar(0);
    in.ForEachBlock(24, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      CocobLoop(x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), x[5].data(), g.data(), g.size(),
                alpha);
    });
  }
};

template <typename T>
class FusedApplyYogiOp : public tf::OpKernel {
 public:
  explicit FusedApplyYogiOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/3, /*scalars=*/6);  // var, v, m
    if (!in.ok()) return;
    const T alpha = in.scalar(0), beta1 = in.scalar(1), beta2 = in.scalar(2), epsilon = in.scalar(3);
    const T l1 = in.scalar(4), l2 = in.scalar(5);
    in.ForEachBlock(24, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      YogiLoop(x[0].data(), x[1].data(), x[2].data(), g.data(), g.size(), alpha, beta1, beta2, epsilon, l1, l2);
    });
  }
};

template <typename T>
class FusedApplyLionOp : public tf::OpKernel {
 public:
  explicit FusedApplyLionOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decayed", &decayed_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/2, /*scalars=*/4);  // var, momentum
    if (!in.ok()) return;
    const T lr = in.scalar(0), beta1 = in.scalar(1), beta2 = in.scalar(2), weight_decay = in.scalar(3);
    const auto loop = decayed_ ? LionLoop<T, true> : LionLoop<T, false>;
    in.ForEachBlock(10, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      loop(x[0].data(), x[1].data(), g.data(), g.size(), lr, beta1, beta2, weight_decay);
    });
  }

 private:
  bool decayed_ = false;
};

// AdaBelief (kBelief) or RectifiedAdam.
template <typename T, bool kBelief>
class FusedApplyRectifiedOp : public tf::OpKernel {
 public:
  explicit FusedApplyRectifiedOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decayed", &decayed_));
    if (kBelief) OP_REQUIRES_OK(ctx, ctx->GetAttr("rectify", &rectify_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/3, /*scalars=*/9);  // var, m, v
    if (!in.ok()) return;
    const bool rectified = in.scalar(7) != T(0);
    if (!rectify_) {  // AdaBelief without rectification: the adaptive step, unscaled, at every step
      Run<true, false>(in);
    } else if (rectified) {
      Run<true, true>(in);
    } else {
      Run<false, false>(in);
    }
  }

 private:
  template <bool kAdaptive, bool kScaled>
  void Run(StepInputs<T>& in) {
    if (decayed_) {
      Run<kAdaptive, kScaled, true>(in);
    } else {
      Run<kAdaptive, kScaled, false>(in);
    }
  }

  template <bool kAdaptive, bool kScaled, bool kDecayed>
  void Run(StepInputs<T>& in) {
    const T lr = in.scalar(0), beta1 = in.scalar(1), beta2 = in.scalar(2), epsilon = in.scalar(3);
    const T c1 = in.scalar(4), c2 = in.scalar(5), r_t = in.scalar(6), weight_decay = in.scalar(8);
    in.ForEachBlock(20, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      RectifiedLoop<T, kBelief, kAdaptive, kScaled, kDecayed>(x[0].data(), x[1].data(), x[2].data(), g.data(),
                                                              g.size(), lr, beta1, beta2, epsilon, c1, c2, r_t,
                                                              weight_decay);
    });
  }

  bool decayed_ = false, rectify_ = true;
};

}  // namespace

#define TYPES "T: {float, double}"
REGISTER_OP("FusedApplyYogi")
    .Input("var: resource").Input("v: resource").Input("m: resource")
    .Input("alpha: T").Input("beta1: T").Input("beta2: T").Input("epsilon: T").Input("l1: T").Input("l2: T")
    .Input("grad: T").Attr(TYPES).SetShapeFn(optimizers_kernels::NoOutputs);
REGISTER_OP("FusedApplyCocob")
    .Input("var: resource").Input("lr: resource").Input("grad_norm_sum: resource").Input("gradients_sum: resource")
    .Input("tilde_w: resource").Input("reward: resource").Input("alpha: T").Input("grad: T")
    .Attr(TYPES).SetShapeFn(optimizers_kernels::NoOutputs);
REGISTER_OP("FusedApplyProximalAdagrad")
    .Input("var: resource").Input("accumulator: resource").Input("lr: T").Input("l1: T").Input("l2: T")
    .Input("grad: T").Attr(TYPES).SetShapeFn(optimizers_kernels::NoOutputs);
REGISTER_OP("FusedApplyLion")
    .Input("var: resource").Input("momentum: resource").Input("lr: T").Input("beta1: T").Input("beta2: T")
    .Input("weight_decay: T").Input("grad: T").Attr(TYPES).Attr("decayed: bool")
    .SetShapeFn(optimizers_kernels::NoOutputs);
#define RECTIFIED_INPUTS(op)                                                                       \
  REGISTER_OP(op)                                                                                  \
      .Input("var: resource").Input("m: resource").Input("v: resource")                            \
      .Input("lr: T").Input("beta1: T").Input("beta2: T").Input("epsilon: T").Input("c1: T")       \
      .Input("c2: T").Input("r_t: T").Input("rectified: T").Input("weight_decay: T").Input("grad: T") \
      .Attr(TYPES).Attr("decayed: bool").SetShapeFn(optimizers_kernels::NoOutputs)
RECTIFIED_INPUTS("FusedApplyAdaBelief").Attr("rectify: bool");
RECTIFIED_INPUTS("FusedApplyRectifiedAdam");
#undef RECTIFIED_INPUTS
#undef TYPES

template <typename T>
using AdaBeliefOp = FusedApplyRectifiedOp<T, true>;
template <typename T>
using RectifiedAdamOp = FusedApplyRectifiedOp<T, false>;

#define REGISTER_CPU(op, T, kernel)                                                                \
  REGISTER_KERNEL_BUILDER(Name(op).Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), kernel<T>)
#define REGISTER_ALL(T)                                          \
  REGISTER_CPU("FusedApplyYogi", T, FusedApplyYogiOp);           \
  REGISTER_CPU("FusedApplyAdaBelief", T, AdaBeliefOp);           \
  REGISTER_CPU("FusedApplyRectifiedAdam", T, RectifiedAdamOp);   \
  REGISTER_CPU("FusedApplyCocob", T, FusedApplyCocobOp);         \
  REGISTER_CPU("FusedApplyProximalAdagrad", T, FusedApplyProximalAdagradOp); \
  REGISTER_CPU("FusedApplyLion", T, FusedApplyLionOp)
REGISTER_ALL(float);
REGISTER_ALL(double);
#undef REGISTER_ALL
#undef REGISTER_CPU

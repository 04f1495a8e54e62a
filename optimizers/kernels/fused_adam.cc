// Adam's step fused with what runs beside it, in one pass over memory:
//
//   DecayedApplyAdam         decoupled weight decay, then Adam (TensorFlow Addons' AdamW)
//   ApplyAdamAverage         Adam, then a moving average of the variable
//   DecayedApplyAdamAverage  the decay, Adam, then the moving average (MovingAverage(AdamW))
//
//   var <- var - decay * var                                          (Decayed...)
//   m   <- m + (grad - m) * (1 - beta1)
//   v   <- v + (grad^2 - v) * (1 - beta2)
//   var <- var - (m * alpha) / (sqrt(v) + epsilon),  alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
//   average <- average - (average - var) * average_rate               (...Average)
//
// Each element goes through the same rounded operations as TensorFlow's kernels run one after
// the other (a gradient-descent kernel with delta = var, ResourceApplyAdam, a subtraction and a
// gradient-descent kernel on the average), so the results are those bits; the arrays are walked
// in blocks that stay in cache, so memory is read and written once.
#define EIGEN_USE_THREADS

#include <algorithm>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace {

namespace tf = ::tensorflow;
using CPUDevice = Eigen::ThreadPoolDevice;

// Elements per block: the arrays of a block (16 KiB each in float32) stay in L1/L2 between the
// expressions below (measured: 1024 beats 512, 2048 and 4096 on 8 variables of 1M floats).
constexpr Eigen::Index kBlock = 1024;

template <typename T, bool kDecay, bool kAverage>
class FusedApplyAdamOp : public tf::OpKernel {
 public:
  explicit FusedApplyAdamOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    constexpr bool kSparse = false;
    constexpr int kResources = kAverage ? 4 : 3;  // var, m, v[, average]
    constexpr int kScalars = 6 + kDecay + kAverage;
    constexpr int kGrad = kResources + kScalars;
    std::vector<int> resources(kResources);
    for (int i = 0; i < kResources; ++i) resources[i] = i;
    auto locks = tf::MaybeLockVariableInputMutexesInOrder<CPUDevice, T>(ctx, /*do_lock=*/true, kSparse, resources);
    tf::Tensor arrays[kResources];
    for (int i = 0; i < kResources; ++i) {
      OP_REQUIRES_OK(ctx, tf::GetInputTensorFromVariable<CPUDevice, T>(ctx, i, true, kSparse, &arrays[i]));
      OP_REQUIRES(ctx, arrays[i].IsInitialized(),
                  absl::FailedPreconditionError(absl::StrCat(name(), ": input ", i, " is not initialized")));
    }
    const tf::Tensor& grad = ctx->input(kGrad);
    for (int i = 0; i < kResources; ++i) {
      OP_REQUIRES(ctx, arrays[i].shape().IsSameSize(grad.shape()),
                  absl::InvalidArgumentError(absl::StrCat(
                      name(), ": every variable must have the gradient's shape ", grad.shape().DebugString(),
                      ". Received: input ", i, " of shape ", arrays[i].shape().DebugString())));
    }
    for (int i = kResources; i < kGrad; ++i) {
      OP_REQUIRES(ctx, tf::TensorShapeUtils::IsScalar(ctx->input(i).shape()),
                  absl::InvalidArgumentError(absl::StrCat(name(), ": input ", i, " must be a scalar. Received: ",
                                                          ctx->input(i).shape().DebugString())));
    }
    auto scalar = [&](int i) { return ctx->input(kResources + i).scalar<T>()(); };
    const T beta1_power = scalar(0), beta2_power = scalar(1), lr = scalar(2), beta1 = scalar(3);
    const T beta2 = scalar(4), epsilon = scalar(5);
    const T decay = kDecay ? scalar(6) : T(0);
    const T average_rate = kAverage ? scalar(6 + kDecay) : T(0);
    const T alpha = lr * Eigen::numext::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);

    T* var_p = arrays[0].template flat<T>().data();
    T* m_p = arrays[1].template flat<T>().data();
    T* v_p = arrays[2].template flat<T>().data();
    T* average_p = kAverage ? arrays[kResources - 1].template flat<T>().data() : nullptr;
    const T* grad_p = grad.flat<T>().data();
    auto block = [&](Eigen::Index begin, Eigen::Index end) {
      const Eigen::Index n = end - begin;
      Eigen::TensorMap<Eigen::Tensor<T, 1>> w(var_p + begin, n), mm(m_p + begin, n), vv(v_p + begin, n);
      Eigen::TensorMap<Eigen::Tensor<const T, 1>> g(grad_p + begin, n);
      mm += (g - mm) * (T(1) - beta1);
      vv += (g.square() - vv) * (T(1) - beta2);
      if (kDecay) {
        w = (w - w * decay) - (mm * alpha) / (vv.sqrt() + epsilon);
      } else {
        w -= (mm * alpha) / (vv.sqrt() + epsilon);
      }
      if (kAverage) {
        Eigen::TensorMap<Eigen::Tensor<T, 1>> a(average_p + begin, n);
        a -= (a - w) * average_rate;
      }
    };
    const Eigen::TensorOpCost cost((kResources + 1) * sizeof(T), kResources * sizeof(T), 12 + 3 * kAverage);
    ctx->eigen_device<CPUDevice>().parallelFor(arrays[0].NumElements(), cost, [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index s = b; s < e; s += kBlock) block(s, std::min(e, s + kBlock));
    });
  }
};

::tensorflow::Status NoOutputs(::tensorflow::shape_inference::InferenceContext*) { return absl::OkStatus(); }

}  // namespace

#define ADAM_INPUTS(op)                                                                           \
  REGISTER_OP(op).Input("var: resource").Input("m: resource").Input("v: resource")

ADAM_INPUTS("DecayedApplyAdam")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T").Input("beta2: T")
    .Input("epsilon: T").Input("decay: T").Input("grad: T")
    .Attr("T: {half, bfloat16, float, double}").SetShapeFn(NoOutputs);
ADAM_INPUTS("ApplyAdamAverage").Input("average: resource")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T").Input("beta2: T")
    .Input("epsilon: T").Input("average_rate: T").Input("grad: T")
    .Attr("T: {half, bfloat16, float, double}").SetShapeFn(NoOutputs);
ADAM_INPUTS("DecayedApplyAdamAverage").Input("average: resource")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T").Input("beta2: T")
    .Input("epsilon: T").Input("decay: T").Input("average_rate: T").Input("grad: T")
    .Attr("T: {half, bfloat16, float, double}").SetShapeFn(NoOutputs);
#undef ADAM_INPUTS

#define REGISTER_CPU(op, T, decay, average)                                                  \
  REGISTER_KERNEL_BUILDER(Name(op).Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          FusedApplyAdamOp<T, decay, average>)
#define REGISTER_ALL(T)                                      \
  REGISTER_CPU("DecayedApplyAdam", T, true, false);         \
  REGISTER_CPU("ApplyAdamAverage", T, false, true);         \
  REGISTER_CPU("DecayedApplyAdamAverage", T, true, true)
REGISTER_ALL(Eigen::half);
REGISTER_ALL(Eigen::bfloat16);
REGISTER_ALL(float);
REGISTER_ALL(double);
#undef REGISTER_ALL
#undef REGISTER_CPU

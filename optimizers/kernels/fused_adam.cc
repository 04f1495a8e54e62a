// Adam's step fused with what runs beside it, in one pass over memory:
//
//   DecayedApplyAdam         decoupled weight decay, then Adam (TensorFlow Addons' AdamW)
//   ApplyAdamAverage         Adam, then a moving average of the variable
//   DecayedApplyAdamAverage  the decay, Adam, then the moving average (MovingAverage(AdamW))
//   ApplyMovingAverage       the moving average alone (after another step: a sparse one, another rule's)
//
//   var <- var - decay * var                                          (Decayed...)
//   m   <- m + (grad - m) * (1 - beta1)
//   v   <- v + (grad^2 - v) * (1 - beta2)
//   var <- var - (m * alpha) / (sqrt(v) + epsilon),  alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
//   average <- average - (average - var) * average_rate               (...Average)
//
// Each element goes through the same rounded operations as TensorFlow's kernels run one after
// the other (a gradient-descent kernel with delta = var, ResourceApplyAdam, a subtraction and a
// gradient-descent kernel on the average), so the results are those bits, in one pass over memory
// (fused_step.h).
#include "fused_step.h"

namespace {

using namespace optimizers_kernels;  // NOLINT: this file's kernels are written in its terms

template <typename T, bool kDecay, bool kAverage>
class FusedApplyAdamOp : public tf::OpKernel {
 public:
  explicit FusedApplyAdamOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/kAverage ? 4 : 3, /*scalars=*/6 + kDecay + kAverage);  // var, m, v[, average]
    if (!in.ok()) return;
    const T beta1_power = in.scalar(0), beta2_power = in.scalar(1), lr = in.scalar(2), beta1 = in.scalar(3);
    const T beta2 = in.scalar(4), epsilon = in.scalar(5);
    const T decay = kDecay ? in.scalar(6) : T(0);
    const T average_rate = kAverage ? in.scalar(6 + kDecay) : T(0);
    const T alpha = lr * Eigen::numext::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
    in.ForEachBlock(12 + 3 * kAverage, [&](std::vector<Array<T>>& x, const ConstArray<T>& g) {
      Array<T>&w = x[0], &m = x[1], &v = x[2];
      m += (g - m) * (T(1) - beta1);
      v += (g.square() - v) * (T(1) - beta2);
      if (kDecay) {
        w = (w - w * decay) - (m * alpha) / (v.sqrt() + epsilon);
      } else {
        w -= (m * alpha) / (v.sqrt() + epsilon);
      }
      if (kAverage) x[3] -= (x[3] - w) * average_rate;
    });
  }
};

// The average is the kernel's variable and the weights its "gradient" (a tensor: read, not written).
template <typename T>
class ApplyMovingAverageOp : public tf::OpKernel {
 public:
  explicit ApplyMovingAverageOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {}

  void Compute(tf::OpKernelContext* ctx) override {
    StepInputs<T> in(ctx, /*resources=*/1, /*scalars=*/1);  // average, average_rate, var
    if (!in.ok()) return;
    const T average_rate = in.scalar(0);
    in.ForEachBlock(3, [&](std::vector<Array<T>>& x, const ConstArray<T>& w) { x[0] -= (x[0] - w) * average_rate; });
  }
};

}  // namespace

#define ADAM_INPUTS(op)                                                                           \
  REGISTER_OP(op).Input("var: resource").Input("m: resource").Input("v: resource")

ADAM_INPUTS("DecayedApplyAdam")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T").Input("beta2: T")
    .Input("epsilon: T").Input("decay: T").Input("grad: T")
    .Attr("T: {half, bfloat16, float, double}").SetShapeFn(optimizers_kernels::NoOutputs);
ADAM_INPUTS("ApplyAdamAverage").Input("average: resource")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T").Input("beta2: T")
    .Input("epsilon: T").Input("average_rate: T").Input("grad: T")
    .Attr("T: {half, bfloat16, float, double}").SetShapeFn(optimizers_kernels::NoOutputs);
ADAM_INPUTS("DecayedApplyAdamAverage").Input("average: resource")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T").Input("beta2: T")
    .Input("epsilon: T").Input("decay: T").Input("average_rate: T").Input("grad: T")
    .Attr("T: {half, bfloat16, float, double}").SetShapeFn(optimizers_kernels::NoOutputs);
#undef ADAM_INPUTS
REGISTER_OP("ApplyMovingAverage").Input("average: resource").Input("average_rate: T").Input("var: T")
    .Attr("T: {half, bfloat16, float, double}").SetShapeFn(optimizers_kernels::NoOutputs);

#define REGISTER_CPU(op, T, decay, average)                                                  \
  REGISTER_KERNEL_BUILDER(Name(op).Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          FusedApplyAdamOp<T, decay, average>)
#define REGISTER_ALL(T)                                      \
  REGISTER_CPU("DecayedApplyAdam", T, true, false);         \
  REGISTER_CPU("ApplyAdamAverage", T, false, true);         \
  REGISTER_CPU("DecayedApplyAdamAverage", T, true, true);   \
  REGISTER_KERNEL_BUILDER(                                  \
      Name("ApplyMovingAverage").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), ApplyMovingAverageOp<T>)
REGISTER_ALL(Eigen::half);
REGISTER_ALL(Eigen::bfloat16);
REGISTER_ALL(float);
REGISTER_ALL(double);
#undef REGISTER_ALL
#undef REGISTER_CPU

// What every fused kernel of this library shares: its variables' inputs locked and checked, its
// per-step scalars checked, and a walk over the elements in blocks that stay in cache, so that a
// step of several element-wise expressions reads and writes memory once.
#ifndef OPTIMIZERS_KERNELS_FUSED_STEP_H_
#define OPTIMIZERS_KERNELS_FUSED_STEP_H_

#define EIGEN_USE_THREADS

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace optimizers_kernels {

namespace tf = ::tensorflow;
using CPUDevice = Eigen::ThreadPoolDevice;

// Elements per block: the arrays of a block (16 KiB each in float32) stay in L1/L2 between the
// expressions of a step (measured: 1024 beats 512, 2048 and 4096 on 8 variables of 1M floats).
constexpr Eigen::Index kBlock = 1024;

template <typename T>
using Array = Eigen::TensorMap<Eigen::Tensor<T, 1>>;
template <typename T>
using ConstArray = Eigen::TensorMap<Eigen::Tensor<const T, 1>>;

// A kernel's variables, its inputs 0 to `resources` - 1, of T, each read and checked initialized,
// and the `scalars` scalars of T after them, checked. Holds the variables' locks while it lives:
// exclusive, or shared for a `sparse` step, which writes some rows only.
template <typename T>
class VariableInputs {
 public:
  VariableInputs(tf::OpKernelContext* ctx, int resources, int scalars, bool sparse)
      : ctx_(ctx), resources_(resources) {
    std::vector<int> inputs(resources);
    std::iota(inputs.begin(), inputs.end(), 0);
    locks_.emplace(tf::MaybeLockVariableInputMutexesInOrder<CPUDevice, T>(ctx, /*do_lock=*/true, sparse, inputs));
    arrays_.resize(resources);
    for (int i = 0; i < resources; ++i) {
      if (!Ok(tf::GetInputTensorFromVariable<CPUDevice, T>(ctx, i, true, sparse, &arrays_[i]))) return;
      if (!arrays_[i].IsInitialized()) {
        Fail(absl::FailedPreconditionError(absl::StrCat(Name(), ": input ", i, " is not initialized")));
        return;
      }
      data_.push_back(arrays_[i].template flat<T>().data());
    }
    for (int i = resources; i < resources + scalars; ++i) {
      if (!tf::TensorShapeUtils::IsScalar(ctx->input(i).shape())) {
        Fail(absl::InvalidArgumentError(absl::StrCat(Name(), ": input ", i, " must be a scalar. Received: ",
                                                     ctx->input(i).shape().DebugString())));
        return;
      }
    }
  }

  bool ok() const { return ok_; }
  // The i-th scalar input.
  T scalar(int i) const { return ctx_->input(resources_ + i).scalar<T>()(); }
  // The i-th variable's elements.
  T* data(int i) const { return data_[i]; }

 protected:
  const tf::Tensor& array(int i) const { return arrays_[i]; }
  std::string Name() const { return ctx_->op_kernel().name(); }
  void Fail(const tf::Status& status) {
    ctx_->SetStatus(status);
    ok_ = false;
  }

  tf::OpKernelContext* ctx_;
  int resources_;
  std::vector<T*> data_;

 private:
  bool Ok(const tf::Status& status) {
    if (!status.ok()) Fail(status);
    return ok_;
  }

  bool ok_ = true;
  std::optional<tf::VariableInputLockHolder> locks_;
  std::vector<tf::Tensor> arrays_;
};

// A dense step's inputs: `resources` variables of T first, then `scalars` scalars of T, then the
// gradient, which every variable's shape must equal.
template <typename T>
class StepInputs : public VariableInputs<T> {
 public:
  StepInputs(tf::OpKernelContext* ctx, int resources, int scalars)
      : VariableInputs<T>(ctx, resources, scalars, /*sparse=*/false) {
    if (!this->ok()) return;
    const tf::Tensor& grad = ctx->input(resources + scalars);
    for (int i = 0; i < resources; ++i) {
      if (!this->array(i).shape().IsSameSize(grad.shape())) {
        this->Fail(absl::InvalidArgumentError(absl::StrCat(
            this->Name(), ": every variable must have the gradient's shape ", grad.shape().DebugString(),
            ". Received: input ", i, " of shape ", this->array(i).shape().DebugString())));
        return;
      }
    }
    grad_ = grad.flat<T>().data();
  }

  // Calls `block(variables, grad)` on the arrays of every block of elements, in parallel: the
  // variables as `Array<T>`s in input order, the gradient as a `ConstArray<T>`. `cycles` is the
  // arithmetic per element, for the thread pool's cost model. Every block but the last starts
  // and ends at a multiple of kBlock, so a vectorized function's packets fall where they fall in
  // TensorFlow's kernels (which split at multiples of the packet size): only the last elements
  // of the array, fewer than a packet, take the scalar form.
  template <typename Block>
  void ForEachBlock(int cycles, Block block) {
    const int resources = this->resources_;
    const Eigen::TensorOpCost cost((resources + 1) * sizeof(T), resources * sizeof(T), cycles);
    const auto align = [](Eigen::Index size) { return (size + kBlock - 1) / kBlock * kBlock; };
    this->ctx_->template eigen_device<CPUDevice>().parallelFor(
        this->array(0).NumElements(), cost, align, [&](Eigen::Index b, Eigen::Index e) {
          std::vector<Array<T>> variables;
          variables.reserve(resources);
          for (Eigen::Index s = b; s < e; s += kBlock) {
            const Eigen::Index n = std::min(e, s + kBlock) - s;
            variables.clear();
            for (T* data : this->data_) variables.emplace_back(data + s, n);
            block(variables, ConstArray<T>(grad_ + s, n));
          }
        });
  }

 private:
  const T* grad_ = nullptr;
};

inline ::tensorflow::Status NoOutputs(::tensorflow::shape_inference::InferenceContext*) { return absl::OkStatus(); }

}  // namespace optimizers_kernels

#endif  // OPTIMIZERS_KERNELS_FUSED_STEP_H_

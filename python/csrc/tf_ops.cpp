// The TensorFlow op library of chorus.tensorflow (_chorus_tf_ops.so), compiled against the
// installed TensorFlow's headers and flags (tf.sysconfig) by `make check-tensorflow`.
//
// ChorusCheck passes its tensors through unchanged when code is 0 and otherwise fails with
// TensorFlow error code `code` and `message`. Inside a graph a collective's Python part
// (a numpy_function) cannot raise a chosen tf.errors class (TensorFlow makes every other
// Python exception an UnknownError), so it returns the code and message of the chorus error
// instead and this op raises it: a mismatch between ranks is a FailedPreconditionError in a
// graph as it is eagerly and in Horovod.

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace
{

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;

REGISTER_OP("ChorusCheck")
    .Input("code: int32")
    .Input("message: string")
    .Input("tensors: T")
    .Output("outputs: T")
    .Attr("T: list(type) >= 0")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext *c) {
        for (int i = 2; i < c->num_inputs(); i++) c->set_output(i - 2, c->input(i));
        return absl::OkStatus();
    });

class ChorusCheckOp : public OpKernel
{
  public:
    explicit ChorusCheckOp(OpKernelConstruction *ctx) : OpKernel(ctx) {}

    void Compute(OpKernelContext *ctx) override
    {
        const int code = ctx->input(0).scalar<int32_t>()();
        if (code != 0) {
            const std::string msg(ctx->input(1).scalar<tensorflow::tstring>()());
            ctx->CtxFailure(absl::Status(static_cast<absl::StatusCode>(code), msg));
            return;
        }
        for (int i = 2; i < ctx->num_inputs(); i++) ctx->set_output(i - 2, ctx->input(i));
    }
};

REGISTER_KERNEL_BUILDER(Name("ChorusCheck").Device(tensorflow::DEVICE_CPU), ChorusCheckOp);

} // namespace

// The reference kernel interface. Kernels see tensors and attributes, never the IR graph.
#pragma once
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/attributes.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/op.h"

namespace kiln {

class Graph;

struct KernelContext {
  Op op;
  const Attributes* attrs = nullptr;
  std::vector<const Tensor*> inputs;   // nullptr: omitted optional input
  std::vector<Tensor> outputs;         // the kernel fills one per node output
  std::vector<bool> output_wanted;     // false: the node omits this optional output
  // Runs a subgraph (If/Loop/Scan bodies) with the given inputs; the executor binds
  // outer-scope captures. Null where subgraphs cannot run.
  std::function<Result<std::vector<Tensor>>(const Graph&, const std::vector<Tensor>&)> run_subgraph;

  size_t num_inputs() const { return inputs.size(); }
  const Tensor* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  bool has_input(size_t i) const { return input(i) != nullptr; }
  const Attributes& attr() const { return *attrs; }
  // Allocates output i (zero-filled) and returns it. An engine may preset outputs[i] to a
  // view of planned memory: when dtype and dims match, that memory is reused.
  Tensor& alloc_output(size_t i, DataType dt, Dims dims) {
    if (outputs.size() <= i) outputs.resize(i + 1);
    Tensor& o = outputs[i];
    if (o.defined() && !o.is_sequence() && !o.is_none() && o.raw() && o.dtype() == dt && o.dims() == dims &&
        !o.is_string()) {
      std::memset(o.raw(), 0, o.nbytes());
      return o;
    }
    outputs[i] = Tensor(dt, std::move(dims));
    return outputs[i];
  }
  void set_output(size_t i, Tensor t) {
    if (outputs.size() <= i) outputs.resize(i + 1);
    outputs[i] = std::move(t);
  }
};

using KernelFn = Status (*)(KernelContext&);

class KernelRegistry {
 public:
  void add(Op op, KernelFn fn) { table_[static_cast<size_t>(op)] = fn; }
  KernelFn find(Op op) const { return table_[static_cast<size_t>(op)]; }

 private:
  KernelFn table_[kNumOps] = {};
};

// The reference backend's kernels, one registration function per op family.
const KernelRegistry& reference_kernels();
void register_elementwise_kernels(KernelRegistry& r);
void register_nn_kernels(KernelRegistry& r);         // conv, pool, norm, resize, pad
void register_linalg_kernels(KernelRegistry& r);     // matmul, gemm, einsum
void register_reduction_kernels(KernelRegistry& r);  // reduce*, softmax, argmax, topk, cumsum
void register_shape_kernels(KernelRegistry& r);      // shape, reshape, slice, gather, concat...
void register_control_flow_kernels(KernelRegistry& r);  // If, Loop, Scan
void register_sequence_kernels(KernelRegistry& r);      // sequences and optionals
void register_rnn_signal_kernels(KernelRegistry& r);    // RNN/GRU/LSTM, DFT, STFT, windows
void register_string_kernels(KernelRegistry& r);        // string ops
// String paths of Cast and Equal (string_ops.cpp), called by those kernels.
Status cast_with_strings(KernelContext& ctx, DataType to);
Status equal_strings(KernelContext& ctx);
void register_transformer_kernels(KernelRegistry& r);  // attention, losses, RMSNorm, rotary...
void register_vision_kernels(KernelRegistry& r);        // NMS, RoiAlign, GridSample, Col2Im, DeformConv...
void register_quant_kernels(KernelRegistry& r);         // Quantize/DequantizeLinear, QLinear*, *Integer, BitCast
void register_random_kernels(KernelRegistry& r);        // RandomUniform/Normal(Like), Bernoulli, Multinomial
void register_fused_conv_kernels(KernelRegistry& r);   // FusedConv (conv + residual + activation)
void register_fused_gemm_kernels(KernelRegistry& r);   // FusedGemm (matmul + bias + activation)
void register_fused_elementwise_kernels(KernelRegistry& r);  // FusedElementwise (an expr over elementwise ops)
void register_fused_norm_kernels(KernelRegistry& r);   // FusedResidualNorm (residual add + LayerNorm/RMSNorm)

// Runs the registered reference kernel of a single-output `op` (fused kernels build on
// the kernels of the ops they replace, so they compute exactly the same values).
Status run_reference_op(Op op, const Attributes& attrs, std::vector<const Tensor*> inputs, Tensor* out);

// Error for an input dtype the kernel does not handle.
Status unsupported_dtype(Op op, DataType dt, const char* what = "input");

}  // namespace kiln

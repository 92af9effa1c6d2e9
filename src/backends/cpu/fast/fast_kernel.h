// The fast CPU backend's kernel interface. Kernels see tensors, dtypes, shapes and
// attributes, never the IR (DESIGN principle 1).
//
// Lifecycle, which makes "an inference allocates nothing" true for layers served by a
// fast kernel:
//   create   once per layer, when an engine is built or loaded: weights are known
//            (constant inputs), activation shapes may still be symbolic;
//   prepare  whenever the concrete input shapes change (ExecutionContext setup): may
//            allocate (oneDNN primitives, reordered weights, packed buffers) and says how
//            much scratch memory run() needs;
//   run      many times on tensors whose memory the engine owns (arena views) or the user
//            bound: must not allocate, and must write every element of every output.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/attributes.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/op.h"

namespace kiln::fast {

// What a factory sees of one layer, as far as the fast CPU and the CUDA backends (whose
// cuda::LayerSpec derives from this too) share it; the accessors are safe for any index.
struct LayerSpecBase {
  Op op = Op::Identity;
  const Attributes* attrs = nullptr;
  std::vector<DataType> input_dtypes;    // kUndefined for an omitted optional input
  std::vector<DataType> output_dtypes;
  std::vector<const Tensor*> constants;  // per input: the constant value, or nullptr

  // The layer's attributes; an empty set when it has none.
  const Attributes& attributes() const {
    static const Attributes kNone;
    return attrs ? *attrs : kNone;
  }
  // Input/output dtype i; kUndefined when omitted or past the end.
  DataType input_dtype(size_t i) const { return i < input_dtypes.size() ? input_dtypes[i] : DataType::kUndefined; }
  DataType output_dtype(size_t i) const { return i < output_dtypes.size() ? output_dtypes[i] : DataType::kUndefined; }
  // The value of input i when it is a constant, else nullptr.
  const Tensor* constant(size_t i) const { return i < constants.size() ? constants[i] : nullptr; }
  // Whether optional input i is given.
  bool has_input(size_t i) const { return input_dtype(i) != DataType::kUndefined; }
  // Whether output i exists and is wanted.
  bool wants_output(size_t i) const { return output_dtype(i) != DataType::kUndefined; }
};

// What a fast factory sees of one layer.
struct LayerSpec : LayerSpecBase {
  int threads = 1;  // threads the kernel may use
};

// A concrete shape and dtype (inputs and outputs at prepare time).
struct TensorShape {
  DataType dtype = DataType::kUndefined;
  Dims dims;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Called with the concrete shapes before the first run and whenever they change.
  // Sets *scratch_bytes to the scratch memory run() needs (0 if none).
  virtual Status prepare(const std::vector<TensorShape>& inputs, const std::vector<TensorShape>& outputs,
                         size_t* scratch_bytes) = 0;
  // inputs[i] is nullptr for an omitted optional input; outputs have their final shapes.
  virtual Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                     void* scratch) = 0;
};

// One way to run one op (a "tactic"). supports() must be cheap and exact: a kernel it
// accepts must run every shape prepare() is later given, or fail prepare() cleanly.
struct Tactic {
  const char* name;  // stable, recorded in plans: "onednn_conv", "kiln_layernorm", ...
  Op op;
  bool (*supports)(const LayerSpec& spec);
  Result<std::unique_ptr<Kernel>> (*create)(const LayerSpec& spec);
};

// Every fast tactic, in preference order per op (the builder times them when several
// support a layer). Registered by the tactic families below.
const std::vector<Tactic>& tactics();
std::vector<const Tactic*> tactics_for(const LayerSpec& spec);
const Tactic* find_tactic(const std::string& name);

// The lookups behind tactics_for and find_tactic, shared with the CUDA backend's registry:
// the tactics of `all` for spec.op whose supports() accepts `spec`, in order; the first
// one called `name`, or nullptr.
template <typename TacticT, typename Spec>
std::vector<const TacticT*> supporting_tactics(const std::vector<TacticT>& all, const Spec& spec) {
  std::vector<const TacticT*> out;
  for (const TacticT& t : all) {
    if (t.op == spec.op && t.supports(spec)) out.push_back(&t);
  }
  return out;
}
template <typename TacticT>
const TacticT* tactic_named(const std::vector<TacticT>& all, const std::string& name) {
  for (const TacticT& t : all) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

// Families (one file each); each appends its tactics.
void add_onednn_tactics(std::vector<Tactic>& out);       // onednn_kernels.cpp: Conv, MatMul, Gemm, pooling
void add_elementwise_tactics(std::vector<Tactic>& out);  // elementwise_kernels.cpp
void add_norm_tactics(std::vector<Tactic>& out);         // norm_kernels.cpp: LayerNorm, RMSNorm, Softmax
void add_attention_tactics(std::vector<Tactic>& out);    // attention_kernels.cpp
void add_movement_tactics(std::vector<Tactic>& out);     // movement_kernels.cpp: Reshape, Transpose, Concat, Split, Gather...

// Version string of the libraries the fast backend uses ("onednn 2.6.3"), recorded in plans.
std::string library_versions();

}  // namespace kiln::fast

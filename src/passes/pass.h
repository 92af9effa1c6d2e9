// Graph optimization passes: small, single-purpose rewrites over the IR, each in its
// own file, listed in order in pipeline.cpp (DESIGN principle 5).
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln {

// What one pass did, for `kiln inspect --optimized`.
struct PassReport {
  std::string pass;
  int rewrites = 0;
  size_t nodes_before = 0;
  size_t nodes_after = 0;
  std::vector<std::string> notes;  // where each rewrite fired ("folded node 'x' (Shape)")
};

// Passed to every pass: where to record what it did.
class PassContext {
 public:
  explicit PassContext(PassReport& report) : report_(report) {}
  void rewrote(const std::string& note) {
    ++report_.rewrites;
    if (report_.notes.size() < 200) report_.notes.push_back(note);
  }

 private:
  PassReport& report_;
};

using PassFn = Status (*)(Graph& g, PassContext& ctx);

struct PassInfo {
  const char* name;
  int level;  // 1: basic (semantics-preserving cleanups), 2: extended (fusions)
  PassFn run;
};

// The passes, one per file.
Status eliminate_dead_code(Graph& g, PassContext& ctx);
Status fold_constants(Graph& g, PassContext& ctx);
Status remove_noops(Graph& g, PassContext& ctx);
Status eliminate_common_subexpressions(Graph& g, PassContext& ctx);
Status infer_shapes(Graph& g, PassContext& ctx);
Status fold_shape_ops(Graph& g, PassContext& ctx);
Status drop_broadcast_expand(Graph& g, PassContext& ctx);
Status collapse_reshape_chains(Graph& g, PassContext& ctx);
Status push_transpose_through_elementwise(Graph& g, PassContext& ctx);
Status fuse_layernorm_pattern(Graph& g, PassContext& ctx);
Status fuse_rmsnorm_pattern(Graph& g, PassContext& ctx);
Status fuse_gelu_pattern(Graph& g, PassContext& ctx);
Status fuse_silu_pattern(Graph& g, PassContext& ctx);
Status fuse_gemm_epilogue(Graph& g, PassContext& ctx);
Status fuse_residual_norm(Graph& g, PassContext& ctx);
Status fold_batchnorm_into_conv(Graph& g, PassContext& ctx);
Status fold_scale_into_conv(Graph& g, PassContext& ctx);
Status fuse_conv_epilogue(Graph& g, PassContext& ctx);
Status fuse_attention_pattern(Graph& g, PassContext& ctx);
Status merge_parallel_gemms(Graph& g, PassContext& ctx);
Status fuse_elementwise_chains(Graph& g, PassContext& ctx);  // a final pass (see below)

// The ordered pipeline (pipeline.cpp).
// Precision lowering for GPU engines built with --fp16/--bf16 (not part of the pipeline;
// the builder runs it after optimizing): float32 activations and weights become `target`
// (float16 or bfloat16; constants saturate to its finite range), with Casts at the graph's
// float32 inputs and outputs so the engine's interface keeps the model's dtypes. Inputs
// that ops read as float32 parameters (Resize roi/scales) stay float32. Kernels keep
// numerically sensitive math (norm statistics, softmax, accumulation) in float32.
Status lower_float_precision(Graph& g, DataType target, PassContext& ctx);
// Channels-last layout for CUDA fp16/bf16 engines (not part of the pipeline either; the
// builder runs it after lower_float_precision): Conv/FusedConv with a constant 4-D W,
// MaxPool (no Indices), AveragePool, GlobalAveragePool and GlobalMaxPool on 4-D inputs get
// kiln_layout = "NHWC" (ir/layout.h) with Transposes around them, and the Transposes
// between adjacent NHWC nodes are then cancelled (through elementwise ops too), so only
// those at the borders of NHWC regions stay. The graph's interface does not change.
Status convert_to_channels_last(Graph& g, PassContext& ctx);

const std::vector<PassInfo>& optimization_pipeline();
// Passes run once after the pipeline's fixed point (rewrites that would hide patterns
// from the pipeline's passes), in order.
const std::vector<PassInfo>& final_optimization_passes();

struct OptimizeOptions {
  int level = 2;           // run passes with level <= this; 0 disables the optimizer
  bool verify = true;      // run the verifier after every pass
};

// Runs the pipeline on g in place (to a fixed point, at most a few rounds), then the
// final passes once, and returns one report per pass run.
Result<std::vector<PassReport>> optimize_graph(Graph& g, const OptimizeOptions& options = {});

}  // namespace kiln

#include "ir/verifier.h"
#include "passes/pass.h"

namespace kiln {

const std::vector<PassInfo>& optimization_pipeline() {
  static const std::vector<PassInfo> passes = {
      {"infer_shapes", 1, infer_shapes},
      {"fold_shape_ops", 1, fold_shape_ops},
      {"remove_noops", 1, remove_noops},
      {"drop_broadcast_expand", 1, drop_broadcast_expand},
      {"fold_constants", 1, fold_constants},
      {"eliminate_common_subexpressions", 1, eliminate_common_subexpressions},
      {"eliminate_dead_code", 1, eliminate_dead_code},
      {"collapse_reshape_chains", 2, collapse_reshape_chains},
      {"push_transpose_through_elementwise", 2, push_transpose_through_elementwise},
      {"fuse_attention_pattern", 2, fuse_attention_pattern},
      {"fuse_layernorm_pattern", 2, fuse_layernorm_pattern},
      {"fuse_rmsnorm_pattern", 2, fuse_rmsnorm_pattern},
      {"fuse_gelu_pattern", 2, fuse_gelu_pattern},
      {"fuse_silu_pattern", 2, fuse_silu_pattern},
      {"fuse_gemm_epilogue", 2, fuse_gemm_epilogue},
      {"merge_parallel_gemms", 2, merge_parallel_gemms},
      {"fuse_residual_norm", 2, fuse_residual_norm},
      {"fold_batchnorm_into_conv", 2, fold_batchnorm_into_conv},
      {"fold_scale_into_conv", 2, fold_scale_into_conv},
      {"fuse_conv_epilogue", 2, fuse_conv_epilogue},
  };
  return passes;
}

// Run once, in order, after the pipeline reached its fixed point: fusing elementwise chains
// earlier would hide the LayerNorm/GELU/attention patterns the passes above look for.
const std::vector<PassInfo>& final_optimization_passes() {
  static const std::vector<PassInfo> passes = {
      {"fuse_elementwise_chains", 2, fuse_elementwise_chains},
      {"eliminate_dead_code", 2, eliminate_dead_code},
  };
  return passes;
}

Result<std::vector<PassReport>> optimize_graph(Graph& g, const OptimizeOptions& options) {
  std::vector<PassReport> reports;
  if (options.level <= 0) return reports;
  auto run = [&](const PassInfo& p, PassReport& r) -> Status {
    r.pass = p.name;
    r.nodes_before = g.num_nodes();
    PassContext ctx(r);
    KILN_RETURN_IF_ERROR(p.run(g, ctx).with_context(cat("pass ", p.name, ": ")));
    r.nodes_after = g.num_nodes();
    if (options.verify) {
      KILN_RETURN_IF_ERROR(verify_graph(g).with_context(cat("after pass ", p.name, ": ")));
    }
    return Status::ok();
  };
  // A rewrite can expose another (folding makes a Reshape's shape constant, CSE makes
  // duplicates dead...), so the pipeline repeats until a round changes nothing.
  constexpr int kMaxRounds = 4;
  for (int round = 0; round < kMaxRounds; ++round) {
    int changed = 0;
    for (const PassInfo& p : optimization_pipeline()) {
      if (p.level > options.level) continue;
      PassReport r;
      KILN_RETURN_IF_ERROR(run(p, r));
      changed += r.rewrites;
      if (round == 0 || r.rewrites > 0) reports.push_back(std::move(r));
    }
    if (changed == 0) break;
  }
  for (const PassInfo& p : final_optimization_passes()) {
    if (p.level > options.level) continue;
    PassReport r;
    KILN_RETURN_IF_ERROR(run(p, r));
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace kiln

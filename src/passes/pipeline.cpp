#include "ir/verifier.h"
#include "passes/pass.h"

namespace kiln {

const std::vector<PassInfo>& optimization_pipeline() {
  static const std::vector<PassInfo> passes = {
      {"infer_shapes", 1, infer_shapes},
      {"fold_shape_ops", 1, fold_shape_ops},
      {"remove_noops", 1, remove_noops},
      {"fold_constants", 1, fold_constants},
      {"eliminate_common_subexpressions", 1, eliminate_common_subexpressions},
      {"eliminate_dead_code", 1, eliminate_dead_code},
      {"fuse_layernorm_pattern", 2, fuse_layernorm_pattern},
      {"fuse_gelu_pattern", 2, fuse_gelu_pattern},
      {"fuse_silu_pattern", 2, fuse_silu_pattern},
      {"fuse_gemm_epilogue", 2, fuse_gemm_epilogue},
      {"fold_batchnorm_into_conv", 2, fold_batchnorm_into_conv},
      {"fold_scale_into_conv", 2, fold_scale_into_conv},
      {"fuse_conv_epilogue", 2, fuse_conv_epilogue},
  };
  return passes;
}

Result<std::vector<PassReport>> optimize_graph(Graph& g, const OptimizeOptions& options) {
  std::vector<PassReport> reports;
  if (options.level <= 0) return reports;
  // A rewrite can expose another (folding makes a Reshape's shape constant, CSE makes
  // duplicates dead...), so the pipeline repeats until a round changes nothing.
  constexpr int kMaxRounds = 4;
  for (int round = 0; round < kMaxRounds; ++round) {
    int changed = 0;
    for (const PassInfo& p : optimization_pipeline()) {
      if (p.level > options.level) continue;
      PassReport r;
      r.pass = p.name;
      r.nodes_before = g.num_nodes();
      PassContext ctx(r);
      KILN_RETURN_IF_ERROR(p.run(g, ctx).with_context(cat("pass ", p.name, ": ")));
      r.nodes_after = g.num_nodes();
      if (options.verify) {
        KILN_RETURN_IF_ERROR(verify_graph(g).with_context(cat("after pass ", p.name, ": ")));
      }
      changed += r.rewrites;
      if (round == 0 || r.rewrites > 0) reports.push_back(std::move(r));
    }
    if (changed == 0) break;
  }
  return reports;
}

}  // namespace kiln

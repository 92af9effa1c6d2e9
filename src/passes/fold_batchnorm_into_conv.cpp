// Folds an inference BatchNormalization into the Conv (or ConvTranspose) that feeds it:
// y = (conv(x, W) + B - mean) * scale / sqrt(var + eps) + bias becomes
// conv(x, W * s) + (B - mean) * s + bias with s = scale / sqrt(var + eps), per output
// channel. Computed in double, written in the weight dtype.
#include <cmath>

#include "ir/layout.h"
#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {



// Reads a constant float tensor with exactly n elements into doubles.
bool read_doubles(const Value* v, DataType dt, int64_t n, std::vector<double>* out) {
  if (!v || !v->is_constant()) return false;
  const Tensor& t = v->constant();
  if (t.dtype() != dt || t.size() != n || t.rank() > 1) return false;
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*out)[static_cast<size_t>(i)] = t.get_double(i);
  return true;
}



bool only_user_is(Graph& g, const Value* v, const Node* user) {
  return v && !g.is_graph_output(v) && v->uses().size() == 1 && v->uses()[0].node == user;
}

}  // namespace

Status fold_batchnorm_into_conv(Graph& g, PassContext& ctx) {
  for (Node* bn : g.nodes()) {
    if (bn->op() != Op::BatchNormalization || bn->attrs.get_int("training_mode", 0) != 0) continue;
    bool extra_outputs_used = false;
    for (size_t i = 1; i < bn->num_outputs(); ++i) {
      Value* o = bn->output(i);
      extra_outputs_used |= o && (!o->uses().empty() || g.is_graph_output(o));
    }
    if (extra_outputs_used || !bn->output(0)) continue;
    Value* y = bn->input(0);
    Node* conv = y ? y->producer() : nullptr;
    if (!conv || (conv->op() != Op::Conv && conv->op() != Op::ConvTranspose)) continue;
    if (conv->output(0) != y || !only_user_is(g, y, bn)) continue;
    if (has_non_nchw_layout(conv->attrs)) continue;  // the channel is axis 1 in NCHW only
    Value* w = conv->input(1);
    Value* b = conv->input(2);
    if (!w || !w->is_constant() || (b && !b->is_constant())) continue;
    const Tensor& wt = w->constant();
    const DataType dt = wt.dtype();
    if (!pattern::is_foldable_float(dt) || wt.rank() < 3 || wt.size() == 0) continue;
    const int64_t group = conv->attrs.get_int("group", 1);
    if (group < 1) continue;
    // Output channels and, for each W row (axis 0) and column (axis 1), its channel.
    const bool transpose = conv->op() == Op::ConvTranspose;
    const int64_t rows = wt.dim(0), cols = wt.dim(1);
    if (transpose && rows % group != 0) continue;
    const int64_t M = transpose ? cols * group : rows;
    std::vector<double> scale, bias, mean, var, bias0(static_cast<size_t>(M), 0.0);
    if (!read_doubles(bn->input(1), dt, M, &scale) || !read_doubles(bn->input(2), dt, M, &bias) ||
        !read_doubles(bn->input(3), dt, M, &mean) || !read_doubles(bn->input(4), dt, M, &var)) {
      continue;
    }
    if (b && !read_doubles(b, dt, M, &bias0)) continue;
    const double eps = bn->attrs.get_float("epsilon", 1e-5f);
    std::vector<double> s(static_cast<size_t>(M)), nb(static_cast<size_t>(M));
    for (size_t m = 0; m < s.size(); ++m) {
      s[m] = scale[m] / std::sqrt(var[m] + eps);
      nb[m] = (bias0[m] - mean[m]) * s[m] + bias[m];
    }
    const int64_t inner = wt.size() / (rows * cols);
    std::vector<double> nw(static_cast<size_t>(wt.size()));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t m = transpose ? (r / (rows / group)) * cols + c : r;
        for (int64_t k = 0; k < inner; ++k) {
          const int64_t i = (r * cols + c) * inner + k;
          nw[static_cast<size_t>(i)] = wt.get_double(i) * s[static_cast<size_t>(m)];
        }
      }
    }
    bool finite = true;
    for (double v : nw) finite &= std::isfinite(v);
    for (double v : nb) finite &= std::isfinite(v);
    if (!finite) continue;
    Value* new_w = g.add_constant(g.unique_name(w->name() + "_bnfolded"), pattern::tensor_from_doubles(dt, wt.dims(), nw));
    Value* new_b = g.add_constant(g.unique_name(conv->name() + "_bias_bnfolded"), pattern::tensor_from_doubles(dt, {M}, nb));
    conv->set_input(1, new_w);
    conv->set_input(2, new_b);  // set_input appends when the Conv had no bias
    ctx.rewrote(cat("folded ", bn->describe(), " into ", conv->describe()));
    pattern::absorb_follower(g, bn, y);
  }
  return Status::ok();
}

}  // namespace kiln

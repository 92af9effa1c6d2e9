// Folds a constant per-output-channel Mul or Add right after a Conv into its weights and
// bias: conv(x, W, B) * c = conv(x, W * c, B * c) and conv(x, W, B) + c = conv(x, W, B + c),
// for c a scalar or of shape [M,1,..,1] / [1,M,1,..,1] (M output channels). Computed in
// double, written in the weight dtype.
#include <cmath>

#include "ir/layout.h"
#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {





// The per-output-channel values of constant c broadcast against a Conv output of rank
// `rank` with M channels, without changing that output's shape; false if c is not so.
bool per_channel_values(const Value* c, DataType dt, int rank, int64_t M, std::vector<double>* out) {
  if (!c || !c->is_constant()) return false;
  const Tensor& t = c->constant();
  if (t.dtype() != dt || t.rank() > rank || t.size() == 0) return false;
  const int channel_axis = t.rank() - (rank - 1);  // position of axis 1 in c's dims (may be < 0)
  for (int i = 0; i < t.rank(); ++i) {
    if (t.dim(i) == 1) continue;
    if (i == channel_axis && t.dim(i) == M) continue;
    return false;
  }
  out->resize(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) (*out)[static_cast<size_t>(m)] = t.get_double(t.size() == 1 ? 0 : m);
  return true;
}

}  // namespace

Status fold_scale_into_conv(Graph& g, PassContext& ctx) {
  for (Node* n : g.nodes()) {
    if (n->op() != Op::Mul && n->op() != Op::Add) continue;
    for (int side = 0; side < 2; ++side) {
      Value* y = n->input(static_cast<size_t>(side));
      Value* c = n->input(static_cast<size_t>(1 - side));
      Node* conv = y ? y->producer() : nullptr;
      if (!conv || conv->op() != Op::Conv || conv->output(0) != y) continue;
      if (g.is_graph_output(y) || y->uses().size() != 1 || y == c) continue;
      if (has_non_nchw_layout(conv->attrs)) continue;  // per-channel shapes are NCHW ones
      Value* w = conv->input(1);
      Value* b = conv->input(2);
      if (!w || !w->is_constant() || (b && !b->is_constant())) continue;
      const Tensor& wt = w->constant();
      const DataType dt = wt.dtype();
      if (!pattern::is_foldable_float(dt) || wt.rank() < 3 || wt.size() == 0) continue;
      const int64_t M = wt.dim(0);
      std::vector<double> cv, bias(static_cast<size_t>(M), 0.0);
      if (!per_channel_values(c, dt, wt.rank(), M, &cv)) continue;
      if (b) {
        const Tensor& bt = b->constant();
        if (bt.dtype() != dt || bt.size() != M) continue;
        for (int64_t m = 0; m < M; ++m) bias[static_cast<size_t>(m)] = bt.get_double(m);
      }
      const bool mul = n->op() == Op::Mul;
      bool finite = true;
      std::vector<double> nb(static_cast<size_t>(M));
      for (size_t m = 0; m < nb.size(); ++m) {
        nb[m] = mul ? bias[m] * cv[m] : bias[m] + cv[m];
        finite &= std::isfinite(nb[m]);
      }
      std::vector<double> nw;
      if (mul) {
        const int64_t inner = wt.size() / M;
        nw.resize(static_cast<size_t>(wt.size()));
        for (int64_t i = 0; i < wt.size(); ++i) {
          nw[static_cast<size_t>(i)] = wt.get_double(i) * cv[static_cast<size_t>(i / inner)];
          finite &= std::isfinite(nw[static_cast<size_t>(i)]);
        }
      }
      if (!finite) continue;
      if (mul) conv->set_input(1, g.add_constant(g.unique_name(w->name() + "_scaled"), pattern::tensor_from_doubles(dt, wt.dims(), nw)));
      Value* new_b = g.add_constant(g.unique_name(conv->name() + "_bias_folded"), pattern::tensor_from_doubles(dt, {M}, nb));
      conv->set_input(2, new_b);  // set_input appends when the Conv had no bias
      ctx.rewrote(cat("folded ", n->describe(), " into ", conv->describe()));
      pattern::absorb_follower(g, n, y);
      break;
    }
  }
  return Status::ok();
}

}  // namespace kiln

// Fuses a GEMM with a constant weight and its epilogue into FusedGemm(A, W [K, N], bias [N])
// [-> Relu | Gelu]:
//   MatMul(A, W) + bias [-> act]     W a 2-D constant, bias a constant [N] of W's dtype
//   MatMul(A, W) -> act              no bias: a zero bias
//   Gemm(A, B, C) [-> act]           transA = 0, B a 2-D constant, C absent or a constant
//                                    that broadcasts to [N]: W = alpha * op(B), bias = beta * C
//   FusedGemm(activation None) -> act  the activation moves in
// For MatMul the FusedGemm kernel runs the MatMul, Add and activation kernels themselves,
// so results are bit-identical; for Gemm, alpha and beta are folded into the constants, so
// results differ by rounding.
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/pattern_util.h"

namespace kiln {

namespace {

using pattern::single_use;

// A following Relu or Gelu on `*out` (its only user) moves into the epilogue: appended
// to *chain.
void absorb_activation(const Graph& g, Value** out, std::vector<Node*>* chain, std::string* act, std::string* approx) {
  *act = "None";
  if (!single_use(g, *out)) return;
  Node* u = (*out)->uses()[0].node;
  if (u->num_outputs() != 1 || !u->output(0)) return;
  if (u->op() == Op::Relu) {
    *act = "Relu";
  } else if (u->op() == Op::Gelu) {
    const std::string a = u->attrs.get_string("approximate", "none");
    if (a != "none" && a != "tanh") return;
    *act = "Gelu";
    *approx = a;
  } else {
    return;
  }
  *out = u->output(0);
  chain->push_back(u);
}

// Adds FusedGemm(a, w, bias) computing `out`, the output of the matched `chain` (the GEMM
// first); the chain goes to *matched, last node first, for removal.
void emit(Graph& g, PassContext& ctx, std::vector<Node*>* matched, const std::vector<Node*>& chain, Value* a,
          Value* w, Value* bias, Value* out, const std::string& act, const std::string& approx,
          const std::string& what) {
  // The fused output takes over the last matched output's name (graph outputs keep
  // their names).
  const Node* anchor = chain.front();
  matched->insert(matched->end(), chain.rbegin(), chain.rend());
  const std::string name = out->name();
  g.rename_value(out, g.unique_name(name + "_unfused"));
  // A Gemm already is a GEMM with a bias, so its layer keeps the Gemm's name (what
  // layer-wise comparisons report); a MatMul's gets "_fused".
  const bool gemm = anchor->op() == Op::Gemm && !anchor->name().empty();
  const std::string node_name =
      gemm ? anchor->name() : g.unique_name(anchor->name().empty() ? std::string("fused_gemm") : anchor->name() + "_fused");
  Node* f = g.add_node(Op::FusedGemm, node_name, {a, w, bias}, {name});
  f->onnx_op_type = "FusedGemm";
  f->onnx_domain = "kiln";  // exported in kiln's domain, not as a default-domain op
  f->attrs.set("activation", act);
  if (act == "Gelu") f->attrs.set("approximate", approx);
  f->output(0)->dtype = out->dtype;
  f->output(0)->shape = out->shape;
  g.replace_all_uses_with(out, f->output(0));
  ctx.rewrote(cat("fused ", what, act == "None" ? "" : " + " + act, " into ", f->describe()));
}

Value* zeros(Graph& g, const Node* anchor, DataType dt, int64_t n) {
  return g.add_constant(g.unique_name(anchor->name() + "_zero_bias"),
                        pattern::tensor_from_doubles(dt, {n}, std::vector<double>(static_cast<size_t>(n), 0.0)));
}

bool fuse_matmul(Graph& g, PassContext& ctx, std::vector<Node*>* matched, Node* mm) {
  if (mm->num_inputs() != 2 || mm->num_outputs() != 1) return false;
  Value* a = mm->input(0);
  Value* w = mm->input(1);
  Value* y = mm->output(0);
  if (!a || !w || !y || !w->is_constant() || !single_use(g, y)) return false;
  const Tensor& wt = w->constant();
  if (wt.rank() != 2 || !is_supported_dtype(wt.dtype()) || !is_float(wt.dtype()) || a->dtype != wt.dtype()) return false;
  Node* add = y->uses()[0].node;
  Value* bias = nullptr;
  Value* out = y;
  std::vector<Node*> chain = {mm};
  if (add->op() == Op::Add && add->num_inputs() == 2 && add->num_outputs() == 1 && add->output(0)) {
    Value* c = add->input(0) == y ? add->input(1) : add->input(0);
    if (c && c->is_constant() && c->constant().dtype() == wt.dtype() && c->constant().rank() == 1 &&
        c->constant().dim(0) == wt.dim(1)) {
      bias = c;
      out = add->output(0);
      chain.push_back(add);
    }
  }
  std::string act, approx;
  absorb_activation(g, &out, &chain, &act, &approx);
  // A bare MatMul is already one GEMM: fuse only when there is an epilogue to absorb.
  const bool has_bias = bias != nullptr;
  if (!has_bias && act == "None") return false;
  if (!has_bias) {
    if (!pattern::is_foldable_float(wt.dtype())) return false;
    bias = zeros(g, mm, wt.dtype(), wt.dim(1));
  }
  emit(g, ctx, matched, chain, a, w, bias, out, act, approx, has_bias ? "MatMul + bias" : "MatMul");
  return true;
}

// A FusedGemm without activation (made in an earlier round, before the Relu/Gelu after
// it existed) takes the activation in.
bool absorb_into_fused(Graph& g, PassContext& ctx, std::vector<Node*>* matched, Node* f) {
  if (f->attrs.get_string("activation", "None") != "None" || f->num_outputs() != 1 || !f->output(0)) return false;
  Value* out = f->output(0);
  std::vector<Node*> chain;
  std::string act, approx;
  absorb_activation(g, &out, &chain, &act, &approx);
  if (chain.empty()) return false;
  f->attrs.set("activation", act);
  if (act == "Gelu") f->attrs.set("approximate", approx);
  Value* y = f->output(0);
  y->dtype = out->dtype;
  y->shape = out->shape;
  pattern::replace_keeping_name(g, out, y);
  matched->push_back(chain[0]);
  ctx.rewrote(cat("absorbed ", act, " into ", f->describe()));
  return true;
}

bool fuse_gemm(Graph& g, PassContext& ctx, std::vector<Node*>* matched, Node* gm) {
  if (gm->num_inputs() < 2 || gm->num_outputs() != 1 || !gm->output(0)) return false;
  if (gm->output(0)->uses().empty() && !g.is_graph_output(gm->output(0))) return false;  // dead
  if (gm->attrs.get_int("transA", 0) != 0) return false;
  Value* a = gm->input(0);
  Value* b = gm->input(1);
  Value* c = gm->input(2);
  if (!a || !b || !b->is_constant() || (c && !c->is_constant())) return false;
  if (a->shape && a->shape->size() != 2) return false;
  const Tensor& bt = b->constant();
  const DataType dt = bt.dtype();
  if (bt.rank() != 2 || !pattern::is_foldable_float(dt) || a->dtype != dt) return false;
  const bool trans_b = gm->attrs.get_int("transB", 0) != 0;
  const int64_t k = trans_b ? bt.dim(1) : bt.dim(0);
  const int64_t n = trans_b ? bt.dim(0) : bt.dim(1);
  // C must broadcast to [N] alone: one element, [N] or [1, N] (an [M, ...] C is per-row).
  if (c) {
    const Tensor& ct = c->constant();
    if (ct.dtype() != dt || ct.rank() > 2) return false;
    const bool one = ct.size() == 1;
    const bool row = (ct.rank() == 1 && ct.dim(0) == n) || (ct.rank() == 2 && ct.dim(0) == 1 && ct.dim(1) == n);
    if (!one && !row) return false;
  }
  const double alpha = gm->attrs.get_float("alpha", 1.0f);
  const double beta = gm->attrs.get_float("beta", 1.0f);
  std::vector<double> wv(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      wv[static_cast<size_t>(i * n + j)] = alpha * bt.get_double(trans_b ? j * k + i : i * n + j);
    }
  }
  std::vector<double> bv(static_cast<size_t>(n), 0.0);
  if (c) {
    const Tensor& ct = c->constant();
    for (int64_t j = 0; j < n; ++j) bv[static_cast<size_t>(j)] = beta * ct.get_double(ct.size() == 1 ? 0 : j);
  }
  const std::string base = gm->name().empty() ? std::string("gemm") : gm->name();
  Value* w = g.add_constant(g.unique_name(base + "_weight"), pattern::tensor_from_doubles(dt, {k, n}, wv));
  Value* bias = g.add_constant(g.unique_name(base + "_bias"), pattern::tensor_from_doubles(dt, {n}, bv));
  Value* out = gm->output(0);
  std::vector<Node*> chain = {gm};
  std::string act, approx;
  absorb_activation(g, &out, &chain, &act, &approx);
  emit(g, ctx, matched, chain, a, w, bias, out, act, approx, "Gemm");
  return true;
}

}  // namespace

Status fuse_gemm_epilogue(Graph& g, PassContext& ctx) {
  // Single-use checks must not count users that are already dead (the unfused chains the
  // pattern passes before this one leave behind, e.g. the GELU arithmetic still reading the
  // bias Add's output), so those go first.
  PassReport dce_report;
  PassContext dce_ctx(dce_report);
  KILN_RETURN_IF_ERROR(eliminate_dead_code(g, dce_ctx));
  bool changed = false;
  std::vector<Node*> matched;  // each chain from its last node back to the GEMM
  for (Node* n : g.nodes()) {
    if (n->op() == Op::MatMul) changed |= fuse_matmul(g, ctx, &matched, n);
    else if (n->op() == Op::Gemm) changed |= fuse_gemm(g, ctx, &matched, n);
    else if (n->op() == Op::FusedGemm) changed |= absorb_into_fused(g, ctx, &matched, n);
  }
  // The unfused nodes go now rather than at eliminate_dead_code: until then a dead MatMul
  // with a constant weight still looks like a GEMM (and a user of its input) to the
  // passes that follow in this round.
  for (Node* n : matched) g.remove_node(n);
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln

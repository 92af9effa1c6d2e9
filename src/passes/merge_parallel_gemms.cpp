// Merges GEMMs that read the same input into one: FusedGemm(A, W_i, b_i) (and MatMul(A, W_i)
// with a constant 2-D W_i) with the same K, dtype and activation become one
// FusedGemm(A, [W_1 | W_2 | ...], [b_1 | b_2 | ...]) followed by Split(axis=-1) into the
// original widths. This turns a transformer's Q, K and V projections into one GEMM.
//
// A plain MatMul joins a group of activation-free FusedGemms with a zero bias (x + 0 == x);
// a group of MatMuls alone stays a MatMul. Each output element is the same dot product
// over K as before (the reference MatMul accumulates per element), so results are
// bit-identical.
#include <cstring>
#include <map>
#include <tuple>

#include "passes/pass.h"

namespace kiln {

namespace {

struct Candidate {
  Node* node;
  bool is_matmul;
  std::string act;  // FusedGemm activation (+ approximation); "" for a MatMul
};

// A GEMM with a constant 2-D weight (and 1-D bias) of A's float dtype.
bool candidate(const Graph& g, Node* n, Candidate* c) {
  const bool mm = n->op() == Op::MatMul;
  if (!mm && n->op() != Op::FusedGemm) return false;
  if (n->num_inputs() != (mm ? 2u : 3u) || n->num_outputs() != 1 || !n->output(0)) return false;
  Value* y = n->output(0);
  if (y->uses().empty() && !g.is_graph_output(y)) return false;  // dead
  Value* a = n->input(0);
  Value* w = n->input(1);
  if (!a || !w || !w->is_constant() || (a->shape && a->shape->empty())) return false;
  const Tensor& wt = w->constant();
  if (wt.rank() != 2 || !is_supported_dtype(wt.dtype()) || !is_float(wt.dtype()) || a->dtype != wt.dtype()) return false;
  if (!mm) {
    Value* b = n->input(2);
    if (!b || !b->is_constant()) return false;
    const Tensor& bt = b->constant();
    if (bt.dtype() != wt.dtype() || bt.rank() != 1 || bt.dim(0) != wt.dim(1)) return false;
  }
  std::string act;
  if (!mm) {
    act = n->attrs.get_string("activation", "None");
    if (act == "Gelu") act += "/" + n->attrs.get_string("approximate", "none");
  }
  *c = {n, mm, act};
  return true;
}

// Concatenates [K, N_i] matrices along N (or [N_i] vectors when k == 1), by rows of bytes.
// A null entry stands for zeros of width widths[i].
Tensor concat_columns(DataType dt, int64_t k, const std::vector<const Tensor*>& parts,
                      const std::vector<int64_t>& widths, bool as_vector) {
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  Tensor out(dt, as_vector ? Dims{total} : Dims{k, total});
  const size_t es = dtype_size(dt);
  auto* dst = static_cast<char*>(out.raw());
  std::memset(dst, 0, out.nbytes());
  for (int64_t r = 0; r < k; ++r) {
    int64_t col = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t row_bytes = static_cast<size_t>(widths[i]) * es;
      if (parts[i]) {
        const auto* src = static_cast<const char*>(parts[i]->raw()) + static_cast<size_t>(r) * row_bytes;
        std::memcpy(dst + static_cast<size_t>(r * total + col) * es, src, row_bytes);
      }
      col += widths[i];
    }
  }
  return out;
}

}  // namespace

Status merge_parallel_gemms(Graph& g, PassContext& ctx) {
  // Groups in first-seen order: (A, K, dtype, activation). MatMuls are keyed apart first
  // and join an activation-free FusedGemm group of the same A below.
  using Key = std::tuple<Value*, int64_t, DataType, std::string, bool>;
  std::map<Key, size_t> index;
  std::vector<std::vector<Candidate>> groups;
  for (Node* n : g.nodes()) {
    Candidate c{};
    if (!candidate(g, n, &c)) continue;
    const Tensor& wt = n->input(1)->constant();
    Key key{n->input(0), wt.dim(0), wt.dtype(), c.act, c.is_matmul};
    auto [it, added] = index.emplace(key, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(c);
  }
  for (auto& [key, gi] : index) {
    if (!std::get<4>(key)) continue;
    Key fused = key;
    std::get<3>(fused) = "None";
    std::get<4>(fused) = false;
    auto f = index.find(fused);
    if (f == index.end()) continue;
    auto& mms = groups[gi];
    groups[f->second].insert(groups[f->second].end(), mms.begin(), mms.end());
    mms.clear();
  }

  bool changed = false;
  for (auto& group : groups) {
    if (group.size() < 2) continue;
    bool all_matmul = true;
    for (const Candidate& c : group) all_matmul = all_matmul && c.is_matmul;
    Node* first = group[0].node;
    Value* a = first->input(0);
    const Tensor& w0 = first->input(1)->constant();
    const DataType dt = w0.dtype();
    const int64_t k = w0.dim(0);
    std::vector<const Tensor*> ws, bs;
    std::vector<int64_t> widths;
    for (const Candidate& c : group) {
      ws.push_back(&c.node->input(1)->constant());
      bs.push_back(c.is_matmul ? nullptr : &c.node->input(2)->constant());
      widths.push_back(ws.back()->dim(1));
    }
    const std::string base = first->name().empty() ? std::string("gemm") : first->name();
    Value* w = g.add_constant(g.unique_name(base + "_merged_weight"), concat_columns(dt, k, ws, widths, false));
    w->dtype = dt;
    std::vector<Value*> inputs = {a, w};
    if (!all_matmul) {
      Value* b = g.add_constant(g.unique_name(base + "_merged_bias"), concat_columns(dt, 1, bs, widths, true));
      b->dtype = dt;
      inputs.push_back(b);
    }
    int64_t total = 0;
    for (int64_t x : widths) total += x;
    Node* merged = g.add_node(all_matmul ? Op::MatMul : Op::FusedGemm, g.unique_name(base + "_merged"), inputs,
                              {g.unique_name(base + "_merged_out")});
    merged->onnx_op_type = all_matmul ? "MatMul" : "FusedGemm";
    if (!all_matmul) {
      const Node* proto = nullptr;
      for (const Candidate& c : group) {
        if (!c.is_matmul) proto = c.node;
      }
      merged->attrs.set("activation", proto->attrs.get_string("activation", "None"));
      if (proto->attrs.has("approximate")) merged->attrs.set("approximate", proto->attrs.get_string("approximate", "none"));
    }
    Value* y = merged->output(0);
    y->dtype = dt;
    if (a->shape) {
      SymShape ys = *a->shape;
      ys.back() = Dim{total, ""};
      y->shape = ys;
    }

    Value* sizes = g.add_constant(g.unique_name(base + "_merged_split"), make_int64_vector(widths));
    sizes->dtype = DataType::kInt64;
    std::vector<std::string> names;
    for (const Candidate& c : group) names.push_back(g.unique_name(c.node->output(0)->name() + "_split"));
    Node* split = g.add_node(Op::Split, g.unique_name(base + "_merged_split"), {y, sizes}, names);
    split->onnx_op_type = "Split";
    split->attrs.set("axis", int64_t{-1});
    for (size_t i = 0; i < group.size(); ++i) {
      Value* old = group[i].node->output(0);
      Value* part = split->output(i);
      part->dtype = old->dtype;
      part->shape = old->shape;
      // The part takes over the original output's name (the model's interface when it is
      // a graph output; readable dumps otherwise).
      const std::string name = old->name();
      g.replace_all_uses_with(old, part);
      g.rename_value(old, g.unique_name(name + "_unmerged"));
      g.rename_value(part, name);
      g.remove_node(group[i].node);
    }
    ctx.rewrote(cat("merged ", group.size(), " GEMMs reading '", a->name(), "' into ", merged->describe(), " [K=", k,
                    ", N=", total, "] + ", split->describe()));
    changed = true;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln

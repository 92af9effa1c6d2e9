// convert_to_channels_last (pass.h): runs the 2-D convolutions and poolings channels-last.
//
// 1. Every eligible node gets kiln_layout = "NHWC" (ir/layout.h): Conv / FusedConv with a
//    constant 4-D W (the CUDA NHWC kernels reorder W once, at prepare), MaxPool without its
//    Indices output, AveragePool, GlobalAveragePool and GlobalMaxPool, whose X has a known
//    rank of 4 (FusedConv's residual Z too). Its X (and Z) is read through a
//    Transpose(perm [0,2,3,1]), it writes a new NHWC value, and a Transpose(perm [0,3,1,2])
//    of that value takes over the old output value's name and users, so graph outputs,
//    consumers and subgraph captures see the NCHW tensor they saw before. Where X is the
//    output of a node converted just before, the converted node reads that NHWC value
//    directly (one Transpose per value that an NHWC node needs in NHWC).
// 2. Cleanup to a fixed point, so that between adjacent NHWC nodes no Transpose is left:
//    remove_noops drops Transpose pairs that cancel, collapse_reshape_chains composes
//    Transpose chains, push_transpose_through_elementwise moves Transposes across
//    elementwise ops and FusedElementwise nodes (the squeeze-excite Mul, a residual Add, an
//    activation left unfused), CSE merges the Transposes of one value, DCE removes what is
//    left dead, infer_shapes types the new values.
// What stays are the Transposes at the borders of NHWC regions: the image input, and before
// ops that are not layout-aware (Flatten / Reshape before a classifier, Concat, Resize...).
//
// Not in the default pipeline: the builder runs it for CUDA fp16/bf16 engines, after
// optimize_graph and lower_float_precision. Layout-unaware passes must not run after it
// (the weight-folding passes skip NHWC nodes).
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/layout.h"
#include "passes/pass.h"

namespace kiln {

namespace {

const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};

bool is_layout_op(Op op) {
  return op == Op::Conv || op == Op::FusedConv || op == Op::MaxPool || op == Op::AveragePool ||
         op == Op::GlobalAveragePool || op == Op::GlobalMaxPool;
}

bool is_4d_tensor(const Value* v) {
  return v && v->shape && v->shape->size() == 4 && !v->is_sequence && !v->is_optional;
}

std::optional<SymShape> permuted(const std::optional<SymShape>& s, const std::vector<int64_t>& perm) {
  if (!s || s->size() != perm.size()) return std::nullopt;
  SymShape out;
  for (int64_t p : perm) out.push_back((*s)[static_cast<size_t>(p)]);
  return out;
}

// Names captured from this graph by subgraphs (If/Loop/Scan bodies).
void captured_names(const Graph& g, std::unordered_set<std::string>& names) {
  for (Node* n : g.nodes()) {
    for (Graph* sub : n->subgraphs()) {
      for (Value* r : sub->outer_refs()) names.insert(r->name());
      captured_names(*sub, names);
    }
  }
}

bool eligible(const Node& n, const std::unordered_set<std::string>& captured) {
  if (!is_layout_op(n.op())) return false;
  auto layout = read_layout(n.attrs);
  if (!layout.is_ok() || *layout != TensorLayout::kNCHW) return false;  // already NHWC, or invalid
  if (!is_4d_tensor(n.input(0)) || n.num_outputs() < 1 || !n.output(0)) return false;
  // MaxPool's Indices are positions in the NCHW tensor; the NHWC kernels do not make them.
  for (size_t i = 1; i < n.num_outputs(); ++i) {
    if (n.output(i)) return false;
  }
  // The NCHW output is recreated after the node; a subgraph capturing it by name would
  // need the new producer ordered before the capturing node, which topological_sort
  // does not know about.
  if (captured.count(n.output(0)->name())) return false;
  if (n.op() == Op::Conv || n.op() == Op::FusedConv) {
    const Value* w = n.input(1);
    if (!w || !w->is_constant() || w->constant().rank() != 4) return false;
    if (n.input(3) && !is_4d_tensor(n.input(3))) return false;
  }
  return true;
}

Node* add_transpose(Graph& g, Value* x, const std::vector<int64_t>& perm, const std::string& node_name,
                    const std::string& out_name) {
  Node* t = g.add_node(Op::Transpose, node_name, {x}, {out_name});
  t->onnx_op_type = "Transpose";
  t->attrs.set("perm", perm);
  t->output(0)->dtype = x->dtype;
  t->output(0)->shape = permuted(x->shape, perm);
  return t;
}

// Converts n (eligible) to NHWC. nhwc_of maps NCHW values to their NHWC twins.
void convert(Graph& g, Node* n, std::unordered_map<Value*, Value*>& nhwc_of, PassContext& ctx) {
  const std::string base = n->name().empty() ? std::string(op_name(n->op())) : n->name();
  for (size_t i : {size_t{0}, size_t{3}}) {
    Value* v = n->input(i);
    if (!v) continue;
    auto it = nhwc_of.find(v);
    if (it == nhwc_of.end()) {
      Node* t = add_transpose(g, v, kToNhwc, g.unique_name(base + "_to_nhwc"), g.unique_name(v->name() + "_nhwc"));
      it = nhwc_of.emplace(v, t->output(0)).first;
    }
    n->set_input(i, it->second);
  }
  n->attrs.set(kLayoutAttr, std::string("NHWC"));
  // y (renamed) becomes the NHWC output; a Transpose back takes its name and its users.
  Value* y = n->output(0);
  const std::string name = y->name();
  const std::vector<Use> uses = y->uses();
  const std::optional<SymShape> nchw_shape = y->shape;
  g.rename_value(y, g.unique_name(name + "_nhwc"));
  y->shape = permuted(nchw_shape, kToNhwc);
  Node* back = add_transpose(g, y, kToNchw, g.unique_name(base + "_to_nchw"), name);
  back->output(0)->shape = nchw_shape;
  for (const Use& u : uses) u.node->set_input(static_cast<size_t>(u.input_index), back->output(0));
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    if (g.outputs()[i] == y) g.set_output(i, back->output(0));
  }
  nhwc_of[back->output(0)] = y;
  ctx.rewrote(cat("converted ", n->describe(), " to NHWC"));
}

struct Cleanup {
  const char* name;
  PassFn run;
};

}  // namespace

Status convert_to_channels_last(Graph& g, PassContext& ctx) {
  {  // eligibility needs input ranks
    PassReport r;
    PassContext inner(r);
    KILN_RETURN_IF_ERROR(infer_shapes(g, inner).with_context("convert_to_channels_last: infer_shapes: "));
    for (const std::string& note : r.notes) ctx.rewrote("infer_shapes: " + note);
  }
  std::unordered_set<std::string> captured;
  captured_names(g, captured);
  std::unordered_map<Value*, Value*> nhwc_of;
  int converted = 0;
  for (Node* n : g.nodes()) {  // topological order: producers are converted before users
    if (!eligible(*n, captured)) continue;
    convert(g, n, nhwc_of, ctx);
    ++converted;
  }
  if (converted == 0) return Status::ok();
  KILN_RETURN_IF_ERROR(g.topological_sort());

  static const Cleanup kCleanup[] = {
      {"infer_shapes", infer_shapes},
      {"remove_noops", remove_noops},
      {"collapse_reshape_chains", collapse_reshape_chains},
      {"eliminate_common_subexpressions", eliminate_common_subexpressions},
      {"push_transpose_through_elementwise", push_transpose_through_elementwise},
      {"eliminate_dead_code", eliminate_dead_code},
  };
  constexpr int kMaxRounds = 8;
  for (int round = 0; round < kMaxRounds; ++round) {
    int changed = 0;
    for (const Cleanup& c : kCleanup) {
      PassReport r;
      PassContext inner(r);
      KILN_RETURN_IF_ERROR(c.run(g, inner).with_context(cat("convert_to_channels_last: ", c.name, ": ")));
      changed += r.rewrites;
      for (const std::string& note : r.notes) ctx.rewrote(cat(c.name, ": ", note));
    }
    if (changed == 0) break;
  }
  return Status::ok();
}

}  // namespace kiln

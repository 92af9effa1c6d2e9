// Groups connected elementwise ops into one FusedElementwise node carrying their small
// expr program (ir/elementwise_expr.h): the unit the GPU backend compiles into one kernel.
//
// A group has one sink whose output leaves the group; every other member's output is used
// only inside the group (not a graph output, not captured by a subgraph), so the group
// computes one value and nothing else needs its intermediates. Members are float ops
// (f16/bf16/f32/f64 in and out) whose attributes an expr can hold; comparisons, logic,
// bitwise ops, Cast and Where stay out. A member whose output has an outside user ends the
// group there and may sink a group of its own. Groups of one op are left alone.
//
// It runs once, after the other passes reached their fixed point (pipeline.cpp), so it
// cannot hide LayerNorm, GELU or attention patterns from them.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/elementwise_expr.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// Bounds the expr of one group; a longer chain is split into several groups.
constexpr size_t kMaxGroupOps = 128;

bool is_float_value(const Value* v) {
  return v && is_float(v->dtype) && !v->is_sequence && !v->is_optional;
}

bool fusable(const Node* n) {
  if (!is_expr_op(n->op()) || n->num_outputs() != 1 || !is_float_value(n->output(0))) return false;
  if (!n->subgraphs().empty() || !encodable_elementwise_attrs(n->op(), n->attrs)) return false;
  const OpInfo& info = op_info(n->op());
  size_t last = n->num_inputs();
  while (last > 0 && !n->input(last - 1)) --last;
  if (static_cast<int>(last) < info.min_inputs) return false;
  for (size_t i = 0; i < last; ++i) {
    const Value* v = n->input(i);
    if (v ? !is_float_value(v) : static_cast<int>(i) < info.min_inputs) return false;
  }
  return true;
}

// Names captured from this graph by subgraphs: uses that the use lists do not show.
void captured_names(const Graph& g, std::unordered_set<std::string>& names) {
  for (Node* n : g.nodes()) {
    for (Graph* sub : n->subgraphs()) {
      for (Value* r : sub->outer_refs()) names.insert(r->name());
      captured_names(*sub, names);
    }
  }
}

// Inputs of a node without the trailing omitted ones.
std::vector<Value*> present_inputs(const Node* n) {
  std::vector<Value*> in = n->inputs();
  while (!in.empty() && !in.back()) in.pop_back();
  return in;
}

class Grouper {
 public:
  Grouper(Graph& g, PassContext& ctx) : g_(g), ctx_(ctx) {
    captured_names(g, captured_);
    const auto nodes = g.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) position_[nodes[i]] = i;
  }

  // Grows the group whose sink is `sink` and replaces it; true when it fused.
  Result<bool> fuse_from(Node* sink) {
    std::vector<Node*> group = {sink};
    std::unordered_set<const Node*> in_group = {sink};
    std::vector<Value*> work = present_inputs(sink);
    while (!work.empty() && group.size() < kMaxGroupOps) {
      Value* v = work.back();
      work.pop_back();
      Node* p = v ? v->producer() : nullptr;
      if (!p || in_group.count(p) || !can_join(p, v, in_group)) continue;
      // Keep the external inputs within what one FusedElementwise node takes.
      in_group.insert(p);
      if (external_inputs(group_with(group, p), in_group).size() > kMaxFusedElementwiseInputs) {
        in_group.erase(p);
        continue;
      }
      group.push_back(p);
      // p's inputs may join now; so may producers rejected earlier because p (then outside
      // the group) used them: they are among p's inputs and are looked at again.
      for (Value* in : present_inputs(p)) work.push_back(in);
    }
    if (group.size() < 2) return false;
    std::sort(group.begin(), group.end(), [&](Node* a, Node* b) { return position_[a] < position_[b]; });
    for (Node* n : group) done_.insert(n);
    KILN_RETURN_IF_ERROR(replace(group, in_group));
    return true;
  }

  bool done(const Node* n) const { return done_.count(n) != 0; }

 private:
  // p (producing v, its only output) may join when every use of v is in the group.
  bool can_join(const Node* p, const Value* v, const std::unordered_set<const Node*>& in_group) const {
    if (done(p) || !fusable(p) || v->uses().empty() || g_.is_graph_output(v) || captured_.count(v->name())) return false;
    for (const Use& u : v->uses()) {
      if (!in_group.count(u.node)) return false;
    }
    return true;
  }

  static std::vector<Node*> group_with(std::vector<Node*> group, Node* p) {
    group.push_back(p);
    return group;
  }

  // Distinct values the group reads that no member defines, in first-use order of `group`.
  static std::vector<Value*> external_inputs(const std::vector<Node*>& group,
                                             const std::unordered_set<const Node*>& in_group) {
    std::vector<Value*> ext;
    for (Node* n : group) {
      for (Value* v : present_inputs(n)) {
        if (v && !in_group.count(v->producer()) && std::find(ext.begin(), ext.end(), v) == ext.end()) ext.push_back(v);
      }
    }
    return ext;
  }

  // Writes the expr of a group (in topological order, sink last) and swaps in the fused node.
  // The old members are left dead for eliminate_dead_code.
  Status replace(const std::vector<Node*>& group, const std::unordered_set<const Node*>& in_group) {
    const std::vector<Value*> ext = external_inputs(group, in_group);
    std::unordered_map<const Node*, int> temp;
    ElementwiseProgram prog;
    for (Node* n : group) {
      ExprInstr in;
      in.op = n->op();
      in.attrs = n->attrs;
      for (Value* v : present_inputs(n)) {
        ExprArg a;
        if (!v) {
          a.kind = ExprArg::Kind::kOmitted;
        } else if (in_group.count(v->producer())) {
          a.kind = ExprArg::Kind::kTemp;
          a.index = temp.at(v->producer());
        } else {
          a.kind = ExprArg::Kind::kInput;
          a.index = static_cast<int>(std::find(ext.begin(), ext.end(), v) - ext.begin());
        }
        in.args.push_back(a);
      }
      temp[n] = static_cast<int>(prog.instrs.size());
      prog.instrs.push_back(std::move(in));
    }
    Node* sink = group.back();
    prog.output = temp.at(sink);
    prog.num_inputs = static_cast<int>(ext.size());
    KILN_ASSIGN_OR_RETURN(std::string expr, format_elementwise_expr(prog));

    Value* out = sink->output(0);
    const std::string name = out->name();
    g_.rename_value(out, g_.unique_name(name + "_unfused"));
    Node* f = g_.add_node(Op::FusedElementwise,
                          g_.unique_name(sink->name().empty() ? std::string("fused_elementwise") : sink->name() + "_fused"),
                          ext, {name});
    f->onnx_op_type = "FusedElementwise";
    f->onnx_domain = "kiln";
    f->attrs.set("expr", expr);
    f->output(0)->dtype = out->dtype;
    f->output(0)->shape = out->shape;
    g_.replace_all_uses_with(out, f->output(0));
    ctx_.rewrote(cat("fused ", group.size(), " elementwise ops into ", f->describe(), ": ", expr));
    return Status::ok();
  }

  Graph& g_;
  PassContext& ctx_;
  std::unordered_set<std::string> captured_;
  std::unordered_map<const Node*, size_t> position_;
  std::unordered_set<const Node*> done_;
};

}  // namespace

Status fuse_elementwise_chains(Graph& g, PassContext& ctx) {
  Grouper grouper(g, ctx);
  const auto nodes = g.nodes();
  bool changed = false;
  // Sinks are visited last-to-first, so a group reaches as far up as its uses allow before
  // an earlier node could claim its producers as a sink of its own.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    if (grouper.done(n) || !fusable(n)) continue;
    KILN_ASSIGN_OR_RETURN(bool fused, grouper.fuse_from(n));
    changed |= fused;
  }
  if (changed) KILN_RETURN_IF_ERROR(g.topological_sort());
  return Status::ok();
}

}  // namespace kiln

// If, Loop and Scan: run subgraphs through ctx.run_subgraph. Bodies see the enclosing
// graphs' values by name (the executor binds those captures).
#include <cstring>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/util.h"
#include "ir/graph.h"

namespace kiln {

namespace {

// Element `index` of t along `axis`, with that axis removed.
Tensor take_slice(const Tensor& t, int64_t axis, int64_t index) {
  Dims out_dims = t.dims();
  out_dims.erase(out_dims.begin() + axis);
  Tensor out(t.dtype(), out_dims);
  const size_t es = dtype_size(t.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= t.dims()[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < t.rank(); ++d) inner *= t.dims()[static_cast<size_t>(d)];
  const int64_t len = t.dims()[static_cast<size_t>(axis)];
  const auto* src = static_cast<const std::byte*>(t.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + static_cast<size_t>(o * inner) * es, src + static_cast<size_t>((o * len + index) * inner) * es,
                static_cast<size_t>(inner) * es);
  }
  return out;
}

// Stacks equally shaped tensors along a new axis.
Result<Tensor> stack(const std::vector<Tensor>& parts, int64_t axis, const std::string& what) {
  const Tensor& first = parts.front();
  for (const Tensor& p : parts) {
    if (p.dims() != first.dims() || p.dtype() != first.dtype()) {
      return invalid_argument(what, ": iterations produced different shapes or dtypes (", first.describe(), " and ",
                              p.describe(), ")");
    }
  }
  Dims out_dims = first.dims();
  int64_t a;
  KILN_RETURN_IF_ERROR(normalize_axis(axis, first.rank() + 1, &a));
  out_dims.insert(out_dims.begin() + a, static_cast<int64_t>(parts.size()));
  Tensor out(first.dtype(), out_dims);
  const size_t es = dtype_size(first.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= first.dims()[static_cast<size_t>(d)];
  for (int64_t d = a; d < first.rank(); ++d) inner *= first.dims()[static_cast<size_t>(d)];
  const int64_t n = static_cast<int64_t>(parts.size());
  auto* dst = static_cast<std::byte*>(out.raw());
  for (int64_t i = 0; i < n; ++i) {
    const auto* src = static_cast<const std::byte*>(parts[static_cast<size_t>(i)].raw());
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + static_cast<size_t>((o * n + i) * inner) * es, src + static_cast<size_t>(o * inner) * es,
                  static_cast<size_t>(inner) * es);
    }
  }
  return out;
}

Status check_runner(const KernelContext& ctx) {
  if (!ctx.run_subgraph) return internal_error("subgraphs cannot run in this context");
  return Status::ok();
}

Status if_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_runner(ctx));
  const Tensor& cond = *ctx.input(0);
  KILN_ENSURE(cond.size() == 1, "condition must have one element, got ", cond.describe());
  bool c = cond.get_double(0) != 0.0;
  auto branch = ctx.attr().get_graph(c ? "then_branch" : "else_branch");
  KILN_ENSURE(branch != nullptr, "missing ", c ? "then_branch" : "else_branch", " attribute");
  KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outs, ctx.run_subgraph(*branch, {}));
  KILN_ENSURE(outs.size() == ctx.outputs.size(), "branch '", branch->name, "' returned ", outs.size(),
              " outputs, the node has ", ctx.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) ctx.set_output(i, std::move(outs[i]));
  return Status::ok();
}

Status loop_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_runner(ctx));
  auto body = ctx.attr().get_graph("body");
  KILN_ENSURE(body != nullptr, "missing body attribute");
  const size_t n_carried = ctx.num_inputs() - 2;
  KILN_ENSURE(body->inputs().size() == n_carried + 2, "body takes ", body->inputs().size(), " inputs, expected ",
              n_carried + 2);
  KILN_ENSURE(body->outputs().size() >= n_carried + 1, "body returns ", body->outputs().size(), " outputs, expected at least ",
              n_carried + 1);
  const size_t n_scan = body->outputs().size() - 1 - n_carried;
  KILN_ENSURE(ctx.outputs.size() == n_carried + n_scan, "node has ", ctx.outputs.size(), " outputs, the body produces ",
              n_carried + n_scan);
  int64_t max_trips = -1;
  if (const Tensor* m = ctx.input(0)) {
    KILN_ENSURE(m->size() == 1, "M must have one element, got ", m->describe());
    max_trips = m->get_int(0);
  }
  bool cond = true;
  if (const Tensor* c = ctx.input(1)) {
    KILN_ENSURE(c->size() == 1, "cond must have one element, got ", c->describe());
    cond = c->get_double(0) != 0.0;
  }
  KILN_ENSURE(max_trips >= 0 || ctx.input(1), "Loop without M or cond would never end");
  std::vector<Tensor> carried;
  for (size_t i = 0; i < n_carried; ++i) {
    const Tensor* t = ctx.input(2 + i);
    KILN_ENSURE(t != nullptr, "loop-carried input ", i, " is missing");
    carried.push_back(*t);
  }
  std::vector<std::vector<Tensor>> scans(n_scan);
  for (int64_t iter = 0; (max_trips < 0 || iter < max_trips) && cond; ++iter) {
    std::vector<Tensor> in;
    in.push_back(make_scalar_int64(iter));
    in.push_back(make_tensor<bool>({}, {cond}));
    for (const Tensor& t : carried) in.push_back(t);
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, ctx.run_subgraph(*body, in));
    KILN_ENSURE(out[0].size() == 1, "body condition output must have one element, got ", out[0].describe());
    cond = out[0].get_double(0) != 0.0;
    for (size_t i = 0; i < n_carried; ++i) carried[i] = std::move(out[1 + i]);
    for (size_t k = 0; k < n_scan; ++k) scans[k].push_back(std::move(out[1 + n_carried + k]));
  }
  for (size_t i = 0; i < n_carried; ++i) ctx.set_output(i, carried[i]);
  for (size_t k = 0; k < n_scan; ++k) {
    if (scans[k].empty()) {
      const Value* v = body->outputs()[1 + n_carried + k];
      DataType dt = v->dtype == DataType::kUndefined ? DataType::kFloat32 : v->dtype;
      ctx.set_output(n_carried + k, Tensor(dt, {0}));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Tensor s, stack(scans[k], 0, cat("scan output ", k)));
    ctx.set_output(n_carried + k, std::move(s));
  }
  return Status::ok();
}

Status scan_kernel(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_runner(ctx));
  auto body = ctx.attr().get_graph("body");
  KILN_ENSURE(body != nullptr, "missing body attribute");
  const Attributes& a = ctx.attr();
  const int64_t m = a.get_int("num_scan_inputs", -1);
  KILN_ENSURE(m >= 1 && static_cast<size_t>(m) <= ctx.num_inputs(), "num_scan_inputs ", m, " is invalid for ",
              ctx.num_inputs(), " inputs");
  const size_t n_state = ctx.num_inputs() - static_cast<size_t>(m);
  KILN_ENSURE(body->inputs().size() == ctx.num_inputs(), "body takes ", body->inputs().size(), " inputs, the node has ",
              ctx.num_inputs());
  KILN_ENSURE(body->outputs().size() >= n_state && ctx.outputs.size() == body->outputs().size(),
              "body outputs do not match the node's outputs");
  const size_t n_scan_out = body->outputs().size() - n_state;
  auto in_axes = a.get_ints("scan_input_axes", std::vector<int64_t>(static_cast<size_t>(m), 0));
  auto in_dirs = a.get_ints("scan_input_directions", std::vector<int64_t>(static_cast<size_t>(m), 0));
  auto out_axes = a.get_ints("scan_output_axes", std::vector<int64_t>(n_scan_out, 0));
  auto out_dirs = a.get_ints("scan_output_directions", std::vector<int64_t>(n_scan_out, 0));
  KILN_ENSURE(in_axes.size() == static_cast<size_t>(m) && in_dirs.size() == static_cast<size_t>(m) &&
                  out_axes.size() == n_scan_out && out_dirs.size() == n_scan_out,
              "scan axes/directions attributes have the wrong length");
  int64_t len = -1;
  for (int64_t j = 0; j < m; ++j) {
    const Tensor* t = ctx.input(n_state + static_cast<size_t>(j));
    KILN_ENSURE(t != nullptr, "scan input ", j, " is missing");
    KILN_RETURN_IF_ERROR(normalize_axis(in_axes[static_cast<size_t>(j)], t->rank(), &in_axes[static_cast<size_t>(j)]));
    KILN_ENSURE(t->rank() >= 1, "scan input ", j, " must have rank >= 1");
    int64_t l = t->dims()[static_cast<size_t>(in_axes[static_cast<size_t>(j)])];
    KILN_ENSURE(len < 0 || l == len, "scan inputs have different sequence lengths (", len, " and ", l, ")");
    len = l;
  }
  std::vector<Tensor> state;
  for (size_t i = 0; i < n_state; ++i) {
    KILN_ENSURE(ctx.input(i) != nullptr, "state input ", i, " is missing");
    state.push_back(*ctx.input(i));
  }
  std::vector<std::vector<Tensor>> outs(n_scan_out);
  for (int64_t it = 0; it < len; ++it) {
    std::vector<Tensor> in = state;
    for (int64_t j = 0; j < m; ++j) {
      const Tensor& t = *ctx.input(n_state + static_cast<size_t>(j));
      int64_t idx = in_dirs[static_cast<size_t>(j)] ? len - 1 - it : it;
      in.push_back(take_slice(t, in_axes[static_cast<size_t>(j)], idx));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, ctx.run_subgraph(*body, in));
    for (size_t i = 0; i < n_state; ++i) state[i] = std::move(out[i]);
    for (size_t k = 0; k < n_scan_out; ++k) outs[k].push_back(std::move(out[n_state + k]));
  }
  for (size_t i = 0; i < n_state; ++i) ctx.set_output(i, state[i]);
  for (size_t k = 0; k < n_scan_out; ++k) {
    KILN_ENSURE(!outs[k].empty(), "scan over an empty sequence has no shape for scan output ", k);
    if (out_dirs[k]) std::reverse(outs[k].begin(), outs[k].end());
    KILN_ASSIGN_OR_RETURN(Tensor s, stack(outs[k], out_axes[k], cat("scan output ", k)));
    ctx.set_output(n_state + k, std::move(s));
  }
  return Status::ok();
}

// Scan-8: input 0 is sequence_lens (optional) and every state and scan input has a
// leading batch dimension; each batch entry is an independent Scan-9 over axis 0.
Status scan8_kernel(KernelContext& ctx) {
  if (ctx.attr().get_int("kiln_scan8_batched", 0) == 0) return scan_kernel(ctx);
  KILN_ENSURE(ctx.num_inputs() >= 2, "Scan-8 needs sequence_lens and at least one more input");
  const size_t n_in = ctx.num_inputs() - 1;
  int64_t batch = -1;
  for (size_t i = 1; i <= n_in; ++i) {
    const Tensor* t = ctx.input(i);
    KILN_ENSURE(t && t->rank() >= 1, "input ", i, " must have a batch dimension");
    KILN_ENSURE(batch < 0 || t->dims()[0] == batch, "inputs disagree on the batch size");
    batch = t->dims()[0];
  }
  Attributes attrs = ctx.attr();
  attrs.erase("kiln_scan8_batched");
  std::vector<std::vector<Tensor>> per_output(ctx.outputs.size());
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> slices;
    for (size_t i = 1; i <= n_in; ++i) slices.push_back(take_slice(*ctx.input(i), 0, b));
    if (const Tensor* lens = ctx.input(0); lens && lens->size() > 0) {
      KILN_ENSURE(lens->size() == batch, "sequence_lens has ", lens->size(), " entries for batch ", batch);
      const Tensor& first_scan = slices.back();
      // A rank-1 input leaves a rank-0 slice, which has no sequence axis to index (found
      // by fuzz_onnx_importer).
      KILN_ENSURE(first_scan.rank() >= 1, "Scan-8 scan input ", n_in, " has no sequence axis after its batch axis");
      KILN_ENSURE(lens->get_int(b) == first_scan.dims()[0], "Scan-8 with sequence_lens shorter than the sequence is not supported");
    }
    KernelContext sub;
    sub.op = ctx.op;
    sub.attrs = &attrs;
    for (const Tensor& t : slices) sub.inputs.push_back(&t);
    sub.outputs.resize(ctx.outputs.size());
    sub.output_wanted = ctx.output_wanted;
    sub.run_subgraph = ctx.run_subgraph;
    KILN_RETURN_IF_ERROR(scan_kernel(sub));
    for (size_t k = 0; k < sub.outputs.size(); ++k) per_output[k].push_back(std::move(sub.outputs[k]));
  }
  KILN_ENSURE(batch > 0, "Scan-8 over an empty batch has no output shapes");
  for (size_t k = 0; k < per_output.size(); ++k) {
    KILN_ASSIGN_OR_RETURN(Tensor t, stack(per_output[k], 0, cat("output ", k)));
    ctx.set_output(k, std::move(t));
  }
  return Status::ok();
}

}  // namespace

void register_control_flow_kernels(KernelRegistry& r) {
  r.add(Op::If, if_kernel);
  r.add(Op::Loop, loop_kernel);
  r.add(Op::Scan, scan8_kernel);
}

}  // namespace kiln

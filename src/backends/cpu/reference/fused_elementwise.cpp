// FusedElementwise reference kernel: evaluates the node's expr program statement by
// statement with the reference kernels of the ops it names (they do the broadcasting),
// so the result is bit-identical to the unfused chain.
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backends/cpu/reference/kernel.h"
#include "ir/elementwise_expr.h"

namespace kiln {

namespace {

// Parsed programs by expr text. A model has a handful of distinct exprs that run many
// times; the cache is bounded (cleared when full) and guarded by a mutex. Programs are
// immutable once parsed, so callers share them without locking.
Result<std::shared_ptr<const ElementwiseProgram>> cached_program(const std::string& expr) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const ElementwiseProgram>> cache;
  constexpr size_t kMaxCached = 256;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(expr);
    if (it != cache.end()) return it->second;
  }
  KILN_ASSIGN_OR_RETURN(ElementwiseProgram p, parse_elementwise_expr(expr));
  auto shared = std::make_shared<const ElementwiseProgram>(std::move(p));
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxCached) cache.clear();
  cache.emplace(expr, shared);
  return shared;
}

Status fused_elementwise_kernel(KernelContext& ctx) {
  const Attribute* a = ctx.attr().find("expr");
  KILN_ENSURE(a && a->type() == AttrType::kString, "FusedElementwise needs a string attribute 'expr'");
  KILN_ASSIGN_OR_RETURN(auto prog, cached_program(std::get<std::string>(a->value)));
  KILN_ENSURE(prog->num_inputs <= static_cast<int>(ctx.num_inputs()), "FusedElementwise expr reads x",
              prog->num_inputs - 1, " but the node has ", ctx.num_inputs(), " inputs");
  for (int i = 0; i < prog->num_inputs; ++i) {
    KILN_ENSURE(ctx.has_input(static_cast<size_t>(i)), "FusedElementwise input ", i, " is missing");
  }
  // Temps are freed after their last use, so a long chain holds few intermediates.
  const size_t n = prog->instrs.size();
  std::vector<size_t> last_use(n, 0);
  for (size_t k = 0; k < n; ++k) {
    for (const ExprArg& arg : prog->instrs[k].args) {
      if (arg.kind == ExprArg::Kind::kTemp) last_use[static_cast<size_t>(arg.index)] = k;
    }
  }
  std::vector<Tensor> temps(n);
  for (size_t k = 0; k < n; ++k) {
    const ExprInstr& in = prog->instrs[k];
    std::vector<const Tensor*> args;
    args.reserve(in.args.size());
    for (const ExprArg& arg : in.args) {
      if (arg.kind == ExprArg::Kind::kInput) args.push_back(ctx.input(static_cast<size_t>(arg.index)));
      else if (arg.kind == ExprArg::Kind::kTemp) args.push_back(&temps[static_cast<size_t>(arg.index)]);
      else args.push_back(nullptr);
    }
    KILN_RETURN_IF_ERROR(run_reference_op(in.op, in.attrs, std::move(args), &temps[k])
                             .with_context(cat("FusedElementwise statement t", k, " (", op_name(in.op), "): ")));
    for (const ExprArg& arg : in.args) {
      const auto t = static_cast<size_t>(arg.index);
      if (arg.kind == ExprArg::Kind::kTemp && last_use[t] == k && t != static_cast<size_t>(prog->output)) {
        temps[t] = Tensor();
      }
    }
  }
  ctx.set_output(0, std::move(temps[static_cast<size_t>(prog->output)]));
  return Status::ok();
}

}  // namespace

void register_fused_elementwise_kernels(KernelRegistry& r) { r.add(Op::FusedElementwise, fused_elementwise_kernel); }

}  // namespace kiln

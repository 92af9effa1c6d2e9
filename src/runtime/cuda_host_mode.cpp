// Host mode of CUDA execution contexts. A graph with a data-dependent shape at the current
// input shapes (NonZero, NonMaxSuppression, Unique, a Loop whose outputs grow, ReduceSum
// with axes given at run time, ...) cannot have its device memory planned before running,
// and a CUDA engine never refuses a model: the context runs the whole inference with the
// CPU kernels, set up as for a CPU engine (ContextImpl::setup, run_steps), in host memory.
// A CUDA engine's bound buffers are device memory: bound inputs are copied to the host
// before the run and outputs to their bound buffers after it.
#include <cstring>

#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"

namespace kiln {

namespace {

// Why a value's shape is not known before running; "" when it is.
std::string unknown_shape_reason(const Value& v) {
  if (v.is_sequence) return "is a sequence";
  if (v.is_optional) return "is an optional value";
  if (v.dtype == DataType::kString) return "is a string tensor";
  if (v.dtype == DataType::kUndefined) return "has no known dtype";
  if (!has_static_shape(&v)) return cat("has a data-dependent shape ", sym_shape_str(v.shape));
  return "";
}

}  // namespace

std::string data_dependent_shape_reason(const Graph& g) {
  for (const Node* n : g.nodes()) {
    // Inputs are graph inputs (static once specialized), constants or earlier outputs:
    // this catches the values no node produces (string constants, say).
    for (const Value* v : n->inputs()) {
      if (!v) continue;
      const std::string why = unknown_shape_reason(*v);
      if (!why.empty()) return cat(n->describe(), ": input '", v->name(), "' ", why);
    }
    for (const Value* o : n->outputs()) {
      if (!o) continue;
      const std::string why = unknown_shape_reason(*o);
      if (!why.empty()) return cat(n->describe(), ": output '", o->name(), "' ", why);
    }
  }
  return "";
}

Status ContextImpl::run_host_mode(void* stream) {
  // A bound output's buffer size is the caller's business: kiln sizes it by tensor_shape(),
  // which a data-dependent shape does not have before running.
  for (Value* o : spec->outputs()) {
    if (!bound.count(o->name())) continue;
    const Slot& s = slots[static_cast<size_t>(slot_of.at(o))];
    if (s.kind == SlotKind::kDynamic) {
      return invalid_argument("output '", o->name(), "' has a data-dependent shape ", sym_shape_str(o->shape),
                              ", so kiln cannot tell whether the buffer bound to it is large enough; unbind it "
                              "(unbind_tensor) and read it with output() after running");
    }
  }
  // Work queued on the caller's stream before this call (writing a bound input, say) comes
  // first; then bound inputs (device memory) to the context's host buffers.
  if (stream) KILN_RETURN_IF_ERROR(cuda_wait(stream));
  bool copied = false;
  for (Value* in : spec->inputs()) {
    auto b = bound.find(in->name());
    if (b == bound.end()) continue;
    Slot& s = slots[static_cast<size_t>(slot_of.at(in))];
    if (!s.t.nbytes()) continue;
    KILN_RETURN_IF_ERROR(cuda_copy(s.t.raw(), b->second, s.t.nbytes(), stream)
                             .with_context(cat("copying input '", in->name(), "' to the host: ")));
    copied = true;
  }
  if (copied) KILN_RETURN_IF_ERROR(cuda_wait(stream));
  KILN_RETURN_IF_ERROR(run_steps());
  // Outputs to their bound buffers; done before returning (the host memory they come from
  // is rewritten by the next run).
  copied = false;
  for (Value* o : spec->outputs()) {
    auto b = bound.find(o->name());
    if (b == bound.end()) continue;
    const Slot& s = slots[static_cast<size_t>(slot_of.at(o))];
    if (!s.t.nbytes()) continue;
    KILN_RETURN_IF_ERROR(cuda_copy(b->second, s.t.raw(), s.t.nbytes(), stream)
                             .with_context(cat("copying output '", o->name(), "' to its bound buffer: ")));
    copied = true;
  }
  if (copied) KILN_RETURN_IF_ERROR(cuda_wait(stream));
  return Status::ok();
}

Status ContextImpl::host_upload_inputs(const std::map<std::string, Tensor>& host) {
  for (const auto& [name, t] : host) {
    Value* v = spec->find_value(name);
    auto it = v ? slot_of.find(v) : slot_of.end();
    if (it == slot_of.end() || slots[static_cast<size_t>(it->second)].kind != SlotKind::kInput) {
      return invalid_argument("'", name, "' is not an input of the engine");
    }
    Slot& s = slots[static_cast<size_t>(it->second)];
    if (t.dtype() != s.dtype || t.dims() != s.dims) {
      return invalid_argument("input '", name, "': got ", t.describe(), ", the context is set up for ", dtype_name(s.dtype),
                              dims_str(s.dims));
    }
    if (t.nbytes()) std::memcpy(s.t.raw(), t.raw(), t.nbytes());
  }
  return Status::ok();
}

Result<Tensor> ContextImpl::host_value(const std::string& name) const {
  Value* v = spec ? spec->find_value(name) : nullptr;
  auto it = v ? slot_of.find(v) : slot_of.end();
  if (it == slot_of.end()) return invalid_argument("unknown tensor '", name, "'");
  const Tensor& t = slots[static_cast<size_t>(it->second)].t;
  if (!t.defined()) return invalid_argument("'", name, "' is not available: run the engine first");
  return t;
}

}  // namespace kiln

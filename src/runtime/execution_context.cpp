// ExecutionContext: specializes the engine's graph to the current input shapes, plans
// memory by liveness, prepares one kernel per layer, then executes without allocating.
#include <omp.h>

#include <chrono>
#include <cstring>
#include <unordered_set>

#include "passes/pass.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"
#include "runtime/interpreter.h"
#include "runtime/memory_plan.h"

namespace kiln {

namespace {

constexpr size_t kAlign = 64;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

const TensorDesc* find_desc(const std::vector<TensorDesc>& v, const std::string& name) {
  for (const auto& d : v) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

void collect_captures(const Graph& g, std::unordered_set<std::string>& names) {
  for (Node* n : g.nodes()) {
    for (Graph* sub : n->subgraphs()) {
      for (Value* r : sub->outer_refs()) names.insert(r->name());
      collect_captures(*sub, names);
    }
  }
}

}  // namespace

std::string layer_key(const Node& n) {
  for (Value* o : n.outputs()) {
    if (o) return o->name();
  }
  return n.name();
}

Dims static_dims(const Value& v) {
  Dims d;
  for (const Dim& x : *v.shape) d.push_back(x.value);
  return d;
}

bool has_static_shape(const Value* v) {
  if (!v || v->is_sequence || v->is_optional || !v->shape) return false;
  for (const Dim& d : *v->shape) {
    if (!d.known()) return false;
  }
  return v->dtype != DataType::kUndefined && v->dtype != DataType::kString;
}

Result<Dims> ContextImpl::resolved_input_dims(const Value& input) const {
  auto it = input_dims.find(input.name());
  if (it != input_dims.end()) return it->second;
  if (has_static_shape(&input)) return static_dims(input);
  const auto& ranges = e->profiles[static_cast<size_t>(profile)].inputs;
  auto r = ranges.find(input.name());
  if (r != ranges.end()) return r->second.opt;
  return invalid_argument("input '", input.name(), "' has shape ", sym_shape_str(input.shape),
                          "; set its shape with set_input_shape before running");
}

Status ContextImpl::bind_slot(Slot& s, void* data) {
  s.t = Tensor::wrap(s.dtype, s.dims, data);
  return Status::ok();
}

void ContextImpl::plan_lives(std::vector<BufferLife>* lives, std::vector<int>* arena_slots) const {
  // Graph outputs and values captured by subgraphs live to the end.
  const int end = static_cast<int>(steps.size());
  std::vector<int> first(slots.size(), -1), last(slots.size(), -1);
  for (int i = 0; i < end; ++i) {
    for (int s : steps[static_cast<size_t>(i)].out) {
      if (s >= 0) first[static_cast<size_t>(s)] = last[static_cast<size_t>(s)] = i;
    }
    for (int s : steps[static_cast<size_t>(i)].in) {
      if (s >= 0) last[static_cast<size_t>(s)] = i;
    }
  }
  const Graph& g = *spec;
  std::unordered_set<std::string> captured;
  collect_captures(g, captured);
  for (auto& [v, s] : slot_of) {
    if (g.is_graph_output(v) || captured.count(v->name())) last[static_cast<size_t>(s)] = end;
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].kind != SlotKind::kArena) continue;
    lives->push_back({static_cast<size_t>(num_elements(slots[i].dims)) * dtype_size(slots[i].dtype), first[i], last[i]});
    arena_slots->push_back(static_cast<int>(i));
  }
}

std::vector<int> ContextImpl::find_views() {
  std::vector<int> root(slots.size(), -1);
  const Graph& g = *spec;
  for (Step& step : steps) {
    if (!is_shape_only(step.node->op())) continue;
    if (step.in.empty() || step.out.size() != 1 || step.in[0] < 0 || step.out[0] < 0) continue;
    const size_t in = static_cast<size_t>(step.in[0]), out = static_cast<size_t>(step.out[0]);
    const Slot& si = slots[in];
    const Slot& so = slots[out];
    if (si.kind != SlotKind::kArena || so.kind != SlotKind::kArena) continue;
    if (g.is_graph_output(step.node->input(0)) || g.is_graph_output(step.node->output(0))) continue;
    if (si.dtype != so.dtype || num_elements(si.dims) != num_elements(so.dims)) continue;
    root[out] = root[in] >= 0 ? root[in] : static_cast<int>(in);
    step.view = true;
  }
  return root;
}

MemoryPlan ContextImpl::plan_arena(const std::vector<int>& views, size_t align, std::vector<int>* arena_slots) const {
  std::vector<BufferLife> lives;
  plan_lives(&lives, arena_slots);
  std::vector<int> life_of(slots.size(), -1);
  for (size_t i = 0; i < arena_slots->size(); ++i) life_of[static_cast<size_t>((*arena_slots)[i])] = static_cast<int>(i);
  for (size_t s = 0; s < views.size(); ++s) {
    if (views[s] < 0) continue;
    BufferLife& root = lives[static_cast<size_t>(life_of[static_cast<size_t>(views[s])])];
    BufferLife& view = lives[static_cast<size_t>(life_of[s])];
    root.first = std::min(root.first, view.first);
    root.last = std::max(root.last, view.last);
    view.bytes = 0;
  }
  MemoryPlan mp = plan_memory(lives, align);
  for (size_t s = 0; s < views.size(); ++s) {
    if (views[s] < 0) continue;
    mp.offsets[static_cast<size_t>(life_of[s])] = mp.offsets[static_cast<size_t>(life_of[static_cast<size_t>(views[s])])];
  }
  return mp;
}

Status ContextImpl::setup() {
  dirty = true;
  steps.clear();
  slots.clear();
  slot_of.clear();
  scratch_bytes = 0;
  host_mode = false;
  host_mode_reason.clear();
  KILN_ASSIGN_OR_RETURN(spec, import_plan_graph(e->plan, "engine"));
  Graph& g = *spec;
  // 1. Specialize: concrete input shapes, then fold what they decide (Shape -> Gather ->
  // Concat -> Reshape chains become constants), so every later shape is static.
  std::vector<Dims> in_dims;
  for (Value* in : g.inputs()) {
    KILN_ASSIGN_OR_RETURN(Dims d, resolved_input_dims(*in));
    SymShape s;
    for (int64_t x : d) s.push_back(Dim{x, ""});
    in->shape = s;
    in_dims.push_back(d);
    // An input without elements has no data: its value follows from its shape, so its
    // users read it as a constant (and fold, when it is all they read).
    if (num_elements(d) == 0 && !g.is_graph_output(in) && !in->uses().empty()) {
      Value* c = g.add_constant(g.unique_name(in->name() + "_empty"), Tensor(in->dtype, d));
      const std::vector<Use> uses = in->uses();
      for (const Use& u : uses) u.node->set_input(static_cast<size_t>(u.input_index), c);
    }
  }
  OptimizeOptions oo;
  oo.level = 1;
  oo.verify = false;
  KILN_RETURN_IF_ERROR(optimize_graph(g, oo).status().with_context("specializing the engine to the input shapes: "));
  // A CUDA context plans device memory before running; a data-dependent shape makes it run
  // every layer on the CPU instead (host mode, runtime/cuda_host_mode.cpp).
  if (e->device == DeviceKind::kCUDA) {
    host_mode_reason = data_dependent_shape_reason(g);
    host_mode = !host_mode_reason.empty();
  }

  // 2. Slots: where every value lives.
  auto add_slot = [&](Value* v, SlotKind kind) {
    Slot s;
    s.kind = kind;
    s.dtype = v->dtype;
    s.name = v->name();
    if (kind == SlotKind::kConstant) s.t = v->constant();
    slot_of[v] = static_cast<int>(slots.size());
    slots.push_back(std::move(s));
  };
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    Value* in = g.inputs()[i];
    add_slot(in, SlotKind::kInput);
    slots.back().dims = in_dims[i];
  }
  for (Value* c : g.constants()) add_slot(c, SlotKind::kConstant);
  const std::vector<Node*> nodes = g.nodes();
  for (Node* n : nodes) {
    for (Value* o : n->outputs()) {
      if (!o) continue;
      const bool fixed = has_static_shape(o);
      const bool bound_out = !host_mode && g.is_graph_output(o) && bound.count(o->name());
      add_slot(o, !fixed ? SlotKind::kDynamic : bound_out ? SlotKind::kBound : SlotKind::kArena);
      if (fixed) slots.back().dims = static_dims(*o);
    }
  }

  if (e->device == DeviceKind::kCUDA && !host_mode) {
    arena_storage.reset();  // host memory of an earlier setup in host mode
    arena = nullptr;
    arena_capacity = 0;
    KILN_RETURN_IF_ERROR(cuda_setup(*this));
    dirty = false;
    return Status::ok();
  }
  if (host_mode) {
    default_logger().log(LogSeverity::kWarning, cat(host_mode_reason, "; CUDA engines plan device memory before running, ",
                                                    "so this context runs every layer on the CPU"));
    cuda_release_device_memory(*this);
  }

  // 3. One kernel per layer: the plan's tactic if it still applies at these shapes, else
  // the first fast tactic that prepares, else the reference kernel.
  const int threads = e->threads > 0 ? e->threads : omp_get_max_threads();
  for (Node* n : nodes) {
    Step st;
    st.node = n;
    st.reference = reference_kernels().find(n->op());
    fast::LayerSpec ls;
    ls.op = n->op();
    ls.attrs = &n->attrs;
    ls.threads = threads;
    bool all_static = true;
    std::vector<fast::TensorShape> in_shapes, out_shapes;
    for (Value* v : n->inputs()) {
      st.in.push_back(v ? slot_of.at(v) : -1);
      ls.input_dtypes.push_back(v ? v->dtype : DataType::kUndefined);
      ls.constants.push_back(v && v->is_constant() ? &v->constant() : nullptr);
      if (v && !has_static_shape(v)) all_static = false;
      in_shapes.push_back(v && has_static_shape(v) ? fast::TensorShape{v->dtype, static_dims(*v)} : fast::TensorShape{});
    }
    for (Value* o : n->outputs()) {
      st.out.push_back(o ? slot_of.at(o) : -1);
      ls.output_dtypes.push_back(o ? o->dtype : DataType::kUndefined);
      if (o && !has_static_shape(o)) all_static = false;
      out_shapes.push_back(o && has_static_shape(o) ? fast::TensorShape{o->dtype, static_dims(*o)} : fast::TensorShape{});
    }
    if (all_static && n->subgraphs().empty()) {
      std::vector<const fast::Tactic*> cands = fast::tactics_for(ls);
      auto li = e->layer_of.find(layer_key(*n));
      if (li != e->layer_of.end()) {
        const std::string& want = e->layers[li->second].tactic;
        for (size_t i = 0; i < cands.size(); ++i) {
          if (want == cands[i]->name) std::rotate(cands.begin(), cands.begin() + static_cast<long>(i), cands.begin() + static_cast<long>(i) + 1);
        }
      }
      if (chooser && cands.size() > 1) {
        if (const fast::Tactic* pick = chooser->choose(st, ls, cands, in_shapes, out_shapes)) {
          cands.erase(std::find(cands.begin(), cands.end(), pick));
          cands.insert(cands.begin(), pick);
        }
      }
      for (const fast::Tactic* t : cands) {
        auto k = t->create(ls);
        if (!k) continue;
        size_t scratch = 0;
        if (!k.value()->prepare(in_shapes, out_shapes, &scratch).is_ok()) continue;
        st.tactic = t;
        st.kernel = std::move(k).value();
        scratch_bytes = std::max(scratch_bytes, scratch);
        break;
      }
    }
    if (!st.kernel && !st.reference) {
      return unsupported(n->describe(), ": no kernel (fast or reference) for ", op_name(n->op()));
    }
    steps.push_back(std::move(st));
  }

  // 4. Liveness -> arena offsets (Reshape-like layers: views of their input).
  std::vector<int> arena_slots;
  const std::vector<int> views = find_views();
  MemoryPlan mp = plan_arena(views, kAlign, &arena_slots);
  activation_bytes = mp.arena_bytes;
  const size_t need = round_up(mp.arena_bytes) + round_up(scratch_bytes) + kAlign;
  if (e->memory_limit_bytes && need > e->memory_limit_bytes) {
    return invalid_argument("these input shapes need ", need, " bytes of activation memory, over the engine's limit of ",
                            e->memory_limit_bytes, " bytes");
  }
  if (need > arena_capacity) {
    arena_storage.reset(new std::byte[need]);
    arena_capacity = need;
    auto addr = reinterpret_cast<uintptr_t>(arena_storage.get());
    arena = arena_storage.get() + (round_up(addr) - addr);
  }
  for (size_t i = 0; i < arena_slots.size(); ++i) {
    Slot& s = slots[static_cast<size_t>(arena_slots[i])];
    s.offset = mp.offsets[i];
    s.t = Tensor::wrap(s.dtype, s.dims, arena + s.offset);
  }
  for (Slot& s : slots) {
    if (host_mode) {
      // Bound buffers are device memory, copied to and from these at each run.
      if (s.kind == SlotKind::kInput) s.t = Tensor(s.dtype, s.dims);
      continue;
    }
    auto b = bound.find(s.name);
    if (b != bound.end() && (s.kind == SlotKind::kInput || s.kind == SlotKind::kBound)) {
      KILN_RETURN_IF_ERROR(bind_slot(s, b->second));
    }
  }
  // 5. Each step's tensor pointers, fixed from now on.
  for (Step& st : steps) {
    for (int s : st.in) st.in_ptrs.push_back(s >= 0 ? &slots[static_cast<size_t>(s)].t : nullptr);
    for (int s : st.out) st.out_ptrs.push_back(s >= 0 ? &slots[static_cast<size_t>(s)].t : nullptr);
  }
  dirty = false;
  return Status::ok();
}

Status ContextImpl::run_steps() {
  for (Value* in : spec->inputs()) {
    const Slot& s = slots[static_cast<size_t>(slot_of.at(in))];
    if (!s.t.raw() && num_elements(s.dims) > 0) {
      return invalid_argument("input '", in->name(), "' has no buffer; bind one with set_tensor_address");
    }
  }
  std::byte* scratch = arena + round_up(activation_bytes);
  const Graph& g = *spec;
  auto lookup = [this, &g](const std::string& name) -> const Tensor* {
    Value* v = g.find_value(name);
    if (!v) return nullptr;
    auto it = slot_of.find(v);
    return it == slot_of.end() ? nullptr : &slots[static_cast<size_t>(it->second)].t;
  };
  for (Step& st : steps) {
    const auto t0 = profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const Node& n = *st.node;
    if (st.view) {
      // The output shares the input's memory (find_views): nothing to run.
    } else if (st.kernel) {
      Status s = st.kernel->run(st.in_ptrs, st.out_ptrs, scratch);
      if (!s.is_ok()) return s.with_context(cat(n.describe(), " [", st.tactic->name, "]: "));
    } else {
      KernelContext kc;
      kc.op = n.op();
      kc.attrs = &n.attrs;
      kc.inputs = st.in_ptrs;
      kc.outputs.resize(st.out.size());
      for (size_t i = 0; i < st.out.size(); ++i) {
        const int si = st.out[i];
        kc.output_wanted.push_back(si >= 0);
        if (si >= 0 && slots[static_cast<size_t>(si)].kind != SlotKind::kDynamic) kc.outputs[i] = slots[static_cast<size_t>(si)].t;
      }
      if (!op_has_flag(n.op(), kStrings)) {
        for (size_t i = 0; i < kc.inputs.size(); ++i) {
          if (kc.inputs[i] && kc.inputs[i]->is_string()) {
            return unsupported(n.describe(), ": input ", i, " is a string tensor, which ", op_name(n.op()), " does not support");
          }
        }
      }
      kc.run_subgraph = [&lookup](const Graph& sub, const std::vector<Tensor>& ins) {
        return execute_graph(sub, ins, lookup, nullptr);
      };
      Status s = st.reference(kc);
      if (!s.is_ok()) return s.with_context(n.describe() + ": ");
      for (size_t i = 0; i < st.out.size(); ++i) {
        const int si = st.out[i];
        if (si < 0) continue;
        Slot& slot = slots[static_cast<size_t>(si)];
        if (i >= kc.outputs.size() || !kc.outputs[i].defined()) return internal_error(n.describe(), ": kernel did not produce output ", i);
        Tensor& r = kc.outputs[i];
        if (slot.kind == SlotKind::kDynamic) {
          slot.t = std::move(r);
        } else if (r.raw() != slot.t.raw()) {
          if (r.dtype() != slot.dtype || r.dims() != slot.dims || r.is_sequence()) {
            return internal_error(n.describe(), ": output ", i, " is ", r.describe(), " but shape inference planned ",
                                  dtype_name(slot.dtype), dims_str(slot.dims));
          }
          if (r.nbytes()) std::memcpy(slot.t.raw(), r.raw(), r.nbytes());
        }
      }
    }
    if (profiling) {
      st.total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ++st.runs;
    }
    if (step_observer) step_observer(n, st.out_ptrs);
  }
  // Outputs that are graph inputs or constants, bound to caller memory: copy. (Host mode
  // copies every bound output to the device after this.)
  for (Value* o : g.outputs()) {
    if (host_mode) break;
    auto b = bound.find(o->name());
    const Slot& s = slots[static_cast<size_t>(slot_of.at(o))];
    if (b == bound.end() || s.kind == SlotKind::kBound || s.kind == SlotKind::kInput) continue;
    if (s.kind == SlotKind::kDynamic) {
      return invalid_argument("output '", o->name(), "' has a data-dependent shape (", s.t.describe(),
                              "); read it with output() instead of binding a buffer");
    }
    if (s.t.nbytes()) std::memcpy(b->second, s.t.raw(), s.t.nbytes());
  }
  return Status::ok();
}

ExecutionContext::ExecutionContext(std::unique_ptr<ContextImpl> impl) : impl_(std::move(impl)) {}
ExecutionContext::~ExecutionContext() = default;

Status ExecutionContext::set_input_shape(const std::string& name, const Dims& dims) {
  ContextImpl& c = *impl_;
  const TensorDesc* d = find_desc(c.e->inputs, name);
  if (!d) return invalid_argument("unknown input '", name, "'");
  if (dims.size() != d->dims.size()) {
    return invalid_argument("input '", name, "': expected rank ", d->dims.size(), ", got shape ", dims_str(dims));
  }
  const auto& ranges = c.e->profiles[static_cast<size_t>(c.profile)].inputs;
  auto r = ranges.find(name);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (d->dims[i] >= 0 && dims[i] != d->dims[i]) {
      return invalid_argument("input '", name, "': dimension ", i, " must be ", d->dims[i], ", got shape ", dims_str(dims));
    }
    if (d->dims[i] < 0 && r != ranges.end() && (dims[i] < r->second.min[i] || dims[i] > r->second.max[i])) {
      return invalid_argument("input '", name, "': shape ", dims_str(dims), " is outside profile ", c.profile, " (min ",
                              dims_str(r->second.min), ", max ", dims_str(r->second.max), ")");
    }
    if (dims[i] < 0) return invalid_argument("input '", name, "': negative dimension in ", dims_str(dims));
  }
  auto it = c.input_dims.find(name);
  if (it == c.input_dims.end() || it->second != dims) {
    c.input_dims[name] = dims;
    c.dirty = true;
  }
  return Status::ok();
}

Result<Dims> ExecutionContext::tensor_shape(const std::string& name) {
  ContextImpl& c = *impl_;
  if (c.dirty) KILN_RETURN_IF_ERROR(c.setup());
  Value* v = c.spec->find_value(name);
  if (!v || (!find_desc(c.e->inputs, name) && !find_desc(c.e->outputs, name))) {
    return invalid_argument("'", name, "' is not an input or output of the engine");
  }
  const Slot& s = c.slots[static_cast<size_t>(c.slot_of.at(v))];
  if (s.kind == SlotKind::kConstant) return s.t.dims();
  if (s.kind != SlotKind::kDynamic) return s.dims;
  if (s.t.defined() && s.t.raw()) return s.t.dims();
  Dims d;
  if (v->shape) {
    for (const Dim& x : *v->shape) d.push_back(x.known() ? x.value : -1);
  }
  return d;
}

Status ExecutionContext::set_tensor_address(const std::string& name, void* data) {
  ContextImpl& c = *impl_;
  const bool is_in = find_desc(c.e->inputs, name) != nullptr;
  if (!is_in && !find_desc(c.e->outputs, name)) return invalid_argument("'", name, "' is not an input or output of the engine");
  if (!data) return invalid_argument("'", name, "': null buffer");
  c.bound[name] = data;
  if (c.dirty || c.host_mode) return Status::ok();  // host mode: copied at each run
  Value* v = c.spec->find_value(name);
  Slot& s = c.slots[static_cast<size_t>(c.slot_of.at(v))];
  if (s.kind == SlotKind::kArena) s.kind = SlotKind::kBound;  // write the output straight into the caller's buffer
  if (s.kind == SlotKind::kInput || s.kind == SlotKind::kBound) return c.bind_slot(s, data);
  return Status::ok();
}

Status ExecutionContext::unbind_tensor(const std::string& name) {
  ContextImpl& c = *impl_;
  if (!find_desc(c.e->inputs, name) && !find_desc(c.e->outputs, name)) {
    return invalid_argument("'", name, "' is not an input or output of the engine");
  }
  if (c.bound.erase(name) != 0) c.dirty = true;
  return Status::ok();
}

Status ExecutionContext::execute() {
  ContextImpl& c = *impl_;
  if (c.dirty) KILN_RETURN_IF_ERROR(c.setup());
  if (c.e->threads > 0) omp_set_num_threads(c.e->threads);
  if (c.e->device == DeviceKind::kCUDA) return c.host_mode ? c.run_host_mode(nullptr) : cuda_execute(c, nullptr, true);
  return c.run_steps();
}

Status ExecutionContext::enqueue(void* stream) {
  ContextImpl& c = *impl_;
  if (c.e->device == DeviceKind::kCUDA) {
    if (c.dirty) KILN_RETURN_IF_ERROR(c.setup());
    if (c.e->threads > 0) omp_set_num_threads(c.e->threads);
    return c.host_mode ? c.run_host_mode(stream) : cuda_execute(c, stream, false);
  }
  return execute();  // CPU engines run on the calling thread (and its OpenMP team)
}

Result<Tensor> ExecutionContext::output(const std::string& name) const {
  const ContextImpl& c = *impl_;
  if (!find_desc(c.e->outputs, name)) return invalid_argument("'", name, "' is not an output of the engine");
  if (c.dirty || !c.spec) return invalid_argument("output '", name, "' is not available: run the engine first");
  if (c.e->device == DeviceKind::kCUDA) {
    return c.host_mode ? c.host_value(name) : cuda_download(const_cast<ContextImpl&>(c), name);
  }
  Value* v = c.spec->find_value(name);
  return c.slots[static_cast<size_t>(c.slot_of.at(v))].t;
}

Result<std::map<std::string, Tensor>> ExecutionContext::run(const std::map<std::string, Tensor>& inputs) {
  ContextImpl& c = *impl_;
  KILN_RETURN_IF_ERROR(validate_inputs(*c.e->graph, inputs));
  for (const auto& [name, t] : inputs) {
    if (t.is_sequence() || t.is_none() || t.is_string()) {
      return unsupported("input '", name, "': engines take plain numeric tensors, got ", t.describe());
    }
    KILN_RETURN_IF_ERROR(set_input_shape(name, t.dims()));
  }
  if (c.e->device == DeviceKind::kCUDA) {
    // Host tensors: staged into the context's own device input buffers.
    for (const auto& [name, t] : inputs) c.bound.erase(name);
    if (c.dirty) KILN_RETURN_IF_ERROR(c.setup());
    KILN_RETURN_IF_ERROR(c.host_mode ? c.host_upload_inputs(inputs) : cuda_upload_inputs(c, inputs));
    KILN_RETURN_IF_ERROR(execute());
    std::map<std::string, Tensor> out;
    for (const auto& d : c.e->outputs) {
      KILN_ASSIGN_OR_RETURN(Tensor t, c.host_mode ? c.host_value(d.name) : cuda_download(c, d.name));
      out[d.name] = c.host_mode ? t.clone() : std::move(t);
    }
    return out;
  }
  for (const auto& [name, t] : inputs) {
    c.bound[name] = const_cast<void*>(t.raw());  // inputs are only read
  }
  if (!c.dirty) {
    for (const auto& [name, t] : inputs) {
      Slot& s = c.slots[static_cast<size_t>(c.slot_of.at(c.spec->find_value(name)))];
      KILN_RETURN_IF_ERROR(c.bind_slot(s, const_cast<void*>(t.raw())));
    }
  }
  KILN_RETURN_IF_ERROR(execute());
  std::map<std::string, Tensor> out;
  for (const auto& d : c.e->outputs) {
    KILN_ASSIGN_OR_RETURN(Tensor t, output(d.name));
    out[d.name] = t.clone();
  }
  return out;
}

void ExecutionContext::set_profiling(bool on) { impl_->profiling = on; }

std::vector<std::pair<std::string, double>> ExecutionContext::layer_times_ms() const {
  std::vector<std::pair<std::string, double>> out;
  for (const Step& st : impl_->steps) {
    std::string label = cat(st.node->name().empty() ? layer_key(*st.node) : st.node->name(), " (", op_name(st.node->op()),
                            ", ", st.tactic ? st.tactic->name : "reference", ")");
    out.emplace_back(label, st.runs ? st.total_ms / static_cast<double>(st.runs) : 0.0);
  }
  return out;
}

size_t ExecutionContext::activation_bytes() const { return impl_->activation_bytes; }

}  // namespace kiln

// kiln.Engine, kiln.ExecutionContext, kiln.load() and the engine's descriptions.
#include <algorithm>

#include "py_engine.h"
#include "runtime/engine_impl.h"
#include "runtime/engine_inputs.h"

namespace kiln::pyapi {

using namespace pybind11::literals;

namespace {

const TensorDesc* find_desc(const std::vector<TensorDesc>& ds, const std::string& name) {
  for (const TensorDesc& d : ds) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// ---- running ----
//
// Where the outputs live follows where the inputs live (docs/python.md "GPU tensors"):
// - host inputs (numpy, CPU tensors; any engine): outputs are host memory, numpy arrays or
//   CPU kiln.Tensors. A CUDA engine copies them through its staging buffers
//   (ExecutionContext::run). The call is synchronous; `stream` is not used.
// - CUDA tensors (a CUDA engine; all inputs on the current device): zero-copy, bound with
//   set_tensor_address. Outputs given in `outputs` are written in place; the others are
//   device memory kiln allocates (output="dlpack") or host copies (output="numpy").
//   stream=None runs on the legacy default stream and waits; with a stream the run is
//   queued there and the call returns at once, unless a host copy is wanted.

// Unbinds an output an earlier GPU run bound to a caller's buffer (which may be gone), so
// that the context writes it to its own memory again (memory is planned again on the next
// run: once per switch; runs that bind every output never do).
void unbind_output(ExecutionContext& ctx, const std::string& name) { (void)ctx.unbind_tensor(name); }

// The slot of an engine input or output once the context is set up for the current shapes.
const Slot* slot_of(ExecutionContext& ctx, const std::string& name) {
  ContextImpl& impl = ctx.impl();
  if (impl.dirty || !impl.spec) return nullptr;
  Value* v = impl.spec->find_value(name);
  if (!v) return nullptr;
  auto it = impl.slot_of.find(v);
  return it == impl.slot_of.end() ? nullptr : &impl.slots[static_cast<size_t>(it->second)];
}

// Host inputs: validate, set shapes, bind, run, copy the outputs out of the context's memory.
Status run_host(ExecutionContext& ctx, const Engine& e, const TensorMap& feeds, TensorMap* outs) {
  if (e.device() == DeviceKind::kCUDA) {
    // Host memory cannot be bound to a CUDA engine: run() stages it into the context's own
    // device buffers and returns host copies of the outputs.
    for (const TensorDesc& d : e.outputs()) {
      if (!feeds.count(d.name)) unbind_output(ctx, d.name);  // (run() rebinds inputs itself)
    }
    KILN_ASSIGN_OR_RETURN(*outs, ctx.run(feeds));
    return Status::ok();
  }
  KILN_RETURN_IF_ERROR(validate_inputs(engine_graph(e), feeds));
  for (const auto& [name, t] : feeds) KILN_RETURN_IF_ERROR(ctx.set_input_shape(name, t.dims()));
  for (const auto& [name, t] : feeds) KILN_RETURN_IF_ERROR(ctx.set_tensor_address(name, const_cast<void*>(t.raw())));
  KILN_RETURN_IF_ERROR(ctx.execute());
  for (const TensorDesc& d : e.outputs()) {
    KILN_ASSIGN_OR_RETURN(Tensor t, ctx.output(d.name));
    (*outs)[d.name] = t.clone();
  }
  return Status::ok();
}

// How one output of a GPU run comes back.
enum class OutHow {
  kUser,   // written into the tensor given in outputs=, which is returned
  kAlloc,  // written into device memory kiln allocates, returned as a kiln.Tensor
  kHost,   // left in the context's memory and copied to a numpy array
};

struct OutPlan {
  const TensorDesc* desc = nullptr;
  OutHow how = OutHow::kHost;
  DeviceTensorRef user;  // kUser
  py::object user_obj;   // kUser (not touched without the GIL)
  Dims dims;             // the output's shape for these inputs
  std::shared_ptr<gpu::DeviceMemory> mem;  // kAlloc
  Tensor host;                             // kHost
};

// Forgets the queued runs of `c` that have finished (with c.mu held).
void prune_queued(PyContext& c) {
  c.queued.erase(std::remove_if(c.queued.begin(), c.queued.end(), [](const QueuedRun& q) { return q.done->done(); }),
                 c.queued.end());
}

// The GPU run, with the GIL released and c.mu held: nothing here touches Python.
Status run_device_locked(PyContext& c, const TensorMap& feeds, std::vector<OutPlan>& plans, void* stream, bool wait,
                         int device, std::shared_ptr<gpu::Event>* ready) {
  ExecutionContext& ctx = *c.ctx;
  const Engine& e = *c.engine;
  KILN_RETURN_IF_ERROR(validate_inputs(engine_graph(e), feeds));
  for (const auto& [name, t] : feeds) KILN_RETURN_IF_ERROR(ctx.set_input_shape(name, t.dims()));
  for (const OutPlan& p : plans) {
    if (p.how == OutHow::kHost && !feeds.count(p.desc->name)) unbind_output(ctx, p.desc->name);
  }
  for (const auto& [name, t] : feeds) KILN_RETURN_IF_ERROR(ctx.set_tensor_address(name, const_cast<void*>(t.raw())));
  // Outputs the layers do not write (a constant, or an input passed through): copied.
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    bool src_is_host;
  };
  std::vector<Copy> copies;
  bool host_copies = false;
  for (OutPlan& p : plans) {
    const std::string& name = p.desc->name;
    KILN_ASSIGN_OR_RETURN(p.dims, ctx.tensor_shape(name));  // sets the context up for these shapes
    if (p.how == OutHow::kHost) {  // any shape: read after the run
      host_copies = true;
      continue;
    }
    for (int64_t d : p.dims) {
      // (Such a context runs on the CPU: ContextImpl::host_mode.)
      if (d < 0) {
        return unsupported("output '", name, "' has a data-dependent shape, known only after running: read it as a host "
                           "copy (output=\"numpy\") instead of a GPU tensor");
      }
    }
    const size_t bytes = static_cast<size_t>(num_elements(p.dims)) * dtype_size(p.desc->dtype);
    void* dst = nullptr;
    if (p.how == OutHow::kUser) {
      if (p.user.dtype != p.desc->dtype || p.user.dims != p.dims) {
        return invalid_argument("output '", name, "': these inputs give ", dtype_name(p.desc->dtype), dims_str(p.dims),
                                ", but the tensor in outputs= is ", dtype_name(p.user.dtype), dims_str(p.user.dims));
      }
      dst = p.user.data;
    } else {
      KILN_ASSIGN_OR_RETURN(p.mem, gpu::DeviceMemory::allocate(std::max<size_t>(bytes, 1), device));
      dst = p.mem->data();
    }
    const Slot* slot = slot_of(ctx, name);
    if (!slot) return internal_error("output '", name, "' has no slot after setup");
    if (slot->kind == SlotKind::kConstant || slot->kind == SlotKind::kInput) {
      // kConstant: host data (CUDA engines keep the device copy elsewhere); kInput: the
      // bound device buffer of that input.
      // (In host mode every slot is host memory.)
      copies.push_back({dst, slot->t.raw(), bytes, slot->kind == SlotKind::kConstant || ctx.impl().host_mode});
    } else {
      KILN_RETURN_IF_ERROR(ctx.set_tensor_address(name, dst));
    }
  }
  Status st;
  prune_queued(c);
  for (size_t i = 0; st.is_ok() && i < c.queued.size(); ++i) {
    if (c.queued[i].stream != stream) st = c.queued[i].done->make_stream_wait(stream);  // same stream: in order
  }
  if (st.is_ok()) st = ctx.enqueue(stream);
  for (size_t i = 0; st.is_ok() && i < copies.size(); ++i) {
    st = gpu::copy_async(copies[i].dst, copies[i].src, copies[i].bytes, copies[i].src_is_host, stream);
  }
  if (!st.is_ok()) {
    (void)gpu::synchronize(stream);  // work queued before the error must not outlive the tensors it reads
    return st;
  }
  if (wait || host_copies) {
    KILN_RETURN_IF_ERROR(gpu::synchronize(stream));  // (and so everything it waited for)
    c.queued.clear();
    for (OutPlan& p : plans) {
      if (p.how == OutHow::kHost) {
        KILN_ASSIGN_OR_RETURN(p.host, ctx.output(p.desc->name));  // a host copy
        if (ctx.impl().host_mode) p.host = p.host.clone();           // (there, a view of the context's memory)
      }
    }
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(*ready, gpu::Event::record(stream));
  c.queued.push_back({*ready, stream});
  return Status::ok();
}

// Host inputs, with the GIL released and c.mu held: queued GPU runs finish first (the
// host path uses the context's own stream and memory).
Status run_host_locked(PyContext& c, const TensorMap& feeds, TensorMap* outs) {
  for (const QueuedRun& q : c.queued) KILN_RETURN_IF_ERROR(q.done->wait());
  c.queued.clear();
  return run_host(*c.ctx, *c.engine, feeds, outs);
}

// Device memory ranges of a run's tensors, to refuse outputs that overlap other tensors.
struct Range {
  std::string what;
  uintptr_t begin, end;
};

void check_no_overlap(const std::vector<Range>& inputs, const std::vector<Range>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Range& o = outputs[i];
    auto overlaps = [&](const Range& r) { return o.begin < r.end && r.begin < o.end; };
    for (const Range& r : inputs) {
      if (overlaps(r)) {
        throw_status(invalid_argument(o.what, " overlaps ", r.what, " in device memory: kiln does not compute in place; "
                                      "give the output a buffer of its own"));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (overlaps(outputs[j])) throw_status(invalid_argument(o.what, " overlaps ", outputs[j].what, " in device memory"));
    }
  }
}

py::dict run_device(PyContext& c, const std::vector<std::pair<std::string, py::object>>& items,
                    const py::object& outputs, OutputKind kind, const StreamArg& stream, int device) {
  const Engine& e = *c.engine;
  void* const run_stream = stream.given ? stream.handle : gpu::kLegacyStream;
  auto keep = std::make_shared<InputKeepAlive>();
  TensorMap feeds;
  std::vector<Range> in_ranges, out_ranges;
  for (const auto& [name, value] : items) {
    const std::string what = cat("input '", name, "'");
    DeviceTensorRef r = device_tensor_from_dlpack(what, value, stream.dlpack, device, *keep);
    if (r.nbytes) in_ranges.push_back({what, reinterpret_cast<uintptr_t>(r.data), reinterpret_cast<uintptr_t>(r.data) + r.nbytes});
    feeds[name] = Tensor::wrap(r.dtype, r.dims, r.data);
  }
  std::map<std::string, py::object> given;
  if (!outputs.is_none()) {
    static py::object* mapping = new py::object(py::module_::import("collections.abc").attr("Mapping"));  // never freed
    if (!py::isinstance(outputs, *mapping)) {
      throw_status(invalid_argument("outputs must be a dict {output name: CUDA tensor}, got ",
                                    std::string(py::str(py::type::of(outputs)))));
    }
    for (py::handle item : outputs.attr("items")()) {
      py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
      if (!py::isinstance<py::str>(kv[0])) {
        throw_status(invalid_argument("output names must be str, got ", std::string(py::repr(kv[0]))));
      }
      const std::string name = kv[0].cast<std::string>();
      if (!find_desc(e.outputs(), name)) {
        std::string names;
        for (const TensorDesc& d : e.outputs()) names += cat(names.empty() ? "" : ", ", d.name);
        throw_status(invalid_argument("outputs: '", name, "' is not an output of the engine (its outputs: ", names, ")"));
      }
      given[name] = py::reinterpret_borrow<py::object>(kv[1]);
    }
  }
  std::vector<OutPlan> plans;
  for (const TensorDesc& d : e.outputs()) {
    OutPlan p;
    p.desc = &d;
    auto g = given.find(d.name);
    if (g != given.end()) {
      const dlpack::DLDevice dev = dlpack_device_of(g->second);
      const std::string what = cat("output '", d.name, "'");
      if (!is_cuda_device(dev.device_type) || dev.device_id != device) {
        throw_status(invalid_argument(what, " (outputs=) is on ", device_str(dev.device_type, dev.device_id),
                                      "; kiln writes outputs in place on the run's device, cuda:", device));
      }
      p.how = OutHow::kUser;
      p.user = device_tensor_from_dlpack(what, g->second, stream.dlpack, device, *keep);
      p.user_obj = g->second;
      if (p.user.nbytes) {
        const auto b = reinterpret_cast<uintptr_t>(p.user.data);
        out_ranges.push_back({what, b, b + p.user.nbytes});
      }
    } else if (kind == OutputKind::kDLPack) {
      if (!dlpack_has_dtype(d.dtype)) {
        throw_status(unsupported("output '", d.name, "' is ", dtype_name(d.dtype), ", which DLPack has no type code for: "
                                 "run with output=\"numpy\" (host copies, through ml_dtypes)"));
      }
      p.how = OutHow::kAlloc;
    } else {
      p.how = OutHow::kHost;
    }
    plans.push_back(std::move(p));
  }
  check_no_overlap(in_ranges, out_ranges);

  Status st;
  std::shared_ptr<gpu::Event> ready;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(c.mu);
    st = run_device_locked(c, feeds, plans, run_stream, !stream.given, device, &ready);
  }
  check(st);
  if (ready) c.pending.push_back({ready, keep});  // the capsules live until the queued run is over
  py::dict result;
  for (OutPlan& p : plans) {
    py::str name(p.desc->name);
    switch (p.how) {
      case OutHow::kUser: result[name] = p.user_obj; break;
      case OutHow::kAlloc: result[name] = device_tensor_to_python(p.desc->dtype, p.dims, p.mem, ready); break;
      case OutHow::kHost: result[name] = tensor_to_python(p.desc->name, p.host, OutputKind::kNumpy); break;
    }
  }
  return result;
}

// Drops the tensors of queued runs that have finished.
void prune_pending(PyContext& c) {
  c.pending.erase(std::remove_if(c.pending.begin(), c.pending.end(), [](const PendingRun& p) { return p.done->done(); }),
                  c.pending.end());
}

py::dict context_run(PyContext& c, const py::object& inputs, const std::string& output, const py::object& stream,
                     const py::object& outputs) {
  const OutputKind kind = parse_output_kind(output);
  const StreamArg stream_arg = stream_from_python(stream);
  prune_pending(c);
  const Engine& e = *c.engine;
  const std::vector<std::pair<std::string, py::object>> items = input_items(e, inputs, false);

  // Where each input lives (asked before any data is) decides how the run goes.
  std::vector<std::pair<std::string, dlpack::DLDevice>> gpu_inputs;
  std::string host_input;
  for (const auto& [name, value] : items) {
    const dlpack::DLDevice d = dlpack_device_of(value);
    if (is_cuda_device(d.device_type)) {
      gpu_inputs.emplace_back(name, d);
    } else if (d.device_type == dlpack::kDLCPU || d.device_type == dlpack::kDLCUDAHost) {
      if (host_input.empty()) host_input = name;
    } else {
      throw_status(unsupported("input '", name, "' is on ", device_str(d.device_type, d.device_id),
                               ", which kiln cannot read: move it to the CPU first (e.g. tensor.cpu())"));
    }
  }
  if (!gpu_inputs.empty()) {
    const auto& [name, d] = gpu_inputs.front();
    const std::string where = device_str(d.device_type, d.device_id);
    if (!gpu::kCompiled) {
      throw_status(unsupported("input '", name, "' is on ", where, ", but this build of kiln has no CUDA backend and takes "
                               "host memory only: move it to the CPU first (e.g. tensor.cpu())"));
    }
    if (e.device() != DeviceKind::kCUDA) {
      throw_status(unsupported("input '", name, "' is on ", where, ", but this engine runs on the CPU: move the tensor to "
                               "the host (e.g. tensor.cpu()), or build the engine with device=\"cuda\""));
    }
    if (!host_input.empty()) {
      throw_status(invalid_argument("input '", host_input, "' is in host memory but input '", name, "' is on ", where,
                                    ": a run takes all its inputs on the GPU (read in place) or all in host memory "
                                    "(copied); move '", host_input, "' to the GPU too (e.g. torch.as_tensor(value, "
                                    "device=\"cuda\"))"));
    }
  }
  if (!outputs.is_none()) {
    if (!gpu::kCompiled) {
      throw_status(unsupported("outputs= binds GPU buffers for a CUDA engine, but this build of kiln has no CUDA backend"));
    }
    if (e.device() != DeviceKind::kCUDA) {
      throw_status(unsupported("outputs= binds GPU buffers and needs a CUDA engine; this engine runs on the CPU"));
    }
    if (!host_input.empty()) {
      throw_status(invalid_argument("outputs= needs the inputs on the GPU too, but input '", host_input,
                                    "' is in host memory"));
    }
  }
  if (!gpu_inputs.empty() || !outputs.is_none()) {
    const int device = unwrap(gpu::current_device());
    for (const auto& [name, d] : gpu_inputs) {
      if (d.device_id != device) {
        throw_status(invalid_argument("input '", name, "' is on ", device_str(d.device_type, d.device_id),
                                      ", but the current CUDA device is cuda:", device, ": kiln runs on the current "
                                      "device; make cuda:", d.device_id, " current (torch.cuda.set_device(", d.device_id,
                                      ")) or move the tensor"));
      }
    }
    return run_device(c, items, outputs, kind, stream_arg, device);
  }

  InputKeepAlive keep;  // declared before the GIL is released, destroyed after it is retaken
  TensorMap feeds;
  for (const auto& [name, value] : items) feeds[name] = tensor_from_python(name, value, find_desc(e.inputs(), name), keep);
  TensorMap outs;
  Status st;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(c.mu);
    st = run_host_locked(c, feeds, &outs);
  }
  check(st);
  py::dict result;
  for (const TensorDesc& d : e.outputs()) result[py::str(d.name)] = tensor_to_python(d.name, outs.at(d.name), kind);
  return result;
}

std::shared_ptr<PyContext> make_context(const std::shared_ptr<Engine>& e, int profile) {
  auto c = std::make_shared<PyContext>();
  c->engine = e;
  c->ctx = unwrap(e->create_execution_context(profile));
  return c;
}

std::shared_ptr<PyEngine> wrap_engine(std::shared_ptr<Engine> e) {
  auto pe = std::make_shared<PyEngine>();
  pe->e = std::move(e);
  return pe;
}

std::shared_ptr<PyEngine> deserialize(const py::bytes& data) {
  const std::string bytes = data;
  Result<std::shared_ptr<Engine>> r = [&] {
    py::gil_scoped_release nogil;
    return Engine::deserialize(bytes.data(), bytes.size());
  }();
  return wrap_engine(unwrap(std::move(r)));
}

std::shared_ptr<PyEngine> load_engine(py::object path) {
  const std::string p = py::str(py::module_::import("os").attr("fspath")(path));
  Result<std::shared_ptr<Engine>> r = [&] {
    py::gil_scoped_release nogil;
    return Engine::load(p);
  }();
  return wrap_engine(unwrap(std::move(r)));
}

std::string desc_repr(const TensorDesc& d) {
  std::string dims;
  for (size_t i = 0; i < d.dims.size(); ++i) {
    const std::string sym = i < d.dim_names.size() && !d.dim_names[i].empty() ? "'" + d.dim_names[i] + "'" : "None";
    dims += cat(i ? ", " : "", d.dims[i] < 0 ? sym : std::to_string(d.dims[i]));
  }
  if (d.dims.size() == 1) dims += ",";
  return cat("TensorDesc(name='", d.name, "', dtype='", dtype_name(d.dtype), "', shape=(", dims, "))");
}

}  // namespace

std::vector<std::pair<std::string, py::object>> input_items(const Engine& e, py::handle inputs, bool allow_missing) {
  std::vector<std::pair<std::string, py::object>> items;
  if (inputs.is_none()) {
    if (!allow_missing) throw_status(invalid_argument("no inputs given"));
    return items;
  }
  static py::object* mapping = new py::object(py::module_::import("collections.abc").attr("Mapping"));  // never freed
  if (!py::isinstance(inputs, *mapping)) {
    // One array for a one-input engine.
    if (e.inputs().size() != 1) {
      std::string names;
      for (const TensorDesc& d : e.inputs()) names += cat(names.empty() ? "" : ", ", d.name);
      throw_status(invalid_argument("inputs must be a dict {name: array} for an engine with ", e.inputs().size(),
                                    " inputs (", names, ")"));
    }
    items.emplace_back(e.inputs()[0].name, py::reinterpret_borrow<py::object>(inputs));
    return items;
  }
  for (py::handle item : inputs.attr("items")()) {
    py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
    if (!py::isinstance<py::str>(kv[0])) {
      throw_status(invalid_argument("input names must be str, got ", std::string(py::repr(kv[0]))));
    }
    items.emplace_back(kv[0].cast<std::string>(), py::reinterpret_borrow<py::object>(kv[1]));
  }
  return items;
}

TensorMap inputs_from_python(const Engine& e, py::handle inputs, InputKeepAlive& keep, bool allow_missing) {
  TensorMap feeds;
  for (const auto& [name, value] : input_items(e, inputs, allow_missing)) {
    feeds[name] = tensor_from_python(name, value, find_desc(e.inputs(), name), keep);
  }
  return feeds;
}

PyContext::~PyContext() {
  // Queued runs may still read the tensors the pending list keeps alive: wait for them
  // (with the GIL held: the list's Python objects are released right after).
  for (const PendingRun& p : pending) (void)p.done->wait();
}

void register_engine(py::module_& m) {
  py::class_<TensorDesc>(m, "TensorDesc", "An engine input or output: name, dtype and shape (None for dynamic dims).")
      .def_readonly("name", &TensorDesc::name)
      .def_property_readonly("dtype", [](const TensorDesc& d) { return std::string(dtype_name(d.dtype)); },
                             "kiln's dtype name ('float32', 'int64', ...).")
      .def_property_readonly("shape", [](const TensorDesc& d) { return dims_to_tuple(d.dims); },
                             "Dims as a tuple; None where the dim is dynamic.")
      .def_readonly("dim_names", &TensorDesc::dim_names, "Symbolic dim names ('batch'); '' for static dims.")
      .def("__repr__", &desc_repr);

  py::class_<LayerInfo>(m, "LayerInfo", "One layer of an engine: the op, the kernel (tactic) chosen, its precision.")
      .def_readonly("name", &LayerInfo::name)
      .def_readonly("output", &LayerInfo::output, "Name of its first output (identifies the layer).")
      .def_readonly("op", &LayerInfo::op)
      .def_readonly("tactic", &LayerInfo::tactic)
      .def_readonly("precision", &LayerInfo::precision)
      .def_property_readonly(
          "time_ms", [](const LayerInfo& l) { return l.time_ms < 0 ? py::object(py::none()) : py::cast(l.time_ms); },
          "Timed cost of the chosen tactic at the opt shape, or None.")
      .def("__repr__", [](const LayerInfo& l) {
        return cat("LayerInfo(name='", l.name, "', op='", l.op, "', tactic='", l.tactic, "', precision='", l.precision, "')");
      });

  py::class_<BuildSummary>(m, "BuildSummary", "What the builder did (build-time statistics are 0 for loaded engines).")
      .def_readonly("nodes_imported", &BuildSummary::nodes_imported)
      .def_readonly("layers", &BuildSummary::layers)
      .def_readonly("fusions", &BuildSummary::fusions)
      .def_readonly("weight_bytes", &BuildSummary::weight_bytes)
      .def_readonly("peak_activation_bytes", &BuildSummary::peak_activation_bytes)
      .def_readonly("build_seconds", &BuildSummary::build_seconds)
      .def_readonly("tactics_timed", &BuildSummary::tactics_timed)
      .def_readonly("timing_cache_hits", &BuildSummary::timing_cache_hits)
      .def("__repr__", [](const BuildSummary& s) {
        return cat("BuildSummary(nodes_imported=", s.nodes_imported, ", layers=", s.layers, ", fusions=", s.fusions,
                   ", weight_bytes=", s.weight_bytes, ", peak_activation_bytes=", s.peak_activation_bytes,
                   ", build_seconds=", s.build_seconds, ")");
      });

  py::class_<PyContext, std::shared_ptr<PyContext>>(m, "ExecutionContext", R"doc(
Runs one engine (create it with Engine.create_execution_context). Memory is planned for
the current input shapes and reused while they stay the same. One call runs at a time
per context; use one context per thread for parallel runs.)doc")
      .def("run", &context_run, "inputs"_a, py::kw_only(), "output"_a = "numpy", "stream"_a = py::none(),
           "outputs"_a = py::none(), R"doc(
Runs the engine and returns {output name: array} in the engine's output order.

inputs: {name: array}, or one array for a one-input engine. Arrays are numpy arrays
(zero-copy when C-contiguous), objects with __dlpack__ (torch/cupy/jax tensors,
kiln.Tensor; zero-copy) or anything numpy.asarray takes. Names, dtypes and shapes are
checked against the engine (InvalidArgumentError says which and why).

Where the outputs live follows where the inputs live:
- Host inputs (any engine): outputs are host copies, numpy arrays (output="numpy", the
  default) or CPU kiln.Tensor objects (output="dlpack"). A CUDA engine copies the inputs
  to the GPU and the outputs back. The call waits for the result; stream is not used.
- CUDA tensors (CUDA engines only; every input on the GPU, on the current device,
  C-contiguous, 256-byte aligned): read in place, never copied. output="dlpack" returns
  kiln.Tensor objects on the GPU (memory kiln allocates; torch.from_dlpack(t) is
  zero-copy), output="numpy" host copies. outputs={name: tensor} gives CUDA tensors of the
  right dtype and shape to write outputs into; those come back as the same objects.
  stream=None runs on the legacy default stream and waits. With a stream (an int
  cudaStream_t, torch.cuda.Stream, cupy stream, or __cuda_stream__ object) the run is
  queued on it and the call returns at once (unless an output is a numpy copy): order
  later work on that stream, or synchronize it, before reading the outputs.
Mixing host and GPU inputs, GPU tensors into a CPU engine and outputs= without GPU
inputs are errors. The GIL is released while the engine runs.)doc")
      .def(
          "set_input_shape",
          [](PyContext& c, const std::string& name, const py::object& dims) {
            std::lock_guard<std::mutex> lk(c.mu);
            check(c.ctx->set_input_shape(name, dims_from_python(dims, cat("input '", name, "'"))));
          },
          "name"_a, "shape"_a, "Sets a dynamic input's shape (within the context's profile).")
      .def(
          "tensor_shape",
          [](PyContext& c, const std::string& name) {
            std::lock_guard<std::mutex> lk(c.mu);
            return dims_to_tuple(unwrap(c.ctx->tensor_shape(name)));
          },
          "name"_a, "Shape of an input or output for the current input shapes (None where data-dependent).")
      .def(
          "set_profiling",
          [](PyContext& c, bool on) {
            std::lock_guard<std::mutex> lk(c.mu);
            c.ctx->set_profiling(on);
          },
          "on"_a,
          "Accumulate per-layer times on later runs.")
      .def(
          "layer_times_ms",
          [](PyContext& c) {
            std::lock_guard<std::mutex> lk(c.mu);
            return c.ctx->layer_times_ms();
          },
          "[(layer label, mean ms)] of the profiled runs, in execution order.")
      .def_property_readonly(
          "activation_bytes",
          [](PyContext& c) {
            std::lock_guard<std::mutex> lk(c.mu);
            return c.ctx->activation_bytes();
          },
          "Arena bytes of the current memory plan.")
      .def_property_readonly(
          "engine", [](PyContext& c) { return wrap_engine(std::const_pointer_cast<Engine>(c.engine)); }, "The engine.");

  py::class_<PyEngine, std::shared_ptr<PyEngine>>(m, "Engine", R"doc(
An optimized model, ready to run: built by kiln.build / Builder.build, or loaded from a
plan file with kiln.load. Engines pickle as their plan bytes.)doc")
      .def_static("load", &load_engine, "path"_a, "Loads a plan file, validating all of it first.")
      .def_static("deserialize", &deserialize, "data"_a, "An engine from plan bytes (Engine.serialize()).")
      .def(
          "save",
          [](const PyEngine& p, py::object path) {
            const std::string s = py::str(py::module_::import("os").attr("fspath")(path));
            Status st;
            {
              py::gil_scoped_release nogil;
              st = p.e->save(s);
            }
            check(st);
          },
          "path"_a, "Writes the plan file.")
      .def(
          "serialize", [](const PyEngine& p) { return py::bytes(p.e->serialize()); }, "The plan file's bytes.")
      .def_property_readonly(
          "inputs", [](const PyEngine& p) { return p.e->inputs(); }, "list[TensorDesc] of the inputs.")
      .def_property_readonly(
          "outputs", [](const PyEngine& p) { return p.e->outputs(); }, "list[TensorDesc] of the outputs.")
      .def_property_readonly(
          "profiles", [](const PyEngine& p) { return p.e->profiles(); }, "The optimization profiles.")
      .def_property_readonly(
          "device", [](const PyEngine& p) { return std::string(device_name(p.e->device())); }, "'cpu' or 'cuda'.")
      .def_property_readonly(
          "layers", [](const PyEngine& p) { return p.e->layers(); }, "list[LayerInfo], in execution order.")
      .def_property_readonly(
          "summary", [](const PyEngine& p) { return p.e->summary(); }, "BuildSummary.")
      .def(
          "describe", [](const PyEngine& p) { return p.e->describe(); },
          "Human-readable description: target, inputs/outputs, layers with tactics, memory (as `kiln inspect`).")
      .def(
          "create_execution_context", [](const PyEngine& p, int profile) { return make_context(p.e, profile); },
          "profile"_a = 0, "A new ExecutionContext using optimization profile `profile`.")
      .def(
          "run",
          [](PyEngine& p, const py::object& inputs, const std::string& output, const py::object& stream,
             const py::object& outputs) {
            std::shared_ptr<PyContext> c;
            {
              std::lock_guard<std::mutex> lk(p.mu);
              if (!p.default_ctx) p.default_ctx = make_context(p.e, 0);
              c = p.default_ctx;
            }
            return context_run(*c, inputs, output, stream, outputs);
          },
          "inputs"_a, py::kw_only(), "output"_a = "numpy", "stream"_a = py::none(), "outputs"_a = py::none(),
          "ExecutionContext.run on a context the engine keeps (created on first use).")
      .def("__repr__",
           [](const PyEngine& p) {
             std::string ins, outs;
             for (const TensorDesc& d : p.e->inputs()) ins += cat(ins.empty() ? "" : ", ", d.name);
             for (const TensorDesc& d : p.e->outputs()) outs += cat(outs.empty() ? "" : ", ", d.name);
             return cat("kiln.Engine(device='", device_name(p.e->device()), "', layers=", p.e->layers().size(),
                        ", inputs=[", ins, "], outputs=[", outs, "])");
           })
      .def(py::pickle([](const PyEngine& p) { return py::make_tuple(py::bytes(p.e->serialize())); },
                      [](const py::tuple& t) {
                        if (t.size() != 1) throw py::value_error("bad kiln.Engine pickle state");
                        return deserialize(t[0].cast<py::bytes>());
                      }));

  m.def("load", &load_engine, "path"_a, "Loads an engine plan file, validating all of it first (Engine.load).");
}

}  // namespace kiln::pyapi

// kiln.Engine, kiln.ExecutionContext, kiln.load() and the engine's descriptions.
#include "py_engine.h"
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

// A cudaStream_t from None, an int, torch.cuda.Stream (.cuda_stream), cupy (.ptr) or the
// __cuda_stream__ protocol.
void* stream_from_python(py::handle s) {
  if (s.is_none()) return nullptr;
  py::object v = py::reinterpret_borrow<py::object>(s);
  if (py::hasattr(v, "__cuda_stream__")) v = py::tuple(v.attr("__cuda_stream__")())[1];
  else if (py::hasattr(v, "cuda_stream")) v = v.attr("cuda_stream");
  else if (py::hasattr(v, "ptr")) v = v.attr("ptr");
  try {
    return reinterpret_cast<void*>(v.cast<uintptr_t>());
  } catch (const py::cast_error&) {
    throw_status(invalid_argument("stream: expected None, an int or a CUDA stream object, got ", std::string(py::repr(s))));
  }
}

// The ExecutionContext::run steps with enqueue(stream): validate, set shapes, bind
// inputs, run, copy the outputs out of the context's memory.
Status run_feeds(ExecutionContext& ctx, const Engine& e, const TensorMap& feeds, void* stream, TensorMap* outs) {
  KILN_RETURN_IF_ERROR(validate_inputs(engine_graph(e), feeds));
  for (const auto& [name, t] : feeds) KILN_RETURN_IF_ERROR(ctx.set_input_shape(name, t.dims()));
  for (const auto& [name, t] : feeds) KILN_RETURN_IF_ERROR(ctx.set_tensor_address(name, const_cast<void*>(t.raw())));
  KILN_RETURN_IF_ERROR(ctx.enqueue(stream));
  for (const TensorDesc& d : e.outputs()) {
    KILN_ASSIGN_OR_RETURN(Tensor t, ctx.output(d.name));
    (*outs)[d.name] = t.clone();
  }
  return Status::ok();
}

py::dict context_run(PyContext& c, const py::object& inputs, const std::string& output, const py::object& stream) {
  const OutputKind kind = parse_output_kind(output);
  void* stream_ptr = stream_from_python(stream);
  InputKeepAlive keep;  // declared before the GIL is released, destroyed after it is retaken
  const TensorMap feeds = inputs_from_python(*c.engine, inputs, keep, false);
  TensorMap outs;
  Status st;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(c.mu);
    st = run_feeds(*c.ctx, *c.engine, feeds, stream_ptr, &outs);
  }
  check(st);
  py::dict result;
  for (const TensorDesc& d : c.engine->outputs()) result[py::str(d.name)] = tensor_to_python(d.name, outs.at(d.name), kind);
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

TensorMap inputs_from_python(const Engine& e, py::handle inputs, InputKeepAlive& keep, bool allow_missing) {
  TensorMap feeds;
  if (inputs.is_none()) {
    if (!allow_missing) throw_status(invalid_argument("no inputs given"));
    return feeds;
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
    const TensorDesc& d = e.inputs()[0];
    feeds[d.name] = tensor_from_python(d.name, inputs, &d, keep);
    return feeds;
  }
  for (py::handle item : inputs.attr("items")()) {
    py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
    if (!py::isinstance<py::str>(kv[0])) {
      throw_status(invalid_argument("input names must be str, got ", std::string(py::repr(kv[0]))));
    }
    const std::string name = kv[0].cast<std::string>();
    feeds[name] = tensor_from_python(name, kv[1], find_desc(e.inputs(), name), keep);
  }
  return feeds;
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
      .def("run", &context_run, "inputs"_a, py::kw_only(), "output"_a = "numpy", "stream"_a = py::none(), R"doc(
Runs the engine and returns {output name: array} in the engine's output order.

inputs: {name: array}, or one array for a one-input engine. Arrays are numpy arrays
(zero-copy when C-contiguous), objects with __dlpack__ (torch/cupy/jax tensors,
kiln.Tensor; zero-copy on the CPU) or anything numpy.asarray takes. Names, dtypes and
shapes are checked against the engine (InvalidArgumentError says which and why).
output: "numpy" (default) or "dlpack" (kiln.Tensor objects for torch.from_dlpack).
Outputs are copied once out of the context's memory, and the arrays own that copy.
stream: a CUDA stream (int, torch.cuda.Stream, cupy stream) for CUDA engines; CPU
engines run synchronously and ignore it. The GIL is released while the engine runs.)doc")
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
          [](PyEngine& p, const py::object& inputs, const std::string& output, const py::object& stream) {
            std::shared_ptr<PyContext> c;
            {
              std::lock_guard<std::mutex> lk(p.mu);
              if (!p.default_ctx) p.default_ctx = make_context(p.e, 0);
              c = p.default_ctx;
            }
            return context_run(*c, inputs, output, stream);
          },
          "inputs"_a, py::kw_only(), "output"_a = "numpy", "stream"_a = py::none(),
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

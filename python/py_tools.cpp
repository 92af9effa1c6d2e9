// kiln.compare() and kiln.bench(): the computations of `kiln compare` and `kiln bench`
// (src/runtime/compare.h, bench.h), with the same random inputs for the same seed. The
// Python package wraps the compare dict into a CompareReport object.
#include <chrono>
#include <fstream>
#include <stdexcept>

#include "onnx/importer.h"
#include "py_engine.h"
#include "runtime/bench.h"
#include "runtime/compare.h"
#include "runtime/engine_inputs.h"
#include "runtime/inputs.h"

namespace kiln::pyapi {

using namespace pybind11::literals;

namespace {

// True when the file starts with the plan magic "KILNPLAN" (otherwise: an ONNX model).
bool is_engine_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  if (!f.read(magic, sizeof(magic))) return false;
  return std::string(magic, sizeof(magic)) == "KILNPLAN";
}

Result<ImportedModel> import_model(const ModelSource& src) {
  return src.is_bytes ? import_onnx_bytes(src.bytes, src.base_dir, "model") : import_onnx_file(src.path);
}

Result<std::shared_ptr<Engine>> build_in_worker(const ModelSource& src, const BuilderConfig& config) {
  Builder b;
  return src.is_bytes ? b.build_from_memory(src.bytes, config, src.base_dir) : b.build_from_file(src.path, config);
}

py::object array(const std::string& name, const Tensor& t) { return tensor_to_python(name, t, OutputKind::kNumpy); }

py::object finite_or_inf(double v) { return py::float_(v); }

py::dict diff_dict(const TensorDiff& d) {
  py::dict o;
  o["elements"] = d.elements;
  o["out_of_tolerance"] = d.out_of_tolerance;
  o["both_nan"] = d.both_nan;
  o["max_abs_err"] = finite_or_inf(d.max_abs);
  o["max_rel_err"] = finite_or_inf(d.max_rel);
  o["rel_l2_err"] = finite_or_inf(d.rel_l2);
  o["cosine"] = d.cosine;
  return o;
}

py::dict output_dict(const OutputComparison& c) {
  py::dict o = c.compared ? diff_dict(c.diff) : py::dict();
  o["name"] = c.name;
  o["compared"] = c.compared;
  o["passed"] = c.passed;
  o["problem"] = c.problem.empty() ? py::object(py::none()) : py::str(c.problem);
  o["reference"] = array(c.name, c.reference);
  o["engine"] = array(c.name, c.engine);
  o["worst_index"] = c.compared && c.diff.worst >= 0 ? py::object(py::tuple(py::cast(c.worst_index))) : py::none();
  o["worst_reference"] = c.compared && c.diff.worst >= 0 ? py::object(py::float_(c.worst_reference)) : py::none();
  o["worst_engine"] = c.compared && c.diff.worst >= 0 ? py::object(py::float_(c.worst_engine)) : py::none();
  if (c.top_k_rows > 0) {
    o["top_k_rows"] = c.top_k_rows;
    o["top1_agreement"] = c.top1_agree;
    o["top5_agreement"] = c.top5_agree;
  }
  return o;
}

struct CompareRun {
  CompareReport report;
  TensorMap feeds;
  std::vector<std::string> random_inputs;
  bool built = false;
};

py::dict compare(py::object model, py::object engine, py::object inputs, py::object shapes, uint64_t seed, double atol,
                 double rtol, bool layerwise, py::object config, const std::string& base_dir, const py::kwargs& options) {
  const ModelSource src = model_source(model, base_dir);
  PyBuilderConfig pc = config_from(config, options);
  std::map<std::string, Dims> shape_overrides;
  if (!shapes.is_none()) {
    PyBuilderConfig tmp;
    set_option(tmp, "shapes", shapes);
    shape_overrides = tmp.shapes;
  }
  // An in-memory build uses the input shapes too (`kiln compare --shapes`).
  if (pc.shapes.empty() && pc.profiles.empty()) pc.shapes = shape_overrides;
  const BuilderConfig bc = unwrap(to_builder_config(pc));
  std::shared_ptr<Engine> given;
  std::string engine_path;
  if (py::isinstance<PyEngine>(engine)) {
    given = engine.cast<std::shared_ptr<PyEngine>>()->e;
  } else if (!engine.is_none()) {
    engine_path = py::str(py::module_::import("os").attr("fspath")(engine));
  }
  InputKeepAlive keep;
  TensorMap user_feeds;
  if (!inputs.is_none()) {
    if (!py::isinstance<py::dict>(inputs)) throw_status(invalid_argument("inputs must be a dict {name: array}"));
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(inputs)) {
      const std::string name = py::str(k);
      const TensorDesc* desc = nullptr;
      if (given) {
        for (const TensorDesc& d : given->inputs()) desc = d.name == name ? &d : desc;
      }
      user_feeds[name] = tensor_from_python(name, v, desc, keep);
    }
  }
  auto result = run_interruptible([&](const std::atomic<bool>& cancel) -> Result<CompareRun> {
    CompareRun run;
    KILN_ASSIGN_OR_RETURN(ImportedModel m, import_model(src));
    const Graph& g = *m.graph;
    std::shared_ptr<Engine> e = given;
    if (!e && !engine_path.empty()) {
      if (!is_engine_file(engine_path)) {
        return invalid_argument("'", engine_path, "' is not a kiln engine file (no KILNPLAN header)");
      }
      KILN_ASSIGN_OR_RETURN(e, Engine::load(engine_path));
    }
    if (!e) {
      BuilderConfig c = bc;
      c.progress = [&cancel](const std::string&, double) {
        if (cancel) throw std::runtime_error("interrupted");
      };
      KILN_ASSIGN_OR_RETURN(e, build_in_worker(src, c));
      run.built = true;
    }
    KILN_RETURN_IF_ERROR(check_engine_interface(g, *e));
    KILN_RETURN_IF_ERROR(check_shape_names(shape_overrides, g));
    const Graph& eg = engine_graph(*e);
    auto shape_of = [&](const Value& v) -> Result<Dims> {
      const Value* ev = eg.find_value(v.name());
      if (ev && ev->kind() == Value::Kind::kGraphInput) return engine_run_shape(*e, *ev, shape_overrides);
      return concrete_input_shape(v, shape_overrides);
    };
    run.feeds = user_feeds;
    KILN_RETURN_IF_ERROR(add_random_inputs(g, run.feeds, shape_of, seed, &run.random_inputs));
    CompareOptions o;
    o.atol = atol;
    o.rtol = rtol;
    o.layerwise = layerwise;
    o.cancelled = [&cancel] { return cancel.load(); };
    KILN_ASSIGN_OR_RETURN(run.report, compare_engine(g, *e, run.feeds, o));
    return run;
  });
  CompareRun run = unwrap(std::move(result));
  const CompareReport& r = run.report;
  py::dict d;
  d["passed"] = r.passed;
  d["atol"] = r.atol;
  d["rtol"] = r.rtol;
  d["layerwise"] = r.layerwise;
  d["text"] = format_compare_report(r);
  py::list outs;
  for (const OutputComparison& c : r.outputs) outs.append(output_dict(c));
  d["outputs"] = outs;
  py::list layers;
  for (const LayerComparison& l : r.layers) {
    py::dict ld = diff_dict(l.diff);
    ld["layer"] = l.layer;
    ld["op"] = l.op;
    ld["value"] = l.value;
    ld["model_value"] = l.model_value;
    ld["passed"] = l.passed();
    layers.append(ld);
  }
  d["layers"] = layers;
  d["layers_not_in_model"] = r.layers_not_in_model;
  d["layers_shape_mismatch"] = r.layers_shape_mismatch;
  py::dict feeds;
  for (const auto& [name, t] : run.feeds) feeds[py::str(name)] = array(name, t.clone());
  d["inputs"] = feeds;
  d["random_inputs"] = run.random_inputs;
  d["engine_built"] = run.built;
  return d;
}

py::object bench(py::object target, py::object inputs, py::object shapes, uint64_t seed, double warmup_ms,
                 py::object duration_s, py::object iterations, bool profile, py::object config, const py::kwargs& options) {
  const PyBuilderConfig pc = config_from(config, options);
  std::map<std::string, Dims> shape_overrides;
  if (!shapes.is_none()) {
    PyBuilderConfig tmp;
    set_option(tmp, "shapes", shapes);
    shape_overrides = tmp.shapes;
  }
  BenchOptions bo;
  bo.warmup_ms = warmup_ms;
  bo.duration_s = duration_s.is_none() ? -1.0 : duration_s.cast<double>();
  bo.iterations = iterations.is_none() ? -1 : iterations.cast<int>();
  bo.profile = profile;
  check(check_bench_options(bo));

  std::shared_ptr<Engine> given;
  ModelSource src;
  bool is_path_engine = false;
  if (py::isinstance<PyEngine>(target)) {
    given = target.cast<std::shared_ptr<PyEngine>>()->e;
  } else {
    src = model_source(target, ".");
    is_path_engine = !src.is_bytes && is_engine_file(src.path);
  }
  // The build config (shapes default to the run shapes, as `kiln bench MODEL --shapes`).
  PyBuilderConfig build_pc = pc;
  if (build_pc.shapes.empty() && build_pc.profiles.empty()) build_pc.shapes = shape_overrides;
  const BuilderConfig bc = unwrap(to_builder_config(build_pc));
  InputKeepAlive keep;
  TensorMap user_feeds;
  if (given) user_feeds = inputs_from_python(*given, inputs, keep, true);
  else if (!inputs.is_none()) {
    if (!py::isinstance<py::dict>(inputs)) throw_status(invalid_argument("inputs must be a dict {name: array}"));
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(inputs)) {
      user_feeds[py::str(k)] = tensor_from_python(py::str(k), v, nullptr, keep);
    }
  }

  struct BenchRun {
    BenchReport report;
    bool built = false;
    double build_s = 0;
  };
  auto result = run_interruptible([&](const std::atomic<bool>& cancel) -> Result<BenchRun> {
    BenchRun run;
    std::shared_ptr<Engine> e = given;
    if (!e && is_path_engine) {
      KILN_ASSIGN_OR_RETURN(e, Engine::load(src.path));
    }
    if (!e) {
      BuilderConfig c = bc;
      c.progress = [&cancel](const std::string&, double) {
        if (cancel) throw std::runtime_error("interrupted");
      };
      const auto t0 = std::chrono::steady_clock::now();
      KILN_ASSIGN_OR_RETURN(e, build_in_worker(src, c));
      run.build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      run.built = true;
    }
    const Graph& g = engine_graph(*e);
    KILN_RETURN_IF_ERROR(check_shape_names(shape_overrides, g));
    TensorMap feeds = user_feeds;
    std::map<std::string, Dims> given_dims;
    for (const auto& [name, t] : feeds) given_dims[name] = t.dims();
    KILN_RETURN_IF_ERROR(check_shape_names(given_dims, g, "inputs"));
    KILN_RETURN_IF_ERROR(add_random_inputs(
        g, feeds, [&](const Value& v) { return engine_run_shape(*e, v, shape_overrides); }, seed));
    BenchOptions o = bo;
    o.cancelled = [&cancel] { return cancel.load(); };
    KILN_ASSIGN_OR_RETURN(run.report, benchmark(*e, feeds, o));
    return run;
  });
  BenchRun run = unwrap(std::move(result));
  nlohmann::json j = bench_report_json(run.report);
  // The keys `kiln bench --json` adds: which file, and the build time of a model.
  const bool from_file = !given;
  j["model"] = from_file && run.built && !src.is_bytes ? nlohmann::json(src.path) : nlohmann::json(nullptr);
  j["engine"] = from_file && !run.built ? nlohmann::json(src.path) : nlohmann::json(nullptr);
  if (run.built) j["build_s"] = run.build_s;
  return py::module_::import("json").attr("loads")(j.dump());
}

}  // namespace

void register_tools(py::module_& m) {
  m.def("_compare", &compare, "model"_a, "engine"_a = py::none(), "inputs"_a = py::none(), py::kw_only(),
        "shapes"_a = py::none(), "seed"_a = 0, "atol"_a = 1e-4, "rtol"_a = 1e-3, "layerwise"_a = false,
        "config"_a = py::none(), "base_dir"_a = ".", "The dict behind kiln.compare() (use that).");
  m.def("bench", &bench, "target"_a, "inputs"_a = py::none(), py::kw_only(), "shapes"_a = py::none(), "seed"_a = 0,
        "warmup_ms"_a = 200.0, "duration_s"_a = py::none(), "iterations"_a = py::none(), "profile"_a = false,
        "config"_a = py::none(), R"doc(
Benchmarks an engine like `kiln bench` and returns its --json report as a dict:
device, shapes, threads, warmup_iterations, iterations, duration_s, latency_ms (min,
mean, median, p90, p95, p99, max), throughput_qps, model/engine (the file, or None),
build_s (when a model was built) and, with profile=True, layers (slowest first).

target: an Engine, an engine file, or a model (path, bytes or onnx.ModelProto), which is
built first with `config` / the keyword build options. inputs: {name: array} (random
inputs, seeded by `seed` as in the CLI, for the rest; shapes: {name: dims} for them).
Runs for at least duration_s seconds (default 3, or 0 with iterations) and iterations
runs (default 10). The GIL is released; Ctrl-C stops it.)doc");
}

}  // namespace kiln::pyapi

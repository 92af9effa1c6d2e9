// kiln.BuilderConfig, kiln.OptimizationProfile, kiln.Builder and kiln.build().
#include <set>

#include "py_engine.h"
#include "runtime/inputs.h"

namespace kiln::pyapi {

using namespace pybind11::literals;

namespace {

const char* const kOptionNames =
    "device, fp16, bf16, tf32, int8, fp8, threads, memory_limit_bytes, timing_cache, opt_level, time_tactics, shapes, "
    "min_shapes, opt_shapes, max_shapes, profiles, progress";

// {name: dims} from a dict of sequences or a `kiln build --shapes` string
// ("x:1x3x224x224,y:1x8").
std::map<std::string, Dims> shapes_from_python(py::handle v, const std::string& what) {
  std::map<std::string, Dims> out;
  if (v.is_none()) return out;
  if (py::isinstance<py::str>(v)) {
    check(parse_shape_list(v.cast<std::string>(), &out).with_context(what + ": "));
    return out;
  }
  if (!py::isinstance<py::dict>(v)) {
    throw_status(invalid_argument(what, ": expected a dict {input name: shape} or a string like \"x:1x3x224x224\", got ",
                                  std::string(py::repr(v))));
  }
  for (auto [k, d] : py::reinterpret_borrow<py::dict>(v)) {
    const std::string name = py::str(k);
    out[name] = dims_from_python(d, cat(what, "['", name, "']"));
  }
  return out;
}

py::dict shapes_to_python(const std::map<std::string, Dims>& m) {
  py::dict d;
  for (const auto& [k, v] : m) d[py::str(k)] = py::tuple(py::cast(v));
  return d;
}

template <typename T>
T cast_option(py::handle v, const char* key, const char* expected) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!py::isinstance<py::bool_>(v)) {
      throw_status(invalid_argument("option ", key, ": expected ", expected, ", got ", std::string(py::repr(v))));
    }
  }
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
    throw_status(invalid_argument("option ", key, ": expected ", expected, ", got ", std::string(py::repr(v))));
  }
}

std::string repr_config(const PyBuilderConfig& c) {
  std::string s = cat("BuilderConfig(device='", c.device, "'");
  for (auto [name, on] : {std::pair{"fp16", c.fp16}, {"bf16", c.bf16}, {"tf32", c.tf32}, {"int8", c.int8}, {"fp8", c.fp8}}) {
    if (on) s += cat(", ", name, "=True");
  }
  if (c.threads) s += cat(", threads=", c.threads);
  if (c.memory_limit_bytes) s += cat(", memory_limit_bytes=", c.memory_limit_bytes);
  if (!c.timing_cache.empty()) s += cat(", timing_cache='", c.timing_cache, "'");
  if (c.opt_level != 2) s += cat(", opt_level=", c.opt_level);
  if (!c.time_tactics) s += ", time_tactics=False";
  for (auto [name, m] : {std::pair{"shapes", &c.shapes}, {"min_shapes", &c.min_shapes}, {"opt_shapes", &c.opt_shapes},
                         {"max_shapes", &c.max_shapes}}) {
    if (m->empty()) continue;
    std::string items;
    for (const auto& [k, d] : *m) items += cat(items.empty() ? "" : ", ", "'", k, "': ", dims_str(d));
    s += cat(", ", name, "={", items, "}");
  }
  if (!c.profiles.empty()) s += cat(", profiles=[", c.profiles.size(), " profile(s)]");
  return s + ")";
}

std::string repr_profile(const OptimizationProfile& p) {
  std::string items;
  for (const auto& [k, r] : p.inputs) {
    items += cat(items.empty() ? "" : ", ", "'", k, "': (", dims_str(r.min), ", ", dims_str(r.opt), ", ", dims_str(r.max), ")");
  }
  return "OptimizationProfile({" + items + "})";
}

// Thrown from the progress callback to stop a build after Ctrl-C.
struct BuildCancelled {};

// Forwards builder messages to a Python callable(severity, message).
class PyLogger : public Logger {
 public:
  explicit PyLogger(py::object fn) : fn_(std::move(fn)) {}
  void log(LogSeverity severity, const std::string& message) override {
    static const char* names[] = {"error", "warning", "info", "verbose"};
    py::gil_scoped_acquire gil;
    try {
      fn_(names[static_cast<int>(severity)], message);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("kiln logger callback");
    }
  }

 private:
  py::object fn_;
};

struct PyBuilder {
  std::unique_ptr<PyLogger> py_logger;
  Logger& logger() { return py_logger ? static_cast<Logger&>(*py_logger) : default_logger(); }
};

}  // namespace

void set_option(PyBuilderConfig& c, const std::string& key, py::handle v) {
  const char* k = key.c_str();
  if (key == "device") {
    const std::string d = cast_option<std::string>(v, k, "'cpu' or 'cuda'");
    if (d != "cpu" && d != "cuda") throw_status(invalid_argument("unknown device '", d, "': expected cpu or cuda"));
    c.device = d;
  } else if (key == "fp16") {
    c.fp16 = cast_option<bool>(v, k, "a bool");
  } else if (key == "bf16") {
    c.bf16 = cast_option<bool>(v, k, "a bool");
  } else if (key == "tf32") {
    c.tf32 = cast_option<bool>(v, k, "a bool");
  } else if (key == "int8") {
    c.int8 = cast_option<bool>(v, k, "a bool");
  } else if (key == "fp8") {
    c.fp8 = cast_option<bool>(v, k, "a bool");
  } else if (key == "threads") {
    const int t = cast_option<int>(v, k, "an int");
    if (t < 0) throw_status(invalid_argument("thread count ", t, " is negative"));
    c.threads = t;
  } else if (key == "memory_limit_bytes") {
    c.memory_limit_bytes = cast_option<size_t>(v, k, "a non-negative int");
  } else if (key == "timing_cache") {
    c.timing_cache = v.is_none() ? std::string() : std::string(py::str(py::module_::import("os").attr("fspath")(v)));
  } else if (key == "opt_level" || key == "optimization_level") {
    const int level = cast_option<int>(v, k, "0, 1 or 2");
    if (level < 0 || level > 2) throw_status(invalid_argument("optimization level ", level, " is not 0, 1 or 2"));
    c.opt_level = level;
  } else if (key == "time_tactics") {
    c.time_tactics = cast_option<bool>(v, k, "a bool");
  } else if (key == "shapes") {
    c.shapes = shapes_from_python(v, key);
  } else if (key == "min_shapes") {
    c.min_shapes = shapes_from_python(v, key);
  } else if (key == "opt_shapes") {
    c.opt_shapes = shapes_from_python(v, key);
  } else if (key == "max_shapes") {
    c.max_shapes = shapes_from_python(v, key);
  } else if (key == "profiles") {
    std::vector<OptimizationProfile> ps;
    if (!v.is_none()) {
      for (py::handle p : v) {
        if (!py::isinstance<OptimizationProfile>(p)) {
          throw_status(invalid_argument("profiles: expected OptimizationProfile objects, got ", std::string(py::repr(p))));
        }
        ps.push_back(p.cast<OptimizationProfile>());
      }
    }
    c.profiles = std::move(ps);
  } else if (key == "progress") {
    if (!v.is_none() && !PyCallable_Check(v.ptr())) throw_status(invalid_argument("progress: expected a callable or None"));
    c.progress = py::reinterpret_borrow<py::object>(v);
  } else {
    throw py::type_error(cat("unknown build option '", key, "' (options: ", kOptionNames, ")"));
  }
}

PyBuilderConfig config_from(py::handle config, const py::dict& options) {
  PyBuilderConfig c;
  if (!config.is_none()) {
    if (!py::isinstance<PyBuilderConfig>(config)) {
      throw py::type_error(cat("config: expected a kiln.BuilderConfig, got ", std::string(py::repr(config))));
    }
    c = config.cast<PyBuilderConfig>();
  }
  for (auto [k, v] : options) set_option(c, py::str(k), v);
  return c;
}

Result<BuilderConfig> to_builder_config(const PyBuilderConfig& f) {
  BuilderConfig c;
  c.device = f.device == "cuda" ? DeviceKind::kCUDA : DeviceKind::kCPU;
  c.fp16 = f.fp16;
  c.bf16 = f.bf16;
  c.tf32 = f.tf32;
  c.int8 = f.int8;
  c.fp8 = f.fp8;
  c.threads = f.threads;
  c.memory_limit_bytes = f.memory_limit_bytes;
  c.timing_cache_path = f.timing_cache;
  c.optimization_level = f.opt_level;
  c.time_tactics = f.time_tactics;
  const bool any_shapes = !f.shapes.empty() || !f.min_shapes.empty() || !f.opt_shapes.empty() || !f.max_shapes.empty();
  if (!f.profiles.empty()) {
    if (any_shapes) return invalid_argument("give either profiles or shapes/min_shapes/opt_shapes/max_shapes, not both");
    c.profiles = f.profiles;
    return c;
  }
  // As `kiln build`: fixed shapes, and ranges where opt defaults to max (else min), min
  // and max to opt.
  OptimizationProfile p;
  for (const auto& [name, d] : f.shapes) p.inputs[name] = ShapeRange{d, d, d};
  std::set<std::string> ranged;
  for (const auto* m : {&f.min_shapes, &f.opt_shapes, &f.max_shapes}) {
    for (const auto& [name, d] : *m) ranged.insert(name);
  }
  for (const std::string& name : ranged) {
    if (f.shapes.count(name)) {
      return invalid_argument("input '", name, "' is in shapes and in min/opt/max_shapes; give one or the other");
    }
    auto get = [&name](const std::map<std::string, Dims>& m) {
      auto it = m.find(name);
      return it == m.end() ? nullptr : &it->second;
    };
    const Dims* mn = get(f.min_shapes);
    const Dims* op = get(f.opt_shapes);
    const Dims* mx = get(f.max_shapes);
    const Dims opt = op ? *op : mx ? *mx : *mn;
    p.inputs[name] = ShapeRange{mn ? *mn : opt, opt, mx ? *mx : opt};
  }
  if (!p.inputs.empty()) c.profiles.push_back(std::move(p));
  return c;
}

ModelSource model_source(py::handle model, const std::string& base_dir) {
  ModelSource s;
  s.base_dir = base_dir.empty() ? "." : base_dir;
  if (py::hasattr(model, "SerializeToString") && !py::isinstance<py::str>(model)) {  // onnx.ModelProto
    s.bytes = py::bytes(model.attr("SerializeToString")());
    s.is_bytes = true;
  } else if (py::isinstance<py::bytes>(model)) {
    s.bytes = model.cast<std::string>();
    s.is_bytes = true;
  } else if (py::isinstance<py::bytearray>(model) || py::isinstance<py::memoryview>(model)) {
    s.bytes = py::bytes(py::module_::import("builtins").attr("bytes")(model));
    s.is_bytes = true;
  } else {
    try {
      s.path = py::str(py::module_::import("os").attr("fspath")(model));
    } catch (py::error_already_set&) {
      throw py::type_error(cat("model: expected a path, bytes or an onnx.ModelProto, got ", std::string(py::repr(model))));
    }
  }
  return s;
}

std::shared_ptr<Engine> build_engine(Logger& log, const ModelSource& src, const PyBuilderConfig& config) {
  BuilderConfig c = unwrap(to_builder_config(config));
  PyObject* progress = config.progress.is_none() ? nullptr : config.progress.ptr();  // `config` outlives the build
  auto result = run_interruptible([&](const std::atomic<bool>& cancel) {
    BuilderConfig cc = c;
    cc.progress = [&cancel, progress](const std::string& stage, double fraction) {
      if (cancel) throw BuildCancelled{};
      if (progress) {
        py::gil_scoped_acquire gil;
        py::handle fn(progress);
        fn(stage, fraction);  // an exception stops the build and reaches the caller
      }
    };
    Builder b(log);
    return src.is_bytes ? b.build_from_memory(src.bytes, cc, src.base_dir) : b.build_from_file(src.path, cc);
  });
  return unwrap(std::move(result));
}

void register_config(py::module_& m) {
  py::class_<OptimizationProfile>(m, "OptimizationProfile", R"doc(
The range of shapes each dynamic input may take at run time (min <= opt <= max per dim):
the builder tunes at opt and plans memory for max. Inputs with static dims need no entry.

    p = kiln.OptimizationProfile({"x": ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))})
    p.set_shape("y", min=(1, 16), opt=(4, 16), max=(8, 16)))doc")
      .def(py::init([](py::object inputs) {
             OptimizationProfile p;
             if (inputs.is_none()) return p;
             for (auto [k, v] : py::dict(inputs)) {
               const std::string name = py::str(k);
               py::tuple t = py::tuple(py::reinterpret_borrow<py::object>(v));
               if (t.size() != 3) throw_status(invalid_argument("profile input '", name, "': expected (min, opt, max)"));
               p.inputs[name] = ShapeRange{dims_from_python(t[0], name + " min"), dims_from_python(t[1], name + " opt"),
                                           dims_from_python(t[2], name + " max")};
             }
             return p;
           }),
           "inputs"_a = py::none(), "inputs: {name: (min, opt, max)} with each a sequence of ints.")
      .def_static(
          "fixed",
          [](py::object shapes) {
            return OptimizationProfile::fixed(shapes_from_python(shapes, "shapes"));
          },
          "shapes"_a, "A profile where every listed input has one fixed shape: {name: dims}.")
      .def(
          "set_shape",
          [](OptimizationProfile& p, const std::string& name, py::object min, py::object opt, py::object max) {
            p.inputs[name] = ShapeRange{dims_from_python(min, name + " min"), dims_from_python(opt, name + " opt"),
                                        dims_from_python(max, name + " max")};
          },
          "name"_a, "min"_a, "opt"_a, "max"_a, "Sets the shape range of one input.")
      .def_property_readonly(
          "inputs",
          [](const OptimizationProfile& p) {
            py::dict d;
            for (const auto& [k, r] : p.inputs) {
              d[py::str(k)] = py::make_tuple(py::tuple(py::cast(r.min)), py::tuple(py::cast(r.opt)), py::tuple(py::cast(r.max)));
            }
            return d;
          },
          "{name: (min, opt, max)}")
      .def("__repr__", &repr_profile);

  auto cfg = py::class_<PyBuilderConfig>(m, "BuilderConfig", R"doc(
Build options, the same as `kiln build`'s flags:

device ('cpu' | 'cuda'), fp16, bf16, tf32, int8, fp8 (precisions the builder may use),
threads (CPU threads, 0 = all cores), memory_limit_bytes, timing_cache (a file read before
and written after tactic timing), opt_level (0 none, 1 cleanups, 2 fusions), time_tactics,
shapes / min_shapes / opt_shapes / max_shapes ({input: dims} or "x:1x3x224x224,..."),
profiles (a list of OptimizationProfile, instead of the shape options), progress
(callable(stage, fraction)).

    config = kiln.BuilderConfig(fp16=True, shapes={"x": (1, 3, 224, 224)}))doc");
  cfg.def(py::init([](const py::kwargs& kw) { return config_from(py::none(), kw); }),
          "Options as keywords (see the class docstring).");
  auto prop_bool = [&cfg](const char* name, bool PyBuilderConfig::*field, const char* doc) {
    cfg.def_property(
        name, [field](const PyBuilderConfig& c) { return c.*field; },
        [name](PyBuilderConfig& c, py::handle v) { set_option(c, name, v); }, doc);
  };
  cfg.def_property(
      "device", [](const PyBuilderConfig& c) { return c.device; },
      [](PyBuilderConfig& c, py::handle v) { set_option(c, "device", v); }, "'cpu' or 'cuda'.");
  prop_bool("fp16", &PyBuilderConfig::fp16, "Allow float16 layers.");
  prop_bool("bf16", &PyBuilderConfig::bf16, "Allow bfloat16 layers.");
  prop_bool("tf32", &PyBuilderConfig::tf32, "Allow TF32 math.");
  prop_bool("int8", &PyBuilderConfig::int8, "Allow int8 layers.");
  prop_bool("fp8", &PyBuilderConfig::fp8, "Allow fp8 layers.");
  prop_bool("time_tactics", &PyBuilderConfig::time_tactics, "Time alternative kernels per layer (else take the first).");
  cfg.def_property(
      "threads", [](const PyBuilderConfig& c) { return c.threads; },
      [](PyBuilderConfig& c, py::handle v) { set_option(c, "threads", v); }, "CPU threads; 0: all cores.");
  cfg.def_property(
      "memory_limit_bytes", [](const PyBuilderConfig& c) { return c.memory_limit_bytes; },
      [](PyBuilderConfig& c, py::handle v) { set_option(c, "memory_limit_bytes", v); },
      "Activation arena limit; 0: unlimited.");
  cfg.def_property(
      "timing_cache", [](const PyBuilderConfig& c) { return c.timing_cache; },
      [](PyBuilderConfig& c, py::handle v) { set_option(c, "timing_cache", v); },
      "Tactic timing cache file ('' for none).");
  cfg.def_property(
      "opt_level", [](const PyBuilderConfig& c) { return c.opt_level; },
      [](PyBuilderConfig& c, py::handle v) { set_option(c, "opt_level", v); },
      "Optimization level: 0 none, 1 cleanups, 2 fusions (default).");
  for (auto [name, field] : {std::pair{"shapes", &PyBuilderConfig::shapes}, {"min_shapes", &PyBuilderConfig::min_shapes},
                             {"opt_shapes", &PyBuilderConfig::opt_shapes}, {"max_shapes", &PyBuilderConfig::max_shapes}}) {
    cfg.def_property(
        name, [field = field](const PyBuilderConfig& c) { return shapes_to_python(c.*field); },
        [name = name](PyBuilderConfig& c, py::handle v) { set_option(c, name, v); }, "{input name: dims}");
  }
  cfg.def_property(
      "profiles", [](const PyBuilderConfig& c) { return c.profiles; },
      [](PyBuilderConfig& c, py::handle v) { set_option(c, "profiles", v); },
      "Optimization profiles (instead of the shape options).");
  cfg.def_property(
      "progress", [](const PyBuilderConfig& c) { return c.progress; },
      [](PyBuilderConfig& c, py::handle v) { set_option(c, "progress", v); },
      "callable(stage: str, fraction: float) called as the build advances, or None.");
  cfg.def("__repr__", &repr_config);
  cfg.def("__copy__", [](const PyBuilderConfig& c) { return c; });

  py::class_<PyBuilder>(m, "Builder", R"doc(
Builds engines from ONNX models. The optional logger is called as logger(severity,
message) with severity 'error', 'warning', 'info' or 'verbose'; without one, warnings
and errors go to stderr.)doc")
      .def(py::init([](py::object logger) {
             auto b = std::make_unique<PyBuilder>();
             if (!logger.is_none()) {
               if (!PyCallable_Check(logger.ptr())) throw py::type_error("logger must be callable(severity, message)");
               b->py_logger = std::make_unique<PyLogger>(logger);
             }
             return b;
           }),
           "logger"_a = py::none())
      .def(
          "build",
          [](PyBuilder& b, py::object model, py::object config, const std::string& base_dir, const py::kwargs& options) {
            const PyBuilderConfig c = config_from(config, options);
            auto pe = std::make_shared<PyEngine>();
            pe->e = build_engine(b.logger(), model_source(model, base_dir), c);
            return pe;
          },
          "model"_a, "config"_a = py::none(), py::kw_only(), "base_dir"_a = ".", R"doc(
Builds an engine. model: a path to an .onnx file, the model's bytes, or an
onnx.ModelProto. config: a BuilderConfig; keyword options override its fields.
base_dir: where external data files of a model given as bytes live.
The GIL is released while building; Ctrl-C stops the build at its next stage.)doc");
}

}  // namespace kiln::pyapi

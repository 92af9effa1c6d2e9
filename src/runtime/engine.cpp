// Engine: a loaded plan (metadata, optimized graph, weights) that creates contexts.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "passes/pass.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"

namespace kiln {

void StderrLogger::log(LogSeverity severity, const std::string& message) {
  if (severity > max_) return;
  static const char* names[] = {"error", "warning", "info", "verbose"};
  std::fprintf(stderr, "kiln %s: %s\n", names[static_cast<int>(severity)], message.c_str());
}

Logger& default_logger() {
  static StderrLogger logger;
  return logger;
}

const char* device_name(DeviceKind d) { return d == DeviceKind::kCUDA ? "cuda" : "cpu"; }

OptimizationProfile OptimizationProfile::fixed(const std::map<std::string, Dims>& shapes) {
  OptimizationProfile p;
  for (const auto& [name, dims] : shapes) p.inputs[name] = ShapeRange{dims, dims, dims};
  return p;
}

std::string host_arch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

namespace {

using nlohmann::json;

// Integer metadata fields, strictly: nlohmann's get<int64_t>() would convert a float such
// as 1e30 with a C++ cast, undefined behaviour when out of range (found by fuzz_plan_loader),
// and wrap a negative number into a size_t.
template <typename T>
T get_integer(const json& j) {
  using Limits = std::numeric_limits<T>;
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v <= static_cast<uint64_t>(Limits::max())) return static_cast<T>(v);
  } else if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    const bool fits = v >= 0 ? static_cast<uint64_t>(v) <= static_cast<uint64_t>(Limits::max())
                             : Limits::is_signed && v >= static_cast<int64_t>(Limits::min());
    if (fits) return static_cast<T>(v);
  }
  throw std::runtime_error("expected an integer in range, got " + j.dump());
}

Dims get_dims(const json& j) {
  if (!j.is_array()) throw std::runtime_error("expected dims, got " + j.dump());
  Dims d;
  for (const json& x : j) d.push_back(get_integer<int64_t>(x));
  return d;
}

json desc_json(const TensorDesc& d) {
  return {{"name", d.name}, {"dtype", static_cast<int>(d.dtype)}, {"dims", d.dims}, {"dim_names", d.dim_names}};
}

TensorDesc desc_from(const json& j) {
  TensorDesc d;
  d.name = j.at("name").get<std::string>();
  d.dtype = static_cast<DataType>(get_integer<int>(j.at("dtype")));
  d.dims = get_dims(j.at("dims"));
  d.dim_names = j.at("dim_names").get<std::vector<std::string>>();
  if (!is_supported_dtype(d.dtype) || d.dim_names.size() != d.dims.size()) throw std::runtime_error("bad tensor description");
  return d;
}

}  // namespace

json engine_meta(const EngineImpl& e) {
  json j;
  j["producer"] = "kiln 0.1.0";
  j["target"] = {{"backend", device_name(e.device)}, {"arch", e.arch}, {"libraries", e.libraries}};
  j["config"] = {{"threads", e.threads}, {"memory_limit_bytes", e.memory_limit_bytes}, {"precision", e.precision}};
  json ins = json::array(), outs = json::array();
  for (const auto& d : e.inputs) ins.push_back(desc_json(d));
  for (const auto& d : e.outputs) outs.push_back(desc_json(d));
  j["inputs"] = ins;
  j["outputs"] = outs;
  json profiles = json::array();
  for (const auto& p : e.profiles) {
    json pj = json::object();
    for (const auto& [name, r] : p.inputs) pj[name] = {{"min", r.min}, {"opt", r.opt}, {"max", r.max}};
    profiles.push_back(pj);
  }
  j["profiles"] = profiles;
  json layers = json::array();
  for (const auto& l : e.layers) {
    layers.push_back({{"name", l.name}, {"output", l.output}, {"op", l.op}, {"tactic", l.tactic}, {"precision", l.precision}, {"time_ms", l.time_ms}});
  }
  j["layers"] = layers;
  const BuildSummary& s = e.summary;
  j["summary"] = {{"nodes_imported", s.nodes_imported}, {"layers", s.layers}, {"fusions", s.fusions},
                  {"weight_bytes", s.weight_bytes}, {"peak_activation_bytes", s.peak_activation_bytes}};
  return j;
}

Status parse_engine_meta(const json& j, EngineImpl* e) {
  try {
    const json& t = j.at("target");
    const std::string backend = t.at("backend").get<std::string>();
    if (backend == "cpu") e->device = DeviceKind::kCPU;
    else if (backend == "cuda") e->device = DeviceKind::kCUDA;
    else return invalid_model("unknown backend '", backend, "'");
    e->arch = t.at("arch").get<std::string>();
    e->libraries = t.at("libraries").get<std::string>();
    const json& c = j.at("config");
    e->threads = get_integer<int>(c.at("threads"));
    if (e->threads < 0) throw std::runtime_error("negative thread count");
    // Never more OpenMP threads than this machine has processors: more only adds
    // contention, and a damaged plan's 65536 (found by fuzz_plan_loader) made OpenMP start
    // that many threads.
    e->threads = std::min(e->threads, omp_get_num_procs());
    e->memory_limit_bytes = get_integer<size_t>(c.at("memory_limit_bytes"));
    e->precision = c.at("precision");
    for (const auto& d : j.at("inputs")) e->inputs.push_back(desc_from(d));
    for (const auto& d : j.at("outputs")) e->outputs.push_back(desc_from(d));
    for (const auto& pj : j.at("profiles")) {
      OptimizationProfile p;
      for (const auto& [name, r] : pj.items()) {
        p.inputs[name] = ShapeRange{get_dims(r.at("min")), get_dims(r.at("opt")), get_dims(r.at("max"))};
      }
      e->profiles.push_back(std::move(p));
    }
    for (const auto& l : j.at("layers")) {
      LayerInfo li;
      li.name = l.at("name").get<std::string>();
      li.output = l.at("output").get<std::string>();
      li.op = l.at("op").get<std::string>();
      li.tactic = l.at("tactic").get<std::string>();
      li.precision = l.at("precision").get<std::string>();
      li.time_ms = l.at("time_ms").get<double>();
      e->layer_of[li.output] = e->layers.size();
      e->layers.push_back(std::move(li));
    }
    const json& s = j.at("summary");
    e->summary.nodes_imported = get_integer<size_t>(s.at("nodes_imported"));
    e->summary.layers = get_integer<size_t>(s.at("layers"));
    e->summary.fusions = get_integer<int>(s.at("fusions"));
    e->summary.weight_bytes = get_integer<size_t>(s.at("weight_bytes"));
    e->summary.peak_activation_bytes = get_integer<size_t>(s.at("peak_activation_bytes"));
  } catch (const std::exception& ex) {
    return invalid_model("corrupt engine metadata: ", ex.what());
  }
  if (e->profiles.empty()) return invalid_model("corrupt engine metadata: no optimization profile");
  return Status::ok();
}

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

namespace {

Result<std::shared_ptr<Engine>> engine_from_storage(std::shared_ptr<PlanStorage> storage, const std::string& what) {
  auto e = std::make_unique<EngineImpl>();
  e->storage = std::move(storage);
  KILN_ASSIGN_OR_RETURN(e->plan, read_plan(*e->storage, what));
  KILN_RETURN_IF_ERROR(parse_engine_meta(e->plan.meta, e.get()).with_context(what + ": "));
  if (e->arch != host_arch()) {
    return unsupported(what, ": the engine was built for ", e->arch, ", this machine is ", host_arch(), "; rebuild it here");
  }
  if (e->device == DeviceKind::kCUDA && !cuda_compiled()) {
    return unsupported(what, ": the engine targets CUDA, which this build of kiln does not include");
  }
  KILN_ASSIGN_OR_RETURN(e->graph, import_plan_graph(e->plan, what));
  {
    PassReport report;
    PassContext pctx(report);
    KILN_RETURN_IF_ERROR(infer_shapes(*e->graph, pctx).with_context(what + ": "));
  }
  // The metadata must describe the graph it came with.
  if (e->inputs.size() != e->graph->inputs().size() || e->outputs.size() != e->graph->outputs().size()) {
    return invalid_model(what, ": corrupt engine file (metadata and graph disagree on inputs/outputs)");
  }
  for (size_t i = 0; i < e->inputs.size(); ++i) {
    if (e->inputs[i].name != e->graph->inputs()[i]->name()) return invalid_model(what, ": corrupt engine file (input names)");
  }
  for (size_t i = 0; i < e->outputs.size(); ++i) {
    if (e->outputs[i].name != e->graph->outputs()[i]->name()) return invalid_model(what, ": corrupt engine file (output names)");
  }
  for (const auto& p : e->profiles) {
    for (const auto& [name, r] : p.inputs) {
      if (!e->graph->find_value(name) || r.min.size() != r.opt.size() || r.min.size() != r.max.size()) {
        return invalid_model(what, ": corrupt engine file (profile for '", name, "')");
      }
    }
  }
  return std::make_shared<Engine>(std::move(e));
}

}  // namespace

Result<std::shared_ptr<Engine>> Engine::load(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<PlanStorage> storage, map_plan_file(path));
  return engine_from_storage(std::move(storage), cat("engine file '", path, "'"));
}

Result<std::shared_ptr<Engine>> Engine::deserialize(const void* data, size_t size) {
  if (!data || size == 0) return invalid_argument("engine bytes are empty");
  return engine_from_storage(copy_plan_bytes(data, size), "engine");
}

std::string Engine::serialize() const {
  const PlanStorage& s = *impl_->storage;
  return std::string(reinterpret_cast<const char*>(s.data()), s.size());
}

Status Engine::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const PlanStorage& s = *impl_->storage;
  if (!f || !f.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size())) || !f.flush()) {
    return io_error("cannot write engine file '", path, "'");
  }
  return Status::ok();
}

const std::vector<TensorDesc>& Engine::inputs() const { return impl_->inputs; }
const std::vector<TensorDesc>& Engine::outputs() const { return impl_->outputs; }
const std::vector<OptimizationProfile>& Engine::profiles() const { return impl_->profiles; }
DeviceKind Engine::device() const { return impl_->device; }
const std::vector<LayerInfo>& Engine::layers() const { return impl_->layers; }
const BuildSummary& Engine::summary() const { return impl_->summary; }

namespace {

std::string desc_str(const TensorDesc& d) {
  std::string s = cat(d.name, ": ", dtype_name(d.dtype), "[");
  for (size_t i = 0; i < d.dims.size(); ++i) {
    s += (i ? "," : "") + (d.dims[i] >= 0 ? std::to_string(d.dims[i]) : (d.dim_names[i].empty() ? "?" : d.dim_names[i]));
  }
  return s + "]";
}

}  // namespace

std::string Engine::describe() const {
  const EngineImpl& e = *impl_;
  std::ostringstream os;
  os << "engine: " << device_name(e.device) << " (" << e.arch << ", " << e.libraries << "), "
     << e.layers.size() << " layers, " << e.summary.weight_bytes << " bytes of weights, peak activations "
     << e.summary.peak_activation_bytes << " bytes (profile 0, max shapes)\n";
  os << "precision flags: " << e.precision.dump() << "\n";
  for (const auto& d : e.inputs) os << "input  " << desc_str(d) << "\n";
  for (const auto& d : e.outputs) os << "output " << desc_str(d) << "\n";
  for (size_t i = 0; i < e.profiles.size(); ++i) {
    for (const auto& [name, r] : e.profiles[i].inputs) {
      os << "profile " << i << " " << name << ": min " << dims_str(r.min) << " opt " << dims_str(r.opt) << " max "
         << dims_str(r.max) << "\n";
    }
  }
  std::map<std::string, int> tactic_count;
  for (const auto& l : e.layers) ++tactic_count[l.tactic];
  os << "tactics:";
  for (const auto& [t, n] : tactic_count) os << " " << t << "=" << n;
  os << "\nlayers:\n";
  for (const auto& l : e.layers) {
    os << "  " << (l.name.empty() ? l.output : l.name) << "  " << l.op << "  " << l.tactic << "  " << l.precision;
    if (l.time_ms >= 0) os << "  " << l.time_ms << " ms";
    os << "\n";
  }
  return os.str();
}

Result<std::unique_ptr<ExecutionContext>> Engine::create_execution_context(int profile) const {
  if (profile < 0 || profile >= static_cast<int>(impl_->profiles.size())) {
    return invalid_argument("profile ", profile, " does not exist (the engine has ", impl_->profiles.size(), ")");
  }
  if (impl_->device == DeviceKind::kCUDA) KILN_RETURN_IF_ERROR(cuda_device_status());
  auto c = std::make_unique<ContextImpl>();
  c->engine = shared_from_this();
  c->e = impl_.get();
  c->profile = profile;
  return std::make_unique<ExecutionContext>(std::move(c));
}

}  // namespace kiln

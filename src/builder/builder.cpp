// Builder: ONNX model -> optimized graph -> per-layer tactics (timed where there are
// alternatives) -> memory plan -> plan file -> Engine.
#include <algorithm>
#include <chrono>
#include <random>

#include "builder/timing_cache.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

// Times each candidate tactic on random data at the shapes being set up, consulting and
// filling the timing cache.
class TacticTimer : public TacticChooser {
 public:
  explicit TacticTimer(TimingCache& cache) : cache_(cache) {}

  double cached_ms(const Step& step, const std::string& tactic) override {
    double ms = cache_.find(layer_signature(*step.node), tactic);
    if (ms >= 0) ++hits;
    return ms;
  }
  void store_ms(const Step& step, const std::string& tactic, double ms) override {
    ++timed;
    cache_.put(layer_signature(*step.node), tactic, ms);
  }
  void chose(const Step& step, double ms) override {
    for (Value* o : step.node->outputs()) {
      if (o) {
        chosen_ms[o->name()] = ms;
        break;
      }
    }
  }
  int timed = 0;
  int hits = 0;
  std::map<std::string, double> chosen_ms;  // layer key -> time of the chosen tactic

  const fast::Tactic* choose(const Step& step, const fast::LayerSpec& spec, const std::vector<const fast::Tactic*>& cands,
                             const std::vector<fast::TensorShape>& in_shapes,
                             const std::vector<fast::TensorShape>& out_shapes) override {
    const std::string sig = layer_signature(*step.node);
    const fast::Tactic* best = nullptr;
    double best_ms = 0;
    for (const fast::Tactic* t : cands) {
      double ms = cache_.find(sig, t->name);
      if (ms >= 0) {
        ++hits;
      } else {
        ms = measure(*t, spec, in_shapes, out_shapes);
        ++timed;
        if (ms < 0) continue;  // the tactic failed at these shapes
        cache_.put(sig, t->name, ms);
      }
      if (!best || ms < best_ms) {
        best = t;
        best_ms = ms;
      }
    }
    if (best) {
      for (Value* o : step.node->outputs()) {
        if (o) {
          chosen_ms[o->name()] = best_ms;
          break;
        }
      }
    }
    return best;
  }

 private:
  static double measure(const fast::Tactic& t, const fast::LayerSpec& spec, const std::vector<fast::TensorShape>& in_shapes,
                        const std::vector<fast::TensorShape>& out_shapes) {
    auto k = t.create(spec);
    if (!k) return -1;
    size_t scratch_bytes = 0;
    if (!k.value()->prepare(in_shapes, out_shapes, &scratch_bytes).is_ok()) return -1;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<Tensor> ins(in_shapes.size()), outs;
    std::vector<const Tensor*> in_ptrs;
    for (size_t i = 0; i < in_shapes.size(); ++i) {
      if (spec.constants[i]) {
        in_ptrs.push_back(spec.constants[i]);
        continue;
      }
      if (spec.input_dtypes[i] == DataType::kUndefined) {
        in_ptrs.push_back(nullptr);
        continue;
      }
      ins[i] = Tensor(in_shapes[i].dtype, in_shapes[i].dims);
      if (ins[i].dtype() == DataType::kFloat32) {
        for (int64_t j = 0; j < ins[i].size(); ++j) ins[i].data<float>()[j] = dist(rng);
      }
      in_ptrs.push_back(&ins[i]);
    }
    for (const auto& s : out_shapes) outs.emplace_back(s.dtype == DataType::kUndefined ? DataType::kFloat32 : s.dtype, s.dims);
    std::vector<Tensor*> out_ptrs;
    for (size_t i = 0; i < outs.size(); ++i) out_ptrs.push_back(spec.output_dtypes[i] == DataType::kUndefined ? nullptr : &outs[i]);
    std::vector<std::byte> scratch(scratch_bytes + 64);
    if (!k.value()->run(in_ptrs, out_ptrs, scratch.data()).is_ok()) return -1;  // warm-up
    std::vector<double> times;
    const auto start = Clock::now();
    while (times.size() < 5 || (times.size() < 50 && Clock::now() - start < std::chrono::milliseconds(20))) {
      const auto t0 = Clock::now();
      if (!k.value()->run(in_ptrs, out_ptrs, scratch.data()).is_ok()) return -1;
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
    return times[times.size() / 2];
  }

  TimingCache& cache_;
};

TensorDesc describe_value(const Value& v) {
  TensorDesc d;
  d.name = v.name();
  d.dtype = v.dtype;
  if (v.shape) {
    for (const Dim& x : *v.shape) {
      d.dims.push_back(x.known() ? x.value : -1);
      d.dim_names.push_back(x.known() ? "" : x.symbol);
    }
  }
  return d;
}

bool is_dynamic(const Value& v) {
  if (!v.shape) return true;
  for (const Dim& d : *v.shape) {
    if (!d.known()) return true;
  }
  return false;
}

// Checks the profiles against the graph's inputs and completes them: a dynamic input no
// profile mentions gets its unknown dims fixed to 1.
Status complete_profiles(const Graph& g, std::vector<OptimizationProfile>& profiles, Logger& log) {
  if (profiles.empty()) profiles.emplace_back();
  for (size_t p = 0; p < profiles.size(); ++p) {
    for (const auto& [name, r] : profiles[p].inputs) {
      Value* v = g.find_value(name);
      if (!v || v->kind() != Value::Kind::kGraphInput) {
        std::string names;
        for (Value* in : g.inputs()) names += (names.empty() ? "" : ", ") + in->name();
        return invalid_argument("profile ", p, ": '", name, "' is not an input of the model (inputs: ", names, ")");
      }
      if (!v->shape) return invalid_argument("profile ", p, ": input '", name, "' has unknown rank");
      const size_t rank = v->shape->size();
      if (r.min.size() != rank || r.opt.size() != rank || r.max.size() != rank) {
        return invalid_argument("profile ", p, ": input '", name, "' has rank ", rank, " (", sym_shape_str(v->shape),
                                "), the profile gives min ", dims_str(r.min), " opt ", dims_str(r.opt), " max ", dims_str(r.max));
      }
      for (size_t i = 0; i < rank; ++i) {
        const Dim& d = (*v->shape)[i];
        if (r.min[i] < 0 || r.min[i] > r.opt[i] || r.opt[i] > r.max[i]) {
          return invalid_argument("profile ", p, ": input '", name, "' needs 0 <= min <= opt <= max in dimension ", i);
        }
        if (d.known() && (r.min[i] != d.value || r.max[i] != d.value)) {
          return invalid_argument("profile ", p, ": input '", name, "' dimension ", i, " is fixed at ", d.value,
                                  " by the model, the profile gives ", r.min[i], "..", r.max[i]);
        }
      }
    }
    for (Value* in : g.inputs()) {
      if (profiles[p].inputs.count(in->name()) || !is_dynamic(*in)) continue;
      if (!in->shape) return invalid_argument("input '", in->name(), "' has unknown rank; give its shape (--shapes)");
      Dims d;
      for (const Dim& x : *in->shape) d.push_back(x.known() ? x.value : 1);
      log.log(LogSeverity::kInfo, cat("input '", in->name(), "' ", sym_shape_str(in->shape), ": no shape given, using ",
                                      dims_str(d)));
      profiles[p].inputs[in->name()] = ShapeRange{d, d, d};
    }
  }
  return Status::ok();
}

Result<std::shared_ptr<Engine>> build(ImportedModel model, const BuilderConfig& config, Logger& log) {
  const auto t_start = Clock::now();
  auto progress = [&](const char* stage, double f) {
    if (config.progress) config.progress(stage, f);
  };
  if (config.device == DeviceKind::kCUDA) {
    // Tactics are chosen (and timed) on the GPU the engine is built on.
    KILN_RETURN_IF_ERROR(cuda_device_status().with_context("building for CUDA: "));
  }
  if (config.optimization_level < 0 || config.optimization_level > 2) {
    return invalid_argument("optimization level ", config.optimization_level, " is not 0, 1 or 2");
  }
  if (config.threads < 0) return invalid_argument("thread count ", config.threads, " is negative");
  Graph& g = *model.graph;
  BuildSummary summary;
  summary.nodes_imported = g.num_nodes();
  std::vector<OptimizationProfile> profiles = config.profiles;
  KILN_RETURN_IF_ERROR(complete_profiles(g, profiles, log));
  // One profile with one shape per input: specialize before optimizing, so every shape
  // computation folds and the engine's inputs are static.
  bool fixed = profiles.size() == 1;
  for (const auto& [name, r] : profiles[0].inputs) fixed = fixed && r.min == r.max;
  if (fixed) {
    for (Value* in : g.inputs()) {
      auto it = profiles[0].inputs.find(in->name());
      if (it == profiles[0].inputs.end()) continue;
      SymShape s;
      for (int64_t x : it->second.opt) s.push_back(Dim{x, ""});
      in->shape = s;
    }
  }
  progress("optimize", 0.05);
  OptimizeOptions oo;
  oo.level = config.optimization_level;
  KILN_ASSIGN_OR_RETURN(std::vector<PassReport> reports, optimize_graph(g, oo));
  for (const PassReport& r : reports) {
    for (const PassInfo& p : optimization_pipeline()) {
      if (r.pass == p.name && p.level >= 2) summary.fusions += r.rewrites;
    }
  }
  {
    // optimize_graph runs shape inference only when level >= 1.
    PassReport r;
    PassContext ctx(r);
    KILN_RETURN_IF_ERROR(infer_shapes(g, ctx));
  }
  if (config.device == DeviceKind::kCUDA && (config.fp16 || config.bf16)) {
    PassReport r;
    PassContext ctx(r);
    KILN_RETURN_IF_ERROR(lower_float_precision(g, config.fp16 ? DataType::kFloat16 : DataType::kBFloat16, ctx)
                             .with_context("lowering precision: "));
  }
  const bool channels_last = config.conv_layout == ConvLayout::kNHWC ||
                             (config.conv_layout == ConvLayout::kAuto && (config.fp16 || config.bf16));
  if (config.device == DeviceKind::kCUDA && channels_last) {
    PassReport r;
    PassContext ctx(r);
    KILN_RETURN_IF_ERROR(convert_to_channels_last(g, ctx).with_context("converting convolutions to NHWC: "));
  }

  EngineImpl draft;
  draft.device = config.device;
  draft.arch = host_arch();
  draft.libraries = config.device == DeviceKind::kCUDA ? cuda_library_versions() : fast::library_versions();
  for (Value* v : g.inputs()) draft.inputs.push_back(describe_value(*v));
  for (Value* v : g.outputs()) draft.outputs.push_back(describe_value(*v));
  draft.profiles = profiles;
  draft.threads = config.threads;
  draft.memory_limit_bytes = config.memory_limit_bytes;
  draft.precision = {{"fp16", config.fp16}, {"bf16", config.bf16}, {"tf32", config.tf32}, {"int8", config.int8}, {"fp8", config.fp8}};
  for (Node* n : g.nodes()) {
    LayerInfo l;
    l.name = n->name();
    for (Value* o : n->outputs()) {
      if (o) {
        l.output = o->name();
        break;
      }
    }
    l.op = op_name(n->op());
    l.tactic = "reference";
    l.precision = n->output(0) ? dtype_name(n->output(0)->dtype) : "";
    draft.layers.push_back(l);
  }
  for (Value* c : g.constants()) summary.weight_bytes += c->constant().nbytes();
  summary.layers = draft.layers.size();
  draft.summary = summary;

  // Tactics: set up a context at profile 0's opt shapes; the timer picks among several.
  progress("tactics", 0.3);
  KILN_ASSIGN_OR_RETURN(std::string bytes, write_plan(engine_meta(draft), g));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Engine> first, Engine::deserialize(bytes.data(), bytes.size()));
  TimingCache cache;
  KILN_RETURN_IF_ERROR(cache.load(config.timing_cache_path));
  TacticTimer timer(cache);
  std::map<std::string, std::string> tactic_of;  // layer key -> tactic
  {
    KILN_ASSIGN_OR_RETURN(auto ctx, first->create_execution_context(0));
    for (const auto& [name, r] : profiles[0].inputs) KILN_RETURN_IF_ERROR(ctx->set_input_shape(name, r.opt));
    if (config.time_tactics) ctx->impl().chooser = &timer;
    KILN_RETURN_IF_ERROR(ctx->impl().setup().with_context("setting up the engine at the opt shapes: "));
    if (config.device == DeviceKind::kCUDA) {
      KILN_RETURN_IF_ERROR(cuda_attach_kernels(ctx->impl(), g).with_context("storing compiled kernels: "));
    }
    for (const Step& st : ctx->impl().steps) {
      for (Value* o : st.node->outputs()) {
        if (!o) continue;
        tactic_of[o->name()] = st.tactic ? st.tactic->name : st.device_tactic ? st.device_tactic
                                                                     : config.device == DeviceKind::kCUDA ? "cpu fallback"
                                                                                                          : "reference";
        break;
      }
    }
  }
  KILN_RETURN_IF_ERROR(cache.save(config.timing_cache_path));
  for (LayerInfo& l : draft.layers) {
    auto it = tactic_of.find(l.output);
    // Layers folded away once shapes are known (shape arithmetic) run at setup only.
    l.tactic = it == tactic_of.end() ? "folded at setup" : it->second;
    auto t = timer.chosen_ms.find(l.output);
    if (t != timer.chosen_ms.end()) l.time_ms = t->second;
  }

  // Memory: profile 0 at its max shapes.
  progress("plan", 0.8);
  {
    KILN_ASSIGN_OR_RETURN(auto ctx, first->create_execution_context(0));
    for (const auto& [name, r] : profiles[0].inputs) KILN_RETURN_IF_ERROR(ctx->set_input_shape(name, r.max));
    KILN_RETURN_IF_ERROR(ctx->impl().setup().with_context("planning memory at the max shapes: "));
    draft.summary.peak_activation_bytes = ctx->activation_bytes();
  }
  KILN_ASSIGN_OR_RETURN(bytes, write_plan(engine_meta(draft), g));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Engine::deserialize(bytes.data(), bytes.size()));
  auto& s = const_cast<BuildSummary&>(engine->summary());
  s.build_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  s.timing_cache_hits = timer.hits;
  s.tactics_timed = timer.timed;
  progress("done", 1.0);
  return engine;
}

}  // namespace

Result<std::shared_ptr<Engine>> Builder::build_from_file(const std::string& onnx_path, const BuilderConfig& config) {
  if (config.progress) config.progress("import", 0.0);
  KILN_ASSIGN_OR_RETURN(ImportedModel m, import_onnx_file(onnx_path));
  return build(std::move(m), config, logger_);
}

Result<std::shared_ptr<Engine>> Builder::build_from_memory(const std::string& onnx_bytes, const BuilderConfig& config,
                                                           const std::string& base_dir) {
  if (config.progress) config.progress("import", 0.0);
  KILN_ASSIGN_OR_RETURN(ImportedModel m, import_onnx_bytes(onnx_bytes, base_dir, "model"));
  return build(std::move(m), config, logger_);
}

}  // namespace kiln

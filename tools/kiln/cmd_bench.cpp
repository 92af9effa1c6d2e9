// kiln bench ENGINE|MODEL: latency percentiles and throughput of one engine, like
// trtexec. Buffers are bound once; the timed loop only calls execute().
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "runtime/engine_impl.h"

namespace kiln::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Percentile with linear interpolation between the closest ranks (numpy's default).
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double pos = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

struct LayerTime {
  std::string name, op, tactic;
  double ms;
};

}  // namespace

int cmd_bench(const BenchOptions& o) {
  if (o.iterations == 0 || o.iterations < -1) return fail(invalid_argument("--iterations must be at least 1"));
  if (o.warmup_ms < 0 || (o.duration_s < 0 && o.duration_s != -1)) {
    return fail(invalid_argument("--warmup-ms and --duration-s must not be negative"));
  }
  // Threads: a model is built with --threads; an engine built for all cores takes them
  // from OpenMP, so set the team size before the context prepares its kernels.
  const bool is_engine = is_engine_file(o.file);
  if (is_engine && o.flags.threads > 0) omp_set_num_threads(o.flags.threads);
  if (is_engine && has_build_only_flags(o.flags)) {
    std::cerr << "warning: build flags are ignored when benchmarking an engine file (only --shapes and --threads apply)\n";
  }
  bool built = false;
  auto t_build = Clock::now();
  auto engine = load_or_build(o.file, o.flags, &built);
  if (!engine) return fail(engine.status());
  const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();
  const Engine& e = **engine;
  const int threads = e.impl().threads > 0 ? e.impl().threads : omp_get_max_threads();
  if (is_engine && o.flags.threads > 0 && threads != o.flags.threads) {
    std::cerr << "warning: the engine was built for " << threads << " threads; --threads " << o.flags.threads
              << " is ignored (rebuild it to change)\n";
  }
  std::cout << "Engine: " << (built ? "built in memory from " : "") << o.file;
  if (built) std::cout << " in " << std::fixed << std::setprecision(2) << build_s << " s" << std::defaultfloat;
  std::cout << " (" << device_name(e.device()) << ", " << e.layers().size() << " layers, " << threads << " threads)\n";

  const Graph& g = engine_graph(e);
  auto shapes = parse_input_shapes(o.flags.shapes, g);
  if (!shapes) return fail(shapes.status());
  auto feeds = prepare_inputs(g, o.inputs, [&](const Value& v) { return engine_input_shape(e, v, *shapes); }, o.seed, true);
  if (!feeds) return fail(feeds.status());
  auto ctx_r = e.create_execution_context();
  if (!ctx_r) return fail(ctx_r.status());
  ExecutionContext& ctx = **ctx_r;

  // Bind inputs, then outputs with shapes known before running (data-dependent ones stay
  // in the context's memory).
  for (auto& [name, t] : *feeds) {
    if (Status s = ctx.set_input_shape(name, t.dims()); !s) return fail(s);
    if (Status s = ctx.set_tensor_address(name, t.raw()); !s) return fail(s);
  }
  std::vector<Tensor> out_buffers;
  out_buffers.reserve(e.outputs().size());
  for (const TensorDesc& d : e.outputs()) {
    auto dims = ctx.tensor_shape(d.name);
    if (!dims) return fail(dims.status());
    if (std::any_of(dims->begin(), dims->end(), [](int64_t x) { return x < 0; })) continue;
    out_buffers.emplace_back(d.dtype, *dims);
    if (Status s = ctx.set_tensor_address(d.name, out_buffers.back().raw()); !s) return fail(s);
  }
  std::cout << "Activations: " << human_bytes(ctx.activation_bytes()) << "\n";

  // Warm-up (not measured): at least one run, which also catches errors before timing.
  int warmup_runs = 0;
  const auto w0 = Clock::now();
  do {
    if (Status s = ctx.execute(); !s) return fail(s);
    ++warmup_runs;
  } while (std::chrono::duration<double, std::milli>(Clock::now() - w0).count() < o.warmup_ms);

  // Timed loop: at least `min_iters` runs and at least `min_s` seconds. --iterations
  // alone means exactly that many runs.
  const int min_iters = o.iterations > 0 ? o.iterations : 10;
  const double min_s = o.duration_s >= 0 ? o.duration_s : (o.iterations > 0 ? 0.0 : 3.0);
  std::vector<double> lat;
  const auto start = Clock::now();
  while (static_cast<int>(lat.size()) < min_iters || std::chrono::duration<double>(Clock::now() - start).count() < min_s) {
    const auto t0 = Clock::now();
    if (Status s = ctx.execute(); !s) return fail(s);
    lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> sorted = lat;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double x : lat) sum += x;
  const double mean = sum / static_cast<double>(lat.size());
  const double qps = static_cast<double>(lat.size()) / wall_s;
  const std::vector<std::pair<const char*, double>> stats = {
      {"min", sorted.front()},         {"mean", mean},
      {"median", percentile(sorted, 50)}, {"p90", percentile(sorted, 90)},
      {"p95", percentile(sorted, 95)},    {"p99", percentile(sorted, 99)},
      {"max", sorted.back()}};

  std::cout << "Warm-up: " << warmup_runs << " run(s) in " << std::fixed << std::setprecision(1)
            << std::chrono::duration<double, std::milli>(start - w0).count() << " ms\n";
  std::cout << "Timed: " << lat.size() << " iterations in " << std::setprecision(3) << wall_s << " s\n";
  std::cout << "Latency (ms):";
  for (const auto& [k, v] : stats) std::cout << "  " << k << " " << std::setprecision(4) << v;
  std::cout << "\nThroughput: " << std::setprecision(2) << qps << " qps\n" << std::defaultfloat;

  // Per-layer times in a separate pass, so the per-layer clocks don't skew the latency.
  std::vector<LayerTime> layers;
  double layers_total = 0;
  if (o.profile) {
    ctx.set_profiling(true);
    const size_t runs = std::clamp<size_t>(lat.size(), 1, 200);
    for (size_t i = 0; i < runs; ++i) {
      if (Status s = ctx.execute(); !s) return fail(s);
    }
    ctx.set_profiling(false);
    const auto times = ctx.layer_times_ms();
    const auto& steps = ctx.impl().steps;  // same order as layer_times_ms()
    for (size_t i = 0; i < times.size() && i < steps.size(); ++i) {
      const Node& n = *steps[i].node;
      std::string name = n.name();
      if (name.empty() && n.output(0)) name = n.output(0)->name();
      layers.push_back({name, op_name(n.op()), steps[i].tactic ? steps[i].tactic->name : "reference", times[i].second});
      layers_total += times[i].second;
    }
    std::stable_sort(layers.begin(), layers.end(), [](const LayerTime& a, const LayerTime& b) { return a.ms > b.ms; });
    std::cout << "Per-layer times (mean of " << runs << " profiled runs; total " << std::fixed << std::setprecision(4)
              << layers_total << " ms):\n";
    std::cout << "        ms       %  layer (op, tactic)\n";
    for (const LayerTime& l : layers) {
      const double pct = layers_total > 0 ? 100.0 * l.ms / layers_total : 0.0;
      std::cout << std::setw(10) << std::setprecision(4) << l.ms << "  " << std::setw(6) << std::setprecision(1) << pct
                << "  " << l.name << " (" << l.op << ", " << l.tactic << ")\n";
    }
    std::cout << std::defaultfloat;
  }

  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["model"] = built ? nlohmann::json(o.file) : nlohmann::json(nullptr);
    j["engine"] = built ? nlohmann::json(nullptr) : nlohmann::json(o.file);
    j["device"] = device_name(e.device());
    nlohmann::json js = nlohmann::json::object();
    for (const auto& [name, t] : *feeds) js[name] = t.dims();
    j["shapes"] = js;
    j["threads"] = threads;
    j["warmup_iterations"] = warmup_runs;
    j["iterations"] = lat.size();
    j["duration_s"] = wall_s;
    nlohmann::json jl = nlohmann::json::object();
    for (const auto& [k, v] : stats) jl[k] = v;
    j["latency_ms"] = jl;
    j["throughput_qps"] = qps;
    if (built) j["build_s"] = build_s;
    if (o.profile) {
      nlohmann::json arr = nlohmann::json::array();
      for (const LayerTime& l : layers) {
        arr.push_back({{"name", l.name}, {"op", l.op}, {"tactic", l.tactic}, {"ms", l.ms},
                       {"percent", layers_total > 0 ? 100.0 * l.ms / layers_total : 0.0}});
      }
      j["layers"] = arr;
    }
    std::ofstream f(o.json_path);
    if (!f || !(f << j.dump(2) << "\n") || !f.flush()) return fail(io_error("cannot write '", o.json_path, "'"));
    std::cout << "Wrote " << o.json_path << "\n";
  }
  return 0;
}

}  // namespace kiln::cli

#include "runtime/bench.h"
#include "runtime/cuda_hooks.h"
#include "runtime/engine_impl.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>

#include "runtime/engine_impl.h"

namespace kiln {

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

std::string human_bytes(size_t bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  if (u == 0) os << bytes << " bytes";
  else os << std::fixed << std::setprecision(1) << v << " " << units[u];
  return os.str();
}

}  // namespace

Status check_bench_options(const BenchOptions& o) {
  if (o.iterations == 0 || o.iterations < -1) return invalid_argument("iterations must be at least 1");
  if (!(o.warmup_ms >= 0) || (!(o.duration_s >= 0) && o.duration_s != -1)) {
    return invalid_argument("warm-up and duration must not be negative");
  }
  return Status::ok();
}

Result<BenchReport> benchmark(const Engine& e, const TensorMap& feeds, const BenchOptions& o) {
  KILN_RETURN_IF_ERROR(check_bench_options(o));
  auto stop = [&o] { return o.cancelled && o.cancelled(); };
  const Status interrupted = internal_error("interrupted");
  BenchReport r;
  r.device = device_name(e.device());
  r.threads = e.impl().threads > 0 ? e.impl().threads : omp_get_max_threads();
  KILN_ASSIGN_OR_RETURN(auto ctx_r, e.create_execution_context());
  ExecutionContext& ctx = *ctx_r;

  const bool cuda = e.device() == DeviceKind::kCUDA;
  // Bind inputs, then outputs with shapes known before running (data-dependent ones stay
  // in the context's memory).
  for (const TensorDesc& d : e.inputs()) {
    auto it = feeds.find(d.name);
    if (it == feeds.end()) return invalid_argument("missing input '", d.name, "'");
    const Tensor& t = it->second;
    if (t.is_sequence() || t.is_none() || t.is_string()) {
      return unsupported("input '", d.name, "': engines take plain numeric tensors, got ", t.describe());
    }
    if (t.dtype() != d.dtype) {
      return invalid_argument("input '", d.name, "': expected dtype ", dtype_name(d.dtype), ", got ", dtype_name(t.dtype()));
    }
    r.shapes[d.name] = t.dims();
    KILN_RETURN_IF_ERROR(ctx.set_input_shape(d.name, t.dims()));
    if (!cuda) KILN_RETURN_IF_ERROR(ctx.set_tensor_address(d.name, const_cast<void*>(t.raw())));  // only read
  }
  // CUDA: inputs are uploaded once into the context's device buffers; outputs stay there.
  if (cuda) {
    cuda_set_graphs(ctx.impl(), o.cuda_graphs);
    if (ctx.impl().dirty) KILN_RETURN_IF_ERROR(ctx.impl().setup());  // device memory for these shapes
    KILN_RETURN_IF_ERROR(cuda_upload_inputs(ctx.impl(), std::map<std::string, Tensor>(feeds.begin(), feeds.end())));
  }
  std::vector<Tensor> out_buffers;
  out_buffers.reserve(e.outputs().size());
  for (const TensorDesc& d : e.outputs()) {
    if (cuda) break;
    KILN_ASSIGN_OR_RETURN(Dims dims, ctx.tensor_shape(d.name));
    if (std::any_of(dims.begin(), dims.end(), [](int64_t x) { return x < 0; })) continue;
    out_buffers.emplace_back(d.dtype, dims);
    KILN_RETURN_IF_ERROR(ctx.set_tensor_address(d.name, out_buffers.back().raw()));
  }
  r.activation_bytes = ctx.activation_bytes();

  // Warm-up (not measured): at least one run, which also catches errors before timing.
  const auto w0 = Clock::now();
  do {
    KILN_RETURN_IF_ERROR(ctx.execute());
    ++r.warmup_iterations;
    if (stop()) return interrupted;
  } while (std::chrono::duration<double, std::milli>(Clock::now() - w0).count() < o.warmup_ms);

  // Timed loop: at least `min_iters` runs and at least `min_s` seconds. iterations alone
  // means exactly that many runs.
  const int min_iters = o.iterations > 0 ? o.iterations : 10;
  const double min_s = o.duration_s >= 0 ? o.duration_s : (o.iterations > 0 ? 0.0 : 3.0);
  std::vector<double> lat, gpu;
  const auto start = Clock::now();
  r.warmup_ms = std::chrono::duration<double, std::milli>(start - w0).count();
  while (static_cast<int>(lat.size()) < min_iters || std::chrono::duration<double>(Clock::now() - start).count() < min_s) {
    const auto t0 = Clock::now();
    KILN_RETURN_IF_ERROR(ctx.execute());
    lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (cuda) gpu.push_back(cuda_last_gpu_ms(ctx.impl()));
    if (stop()) return interrupted;
  }
  r.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.iterations = static_cast<int64_t>(lat.size());
  std::vector<double> sorted = lat;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double x : lat) sum += x;
  r.latency_ms = {{"min", sorted.front()},         {"mean", sum / static_cast<double>(lat.size())},
                  {"median", percentile(sorted, 50)}, {"p90", percentile(sorted, 90)},
                  {"p95", percentile(sorted, 95)},    {"p99", percentile(sorted, 99)},
                  {"max", sorted.back()}};
  r.throughput_qps = static_cast<double>(lat.size()) / r.duration_s;
  r.cuda_host_mode = cuda && ctx.impl().host_mode;
  if (r.cuda_host_mode) r.cpu_fallback_layers = cuda_fallback_layers(ctx.impl());
  if (cuda && !r.cuda_host_mode) {
    std::sort(gpu.begin(), gpu.end());
    r.gpu_compute_ms = percentile(gpu, 50);
    r.cuda_graph = cuda_uses_graph(ctx.impl());
    r.cpu_fallback_layers = cuda_fallback_layers(ctx.impl());
    // Transfers, timed apart from compute: the inputs up, the outputs down.
    const std::map<std::string, Tensor> host(feeds.begin(), feeds.end());
    std::vector<double> up, down;
    for (int i = 0; i < 20; ++i) {
      auto t0 = Clock::now();
      KILN_RETURN_IF_ERROR(cuda_upload_inputs(ctx.impl(), host));
      up.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      t0 = Clock::now();
      for (const TensorDesc& d : e.outputs()) KILN_RETURN_IF_ERROR(cuda_download(ctx.impl(), d.name).status());
      down.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(up.begin(), up.end());
    std::sort(down.begin(), down.end());
    r.h2d_ms = percentile(up, 50);
    r.d2h_ms = percentile(down, 50);
  }

  // Per-layer times in a separate pass, so the per-layer clocks don't skew the latency.
  if (o.profile) {
    r.profiled = true;
    ctx.set_profiling(true);
    r.profiled_runs = static_cast<int>(std::clamp<size_t>(lat.size(), 1, 200));
    for (int i = 0; i < r.profiled_runs; ++i) {
      KILN_RETURN_IF_ERROR(ctx.execute());
      if (stop()) return interrupted;
    }
    ctx.set_profiling(false);
    const auto times = ctx.layer_times_ms();
    const auto& steps = ctx.impl().steps;  // same order as layer_times_ms()
    for (size_t i = 0; i < times.size() && i < steps.size(); ++i) {
      const Node& n = *steps[i].node;
      std::string name = n.name();
      if (name.empty() && n.output(0)) name = n.output(0)->name();
      const char* tactic = steps[i].tactic ? steps[i].tactic->name
                           : steps[i].device_tactic ? steps[i].device_tactic
                           : cuda ? "cpu fallback" : "reference";
      r.layers.push_back({name, op_name(n.op()), tactic, times[i].second});
      r.layers_total_ms += times[i].second;
    }
    std::stable_sort(r.layers.begin(), r.layers.end(),
                     [](const BenchLayerTime& a, const BenchLayerTime& b) { return a.ms > b.ms; });
  }
  return r;
}

nlohmann::json bench_report_json(const BenchReport& r) {
  nlohmann::json j;
  j["device"] = r.device;
  nlohmann::json js = nlohmann::json::object();
  for (const auto& [name, d] : r.shapes) js[name] = d;
  j["shapes"] = js;
  j["threads"] = r.threads;
  j["warmup_iterations"] = r.warmup_iterations;
  j["iterations"] = r.iterations;
  j["duration_s"] = r.duration_s;
  nlohmann::json jl = nlohmann::json::object();
  for (const auto& [k, v] : r.latency_ms) jl[k] = v;
  j["latency_ms"] = jl;
  j["throughput_qps"] = r.throughput_qps;
  if (r.gpu_compute_ms >= 0) {
    j["h2d_ms"] = r.h2d_ms;
    j["gpu_compute_ms"] = r.gpu_compute_ms;
    j["d2h_ms"] = r.d2h_ms;
    j["cuda_graph"] = r.cuda_graph;
    j["cpu_fallback_layers"] = r.cpu_fallback_layers;
    j["cuda_host_mode"] = false;
  } else if (r.cuda_host_mode) {
    j["cuda_graph"] = false;
    j["cpu_fallback_layers"] = r.cpu_fallback_layers;
    j["cuda_host_mode"] = true;
  }
  if (r.profiled) {
    nlohmann::json arr = nlohmann::json::array();
    for (const BenchLayerTime& l : r.layers) {
      arr.push_back({{"name", l.name}, {"op", l.op}, {"tactic", l.tactic}, {"ms", l.ms},
                     {"percent", r.layers_total_ms > 0 ? 100.0 * l.ms / r.layers_total_ms : 0.0}});
    }
    j["layers"] = arr;
  }
  return j;
}

std::string format_bench_report(const BenchReport& r) {
  std::ostringstream os;
  os << "Activations: " << human_bytes(r.activation_bytes) << "\n";
  os << "Warm-up: " << r.warmup_iterations << " run(s) in " << std::fixed << std::setprecision(1) << r.warmup_ms << " ms\n";
  os << "Timed: " << r.iterations << " iterations in " << std::setprecision(3) << r.duration_s << " s\n";
  os << "Latency (ms):";
  for (const auto& [k, v] : r.latency_ms) os << "  " << k << " " << std::setprecision(4) << v;
  os << "\nThroughput: " << std::setprecision(2) << r.throughput_qps << " qps\n" << std::defaultfloat;
  if (r.gpu_compute_ms >= 0) {
    os << std::fixed << std::setprecision(4) << "GPU (medians, ms): H2D " << r.h2d_ms << "  compute " << r.gpu_compute_ms
       << "  D2H " << r.d2h_ms << "  (CUDA graph " << (r.cuda_graph ? "on" : "off") << ", " << r.cpu_fallback_layers
       << " layer(s) on the CPU)\n" << std::defaultfloat;
  } else if (r.cuda_host_mode) {
    os << "GPU: not used: host mode, all " << r.cpu_fallback_layers << " layer(s) ran on the CPU (a data-dependent "
       << "shape; see the warning above)\n";
  }
  if (r.profiled) {
    os << "Per-layer times (mean of " << r.profiled_runs << " profiled runs; total " << std::fixed << std::setprecision(4)
       << r.layers_total_ms << " ms):\n";
    os << "        ms       %  layer (op, tactic)\n";
    for (const BenchLayerTime& l : r.layers) {
      const double pct = r.layers_total_ms > 0 ? 100.0 * l.ms / r.layers_total_ms : 0.0;
      os << std::setw(10) << std::setprecision(4) << l.ms << "  " << std::setw(6) << std::setprecision(1) << pct << "  "
         << l.name << " (" << l.op << ", " << l.tactic << ")\n";
    }
    os << std::defaultfloat;
  }
  return os.str();
}

}  // namespace kiln

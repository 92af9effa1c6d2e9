// Engine benchmarking, the computation behind `kiln bench` and Engine.bench() in Python:
// latency percentiles and throughput of one engine on fixed inputs, like trtexec.
// Buffers are bound once; the timed loop only calls execute().
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "runtime/interpreter.h"

namespace kiln {

struct BenchOptions {
  double warmup_ms = 200;   // warm-up time before measuring (at least one run)
  double duration_s = -1;   // -1: 3 s unless iterations is given
  int iterations = -1;      // -1: at least 10
  bool profile = false;     // also time each layer, in a separate pass
  bool cuda_graphs = true;  // CUDA engines: replay the enqueue as a CUDA graph
  // Polled between runs; returning true stops with a kInternal status "interrupted".
  std::function<bool()> cancelled;
};

struct BenchLayerTime {
  std::string name, op, tactic;
  double ms = 0;
};

struct BenchReport {
  std::string device;
  std::map<std::string, Dims> shapes;  // the input shapes run
  int threads = 0;
  size_t activation_bytes = 0;
  int warmup_iterations = 0;
  double warmup_ms = 0;
  int64_t iterations = 0;
  double duration_s = 0;
  // min, mean, median, p90, p95, p99, max (milliseconds), in that order.
  std::vector<std::pair<std::string, double>> latency_ms;
  double throughput_qps = 0;
  // CUDA engines (like trtexec): medians of the input upload from pinned host memory, of
  // the GPU compute time (CUDA events around the enqueue) and of the output download.
  // -1 for CPU engines. latency_ms is the host's view: enqueue, compute and synchronize.
  double h2d_ms = -1, gpu_compute_ms = -1, d2h_ms = -1;
  bool cuda_graph = false;
  int cpu_fallback_layers = 0;
  // A CUDA engine whose context runs every layer on the CPU (a data-dependent shape, see
  // ContextImpl::host_mode): no GPU compute or transfer times then.
  bool cuda_host_mode = false;
  bool profiled = false;
  int profiled_runs = 0;
  double layers_total_ms = 0;
  std::vector<BenchLayerTime> layers;  // slowest first
};

// Checks the options the way `kiln bench` does (iterations >= 1, no negative times).
Status check_bench_options(const BenchOptions& o);

// Runs the engine on `feeds` (one tensor per engine input).
Result<BenchReport> benchmark(const Engine& engine, const TensorMap& feeds, const BenchOptions& options);

// `kiln bench --json` minus the keys only the caller knows (model/engine path, build_s):
// device, shapes, threads, warmup_iterations, iterations, duration_s, latency_ms,
// throughput_qps and, when profiled, layers.
nlohmann::json bench_report_json(const BenchReport& r);

// The report as `kiln bench` prints it, from "Activations:" to the per-layer table.
std::string format_bench_report(const BenchReport& r);

}  // namespace kiln

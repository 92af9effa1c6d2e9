// kiln bench ENGINE|MODEL: latency percentiles and throughput of one engine, like
// trtexec. The measurement is runtime/bench.h; this front end loads or builds the
// engine, prepares the inputs and prints or writes the report.
#include <omp.h>

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "commands.h"
#include "runtime/bench.h"
#include "runtime/engine_impl.h"

namespace kiln::cli {

int cmd_bench(const BenchArgs& a) {
  kiln::BenchOptions options;
  options.warmup_ms = a.warmup_ms;
  options.duration_s = a.duration_s;
  options.iterations = a.iterations;
  options.profile = a.profile;
  options.cuda_graphs = !a.no_cuda_graph;
  if (a.iterations == 0 || a.iterations < -1) return fail(invalid_argument("--iterations must be at least 1"));
  if (Status s = check_bench_options(options); !s) {
    return fail(invalid_argument("--warmup-ms and --duration-s must not be negative"));
  }
  // Threads: a model is built with --threads; an engine built for all cores takes them
  // from OpenMP, so set the team size before the context prepares its kernels.
  const bool is_engine = is_engine_file(a.file);
  if (is_engine && a.flags.threads > 0) omp_set_num_threads(a.flags.threads);
  if (is_engine && has_build_only_flags(a.flags)) {
    std::cerr << "warning: build flags are ignored when benchmarking an engine file (only --shapes and --threads apply)\n";
  }
  bool built = false;
  const auto t_build = std::chrono::steady_clock::now();
  auto engine = load_or_build(a.file, a.flags, &built);
  if (!engine) return fail(engine.status());
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build).count();
  const Engine& e = **engine;
  const int threads = e.impl().threads > 0 ? e.impl().threads : omp_get_max_threads();
  if (is_engine && a.flags.threads > 0 && threads != a.flags.threads) {
    std::cerr << "warning: the engine was built for " << threads << " threads; --threads " << a.flags.threads
              << " is ignored (rebuild it to change)\n";
  }
  std::cout << "Engine: " << (built ? "built in memory from " : "") << a.file;
  if (built) std::cout << " in " << std::fixed << std::setprecision(2) << build_s << " s" << std::defaultfloat;
  std::cout << " (" << device_name(e.device()) << ", " << e.layers().size() << " layers, " << threads << " threads)\n";

  const Graph& g = engine_graph(e);
  auto shapes = parse_input_shapes(a.flags.shapes, g);
  if (!shapes) return fail(shapes.status());
  auto feeds = prepare_inputs(g, a.inputs, [&](const Value& v) { return engine_run_shape(e, v, *shapes); }, a.seed);
  if (!feeds) return fail(feeds.status());
  for (const auto& [name, t] : *feeds) {
    if (!g.find_value(name) || g.find_value(name)->kind() != Value::Kind::kGraphInput) {
      return fail(invalid_argument("unknown input '", name, "'"));
    }
  }
  auto report = benchmark(e, *feeds, options);
  if (!report) return fail(report.status());
  std::cout << format_bench_report(*report);

  if (!a.json_path.empty()) {
    nlohmann::json j = bench_report_json(*report);
    j["model"] = built ? nlohmann::json(a.file) : nlohmann::json(nullptr);
    j["engine"] = built ? nlohmann::json(nullptr) : nlohmann::json(a.file);
    if (built) j["build_s"] = build_s;
    std::ofstream f(a.json_path);
    if (!f || !(f << j.dump(2) << "\n") || !f.flush()) return fail(io_error("cannot write '", a.json_path, "'"));
    std::cout << "Wrote " << a.json_path << "\n";
  }
  return 0;
}

}  // namespace kiln::cli

// The kiln command-line tool (docs/cli.md): build, run, bench, compare, inspect, ops.
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app{"kiln: an ONNX inference optimizer and runtime"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--verbose) may follow the subcommand
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Show the builder's info messages");

  InspectArgs inspect_opts;
  auto* inspect = app.add_subcommand("inspect", "Print a model's graph, or an engine's layers, tactics and memory plan");
  inspect->add_option("file", inspect_opts.file, "ONNX model or kiln engine file")->required();
  inspect->add_flag("--optimized", inspect_opts.optimized, "Model: optimize the graph first and print what each pass did");
  inspect->add_option("--export", inspect_opts.export_path,
                      "Write the (optimized) graph as ONNX; fused ops use the 'kiln' domain");

  auto* ops = app.add_subcommand("ops", "Print kiln's op table (JSON lines): arity, attributes, backends");

  RunArgs run_opts;
  auto* run = app.add_subcommand("run", "Run a model (reference backend) or an engine once and print its outputs");
  run->add_option("file", run_opts.file, "ONNX model or kiln engine file")->required();
  run->add_option("--input,-i", run_opts.inputs, "NAME=FILE (.npy or TensorProto .pb); repeatable");
  run->add_option("--output-dir,-o", run_opts.output_dir, "Write each output to DIR/<name>.npy");
  run->add_option("--shapes", run_opts.shapes, "Shapes for random inputs: NAME:1x3x224x224,...");
  run->add_option("--seed", run_opts.seed, "Seed for random inputs (default 0)");
  run->add_flag("--optimize", run_opts.optimize, "Model: run the optimized graph instead of the imported one");

  BuildArgs build_opts;
  auto* build = app.add_subcommand("build", "Build an engine from a model and save it");
  build->add_option("model", build_opts.model, "ONNX model file")->required();
  build->add_option("-o,--output", build_opts.output, "Engine file to write")->required();
  add_build_flags(build, build_opts.flags);

  BenchArgs bench_opts;
  auto* bench = app.add_subcommand("bench", "Measure an engine's latency and throughput (a model is built first)");
  bench->add_option("file", bench_opts.file, "kiln engine or ONNX model file")->required();
  bench->add_option("--shapes", bench_opts.flags.shapes, "Input shapes to run (and, for a model, to build for)");
  add_build_flags(bench, bench_opts.flags, false);
  bench->add_option("--input,-i", bench_opts.inputs, "NAME=FILE (.npy or TensorProto .pb); repeatable");
  bench->add_option("--seed", bench_opts.seed, "Seed for random inputs (default 0)");
  bench->add_option("--warmup-ms", bench_opts.warmup_ms, "Warm-up time before measuring (default 200)");
  bench->add_option("--duration-s", bench_opts.duration_s, "Measure for at least this long (default 3, or 0 with --iterations)");
  bench->add_option("--iterations", bench_opts.iterations, "Measure at least this many runs (default 10)");
  bench->add_flag("--profile", bench_opts.profile, "Also time each layer (in a separate pass)");
  bench->add_flag("--no-cuda-graph", bench_opts.no_cuda_graph, "CUDA engines: launch layer by layer instead of replaying a CUDA graph");
  bench->add_option("--json", bench_opts.json_path, "Write the results as JSON to FILE");

  CompareArgs cmp_opts;
  auto* compare = app.add_subcommand("compare", "Compare an engine against the original model on the reference backend");
  compare->add_option("model", cmp_opts.model, "ONNX model file (the reference)")->required();
  compare->add_option("--engine", cmp_opts.engine, "Engine file to check (default: build one in memory with the build flags)");
  compare->add_option("--input,-i", cmp_opts.inputs, "NAME=FILE (.npy or TensorProto .pb); repeatable");
  compare->add_option("--shapes", cmp_opts.flags.shapes, "Shapes of random inputs (and of an in-memory build)");
  compare->add_option("--seed", cmp_opts.seed, "Seed for random inputs (default 0)");
  compare->add_option("--atol", cmp_opts.atol, "Absolute tolerance (default 1e-4)");
  compare->add_option("--rtol", cmp_opts.rtol, "Relative tolerance (default 1e-3)");
  compare->add_flag("--layerwise", cmp_opts.layerwise, "Compare every layer output with a same-named model value");
  add_build_flags(compare, cmp_opts.flags, false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  set_verbose(verbose);
  if (*inspect) return cmd_inspect(inspect_opts);
  if (*run) return cmd_run(run_opts);
  if (*ops) return cmd_ops();
  if (*build) return cmd_build(build_opts);
  if (*bench) return cmd_bench(bench_opts);
  if (*compare) return cmd_compare(cmp_opts);
  return 1;
}

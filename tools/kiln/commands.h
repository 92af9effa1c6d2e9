// The `kiln` subcommands: their arguments (filled by CLI11 in main.cpp) and entry points.
// Each returns the process exit code. The computations behind bench and compare live in
// the library (runtime/bench.h, runtime/compare.h), shared with the Python module.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli_common.h"

namespace kiln::cli {

// kiln inspect MODEL|ENGINE
struct InspectArgs {
  std::string file;
  bool optimized = false;
  std::string export_path;
};
int cmd_inspect(const InspectArgs& a);

// kiln ops
int cmd_ops();

// kiln run MODEL|ENGINE
struct RunArgs {
  std::string file;
  std::vector<std::string> inputs;
  std::string output_dir;
  std::string shapes;
  uint64_t seed = 0;
  bool optimize = false;
};
int cmd_run(const RunArgs& a);

// kiln build MODEL -o ENGINE
struct BuildArgs {
  std::string model;
  std::string output;
  BuildFlags flags;
};
int cmd_build(const BuildArgs& a);

// kiln bench ENGINE|MODEL
struct BenchArgs {
  std::string file;
  BuildFlags flags;  // when `file` is a model; flags.shapes are also the run shapes
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  double warmup_ms = 200;
  double duration_s = -1;  // -1: 3 s unless --iterations is given
  int iterations = -1;     // -1: at least 10
  bool profile = false;
  bool no_cuda_graph = false;
  std::string json_path;
};
int cmd_bench(const BenchArgs& a);

// kiln compare MODEL [--engine ENGINE]
struct CompareArgs {
  std::string model;
  std::string engine;  // "": build one in memory from the model with `flags`
  BuildFlags flags;    // flags.shapes are also the shapes of random inputs
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  double atol = 1e-4;
  double rtol = 1e-3;
  bool layerwise = false;
};
int cmd_compare(const CompareArgs& a);

}  // namespace kiln::cli

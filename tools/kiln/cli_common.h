// Pieces the `kiln` subcommands share: error reporting, engine detection, build flags,
// input preparation and output summaries.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "runtime/engine_inputs.h"
#include "runtime/interpreter.h"

namespace kiln::cli {

// Prints "error: <message>" to stderr and returns the exit code 1.
int fail(const Status& s);

// True when the file starts with the plan magic "KILNPLAN" (otherwise: an ONNX model).
bool is_engine_file(const std::string& path);

std::string human_bytes(size_t bytes);  // "5.6 KiB"

// Flags that configure a build: `kiln build` and the commands that build an engine in
// memory from a model (bench, compare).
struct BuildFlags {
  std::string device = "cpu";
  std::string shapes;  // NAME:DIMS,... one fixed shape per input
  std::string min_shapes, opt_shapes, max_shapes;
  int threads = 0;
  std::string timing_cache;
  bool fp16 = false, bf16 = false, tf32 = false, int8 = false;
  int opt_level = 2;
  std::string conv_layout = "auto";  // auto | nchw | nhwc (CUDA engines)
};
// Adds the flags to a subcommand. `with_shapes` false: the command defines --shapes
// itself (bench uses it for the run shapes too).
void add_build_flags(CLI::App* cmd, BuildFlags& f, bool with_shapes = true);
Result<BuilderConfig> make_build_config(const BuildFlags& f);
// True when a flag other than --shapes and --threads differs from its default (such
// flags mean nothing for a command given an engine file).
bool has_build_only_flags(const BuildFlags& f);

// The builder logger: warnings and errors, plus info with --verbose.
Logger& cli_logger();
void set_verbose(bool verbose);

// Builds an engine from a model, drawing a progress bar on stderr when it is a terminal.
Result<std::shared_ptr<Engine>> build_engine(const std::string& model_path, BuilderConfig config);

// Loads an engine file, or builds one in memory when `path` is an ONNX model.
// `built_in_memory` tells which happened.
Result<std::shared_ptr<Engine>> load_or_build(const std::string& path, const BuildFlags& flags, bool* built_in_memory);

// Parses --shapes and checks every name is one of the graph's inputs.
Result<std::map<std::string, Dims>> parse_input_shapes(const std::string& spec, const Graph& g);

// Inputs for every input of `g`: files from --input NAME=FILE specs, random tensors for
// the rest (runtime/engine_inputs.h: shape from shape_of; seed + 1, + 2, ... in input
// order), each announced as "input NAME: random float32[...]".
Result<TensorMap> prepare_inputs(const Graph& g, const std::vector<std::string>& input_specs,
                                 const std::function<Result<Dims>(const Value&)>& shape_of, uint64_t seed);

// "  name: float32[1,10]  min ..  max ..  mean .." (NaN count when present).
void print_tensor_summary(const std::string& name, const Tensor& t);

// Output file name for a value name: characters outside [A-Za-z0-9._-] become '_'.
std::string sanitize_name(const std::string& name);

// Layers the optimizer created (fused ops, kiln-domain ops) as "FusedConv x2, ...".
std::string fused_ops_summary(const Engine& e);

}  // namespace kiln::cli

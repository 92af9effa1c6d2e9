// The kiln command-line tool.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "backends/cpu/reference/kernel.h"
#include "ir/printer.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/tensor_io.h"
#include "passes/pass.h"
#include "runtime/inputs.h"
#include "runtime/interpreter.h"

namespace {

using namespace kiln;

int fail(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return 1;
}

std::string sanitize_name(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

void print_summary(const std::string& name, const Tensor& t) {
  std::cout << "  " << name << ": " << dtype_name(t.dtype()) << dims_str(t.dims());
  int64_t n = t.size();
  if (n > 0) {
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t nan = 0;
    for (int64_t i = 0; i < n; ++i) {
      double v = t.get_double(i);
      if (std::isnan(v)) { ++nan; continue; }
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      sum += v;
    }
    std::cout << std::setprecision(6) << "  min " << mn << "  max " << mx << "  mean " << sum / static_cast<double>(n - nan == 0 ? 1 : n - nan);
    if (nan) std::cout << "  NaN " << nan;
  }
  std::cout << "\n";
}

int cmd_inspect(const std::string& model_path, bool optimized, const std::string& export_path) {
  auto t0 = std::chrono::steady_clock::now();
  auto model = import_onnx_file(model_path);
  if (!model) return fail(model.status());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "Model: " << model_path << "\n";
  std::cout << "IR version " << model->ir_version << ", opset " << model->opset;
  if (!model->producer.empty()) std::cout << ", producer " << model->producer;
  std::cout << ", imported in " << std::fixed << std::setprecision(1) << ms << " ms\n" << std::defaultfloat;
  if (optimized) {
    size_t before = model->graph->num_nodes();
    auto t1 = std::chrono::steady_clock::now();
    auto reports = optimize_graph(*model->graph);
    if (!reports) return fail(reports.status());
    double opt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    std::cout << "Optimizer: " << before << " -> " << model->graph->num_nodes() << " nodes in " << std::fixed
              << std::setprecision(1) << opt_ms << " ms\n" << std::defaultfloat;
    for (const PassReport& r : *reports) {
      std::cout << "  " << r.pass << ": " << r.rewrites << " rewrite(s), " << r.nodes_before << " -> " << r.nodes_after
                << " nodes\n";
      for (const std::string& note : r.notes) std::cout << "    " << note << "\n";
    }
  }
  if (!export_path.empty()) {
    if (Status s = export_onnx_file(*model->graph, export_path); !s) return fail(s);
    std::cout << "Exported the " << (optimized ? "optimized " : "") << "graph to " << export_path << "\n";
  }
  print_graph_summary(*model->graph, std::cout);
  std::cout << "Nodes:\n";
  print_nodes(*model->graph, std::cout);
  return 0;
}

// Prints the op table as JSON lines (one op per line), for docs/operators.md generation.
int cmd_ops() {
  const KernelRegistry& ref = reference_kernels();
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<Op>(i));
    std::cout << "{\"op\": \"" << info.name << "\", \"min_inputs\": " << info.min_inputs
              << ", \"max_inputs\": " << info.max_inputs << ", \"min_outputs\": " << info.min_outputs
              << ", \"max_outputs\": " << info.max_outputs << ", \"attributes\": \"" << info.attr_spec
              << "\", \"elementwise\": " << (op_has_flag(info.op, kElementwise) ? "true" : "false")
              << ", \"strings\": " << (op_has_flag(info.op, kStrings) ? "true" : "false")
              << ", \"backends\": [" << (ref.find(info.op) ? "\"cpu-reference\"" : "") << "]}\n";
  }
  for (const auto& [onnx_name, kiln_op] : onnx_op_aliases()) {
    std::cout << "{\"alias\": \"" << onnx_name << "\", \"op\": \"" << kiln_op << "\"}\n";
  }
  return 0;
}

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;
  std::string output_dir;
  std::string shapes;
  uint64_t seed = 0;
  bool optimize = false;
};

int cmd_run(const RunOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  auto model = import_onnx_file(o.model);
  if (!model) return fail(model.status());
  if (o.optimize) {
    auto reports = optimize_graph(*model->graph);
    if (!reports) return fail(reports.status());
  }
  const Graph& g = *model->graph;
  double import_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::map<std::string, Dims> shapes;
  if (Status s = parse_shape_list(o.shapes, &shapes); !s) return fail(s);
  TensorMap feeds;
  for (const std::string& spec : o.inputs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) return fail(invalid_argument("bad --input '", spec, "': expected NAME=FILE"));
    std::string name = spec.substr(0, eq);
    auto t = read_tensor_file(spec.substr(eq + 1));
    if (!t) return fail(t.status().with_context(cat("input '", name, "': ")));
    feeds[name] = std::move(t).value();
  }
  uint64_t seed = o.seed;
  for (Value* v : g.inputs()) {
    ++seed;
    if (feeds.count(v->name())) continue;
    auto dims = concrete_input_shape(*v, shapes);
    if (!dims) return fail(dims.status());
    feeds[v->name()] = random_input(g, *v, *dims, seed);
    std::cout << "input " << v->name() << ": random " << dtype_name(feeds[v->name()].dtype()) << dims_str(*dims) << "\n";
  }
  Interpreter interp(g);
  auto t1 = std::chrono::steady_clock::now();
  auto outs = interp.run(feeds);
  double run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  if (!outs) return fail(outs.status());
  std::cout << "Outputs:\n";
  if (!o.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.output_dir, ec);
    if (ec) return fail(io_error("cannot create output folder '", o.output_dir, "': ", ec.message()));
  }
  for (size_t i = 0; i < outs->size(); ++i) {
    const std::string& name = g.outputs()[i]->name();
    print_summary(name, (*outs)[i]);
    if (!o.output_dir.empty()) {
      std::string path = (std::filesystem::path(o.output_dir) / (sanitize_name(name) + ".npy")).string();
      if (Status s = write_npy((*outs)[i], path); !s) return fail(s);
    }
  }
  std::cout << std::fixed << std::setprecision(3) << "Import " << import_ms << " ms, run " << run_ms
            << " ms (reference backend, " << g.num_nodes() << " nodes)\n";
  if (!o.output_dir.empty()) std::cout << "Wrote " << outs->size() << " output(s) to " << o.output_dir << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: an ONNX inference optimizer and runtime"};
  app.require_subcommand(1);

  std::string inspect_model;
  bool inspect_optimized = false;
  auto* inspect = app.add_subcommand("inspect", "Print a model's inputs, outputs, op histogram and nodes");
  inspect->add_option("model", inspect_model, "ONNX model file")->required();
  inspect->add_flag("--optimized", inspect_optimized, "Optimize the graph first and print what each pass did");
  std::string inspect_export;
  inspect->add_option("--export", inspect_export,
                      "Write the (optimized) graph as ONNX; fused ops use the 'kiln' domain");

  auto* ops = app.add_subcommand("ops", "Print kiln's op table (JSON lines): arity, attributes, backends");

  RunOptions run_opts;
  auto* run = app.add_subcommand("run", "Run a model once and print (and save) its outputs");
  run->add_option("model", run_opts.model, "ONNX model file")->required();
  run->add_option("--input,-i", run_opts.inputs, "NAME=FILE (.npy or TensorProto .pb); repeatable");
  run->add_option("--output-dir,-o", run_opts.output_dir, "Write each output to DIR/<name>.npy");
  run->add_option("--shapes", run_opts.shapes, "Shapes for random inputs: NAME:1x3x224x224,...");
  run->add_option("--seed", run_opts.seed, "Seed for random inputs (default 0)");
  run->add_flag("--optimize", run_opts.optimize, "Run the optimized graph instead of the imported one");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (*inspect) return cmd_inspect(inspect_model, inspect_optimized, inspect_export);
  if (*run) return cmd_run(run_opts);
  if (*ops) return cmd_ops();
  return 1;
}

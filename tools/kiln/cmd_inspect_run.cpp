// kiln inspect, kiln ops, kiln run: for ONNX models (reference interpreter) and engines.
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "backends/cpu/reference/kernel.h"
#include "commands.h"
#include "ir/printer.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/tensor_io.h"
#include "passes/pass.h"
#include "runtime/inputs.h"

namespace kiln::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

int inspect_engine(const InspectArgs& o) {
  if (o.optimized) return fail(invalid_argument("--optimized applies to models; an engine is optimized already"));
  auto engine = Engine::load(o.file);
  if (!engine) return fail(engine.status());
  const Engine& e = **engine;
  const BuildSummary& s = e.summary();
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(o.file, ec);
  std::cout << "Engine: " << o.file << " (" << human_bytes(ec ? 0 : file_size) << ")\n";
  std::cout << "Layers: " << s.layers << " (" << s.nodes_imported << " nodes imported, " << s.fusions << " fusions)\n";
  std::cout << "Fused ops: " << fused_ops_summary(e) << "\n";
  std::cout << "Memory: weights " << human_bytes(s.weight_bytes) << ", activations " << human_bytes(s.peak_activation_bytes)
            << " (profile 0 at its max shapes)\n";
  std::cout << e.describe();
  if (!o.export_path.empty()) {
    if (Status st = export_onnx_file(engine_graph(e), o.export_path); !st) return fail(st);
    std::cout << "Exported the engine's graph to " << o.export_path << "\n";
  }
  return 0;
}

int inspect_model(const InspectArgs& o) {
  auto t0 = Clock::now();
  auto model = import_onnx_file(o.file);
  if (!model) return fail(model.status());
  double ms = ms_since(t0);
  std::cout << "Model: " << o.file << "\n";
  std::cout << "IR version " << model->ir_version << ", opset " << model->opset;
  if (!model->producer.empty()) std::cout << ", producer " << model->producer;
  std::cout << ", imported in " << std::fixed << std::setprecision(1) << ms << " ms\n" << std::defaultfloat;
  if (o.optimized) {
    size_t before = model->graph->num_nodes();
    auto t1 = Clock::now();
    auto reports = optimize_graph(*model->graph);
    if (!reports) return fail(reports.status());
    double opt_ms = ms_since(t1);
    std::cout << "Optimizer: " << before << " -> " << model->graph->num_nodes() << " nodes in " << std::fixed
              << std::setprecision(1) << opt_ms << " ms\n" << std::defaultfloat;
    for (const PassReport& r : *reports) {
      std::cout << "  " << r.pass << ": " << r.rewrites << " rewrite(s), " << r.nodes_before << " -> " << r.nodes_after
                << " nodes\n";
      for (const std::string& note : r.notes) std::cout << "    " << note << "\n";
    }
  }
  if (!o.export_path.empty()) {
    if (Status s = export_onnx_file(*model->graph, o.export_path); !s) return fail(s);
    std::cout << "Exported the " << (o.optimized ? "optimized " : "") << "graph to " << o.export_path << "\n";
  }
  print_graph_summary(*model->graph, std::cout);
  std::cout << "Nodes:\n";
  print_nodes(*model->graph, std::cout);
  return 0;
}

// Prints each output's summary and writes DIR/<name>.npy when an output folder is given.
int report_outputs(const std::vector<std::pair<std::string, Tensor>>& outs, const std::string& dir) {
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return fail(io_error("cannot create output folder '", dir, "': ", ec.message()));
  }
  std::cout << "Outputs:\n";
  for (const auto& [name, t] : outs) {
    print_tensor_summary(name, t);
    if (!dir.empty()) {
      std::string path = (std::filesystem::path(dir) / (sanitize_name(name) + ".npy")).string();
      if (Status s = write_npy(t, path); !s) return fail(s);
    }
  }
  return 0;
}

int run_engine(const RunArgs& o) {
  auto t0 = Clock::now();
  auto engine = Engine::load(o.file);
  if (!engine) return fail(engine.status());
  const Engine& e = **engine;
  const double load_ms = ms_since(t0);
  const Graph& g = engine_graph(e);
  auto shapes = parse_input_shapes(o.shapes, g);
  if (!shapes) return fail(shapes.status());
  auto feeds = prepare_inputs(g, o.inputs, [&](const Value& v) { return engine_run_shape(e, v, *shapes); }, o.seed);
  if (!feeds) return fail(feeds.status());
  auto ctx = e.create_execution_context();
  if (!ctx) return fail(ctx.status());
  auto t1 = Clock::now();
  auto outs = ctx.value()->run(*feeds);
  const double run_ms = ms_since(t1);
  if (!outs) return fail(outs.status());
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const TensorDesc& d : e.outputs()) ordered.emplace_back(d.name, outs->at(d.name));
  if (int rc = report_outputs(ordered, o.output_dir)) return rc;
  std::cout << std::fixed << std::setprecision(3) << "Load " << load_ms << " ms, run " << run_ms << " ms (engine, "
            << device_name(e.device()) << ", " << e.layers().size() << " layers)\n";
  if (!o.output_dir.empty()) std::cout << "Wrote " << ordered.size() << " output(s) to " << o.output_dir << "\n";
  return 0;
}

int run_model(const RunArgs& o) {
  auto t0 = Clock::now();
  auto model = import_onnx_file(o.file);
  if (!model) return fail(model.status());
  if (o.optimize) {
    auto reports = optimize_graph(*model->graph);
    if (!reports) return fail(reports.status());
  }
  const Graph& g = *model->graph;
  const double import_ms = ms_since(t0);
  auto shapes = parse_input_shapes(o.shapes, g);
  if (!shapes) return fail(shapes.status());
  auto feeds = prepare_inputs(g, o.inputs, [&](const Value& v) { return concrete_input_shape(v, *shapes); }, o.seed);
  if (!feeds) return fail(feeds.status());
  Interpreter interp(g);
  auto t1 = Clock::now();
  auto outs = interp.run(*feeds);
  const double run_ms = ms_since(t1);
  if (!outs) return fail(outs.status());
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (size_t i = 0; i < outs->size(); ++i) ordered.emplace_back(g.outputs()[i]->name(), (*outs)[i]);
  if (int rc = report_outputs(ordered, o.output_dir)) return rc;
  std::cout << std::fixed << std::setprecision(3) << "Import " << import_ms << " ms, run " << run_ms
            << " ms (reference backend, " << g.num_nodes() << " nodes)\n";
  if (!o.output_dir.empty()) std::cout << "Wrote " << ordered.size() << " output(s) to " << o.output_dir << "\n";
  return 0;
}

}  // namespace

int cmd_inspect(const InspectArgs& o) { return is_engine_file(o.file) ? inspect_engine(o) : inspect_model(o); }

int cmd_run(const RunArgs& o) { return is_engine_file(o.file) ? run_engine(o) : run_model(o); }

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

}  // namespace kiln::cli

// kiln compare MODEL [--engine ENGINE]: the original model on the reference interpreter
// against the engine, on the same inputs, like Polygraphy's `run --validate`. The
// comparison is runtime/compare.h; this front end loads or builds the engine, prepares
// the inputs and prints the report. Exit code 0: every output within tolerance.
#include <iostream>

#include "commands.h"
#include "onnx/importer.h"
#include "runtime/compare.h"
#include "runtime/inputs.h"

namespace kiln::cli {

int cmd_compare(const CompareArgs& a) {
  kiln::CompareOptions options;
  options.atol = a.atol;
  options.rtol = a.rtol;
  options.layerwise = a.layerwise;
  if (!(a.atol >= 0) || !(a.rtol >= 0)) return fail(invalid_argument("--atol and --rtol must be >= 0"));
  auto model = import_onnx_file(a.model);
  if (!model) return fail(model.status());
  const Graph& g = *model->graph;
  std::shared_ptr<Engine> engine;
  if (a.engine.empty()) {
    auto config = make_build_config(a.flags);
    if (!config) return fail(config.status());
    auto built = build_engine(a.model, *config);
    if (!built) return fail(built.status());
    engine = *built;
  } else {
    if (has_build_only_flags(a.flags) || a.flags.threads != 0) {
      std::cerr << "warning: build flags are ignored with --engine (they configure the in-memory build)\n";
    }
    if (!is_engine_file(a.engine)) return fail(invalid_argument("'", a.engine, "' is not a kiln engine file (no KILNPLAN header)"));
    auto loaded = Engine::load(a.engine);
    if (!loaded) return fail(loaded.status());
    engine = *loaded;
  }
  const Engine& e = *engine;
  std::cout << "Model:  " << a.model << " (" << g.num_nodes() << " nodes, reference backend)\n";
  std::cout << "Engine: " << (a.engine.empty() ? "built in memory" : a.engine) << " (" << e.layers().size() << " layers, "
            << device_name(e.device()) << ")\n";
  if (Status s = check_engine_interface(g, e); !s) return fail(s);

  // Random inputs get the engine's run shapes (its static dims or profile 0's opt).
  auto shapes = parse_input_shapes(a.flags.shapes, g);
  if (!shapes) return fail(shapes.status());
  const Graph& eg = engine_graph(e);
  auto shape_of = [&](const Value& v) -> Result<Dims> {
    const Value* ev = eg.find_value(v.name());
    if (ev && ev->kind() == Value::Kind::kGraphInput) return engine_run_shape(e, *ev, *shapes);
    return concrete_input_shape(v, *shapes);
  };
  auto feeds = prepare_inputs(g, a.inputs, shape_of, a.seed);
  if (!feeds) return fail(feeds.status());
  auto report = compare_engine(g, e, *feeds, options);
  if (!report) return fail(report.status());
  std::cout << format_compare_report(*report);
  return report->passed ? 0 : 1;
}

}  // namespace kiln::cli

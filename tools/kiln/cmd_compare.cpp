// kiln compare MODEL --engine ENGINE: runs the original model on the reference
// interpreter and the engine on the same inputs, and reports how far apart they are,
// per output and (--layerwise) per layer, like Polygraphy's `run --validate`.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>

#include "commands.h"
#include "onnx/importer.h"
#include "runtime/engine_impl.h"
#include "runtime/inputs.h"

namespace kiln::cli {

namespace {

struct Diff {
  int64_t elements = 0;
  int64_t out_of_tolerance = 0;  // NaN against a number counts here too
  int64_t both_nan = 0;
  int64_t worst = -1;            // element with the largest excess over the tolerance
  double worst_excess = -1;
  double max_abs = 0, max_rel = 0, rel_l2 = 0, cosine = 1;
};

// Element i passes when |b - a| <= atol + rtol * |a| (a: reference, b: engine), or both
// are NaN, or both are the same infinity.
Diff diff_tensors(const Tensor& ref, const Tensor& got, double atol, double rtol) {
  Diff d;
  d.elements = ref.size();
  double err2 = 0, ref2 = 0, got2 = 0, dot = 0;
  for (int64_t i = 0; i < d.elements; ++i) {
    const double a = ref.get_double(i), b = got.get_double(i);
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) && std::isnan(b)) {
        ++d.both_nan;
      } else {
        ++d.out_of_tolerance;
        d.max_abs = d.max_rel = INFINITY;
        if (d.worst < 0 || d.worst_excess < INFINITY) {
          d.worst = i;
          d.worst_excess = INFINITY;
        }
      }
      continue;
    }
    const double e = a == b ? 0.0 : std::fabs(a - b);  // infinite when one side is infinite
    d.max_abs = std::max(d.max_abs, e);
    if (a != 0) d.max_rel = std::max(d.max_rel, e / std::fabs(a));
    double excess = e - (atol + rtol * std::fabs(a));
    if (std::isnan(excess)) excess = INFINITY;  // inf - inf: an infinity against anything else
    if (excess > 0) ++d.out_of_tolerance;
    if (d.worst < 0 || excess > d.worst_excess) {
      d.worst = i;
      d.worst_excess = excess;
    }
    if (std::isfinite(e)) err2 += e * e;
    if (std::isfinite(a) && std::isfinite(b)) {
      ref2 += a * a;
      got2 += b * b;
      dot += a * b;
    }
  }
  d.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
  if (ref2 > 0 && got2 > 0) d.cosine = dot / (std::sqrt(ref2) * std::sqrt(got2));
  else d.cosine = ref2 == got2 ? 1.0 : 0.0;
  return d;
}

std::string index_str(const Dims& dims, int64_t flat) {
  Dims idx(dims.size());
  for (size_t k = dims.size(); k-- > 0;) {
    idx[k] = dims[k] > 0 ? flat % dims[k] : 0;
    flat = dims[k] > 0 ? flat / dims[k] : 0;
  }
  return dims_str(idx);
}

// Indices of the k largest values of row r of a [N, C] tensor (ties: lower index first).
std::vector<int64_t> top_k(const Tensor& t, int64_t r, int64_t k) {
  const int64_t c = t.dims()[1];
  std::vector<int64_t> idx(static_cast<size_t>(c));
  std::iota(idx.begin(), idx.end(), 0);
  auto val = [&](int64_t j) {
    const double v = t.get_double(r * c + j);
    return std::isnan(v) ? -INFINITY : v;
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t x, int64_t y) {
    return val(x) > val(y) || (val(x) == val(y) && x < y);
  });
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

bool comparable(const Tensor& t) { return !t.is_sequence() && !t.is_none() && !t.is_string() && t.defined(); }

std::string sci(double v) {
  std::ostringstream os;
  os << std::scientific << std::setprecision(3) << v;
  return os.str();
}

struct LayerRecord {
  std::string layer, op, value, model_value;
  Diff diff;
};

// The model value an engine value stands for: the same name, or, for the outputs the
// fusion passes name "<last fused output>_fused" (plus "_N" from unique_name), that name.
const Tensor* find_model_value(const std::map<std::string, Tensor>& values, std::string name, std::string* matched) {
  for (;;) {
    auto it = values.find(name);
    if (it != values.end()) {
      *matched = name;
      return &it->second;
    }
    size_t end = name.size();
    while (end > 0 && std::isdigit(static_cast<unsigned char>(name[end - 1]))) --end;
    if (end < name.size() && end > 0 && name[end - 1] == '_') name.resize(end - 1);  // "_1" from unique_name
    const std::string suffix = "_fused";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return nullptr;
    name.resize(name.size() - suffix.size());
  }
}

}  // namespace

int cmd_compare(const CompareOptions& o) {
  if (!(o.atol >= 0) || !(o.rtol >= 0)) return fail(invalid_argument("--atol and --rtol must be >= 0"));
  auto model = import_onnx_file(o.model);
  if (!model) return fail(model.status());
  const Graph& g = *model->graph;
  std::shared_ptr<Engine> engine;
  if (o.engine.empty()) {
    auto config = make_build_config(o.flags);
    if (!config) return fail(config.status());
    auto built = build_engine(o.model, *config);
    if (!built) return fail(built.status());
    engine = *built;
  } else {
    if (has_build_only_flags(o.flags) || o.flags.threads != 0) {
      std::cerr << "warning: build flags are ignored with --engine (they configure the in-memory build)\n";
    }
    if (!is_engine_file(o.engine)) return fail(invalid_argument("'", o.engine, "' is not a kiln engine file (no KILNPLAN header)"));
    auto loaded = Engine::load(o.engine);
    if (!loaded) return fail(loaded.status());
    engine = *loaded;
  }
  const Engine& e = *engine;
  const Graph& eg = engine_graph(e);
  std::cout << "Model:  " << o.model << " (" << g.num_nodes() << " nodes, reference backend)\n";
  std::cout << "Engine: " << (o.engine.empty() ? "built in memory" : o.engine) << " (" << e.layers().size() << " layers, "
            << device_name(e.device()) << ")\n";

  // The engine must have the model's interface.
  for (const TensorDesc& d : e.inputs()) {
    const Value* v = g.find_value(d.name);
    if (!v || v->kind() != Value::Kind::kGraphInput) {
      return fail(invalid_argument("the engine's input '", d.name, "' is not an input of the model"));
    }
  }
  for (const Value* out : g.outputs()) {
    bool found = false;
    for (const TensorDesc& d : e.outputs()) found = found || d.name == out->name();
    if (!found) return fail(invalid_argument("the model's output '", out->name(), "' is not an output of the engine"));
  }

  auto shapes = parse_input_shapes(o.flags.shapes, g);
  if (!shapes) return fail(shapes.status());
  auto shape_of = [&](const Value& v) -> Result<Dims> {
    const Value* ev = eg.find_value(v.name());
    if (ev && ev->kind() == Value::Kind::kGraphInput) return engine_input_shape(e, *ev, *shapes);
    return concrete_input_shape(v, *shapes);
  };
  auto feeds = prepare_inputs(g, o.inputs, shape_of, o.seed, true);
  if (!feeds) return fail(feeds.status());

  // Reference run; with --layerwise, keep every top-level value by name.
  std::map<std::string, Tensor> ref_values;
  Interpreter interp(g);
  if (o.layerwise) {
    interp.set_observer([&](const Node& n, const std::vector<Tensor>& outs) {
      for (size_t i = 0; i < outs.size(); ++i) {
        const Value* v = n.output(i);
        if (v && v->graph() == &g && comparable(outs[i])) ref_values[v->name()] = outs[i].clone();
      }
    });
  }
  auto ref = interp.run(*feeds);
  if (!ref) return fail(ref.status().with_context("reference run: "));

  // Engine run on the inputs it takes; with --layerwise, compare each layer's outputs
  // while they are live (the arena reuses their memory afterwards).
  std::map<std::string, Tensor> engine_feeds;
  for (const TensorDesc& d : e.inputs()) engine_feeds[d.name] = feeds->at(d.name);
  auto ctx = e.create_execution_context();
  if (!ctx) return fail(ctx.status());
  std::vector<LayerRecord> records;
  int not_in_model = 0, shape_mismatch = 0;
  if (o.layerwise) {
    ctx.value()->impl().step_observer = [&](const Node& n, const std::vector<Tensor*>& outs) {
      for (size_t i = 0; i < outs.size(); ++i) {
        const Value* v = n.output(i);
        if (!v || !outs[i] || !comparable(*outs[i])) continue;
        std::string matched;
        const Tensor* want = find_model_value(ref_values, v->name(), &matched);
        if (!want) {
          ++not_in_model;
          continue;
        }
        if (want->dims() != outs[i]->dims()) {
          ++shape_mismatch;  // same name, different layout (a layout pass rewrote it)
          continue;
        }
        records.push_back({n.name().empty() ? v->name() : n.name(), op_name(n.op()), v->name(), matched,
                           diff_tensors(*want, *outs[i], o.atol, o.rtol)});
      }
    };
  }
  auto got = ctx.value()->run(engine_feeds);
  if (!got) return fail(got.status().with_context("engine run: "));

  std::cout << "Tolerance: |engine - reference| <= " << o.atol << " + " << o.rtol << " * |reference|\n";
  bool pass = true;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const std::string& name = g.outputs()[i]->name();
    const Tensor& a = (*ref)[i];
    const Tensor& b = got->at(name);
    std::cout << "Output " << name << " " << (comparable(a) ? a.describe() : std::string("(not a tensor)")) << ": ";
    if (!comparable(a) || !comparable(b)) {
      std::cout << "FAIL (cannot compare " << a.describe() << " with " << b.describe() << ")\n";
      pass = false;
      continue;
    }
    if (a.dims() != b.dims()) {
      std::cout << "FAIL (the engine's output is " << b.describe() << ")\n";
      pass = false;
      continue;
    }
    const Diff d = diff_tensors(a, b, o.atol, o.rtol);
    if (d.out_of_tolerance == 0) {
      std::cout << "PASS\n";
    } else {
      pass = false;
      std::cout << "FAIL (" << d.out_of_tolerance << " of " << d.elements << " elements out of tolerance; worst at "
                << index_str(a.dims(), d.worst) << ": reference " << std::setprecision(9) << a.get_double(d.worst)
                << ", engine " << b.get_double(d.worst) << ")\n"
                << std::setprecision(6);
    }
    if (a.dtype() != b.dtype()) std::cout << "  dtype: reference " << dtype_name(a.dtype()) << ", engine " << dtype_name(b.dtype()) << "\n";
    std::cout << "  max abs err " << sci(d.max_abs) << "  max rel err " << sci(d.max_rel) << "  rel L2 err "
              << sci(d.rel_l2) << "  cosine " << std::fixed << std::setprecision(6) << d.cosine << std::defaultfloat
              << "\n";
    if (d.both_nan) std::cout << "  warning: " << d.both_nan << " element(s) are NaN in both\n";
    // Classifier-like outputs: [N, C] floats with C >= 5.
    if (is_float(a.dtype()) && a.rank() == 2 && a.dims()[1] >= 5 && a.dims()[0] > 0) {
      const int64_t rows = a.dims()[0];
      int64_t top1 = 0, top5 = 0;
      for (int64_t r = 0; r < rows; ++r) {
        if (top_k(a, r, 1) == top_k(b, r, 1)) ++top1;
        if (top_k(a, r, 5) == top_k(b, r, 5)) ++top5;
      }
      auto pct = [rows](int64_t k) {
        std::ostringstream os;
        os << std::fixed << std::setprecision(1) << 100.0 * static_cast<double>(k) / static_cast<double>(rows) << "%";
        return os.str();
      };
      std::cout << "  top-1 agreement " << top1 << "/" << rows << " (" << pct(top1) << ")  top-5 agreement " << top5 << "/"
                << rows << " (" << pct(top5) << ")\n";
    }
  }

  if (o.layerwise) {
    std::cout << "Layerwise: " << records.size() << " layer output(s) compared in engine order";
    if (not_in_model) std::cout << ", " << not_in_model << " with no same-named model value";
    if (shape_mismatch) std::cout << ", " << shape_mismatch << " skipped (shape differs from the model's)";
    std::cout << "\n";
    const LayerRecord* first_bad = nullptr;
    for (const LayerRecord& r : records) {
      const bool ok = r.diff.out_of_tolerance == 0;
      if (!ok && !first_bad) first_bad = &r;
      std::cout << "  " << (ok ? "ok  " : "FAIL") << "  " << r.layer << " (" << r.op << ") -> " << r.value
                << (r.value == r.model_value ? "" : " (model: " + r.model_value + ")") << "  max abs err "
                << sci(r.diff.max_abs) << "  rel L2 err " << sci(r.diff.rel_l2) << "\n";
    }
    if (first_bad) {
      std::cout << "First divergence: layer '" << first_bad->layer << "' (" << first_bad->op << "), output '"
                << first_bad->value << "'" << (first_bad->value == first_bad->model_value ? "" : " (model: " + first_bad->model_value + ")")
                << ": " << first_bad->diff.out_of_tolerance << " of " << first_bad->diff.elements
                << " elements out of tolerance, max abs err " << sci(first_bad->diff.max_abs) << "\n";
    } else {
      std::cout << "No compared layer exceeds the tolerance"
                << (pass ? "" : " (the divergence is in a layer with no same-named model value)") << "\n";
    }
  }
  std::cout << "Result: " << (pass ? "PASS" : "FAIL") << "\n";
  return pass ? 0 : 1;
}

}  // namespace kiln::cli

#include "runtime/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <map>
#include <numeric>
#include <sstream>

#include "runtime/engine_impl.h"

namespace kiln {

namespace {

// Thrown from the run observers to stop both runs when CompareOptions::cancelled says so;
// observers return void, and both runs are serial code between nodes at that point.
struct Interrupted {};

Dims unravel(const Dims& dims, int64_t flat) {
  Dims idx(dims.size());
  for (size_t k = dims.size(); k-- > 0;) {
    idx[k] = dims[k] > 0 ? flat % dims[k] : 0;
    flat = dims[k] > 0 ? flat / dims[k] : 0;
  }
  return idx;
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

OutputComparison compare_output(const std::string& name, const Tensor& a, const Tensor& b, double atol, double rtol) {
  OutputComparison c;
  c.name = name;
  c.reference = a;
  c.engine = b;
  if (!comparable(a) || !comparable(b)) {
    c.problem = cat("cannot compare ", a.describe(), " with ", b.describe());
    return c;
  }
  if (a.dims() != b.dims()) {
    c.problem = cat("the engine's output is ", b.describe());
    return c;
  }
  c.compared = true;
  c.diff = diff_tensors(a, b, atol, rtol);
  c.passed = c.diff.out_of_tolerance == 0;
  if (c.diff.worst >= 0) {
    c.worst_index = unravel(a.dims(), c.diff.worst);
    c.worst_reference = a.get_double(c.diff.worst);
    c.worst_engine = b.get_double(c.diff.worst);
  }
  if (is_float(a.dtype()) && a.rank() == 2 && a.dims()[1] >= 5 && a.dims()[0] > 0) {
    c.top_k_rows = a.dims()[0];
    for (int64_t r = 0; r < c.top_k_rows; ++r) {
      if (top_k(a, r, 1) == top_k(b, r, 1)) ++c.top1_agree;
      if (top_k(a, r, 5) == top_k(b, r, 5)) ++c.top5_agree;
    }
  }
  return c;
}

}  // namespace

TensorDiff diff_tensors(const Tensor& ref, const Tensor& got, double atol, double rtol) {
  TensorDiff d;
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

const LayerComparison* CompareReport::first_divergence() const {
  for (const LayerComparison& l : layers) {
    if (!l.passed()) return &l;
  }
  return nullptr;
}

Status check_engine_interface(const Graph& g, const Engine& e) {
  for (const TensorDesc& d : e.inputs()) {
    const Value* v = g.find_value(d.name);
    if (!v || v->kind() != Value::Kind::kGraphInput) {
      return invalid_argument("the engine's input '", d.name, "' is not an input of the model");
    }
  }
  for (const Value* out : g.outputs()) {
    bool found = false;
    for (const TensorDesc& d : e.outputs()) found = found || d.name == out->name();
    if (!found) return invalid_argument("the model's output '", out->name(), "' is not an output of the engine");
  }
  return Status::ok();
}

Result<CompareReport> compare_engine(const Graph& g, const Engine& e, const TensorMap& feeds, const CompareOptions& o) {
  if (!(o.atol >= 0) || !(o.rtol >= 0)) return invalid_argument("atol and rtol must be >= 0");
  KILN_RETURN_IF_ERROR(check_engine_interface(g, e));
  CompareReport report;
  report.atol = o.atol;
  report.rtol = o.rtol;
  report.layerwise = o.layerwise;
  auto check_cancel = [&o] {
    if (o.cancelled && o.cancelled()) throw Interrupted{};
  };
  try {
    // Reference run; layerwise, keep every top-level value by name.
    std::map<std::string, Tensor> ref_values;
    Interpreter interp(g);
    if (o.layerwise || o.cancelled) {
      interp.set_observer([&](const Node& n, const std::vector<Tensor>& outs) {
        bool top_level = false;
        for (size_t i = 0; i < outs.size(); ++i) {
          const Value* v = n.output(i);
          if (!v || v->graph() != &g) continue;
          top_level = true;
          if (o.layerwise && comparable(outs[i])) ref_values[v->name()] = outs[i].clone();
        }
        if (top_level) check_cancel();  // not inside a subgraph (a kernel is running it)
      });
    }
    auto ref = interp.run(feeds);
    if (!ref) return ref.status().with_context("reference run: ");

    // Engine run on the inputs it takes; layerwise, compare each layer's outputs while
    // they are live (the arena reuses their memory afterwards).
    std::map<std::string, Tensor> engine_feeds;
    for (const TensorDesc& d : e.inputs()) {
      auto it = feeds.find(d.name);
      if (it == feeds.end()) return invalid_argument("missing input '", d.name, "'");
      engine_feeds[d.name] = it->second;
    }
    KILN_ASSIGN_OR_RETURN(auto ctx, e.create_execution_context());
    if (o.layerwise || o.cancelled) {
      ctx->impl().step_observer = [&](const Node& n, const std::vector<Tensor*>& outs) {
        for (size_t i = 0; o.layerwise && i < outs.size(); ++i) {
          const Value* v = n.output(i);
          if (!v || !outs[i] || !comparable(*outs[i])) continue;
          std::string matched;
          const Tensor* want = find_model_value(ref_values, v->name(), &matched);
          if (!want) {
            ++report.layers_not_in_model;
            continue;
          }
          if (want->dims() != outs[i]->dims()) {
            ++report.layers_shape_mismatch;
            continue;
          }
          report.layers.push_back({n.name().empty() ? v->name() : n.name(), op_name(n.op()), v->name(), matched,
                                   diff_tensors(*want, *outs[i], o.atol, o.rtol)});
        }
        check_cancel();
      };
    }
    auto got = ctx->run(engine_feeds);
    if (!got) return got.status().with_context("engine run: ");

    report.passed = true;
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const std::string& name = g.outputs()[i]->name();
      report.outputs.push_back(compare_output(name, (*ref)[i], got->at(name), o.atol, o.rtol));
      report.passed = report.passed && report.outputs.back().passed;
    }
  } catch (const Interrupted&) {
    return internal_error("interrupted");
  }
  return report;
}

std::string format_compare_report(const CompareReport& r) {
  std::ostringstream os;
  os << "Tolerance: |engine - reference| <= " << r.atol << " + " << r.rtol << " * |reference|\n";
  for (const OutputComparison& c : r.outputs) {
    const Tensor& a = c.reference;
    const Tensor& b = c.engine;
    os << "Output " << c.name << " " << (comparable(a) ? a.describe() : std::string("(not a tensor)")) << ": ";
    if (!c.compared) {
      os << "FAIL (" << c.problem << ")\n";
      continue;
    }
    const TensorDiff& d = c.diff;
    if (c.passed) {
      os << "PASS\n";
    } else {
      os << "FAIL (" << d.out_of_tolerance << " of " << d.elements << " elements out of tolerance; worst at "
         << dims_str(c.worst_index) << ": reference " << std::setprecision(9) << c.worst_reference << ", engine "
         << c.worst_engine << ")\n"
         << std::setprecision(6);
    }
    if (a.dtype() != b.dtype()) os << "  dtype: reference " << dtype_name(a.dtype()) << ", engine " << dtype_name(b.dtype()) << "\n";
    os << "  max abs err " << sci(d.max_abs) << "  max rel err " << sci(d.max_rel) << "  rel L2 err " << sci(d.rel_l2)
       << "  cosine " << std::fixed << std::setprecision(6) << d.cosine << std::defaultfloat << "\n";
    if (d.both_nan) os << "  warning: " << d.both_nan << " element(s) are NaN in both\n";
    if (c.top_k_rows > 0) {
      const int64_t rows = c.top_k_rows;
      auto pct = [rows](int64_t k) {
        std::ostringstream p;
        p << std::fixed << std::setprecision(1) << 100.0 * static_cast<double>(k) / static_cast<double>(rows) << "%";
        return p.str();
      };
      os << "  top-1 agreement " << c.top1_agree << "/" << rows << " (" << pct(c.top1_agree) << ")  top-5 agreement "
         << c.top5_agree << "/" << rows << " (" << pct(c.top5_agree) << ")\n";
    }
  }
  if (r.layerwise) {
    os << "Layerwise: " << r.layers.size() << " layer output(s) compared in engine order";
    if (r.layers_not_in_model) os << ", " << r.layers_not_in_model << " with no same-named model value";
    if (r.layers_shape_mismatch) os << ", " << r.layers_shape_mismatch << " skipped (shape differs from the model's)";
    os << "\n";
    for (const LayerComparison& l : r.layers) {
      os << "  " << (l.passed() ? "ok  " : "FAIL") << "  " << l.layer << " (" << l.op << ") -> " << l.value
         << (l.value == l.model_value ? "" : " (model: " + l.model_value + ")") << "  max abs err " << sci(l.diff.max_abs)
         << "  rel L2 err " << sci(l.diff.rel_l2) << "\n";
    }
    if (const LayerComparison* bad = r.first_divergence()) {
      os << "First divergence: layer '" << bad->layer << "' (" << bad->op << "), output '" << bad->value << "'"
         << (bad->value == bad->model_value ? "" : " (model: " + bad->model_value + ")") << ": " << bad->diff.out_of_tolerance
         << " of " << bad->diff.elements << " elements out of tolerance, max abs err " << sci(bad->diff.max_abs) << "\n";
    } else {
      os << "No compared layer exceeds the tolerance"
         << (r.passed ? "" : " (the divergence is in a layer with no same-named model value)") << "\n";
    }
  }
  os << "Result: " << (r.passed ? "PASS" : "FAIL") << "\n";
  return os.str();
}

}  // namespace kiln

#include "runtime/inputs.h"

#include <random>
#include <sstream>

namespace kiln {

Status parse_shape_list(const std::string& spec, std::map<std::string, Dims>* out) {
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return invalid_argument("bad shape '", item, "': expected NAME:DIMxDIM..., e.g. input:1x3x224x224");
    }
    std::string name = item.substr(0, colon);
    std::string dims = item.substr(colon + 1);
    Dims d;
    std::stringstream ds(dims);
    std::string tok;
    while (std::getline(ds, tok, 'x')) {
      if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 12) {
        return invalid_argument("bad shape '", item, "': '", tok, "' is not a dimension");
      }
      d.push_back(std::stoll(tok));
    }
    (*out)[name] = d;
  }
  return Status::ok();
}

Result<Dims> concrete_input_shape(const Value& input, const std::map<std::string, Dims>& overrides) {
  auto it = overrides.find(input.name());
  if (it != overrides.end()) {
    const Dims& d = it->second;
    if (input.shape) {
      const SymShape& s = *input.shape;
      if (s.size() != d.size()) {
        return invalid_argument("input '", input.name(), "': shape ", dims_str(d), " has rank ", d.size(),
                                " but the model expects ", sym_shape_str(input.shape));
      }
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i].known() && s[i].value != d[i]) {
          return invalid_argument("input '", input.name(), "': shape ", dims_str(d), " contradicts the model's ",
                                  sym_shape_str(input.shape));
        }
      }
    }
    return d;
  }
  if (!input.shape) {
    return invalid_argument("input '", input.name(), "' has no shape in the model; give one with --shapes ",
                            input.name(), ":DIMxDIM...");
  }
  Dims d;
  for (const Dim& dim : *input.shape) d.push_back(dim.known() ? dim.value : 1);
  return d;
}

namespace {

// Follows value through shape-only ops to find a Gather that uses it as indices.
int64_t gather_bound(const Value& v, int depth) {
  if (depth > 8) return 0;
  for (const Use& u : v.uses()) {
    const Node& n = *u.node;
    if (n.op() == Op::Gather && u.input_index == 1) {
      const Value* data = n.input(0);
      int64_t axis = n.attrs.get_int("axis", 0);
      if (data && data->shape) {
        const SymShape& s = *data->shape;
        int64_t a = axis < 0 ? axis + static_cast<int64_t>(s.size()) : axis;
        if (a >= 0 && a < static_cast<int64_t>(s.size()) && s[static_cast<size_t>(a)].known()) {
          return s[static_cast<size_t>(a)].value;
        }
      }
    }
    if (n.op() == Op::Cast || n.op() == Op::Reshape || n.op() == Op::Unsqueeze || n.op() == Op::Squeeze ||
        n.op() == Op::Identity || n.op() == Op::Flatten) {
      if (u.input_index == 0 && n.output(0)) {
        int64_t b = gather_bound(*n.output(0), depth + 1);
        if (b > 0) return b;
      }
    }
  }
  return 0;
}

}  // namespace

int64_t integer_input_bound(const Graph& g, const Value& input) {
  (void)g;
  int64_t b = gather_bound(input, 0);
  return b > 0 ? b : 10;
}

Tensor random_input(const Graph& g, const Value& input, const Dims& dims, uint64_t seed) {
  DataType dt = input.dtype == DataType::kUndefined ? DataType::kFloat32 : input.dtype;
  std::mt19937_64 rng(seed);
  Tensor t(dt, dims);
  const int64_t n = t.size();
  if (is_float(dt)) {
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    dispatch_float(dt, [&]<typename T>() {
      T* p = t.data<T>();
      for (int64_t i = 0; i < n; ++i) p[i] = from_compute<T>(static_cast<compute_t<T>>(dist(rng)));
    });
  } else if (dt == DataType::kBool) {
    bool* p = t.data<bool>();
    for (int64_t i = 0; i < n; ++i) p[i] = (rng() & 1) != 0;
  } else {
    int64_t bound = integer_input_bound(g, input);
    if (dt == DataType::kInt8 || dt == DataType::kUInt8) bound = std::min<int64_t>(bound, 100);
    std::uniform_int_distribution<int64_t> dist(0, bound - 1);
    dispatch_integer(dt, [&]<typename T>() {
      T* p = t.data<T>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(dist(rng));
    });
  }
  return t;
}

}  // namespace kiln

#include "runtime/engine_inputs.h"

#include "runtime/engine_impl.h"
#include "runtime/inputs.h"

namespace kiln {

const Graph& engine_graph(const Engine& e) { return *e.impl().graph; }

Result<Dims> engine_run_shape(const Engine& e, const Value& input, const std::map<std::string, Dims>& overrides) {
  if (!overrides.count(input.name()) && !e.profiles().empty()) {
    const auto& ranges = e.profiles().front().inputs;
    auto r = ranges.find(input.name());
    bool dynamic = !input.shape;
    if (input.shape) {
      for (const Dim& d : *input.shape) dynamic = dynamic || !d.known();
    }
    if (dynamic && r != ranges.end()) return r->second.opt;
  }
  return concrete_input_shape(input, overrides);
}

Status check_shape_names(const std::map<std::string, Dims>& shapes, const Graph& g, const std::string& what) {
  for (const auto& [name, d] : shapes) {
    bool found = false;
    std::string names;
    for (Value* in : g.inputs()) {
      found = found || in->name() == name;
      names += (names.empty() ? "" : ", ") + in->name();
    }
    if (!found) return invalid_argument(what, ": '", name, "' is not an input (inputs: ", names, ")");
  }
  return Status::ok();
}

Status add_random_inputs(const Graph& g, TensorMap& feeds, const std::function<Result<Dims>(const Value&)>& shape_of,
                         uint64_t seed, std::vector<std::string>* generated) {
  for (Value* v : g.inputs()) {
    ++seed;  // per input, whether or not it is generated
    if (feeds.count(v->name())) continue;
    KILN_ASSIGN_OR_RETURN(Dims dims, shape_of(*v));
    feeds[v->name()] = random_input(g, *v, dims, seed);
    if (generated) generated->push_back(v->name());
  }
  return Status::ok();
}

}  // namespace kiln

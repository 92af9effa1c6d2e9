#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/fast/fast_kernel.h"

namespace kiln::fast {

const std::vector<Tactic>& tactics() {
  static const std::vector<Tactic> all = [] {
    std::vector<Tactic> t;
    add_onednn_tactics(t);
    add_elementwise_tactics(t);
    add_norm_tactics(t);
    add_attention_tactics(t);
    add_movement_tactics(t);
    return t;
  }();
  return all;
}

std::vector<const Tactic*> tactics_for(const LayerSpec& spec) {
  std::vector<const Tactic*> out;
  for (const Tactic& t : tactics()) {
    if (t.op == spec.op && t.supports(spec)) out.push_back(&t);
  }
  return out;
}

const Tactic* find_tactic(const std::string& name) {
  for (const Tactic& t : tactics()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

std::string library_versions() {
  const dnnl_version_t* v = dnnl_version();
  return cat("onednn ", v->major, ".", v->minor, ".", v->patch);
}

}  // namespace kiln::fast

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

std::vector<const Tactic*> tactics_for(const LayerSpec& spec) { return supporting_tactics(tactics(), spec); }

const Tactic* find_tactic(const std::string& name) { return tactic_named(tactics(), name); }

std::string library_versions() {
  const dnnl_version_t* v = dnnl_version();
  return cat("onednn ", v->major, ".", v->minor, ".", v->patch);
}

}  // namespace kiln::fast

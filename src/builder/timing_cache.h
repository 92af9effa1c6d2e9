// Timing cache: measured tactic times per layer signature (op, attributes, dtypes,
// shapes, which inputs are constant), kept in a JSON file and reused across builds, so
// a rebuild with the same cache makes the same choices (byte-identical plans) and skips
// the timing.
#pragma once
#include <map>
#include <string>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln {

class TimingCache {
 public:
  // A missing file is an empty cache; a damaged one is an error naming the file.
  Status load(const std::string& path);
  Status save(const std::string& path) const;
  // Milliseconds, or a negative value when not cached.
  double find(const std::string& layer, const std::string& tactic) const;
  void put(const std::string& layer, const std::string& tactic, double ms) { entries_[layer][tactic] = ms; }
  size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, std::map<std::string, double>> entries_;
};

// The signature a layer is cached under: "Conv|group=1;kernel_shape=3,3|float32[1,64,56,56]c..."
std::string layer_signature(const Node& n);

}  // namespace kiln

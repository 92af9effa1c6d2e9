#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kiln {

MemoryPlan plan_memory(const std::vector<BufferLife>& buffers, size_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  auto round = [alignment](size_t n) { return (n + alignment - 1) / alignment * alignment; };
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;  // indices already given an offset
  for (size_t i : order) {
    const BufferLife& b = buffers[i];
    const size_t need = round(std::max<size_t>(b.bytes, 1));
    // Intervals taken by buffers alive at the same time, sorted by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const BufferLife& o = buffers[j];
      if (o.last < b.first || b.last < o.first) continue;
      busy.emplace_back(plan.offsets[j], plan.offsets[j] + round(std::max<size_t>(o.bytes, 1)));
    }
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + need <= lo) break;
      at = std::max(at, hi);
    }
    plan.offsets[i] = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at + need);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace kiln

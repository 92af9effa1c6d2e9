// Static memory planning by liveness: every activation gets an offset in one arena, and
// buffers whose lifetimes do not overlap share memory.
#pragma once
#include <cstddef>
#include <vector>

namespace kiln {

struct BufferLife {
  size_t bytes = 0;
  int first = 0;  // step that writes it
  int last = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per buffer, aligned to `alignment`
  size_t arena_bytes = 0;       // peak
};

// Greedy by size (largest first), each buffer at the lowest offset free for its whole
// lifetime: the usual near-optimal heuristic for inference graphs.
MemoryPlan plan_memory(const std::vector<BufferLife>& buffers, size_t alignment = 64);

}  // namespace kiln

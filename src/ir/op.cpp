#include "ir/op.h"

#include <string>
#include <unordered_map>

namespace kiln {

namespace {
constexpr OpInfo kOpTable[] = {
#define KILN_OP(name, min_in, max_in, min_out, max_out, flags, spec) \
  {Op::name, #name, min_in, max_in, min_out, max_out, static_cast<uint32_t>(flags), spec},
#include "ir/ops.def"
#undef KILN_OP
};
static_assert(sizeof(kOpTable) / sizeof(kOpTable[0]) == static_cast<size_t>(Op::kCount));
}  // namespace

const OpInfo& op_info(Op op) { return kOpTable[static_cast<size_t>(op)]; }

std::optional<Op> op_from_name(std::string_view name) {
  static const auto* index = [] {
    auto* m = new std::unordered_map<std::string, Op>();
    for (const auto& info : kOpTable) (*m)[info.name] = info.op;
    return m;
  }();
  auto it = index->find(std::string(name));
  if (it == index->end()) return std::nullopt;
  return it->second;
}

}  // namespace kiln

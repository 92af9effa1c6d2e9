#include "core/attributes.h"

#include <cmath>
#include <limits>

namespace kiln {

const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::kInt: return "int";
    case AttrType::kFloat: return "float";
    case AttrType::kString: return "string";
    case AttrType::kTensor: return "tensor";
    case AttrType::kGraph: return "graph";
    case AttrType::kInts: return "ints";
    case AttrType::kFloats: return "floats";
    case AttrType::kStrings: return "strings";
  }
  return "?";
}

int64_t Attributes::get_int(const std::string& name, int64_t def) const {
  const Attribute* a = find(name);
  if (!a) return def;
  if (auto* v = std::get_if<int64_t>(&a->value)) return *v;
  if (auto* f = std::get_if<float>(&a->value)) {
    // Saturate: a float-to-int cast out of range is undefined behaviour (a fuzzed model
    // had an inf where an int belongs); NaN has no integer value at all.
    constexpr float kTwo63 = 9223372036854775808.0f;
    if (std::isnan(*f)) return def;
    if (*f >= kTwo63) return std::numeric_limits<int64_t>::max();
    if (*f < -kTwo63) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(*f);
  }
  return def;
}

float Attributes::get_float(const std::string& name, float def) const {
  const Attribute* a = find(name);
  if (!a) return def;
  if (auto* v = std::get_if<float>(&a->value)) return *v;
  if (auto* i = std::get_if<int64_t>(&a->value)) return static_cast<float>(*i);
  return def;
}

std::string Attributes::get_string(const std::string& name, const std::string& def) const {
  const Attribute* a = find(name);
  if (!a) return def;
  if (auto* v = std::get_if<std::string>(&a->value)) return *v;
  return def;
}

std::vector<int64_t> Attributes::get_ints(const std::string& name, const std::vector<int64_t>& def) const {
  const Attribute* a = find(name);
  if (!a) return def;
  if (auto* v = std::get_if<std::vector<int64_t>>(&a->value)) return *v;
  if (auto* i = std::get_if<int64_t>(&a->value)) return {*i};
  return def;
}

std::vector<float> Attributes::get_floats(const std::string& name, const std::vector<float>& def) const {
  const Attribute* a = find(name);
  if (!a) return def;
  if (auto* v = std::get_if<std::vector<float>>(&a->value)) return *v;
  if (auto* f = std::get_if<float>(&a->value)) return {*f};
  return def;
}

std::vector<std::string> Attributes::get_strings(const std::string& name) const {
  const Attribute* a = find(name);
  if (!a) return {};
  if (auto* v = std::get_if<std::vector<std::string>>(&a->value)) return *v;
  return {};
}

const Tensor* Attributes::get_tensor(const std::string& name) const {
  const Attribute* a = find(name);
  if (!a) return nullptr;
  return std::get_if<Tensor>(&a->value);
}

std::shared_ptr<Graph> Attributes::get_graph(const std::string& name) const {
  const Attribute* a = find(name);
  if (!a) return nullptr;
  if (auto* g = std::get_if<std::shared_ptr<Graph>>(&a->value)) return *g;
  return nullptr;
}

}  // namespace kiln

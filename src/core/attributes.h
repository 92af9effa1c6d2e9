// Typed node attributes. Lives in core so kernels can read them without IR headers.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

class Graph;  // subgraph attributes (If/Loop/Scan) hold a graph; kernels never look inside.

enum class AttrType { kInt, kFloat, kString, kTensor, kGraph, kInts, kFloats, kStrings };
const char* attr_type_name(AttrType t);

struct Attribute {
  using Value = std::variant<int64_t, float, std::string, Tensor, std::shared_ptr<Graph>,
                             std::vector<int64_t>, std::vector<float>, std::vector<std::string>>;
  Value value;
  AttrType type() const { return static_cast<AttrType>(value.index()); }
};

class Attributes {
 public:
  void set(const std::string& name, Attribute::Value v) { map_[name] = Attribute{std::move(v)}; }
  bool has(const std::string& name) const { return map_.count(name) != 0; }
  const Attribute* find(const std::string& name) const {
    auto it = map_.find(name);
    return it == map_.end() ? nullptr : &it->second;
  }
  void erase(const std::string& name) { map_.erase(name); }
  const std::map<std::string, Attribute>& all() const { return map_; }
  bool empty() const { return map_.empty(); }

  // Typed getters with defaults. The importer has already checked attribute types
  // against the op table, so a type mismatch here is a kiln bug, not user input.
  int64_t get_int(const std::string& name, int64_t def) const;
  float get_float(const std::string& name, float def) const;
  std::string get_string(const std::string& name, const std::string& def) const;
  std::vector<int64_t> get_ints(const std::string& name, const std::vector<int64_t>& def = {}) const;
  std::vector<float> get_floats(const std::string& name, const std::vector<float>& def = {}) const;
  std::vector<std::string> get_strings(const std::string& name) const;
  const Tensor* get_tensor(const std::string& name) const;
  std::shared_ptr<Graph> get_graph(const std::string& name) const;

 private:
  std::map<std::string, Attribute> map_;
};

}  // namespace kiln

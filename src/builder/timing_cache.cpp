#include "builder/timing_cache.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kiln {

Status TimingCache::load(const std::string& path) {
  entries_.clear();
  if (path.empty() || !std::filesystem::exists(path)) return Status::ok();
  std::ifstream f(path);
  if (!f) return io_error("cannot read timing cache '", path, "'");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("layers") || !j["layers"].is_object()) {
    return invalid_argument("timing cache '", path, "' is damaged (not a kiln timing cache); delete it to start afresh");
  }
  for (const auto& [layer, tactics] : j["layers"].items()) {
    if (!tactics.is_object()) return invalid_argument("timing cache '", path, "' is damaged at '", layer, "'");
    for (const auto& [tactic, ms] : tactics.items()) {
      if (!ms.is_number()) return invalid_argument("timing cache '", path, "' is damaged at '", layer, "'");
      entries_[layer][tactic] = ms.get<double>();
    }
  }
  return Status::ok();
}

Status TimingCache::save(const std::string& path) const {
  if (path.empty()) return Status::ok();
  nlohmann::json j;
  j["format"] = "kiln timing cache 1";
  j["layers"] = nlohmann::json::object();
  for (const auto& [layer, tactics] : entries_) {
    for (const auto& [tactic, ms] : tactics) j["layers"][layer][tactic] = ms;
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f || !(f << j.dump(1) << "\n") || !f.flush()) return io_error("cannot write timing cache '", tmp, "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return io_error("cannot write timing cache '", path, "': ", ec.message());
  return Status::ok();
}

double TimingCache::find(const std::string& layer, const std::string& tactic) const {
  auto it = entries_.find(layer);
  if (it == entries_.end()) return -1;
  auto t = it->second.find(tactic);
  return t == it->second.end() ? -1 : t->second;
}

std::string layer_signature(const Node& n) {
  std::ostringstream os;
  os << op_name(n.op()) << "|";
  for (const auto& [name, a] : n.attrs.all()) {
    os << name << "=";
    std::visit([&os](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, float> || std::is_same_v<V, std::string>) {
        os << v;
      } else if constexpr (std::is_same_v<V, Tensor>) {
        os << v.describe();
      } else if constexpr (std::is_same_v<V, std::shared_ptr<Graph>>) {
        os << "graph";
      } else {
        for (const auto& x : v) os << x << ",";
      }
    }, a.value);
    os << ";";
  }
  os << "|";
  for (Value* v : n.inputs()) {
    if (!v) {
      os << "-,";
      continue;
    }
    os << dtype_name(v->dtype) << sym_shape_str(v->shape) << (v->is_constant() ? "c" : "") << ",";
  }
  return os.str();
}

}  // namespace kiln

// The engine (plan) file: a versioned, checksummed binary container (docs/plan_format.md).
//
//   header   96 bytes, little-endian: magic "KILNPLAN", format version, header size,
//            file size, then offset and size of each section
//   meta     JSON: producer, target (backend, architecture, library versions), build
//            config, inputs/outputs, profiles, per-layer tactics, build summary
//   graph    the optimized graph as an ONNX ModelProto (fused ops in the "kiln" domain);
//            its initializers refer to the weights section (location "kiln:weights")
//   weights  raw tensors, each 64-byte aligned; the section starts on a 4096-byte
//            boundary so a mapped file gives aligned, zero-copy weight views
//   trailer  8-byte checksum of everything before it
//
// Reading validates the whole container (sizes, bounds, overlap, checksum, version,
// JSON) before anything uses it; a damaged file gets an error, never a crash.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln {

constexpr uint32_t kPlanFormatVersion = 1;
constexpr const char* kPlanWeightsLocation = "kiln:weights";

// Bytes of a plan held in memory: a read-only mapping of a file or an aligned heap copy.
class PlanStorage {
 public:
  virtual ~PlanStorage() = default;
  virtual const std::byte* data() const = 0;
  virtual size_t size() const = 0;
};
Result<std::shared_ptr<PlanStorage>> map_plan_file(const std::string& path);
std::shared_ptr<PlanStorage> copy_plan_bytes(const void* data, size_t size);

// Serializes meta + graph; the graph's constants go to the weights section.
Result<std::string> write_plan(const nlohmann::json& meta, const Graph& graph);

// A validated plan: its metadata, graph bytes, and the weights section (inside storage).
struct PlanSections {
  nlohmann::json meta;
  std::string graph_onnx;
  const std::byte* weights = nullptr;
  size_t weights_size = 0;
};
// `what` names the source in errors ("engine file 'model.kiln'").
Result<PlanSections> read_plan(const PlanStorage& storage, const std::string& what);

// Imports the plan's graph; constants are views into the weights section (storage must
// outlive the graph).
Result<std::unique_ptr<Graph>> import_plan_graph(const PlanSections& plan, const std::string& what);

// 64-bit checksum used by the trailer (exposed for tests).
uint64_t plan_checksum(const std::byte* data, size_t size);

}  // namespace kiln

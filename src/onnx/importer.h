// ONNX ModelProto -> kiln Graph. Opset differences stop here (DESIGN principle 3):
// every node leaves the importer as one canonical op from ir/ops.def.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln {

struct ImportedModel {
  std::unique_ptr<Graph> graph;
  int64_t opset = 0;           // default-domain opset
  int64_t ir_version = 0;
  std::string producer;        // producer_name + version
  std::string path;            // file the model came from ("" for bytes)
};

// ONNX op types the importer maps onto a differently named kiln op (e.g. Upsample -> Resize),
// plus Constant, which becomes a constant value. For docs and tools.
std::vector<std::pair<std::string, std::string>> onnx_op_aliases();

// Imports a model file; external data is resolved relative to the file's folder.
Result<ImportedModel> import_onnx_file(const std::string& path);
// Resolves initializers that a container format keeps outside the protobuf (kiln plans
// keep weights in aligned, mappable sections): called with the external_data location,
// offset and length and the tensor's dtype and dims; returns the tensor, possibly a view.
using WeightResolver = std::function<Result<Tensor>(const std::string& location, int64_t offset, int64_t length,
                                                    DataType dtype, const Dims& dims)>;

// Imports serialized ModelProto bytes; external data is resolved relative to base_dir, or
// by `weights` when given.
Result<ImportedModel> import_onnx_bytes(const std::string& bytes, const std::string& base_dir,
                                        const std::string& what = "model", const WeightResolver* weights = nullptr);

}  // namespace kiln

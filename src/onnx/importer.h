// ONNX ModelProto -> kiln Graph. Opset differences stop here (DESIGN principle 3):
// every node leaves the importer as one canonical op from ir/ops.def.
#pragma once
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
// Imports serialized ModelProto bytes; external data is resolved relative to base_dir.
Result<ImportedModel> import_onnx_bytes(const std::string& bytes, const std::string& base_dir,
                                        const std::string& what = "model");

}  // namespace kiln

// Graph -> ONNX ModelProto, to view an (optimized) graph in a graph viewer or re-import
// it. Canonical ops export in their newest ONNX form; ops a pass created (fused ops) and
// nodes with kiln-only attributes go to the "kiln" domain.
#pragma once
#include <functional>
#include <string>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln {

// Opset declared for the default domain: kiln's canonical forms are the newest ONNX forms.
constexpr int64_t kExportOpset = 21;

// Stores an initializer's bytes outside the protobuf (kiln plans keep weights in aligned
// sections): returns false to keep the tensor inline, else sets the external location and
// offset that WeightResolver (importer.h) later receives.
using WeightSink = std::function<bool(const Tensor& t, std::string* location, int64_t* offset)>;

Result<std::string> export_onnx_bytes(const Graph& g, const WeightSink* weights = nullptr);
Status export_onnx_file(const Graph& g, const std::string& path);

}  // namespace kiln

// Graph -> ONNX ModelProto, to view an (optimized) graph in a graph viewer or re-import
// it. Canonical ops export in their newest ONNX form; ops a pass created (fused ops) and
// nodes with kiln-only attributes go to the "kiln" domain.
#pragma once
#include <string>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln {

// Opset declared for the default domain: kiln's canonical forms are the newest ONNX forms.
constexpr int64_t kExportOpset = 21;

Result<std::string> export_onnx_bytes(const Graph& g);
Status export_onnx_file(const Graph& g, const std::string& path);

}  // namespace kiln

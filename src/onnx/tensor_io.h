// Tensor serialization: ONNX TensorProto (in-memory and .pb files) and numpy .npy files.
#pragma once
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln {

// Converts a TensorProto (raw_data, typed fields, or external data relative to base_dir).
// `what` names the tensor in errors ("initializer 'w'").
Result<Tensor> tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir,
                                 const std::string& what);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* proto);

// Reads a serialized TensorProto file (ONNX test data format); sets *name to its name.
Result<Tensor> read_tensor_pb(const std::string& path, std::string* name = nullptr);
// Reads a serialized SequenceProto (sequence) or OptionalProto (optional) or TensorProto.
Result<Tensor> read_value_pb(const std::string& path, bool sequence, bool optional);
Status write_tensor_pb(const Tensor& t, const std::string& name, const std::string& path);

Result<Tensor> read_npy(const std::string& path);
Status write_npy(const Tensor& t, const std::string& path);

// Reads .npy or .pb, chosen by the file's content (npy magic) rather than its extension.
Result<Tensor> read_tensor_file(const std::string& path);

}  // namespace kiln

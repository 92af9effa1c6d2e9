// Host tensors: a dtype, a shape and a contiguous row-major buffer shared by copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln {

using Dims = std::vector<int64_t>;

int64_t num_elements(const Dims& dims);
std::string dims_str(const Dims& dims);   // "[1,3,224,224]"
// Row-major strides in elements.
Dims contiguous_strides(const Dims& dims);

// A runtime value is normally a tensor; it can also be an ONNX sequence of tensors or an
// optional without a value ("none"). Both reuse Tensor so kernels keep one signature:
// sequence kernels check is_sequence(), everything else sees plain tensors.
enum class ValueKind : uint8_t { kTensor, kSequence, kNone };

class Tensor {
 public:
  Tensor() = default;
  // A sequence of tensors; elem is the element dtype (kept for empty sequences).
  static Tensor sequence(DataType elem, std::vector<Tensor> items);
  // An optional without a value. of_sequence tells whether it would hold a sequence.
  static Tensor none(DataType elem, bool of_sequence);
  ValueKind kind() const { return kind_; }
  bool is_sequence() const { return kind_ == ValueKind::kSequence; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool none_of_sequence() const { return none_of_sequence_; }
  const std::vector<Tensor>& items() const;

  // Allocates zero-filled storage.
  Tensor(DataType dtype, Dims dims);
  // Wraps existing storage (not owned); the caller keeps it alive.
  static Tensor wrap(DataType dtype, Dims dims, void* data);

  DataType dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t size() const { return num_elements(dims_); }
  // Bytes of element storage; 0 for kString tensors, whose elements are std::string
  // objects reached through data<std::string>() and never copied as bytes.
  size_t nbytes() const { return static_cast<size_t>(size()) * dtype_size(dtype_); }
  bool is_string() const { return dtype_ == DataType::kString; }
  bool defined() const { return kind_ != ValueKind::kTensor || dtype_ != DataType::kUndefined; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T> T* data() { return static_cast<T*>(data_); }
  template <typename T> const T* data() const { return static_cast<const T*>(data_); }

  // Same storage, new dims (element count must match).
  Tensor reshaped(Dims dims) const;
  Tensor clone() const;
  // Reads element i as double / int64 whatever the dtype (for shape tensors, summaries).
  double get_double(int64_t i) const;
  int64_t get_int(int64_t i) const;
  // Reads a rank-0/1 integer tensor (shape, axes, pads...) into a vector.
  std::vector<int64_t> to_int_vector() const;
  std::string describe() const;  // "float32[1,3,224,224]"

 private:
  DataType dtype_ = DataType::kUndefined;
  Dims dims_;
  std::shared_ptr<std::byte[]> storage_;
  std::shared_ptr<std::string[]> strings_;  // storage of kString tensors
  void* data_ = nullptr;
  ValueKind kind_ = ValueKind::kTensor;
  bool none_of_sequence_ = false;
  std::shared_ptr<const std::vector<Tensor>> items_;
};

// Convenience constructors (tests, importer).
template <typename T>
Tensor make_tensor(Dims dims, const std::vector<T>& values) {
  Tensor t(dtype_of<T>::value, std::move(dims));
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < t.size(); ++i) p[i] = values[i];
  return t;
}
Tensor make_scalar_int64(int64_t v);
Tensor make_int64_vector(const std::vector<int64_t>& v);
// Converts a tensor to another dtype (Cast semantics).
Tensor cast_tensor(const Tensor& t, DataType to);

}  // namespace kiln

#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace kiln {

int64_t num_elements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string dims_str(const Dims& dims) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "," : "") << dims[i];
  os << ']';
  return os.str();
}

Dims contiguous_strides(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

Tensor::Tensor(DataType dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) {
  if (dtype_ == DataType::kString) {
    strings_ = std::shared_ptr<std::string[]>(new std::string[static_cast<size_t>(std::max<int64_t>(size(), 1))]);
    data_ = strings_.get();
    return;
  }
  size_t bytes = nbytes();
  // Always allocate at least one byte so data() is non-null for empty tensors.
  storage_ = std::shared_ptr<std::byte[]>(new std::byte[bytes ? bytes : 1]());
  data_ = storage_.get();
}

Tensor Tensor::wrap(DataType dtype, Dims dims, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.data_ = data;
  return t;
}

Tensor Tensor::reshaped(Dims dims) const {
  Tensor t = *this;
  assert(num_elements(dims) == size());
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::clone() const {
  // Sequences and empty optionals have no buffer of their own: copying nbytes() from a null
  // data_ was undefined (a fuzzed engine whose output was a sequence, found by
  // fuzz_plan_loader).
  if (is_none()) return *this;
  if (is_sequence()) {
    std::vector<Tensor> copies;
    for (const Tensor& item : items()) copies.push_back(item.clone());
    return sequence(dtype_, std::move(copies));
  }
  Tensor t(dtype_, dims_);
  if (is_string()) {
    for (int64_t i = 0; i < size(); ++i) t.data<std::string>()[i] = data<std::string>()[i];
    return t;
  }
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

double Tensor::get_double(int64_t i) const {
  double out = 0;
  dispatch_all(dtype_, [&]<typename T>() { out = convert_element<double>(data<T>()[i]); });
  return out;
}

int64_t Tensor::get_int(int64_t i) const {
  int64_t out = 0;
  dispatch_all(dtype_, [&]<typename T>() { out = convert_element<int64_t>(data<T>()[i]); });
  return out;
}

std::vector<int64_t> Tensor::to_int_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) v[static_cast<size_t>(i)] = get_int(i);
  return v;
}

std::string Tensor::describe() const {
  if (kind_ == ValueKind::kSequence) return cat("sequence<", dtype_name(dtype_), ">(", items().size(), " items)");
  if (kind_ == ValueKind::kNone) return cat("optional<", none_of_sequence_ ? "sequence<" : "", dtype_name(dtype_), none_of_sequence_ ? ">" : "", ">(none)");
  return cat(dtype_name(dtype_), dims_str(dims_));
}

Tensor Tensor::sequence(DataType elem, std::vector<Tensor> items) {
  Tensor t;
  t.kind_ = ValueKind::kSequence;
  t.dtype_ = elem;
  t.items_ = std::make_shared<const std::vector<Tensor>>(std::move(items));
  return t;
}

Tensor Tensor::none(DataType elem, bool of_sequence) {
  Tensor t;
  t.kind_ = ValueKind::kNone;
  t.dtype_ = elem;
  t.none_of_sequence_ = of_sequence;
  return t;
}

const std::vector<Tensor>& Tensor::items() const {
  static const std::vector<Tensor> empty;
  return items_ ? *items_ : empty;
}

Tensor make_scalar_int64(int64_t v) { return make_tensor<int64_t>({}, {v}); }
Tensor make_int64_vector(const std::vector<int64_t>& v) {
  return make_tensor<int64_t>({static_cast<int64_t>(v.size())}, v);
}

Tensor cast_tensor(const Tensor& t, DataType to) {
  Tensor out(to, t.dims());
  int64_t n = t.size();
  dispatch_all(t.dtype(), [&]<typename From>() {
    const From* src = t.data<From>();
    dispatch_all(to, [&]<typename To>() {
      To* dst = out.data<To>();
      for (int64_t i = 0; i < n; ++i) dst[i] = convert_element<To>(src[i]);
    });
  });
  return out;
}

}  // namespace kiln

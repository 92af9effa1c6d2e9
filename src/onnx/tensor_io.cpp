#include "onnx/tensor_io.h"

// onnx_pb.h first: it defines ONNX_API, which onnx-data.pb.h needs.
#include <onnx/onnx_pb.h>
// (keep order)
#include <onnx/onnx-data.pb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Number of values in the repeated field that holds elements of dtype dt.
int64_t typed_field_size(const onnx::TensorProto& p, DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return p.float_data_size();
    case DataType::kFloat64: return p.double_data_size();
    case DataType::kInt64: return p.int64_data_size();
    case DataType::kUInt32: case DataType::kUInt64: return p.uint64_data_size();
    default: return p.int32_data_size();
  }
}

// Copies a typed repeated field into the tensor, checking the element count.
template <typename T, typename Field>
Status copy_field(const Field& field, Tensor& t, const std::string& what) {
  if (static_cast<int64_t>(field.size()) != t.size()) {
    return invalid_model(what, ": has ", field.size(), " values but its shape ", dims_str(t.dims()),
                         " needs ", t.size());
  }
  T* dst = t.data<T>();
  for (int i = 0; i < field.size(); ++i) {
    if constexpr (is_half_like_v<T>) {
      dst[i].bits = static_cast<uint16_t>(field.Get(i));
    } else {
      dst[i] = static_cast<T>(field.Get(i));
    }
  }
  return Status::ok();
}

// Reads a tensor's external data. Everything (location, offset, length, file size) is
// checked before the tensor is allocated: a corrupt model must not make kiln allocate
// what its dims claim (found by fuzz_onnx_importer), nor throw on a non-numeric offset.
Result<Tensor> load_external(const onnx::TensorProto& proto, const std::string& base_dir, DataType dt, const Dims& dims,
                             const std::string& what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (kv.value().empty() || *end != '\0' || errno != 0 || v < 0) {
        return invalid_model(what, ": bad external data ", kv.key(), " '", kv.value(), "'");
      }
      (kv.key() == "offset" ? offset : length) = v;
    }
  }
  if (location.empty()) return invalid_model(what, ": external data has no location");
  std::filesystem::path rel(location);
  if (rel.is_absolute() || location.find("..") != std::string::npos) {
    return invalid_model(what, ": external data location '", location, "' must be relative to the model folder");
  }
  std::string path = (std::filesystem::path(base_dir) / rel).string();
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error(what, ": cannot open external data file '", path, "'");
  f.seekg(0, std::ios::end);
  const int64_t file_size = f.tellg();
  const int64_t need = num_elements(dims) * static_cast<int64_t>(dtype_size(dt));
  if (length >= 0 && length != need) {
    return invalid_model(what, ": external data length ", length, " does not match ", need, " bytes of ", dtype_name(dt),
                         dims_str(dims));
  }
  if (file_size < 0 || offset > file_size || need > file_size - offset) {
    return invalid_model(what, ": external data file '", path, "' is too short (", file_size, " bytes, need ", need,
                         " at offset ", offset, ")");
  }
  Tensor t(dt, dims);
  f.seekg(offset);
  f.read(static_cast<char*>(t.raw()), need);
  if (!f) return io_error(what, ": failed to read external data from '", path, "'");
  return t;
}

// 4-bit and 2-bit types are packed in TensorProtos (first element in the lowest bits) and
// unpacked in memory (one byte per element, int4/int2 sign-extended).
int64_t packed_size(DataType dt, int64_t n) {
  int bits = packed_bits(dt);
  return (n * bits + 7) / 8;
}

void unpack_elements(DataType dt, const uint8_t* packed, Tensor& t) {
  const int bits = packed_bits(dt);
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  uint8_t* dst = t.data<uint8_t>();
  for (int64_t i = 0; i < t.size(); ++i) {
    uint8_t v = static_cast<uint8_t>((packed[i / per_byte] >> ((i % per_byte) * bits)) & mask);
    if (dt == DataType::kFloat4E2M1) dst[i] = v;
    else dst[i] = wrap_low_precision_int(dt, v);
  }
}

std::string pack_elements(const Tensor& t) {
  const int bits = packed_bits(t.dtype());
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  std::string out(static_cast<size_t>(packed_size(t.dtype(), t.size())), '\0');
  const uint8_t* src = t.data<uint8_t>();
  for (int64_t i = 0; i < t.size(); ++i) {
    out[static_cast<size_t>(i / per_byte)] |= static_cast<char>((src[i] & mask) << ((i % per_byte) * bits));
  }
  return out;
}

// Decodes a packed (4-bit / 2-bit) tensor from raw_data, int32_data or external data.
Result<Tensor> packed_from_proto(const onnx::TensorProto& proto, DataType dt, const Dims& dims,
                                 const std::string& base_dir, const std::string& what) {
  const int64_t need = packed_size(dt, num_elements(dims));
  Tensor packed;
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    KILN_ASSIGN_OR_RETURN(packed, load_external(proto, base_dir, DataType::kUInt8, {need}, what));
  } else if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    if (static_cast<int64_t>(raw.size()) != need) {
      return invalid_model(what, ": raw_data has ", raw.size(), " bytes but ", dtype_name(dt), dims_str(dims),
                           " needs ", need, " (packed)");
    }
    packed = Tensor(DataType::kUInt8, {need});
    if (need) std::memcpy(packed.raw(), raw.data(), raw.size());
  } else {
    if (proto.int32_data_size() != need) {
      return invalid_model(what, ": has ", proto.int32_data_size(), " packed int32_data values but ", dtype_name(dt),
                           dims_str(dims), " needs ", need);
    }
    packed = Tensor(DataType::kUInt8, {need});
    for (int64_t i = 0; i < need; ++i) packed.data<uint8_t>()[i] = static_cast<uint8_t>(proto.int32_data(static_cast<int>(i)));
  }
  Tensor t(dt, dims);
  unpack_elements(dt, packed.data<uint8_t>(), t);
  return t;
}

}  // namespace

Result<Tensor> tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir,
                                 const std::string& what) {
  auto dt = static_cast<DataType>(proto.data_type());
  if (!is_supported_dtype(dt)) {
    std::string name = onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(proto.data_type()));
    return unsupported(what, ": tensor element type #", proto.data_type(), name.empty() ? "" : " (" + name + ")",
                       " is not supported");
  }
  Dims dims(proto.dims().begin(), proto.dims().end());
  for (int64_t d : dims) {
    if (d < 0) return invalid_model(what, ": negative dimension in shape ", dims_str(dims));
  }
  // Guard against absurd sizes from corrupted files before allocating.
  long double total = 1;
  for (int64_t d : dims) total *= static_cast<long double>(d);
  if (total * static_cast<long double>(dtype_size(dt)) > static_cast<long double>(1ull << 40)) {
    return invalid_model(what, ": shape ", dims_str(dims), " is too large");
  }
  // Counts are checked before allocating: dims claim sizes, the data has to back them.
  const int64_t n = num_elements(dims);
  if (dt == DataType::kString) {
    if (proto.string_data_size() != n) {
      return invalid_model(what, ": has ", proto.string_data_size(), " strings but its shape ", dims_str(dims), " needs ", n);
    }
    Tensor t(dt, dims);
    for (int64_t i = 0; i < t.size(); ++i) t.data<std::string>()[i] = proto.string_data(static_cast<int>(i));
    return t;
  }
  if (packed_bits(dt)) return packed_from_proto(proto, dt, dims, base_dir, what);
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) return load_external(proto, base_dir, dt, dims, what);
  if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    int64_t need = num_elements(dims) * static_cast<int64_t>(dtype_size(dt));
    if (static_cast<int64_t>(raw.size()) != need) {
      return invalid_model(what, ": raw_data has ", raw.size(), " bytes but ", dtype_name(dt), dims_str(dims),
                           " needs ", need);
    }
    Tensor t(dt, dims);
    if (need) std::memcpy(t.raw(), raw.data(), raw.size());
    return t;
  }
  if (typed_field_size(proto, dt) != n) {
    return invalid_model(what, ": has ", typed_field_size(proto, dt), " values but its shape ", dims_str(dims), " needs ", n);
  }
  Tensor t(dt, dims);
  Status s;
  switch (dt) {
    case DataType::kFloat32: s = copy_field<float>(proto.float_data(), t, what); break;
    case DataType::kFloat64: s = copy_field<double>(proto.double_data(), t, what); break;
    case DataType::kInt64: s = copy_field<int64_t>(proto.int64_data(), t, what); break;
    case DataType::kUInt32: s = copy_field<uint32_t>(proto.uint64_data(), t, what); break;
    case DataType::kUInt64: s = copy_field<uint64_t>(proto.uint64_data(), t, what); break;
    case DataType::kInt32: s = copy_field<int32_t>(proto.int32_data(), t, what); break;
    case DataType::kInt16: s = copy_field<int16_t>(proto.int32_data(), t, what); break;
    case DataType::kInt8: s = copy_field<int8_t>(proto.int32_data(), t, what); break;
    case DataType::kUInt16: s = copy_field<uint16_t>(proto.int32_data(), t, what); break;
    case DataType::kUInt8: s = copy_field<uint8_t>(proto.int32_data(), t, what); break;
    case DataType::kBool: s = copy_field<bool>(proto.int32_data(), t, what); break;
    case DataType::kFloat16: s = copy_field<Half>(proto.int32_data(), t, what); break;
    case DataType::kBFloat16: s = copy_field<BFloat16>(proto.int32_data(), t, what); break;
    case DataType::kFloat8E4M3FN: case DataType::kFloat8E4M3FNUZ: case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ: case DataType::kFloat8E8M0:
      s = copy_field<uint8_t>(proto.int32_data(), t, what);  // one bit pattern per int32
      break;
    default: return unsupported(what, ": dtype ", dtype_name(dt));
  }
  if (!s.is_ok()) return s;
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* proto) {
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) proto->add_dims(d);
  if (t.is_string()) {
    for (int64_t i = 0; i < t.size(); ++i) proto->add_string_data(t.data<std::string>()[i]);
    return;
  }
  if (packed_bits(t.dtype())) {
    proto->set_raw_data(pack_elements(t));
    return;
  }
  proto->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

Result<Tensor> read_tensor_pb(const std::string& path, std::string* name) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes)) return invalid_argument("'", path, "' is not a serialized ONNX TensorProto");
  if (name) *name = proto.name();
  std::string dir = std::filesystem::path(path).parent_path().string();
  return tensor_from_proto(proto, dir, cat("tensor file '", path, "'"));
}

namespace {

Result<Tensor> sequence_from_proto(const onnx::SequenceProto& sp, const std::string& dir, const std::string& what) {
  if (sp.elem_type() != onnx::SequenceProto::TENSOR && sp.tensor_values_size() == 0 && sp.elem_type() != 0) {
    return unsupported(what, ": only sequences of tensors are supported");
  }
  std::vector<Tensor> items;
  DataType elem = DataType::kUndefined;
  for (const auto& tp : sp.tensor_values()) {
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(tp, dir, what));
    elem = t.dtype();
    items.push_back(std::move(t));
  }
  return Tensor::sequence(elem, std::move(items));
}

}  // namespace

Result<Tensor> read_value_pb(const std::string& path, bool sequence, bool optional) {
  if (!sequence && !optional) return read_tensor_pb(path);
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  std::string dir = std::filesystem::path(path).parent_path().string();
  std::string what = cat("file '", path, "'");
  if (optional) {
    onnx::OptionalProto op;
    if (!op.ParseFromString(bytes)) return invalid_argument(what, " is not a serialized ONNX OptionalProto");
    if (op.has_tensor_value()) return tensor_from_proto(op.tensor_value(), dir, what);
    if (op.has_sequence_value()) return sequence_from_proto(op.sequence_value(), dir, what);
    return Tensor::none(DataType::kUndefined, sequence);
  }
  onnx::SequenceProto sp;
  if (!sp.ParseFromString(bytes)) return invalid_argument(what, " is not a serialized ONNX SequenceProto");
  return sequence_from_proto(sp, dir, what);
}

Status write_tensor_pb(const Tensor& t, const std::string& name, const std::string& path) {
  onnx::TensorProto proto;
  tensor_to_proto(t, name, &proto);
  std::ofstream f(path, std::ios::binary);
  if (!f || !proto.SerializeToOstream(&f)) return io_error("cannot write '", path, "'");
  return Status::ok();
}

namespace {

const char* npy_descr(DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return "<f4";
    case DataType::kFloat64: return "<f8";
    case DataType::kFloat16: return "<f2";
    case DataType::kInt8: return "|i1";
    case DataType::kInt16: return "<i2";
    case DataType::kInt32: return "<i4";
    case DataType::kInt64: return "<i8";
    case DataType::kUInt8: return "|u1";
    case DataType::kUInt16: return "<u2";
    case DataType::kUInt32: return "<u4";
    case DataType::kUInt64: return "<u8";
    case DataType::kBool: return "|b1";
    default: return nullptr;
  }
}

bool npy_dtype(const std::string& descr, DataType* out) {
  static const std::pair<const char*, DataType> table[] = {
      {"f4", DataType::kFloat32}, {"f8", DataType::kFloat64}, {"f2", DataType::kFloat16},
      {"i1", DataType::kInt8},    {"i2", DataType::kInt16},   {"i4", DataType::kInt32},
      {"i8", DataType::kInt64},   {"u1", DataType::kUInt8},   {"u2", DataType::kUInt16},
      {"u4", DataType::kUInt32},  {"u8", DataType::kUInt64},  {"b1", DataType::kBool},
  };
  if (descr.size() != 3 || descr[0] == '>') return false;  // big-endian not supported
  for (const auto& [code, dt] : table) {
    if (descr.substr(1) == code) { *out = dt; return true; }
  }
  return false;
}

}  // namespace

Result<Tensor> read_npy(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  auto bad = [&](const std::string& why) { return invalid_argument("'", path, "' is not a valid .npy file: ", why); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("missing magic");
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8;
    header_start = 10;
  } else {
    if (bytes.size() < 12) return bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  }
  if (header_start + header_len > bytes.size()) return bad("truncated header");
  std::string header = bytes.substr(header_start, header_len);
  auto field = [&](const std::string& key) -> std::string {
    size_t p = header.find("'" + key + "'");
    if (p == std::string::npos) return {};
    p = header.find(':', p);
    if (p == std::string::npos) return {};
    ++p;
    while (p < header.size() && header[p] == ' ') ++p;
    if (p >= header.size()) return {};
    if (header[p] == '\'') {
      size_t e = header.find('\'', p + 1);
      return e == std::string::npos ? std::string() : header.substr(p + 1, e - p - 1);
    }
    if (header[p] == '(') {
      size_t e = header.find(')', p);
      return e == std::string::npos ? std::string() : header.substr(p, e - p + 1);
    }
    size_t e = header.find_first_of(",}", p);
    return header.substr(p, e - p);
  };
  DataType dt;
  std::string descr = field("descr");
  if (!npy_dtype(descr, &dt)) return bad(cat("unsupported dtype '", descr, "'"));
  if (field("fortran_order").find("True") != std::string::npos) return bad("fortran_order arrays are not supported");
  std::string shape = field("shape");
  if (shape.empty() || shape.front() != '(') return bad("missing shape");
  Dims dims;
  std::string num;
  for (char c : shape.substr(1)) {
    if (c >= '0' && c <= '9') {
      num += c;
    } else if (c == ',' || c == ')') {
      if (!num.empty()) {
        if (num.size() > 15) return bad("dimension too large");
        dims.push_back(std::stoll(num));
      }
      num.clear();
    } else if (c != ' ' && c != 'L') {
      return bad("malformed shape");
    }
  }
  size_t data_start = header_start + header_len;
  long double need = static_cast<long double>(dtype_size(dt));
  for (int64_t d : dims) need *= static_cast<long double>(d);
  if (need > static_cast<long double>(bytes.size() - data_start)) {
    return bad(cat("data is truncated (", bytes.size() - data_start, " bytes for shape ", dims_str(dims), ")"));
  }
  Tensor t(dt, dims);
  if (t.nbytes()) std::memcpy(t.raw(), bytes.data() + data_start, t.nbytes());
  return t;
}

Status write_npy(const Tensor& t, const std::string& path) {
  Tensor src = t;
  if (t.dtype() == DataType::kBFloat16) src = cast_tensor(t, DataType::kFloat32);  // numpy has no bfloat16
  const char* descr = npy_descr(src.dtype());
  if (!descr) return unsupported("cannot write dtype ", dtype_name(t.dtype()), " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < src.dims().size(); ++i) shape += std::to_string(src.dims()[i]) + ",";
  if (src.dims().size() > 1) shape.pop_back();
  shape += ")";
  std::string header = cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return io_error("cannot write '", path, "'");
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char lenb[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  f.write(lenb, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(src.raw()), static_cast<std::streamsize>(src.nbytes()));
  if (!f) return io_error("failed writing '", path, "'");
  return Status::ok();
}

Result<Tensor> read_tensor_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open '", path, "'");
  char magic[6] = {};
  f.read(magic, 6);
  if (f.gcount() == 6 && std::memcmp(magic, "\x93NUMPY", 6) == 0) return read_npy(path);
  return read_tensor_pb(path);
}

}  // namespace kiln

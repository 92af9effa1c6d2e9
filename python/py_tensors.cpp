// Tensors across the Python boundary. Inputs: numpy arrays through __array_interface__,
// other frameworks through DLPack, both zero-copy for C-contiguous host memory; CUDA
// tensors through DLPack for CUDA engines (never copied). Outputs: numpy arrays viewing the
// output's storage, or kiln.Tensor objects that export it through DLPack (torch.from_dlpack,
// numpy.from_dlpack) and, on the host, __array_interface__.
//
// numpy has no bfloat16/float8/int4 dtypes; the ml_dtypes package (an onnx dependency)
// provides them, and kiln uses it when it is importable.
#include <cstring>
#include <sstream>

#include "py_common.h"

namespace kiln::pyapi {

using namespace pybind11::literals;

namespace {

using namespace dlpack;

struct DTypeInfo {
  DataType dt;
  const char* numpy_name;  // numpy / ml_dtypes dtype name
  const char* typestr;     // __array_interface__ of kiln's storage
  bool ml_dtypes;          // numpy's dtype comes from ml_dtypes
  uint8_t dl_code;         // DLPack code; kDLOpaqueHandle: none
  uint8_t dl_bits;
};

constexpr DTypeInfo kDTypes[] = {
    {DataType::kFloat32, "float32", "<f4", false, kDLFloat, 32},
    {DataType::kFloat64, "float64", "<f8", false, kDLFloat, 64},
    {DataType::kFloat16, "float16", "<f2", false, kDLFloat, 16},
    {DataType::kBFloat16, "bfloat16", "<u2", true, kDLBfloat, 16},
    {DataType::kInt8, "int8", "|i1", false, kDLInt, 8},
    {DataType::kInt16, "int16", "<i2", false, kDLInt, 16},
    {DataType::kInt32, "int32", "<i4", false, kDLInt, 32},
    {DataType::kInt64, "int64", "<i8", false, kDLInt, 64},
    {DataType::kUInt8, "uint8", "|u1", false, kDLUInt, 8},
    {DataType::kUInt16, "uint16", "<u2", false, kDLUInt, 16},
    {DataType::kUInt32, "uint32", "<u4", false, kDLUInt, 32},
    {DataType::kUInt64, "uint64", "<u8", false, kDLUInt, 64},
    {DataType::kBool, "bool", "|b1", false, kDLBool, 8},
    {DataType::kFloat8E4M3FN, "float8_e4m3fn", "|u1", true, kDLOpaqueHandle, 0},
    {DataType::kFloat8E4M3FNUZ, "float8_e4m3fnuz", "|u1", true, kDLOpaqueHandle, 0},
    {DataType::kFloat8E5M2, "float8_e5m2", "|u1", true, kDLOpaqueHandle, 0},
    {DataType::kFloat8E5M2FNUZ, "float8_e5m2fnuz", "|u1", true, kDLOpaqueHandle, 0},
    {DataType::kFloat8E8M0, "float8_e8m0fnu", "|u1", true, kDLOpaqueHandle, 0},
    {DataType::kFloat4E2M1, "float4_e2m1fn", "|u1", true, kDLOpaqueHandle, 0},
    {DataType::kUInt4, "uint4", "|u1", true, kDLOpaqueHandle, 0},
    {DataType::kUInt2, "uint2", "|u1", true, kDLOpaqueHandle, 0},
    // ml_dtypes keeps int4/int2 as their low bits; kiln sign-extends them into a byte.
    {DataType::kInt4, "int4", "|i1", true, kDLOpaqueHandle, 0},
    {DataType::kInt2, "int2", "|i1", true, kDLOpaqueHandle, 0},
};

const DTypeInfo* info_of(DataType dt) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.dt == dt) return &i;
  }
  return nullptr;
}

const DTypeInfo* info_of_numpy(const std::string& name) {
  for (const DTypeInfo& i : kDTypes) {
    if (name == i.numpy_name) return &i;
  }
  return nullptr;
}

bool is_sign_extended(DataType dt) { return dt == DataType::kInt4 || dt == DataType::kInt2; }

// Module handles live for the whole process: never destroyed at exit.
py::object& numpy() {
  static py::object* np = new py::object(py::module_::import("numpy"));
  return *np;
}

// ml_dtypes' dtype for `i`, or an UnsupportedError saying how to get it.
py::object ml_dtype(const DTypeInfo& i, const std::string& what) {
  static py::object* ml = nullptr;
  if (!ml) {
    try {
      ml = new py::object(py::module_::import("ml_dtypes"));
    } catch (py::error_already_set&) {
      throw_status(unsupported(what, " is ", dtype_name(i.dt), ", which numpy represents only with the ml_dtypes package "
                               "(pip install ml_dtypes); or use output=\"dlpack\""));
    }
  }
  return ml->attr(i.numpy_name);
}

// A tensor viewing a contiguous buffer; a dummy address for empty ones (bindings reject
// null buffers).
Tensor wrap(DataType dt, Dims dims, void* data) {
  static std::byte empty[16];
  return Tensor::wrap(dt, std::move(dims), data ? data : static_cast<void*>(empty));
}

Tensor from_numpy(const std::string& name, py::object arr, InputKeepAlive& keep) {
  py::object dtype = arr.attr("dtype");
  const std::string kind = py::str(dtype.attr("kind"));
  const std::string dname = py::str(dtype.attr("name"));
  if (kind == "U" || kind == "S" || kind == "O") {
    throw_status(unsupported("input '", name, "': ", dname, " arrays are not supported; engines take numeric tensors"));
  }
  const DTypeInfo* info = info_of_numpy(dname);
  if (!info) {
    throw_status(invalid_argument("input '", name, "': numpy dtype ", dname,
                                  " has no kiln equivalent (kiln takes float16/32/64, bfloat16, int8-64, uint8-64, "
                                  "bool and the ml_dtypes float8/int4 types)"));
  }
  if (std::string(py::str(dtype.attr("byteorder"))) == ">") arr = arr.attr("astype")(dtype.attr("newbyteorder")("="));
  if (is_sign_extended(info->dt)) {
    arr = arr.attr("astype")(numpy().attr("int8"));  // a copy, sign-extended
  } else if (info->ml_dtypes) {
    arr = arr.attr("view")(std::string(info->typestr) == "<u2" ? numpy().attr("uint16") : numpy().attr("uint8"));
  }
  py::object flags = arr.attr("flags");
  if (!flags.attr("c_contiguous").cast<bool>() || !flags.attr("aligned").cast<bool>()) {
    arr = arr.attr("copy")("C");
  }
  py::dict iface = arr.attr("__array_interface__");
  const auto ptr = py::tuple(iface["data"])[0].cast<uintptr_t>();
  Dims dims = dims_from_python(arr.attr("shape"), cat("input '", name, "'"));
  keep.objects.push_back(arr);
  return wrap(info->dt, std::move(dims), reinterpret_cast<void*>(ptr));
}

// `what`: "input 'x'".
DataType dtype_from_dlpack(const std::string& what, const DLDataType& t) {
  if (t.lanes == 1) {
    for (const DTypeInfo& i : kDTypes) {
      if (i.dl_code != kDLOpaqueHandle && i.dl_code == t.code && i.dl_bits == t.bits) return i.dt;
    }
  }
  throw_status(unsupported(what, ": DLPack dtype (code ", int(t.code), ", bits ", int(t.bits), ", lanes ", t.lanes,
                           ") has no kiln equivalent"));
}

// Takes the capsule __dlpack__ returned: kiln calls its deleter (through `keep`, once the
// run is over) instead of the capsule.
DLManagedTensor* consume_capsule(const std::string& what, const py::object& cap, InputKeepAlive& keep) {
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor")) {
    throw_status(invalid_argument(what, ": __dlpack__ did not return an unused DLPack capsule"));
  }
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (PyCapsule_SetName(cap.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  keep.dlpack.emplace_back(m);
  return m;
}

// Whether a DLPack tensor's strides (in elements; null: compact) are row-major compact.
// Dims of size 1 may have any stride; an empty tensor has nothing to read.
bool dlpack_is_compact(const DLTensor& t) {
  if (!t.strides) return true;
  int64_t expect = 1;
  for (int k = t.ndim; k-- > 0;) {
    if (t.shape[k] == 0) return true;
    if (t.shape[k] != 1 && t.strides[k] != expect) return false;
    expect *= t.shape[k];
  }
  return true;
}

// Copies a strided DLPack tensor into a new contiguous Tensor (strides in elements).
Tensor copy_strided(DataType dt, const Dims& dims, const std::byte* src, const int64_t* strides) {
  Tensor out(dt, dims);
  const size_t es = dtype_size(dt);
  const int64_t n = out.size();
  std::byte* dst = static_cast<std::byte*>(out.raw());
  Dims idx(dims.size(), 0);
  int64_t off = 0;  // element offset of idx in the source
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * es, src + off * static_cast<int64_t>(es), es);
    for (size_t k = dims.size(); k-- > 0;) {  // odometer step
      if (++idx[k] < dims[k]) {
        off += strides[k];
        break;
      }
      off -= strides[k] * (dims[k] - 1);
      idx[k] = 0;
    }
  }
  return out;
}

// The error for a tensor on a device this call cannot read (`what`: "input 'x'").
[[noreturn]] void throw_not_host(const std::string& what, int32_t type, int32_t id) {
  if (is_cuda_device(type) && !gpu::kCompiled) {
    throw_status(unsupported(what, " is on ", device_str(type, id),
                             ", but this build of kiln has no CUDA backend and takes host memory only: move it to the "
                             "CPU first (e.g. tensor.cpu())"));
  }
  throw_status(unsupported(what, " is on ", device_str(type, id),
                           ", but this call reads host memory only: move it to the CPU first (e.g. tensor.cpu())"));
}

Tensor from_dlpack(const std::string& name, py::handle value, InputKeepAlive& keep) {
  const std::string what = cat("input '", name, "'");
  const DLDevice dev = dlpack_device_of(value);
  if (dev.device_type != kDLCPU && dev.device_type != kDLCUDAHost) throw_not_host(what, dev.device_type, dev.device_id);
  DLManagedTensor* m = consume_capsule(what, value.attr("__dlpack__")(), keep);
  const DLTensor& t = m->dl_tensor;
  const DataType dt = dtype_from_dlpack(what, t.dtype);
  Dims dims(t.shape, t.shape + t.ndim);
  std::byte* data = static_cast<std::byte*>(t.data) + t.byte_offset;
  if (!dlpack_is_compact(t)) return copy_strided(dt, dims, data, t.strides);
  return wrap(dt, std::move(dims), data);
}

// kiln.Tensor: an output (or any kiln tensor) that Python frameworks can view. Host
// tensors hold `t`; device tensors (CUDA engine outputs) hold `mem` with `dtype` and
// `dims`, and `ready` while the run that writes them may still be queued.
struct PyTensor {
  Tensor t;
  std::shared_ptr<gpu::DeviceMemory> mem;
  DataType dtype = DataType::kUndefined;
  Dims dims;
  std::shared_ptr<gpu::Event> ready;

  bool on_device() const { return mem != nullptr; }
  DataType get_dtype() const { return on_device() ? dtype : t.dtype(); }
  const Dims& get_dims() const { return on_device() ? dims : t.dims(); }
  std::string device() const { return on_device() ? device_str(kDLCUDA, mem->device()) : "cpu"; }
  std::string describe() const {
    return on_device() ? cat(dtype_name(dtype), dims_str(dims), " on ", device()) : t.describe();
  }
};

// What a DLPack capsule exported from a kiln.Tensor owns: the host tensor (sharing its
// storage) or the device memory.
struct DLExport {
  Tensor t;
  std::shared_ptr<gpu::DeviceMemory> mem;
  std::vector<int64_t> shape;
  DLManagedTensor m{};
};

void dl_export_deleter(DLManagedTensor* self) { delete static_cast<DLExport*>(self->manager_ctx); }

void dl_capsule_destructor(PyObject* cap) {
  // An unconsumed capsule still owns its tensor.
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

// A DLPack capsule over `e` (filled in but for the tensor fields set here); the capsule
// owns it until a consumer takes it.
py::object make_capsule(DLExport* e, void* data, DLDevice device, const DTypeInfo& info) {
  e->m.dl_tensor.data = data;
  e->m.dl_tensor.device = device;
  e->m.dl_tensor.ndim = static_cast<int32_t>(e->shape.size());
  e->m.dl_tensor.dtype = {info.dl_code, info.dl_bits, 1};
  e->m.dl_tensor.shape = e->shape.data();
  e->m.dl_tensor.strides = nullptr;
  e->m.dl_tensor.byte_offset = 0;
  e->m.manager_ctx = e;
  e->m.deleter = dl_export_deleter;
  PyObject* cap = PyCapsule_New(&e->m, "dltensor", dl_capsule_destructor);
  if (!cap) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

const DTypeInfo& dlpack_info(DataType dt) {
  const DTypeInfo* info = info_of(dt);
  if (!info || info->dl_code == kDLOpaqueHandle) {
    throw_status(unsupported("DLPack has no type code for ", dtype_name(dt), "; use .numpy() (needs ml_dtypes)"));
  }
  return *info;
}

py::object to_dlpack_capsule(const Tensor& t) {
  if (t.is_string()) throw_status(unsupported("DLPack has no type code for string tensors"));
  const DTypeInfo& info = dlpack_info(t.dtype());
  auto* e = new DLExport;
  e->t = t;
  e->shape = t.dims();
  return make_capsule(e, e->t.raw(), {kDLCPU, 0}, info);
}

// The device memory is shared with the capsule: it stays allocated while either lives.
py::object to_dlpack_capsule(const PyTensor& p) {
  const DTypeInfo& info = dlpack_info(p.dtype);
  auto* e = new DLExport;
  e->mem = p.mem;
  e->shape = p.dims;
  return make_capsule(e, p.mem->data(), {kDLCUDA, p.mem->device()}, info);
}

py::dict array_interface(const Tensor& t) {
  const DTypeInfo* info = info_of(t.dtype());
  if (!info) throw_status(unsupported("a ", dtype_name(t.dtype()), " tensor has no array interface"));
  py::dict d;
  d["version"] = 3;
  d["shape"] = py::tuple(py::cast(t.dims()));
  d["typestr"] = info->typestr;
  d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(t.raw()), false);
  d["strides"] = py::none();
  return d;
}

// A host copy of a device tensor, once the run writing it has finished.
std::shared_ptr<PyTensor> host_copy(const PyTensor& p) {
  auto h = std::make_shared<PyTensor>();
  h->t = Tensor(p.dtype, p.dims);
  Status st;
  {
    py::gil_scoped_release nogil;
    if (p.ready) st = p.ready->wait();
    if (st.is_ok()) st = gpu::copy_to_host(h->t.raw(), p.mem->data(), h->t.nbytes());
  }
  check(st);
  return h;
}

// numpy array over the tensor's storage (the array keeps `holder` alive); for a device
// tensor, over a host copy.
py::object numpy_of(const std::string& what, const std::shared_ptr<PyTensor>& holder) {
  if (holder->on_device()) return numpy_of(what, host_copy(*holder));
  const Tensor& t = holder->t;
  if (t.is_string()) {
    py::list items;
    for (int64_t i = 0; i < t.size(); ++i) items.append(py::str(t.data<std::string>()[i]));
    return numpy().attr("array")(items, "dtype"_a = "object").attr("reshape")(py::cast(t.dims()));
  }
  const DTypeInfo* info = info_of(t.dtype());
  if (!info) throw_status(unsupported(what, " has dtype ", dtype_name(t.dtype()), ", which has no numpy form"));
  py::object final_dtype = info->ml_dtypes ? ml_dtype(*info, what) : numpy().attr("dtype")(info->numpy_name);
  if (t.size() == 0) return numpy().attr("empty")(py::cast(t.dims()), final_dtype);
  py::object raw = numpy().attr("asarray")(py::cast(holder));
  if (!info->ml_dtypes) return raw;
  if (is_sign_extended(t.dtype())) return raw.attr("astype")(final_dtype);
  return raw.attr("view")(final_dtype);
}

}  // namespace

py::tuple dims_to_tuple(const Dims& d) {
  py::list l;
  for (int64_t x : d) {
    if (x < 0) l.append(py::none());
    else l.append(x);
  }
  return py::tuple(l);
}

Dims dims_from_python(py::handle seq, const std::string& what) {
  Dims d;
  try {
    if (py::isinstance<py::str>(seq)) throw py::type_error("not a sequence of ints");
    for (py::handle x : seq) d.push_back(py::int_(x.attr("__index__")()).cast<int64_t>());
  } catch (py::error_already_set&) {
    throw_status(invalid_argument(what, ": expected a sequence of ints, got ", std::string(py::repr(seq))));
  } catch (py::type_error&) {
    throw_status(invalid_argument(what, ": expected a sequence of ints, got ", std::string(py::repr(seq))));
  }
  return d;
}

std::string device_str(int32_t type, int32_t id) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return cat("cuda:", id);
    case kDLCUDAHost: return cat("cuda:", id, " (pinned host memory)");
    case kDLCUDAManaged: return cat("cuda:", id, " (managed memory)");
    case kDLROCM: return cat("rocm:", id);
    case kDLOpenCL: return cat("opencl:", id);
    case kDLVulkan: return cat("vulkan:", id);
    case kDLMetal: return cat("metal:", id);
    case kDLOneAPI: return cat("oneapi:", id);
    default: return cat("DLPack device type ", type, ":", id);
  }
}

bool dlpack_has_dtype(DataType dt) {
  const DTypeInfo* info = info_of(dt);
  return info && info->dl_code != kDLOpaqueHandle;
}

bool is_cuda_device(int32_t device_type) { return device_type == kDLCUDA || device_type == kDLCUDAManaged; }

DLDevice dlpack_device_of(py::handle value) {
  if (py::isinstance<PyTensor>(value)) {
    const PyTensor& p = value.cast<const PyTensor&>();
    return p.on_device() ? DLDevice{kDLCUDA, p.mem->device()} : DLDevice{kDLCPU, 0};
  }
  static py::object* ndarray = new py::object(numpy().attr("ndarray"));  // never freed
  if (py::isinstance(value, *ndarray)) return {kDLCPU, 0};
  if (!py::hasattr(value, "__dlpack__") || !py::hasattr(value, "__dlpack_device__")) return {kDLCPU, 0};
  py::tuple dev = value.attr("__dlpack_device__")();
  return {dev[0].cast<int32_t>(), dev[1].cast<int32_t>()};
}

DeviceTensorRef device_tensor_from_dlpack(const std::string& what, py::handle value, int64_t dlpack_stream, int device,
                                          InputKeepAlive& keep) {
  py::object cap;
  try {
    cap = value.attr("__dlpack__")("stream"_a = dlpack_stream);
  } catch (py::error_already_set& e) {
    // kiln's own errors, KeyboardInterrupt and the like stand; a producer's refusal (a
    // torch tensor that requires grad) gets the name of the tensor.
    if (!e.matches(PyExc_Exception) || e.matches(error_class(StatusCode::kOk))) throw;
    throw_status(invalid_argument(what, ": its __dlpack__(stream=", dlpack_stream, ") failed: ", e.what()));
  }
  DLManagedTensor* m = consume_capsule(what, cap, keep);
  const DLTensor& t = m->dl_tensor;
  if (!is_cuda_device(t.device.device_type) || t.device.device_id != device) {
    throw_status(invalid_argument(what, ": __dlpack__ gave a tensor on ", device_str(t.device.device_type, t.device.device_id),
                                  ", expected cuda:", device));
  }
  DeviceTensorRef r;
  r.dtype = dtype_from_dlpack(what, t.dtype);
  r.dims.assign(t.shape, t.shape + t.ndim);
  for (int64_t d : r.dims) {
    if (d < 0) throw_status(invalid_argument(what, ": DLPack shape ", dims_str(r.dims), " has a negative dimension"));
  }
  r.nbytes = static_cast<size_t>(num_elements(r.dims)) * dtype_size(r.dtype);
  if (!dlpack_is_compact(t)) {
    const Dims strides(t.strides, t.strides + t.ndim);
    throw_status(invalid_argument(what, " is a non-contiguous ", device_str(t.device.device_type, t.device.device_id),
                                  " tensor (shape ", dims_str(r.dims), ", strides ", dims_str(strides),
                                  "): kiln reads GPU tensors in place and never copies them, so they must be "
                                  "C-contiguous; pass a contiguous one (torch: x.contiguous(), cupy: "
                                  "cupy.ascontiguousarray(x))"));
  }
  if (r.nbytes == 0) {
    r.data = unwrap(gpu::empty_placeholder(device));
    return r;
  }
  void* data = static_cast<std::byte*>(t.data) + t.byte_offset;
  if (reinterpret_cast<uintptr_t>(data) % 256 != 0) {
    throw_status(invalid_argument(what, ": its device address ", data, " is not 256-byte aligned (a view into a larger "
                                  "tensor?); kiln's CUDA kernels are planned for 256-byte-aligned buffers, as cudaMalloc "
                                  "returns them: pass a tensor with memory of its own (torch: x.clone())"));
  }
  check(gpu::check_device_pointer(data, device, what));
  r.data = data;
  return r;
}

py::object device_tensor_to_python(DataType dtype, Dims dims, std::shared_ptr<gpu::DeviceMemory> mem,
                                   std::shared_ptr<gpu::Event> ready) {
  auto p = std::make_shared<PyTensor>();
  p->mem = std::move(mem);
  p->dtype = dtype;
  p->dims = std::move(dims);
  p->ready = std::move(ready);
  return py::cast(p);
}

StreamArg stream_from_python(py::handle s) {
  StreamArg r;
  if (s.is_none()) return r;
  py::object v = py::reinterpret_borrow<py::object>(s);
  if (py::hasattr(v, "__cuda_stream__")) v = py::tuple(v.attr("__cuda_stream__")())[1];
  else if (py::hasattr(v, "cuda_stream")) v = v.attr("cuda_stream");
  else if (py::hasattr(v, "ptr")) v = v.attr("ptr");
  uintptr_t h = 0;
  try {
    h = v.cast<uintptr_t>();
  } catch (const py::cast_error&) {
    throw_status(invalid_argument("stream: expected None, an int (a cudaStream_t) or a CUDA stream object "
                                  "(torch.cuda.Stream, cupy.cuda.Stream), got ", std::string(py::repr(s))));
  }
  r.given = true;
  if (h == 0 || h == 1) {  // 0: the default stream of a program built as torch and cupy are
    r.handle = gpu::kLegacyStream;
    r.dlpack = 1;
  } else if (h == 2) {
    r.handle = gpu::kPerThreadStream;
    r.dlpack = 2;
  } else {
    r.handle = reinterpret_cast<void*>(h);
    r.dlpack = static_cast<int64_t>(h);
  }
  return r;
}

Tensor tensor_from_python(const std::string& name, py::handle value, const TensorDesc* expected, InputKeepAlive& keep) {
  if (py::isinstance<PyTensor>(value)) {
    const PyTensor& p = value.cast<const PyTensor&>();
    if (p.on_device()) throw_not_host(cat("input '", name, "'"), kDLCUDA, p.mem->device());
    keep.objects.push_back(py::reinterpret_borrow<py::object>(value));
    return p.t;  // shares the storage
  }
  static py::object* ndarray = new py::object(numpy().attr("ndarray"));  // never freed
  if (py::isinstance(value, *ndarray)) return from_numpy(name, py::reinterpret_borrow<py::object>(value), keep);
  if (py::hasattr(value, "__dlpack__") && py::hasattr(value, "__dlpack_device__")) {
    try {
      return from_dlpack(name, value, keep);
    } catch (py::error_already_set& e) {
      // A kiln error (wrong device, dtype) stands; a producer that cannot export this
      // tensor (torch 1.x and bool) may still convert through numpy.
      if (e.matches(error_class(StatusCode::kOk)) || !py::hasattr(value, "__array__")) throw;
    }
  }
  // Lists, scalars, objects with __array__: numpy converts them (a copy), in the
  // engine's dtype where kiln knows it.
  py::object dtype = py::none();
  if (expected) {
    const DTypeInfo* info = info_of(expected->dtype);
    if (info) dtype = info->ml_dtypes ? ml_dtype(*info, cat("input '", name, "'")) : numpy().attr("dtype")(info->numpy_name);
  }
  py::object arr;
  try {
    arr = numpy().attr("asarray")(value, "dtype"_a = dtype);
  } catch (py::error_already_set& e) {
    throw_status(invalid_argument("input '", name, "': cannot convert ", std::string(py::str(py::type::of(value))),
                                  " to an array: ", e.what()));
  }
  return from_numpy(name, arr, keep);
}

OutputKind parse_output_kind(const std::string& s) {
  if (s == "numpy") return OutputKind::kNumpy;
  if (s == "dlpack") return OutputKind::kDLPack;
  throw_status(invalid_argument("output must be \"numpy\" or \"dlpack\", got \"", s, "\""));
}

py::object tensor_to_python(const std::string& name, const Tensor& t, OutputKind kind) {
  if (t.is_none()) return py::none();
  if (t.is_sequence()) {
    py::list l;
    for (size_t i = 0; i < t.items().size(); ++i) l.append(tensor_to_python(cat(name, "[", i, "]"), t.items()[i], kind));
    return l;
  }
  auto holder = std::make_shared<PyTensor>();
  holder->t = t;
  if (kind == OutputKind::kDLPack && !t.is_string()) return py::cast(holder);
  return numpy_of(cat("output '", name, "'"), holder);
}

namespace {

// The stream a DLPack consumer names (array API: None and 1 the legacy default stream,
// 2 the per-thread default stream, -1 no synchronization: null here).
void* consumer_stream(const py::object& stream) {
  if (stream.is_none()) return gpu::kLegacyStream;
  int64_t v = 0;
  try {
    v = stream.cast<int64_t>();
  } catch (const py::cast_error&) {
    throw_status(invalid_argument("__dlpack__: stream must be None or an int, got ", std::string(py::repr(stream))));
  }
  if (v == -1) return nullptr;
  if (v < -1) throw_status(invalid_argument("__dlpack__: stream must be -1 or more, got ", v));
  if (v == 0 || v == 1) return gpu::kLegacyStream;
  if (v == 2) return gpu::kPerThreadStream;
  return reinterpret_cast<void*>(static_cast<uintptr_t>(v));
}

py::object export_dlpack(const PyTensor& p, const py::object& stream, const py::object& dl_device, const py::object& copy) {
  const bool want_copy = !copy.is_none() && copy.cast<bool>();
  if (!p.on_device()) {
    if (!dl_device.is_none()) {
      py::tuple d = dl_device;
      if (d[0].cast<int32_t>() != kDLCPU) throw_status(unsupported("this kiln.Tensor lives on the CPU"));
    }
    return to_dlpack_capsule(want_copy ? p.t.clone() : p.t);
  }
  if (!dl_device.is_none()) {
    py::tuple d = dl_device;
    if (d[0].cast<int32_t>() != kDLCUDA || d[1].cast<int32_t>() != p.mem->device()) {
      throw_status(unsupported("this kiln.Tensor is on ", p.device(), " and exports only there: copy it with the "
                               "consumer (e.g. torch.from_dlpack(t).cpu())"));
    }
  }
  if (want_copy) {
    throw_status(unsupported("a kiln.Tensor on ", p.device(), " exports its own memory only (copy=True): copy it with the "
                             "consumer, e.g. torch.from_dlpack(t).clone()"));
  }
  if (p.ready) {
    void* s = consumer_stream(stream);
    if (s) check(p.ready->make_stream_wait(s));  // the consumer's stream waits for the run
  }
  return to_dlpack_capsule(p);
}

// numpy.asarray(t) of a GPU kiln.Tensor: numpy reads __array_interface__ (then __array__),
// neither of which can describe device memory.
[[noreturn]] void throw_gpu_array_error(const PyTensor& p) {
  throw_status(unsupported("this kiln.Tensor is on ", p.device(), ": numpy cannot view GPU memory; use t.numpy() for a ",
                           "host copy, or torch.from_dlpack(t) / cupy.from_dlpack(t)"));
}
}  // namespace

void register_tensor(py::module_& m) {
  py::class_<PyTensor, std::shared_ptr<PyTensor>>(m, "Tensor", R"doc(
A tensor kiln owns: an engine output with output="dlpack", on the CPU, or on the GPU for a
CUDA engine run on GPU tensors (device memory kiln allocated, freed when the last view of
it goes).

Frameworks view it without copying through DLPack: ``torch.from_dlpack(t)`` (CPU and GPU),
``cupy.from_dlpack(t)`` (GPU; the consumer's stream waits for the run that writes it),
``numpy.from_dlpack(t)`` (CPU); and on the CPU ``numpy.asarray(t)`` (array interface;
bfloat16/float8 as their raw bits). ``t.numpy()`` gives a numpy array with the ml_dtypes dtype for
bfloat16/float8/int4 (for a GPU tensor: a host copy, made once its run has finished).
It can also be passed back to ExecutionContext.run without a copy.)doc")
      .def_property_readonly("shape", [](const PyTensor& p) { return py::tuple(py::cast(p.get_dims())); },
                             "The dims, as a tuple of ints.")
      .def_property_readonly("dtype", [](const PyTensor& p) { return std::string(dtype_name(p.get_dtype())); },
                             "kiln's dtype name: 'float32', 'bfloat16', 'int64', ...")
      .def_property_readonly(
          "nbytes",
          [](const PyTensor& p) {
            return p.on_device() ? static_cast<size_t>(num_elements(p.dims)) * dtype_size(p.dtype) : p.t.nbytes();
          },
          "Bytes of storage.")
      .def_property_readonly("device", &PyTensor::device, "Where the data lives: 'cpu' or 'cuda:N'.")
      .def("numpy", [](const std::shared_ptr<PyTensor>& p) { return numpy_of("tensor", p); },
           "A numpy array viewing the data (a copy for int4/int2, and for GPU tensors).")
      .def_property_readonly("__array_interface__",
                             [](const PyTensor& p) {
                               if (p.on_device()) {
                                 throw_gpu_array_error(p);  // numpy asks for this first
                               }
                               return array_interface(p.t);
                             })
      .def(
          "__array__",
          [](const py::object& self, const py::object& dtype, const py::object& copy) {
            const PyTensor& p = self.cast<const PyTensor&>();
            if (p.on_device()) {
              throw_gpu_array_error(p);
            }
            // numpy reads host tensors through __array_interface__ (it asks for that first).
            if (!copy.is_none() && copy.cast<bool>()) return numpy().attr("array")(self, "dtype"_a = dtype, "copy"_a = true);
            return numpy().attr("asarray")(self, "dtype"_a = dtype);
          },
          "dtype"_a = py::none(), "copy"_a = py::none())
      .def(
          "__dlpack__",
          [](const PyTensor& p, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
            return export_dlpack(p, stream, dl_device, copy);
          },
          py::kw_only(), "stream"_a = py::none(), "max_version"_a = py::none(), "dl_device"_a = py::none(),
          "copy"_a = py::none(), R"doc(
Exports the tensor as a DLPack capsule (zero-copy). For a GPU tensor, `stream` (the
consumer's stream, array-API numbering: None or 1 the legacy default stream, 2 the
per-thread one, -1 none) is made to wait for the run that writes the tensor.)doc")
      .def("__dlpack_device__",
           [](const PyTensor& p) {
             return p.on_device() ? py::make_tuple(static_cast<int>(kDLCUDA), p.mem->device())
                                  : py::make_tuple(static_cast<int>(kDLCPU), 0);
           })
      .def("__repr__", [](const PyTensor& p) { return cat("kiln.Tensor(", p.describe(), ")"); });
}

}  // namespace kiln::pyapi

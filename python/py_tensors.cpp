// Tensors across the Python boundary. Inputs: numpy arrays through __array_interface__,
// other frameworks through DLPack, both zero-copy for C-contiguous host memory. Outputs:
// numpy arrays viewing the output's storage, or kiln.Tensor objects that export it through
// DLPack (torch.from_dlpack, numpy.from_dlpack) and __array_interface__.
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

std::string device_str(int32_t type, int32_t id) {
  switch (type) {
    case kDLCUDA: return cat("cuda:", id);
    case kDLCUDAManaged: return cat("cuda:", id, " (managed memory)");
    case kDLROCM: return cat("rocm:", id);
    case kDLOpenCL: return cat("opencl:", id);
    case kDLVulkan: return cat("vulkan:", id);
    case kDLMetal: return cat("metal:", id);
    case kDLOneAPI: return cat("oneapi:", id);
    default: return cat("DLPack device type ", type, ":", id);
  }
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

DataType dtype_from_dlpack(const std::string& name, const DLDataType& t) {
  if (t.lanes == 1) {
    for (const DTypeInfo& i : kDTypes) {
      if (i.dl_code != kDLOpaqueHandle && i.dl_code == t.code && i.dl_bits == t.bits) return i.dt;
    }
  }
  throw_status(unsupported("input '", name, "': DLPack dtype (code ", int(t.code), ", bits ", int(t.bits), ", lanes ",
                           t.lanes, ") has no kiln equivalent"));
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

Tensor from_dlpack(const std::string& name, py::handle value, InputKeepAlive& keep) {
  py::tuple dev = value.attr("__dlpack_device__")();
  const int32_t type = dev[0].cast<int32_t>(), id = dev[1].cast<int32_t>();
  if (type != kDLCPU && type != kDLCUDAHost) {
    throw_status(unsupported("input '", name, "' is on ", device_str(type, id),
                             ", but this build of kiln has no CUDA backend and takes host memory only: move it to the "
                             "CPU first (e.g. tensor.cpu())"));
  }
  py::object cap = value.attr("__dlpack__")();
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor")) {
    throw_status(invalid_argument("input '", name, "': __dlpack__ did not return an unused DLPack capsule"));
  }
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  // Consume it: from now on kiln calls the deleter (after the run), not the capsule.
  if (PyCapsule_SetName(cap.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  keep.dlpack.emplace_back(m);
  const DLTensor& t = m->dl_tensor;
  const DataType dt = dtype_from_dlpack(name, t.dtype);
  Dims dims(t.shape, t.shape + t.ndim);
  std::byte* data = static_cast<std::byte*>(t.data) + t.byte_offset;
  bool contiguous = true;
  if (t.strides) {
    int64_t expect = 1;
    for (int k = t.ndim; k-- > 0;) {
      if (dims[static_cast<size_t>(k)] == 0) {
        contiguous = true;  // empty: nothing to read
        break;
      }
      if (dims[static_cast<size_t>(k)] != 1 && t.strides[k] != expect) contiguous = false;
      expect *= dims[static_cast<size_t>(k)];
    }
  }
  if (!contiguous) {
    Tensor copy = copy_strided(dt, dims, data, t.strides);
    return copy;
  }
  return wrap(dt, std::move(dims), data);
}

// kiln.Tensor: an output (or any kiln tensor) that Python frameworks can view.
struct PyTensor {
  Tensor t;
};

struct DLExport {
  Tensor t;
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

py::object to_dlpack_capsule(const Tensor& t) {
  const DTypeInfo* info = info_of(t.dtype());
  if (!info || info->dl_code == kDLOpaqueHandle || t.is_string()) {
    throw_status(unsupported("DLPack has no type code for ", dtype_name(t.dtype()), "; use .numpy() (needs ml_dtypes)"));
  }
  auto* e = new DLExport{t, t.dims(), {}};
  e->m.dl_tensor.data = e->t.raw();
  e->m.dl_tensor.device = {kDLCPU, 0};
  e->m.dl_tensor.ndim = static_cast<int32_t>(e->shape.size());
  e->m.dl_tensor.dtype = {info->dl_code, info->dl_bits, 1};
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

// numpy array over the tensor's storage (the array keeps `holder` alive).
py::object numpy_of(const std::string& what, const std::shared_ptr<PyTensor>& holder) {
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

Tensor tensor_from_python(const std::string& name, py::handle value, const TensorDesc* expected, InputKeepAlive& keep) {
  if (py::isinstance<PyTensor>(value)) {
    keep.objects.push_back(py::reinterpret_borrow<py::object>(value));
    return value.cast<PyTensor&>().t;  // shares the storage
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
  auto holder = std::make_shared<PyTensor>(PyTensor{t});
  if (kind == OutputKind::kDLPack && !t.is_string()) return py::cast(holder);
  return numpy_of(cat("output '", name, "'"), holder);
}

void register_tensor(py::module_& m) {
  py::class_<PyTensor, std::shared_ptr<PyTensor>>(m, "Tensor", R"doc(
A tensor kiln owns (an engine output with output="dlpack"), on the CPU.

Frameworks view it without copying: ``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)``
(DLPack), ``numpy.asarray(t)`` (array interface; bfloat16/float8 as their raw bits).
``t.numpy()`` gives a numpy array with the ml_dtypes dtype for bfloat16/float8/int4.
It can also be passed back to ExecutionContext.run without a copy.)doc")
      .def_property_readonly("shape", [](const PyTensor& p) { return py::tuple(py::cast(p.t.dims())); },
                             "The dims, as a tuple of ints.")
      .def_property_readonly("dtype", [](const PyTensor& p) { return std::string(dtype_name(p.t.dtype())); },
                             "kiln's dtype name: 'float32', 'bfloat16', 'int64', ...")
      .def_property_readonly("nbytes", [](const PyTensor& p) { return p.t.nbytes(); }, "Bytes of storage.")
      .def_property_readonly("device", [](const PyTensor&) { return std::string("cpu"); }, "Where the data lives.")
      .def("numpy", [](const std::shared_ptr<PyTensor>& p) { return numpy_of("tensor", p); },
           "A numpy array viewing the data (a copy for int4/int2).")
      .def_property_readonly("__array_interface__", [](const PyTensor& p) { return array_interface(p.t); })
      .def(
          "__dlpack__",
          [](const PyTensor& p, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
            if (!dl_device.is_none()) {
              py::tuple d = dl_device;
              if (d[0].cast<int32_t>() != kDLCPU) throw_status(unsupported("kiln tensors live on the CPU"));
            }
            if (!copy.is_none() && copy.cast<bool>()) return to_dlpack_capsule(p.t.clone());
            return to_dlpack_capsule(p.t);
          },
          py::kw_only(), "stream"_a = py::none(), "max_version"_a = py::none(), "dl_device"_a = py::none(),
          "copy"_a = py::none(), "Exports the tensor as a DLPack capsule (zero-copy).")
      .def("__dlpack_device__", [](const PyTensor&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); })
      .def("__repr__", [](const PyTensor& p) { return cat("kiln.Tensor(", p.t.describe(), ")"); });
}

}  // namespace kiln::pyapi

// kiln.KilnError and its subclasses. Each also derives from the built-in exception a
// Python user would expect (ValueError for bad arguments, OSError for file problems...),
// so `except ValueError` keeps working around kiln calls.
#include "py_common.h"

namespace kiln::pyapi {

namespace {

// Owned by the module for the life of the process (never decref'd at exit, when the
// interpreter may already be gone).
PyObject* g_classes[7] = {};

PyObject* make_class(const char* name, const char* doc, PyObject* bases) {
  PyObject* cls = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  return cls;
}

}  // namespace

void register_errors(py::module_& m) {
  PyObject* base = make_class("kiln.KilnError", "Base class of the errors kiln raises; str() is kiln's message.",
                              PyExc_RuntimeError);
  auto sub = [&](StatusCode code, const char* qualname, const char* doc, PyObject* builtin) {
    py::tuple bases = py::make_tuple(py::handle(base), py::handle(builtin));
    g_classes[static_cast<int>(code)] = make_class(qualname, doc, bases.ptr());
  };
  g_classes[static_cast<int>(StatusCode::kOk)] = base;
  sub(StatusCode::kInvalidArgument, "kiln.InvalidArgumentError",
      "A bad argument: unknown input, wrong dtype or shape, invalid option.", PyExc_ValueError);
  sub(StatusCode::kInvalidModel, "kiln.InvalidModelError", "The model (or engine file) is malformed or inconsistent.",
      PyExc_ValueError);
  sub(StatusCode::kUnsupported, "kiln.UnsupportedError",
      "Valid, but not supported by this build of kiln (an op, a dtype, a device).", PyExc_NotImplementedError);
  sub(StatusCode::kNotFound, "kiln.NotFoundError", "Something named was not found.", PyExc_LookupError);
  sub(StatusCode::kIoError, "kiln.KilnIOError", "A file could not be read or written.", PyExc_OSError);
  {
    // Internal errors are kiln bugs: no second base.
    g_classes[static_cast<int>(StatusCode::kInternal)] =
        make_class("kiln.InternalError", "An internal error in kiln (please report it).", base);
  }
  m.attr("KilnError") = py::handle(base);
  m.attr("InvalidArgumentError") = py::handle(g_classes[static_cast<int>(StatusCode::kInvalidArgument)]);
  m.attr("InvalidModelError") = py::handle(g_classes[static_cast<int>(StatusCode::kInvalidModel)]);
  m.attr("UnsupportedError") = py::handle(g_classes[static_cast<int>(StatusCode::kUnsupported)]);
  m.attr("NotFoundError") = py::handle(g_classes[static_cast<int>(StatusCode::kNotFound)]);
  m.attr("KilnIOError") = py::handle(g_classes[static_cast<int>(StatusCode::kIoError)]);
  m.attr("InternalError") = py::handle(g_classes[static_cast<int>(StatusCode::kInternal)]);
}

py::handle error_class(StatusCode code) {
  const int i = static_cast<int>(code);
  PyObject* cls = i >= 0 && i < 7 ? g_classes[i] : nullptr;
  return py::handle(cls ? cls : g_classes[0]);
}

void throw_status(const Status& s) {
  PyErr_SetString(error_class(s.code()).ptr(), s.message().c_str());
  throw py::error_already_set();
}

}  // namespace kiln::pyapi

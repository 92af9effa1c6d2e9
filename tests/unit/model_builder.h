// Small helpers to build ONNX ModelProtos in tests.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace kiln::testing {

inline onnx::ModelProto make_model(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  m.mutable_graph()->set_name("test");
  return m;
}

inline void add_value_info(onnx::ValueInfoProto* vi, const std::string& name, int elem_type,
                           const std::vector<std::string>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && d.find_first_not_of("0123456789") == std::string::npos) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

inline void add_input(onnx::ModelProto& m, const std::string& name, int elem_type, const std::vector<std::string>& dims) {
  add_value_info(m.mutable_graph()->add_input(), name, elem_type, dims);
}
inline void add_output(onnx::ModelProto& m, const std::string& name, int elem_type, const std::vector<std::string>& dims) {
  add_value_info(m.mutable_graph()->add_output(), name, elem_type, dims);
}

inline onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, const std::vector<std::string>& inputs,
                                 const std::vector<std::string>& outputs, const std::string& name = "",
                                 const std::string& domain = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  n->set_domain(domain);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

inline void add_ints_attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

inline void add_float_attr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

inline onnx::TensorProto* add_initializer_f32(onnx::ModelProto& m, const std::string& name,
                                              const std::vector<int64_t>& dims, const std::vector<float>& values) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
  return t;
}

}  // namespace kiln::testing

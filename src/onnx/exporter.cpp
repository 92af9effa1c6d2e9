#include "onnx/exporter.h"

#include <onnx/onnx_pb.h>

#include <fstream>

#include "onnx/tensor_io.h"

namespace kiln {

namespace {

void set_type(const Value& v, onnx::ValueInfoProto* vi) {
  vi->set_name(v.name());
  onnx::TypeProto* t = vi->mutable_type();
  if (v.is_optional) t = t->mutable_optional_type()->mutable_elem_type();
  if (v.is_sequence) t = t->mutable_sequence_type()->mutable_elem_type();
  auto* tt = t->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (!v.shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : *v.shape) {
    auto* dim = shape->add_dim();
    if (d.known()) dim->set_dim_value(d.value);
    else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
  }
}

bool is_kiln_node(const Node& n) {
  if (n.onnx_op_type.empty() || n.onnx_domain == "kiln") return true;  // created by a pass
  for (const auto& [name, a] : n.attrs.all()) {
    if (name.rfind("kiln_", 0) == 0) return true;  // canonical form with no ONNX equivalent
  }
  return false;
}

Status export_graph(const Graph& g, onnx::GraphProto* gp, const WeightSink* weights);

Status export_attribute(const std::string& name, const Attribute& a, onnx::AttributeProto* ap,
                        const WeightSink* weights) {
  using AP = onnx::AttributeProto;
  ap->set_name(name);
  Status st;
  std::visit([&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, int64_t>) {
      ap->set_type(AP::INT);
      ap->set_i(v);
    } else if constexpr (std::is_same_v<V, float>) {
      ap->set_type(AP::FLOAT);
      ap->set_f(v);
    } else if constexpr (std::is_same_v<V, std::string>) {
      ap->set_type(AP::STRING);
      ap->set_s(v);
    } else if constexpr (std::is_same_v<V, Tensor>) {
      ap->set_type(AP::TENSOR);
      tensor_to_proto(v, "", ap->mutable_t());
    } else if constexpr (std::is_same_v<V, std::shared_ptr<Graph>>) {
      ap->set_type(AP::GRAPH);
      st = export_graph(*v, ap->mutable_g(), weights);
    } else if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
      ap->set_type(AP::INTS);
      for (int64_t x : v) ap->add_ints(x);
    } else if constexpr (std::is_same_v<V, std::vector<float>>) {
      ap->set_type(AP::FLOATS);
      for (float x : v) ap->add_floats(x);
    } else {
      ap->set_type(AP::STRINGS);
      for (const auto& x : v) ap->add_strings(x);
    }
  }, a.value);
  return st;
}

// An initializer whose bytes the sink stores elsewhere: dtype, dims and the reference only.
bool export_external(const Tensor& t, const std::string& name, const WeightSink* weights, onnx::TensorProto* tp) {
  if (!weights || t.is_string() || packed_bits(t.dtype()) || t.nbytes() == 0) return false;
  std::string location;
  int64_t offset = 0;
  if (!(*weights)(t, &location, &offset)) return false;
  tp->set_name(name);
  tp->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) tp->add_dims(d);
  tp->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* kv = tp->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  add("length", std::to_string(t.nbytes()));
  return true;
}

Status export_graph(const Graph& g, onnx::GraphProto* gp, const WeightSink* weights) {
  gp->set_name(g.name.empty() ? "kiln" : g.name);
  for (Value* v : g.inputs()) set_type(*v, gp->add_input());
  for (Value* c : g.constants()) {
    if (c->constant().is_sequence() || c->constant().is_none()) {
      return unsupported("constant '", c->name(), "' is not a tensor and cannot be exported");
    }
    onnx::TensorProto* tp = gp->add_initializer();
    if (!export_external(c->constant(), c->name(), weights, tp)) tensor_to_proto(c->constant(), c->name(), tp);
  }
  for (Node* n : g.nodes()) {
    auto* np = gp->add_node();
    np->set_name(n->name());
    np->set_op_type(op_name(n->op()));
    if (is_kiln_node(*n)) np->set_domain("kiln");
    else if (!n->onnx_domain.empty() && n->onnx_domain != "ai.onnx") np->set_domain(n->onnx_domain);
    // Trailing omitted inputs are dropped; inner ones stay as "".
    size_t last = n->num_inputs();
    while (last > 0 && !n->input(last - 1)) --last;
    for (size_t i = 0; i < last; ++i) np->add_input(n->input(i) ? n->input(i)->name() : "");
    for (Value* o : n->outputs()) np->add_output(o ? o->name() : "");
    for (const auto& [name, a] : n->attrs.all()) KILN_RETURN_IF_ERROR(export_attribute(name, a, np->add_attribute(), weights));
    for (Value* o : n->outputs()) {
      if (o && (o->dtype != DataType::kUndefined || o->shape) && !g.is_graph_output(o)) set_type(*o, gp->add_value_info());
    }
  }
  for (Value* v : g.outputs()) set_type(*v, gp->add_output());
  return Status::ok();
}

}  // namespace

Result<std::string> export_onnx_bytes(const Graph& g, const WeightSink* weights) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(kExportOpset);
  auto* kos = m.add_opset_import();
  kos->set_domain("kiln");
  kos->set_version(1);
  KILN_RETURN_IF_ERROR(export_graph(g, m.mutable_graph(), weights));
  std::string bytes;
  if (!m.SerializeToString(&bytes)) return internal_error("failed to serialize the exported model (over 2 GiB?)");
  return bytes;
}

Status export_onnx_file(const Graph& g, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, export_onnx_bytes(g));
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()))) return io_error("cannot write '", path, "'");
  return Status::ok();
}

}  // namespace kiln

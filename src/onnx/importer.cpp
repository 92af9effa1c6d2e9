#include "onnx/importer.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "ir/verifier.h"
#include "onnx/tensor_io.h"

namespace kiln {

namespace {

struct ImportContext {
  std::string what;       // model file name, for messages
  std::string base_dir;   // external data folder
  const WeightResolver* weights = nullptr;  // external initializers of a container (plan)
  std::unordered_map<std::string, int64_t> opsets;  // domain -> version ("" = default)
  std::vector<std::string> unsupported;             // one line per unsupported node
  int subgraph_depth = 0;
};

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// Domain of kiln's own ops (fused ops, canonical forms without an ONNX equivalent) in
// exported models; such nodes import as they are.
constexpr const char* kKilnDomain = "kiln";

// Maps ONNX op types whose canonical kiln op has another name.
const std::unordered_map<std::string, Op>& renamed_ops() {
  static const std::unordered_map<std::string, Op> m = {
      {"Upsample", Op::Resize},
      {"CastLike", Op::Cast},
      {"Scatter", Op::ScatterElements},  // Scatter-9/11 is ScatterElements without reduction
  };
  return m;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> onnx_op_aliases() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [onnx_name, op] : renamed_ops()) out.emplace_back(onnx_name, op_name(op));
  out.emplace_back("Constant", "(constant value)");
  return out;
}

namespace {

std::optional<Op> canonical_op(const std::string& op_type) {
  auto it = renamed_ops().find(op_type);
  if (it != renamed_ops().end()) return it->second;
  return op_from_name(op_type);
}

// The kiln op for an ONNX (domain, op type), or nullopt when kiln does not support it.
std::optional<Op> op_for_domain(const std::string& domain, const std::string& op_type) {
  if (is_default_domain(domain)) return canonical_op(op_type);
  if (domain == "ai.onnx.preview" && op_type == "FlexAttention") return Op::FlexAttention;
  if (domain == kKilnDomain) return op_from_name(op_type);  // kiln's own ops, already canonical
  return std::nullopt;
}

Result<std::optional<SymShape>> convert_shape(const onnx::TypeProto_Tensor& tt) {
  if (!tt.has_shape()) return std::optional<SymShape>();
  SymShape s;
  for (const auto& d : tt.shape().dim()) {
    Dim dim;
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) return invalid_model("negative dimension ", d.dim_value());
      dim.value = d.dim_value();
    } else if (d.has_dim_param()) {
      dim.symbol = d.dim_param();
    }
    s.push_back(dim);
  }
  return std::optional<SymShape>(s);
}

struct TypeInfo {
  DataType dtype = DataType::kUndefined;
  std::optional<SymShape> shape;
  bool sequence = false;
  bool optional = false;
  void apply(Value* v) const {
    if (dtype != DataType::kUndefined) v->dtype = dtype;
    if (shape) v->shape = shape;
    v->is_sequence = sequence;
    v->is_optional = optional;
  }
};

std::string dtype_label(int32_t elem_type) {
  std::string name = onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type));
  return name.empty() ? cat("#", elem_type) : cat(name, " (#", elem_type, ")");
}

Status convert_type_proto(const onnx::TypeProto& t, TypeInfo* out, const std::string& what, int depth) {
  if (depth > 4) return unsupported(what, ": type nests too deeply");
  if (t.has_tensor_type()) {
    out->dtype = static_cast<DataType>(t.tensor_type().elem_type());
    if (out->dtype != DataType::kUndefined && !is_supported_dtype(out->dtype)) {
      return unsupported(what, " has element type ", dtype_label(t.tensor_type().elem_type()), ", which kiln does not support");
    }
    auto s = convert_shape(t.tensor_type());
    if (!s) return s.status().with_context(what + ": ");
    out->shape = std::move(s).value();
    return Status::ok();
  }
  if (t.has_sequence_type()) {
    if (out->sequence) return unsupported(what, ": sequences of sequences are not supported");
    out->sequence = true;
    if (!t.sequence_type().has_elem_type()) return Status::ok();
    return convert_type_proto(t.sequence_type().elem_type(), out, what, depth + 1);
  }
  if (t.has_optional_type()) {
    if (out->optional) return unsupported(what, ": optionals of optionals are not supported");
    out->optional = true;
    if (!t.optional_type().has_elem_type()) return Status::ok();
    return convert_type_proto(t.optional_type().elem_type(), out, what, depth + 1);
  }
  if (t.value_case() == onnx::TypeProto::VALUE_NOT_SET) return Status::ok();
  return unsupported(what, " has a map or sparse tensor type, which kiln does not support");
}

// Type of a graph input/output/value_info: tensors, sequences of tensors, optionals.
Status convert_type(const onnx::ValueInfoProto& vi, TypeInfo* info, const std::string& what) {
  if (!vi.has_type()) return Status::ok();
  return convert_type_proto(vi.type(), info, cat(what, " '", vi.name(), "'"), 0);
}

class GraphImporter {
 public:
  explicit GraphImporter(ImportContext& ctx) : ctx_(ctx) {}
  Status import(const onnx::GraphProto& gp, Graph& g);
  Result<Tensor> load_initializer(const onnx::TensorProto& init);

 private:
  Result<Attribute::Value> convert_attribute(const onnx::AttributeProto& a, Graph& g, const std::string& where);
  Value* resolve(Graph& g, const std::string& name);
  Status normalize(Node* n, Graph& g);
  Status check_node(Node* n);
  ImportContext& ctx_;
};

Value* GraphImporter::resolve(Graph& g, const std::string& name) {
  if (Value* v = g.find_value(name)) return v;
  for (Graph* p = g.parent; p; p = p->parent) {
    if (Value* outer = p->find_value(name)) {
      Value* ref = g.add_outer_ref(name);
      ref->dtype = outer->dtype;
      ref->shape = outer->shape;
      return ref;
    }
  }
  return nullptr;
}

Result<Attribute::Value> GraphImporter::convert_attribute(const onnx::AttributeProto& a, Graph& g,
                                                          const std::string& where) {
  using AP = onnx::AttributeProto;
  switch (a.type()) {
    case AP::INT: return Attribute::Value(static_cast<int64_t>(a.i()));
    case AP::FLOAT: return Attribute::Value(a.f());
    case AP::STRING: return Attribute::Value(a.s());
    case AP::INTS: return Attribute::Value(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case AP::FLOATS: return Attribute::Value(std::vector<float>(a.floats().begin(), a.floats().end()));
    case AP::STRINGS: return Attribute::Value(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case AP::TENSOR: {
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(a.t(), ctx_.base_dir, cat(where, " attribute '", a.name(), "'")));
      return Attribute::Value(std::move(t));
    }
    case AP::GRAPH: {
      if (ctx_.subgraph_depth > 64) return invalid_model(where, ": subgraphs nested too deeply");
      auto sub = std::make_shared<Graph>();
      sub->parent = &g;
      sub->name = a.g().name();
      ++ctx_.subgraph_depth;
      Status s = import(a.g(), *sub);
      --ctx_.subgraph_depth;
      KILN_RETURN_IF_ERROR(s.with_context(cat(where, " subgraph '", a.name(), "': ")));
      return Attribute::Value(std::move(sub));
    }
    case AP::TYPE_PROTO: {
      // Only Optional uses a type attribute: encode it as "tensor:<dtype>" or "seq:<dtype>".
      TypeInfo ti;
      KILN_RETURN_IF_ERROR(convert_type_proto(a.tp(), &ti, cat(where, " attribute '", a.name(), "'"), 0));
      return Attribute::Value(cat(ti.sequence ? "seq:" : "tensor:", static_cast<int>(ti.dtype)));
    }
    default:
      return unsupported(where, ": attribute '", a.name(), "' has type ", AP::AttributeType_Name(a.type()),
                         ", which kiln does not support");
  }
}

// Builds a constant value from a Constant node's attribute.
Result<Tensor> constant_value(const onnx::NodeProto& np, const std::string& base_dir, const std::string& where) {
  if (np.attribute_size() != 1) return invalid_model(where, ": Constant needs exactly one value attribute");
  const auto& a = np.attribute(0);
  const std::string& n = a.name();
  using AP = onnx::AttributeProto;
  auto expect = [&](AP::AttributeType t) -> Status {
    if (a.type() != t) {
      return invalid_model(where, ": attribute '", n, "' should be ", AP::AttributeType_Name(t), " but is ",
                           AP::AttributeType_Name(a.type()));
    }
    return Status::ok();
  };
  if (n == "value") {
    KILN_RETURN_IF_ERROR(expect(AP::TENSOR));
    return tensor_from_proto(a.t(), base_dir, cat(where, " value"));
  }
  if (n == "value_float") {
    KILN_RETURN_IF_ERROR(expect(AP::FLOAT));
    return make_tensor<float>({}, {a.f()});
  }
  if (n == "value_floats") {
    KILN_RETURN_IF_ERROR(expect(AP::FLOATS));
    return make_tensor<float>({a.floats_size()}, std::vector<float>(a.floats().begin(), a.floats().end()));
  }
  if (n == "value_int") {
    KILN_RETURN_IF_ERROR(expect(AP::INT));
    return make_scalar_int64(a.i());
  }
  if (n == "value_ints") {
    KILN_RETURN_IF_ERROR(expect(AP::INTS));
    return make_int64_vector(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
  }
  return unsupported(where, ": Constant attribute '", n, "' is not supported");
}

// Moves an attribute (ints or int or float) to input `index` as a constant tensor.
void attr_to_input(Node* n, Graph& g, const std::string& attr, size_t index, DataType dt) {
  const Attribute* a = n->attrs.find(attr);
  if (!a) return;
  Tensor t;
  if (auto* v = std::get_if<std::vector<int64_t>>(&a->value)) {
    t = make_int64_vector(*v);
  } else if (auto* i = std::get_if<int64_t>(&a->value)) {
    t = dt == DataType::kInt64 && attr != "k" ? make_int64_vector({*i}) : make_scalar_int64(*i);
  } else if (auto* f = std::get_if<float>(&a->value)) {
    t = make_tensor<float>({}, {*f});
  } else if (auto* fs = std::get_if<std::vector<float>>(&a->value)) {
    t = make_tensor<float>({static_cast<int64_t>(fs->size())}, *fs);
  } else {
    return;  // wrong type: check_node reports it
  }
  if (t.dtype() != dt) t = cast_tensor(t, dt);
  while (n->num_inputs() < index) n->add_input(nullptr);
  Value* c = g.add_constant(g.unique_name(cat(n->name(), "_", attr)), std::move(t));
  n->set_input(index, c);
  n->attrs.erase(attr);
}

// Opsets 1-6: binary ops broadcast only with broadcast=1, aligning B to A starting at
// `axis`. Numpy broadcasting covers the suffix case; an explicit axis needs B reshaped
// with trailing 1s, done on the constant or with an Unsqueeze when ranks are known.
Status normalize_legacy_broadcast(Node* n, Graph& g) {
  const bool has_axis = n->attrs.has("axis");
  const int64_t axis = n->attrs.get_int("axis", 0);
  n->attrs.erase("broadcast");
  n->attrs.erase("axis");
  Value* a = n->input(0);
  Value* b = n->input(1);
  if (!has_axis || !a || !b) return Status::ok();
  if (!a->shape || !b->shape) {
    return unsupported(n->describe(), ": legacy broadcast with axis=", axis, " needs the input ranks, which the model does not give");
  }
  const int64_t rank_a = static_cast<int64_t>(a->shape->size());
  const int64_t rank_b = static_cast<int64_t>(b->shape->size());
  const int64_t extra = rank_a - axis - rank_b;
  if (axis < 0 || extra < 0) return invalid_model(n->describe(), ": legacy broadcast axis ", axis, " does not fit ranks ", rank_a, " and ", rank_b);
  if (extra == 0) return Status::ok();
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < extra; ++i) axes.push_back(rank_b + i);
  if (b->is_constant()) {
    Dims d = b->constant().dims();
    d.insert(d.end(), static_cast<size_t>(extra), 1);
    n->set_input(1, g.add_constant(g.unique_name(b->name() + "_bcast"), b->constant().reshaped(d)));
    return Status::ok();
  }
  Value* ax = g.add_constant(g.unique_name(n->name() + "_bcast_axes"), make_int64_vector(axes));
  Node* u = g.add_node(Op::Unsqueeze, g.unique_name(n->name() + "_bcast"), {b, ax}, {g.unique_name(b->name() + "_bcast")});
  u->onnx_op_type = "Unsqueeze";
  u->output(0)->dtype = b->dtype;
  n->set_input(1, u->output(0));
  return Status::ok();
}

// Cast-1 names the target type with a string ("FLOAT").
void normalize_legacy_cast(Node* n) {
  const Attribute* a = n->attrs.find("to");
  if (!a || a->type() != AttrType::kString) return;
  onnx::TensorProto_DataType dt;
  if (onnx::TensorProto_DataType_Parse(std::get<std::string>(a->value), &dt)) n->attrs.set("to", static_cast<int64_t>(dt));
}

Status GraphImporter::normalize(Node* n, Graph& g) {
  const std::string& t = n->onnx_op_type;
  const int64_t opset = n->onnx_opset;
  n->attrs.erase("consumed_inputs");  // opsets 1-5 bookkeeping, no meaning for inference
  if (opset < 7 && n->attrs.has("broadcast")) KILN_RETURN_IF_ERROR(normalize_legacy_broadcast(n, g));
  if (t == "Cast") normalize_legacy_cast(n);
  if (t == "PRelu" && opset < 7) {
    // PRelu-1/6: a 1-D slope of size C applies per channel (axis 1), not numpy-style.
    Value* x = n->input(0);
    Value* slope = n->input(1);
    if (x && slope && slope->is_constant() && slope->constant().rank() == 1 && slope->constant().size() > 1 && x->shape &&
        x->shape->size() >= 2) {
      Dims d = {slope->constant().size()};
      d.insert(d.end(), x->shape->size() - 2, 1);
      n->set_input(1, g.add_constant(g.unique_name(slope->name() + "_per_channel"), slope->constant().reshaped(d)));
    }
  }
  if (t == "Reshape" && n->attrs.has("shape")) attr_to_input(n, g, "shape", 1, DataType::kInt64);  // Reshape-1
  if (t == "Concat" && !n->attrs.has("axis")) n->attrs.set("axis", int64_t{1});                     // Concat-1 default
  if (t == "Pad" && n->attrs.has("paddings")) {                                                    // Pad-1
    n->attrs.set("pads", n->attrs.get_ints("paddings"));
    n->attrs.erase("paddings");
  }
  if (t == "Slice") {
    // Slice-1: starts/ends/axes attributes.
    if (n->attrs.has("starts")) {
      Value* data = n->input(0);
      attr_to_input(n, g, "starts", 1, DataType::kInt64);
      attr_to_input(n, g, "ends", 2, DataType::kInt64);
      attr_to_input(n, g, "axes", 3, DataType::kInt64);
      n->set_input(0, data);
    }
  } else if (t == "Squeeze" || t == "Unsqueeze" || op_has_flag(n->op(), kReduction)) {
    attr_to_input(n, g, "axes", 1, DataType::kInt64);
  } else if (t == "Split") {
    attr_to_input(n, g, "split", 1, DataType::kInt64);
  } else if (t == "Pad") {
    if (n->attrs.has("pads")) {  // Pad-2
      Value* data = n->input(0);
      float value = n->attrs.get_float("value", 0.0f);
      attr_to_input(n, g, "pads", 1, DataType::kInt64);
      n->attrs.erase("value");
      n->set_input(2, g.add_constant(g.unique_name(n->name() + "_value"), make_tensor<float>({}, {value})));
      n->set_input(0, data);
    }
  } else if (t == "Clip") {
    if (n->attrs.has("min") || n->attrs.has("max")) {  // Clip-6
      float lo = n->attrs.get_float("min", -std::numeric_limits<float>::max());
      float hi = n->attrs.get_float("max", std::numeric_limits<float>::max());
      n->attrs.erase("min");
      n->attrs.erase("max");
      n->set_input(1, g.add_constant(g.unique_name(n->name() + "_min"), make_tensor<float>({}, {lo})));
      n->set_input(2, g.add_constant(g.unique_name(n->name() + "_max"), make_tensor<float>({}, {hi})));
    }
  } else if (t == "TopK") {
    if (n->attrs.has("k")) {
      int64_t k = n->attrs.get_int("k", 1);
      n->attrs.erase("k");
      n->set_input(1, g.add_constant(g.unique_name(n->name() + "_k"), make_int64_vector({k})));
    }
  } else if (t == "Upsample" || (t == "Resize" && opset < 11)) {
    // Upsample-7 (scales attribute), Upsample-9 and Resize-10 (scales input) become Resize-11+
    // with inputs (X, roi, scales); their nearest mode is asymmetric with floor rounding.
    Value* x = n->input(0);
    Value* scales = n->input(1);
    if (n->attrs.has("scales")) {
      std::vector<float> s = n->attrs.get_floats("scales");
      n->attrs.erase("scales");
      scales = g.add_constant(g.unique_name(n->name() + "_scales"),
                              make_tensor<float>({static_cast<int64_t>(s.size())}, s));
    }
    for (size_t i = 0; i < n->num_inputs(); ++i) n->set_input(i, nullptr);
    n->set_input(0, x);
    n->set_input(1, nullptr);
    n->set_input(2, scales);
    std::string mode = n->attrs.get_string("mode", "nearest");
    n->attrs.set("mode", mode == "bilinear" ? std::string("linear") : mode);
    n->attrs.set("coordinate_transformation_mode", std::string("asymmetric"));
    if (mode == "nearest") n->attrs.set("nearest_mode", std::string("floor"));
  } else if (t == "Scan" && opset < 9) {
    // Scan-8: batched, with sequence_lens as input 0 and one `directions` attribute.
    n->attrs.set("kiln_scan8_batched", int64_t{1});
    if (!n->input(0)) n->set_input(0, g.add_constant(g.unique_name(n->name() + "_no_lens"), Tensor(DataType::kInt64, {0})));
    if (n->attrs.has("directions")) {
      n->attrs.set("scan_input_directions", n->attrs.get_ints("directions"));
      n->attrs.erase("directions");
    }
  } else if (t == "Dropout") {
    n->attrs.erase("ratio");
    n->attrs.erase("is_test");
  } else if (t == "Softmax" || t == "LogSoftmax" || t == "Hardmax") {
    if (opset < 13) {
      n->attrs.set("axis", n->attrs.get_int("axis", 1));
      n->attrs.set("kiln_coerce_2d", int64_t{1});
    } else {
      n->attrs.set("axis", n->attrs.get_int("axis", -1));
    }
  } else if (t == "DFT" && opset < 20) {
    // DFT-17: axis is an attribute (default 1); DFT-20 takes it as input 2 (default -2).
    n->attrs.set("axis", n->attrs.get_int("axis", 1));
    attr_to_input(n, g, "axis", 2, DataType::kInt64);
  } else if (t == "BatchNormalization") {
    n->attrs.erase("spatial");
    n->attrs.erase("is_test");
    n->attrs.erase("consumed_inputs");
  } else if (t == "RoiAlign" && opset < 16) {
    // RoiAlign-10 has no coordinate_transformation_mode; it behaves as output_half_pixel.
    n->attrs.set("coordinate_transformation_mode", std::string("output_half_pixel"));
  }
  return Status::ok();
}

Status GraphImporter::check_node(Node* n) {
  const OpInfo& info = op_info(n->op());
  // Attribute types against the op table's spec.
  std::string spec = info.attr_spec;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string name = item.substr(0, colon), type = item.substr(colon + 1);
    const Attribute* a = n->attrs.find(name);
    if (!a) continue;
    AttrType want = type == "i" ? AttrType::kInt : type == "f" ? AttrType::kFloat : type == "s" ? AttrType::kString
                  : type == "t" ? AttrType::kTensor : type == "g" ? AttrType::kGraph : type == "ints" ? AttrType::kInts
                  : type == "floats" ? AttrType::kFloats : AttrType::kStrings;
    if (a->type() != want) {
      return invalid_model(n->describe(), ": attribute '", name, "' must be of type ", attr_type_name(want),
                           " but is ", attr_type_name(a->type()));
    }
  }
  size_t last_in = n->num_inputs();
  while (last_in > 0 && !n->input(last_in - 1)) --last_in;
  if (static_cast<int>(last_in) < info.min_inputs ||
      (info.max_inputs >= 0 && static_cast<int>(last_in) > info.max_inputs)) {
    return invalid_model(n->describe(), ": has ", last_in, " inputs, expected ", info.min_inputs,
                         info.max_inputs < 0 ? " or more" : cat(" to ", info.max_inputs));
  }
  for (int i = 0; i < info.min_inputs; ++i) {
    if (!n->input(static_cast<size_t>(i))) return invalid_model(n->describe(), ": required input ", i, " is missing");
  }
  size_t nout = n->num_outputs();
  if (static_cast<int>(nout) < info.min_outputs || (info.max_outputs >= 0 && static_cast<int>(nout) > info.max_outputs)) {
    return invalid_model(n->describe(), ": has ", nout, " outputs, expected ", info.min_outputs,
                         info.max_outputs < 0 ? " or more" : cat(" to ", info.max_outputs));
  }
  return Status::ok();
}

Result<Tensor> GraphImporter::load_initializer(const onnx::TensorProto& init) {
  const std::string what = cat("initializer '", init.name(), "'");
  if (!ctx_.weights || init.data_location() != onnx::TensorProto::EXTERNAL) {
    return tensor_from_proto(init, ctx_.base_dir, what);
  }
  std::string location;
  int64_t offset = -1, length = -1;
  for (const auto& kv : init.external_data()) {
    char* end = nullptr;
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (kv.value().empty() || *end != '\0' || v < 0) return invalid_model(what, ": bad external ", kv.key(), " '", kv.value(), "'");
      (kv.key() == "offset" ? offset : length) = v;
    }
  }
  if (!onnx::TensorProto_DataType_IsValid(init.data_type()) || !is_supported_dtype(static_cast<DataType>(init.data_type())) ||
      init.data_type() == onnx::TensorProto::STRING) {
    return invalid_model(what, ": external data of type ", init.data_type(), " is not supported");
  }
  Dims dims(init.dims().begin(), init.dims().end());
  for (int64_t d : dims) {
    if (d < 0) return invalid_model(what, ": negative dim");
  }
  return (*ctx_.weights)(location, offset, length, static_cast<DataType>(init.data_type()), dims);
}

Status GraphImporter::import(const onnx::GraphProto& gp, Graph& g) {
  if (g.name.empty()) g.name = gp.name();
  // Initializers first: IR < 4 models also list them as graph inputs.
  for (const auto& init : gp.initializer()) {
    if (init.name().empty()) return invalid_model("an initializer has no name");
    if (g.find_value(init.name())) return invalid_model("initializer '", init.name(), "' is defined twice");
    KILN_ASSIGN_OR_RETURN(Tensor t, load_initializer(init));
    g.add_constant(init.name(), std::move(t));
  }
  if (gp.sparse_initializer_size() > 0) return unsupported("sparse initializers are not supported");
  for (const auto& in : gp.input()) {
    if (g.find_value(in.name())) continue;  // an initializer listed as input
    if (in.name().empty()) return invalid_model("a graph input has no name");
    TypeInfo ti;
    KILN_RETURN_IF_ERROR(convert_type(in, &ti, "graph input"));
    ti.apply(g.add_input(in.name(), ti.dtype, ti.shape));
  }

  // Pass 1: create nodes and their outputs, so inputs can be resolved in any order.
  std::vector<std::pair<const onnx::NodeProto*, Node*>> built;
  for (int i = 0; i < gp.node_size(); ++i) {
    const auto& np = gp.node(i);
    std::string name = np.name().empty() ? cat(np.op_type(), "_", i) : np.name();
    std::string where = cat("node '", name, "' (", np.op_type(), ")");
    for (const auto& o : np.output()) {
      if (!o.empty() && g.find_value(o)) return invalid_model(where, ": output '", o, "' is already defined");
    }
    const std::string& domain = np.domain();
    auto opset_it = ctx_.opsets.find(is_default_domain(domain) ? "" : domain);
    int64_t opset = opset_it == ctx_.opsets.end() ? 0 : opset_it->second;
    if (is_default_domain(domain) && np.op_type() == "Constant") {
      if (np.output_size() != 1) return invalid_model(where, ": Constant must have one output");
      KILN_ASSIGN_OR_RETURN(Tensor t, constant_value(np, ctx_.base_dir, where));
      g.add_constant(np.output(0), std::move(t));
      continue;
    }
    std::optional<Op> found = op_for_domain(domain, np.op_type());
    if (!found) {
      ctx_.unsupported.push_back(cat("node '", name, "': op ", np.op_type(), " (domain '",
                                     domain.empty() ? "ai.onnx" : domain, "', opset ", opset, ")"));
    }
    const Op op = found.value_or(Op::Identity);  // placeholder so later nodes still resolve their inputs
    std::vector<std::string> outs(np.output().begin(), np.output().end());
    Node* n = g.add_node(op, name, {}, outs);
    n->onnx_op_type = np.op_type();
    n->onnx_domain = domain;
    n->onnx_opset = opset;
    built.emplace_back(&np, n);
  }
  // Pass 2: inputs, attributes, canonical form.
  for (auto& [np, n] : built) {
    for (const auto& in : np->input()) {
      if (in.empty()) {
        n->add_input(nullptr);
        continue;
      }
      Value* v = resolve(g, in);
      if (!v) return invalid_model(n->describe(), ": input '", in, "' is not defined by any node, initializer or graph input");
      n->add_input(v);
    }
    for (const auto& a : np->attribute()) {
      KILN_ASSIGN_OR_RETURN(Attribute::Value v, convert_attribute(a, g, n->describe()));
      n->attrs.set(a.name(), std::move(v));
    }
  }
  bool has_unsupported = !ctx_.unsupported.empty();
  for (auto& [np, n] : built) {
    if (has_unsupported) break;  // the caller reports every unsupported node at once
    if (n->onnx_domain != kKilnDomain) KILN_RETURN_IF_ERROR(normalize(n, g));
    KILN_RETURN_IF_ERROR(check_node(n));
  }
  // Value info: dtypes and shapes of intermediates when the exporter recorded them.
  for (const auto& vi : gp.value_info()) {
    Value* v = g.find_value(vi.name());
    if (!v || v->kind() != Value::Kind::kNodeOutput) continue;
    TypeInfo ti;
    if (convert_type(vi, &ti, "value").is_ok()) ti.apply(v);
  }
  for (const auto& out : gp.output()) {
    Value* v = resolve(g, out.name());
    if (!v) return invalid_model("graph output '", out.name(), "' is not produced by any node");
    TypeInfo ti;
    KILN_RETURN_IF_ERROR(convert_type(out, &ti, "graph output"));
    if (v->kind() == Value::Kind::kNodeOutput) ti.apply(v);
    g.add_output(v);
  }
  return g.topological_sort();
}

}  // namespace

Result<ImportedModel> import_onnx_bytes(const std::string& bytes, const std::string& base_dir,
                                        const std::string& what, const WeightResolver* weights) {
  onnx::ModelProto model;
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (bytes.empty() || !model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    return invalid_model(what, ": not a valid ONNX model (protobuf parsing failed; the file may be truncated or not ONNX)");
  }
  if (!model.has_graph() || model.ir_version() <= 0) {
    return invalid_model(what, ": not a valid ONNX model (no graph or no ir_version)");
  }
  ImportContext ctx;
  ctx.what = what;
  ctx.base_dir = base_dir;
  ctx.weights = weights;
  for (const auto& os : model.opset_import()) ctx.opsets[is_default_domain(os.domain()) ? "" : os.domain()] = os.version();
  if (!ctx.opsets.count("")) {
    // IR version 1-2 models without opset_import imply opset 1; kiln needs 7+.
    return unsupported(what, ": the model imports no default-domain opset");
  }
  int64_t opset = ctx.opsets[""];
  if (opset < 1) return unsupported(what, ": default-domain opset ", opset, " is not valid");

  auto graph = std::make_unique<Graph>();
  GraphImporter importer(ctx);
  Status s = importer.import(model.graph(), *graph);
  if (!ctx.unsupported.empty()) {
    std::string msg = cat(what, ": ", ctx.unsupported.size(), " unsupported node",
                          ctx.unsupported.size() == 1 ? "" : "s", ":");
    for (const auto& u : ctx.unsupported) msg += "\n  " + u;
    return unsupported(msg);
  }
  if (!s.is_ok()) return s.with_context(what + ": ");
  KILN_RETURN_IF_ERROR(verify_graph(*graph).with_context(what + ": "));
  ImportedModel m;
  m.graph = std::move(graph);
  m.opset = opset;
  m.ir_version = model.ir_version();
  m.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
  m.path = what;
  return m;
}

Result<ImportedModel> import_onnx_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open model file '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string dir = std::filesystem::path(path).parent_path().string();
  return import_onnx_bytes(ss.str(), dir.empty() ? "." : dir, path);
}

}  // namespace kiln

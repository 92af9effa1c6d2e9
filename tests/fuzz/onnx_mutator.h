// Structure-aware mutations of ONNX models for the fuzz targets' custom mutators.
// Byte-level mutations of a protobuf mostly break its framing and die in the parser; these
// edit a parsed ModelProto instead (op types from kiln's op table, operand names from the
// same graph, attributes with the names the op takes, interesting ints/floats/dims) so
// the fuzzer spends its time in the importer's checks, the passes and the kernels.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "ir/op.h"

namespace kiln::fuzz {

using Rng = std::mt19937_64;

inline size_t pick(Rng& rng, size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; }

inline int64_t interesting_int(Rng& rng) {
  static const int64_t kValues[] = {0, 1, 2, 3, -1, -2, 4, 7, 8, 16, 64, 255, 1 << 16, int64_t{1} << 31,
                                    std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  return rng() % 4 == 0 ? static_cast<int64_t>(rng() % 32) - 8 : kValues[pick(rng, std::size(kValues))];
}

inline float interesting_float(Rng& rng) {
  static const float kValues[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e-12f, 1e30f, -1e30f,
                                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()};
  return kValues[pick(rng, std::size(kValues))];
}

// Every graph of the model: the main graph and, recursively, If/Loop/Scan bodies.
inline void collect_graphs(onnx::GraphProto* g, std::vector<onnx::GraphProto*>* out) {
  out->push_back(g);
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) collect_graphs(a.mutable_g(), out);
      for (auto& sub : *a.mutable_graphs()) collect_graphs(&sub, out);
    }
  }
}

// Names a node of g may read: inputs, initializers and outputs of other nodes.
inline std::vector<std::string> value_names(const onnx::GraphProto& g) {
  std::vector<std::string> names;
  for (const auto& v : g.input()) names.push_back(v.name());
  for (const auto& t : g.initializer()) names.push_back(t.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) names.push_back(o);
  }
  return names;
}

inline void mutate_attribute(onnx::AttributeProto* a, Rng& rng) {
  switch (rng() % 6) {
    case 0: a->set_i(interesting_int(rng)); a->set_type(onnx::AttributeProto::INT); break;
    case 1: a->set_f(interesting_float(rng)); a->set_type(onnx::AttributeProto::FLOAT); break;
    case 2:
      if (a->ints_size() > 0) {
        a->set_ints(static_cast<int>(pick(rng, static_cast<size_t>(a->ints_size()))), interesting_int(rng));
      } else {
        a->add_ints(interesting_int(rng));
      }
      break;
    case 3:
      if (a->ints_size() > 0 && rng() % 2) {
        a->mutable_ints()->RemoveLast();
      } else {
        a->add_ints(interesting_int(rng));
      }
      break;
    case 4: {
      static const char* kStrings[] = {"", "NOTSET", "SAME_UPPER", "VALID", "linear", "nearest", "cubic", "tanh",
                                       "none", "DCR", "CRD", "constant", "reflect", "edge", "Relu", "Gelu"};
      a->set_s(kStrings[pick(rng, std::size(kStrings))]);
      break;
    }
    default: a->set_type(static_cast<onnx::AttributeProto::AttributeType>(rng() % 15)); break;
  }
}

// Gives `n` an attribute the op's table entry names (name and a value of its type).
inline void add_table_attribute(onnx::NodeProto* n, Op op, Rng& rng) {
  std::vector<std::pair<std::string, std::string>> spec;  // name, type
  std::string s = op_info(op).attr_spec;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(start, end - start);
    const size_t colon = item.find(':');
    if (colon != std::string::npos) spec.emplace_back(item.substr(0, colon), item.substr(colon + 1));
    start = end + 1;
  }
  if (spec.empty()) return;
  const auto& [name, type] = spec[pick(rng, spec.size())];
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  if (type == "i") {
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(interesting_int(rng));
  } else if (type == "f") {
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(interesting_float(rng));
  } else if (type == "ints") {
    a->set_type(onnx::AttributeProto::INTS);
    for (size_t k = 0, count = pick(rng, 6); k < count; ++k) a->add_ints(interesting_int(rng));
  } else if (type == "floats") {
    a->set_type(onnx::AttributeProto::FLOATS);
    for (size_t k = 0, count = pick(rng, 6); k < count; ++k) a->add_floats(interesting_float(rng));
  } else {
    a->set_type(onnx::AttributeProto::STRING);
    mutate_attribute(a, rng);
    a->set_type(onnx::AttributeProto::STRING);
  }
}

inline void mutate_tensor(onnx::TensorProto* t, Rng& rng) {
  switch (rng() % 5) {
    case 0:
      if (t->dims_size() > 0) {
        t->set_dims(static_cast<int>(pick(rng, static_cast<size_t>(t->dims_size()))), interesting_int(rng));
      }
      break;
    case 1: t->add_dims(interesting_int(rng) & 7); break;
    case 2: t->set_data_type(static_cast<int32_t>(rng() % 27)); break;
    case 3:
      if (!t->raw_data().empty()) t->mutable_raw_data()->resize(pick(rng, t->raw_data().size() + 8));
      break;
    default:
      if (!t->raw_data().empty()) {
        (*t->mutable_raw_data())[pick(rng, t->raw_data().size())] = static_cast<char>(rng());
      } else if (t->float_data_size() > 0) {
        t->set_float_data(static_cast<int>(pick(rng, static_cast<size_t>(t->float_data_size()))), interesting_float(rng));
      } else if (t->int64_data_size() > 0) {
        t->set_int64_data(static_cast<int>(pick(rng, static_cast<size_t>(t->int64_data_size()))), interesting_int(rng));
      }
      break;
  }
}

inline void mutate_value_info(onnx::ValueInfoProto* v, Rng& rng) {
  auto* tt = v->mutable_type()->mutable_tensor_type();
  switch (rng() % 4) {
    case 0: tt->set_elem_type(static_cast<int32_t>(rng() % 27)); break;
    case 1:
      if (tt->shape().dim_size() > 0) {
        auto* d = tt->mutable_shape()->mutable_dim(static_cast<int>(pick(rng, static_cast<size_t>(tt->shape().dim_size()))));
        if (rng() % 3 == 0) {
          d->set_dim_param(rng() % 2 ? "N" : "M");
        } else {
          d->set_dim_value(interesting_int(rng) & 15);
        }
      }
      break;
    case 2: tt->mutable_shape()->add_dim()->set_dim_value(static_cast<int64_t>(1 + rng() % 4)); break;
    default:
      if (tt->shape().dim_size() > 0) tt->mutable_shape()->mutable_dim()->RemoveLast();
      break;
  }
}

// One structural edit of m.
inline void mutate_model(onnx::ModelProto* m, Rng& rng) {
  std::vector<onnx::GraphProto*> graphs;
  collect_graphs(m->mutable_graph(), &graphs);
  onnx::GraphProto* g = graphs[pick(rng, graphs.size())];
  onnx::NodeProto* n = g->node_size() ? g->mutable_node(static_cast<int>(pick(rng, static_cast<size_t>(g->node_size())))) : nullptr;
  switch (rng() % 12) {
    case 0:
    case 1:
      if (n) {  // a different op; sometimes in the kiln domain, which takes canonical and fused ops as they are
        const Op op = static_cast<Op>(pick(rng, static_cast<size_t>(kNumOps)));
        n->set_op_type(op_name(op));
        if (rng() % 3 == 0) {
          n->set_domain("kiln");
          bool has = false;
          for (const auto& o : m->opset_import()) has |= o.domain() == "kiln";
          if (!has) {
            auto* o = m->add_opset_import();
            o->set_domain("kiln");
            o->set_version(1);
          }
        } else {
          n->set_domain("");
        }
      }
      break;
    case 2:
      if (n) {  // rewire an operand
        const auto names = value_names(*g);
        const std::string name = rng() % 8 == 0 || names.empty() ? std::string() : names[pick(rng, names.size())];
        if (n->input_size() > 0 && rng() % 3) {
          n->set_input(static_cast<int>(pick(rng, static_cast<size_t>(n->input_size()))), name);
        } else if (n->input_size() > 0 && rng() % 2) {
          n->mutable_input()->RemoveLast();
        } else {
          n->add_input(name);
        }
      }
      break;
    case 3:
      if (n && n->attribute_size() > 0 && rng() % 4) {
        mutate_attribute(n->mutable_attribute(static_cast<int>(pick(rng, static_cast<size_t>(n->attribute_size())))), rng);
      } else if (n) {
        auto op = op_from_name(n->op_type());
        if (op) add_table_attribute(n, *op, rng);
      }
      break;
    case 4:
      if (n && n->attribute_size() > 0) {
        n->mutable_attribute()->DeleteSubrange(static_cast<int>(pick(rng, static_cast<size_t>(n->attribute_size()))), 1);
      }
      break;
    case 5:
      if (g->initializer_size() > 0) mutate_tensor(g->mutable_initializer(static_cast<int>(pick(rng, static_cast<size_t>(g->initializer_size())))), rng);
      break;
    case 6:
      if (g->input_size() > 0) mutate_value_info(g->mutable_input(static_cast<int>(pick(rng, static_cast<size_t>(g->input_size())))), rng);
      break;
    case 7:
      if (g->output_size() > 0 && rng() % 2) {
        mutate_value_info(g->mutable_output(static_cast<int>(pick(rng, static_cast<size_t>(g->output_size())))), rng);
      } else if (g->node_size() > 0) {  // expose another value as a graph output
        const auto& src = g->node(static_cast<int>(pick(rng, static_cast<size_t>(g->node_size()))));
        if (src.output_size() > 0) g->add_output()->set_name(src.output(0));
      }
      break;
    case 8:
      if (m->opset_import_size() > 0) {
        m->mutable_opset_import(static_cast<int>(pick(rng, static_cast<size_t>(m->opset_import_size()))))
            ->set_version(static_cast<int64_t>(rng() % 28));
      }
      break;
    case 9:
      if (n) *g->add_node() = *n;  // duplicate a node (a second definition of its outputs)
      break;
    case 10:
      if (g->node_size() > 1) {  // reorder or drop a node
        const int i = static_cast<int>(pick(rng, static_cast<size_t>(g->node_size())));
        if (rng() % 2) {
          g->mutable_node()->SwapElements(i, static_cast<int>(pick(rng, static_cast<size_t>(g->node_size()))));
        } else {
          g->mutable_node()->DeleteSubrange(i, 1);
        }
      }
      break;
    default:
      if (n && n->output_size() > 0) {  // rename an output, possibly onto an existing name
        const auto names = value_names(*g);
        n->set_output(static_cast<int>(pick(rng, static_cast<size_t>(n->output_size()))),
                      rng() % 2 && !names.empty() ? names[pick(rng, names.size())] : std::string("fuzz_") + std::to_string(rng() % 8));
      }
      break;
  }
}

}  // namespace kiln::fuzz

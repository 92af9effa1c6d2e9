// Sequence and optional ops. Sequences and "none" optionals travel as Tensor values of
// kind kSequence / kNone (core/tensor.h), so these kernels share the common signature.
#include <cstdlib>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/shape_common.h"
#include "backends/cpu/reference/util.h"
#include "ir/graph.h"

namespace kiln {

namespace {

using shape_detail::gather_view;

Status need_sequence(const Tensor* t, const char* what) {
  KILN_ENSURE(t != nullptr, what, " is missing");
  KILN_ENSURE(t->is_sequence(), what, " must be a sequence, got ", t->describe());
  return Status::ok();
}

// Reads a position (scalar int32/int64); negative counts from the end. `len` allows
// position == size (insertion at the end) when inclusive_end.
Status read_position(const Tensor& p, int64_t size, bool inclusive_end, int64_t* out) {
  KILN_ENSURE(p.size() == 1 && is_integer(p.dtype()), "position must be one integer, got ", p.describe());
  int64_t pos = p.get_int(0);
  int64_t hi = inclusive_end ? size : size - 1;
  KILN_ENSURE(pos >= -size && pos <= hi, "position ", pos, " is out of range for a sequence of ", size, " items");
  *out = pos < 0 ? pos + size : pos;
  return Status::ok();
}

Status sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> items;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor* t = ctx.input(i);
    KILN_ENSURE(t && !t->is_sequence() && !t->is_none(), "input ", i, " must be a tensor");
    KILN_ENSURE(t->dtype() == ctx.input(0)->dtype(), "all inputs must have one dtype");
    items.push_back(*t);
  }
  ctx.set_output(0, Tensor::sequence(ctx.input(0)->dtype(), std::move(items)));
  return Status::ok();
}

Status sequence_empty(KernelContext& ctx) {
  auto dt = static_cast<DataType>(ctx.attr().get_int("dtype", static_cast<int64_t>(DataType::kFloat32)));
  KILN_ENSURE(is_supported_dtype(dt), "dtype ", static_cast<int>(dt), " is not supported");
  ctx.set_output(0, Tensor::sequence(dt, {}));
  return Status::ok();
}

Status sequence_at(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(need_sequence(ctx.input(0), "input_sequence"));
  const auto& items = ctx.input(0)->items();
  int64_t pos;
  KILN_RETURN_IF_ERROR(read_position(*ctx.input(1), static_cast<int64_t>(items.size()), false, &pos));
  ctx.set_output(0, items[static_cast<size_t>(pos)]);
  return Status::ok();
}

Status sequence_insert(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(need_sequence(ctx.input(0), "input_sequence"));
  const Tensor& seq = *ctx.input(0);
  const Tensor* t = ctx.input(1);
  KILN_ENSURE(t && !t->is_sequence(), "tensor must be a tensor");
  KILN_ENSURE(seq.items().empty() || seq.dtype() == t->dtype() || seq.dtype() == DataType::kUndefined,
              "cannot insert ", t->describe(), " into a sequence of ", dtype_name(seq.dtype()));
  std::vector<Tensor> items = seq.items();
  int64_t pos = static_cast<int64_t>(items.size());
  if (ctx.has_input(2)) KILN_RETURN_IF_ERROR(read_position(*ctx.input(2), pos, true, &pos));
  items.insert(items.begin() + pos, *t);
  ctx.set_output(0, Tensor::sequence(t->dtype(), std::move(items)));
  return Status::ok();
}

Status sequence_erase(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(need_sequence(ctx.input(0), "input_sequence"));
  std::vector<Tensor> items = ctx.input(0)->items();
  KILN_ENSURE(!items.empty(), "cannot erase from an empty sequence");
  int64_t pos = static_cast<int64_t>(items.size()) - 1;
  if (ctx.has_input(1)) KILN_RETURN_IF_ERROR(read_position(*ctx.input(1), static_cast<int64_t>(items.size()), false, &pos));
  items.erase(items.begin() + pos);
  ctx.set_output(0, Tensor::sequence(ctx.input(0)->dtype(), std::move(items)));
  return Status::ok();
}

Status sequence_length(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(need_sequence(ctx.input(0), "input_sequence"));
  ctx.set_output(0, make_scalar_int64(static_cast<int64_t>(ctx.input(0)->items().size())));
  return Status::ok();
}

// Copies [start, start+len) of t along axis.
Tensor narrow(const Tensor& t, int64_t axis, int64_t start, int64_t len) {
  Dims d = t.dims();
  d[static_cast<size_t>(axis)] = len;
  Dims strides = contiguous_strides(t.dims());
  return gather_view(t, d, start * strides[static_cast<size_t>(axis)], strides);
}

Status split_to_sequence(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.rank() >= 1, "input must have rank >= 1");
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), x.rank(), &axis));
  const int64_t dim = x.dims()[static_cast<size_t>(axis)];
  std::vector<Tensor> items;
  if (!ctx.has_input(1)) {
    bool keepdims = ctx.attr().get_int("keepdims", 1) != 0;
    for (int64_t i = 0; i < dim; ++i) {
      Tensor piece = narrow(x, axis, i, 1);
      if (!keepdims) {
        Dims d = piece.dims();
        d.erase(d.begin() + axis);
        piece = piece.reshaped(d);
      }
      items.push_back(piece);
    }
  } else {
    const Tensor& split = *ctx.input(1);
    KILN_ENSURE(is_integer(split.dtype()) && split.rank() <= 1, "split must be an integer scalar or 1-D tensor");
    std::vector<int64_t> sizes;
    if (split.rank() == 0) {
      int64_t chunk = split.get_int(0);
      KILN_ENSURE(chunk > 0, "split must be positive, got ", chunk);
      for (int64_t s = 0; s < dim; s += chunk) sizes.push_back(std::min(chunk, dim - s));
    } else {
      sizes = split.to_int_vector();
      int64_t total = 0;
      for (int64_t s : sizes) {
        KILN_ENSURE(s >= 0, "split sizes must be non-negative");
        total += s;
      }
      KILN_ENSURE(total == dim, "split sizes sum to ", total, " but the axis has ", dim);
    }
    int64_t start = 0;
    for (int64_t s : sizes) {
      items.push_back(narrow(x, axis, start, s));
      start += s;
    }
  }
  ctx.set_output(0, Tensor::sequence(x.dtype(), std::move(items)));
  return Status::ok();
}

Status concat_from_sequence(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(need_sequence(ctx.input(0), "input_sequence"));
  const auto& items = ctx.input(0)->items();
  KILN_ENSURE(!items.empty(), "cannot concatenate an empty sequence");
  const bool new_axis = ctx.attr().get_int("new_axis", 0) != 0;
  const Tensor& first = items[0];
  int64_t axis;
  KILN_RETURN_IF_ERROR(normalize_axis(ctx.attr().get_int("axis", 0), first.rank() + (new_axis ? 1 : 0), &axis));
  std::vector<Tensor> parts;
  for (const Tensor& t : items) {
    KILN_ENSURE(t.dtype() == first.dtype() && t.rank() == first.rank(), "sequence items differ in dtype or rank");
    if (new_axis) {
      Dims d = t.dims();
      d.insert(d.begin() + axis, 1);
      parts.push_back(t.reshaped(d));
    } else {
      parts.push_back(t);
    }
  }
  Dims out_dims = parts[0].dims();
  int64_t total = 0;
  for (const Tensor& p : parts) {
    for (size_t d = 0; d < out_dims.size(); ++d) {
      KILN_ENSURE(static_cast<int64_t>(d) == axis || p.dims()[d] == out_dims[d], "sequence items have mismatched shapes ",
                  dims_str(p.dims()), " and ", dims_str(out_dims));
    }
    total += p.dims()[static_cast<size_t>(axis)];
  }
  out_dims[static_cast<size_t>(axis)] = total;
  Tensor& out = ctx.alloc_output(0, first.dtype(), out_dims);
  Dims out_strides = contiguous_strides(out_dims);
  int64_t offset = 0;
  for (const Tensor& p : parts) {
    shape_detail::copy_strided(dtype_size(p.dtype()), p.dims(), p.raw(), 0, contiguous_strides(p.dims()), out.raw(),
                               offset * out_strides[static_cast<size_t>(axis)], out_strides);
    offset += p.dims()[static_cast<size_t>(axis)];
  }
  return Status::ok();
}

// SequenceMap: runs the body once per position; sequence inputs give their i-th item,
// tensor inputs are passed whole each time.
Status sequence_map(KernelContext& ctx) {
  KILN_ENSURE(ctx.run_subgraph != nullptr, "subgraphs cannot run in this context");
  auto body = ctx.attr().get_graph("body");
  KILN_ENSURE(body != nullptr, "missing body attribute");
  KILN_RETURN_IF_ERROR(need_sequence(ctx.input(0), "input_sequence"));
  const size_t n = ctx.input(0)->items().size();
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor* t = ctx.input(i);
    KILN_ENSURE(t != nullptr, "input ", i, " is missing");
    KILN_ENSURE(!t->is_sequence() || t->items().size() == n, "input sequences have different lengths");
  }
  std::vector<std::vector<Tensor>> outs(ctx.outputs.size());
  for (size_t k = 0; k < n; ++k) {
    std::vector<Tensor> in;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = *ctx.input(i);
      in.push_back(t.is_sequence() ? t.items()[k] : t);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> o, ctx.run_subgraph(*body, in));
    KILN_ENSURE(o.size() == outs.size(), "body returned ", o.size(), " outputs, expected ", outs.size());
    for (size_t j = 0; j < o.size(); ++j) outs[j].push_back(std::move(o[j]));
  }
  for (size_t j = 0; j < outs.size(); ++j) {
    DataType dt = outs[j].empty() ? body->outputs()[j]->dtype : outs[j][0].dtype();
    ctx.set_output(j, Tensor::sequence(dt, std::move(outs[j])));
  }
  return Status::ok();
}

// Optional(x) wraps x (a value is just itself); Optional() with a `type` attribute is none.
Status optional_kernel(KernelContext& ctx) {
  if (ctx.has_input(0)) {
    ctx.set_output(0, *ctx.input(0));
    return Status::ok();
  }
  std::string type = ctx.attr().get_string("type", "");
  KILN_ENSURE(!type.empty(), "an Optional without input needs the type attribute");
  bool seq = type.rfind("seq:", 0) == 0;
  // Parsed without std::stoi, which threw on a fuzzed `type` attribute ("none").
  const size_t colon = type.find(':');
  const std::string code = colon == std::string::npos ? std::string() : type.substr(colon + 1);
  char* end = nullptr;
  const long v = std::strtol(code.c_str(), &end, 10);
  const auto dt = static_cast<DataType>(v);
  KILN_ENSURE(!code.empty() && *end == '\0' && v >= 0 && v < 64 && is_supported_dtype(dt), "bad Optional type attribute '",
              type, "'");
  ctx.set_output(0, Tensor::none(dt, seq));
  return Status::ok();
}

Status optional_has_element(KernelContext& ctx) {
  bool has = ctx.has_input(0) && !ctx.input(0)->is_none();
  ctx.set_output(0, make_tensor<bool>({}, {has}));
  return Status::ok();
}

Status optional_get_element(KernelContext& ctx) {
  const Tensor* t = ctx.input(0);
  KILN_ENSURE(t != nullptr && !t->is_none(), "the optional holds no value");
  ctx.set_output(0, *t);
  return Status::ok();
}

}  // namespace

void register_sequence_kernels(KernelRegistry& r) {
  r.add(Op::SequenceConstruct, sequence_construct);
  r.add(Op::SequenceEmpty, sequence_empty);
  r.add(Op::SequenceAt, sequence_at);
  r.add(Op::SequenceInsert, sequence_insert);
  r.add(Op::SequenceErase, sequence_erase);
  r.add(Op::SequenceLength, sequence_length);
  r.add(Op::SplitToSequence, split_to_sequence);
  r.add(Op::ConcatFromSequence, concat_from_sequence);
  r.add(Op::SequenceMap, sequence_map);
  r.add(Op::Optional, optional_kernel);
  r.add(Op::OptionalHasElement, optional_has_element);
  r.add(Op::OptionalGetElement, optional_get_element);
}

}  // namespace kiln

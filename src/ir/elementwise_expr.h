// The small SSA program a FusedElementwise node carries in its `expr` attribute: the
// fusion pass writes it, the reference kernel and shape inference read it, and the GPU
// backend will translate it into one NVRTC kernel. It depends only on the op table and
// attributes (no graph), so kernels may use it.
//
// Format: statements separated by ';' or newlines, whitespace is free:
//   t0 = Mul(x0, x1); t1 = Add(t0, x2); t2 = LeakyRelu[alpha=0.1](t1); y = t2
// - xI is the node's input I; tK is the value of statement K. Statement K assigns tK
//   (temps are numbered 0, 1, 2... in order) and reads only inputs and earlier temps.
// - An op is an elementwise op of the op table (kElementwise flag), by its kiln name, with
//   as many arguments as the table allows; `_` stands for an omitted optional input
//   (Clip(t0, _, x1): no min).
// - Attributes in [name=value,...] must be listed in the op's attribute spec with type
//   i (decimal integer), f (shortest decimal that reads back as the same float:
//   std::to_chars/from_chars; inf, -inf and nan allowed) or s (letters, digits, '_', '-',
//   '.' only; no quotes). Attributes not given take the op's defaults.
// - The last statement `y = tK` names the output.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/attributes.h"
#include "core/status.h"
#include "ir/op.h"

namespace kiln {

struct ExprArg {
  enum class Kind { kInput, kTemp, kOmitted };
  Kind kind = Kind::kOmitted;
  int index = -1;  // xI or tK
};

struct ExprInstr {
  Op op = Op::Identity;
  Attributes attrs;
  std::vector<ExprArg> args;
};

struct ElementwiseProgram {
  std::vector<ExprInstr> instrs;
  int output = -1;      // the temp named by `y = tK`
  int num_inputs = 0;   // 1 + the largest xI referenced
};

// Most inputs a FusedElementwise node takes (ops.def), and so the most an expr may read.
constexpr int kMaxFusedElementwiseInputs = 16;

// Parses and validates an expr; errors name the statement and what is wrong with it.
Result<ElementwiseProgram> parse_elementwise_expr(std::string_view expr);

// Writes a program in the format above (parse_elementwise_expr reads it back exactly).
// Fails when an attribute cannot be encoded (see encodable_elementwise_attrs).
Result<std::string> format_elementwise_expr(const ElementwiseProgram& p);

// Whether an op may appear in an expr, and whether all of a node's attributes can be
// written in it (listed in the op's spec as i/f/s, strings of the allowed characters).
bool is_expr_op(Op op);
bool encodable_elementwise_attrs(Op op, const Attributes& attrs);

}  // namespace kiln

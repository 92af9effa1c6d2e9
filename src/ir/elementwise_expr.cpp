#include "ir/elementwise_expr.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

namespace kiln {

namespace {

// name -> type letter(s) from an op's attribute spec ("alpha:f,beta:f").
std::map<std::string, std::string> attr_types(Op op) {
  std::map<std::string, std::string> out;
  std::string_view spec = op_info(op).attr_spec;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) continue;
    out[std::string(item.substr(0, colon))] = std::string(item.substr(colon + 1));
  }
  return out;
}

bool is_string_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A cursor over one statement; every read skips leading whitespace.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool done() {
    skip_space();
    return pos_ >= s_.size();
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  char peek() {
    skip_space();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  // A run of characters accepted by `ok` (possibly empty).
  template <typename Pred>
  std::string_view take(Pred ok) {
    skip_space();
    const size_t begin = pos_;
    while (pos_ < s_.size() && ok(s_[pos_])) ++pos_;
    return s_.substr(begin, pos_ - begin);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

// "x3" / "t12" with the given prefix; -1 when malformed.
int parse_index(std::string_view tok, char prefix) {
  if (tok.size() < 2 || tok[0] != prefix) return -1;
  int v = -1;
  auto [p, ec] = std::from_chars(tok.data() + 1, tok.data() + tok.size(), v);
  if (ec != std::errc() || p != tok.data() + tok.size() || v < 0) return -1;
  if (tok.size() > 2 && tok[1] == '0') return -1;  // one spelling per index
  return v;
}

// Reads an attribute value of the spec's type into attrs; returns an error text or "".
std::string parse_attr_value(const std::string& name, const std::string& type, std::string_view text,
                             Attributes* attrs) {
  std::string err;
  const char* b = text.data();
  const char* e = text.data() + text.size();
  if (type == "i") {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p != e) err = cat("attribute '", name, "': '", text, "' is not an integer");
    else attrs->set(name, v);
  } else if (type == "f") {
    float v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p != e) err = cat("attribute '", name, "': '", text, "' is not a float");
    else attrs->set(name, v);
  } else if (type == "s") {
    bool ok = !text.empty();
    for (char c : text) ok = ok && is_string_char(c);
    if (!ok) err = cat("attribute '", name, "': '", text, "' is not a plain string");
    else attrs->set(name, std::string(text));
  } else {
    err = cat("attribute '", name, "' has type ", type, ", which an expr cannot hold");
  }
  return err;
}

// Parses `Op[attrs](args)` into `in`; returns an error text or "".
std::string parse_call(Cursor& c, int stmt_index, ExprInstr* in, int* max_input) {
  const std::string_view op_name_text = c.take(is_ident_char);
  if (op_name_text.empty()) return "expected an op name";
  const auto op = op_from_name(op_name_text);
  if (!op) return cat("unknown op '", op_name_text, "'");
  if (!is_expr_op(*op)) return cat("op '", op_name_text, "' is not an elementwise op an expr may use");
  in->op = *op;
  if (c.eat('[')) {
    const auto types = attr_types(*op);
    std::set<std::string> seen;
    if (!c.eat(']')) {
      do {
        const std::string name(c.take(is_ident_char));
        if (name.empty()) return "expected an attribute name";
        if (!c.eat('=')) return cat("expected '=' after attribute '", name, "'");
        const std::string_view value = c.take([](char ch) { return ch != ',' && ch != ']' && !std::isspace(static_cast<unsigned char>(ch)); });
        auto it = types.find(name);
        if (it == types.end()) return cat("op ", op_name_text, " has no attribute '", name, "'");
        if (!seen.insert(name).second) return cat("attribute '", name, "' is given twice");
        std::string err = parse_attr_value(name, it->second, value, &in->attrs);
        if (!err.empty()) return err;
      } while (c.eat(','));
      if (!c.eat(']')) return "expected ']' after the attributes";
    }
  }
  if (!c.eat('(')) return "expected '(' after the op";
  if (!c.eat(')')) {
    do {
      const std::string_view tok = c.take(is_ident_char);
      ExprArg a;
      if (tok == "_") {
        a.kind = ExprArg::Kind::kOmitted;
      } else if (!tok.empty() && tok[0] == 'x') {
        a.kind = ExprArg::Kind::kInput;
        a.index = parse_index(tok, 'x');
        if (a.index < 0 || a.index >= kMaxFusedElementwiseInputs) {
          return cat("bad input '", tok, "' (x0..x", kMaxFusedElementwiseInputs - 1, ")");
        }
        *max_input = std::max(*max_input, a.index);
      } else if (!tok.empty() && tok[0] == 't') {
        a.kind = ExprArg::Kind::kTemp;
        a.index = parse_index(tok, 't');
        if (a.index < 0 || a.index >= stmt_index) return cat("'", tok, "' is not defined before this statement");
      } else {
        return tok.empty() ? std::string("expected an argument") : cat("bad argument '", tok, "'");
      }
      in->args.push_back(a);
    } while (c.eat(','));
    if (!c.eat(')')) return "expected ')' after the arguments";
  }
  const OpInfo& info = op_info(*op);
  const int n = static_cast<int>(in->args.size());
  if (n < info.min_inputs || (info.max_inputs >= 0 && n > info.max_inputs)) {
    return cat(op_name_text, " takes ", info.min_inputs,
               info.max_inputs < 0 ? " or more" : cat(" to ", info.max_inputs), " arguments, got ", n);
  }
  for (int i = 0; i < n; ++i) {
    const bool omitted = in->args[static_cast<size_t>(i)].kind == ExprArg::Kind::kOmitted;
    if (omitted && (i < info.min_inputs || i == n - 1)) return cat("argument ", i, " of ", op_name_text, " cannot be omitted");
  }
  if (!c.done()) return "unexpected text after ')'";
  return "";
}

std::string format_attr(const Attribute& a) {
  if (const auto* f = std::get_if<float>(&a.value)) {
    char buf[64];
    auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), *f);
    return ec == std::errc() ? std::string(buf, p) : std::string();
  }
  if (const auto* i = std::get_if<int64_t>(&a.value)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&a.value)) return *s;
  return "";
}

}  // namespace

bool is_expr_op(Op op) {
  const OpInfo& info = op_info(op);
  return op_has_flag(op, kElementwise) && !op_has_flag(op, kStrings) && info.max_outputs == 1;
}

bool encodable_elementwise_attrs(Op op, const Attributes& attrs) {
  const auto types = attr_types(op);
  for (const auto& [name, a] : attrs.all()) {
    auto it = types.find(name);
    if (it == types.end()) return false;
    const std::string& t = it->second;
    if (t == "i" && a.type() == AttrType::kInt) continue;
    if (t == "f" && a.type() == AttrType::kFloat) continue;
    if (t == "s" && a.type() == AttrType::kString) {
      const std::string& s = std::get<std::string>(a.value);
      bool ok = !s.empty();
      for (char c : s) ok = ok && is_string_char(c);
      if (ok) continue;
    }
    return false;
  }
  return true;
}

Result<ElementwiseProgram> parse_elementwise_expr(std::string_view expr) {
  ElementwiseProgram p;
  bool have_output = false;
  int stmt_no = 0;
  int max_input = -1;
  size_t begin = 0;
  while (begin <= expr.size()) {
    size_t end = expr.find_first_of(";\n", begin);
    if (end == std::string_view::npos) end = expr.size();
    const std::string_view stmt = trim(expr.substr(begin, end - begin));
    begin = end + 1;
    if (stmt.empty()) continue;
    ++stmt_no;
    auto fail = [&](const std::string& what) {
      return invalid_argument("FusedElementwise expr, statement ", stmt_no, " '", stmt, "': ", what);
    };
    if (have_output) return fail("nothing may follow the output statement 'y = tK'");
    const size_t eq = stmt.find('=');
    if (eq == std::string_view::npos) return fail("expected 'tK = Op(...)' or 'y = tK'");
    const std::string_view lhs = trim(stmt.substr(0, eq));
    Cursor c(stmt.substr(eq + 1));
    if (lhs == "y") {
      const std::string_view tok = c.take(is_ident_char);
      const int k = parse_index(tok, 't');
      if (k < 0 || k >= static_cast<int>(p.instrs.size())) return fail(cat("'", tok, "' is not a defined temp"));
      if (!c.done()) return fail("unexpected text after the output temp");
      p.output = k;
      have_output = true;
      continue;
    }
    const int k = parse_index(lhs, 't');
    if (k != static_cast<int>(p.instrs.size())) {
      return fail(cat("expected the statement to assign t", p.instrs.size(), ", not '", lhs, "'"));
    }
    ExprInstr in;
    const std::string err = parse_call(c, k, &in, &max_input);
    if (!err.empty()) return fail(err);
    p.instrs.push_back(std::move(in));
  }
  if (p.instrs.empty()) return invalid_argument("FusedElementwise expr has no statements");
  if (!have_output) return invalid_argument("FusedElementwise expr does not end with the output statement 'y = tK'");
  p.num_inputs = max_input + 1;
  return p;
}

Result<std::string> format_elementwise_expr(const ElementwiseProgram& p) {
  std::string out;
  for (size_t k = 0; k < p.instrs.size(); ++k) {
    const ExprInstr& in = p.instrs[k];
    if (!is_expr_op(in.op) || !encodable_elementwise_attrs(in.op, in.attrs)) {
      return invalid_argument("cannot write ", op_name(in.op), " (or its attributes) in a FusedElementwise expr");
    }
    out += cat("t", k, " = ", op_name(in.op));
    if (!in.attrs.empty()) {
      out += "[";
      bool first = true;
      for (const auto& [name, a] : in.attrs.all()) {
        out += cat(first ? "" : ",", name, "=", format_attr(a));
        first = false;
      }
      out += "]";
    }
    out += "(";
    for (size_t i = 0; i < in.args.size(); ++i) {
      const ExprArg& a = in.args[i];
      if (i > 0) out += ", ";
      out += a.kind == ExprArg::Kind::kInput ? cat("x", a.index) : a.kind == ExprArg::Kind::kTemp ? cat("t", a.index) : "_";
    }
    out += "); ";
  }
  out += cat("y = t", p.output);
  return out;
}

}  // namespace kiln

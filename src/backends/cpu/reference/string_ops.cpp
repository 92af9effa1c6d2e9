// String tensors: Cast to/from string, Equal on strings, and the string ops
// (StringNormalizer, StringConcat, RegexFullMatch, StringSplit).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <regex>

#include "backends/cpu/reference/kernel.h"
#include "backends/cpu/reference/util.h"

namespace kiln {

namespace {

const std::string* strs(const Tensor& t) { return t.data<std::string>(); }
std::string* strs(Tensor& t) { return t.data<std::string>(); }

// Shortest round-trip text, as numpy prints float32/float64 values.
template <typename T>
std::string to_text(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "True" : "False";
  } else if constexpr (is_half_like_v<T>) {
    return to_text(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  } else {
    return std::to_string(v);
  }
}

template <typename T>
Status from_text(const std::string& s, T* out) {
  std::string t = s;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if constexpr (std::is_same_v<T, bool>) {
    *out = !(t.empty() || t == "0" || t == "false");
    return Status::ok();
  } else {
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    KILN_ENSURE(end != s.c_str(), "cannot parse '", s, "' as a number");
    *out = convert_element<T>(d);
    return Status::ok();
  }
}

}  // namespace

Status cast_with_strings(KernelContext& ctx, DataType to) {
  const Tensor& x = *ctx.input(0);
  if (x.is_string() && to == DataType::kString) {
    ctx.set_output(0, x);
    return Status::ok();
  }
  if (to == DataType::kString) {
    Tensor& out = ctx.alloc_output(0, DataType::kString, x.dims());
    bool ok = dispatch_all(x.dtype(), [&]<typename T>() {
      for (int64_t i = 0; i < x.size(); ++i) strs(out)[i] = to_text(x.data<T>()[i]);
    });
    if (!ok) return unsupported("Cast from ", dtype_name(x.dtype()), " to string is not supported");
    return Status::ok();
  }
  Tensor& out = ctx.alloc_output(0, to, x.dims());
  Status st;
  bool ok = dispatch_all(to, [&]<typename T>() {
    for (int64_t i = 0; i < x.size() && st.is_ok(); ++i) st = from_text(strs(x)[i], out.data<T>() + i);
  });
  if (!ok) return unsupported("Cast from string to ", dtype_name(to), " is not supported");
  return st;
}

Status equal_strings(KernelContext& ctx) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  KILN_ENSURE(a.is_string() && b.is_string(), "Equal needs both inputs to be strings, got ", a.describe(), " and ", b.describe());
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({a.dims(), b.dims()}, &out_dims));
  Tensor& out = ctx.alloc_output(0, DataType::kBool, out_dims);
  BroadcastIndexer(out_dims, {a.dims(), b.dims()}).for_each([&](int64_t i, const int64_t* off) {
    out.data<bool>()[i] = strs(a)[off[0]] == strs(b)[off[1]];
  });
  return Status::ok();
}

namespace {

Status string_concat(KernelContext& ctx) {
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  KILN_ENSURE(a.is_string() && b.is_string(), "inputs must be strings");
  Dims out_dims;
  KILN_RETURN_IF_ERROR(broadcast_shapes({a.dims(), b.dims()}, &out_dims));
  Tensor& out = ctx.alloc_output(0, DataType::kString, out_dims);
  BroadcastIndexer(out_dims, {a.dims(), b.dims()}).for_each([&](int64_t i, const int64_t* off) {
    strs(out)[i] = strs(a)[off[0]] + strs(b)[off[1]];
  });
  return Status::ok();
}

Status regex_full_match(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.is_string(), "input must be strings");
  std::string pattern = ctx.attr().get_string("pattern", "");
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return invalid_argument("pattern '", pattern, "' is not a valid regular expression: ", e.what());
  }
  Tensor& out = ctx.alloc_output(0, DataType::kBool, x.dims());
  for (int64_t i = 0; i < x.size(); ++i) out.data<bool>()[i] = std::regex_match(strs(x)[i], re);
  return Status::ok();
}

std::vector<std::string> split_one(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (delim.empty()) {
    // Whitespace split: runs of whitespace separate, leading/trailing ignored.
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(s.substr(i));
        size_t e = parts.back().find_last_not_of(" \t\n\r\f\v");
        parts.back() = parts.back().substr(0, e + 1);
        break;
      }
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(s.substr(start));
      break;
    }
    size_t p = s.find(delim, start);
    if (p == std::string::npos) {
      parts.push_back(s.substr(start));
      break;
    }
    parts.push_back(s.substr(start, p - start));
    start = p + delim.size();
  }
  return parts;
}

Status string_split(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.is_string(), "input must be strings");
  std::string delim = ctx.attr().get_string("delimiter", "");
  int64_t maxsplit = ctx.attr().get_int("maxsplit", -1);
  std::vector<std::vector<std::string>> all;
  size_t width = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    all.push_back(split_one(strs(x)[i], delim, maxsplit));
    width = std::max(width, all.back().size());
  }
  Dims yd = x.dims();
  yd.push_back(static_cast<int64_t>(width));
  Tensor& y = ctx.alloc_output(0, DataType::kString, yd);
  Tensor& z = ctx.alloc_output(1, DataType::kInt64, x.dims());
  for (int64_t i = 0; i < x.size(); ++i) {
    const auto& parts = all[static_cast<size_t>(i)];
    for (size_t k = 0; k < parts.size(); ++k) strs(y)[static_cast<size_t>(i) * width + k] = parts[k];
    z.data<int64_t>()[i] = static_cast<int64_t>(parts.size());
  }
  return Status::ok();
}

Status string_normalizer(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_ENSURE(x.is_string(), "input must be strings");
  KILN_ENSURE(x.rank() == 1 || (x.rank() == 2 && x.dims()[0] == 1), "input must be [C] or [1, C], got ", dims_str(x.dims()));
  std::string action = ctx.attr().get_string("case_change_action", "NONE");
  KILN_ENSURE(action == "NONE" || action == "LOWER" || action == "UPPER", "case_change_action '", action, "' is invalid");
  bool case_sensitive = ctx.attr().get_int("is_case_sensitive", 0) != 0;
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  std::vector<std::string> stop = ctx.attr().get_strings("stopwords");
  auto is_stop = [&](const std::string& w) {
    for (const auto& s : stop) {
      if (case_sensitive ? s == w : lower(s) == lower(w)) return true;
    }
    return false;
  };
  std::vector<std::string> kept;
  for (int64_t i = 0; i < x.size(); ++i) {
    const std::string& w = strs(x)[i];
    if (is_stop(w)) continue;
    std::string v = w;
    if (action == "LOWER") v = lower(v);
    if (action == "UPPER") std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    kept.push_back(v);
  }
  // All stopwords: a single empty string, per the spec.
  if (kept.empty()) kept.push_back("");
  Dims d = x.rank() == 1 ? Dims{static_cast<int64_t>(kept.size())} : Dims{1, static_cast<int64_t>(kept.size())};
  Tensor& out = ctx.alloc_output(0, DataType::kString, d);
  for (size_t i = 0; i < kept.size(); ++i) strs(out)[i] = kept[i];
  return Status::ok();
}

}  // namespace

void register_string_kernels(KernelRegistry& r) {
  r.add(Op::StringConcat, string_concat);
  r.add(Op::RegexFullMatch, regex_full_match);
  r.add(Op::StringSplit, string_split);
  r.add(Op::StringNormalizer, string_normalizer);
}

}  // namespace kiln

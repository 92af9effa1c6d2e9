// Recurrent reference kernels: RNN, GRU, LSTM (all directions, both layouts, optional
// bias / sequence_lens / initial states / peepholes, configurable activations and clip).
//
// Layout 0: X [seq, batch, input], Y [seq, dirs, batch, hidden], Y_h/Y_c [dirs, batch, hidden].
// Layout 1: X [batch, seq, input], Y [batch, seq, dirs, hidden], Y_h/Y_c [batch, dirs, hidden].
// With sequence_lens, batch entry b runs only its first len[b] steps (a reverse direction
// starts at step len[b]-1); Y is zero past len[b] and Y_h/Y_c hold the last computed state.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/reference/kernel.h"

namespace kiln {

namespace {

enum class RnnKind { kRnn, kGru, kLstm };

// ---- activation functions ----

enum class ActKind { kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
                     kSoftsign, kSoftplus };

struct Activation {
  ActKind kind = ActKind::kTanh;
  double alpha = 0.0;
  double beta = 0.0;

  double operator()(double x) const {
    switch (kind) {
      case ActKind::kRelu: return x > 0 ? x : 0.0;
      case ActKind::kTanh: return std::tanh(x);
      case ActKind::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
      case ActKind::kAffine: return alpha * x + beta;
      case ActKind::kLeakyRelu: return x >= 0 ? x : alpha * x;
      case ActKind::kThresholdedRelu: return x > alpha ? x : 0.0;
      case ActKind::kScaledTanh: return alpha * std::tanh(beta * x);
      case ActKind::kHardSigmoid: return std::min(std::max(alpha * x + beta, 0.0), 1.0);
      case ActKind::kElu: return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
      case ActKind::kSoftsign: return x / (1.0 + std::fabs(x));
      case ActKind::kSoftplus: return x > 30.0 ? x : std::log1p(std::exp(x));
    }
    return x;
  }
};

struct ActInfo {
  const char* name;
  ActKind kind;
  bool uses_alpha, uses_beta;
  double def_alpha, def_beta;
};

constexpr ActInfo kActivations[] = {
    {"relu", ActKind::kRelu, false, false, 0.0, 0.0},
    {"tanh", ActKind::kTanh, false, false, 0.0, 0.0},
    {"sigmoid", ActKind::kSigmoid, false, false, 0.0, 0.0},
    {"affine", ActKind::kAffine, true, true, 1.0, 0.0},
    {"leakyrelu", ActKind::kLeakyRelu, true, false, 0.01, 0.0},
    {"thresholdedrelu", ActKind::kThresholdedRelu, true, false, 1.0, 0.0},
    {"scaledtanh", ActKind::kScaledTanh, true, true, 1.0, 1.0},
    {"hardsigmoid", ActKind::kHardSigmoid, true, true, 0.2, 0.5},
    {"elu", ActKind::kElu, true, false, 1.0, 0.0},
    {"softsign", ActKind::kSoftsign, false, false, 0.0, 0.0},
    {"softplus", ActKind::kSoftplus, false, false, 0.0, 0.0},
};

// Reads `activations` / `activation_alpha` / `activation_beta`. The result holds
// per_dir activations for each direction. alpha/beta values are consumed in order by the
// activations that use them; missing ones take the activation's default.
Status parse_activations(const Attributes& a, const std::vector<std::string>& defaults, int64_t num_dir,
                         std::vector<Activation>* out) {
  const size_t per_dir = defaults.size();
  std::vector<std::string> names;
  if (a.has("activations")) {
    names = a.get_strings("activations");
    if (names.size() == per_dir && num_dir == 2) {
      std::vector<std::string> twice = names;
      twice.insert(twice.end(), names.begin(), names.end());
      names = twice;
    }
    if (names.size() != per_dir * static_cast<size_t>(num_dir)) {
      return invalid_argument("activations has ", names.size(), " entries, expected ", per_dir * num_dir, " (",
                              per_dir, " per direction)");
    }
  } else {
    for (int64_t d = 0; d < num_dir; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  const std::vector<float> alphas = a.get_floats("activation_alpha");
  const std::vector<float> betas = a.get_floats("activation_beta");
  size_t ai = 0, bi = 0;
  out->clear();
  for (const std::string& n : names) {
    std::string lower;
    for (char c : n) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    const ActInfo* info = nullptr;
    for (const ActInfo& cand : kActivations) {
      if (lower == cand.name) info = &cand;
    }
    if (!info) return invalid_argument("unsupported activation function '", n, "'");
    Activation act;
    act.kind = info->kind;
    act.alpha = info->def_alpha;
    act.beta = info->def_beta;
    if (info->uses_alpha && ai < alphas.size()) act.alpha = alphas[ai++];
    if (info->uses_beta && bi < betas.size()) act.beta = betas[bi++];
    out->push_back(act);
  }
  return Status::ok();
}

// ---- shapes and validation ----

struct RnnShape {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, num_dir = 1, gates = 1;
  int64_t layout = 0;
  bool reverse_only = false;  // direction == "reverse"
  bool has_clip = false;
  double clip = 0.0;
  std::vector<int64_t> seq_lens;  // per batch entry
  std::vector<Activation> acts;   // acts_per_dir * num_dir

  // Offsets into X, Y and the state outputs for the chosen layout.
  int64_t x_off(int64_t t, int64_t b) const { return (layout == 0 ? t * batch + b : b * seq + t) * input; }
  int64_t y_off(int64_t t, int64_t d, int64_t b) const {
    return (layout == 0 ? (t * num_dir + d) * batch + b : (b * seq + t) * num_dir + d) * hidden;
  }
  int64_t state_off(int64_t d, int64_t b) const { return (layout == 0 ? d * batch + b : b * num_dir + d) * hidden; }
  Dims y_dims() const { return layout == 0 ? Dims{seq, num_dir, batch, hidden} : Dims{batch, seq, num_dir, hidden}; }
  Dims state_dims() const { return layout == 0 ? Dims{num_dir, batch, hidden} : Dims{batch, num_dir, hidden}; }
};

Status check_shape(const Tensor* t, const char* what, const Dims& want) {
  if (!t) return Status::ok();
  if (t->dims() != want) return invalid_argument(what, " must have shape ", dims_str(want), ", got ", dims_str(t->dims()));
  return Status::ok();
}

Status prepare(const KernelContext& ctx, RnnKind kind, RnnShape* s) {
  const Attributes& a = ctx.attr();
  const Tensor* x = ctx.input(0);
  const Tensor* w = ctx.input(1);
  const Tensor* r = ctx.input(2);
  KILN_ENSURE(x && w && r, "inputs X, W and R are required");
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor* t = ctx.input(i);
    if (!t || i == 4) continue;  // sequence_lens is an integer tensor
    if (t->dtype() != x->dtype()) {
      return invalid_argument("input ", i, " has dtype ", dtype_name(t->dtype()), " but X has ", dtype_name(x->dtype()));
    }
  }
  s->gates = kind == RnnKind::kLstm ? 4 : kind == RnnKind::kGru ? 3 : 1;
  s->layout = a.get_int("layout", 0);
  KILN_ENSURE(s->layout == 0 || s->layout == 1, "layout must be 0 or 1, got ", s->layout);
  const std::string direction = a.get_string("direction", "forward");
  if (direction == "forward" || direction == "reverse") {
    s->num_dir = 1;
    s->reverse_only = direction == "reverse";
  } else if (direction == "bidirectional") {
    s->num_dir = 2;
  } else {
    return invalid_argument("direction must be forward, reverse or bidirectional, got '", direction, "'");
  }
  KILN_ENSURE(x->rank() == 3, "X must have rank 3, got shape ", dims_str(x->dims()));
  KILN_ENSURE(w->rank() == 3, "W must have rank 3, got shape ", dims_str(w->dims()));
  KILN_ENSURE(r->rank() == 3, "R must have rank 3, got shape ", dims_str(r->dims()));
  s->seq = s->layout == 0 ? x->dim(0) : x->dim(1);
  s->batch = s->layout == 0 ? x->dim(1) : x->dim(0);
  s->input = x->dim(2);
  s->hidden = r->dim(2);
  if (a.has("hidden_size")) {
    const int64_t hs = a.get_int("hidden_size", 0);
    KILN_ENSURE(hs == s->hidden, "hidden_size attribute ", hs, " does not match R's last dimension ", s->hidden);
  }
  KILN_ENSURE(s->hidden > 0, "hidden size must be positive, got ", s->hidden);
  const int64_t g = s->gates, h = s->hidden, nd = s->num_dir;
  KILN_RETURN_IF_ERROR(check_shape(w, "W", {nd, g * h, s->input}));
  KILN_RETURN_IF_ERROR(check_shape(r, "R", {nd, g * h, h}));
  KILN_RETURN_IF_ERROR(check_shape(ctx.input(3), "B", {nd, 2 * g * h}));
  KILN_RETURN_IF_ERROR(check_shape(ctx.input(5), "initial_h", s->state_dims()));
  if (kind == RnnKind::kLstm) {
    KILN_RETURN_IF_ERROR(check_shape(ctx.input(6), "initial_c", s->state_dims()));
    KILN_RETURN_IF_ERROR(check_shape(ctx.input(7), "P", {nd, 3 * h}));
  }
  s->seq_lens.assign(static_cast<size_t>(s->batch), s->seq);
  if (const Tensor* sl = ctx.input(4)) {
    KILN_ENSURE(sl->dtype() == DataType::kInt32 || sl->dtype() == DataType::kInt64, "sequence_lens must be int32, got ",
                dtype_name(sl->dtype()));
    KILN_ENSURE(sl->dims() == Dims{s->batch}, "sequence_lens must have shape [", s->batch, "], got ",
                dims_str(sl->dims()));
    for (int64_t b = 0; b < s->batch; ++b) {
      const int64_t len = sl->get_int(b);
      KILN_ENSURE(len >= 0 && len <= s->seq, "sequence_lens[", b, "] = ", len, " is outside [0, ", s->seq, "]");
      s->seq_lens[static_cast<size_t>(b)] = len;
    }
  }
  if (a.has("clip")) {
    const float c = a.get_float("clip", 0.0f);
    KILN_ENSURE(c > 0.0f, "clip must be positive, got ", c);
    s->has_clip = true;
    s->clip = c;
  }
  std::vector<std::string> defaults;
  if (kind == RnnKind::kLstm) defaults = {"Sigmoid", "Tanh", "Tanh"};
  else if (kind == RnnKind::kGru) defaults = {"Sigmoid", "Tanh"};
  else defaults = {"Tanh"};
  KILN_RETURN_IF_ERROR(parse_activations(a, defaults, nd, &s->acts));
  const int64_t input_forget = a.get_int("input_forget", 0);
  KILN_ENSURE(input_forget == 0 || input_forget == 1, "input_forget must be 0 or 1, got ", input_forget);
  const int64_t lbr = a.get_int("linear_before_reset", 0);
  KILN_ENSURE(lbr == 0 || lbr == 1, "linear_before_reset must be 0 or 1, got ", lbr);
  return Status::ok();
}

// Reads a float tensor into doubles (empty when absent).
template <typename T>
std::vector<double> to_doubles(const Tensor* t) {
  std::vector<double> v;
  if (!t) return v;
  v.resize(static_cast<size_t>(t->size()));
  const T* p = t->data<T>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(to_compute(p[i]));
  return v;
}

// out[r] = sum_j m[row0 + r][j] * v[j] for r in [0, rows), m row-major with `cols` columns.
void matvec(const double* m, int64_t rows, int64_t cols, const double* v, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    const double* row = m + r * cols;
    for (int64_t j = 0; j < cols; ++j) acc += row[j] * v[j];
    out[r] = acc;
  }
}

template <typename T>
Status run_recurrent(KernelContext& ctx, RnnKind kind, const RnnShape& s) {
  const int64_t H = s.hidden, I = s.input, G = s.gates, nd = s.num_dir;
  const std::vector<double> X = to_doubles<T>(ctx.input(0));
  const std::vector<double> W = to_doubles<T>(ctx.input(1));
  const std::vector<double> R = to_doubles<T>(ctx.input(2));
  std::vector<double> B = to_doubles<T>(ctx.input(3));
  if (B.empty()) B.assign(static_cast<size_t>(nd * 2 * G * H), 0.0);
  const std::vector<double> H0 = to_doubles<T>(ctx.input(5));
  const std::vector<double> C0 = kind == RnnKind::kLstm ? to_doubles<T>(ctx.input(6)) : std::vector<double>();
  std::vector<double> P = kind == RnnKind::kLstm ? to_doubles<T>(ctx.input(7)) : std::vector<double>();
  if (P.empty()) P.assign(static_cast<size_t>(nd * 3 * H), 0.0);
  const bool input_forget = ctx.attr().get_int("input_forget", 0) != 0;
  const bool linear_before_reset = ctx.attr().get_int("linear_before_reset", 0) != 0;
  const size_t acts_per_dir = s.acts.size() / static_cast<size_t>(nd);

  const DataType dt = ctx.input(0)->dtype();
  Tensor& y = ctx.alloc_output(0, dt, s.y_dims());
  Tensor& yh = ctx.alloc_output(1, dt, s.state_dims());
  T* py = y.data<T>();
  T* pyh = yh.data<T>();
  T* pyc = nullptr;
  if (kind == RnnKind::kLstm) pyc = ctx.alloc_output(2, dt, s.state_dims()).data<T>();

  auto clip = [&](double v) { return s.has_clip ? std::min(std::max(v, -s.clip), s.clip) : v; };

  std::vector<double> h(static_cast<size_t>(H)), c(static_cast<size_t>(H)), xt(static_cast<size_t>(I));
  std::vector<double> wx(static_cast<size_t>(G * H)), rh(static_cast<size_t>(G * H)), tmp(static_cast<size_t>(H));
  for (int64_t d = 0; d < nd; ++d) {
    const bool reverse = s.reverse_only || d == 1;
    const double* Wd = W.data() + d * G * H * I;
    const double* Rd = R.data() + d * G * H * H;
    const double* Wb = B.data() + d * 2 * G * H;
    const double* Rb = Wb + G * H;
    const double* Pd = P.data() + d * 3 * H;
    const Activation* act = s.acts.data() + static_cast<size_t>(d) * acts_per_dir;
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t state = s.state_off(d, b);
      for (int64_t k = 0; k < H; ++k) {
        h[k] = H0.empty() ? 0.0 : H0[state + k];
        c[k] = C0.empty() ? 0.0 : C0[state + k];
      }
      const int64_t len = s.seq_lens[static_cast<size_t>(b)];
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = reverse ? len - 1 - step : step;
        const int64_t xo = s.x_off(t, b);
        for (int64_t i = 0; i < I; ++i) xt[i] = X[xo + i];
        matvec(Wd, G * H, I, xt.data(), wx.data());
        for (int64_t k = 0; k < G * H; ++k) wx[k] += Wb[k];
        if (kind == RnnKind::kRnn) {
          matvec(Rd, H, H, h.data(), rh.data());
          for (int64_t k = 0; k < H; ++k) h[k] = act[0](clip(wx[k] + rh[k] + Rb[k]));
        } else if (kind == RnnKind::kGru) {
          // Gates z, r, h. The z and r rows of R multiply H_{t-1}.
          matvec(Rd, 2 * H, H, h.data(), rh.data());
          std::vector<double> z(static_cast<size_t>(H)), rg(static_cast<size_t>(H));
          for (int64_t k = 0; k < H; ++k) {
            z[k] = act[0](clip(wx[k] + rh[k] + Rb[k]));
            rg[k] = act[0](clip(wx[H + k] + rh[H + k] + Rb[H + k]));
          }
          const double* Rh = Rd + 2 * H * H;
          if (linear_before_reset) {
            matvec(Rh, H, H, h.data(), tmp.data());
            for (int64_t k = 0; k < H; ++k) tmp[k] = rg[k] * (tmp[k] + Rb[2 * H + k]);
          } else {
            std::vector<double> rhprev(static_cast<size_t>(H));
            for (int64_t k = 0; k < H; ++k) rhprev[k] = rg[k] * h[k];
            matvec(Rh, H, H, rhprev.data(), tmp.data());
            for (int64_t k = 0; k < H; ++k) tmp[k] += Rb[2 * H + k];
          }
          for (int64_t k = 0; k < H; ++k) {
            const double hh = act[1](clip(wx[2 * H + k] + tmp[k]));
            h[k] = (1.0 - z[k]) * hh + z[k] * h[k];
          }
        } else {
          // Gates i, o, f, c; peepholes P = [p_i, p_o, p_f].
          matvec(Rd, 4 * H, H, h.data(), rh.data());
          for (int64_t k = 0; k < H; ++k) {
            const double cprev = c[k];
            const double gi = act[0](clip(wx[k] + rh[k] + Rb[k] + Pd[k] * cprev));
            double gf = act[0](clip(wx[2 * H + k] + rh[2 * H + k] + Rb[2 * H + k] + Pd[2 * H + k] * cprev));
            if (input_forget) gf = 1.0 - gi;
            const double gc = act[1](clip(wx[3 * H + k] + rh[3 * H + k] + Rb[3 * H + k]));
            const double cnew = gf * cprev + gi * gc;
            const double go = act[0](clip(wx[H + k] + rh[H + k] + Rb[H + k] + Pd[H + k] * cnew));
            c[k] = cnew;
            h[k] = go * act[2](cnew);
          }
        }
        const int64_t yo = s.y_off(t, d, b);
        for (int64_t k = 0; k < H; ++k) py[yo + k] = from_compute<T>(static_cast<compute_t<T>>(h[k]));
      }
      for (int64_t k = 0; k < H; ++k) {
        pyh[state + k] = from_compute<T>(static_cast<compute_t<T>>(h[k]));
        if (pyc) pyc[state + k] = from_compute<T>(static_cast<compute_t<T>>(c[k]));
      }
    }
  }
  return Status::ok();
}

Status recurrent_kernel(KernelContext& ctx, RnnKind kind) {
  RnnShape s;
  KILN_RETURN_IF_ERROR(prepare(ctx, kind, &s));
  Status st;
  const DataType dt = ctx.input(0)->dtype();
  bool ok = dispatch_float(dt, [&]<typename T>() { st = run_recurrent<T>(ctx, kind, s); });
  if (!ok) return unsupported_dtype(ctx.op, dt);
  return st;
}

Status rnn_kernel(KernelContext& ctx) { return recurrent_kernel(ctx, RnnKind::kRnn); }
Status gru_kernel(KernelContext& ctx) { return recurrent_kernel(ctx, RnnKind::kGru); }
Status lstm_kernel(KernelContext& ctx) { return recurrent_kernel(ctx, RnnKind::kLstm); }

}  // namespace

void register_rnn_kernels(KernelRegistry& r) {
  r.add(Op::RNN, rnn_kernel);
  r.add(Op::GRU, gru_kernel);
  r.add(Op::LSTM, lstm_kernel);
}

}  // namespace kiln

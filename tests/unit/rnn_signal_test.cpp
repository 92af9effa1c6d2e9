// Unit tests of the recurrent (RNN/GRU/LSTM) and signal (DFT, STFT, windows, mel) reference
// kernels: options the ONNX test data covers thinly (sequence_lens, batch-first layout,
// clip, custom activations, reverse/bidirectional, irfft), the 16-bit float paths and error
// handling. Expected values come from independent double-precision loops.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <functional>
#include <numbers>
#include <random>

#include "backends/cpu/reference/kernel.h"
#include "kernel_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// Random inputs in [-1, 1).
std::vector<double> unit_values(size_t n, uint32_t seed) { return random_values(n, seed, -1.0, 1.0); }

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ---- recurrent reference: one direction of one batch entry, layout-independent accessors ----

using Vec = std::vector<double>;

// dot(row r of matrix m [rows, cols], v)
double dotrow(const Vec& m, size_t base, size_t r, size_t cols, const Vec& v) {
  double s = 0;
  for (size_t j = 0; j < cols; ++j) s += m[base + r * cols + j] * v[j];
  return s;
}

TEST(Lstm, BidirectionalBatchFirstWithSeqLensPeepholesAndClip) {
  const int64_t S = 4, Bt = 3, I = 3, H = 2, D = 2;
  const double clip = 0.9;
  for (DataType dt : kFloatTypes) {
    Vec xv = unit_values(Bt * S * I, 1), wv = unit_values(D * 4 * H * I, 2), rv = unit_values(D * 4 * H * H, 3),
        bv = unit_values(D * 8 * H, 4), hv = unit_values(Bt * D * H, 5), cv = unit_values(Bt * D * H, 6),
        pv = unit_values(D * 3 * H, 7);
    Tensor x = make(dt, {Bt, S, I}, xv), w = make(dt, {D, 4 * H, I}, wv), r = make(dt, {D, 4 * H, H}, rv),
           b = make(dt, {D, 8 * H}, bv), h0 = make(dt, {Bt, D, H}, hv), c0 = make(dt, {Bt, D, H}, cv),
           p = make(dt, {D, 3 * H}, pv);
    Tensor lens = make_tensor<int32_t>({Bt}, {4, 2, 0});
    Attributes a;
    a.set("direction", std::string("bidirectional"));
    a.set("layout", int64_t{1});
    a.set("hidden_size", H);
    a.set("clip", static_cast<float>(clip));
    RunResult run = run_kernel(Op::LSTM, {&x, &w, &r, &b, &lens, &h0, &c0, &p}, a, 3);
    ASSERT_TRUE(run.status.is_ok()) << run.status.message();
    Vec y(Bt * S * D * H, 0.0), yh(Bt * D * H), yc(Bt * D * H);
    const int lenv[] = {4, 2, 0};
    auto cl = [&](double v) { return std::min(std::max(v, -clip), clip); };
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t bb = 0; bb < Bt; ++bb) {
        Vec h(H), c(H);
        for (int64_t k = 0; k < H; ++k) {
          h[k] = hv[(bb * D + d) * H + k];
          c[k] = cv[(bb * D + d) * H + k];
        }
        for (int s = 0; s < lenv[bb]; ++s) {
          const int t = d == 0 ? s : lenv[bb] - 1 - s;
          Vec xt(xv.begin() + (bb * S + t) * I, xv.begin() + (bb * S + t + 1) * I);
          Vec nh(H), nc(H);
          for (int64_t k = 0; k < H; ++k) {
            auto pre = [&](int gate) {
              const size_t row = static_cast<size_t>(gate * H + k);
              return dotrow(wv, d * 4 * H * I, row, I, xt) + dotrow(rv, d * 4 * H * H, row, H, h) + bv[d * 8 * H + row] +
                     bv[d * 8 * H + 4 * H + row];
            };
            const double gi = sigmoid(cl(pre(0) + pv[d * 3 * H + k] * c[k]));
            const double gf = sigmoid(cl(pre(2) + pv[d * 3 * H + 2 * H + k] * c[k]));
            const double gc = std::tanh(cl(pre(3)));
            nc[k] = gf * c[k] + gi * gc;
            const double go = sigmoid(cl(pre(1) + pv[d * 3 * H + H + k] * nc[k]));
            nh[k] = go * std::tanh(nc[k]);
          }
          h = nh;
          c = nc;
          for (int64_t k = 0; k < H; ++k) y[((bb * S + t) * D + d) * H + k] = h[k];
        }
        for (int64_t k = 0; k < H; ++k) {
          yh[(bb * D + d) * H + k] = h[k];
          yc[(bb * D + d) * H + k] = c[k];
        }
      }
    }
    expect_tensor_near(run.outputs[0], y, tol_for(dt), cat("Y ", dtype_name(dt)));
    expect_tensor_near(run.outputs[1], yh, tol_for(dt), cat("Y_h ", dtype_name(dt)));
    expect_tensor_near(run.outputs[2], yc, tol_for(dt), cat("Y_c ", dtype_name(dt)));
    EXPECT_EQ(run.outputs[0].dims(), (Dims{Bt, S, D, H}));
    EXPECT_EQ(run.outputs[0].dtype(), dt);
  }
}

TEST(Lstm, InputForgetCouplesGates) {
  const int64_t S = 2, Bt = 1, I = 2, H = 2;
  Vec xv = unit_values(S * Bt * I, 11), wv = unit_values(4 * H * I, 12), rv = unit_values(4 * H * H, 13);
  Tensor x = make(DataType::kFloat64, {S, Bt, I}, xv), w = make(DataType::kFloat64, {1, 4 * H, I}, wv),
         r = make(DataType::kFloat64, {1, 4 * H, H}, rv);
  Attributes a;
  a.set("input_forget", int64_t{1});
  RunResult run = run_kernel(Op::LSTM, {&x, &w, &r}, a, 3);
  ASSERT_TRUE(run.status.is_ok()) << run.status.message();
  Vec h(H, 0.0), c(H, 0.0), y;
  for (int64_t t = 0; t < S; ++t) {
    Vec xt(xv.begin() + t * I, xv.begin() + (t + 1) * I), nh(H), nc(H);
    for (int64_t k = 0; k < H; ++k) {
      auto pre = [&](int g) { return dotrow(wv, 0, g * H + k, I, xt) + dotrow(rv, 0, g * H + k, H, h); };
      const double gi = sigmoid(pre(0));
      nc[k] = (1.0 - gi) * c[k] + gi * std::tanh(pre(3));
      nh[k] = sigmoid(pre(1)) * std::tanh(nc[k]);
    }
    h = nh;
    c = nc;
    y.insert(y.end(), h.begin(), h.end());
  }
  expect_tensor_near(run.outputs[0], y, 1e-12, "Y");
}

void gru_reference_check(bool linear_before_reset, DataType dt) {
  const int64_t S = 3, Bt = 2, I = 3, H = 3;
  Vec xv = unit_values(S * Bt * I, 21), wv = unit_values(3 * H * I, 22), rv = unit_values(3 * H * H, 23),
      bv = unit_values(6 * H, 24), hv = unit_values(Bt * H, 25);
  Tensor x = make(dt, {S, Bt, I}, xv), w = make(dt, {1, 3 * H, I}, wv), r = make(dt, {1, 3 * H, H}, rv),
         b = make(dt, {1, 6 * H}, bv), h0 = make(dt, {1, Bt, H}, hv);
  Tensor lens = make_tensor<int32_t>({Bt}, {3, 2});
  Attributes a;
  a.set("direction", std::string("reverse"));
  a.set("linear_before_reset", int64_t{linear_before_reset ? 1 : 0});
  RunResult run = run_kernel(Op::GRU, {&x, &w, &r, &b, &lens, &h0}, a, 2);
  ASSERT_TRUE(run.status.is_ok()) << run.status.message();
  Vec y(S * Bt * H, 0.0), yh(Bt * H);
  const int lenv[] = {3, 2};
  for (int64_t bb = 0; bb < Bt; ++bb) {
    Vec h(hv.begin() + bb * H, hv.begin() + (bb + 1) * H);
    for (int t = lenv[bb] - 1; t >= 0; --t) {
      Vec xt(xv.begin() + (t * Bt + bb) * I, xv.begin() + (t * Bt + bb + 1) * I), z(H), rg(H), nh(H), rh(H);
      for (int64_t k = 0; k < H; ++k) {
        z[k] = sigmoid(dotrow(wv, 0, k, I, xt) + dotrow(rv, 0, k, H, h) + bv[k] + bv[3 * H + k]);
        rg[k] = sigmoid(dotrow(wv, 0, H + k, I, xt) + dotrow(rv, 0, H + k, H, h) + bv[H + k] + bv[4 * H + k]);
        rh[k] = rg[k] * h[k];
      }
      for (int64_t k = 0; k < H; ++k) {
        const double rec = linear_before_reset ? rg[k] * (dotrow(rv, 0, 2 * H + k, H, h) + bv[5 * H + k])
                                               : dotrow(rv, 0, 2 * H + k, H, rh) + bv[5 * H + k];
        const double hh = std::tanh(dotrow(wv, 0, 2 * H + k, I, xt) + bv[2 * H + k] + rec);
        nh[k] = (1 - z[k]) * hh + z[k] * h[k];
      }
      h = nh;
      for (int64_t k = 0; k < H; ++k) y[(t * Bt + bb) * H + k] = h[k];
    }
    for (int64_t k = 0; k < H; ++k) yh[bb * H + k] = h[k];
  }
  expect_tensor_near(run.outputs[0], y, tol_for(dt), cat("Y ", dtype_name(dt)));
  expect_tensor_near(run.outputs[1], yh, tol_for(dt), cat("Y_h ", dtype_name(dt)));
}

TEST(Gru, ReverseWithSeqLens) {
  for (DataType dt : kFloatTypes) {
    gru_reference_check(false, dt);
    gru_reference_check(true, dt);
  }
}

TEST(Rnn, CustomActivationsConsumeAlphaBetaInOrder) {
  // Bidirectional: forward uses Affine(alpha 0.5, beta 0.25), backward LeakyRelu(alpha 0.2).
  const int64_t S = 3, Bt = 2, I = 2, H = 2, D = 2;
  Vec xv = unit_values(S * Bt * I, 31), wv = unit_values(D * H * I, 32), rv = unit_values(D * H * H, 33);
  Tensor x = make(DataType::kFloat32, {S, Bt, I}, xv), w = make(DataType::kFloat32, {D, H, I}, wv),
         r = make(DataType::kFloat32, {D, H, H}, rv);
  Attributes a;
  a.set("direction", std::string("bidirectional"));
  a.set("activations", std::vector<std::string>{"Affine", "LeakyRelu"});
  a.set("activation_alpha", std::vector<float>{0.5f, 0.2f});
  a.set("activation_beta", std::vector<float>{0.25f});
  RunResult run = run_kernel(Op::RNN, {&x, &w, &r}, a, 2);
  ASSERT_TRUE(run.status.is_ok()) << run.status.message();
  std::function<double(double)> f[2] = {[](double v) { return 0.5 * v + 0.25; },
                                        [](double v) { return v >= 0 ? v : 0.2 * v; }};
  Vec y(S * D * Bt * H), yh(D * Bt * H);
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t bb = 0; bb < Bt; ++bb) {
      Vec h(H, 0.0);
      for (int64_t s = 0; s < S; ++s) {
        const int64_t t = d == 0 ? s : S - 1 - s;
        Vec xt(xv.begin() + (t * Bt + bb) * I, xv.begin() + (t * Bt + bb + 1) * I), nh(H);
        for (int64_t k = 0; k < H; ++k) nh[k] = f[d](dotrow(wv, d * H * I, k, I, xt) + dotrow(rv, d * H * H, k, H, h));
        h = nh;
        for (int64_t k = 0; k < H; ++k) y[((t * D + d) * Bt + bb) * H + k] = h[k];
      }
      for (int64_t k = 0; k < H; ++k) yh[(d * Bt + bb) * H + k] = h[k];
    }
  }
  expect_tensor_near(run.outputs[0], y, 1e-5, "Y");
  expect_tensor_near(run.outputs[1], yh, 1e-5, "Y_h");
}

TEST(Recurrent, BadInputsReturnErrors) {
  Vec xv = unit_values(2 * 1 * 3, 41), wv = unit_values(4 * 3, 42), rv = unit_values(4, 43);
  Tensor x = make(DataType::kFloat32, {2, 1, 3}, xv), w = make(DataType::kFloat32, {1, 4, 3}, wv),
         r = make(DataType::kFloat32, {1, 4, 1}, rv), bad_w = make(DataType::kFloat32, {1, 3, 4}, wv);
  Attributes none;
  EXPECT_TRUE(run_kernel(Op::LSTM, {&x, &w, &r}, none, 3).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::LSTM, {&x, &bad_w, &r}, none, 3).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::GRU, {&x, &w, &r}, none, 2).status.is_ok());  // 4 gates given to GRU
  Attributes bad_dir;
  bad_dir.set("direction", std::string("sideways"));
  EXPECT_FALSE(run_kernel(Op::LSTM, {&x, &w, &r}, bad_dir, 3).status.is_ok());
  Attributes bidir;
  bidir.set("direction", std::string("bidirectional"));
  EXPECT_FALSE(run_kernel(Op::LSTM, {&x, &w, &r}, bidir, 3).status.is_ok());
  Attributes bad_act;
  bad_act.set("activations", std::vector<std::string>{"Sigmoid", "Tanh", "Cube"});
  EXPECT_FALSE(run_kernel(Op::LSTM, {&x, &w, &r}, bad_act, 3).status.is_ok());
  Attributes bad_hidden;
  bad_hidden.set("hidden_size", int64_t{3});
  EXPECT_FALSE(run_kernel(Op::LSTM, {&x, &w, &r}, bad_hidden, 3).status.is_ok());
  Tensor long_len = make_tensor<int32_t>({1}, {3});
  EXPECT_FALSE(run_kernel(Op::LSTM, {&x, &w, &r, nullptr, &long_len}, none, 3).status.is_ok());
  Tensor wrong_batch = make_tensor<int32_t>({2}, {1, 1});
  EXPECT_FALSE(run_kernel(Op::LSTM, {&x, &w, &r, nullptr, &wrong_batch}, none, 3).status.is_ok());
  Tensor x2 = make(DataType::kFloat32, {6}, xv);
  EXPECT_FALSE(run_kernel(Op::RNN, {&x2, &w, &r}, none, 2).status.is_ok());
  Tensor xi = make_tensor<int32_t>({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(run_kernel(Op::RNN, {&xi, &w, &r}, none, 2).status.is_ok());
}

// ---- signal ----

using Cplx = std::complex<double>;

// Naive DFT along axis 1 of [outer, n, inner] complex data.
std::vector<Cplx> naive_dft(const std::vector<Cplx>& in, int64_t n, bool inverse) {
  std::vector<Cplx> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    Cplx s = 0;
    for (int64_t j = 0; j < n; ++j) {
      s += in[static_cast<size_t>(j)] *
           std::polar(1.0, (inverse ? 2.0 : -2.0) * std::numbers::pi * static_cast<double>(j * k) / static_cast<double>(n));
    }
    out[static_cast<size_t>(k)] = inverse ? s / static_cast<double>(n) : s;
  }
  return out;
}

TEST(Dft, ComplexAlongMiddleAxisWithPaddingAllDtypes) {
  // x [2, 5, 3, 2] (complex), axis 1, dft_length 7 (zero padded), forward and inverse.
  const int64_t A = 2, L = 5, Cc = 3, N = 7;
  for (DataType dt : kFloatTypes) {
    for (int inverse = 0; inverse <= 1; ++inverse) {
      Vec xv = unit_values(A * L * Cc * 2, 51 + inverse);
      Tensor x = make(dt, {A, L, Cc, 2}, xv);
      Tensor len = make_scalar_int64(N), axis = make_scalar_int64(1);
      Attributes a;
      a.set("inverse", int64_t{inverse});
      RunResult run = run_kernel(Op::DFT, {&x, &len, &axis}, a);
      ASSERT_TRUE(run.status.is_ok()) << run.status.message();
      ASSERT_EQ(run.outputs[0].dims(), (Dims{A, N, Cc, 2}));
      Vec want(A * N * Cc * 2);
      for (int64_t o = 0; o < A; ++o) {
        for (int64_t c = 0; c < Cc; ++c) {
          std::vector<Cplx> sig(N, 0.0);
          for (int64_t j = 0; j < L; ++j) sig[j] = {xv[((o * L + j) * Cc + c) * 2], xv[((o * L + j) * Cc + c) * 2 + 1]};
          auto f = naive_dft(sig, N, inverse != 0);
          for (int64_t k = 0; k < N; ++k) {
            want[((o * N + k) * Cc + c) * 2] = f[k].real();
            want[((o * N + k) * Cc + c) * 2 + 1] = f[k].imag();
          }
        }
      }
      expect_tensor_near(run.outputs[0], want, tol_for(dt) * 4, cat("DFT ", dtype_name(dt), " inverse=", inverse));
    }
  }
}

TEST(Dft, RfftThenIrfftRoundTripsOddAndEvenLengths) {
  for (int64_t n : {6, 7}) {
    Vec xv = unit_values(2 * n, 61 + static_cast<uint32_t>(n));
    Tensor x = make(DataType::kFloat64, {2, n, 1}, xv);
    Attributes fwd;
    fwd.set("onesided", int64_t{1});
    RunResult f = run_kernel(Op::DFT, {&x}, fwd);
    ASSERT_TRUE(f.status.is_ok()) << f.status.message();
    ASSERT_EQ(f.outputs[0].dims(), (Dims{2, n / 2 + 1, 2}));
    Attributes inv;
    inv.set("onesided", int64_t{1});
    inv.set("inverse", int64_t{1});
    Tensor len = make_scalar_int64(n);
    RunResult b = run_kernel(Op::DFT, {&f.outputs[0], &len}, inv);
    ASSERT_TRUE(b.status.is_ok()) << b.status.message();
    ASSERT_EQ(b.outputs[0].dims(), (Dims{2, n, 1}));
    expect_tensor_near(b.outputs[0], xv, 1e-12, cat("round trip n=", n));
  }
}

TEST(Dft, BadInputsReturnErrors) {
  Vec xv = unit_values(12, 71);
  Tensor x = make(DataType::kFloat32, {2, 2, 3}, xv), good = make(DataType::kFloat32, {2, 3, 2}, xv);
  Attributes none;
  EXPECT_FALSE(run_kernel(Op::DFT, {&x}, none).status.is_ok());  // last dim 3
  Tensor last = make_scalar_int64(-1), out_of_range = make_scalar_int64(3), zero = make_scalar_int64(0);
  EXPECT_FALSE(run_kernel(Op::DFT, {&good, nullptr, &last}, none).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::DFT, {&good, nullptr, &out_of_range}, none).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::DFT, {&good, &zero}, none).status.is_ok());
  Tensor fvec = make_tensor<float>({1}, {3.0f});
  EXPECT_FALSE(run_kernel(Op::DFT, {&good, &fvec}, none).status.is_ok());
  Tensor xi = make_tensor<int32_t>({2, 3, 2}, {});
  EXPECT_FALSE(run_kernel(Op::DFT, {&xi}, none).status.is_ok());
}

TEST(Stft, WindowedFramesMatchNaiveDft) {
  const int64_t Bt = 2, L = 11, FL = 4, step = 3;
  const int64_t frames = 1 + (L - FL) / step;
  for (DataType dt : kFloatTypes) {
    for (int onesided = 0; onesided <= 1; ++onesided) {
      Vec xv = unit_values(Bt * L, 81), wv = random_values(FL, 82, 0.1, 1.0);
      Tensor x = make(dt, {Bt, L, 1}, xv), w = make(dt, {FL}, wv);
      Tensor st = make_scalar_int64(step);
      Attributes a;
      a.set("onesided", int64_t{onesided});
      RunResult run = run_kernel(Op::STFT, {&x, &st, &w}, a);
      ASSERT_TRUE(run.status.is_ok()) << run.status.message();
      const int64_t bins = onesided ? FL / 2 + 1 : FL;
      ASSERT_EQ(run.outputs[0].dims(), (Dims{Bt, frames, bins, 2}));
      Vec want;
      for (int64_t b = 0; b < Bt; ++b) {
        for (int64_t f = 0; f < frames; ++f) {
          std::vector<Cplx> sig(FL);
          for (int64_t j = 0; j < FL; ++j) sig[j] = xv[b * L + f * step + j] * wv[j];
          auto spec = naive_dft(sig, FL, false);
          for (int64_t k = 0; k < bins; ++k) {
            want.push_back(spec[k].real());
            want.push_back(spec[k].imag());
          }
        }
      }
      expect_tensor_near(run.outputs[0], want, tol_for(dt) * 4, cat("STFT ", dtype_name(dt)));
    }
  }
  Vec xv = unit_values(L, 83);
  Tensor x = make(DataType::kFloat32, {1, L, 1}, xv);
  Tensor st = make_scalar_int64(step), zero = make_scalar_int64(0), too_long = make_scalar_int64(L + 1);
  Attributes none;
  EXPECT_FALSE(run_kernel(Op::STFT, {&x, &zero}, none).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::STFT, {&x, &st, nullptr, &too_long}, none).status.is_ok());
}

TEST(Windows, ValuesAndOutputDatatypes) {
  const int64_t n = 9;
  Tensor size = make_scalar_int64(n);
  struct Case {
    Op op;
    std::function<double(double)> f;
  } cases[] = {
      {Op::HannWindow, [](double a) { return 0.5 - 0.5 * std::cos(a); }},
      {Op::HammingWindow, [](double a) { return 0.54347826086956519 - 0.45652173913043481 * std::cos(a); }},
      {Op::BlackmanWindow, [](double a) { return 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a); }},
  };
  for (const Case& c : cases) {
    for (int periodic = 0; periodic <= 1; ++periodic) {
      for (DataType dt : kFloatTypes) {
        Attributes a;
        a.set("periodic", int64_t{periodic});
        a.set("output_datatype", static_cast<int64_t>(dt));
        RunResult run = run_kernel(c.op, {&size}, a);
        ASSERT_TRUE(run.status.is_ok()) << run.status.message();
        ASSERT_EQ(run.outputs[0].dtype(), dt);
        Vec want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = c.f(2 * std::numbers::pi * i / (periodic ? n : n - 1));
        expect_tensor_near(run.outputs[0], want, tol_for(dt) + 1e-6, cat(op_name(c.op), " ", dtype_name(dt)));
      }
    }
  }
  Attributes none;
  Tensor neg = make_scalar_int64(-3), fsize = make_tensor<float>({}, {3.0f});
  EXPECT_FALSE(run_kernel(Op::HannWindow, {&neg}, none).status.is_ok());
  EXPECT_FALSE(run_kernel(Op::HannWindow, {&fsize}, none).status.is_ok());
  Attributes bad_dt;
  bad_dt.set("output_datatype", int64_t{99});
  EXPECT_FALSE(run_kernel(Op::HannWindow, {&size}, bad_dt).status.is_ok());
}

TEST(MelWeightMatrix, TrianglesPeakAtOneAndRejectsEdgesPastNyquist) {
  Tensor bins = make_scalar_int64(8), dft = make_scalar_int64(64), rate = make_scalar_int64(8000);
  Tensor lo = make_tensor<float>({}, {0.0f}), hi = make_tensor<float>({}, {3500.0f});
  Attributes a;
  a.set("output_datatype", static_cast<int64_t>(DataType::kFloat16));
  RunResult run = run_kernel(Op::MelWeightMatrix, {&bins, &dft, &rate, &lo, &hi}, a);
  ASSERT_TRUE(run.status.is_ok()) << run.status.message();
  ASSERT_EQ(run.outputs[0].dims(), (Dims{33, 8}));
  ASSERT_EQ(run.outputs[0].dtype(), DataType::kFloat16);
  for (int64_t m = 0; m < 8; ++m) {
    double peak = 0;
    for (int64_t k = 0; k < 33; ++k) {
      const double v = run.outputs[0].get_double(k * 8 + m);
      EXPECT_GE(v, 0.0);
      peak = std::max(peak, v);
    }
    EXPECT_EQ(peak, 1.0) << "filter " << m;
  }
  Tensor too_high = make_tensor<float>({}, {8000.0f});
  EXPECT_FALSE(run_kernel(Op::MelWeightMatrix, {&bins, &dft, &rate, &lo, &too_high}, a).status.is_ok());
  Tensor zero = make_scalar_int64(0);
  EXPECT_FALSE(run_kernel(Op::MelWeightMatrix, {&zero, &dft, &rate, &lo, &hi}, a).status.is_ok());
}

}  // namespace
}  // namespace kiln

// numpy's legacy random generator (np.random.RandomState / np.random.seed), which the
// ONNX reference implementation uses for Dropout, RandomUniform/Normal(Like) and
// Bernoulli. Reproducing it makes seeded outputs match the reference bit for bit.
#pragma once
#include <cmath>
#include <cstdint>
#include <mutex>
#include <random>

namespace kiln {

class NumpyLegacyRandom {
 public:
  // RandomState(seed) seeds MT19937 with init_genrand(seed), as std::mt19937 does.
  explicit NumpyLegacyRandom(uint32_t seed) : gen_(seed) {}

  // random_sample(): a 53-bit double in [0, 1) from two 32-bit draws.
  double next_double() {
    const uint32_t a = static_cast<uint32_t>(gen_()) >> 5, b = static_cast<uint32_t>(gen_()) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

  // standard_normal() (legacy_gauss): the polar Box-Muller method; each pair of uniforms
  // gives two values, the second is cached for the next call.
  double gauss() {
    if (has_gauss_) {
      has_gauss_ = false;
      return gauss_;
    }
    double x1, x2, r2;
    do {
      x1 = 2.0 * next_double() - 1.0;
      x2 = 2.0 * next_double() - 1.0;
      r2 = x1 * x1 + x2 * x2;
    } while (r2 >= 1.0 || r2 == 0.0);
    const double f = std::sqrt(-2.0 * std::log(r2) / r2);
    gauss_ = f * x1;
    has_gauss_ = true;
    return f * x2;
  }

  // binomial(1, p) (legacy_random_binomial with n = 1: the inversion algorithm on
  // min(p, 1 - p), redrawing when the uniform falls past the two outcomes).
  // Requires 0 <= p <= 1.
  int bernoulli(double p) {
    const bool flip = p > 0.5;
    const double pp = flip ? 1.0 - p : p;
    const double q = 1.0 - pp;
    const double qn = std::exp(std::log(q));
    int x = 0;
    double px = qn;
    double u = next_double();
    while (u > px) {
      ++x;
      if (x > 1) {  // the bound min(n, np + 10 sqrt(npq + 1)) is 1 for n = 1
        x = 0;
        px = qn;
        u = next_double();
      } else {
        u -= px;
        px = (pp * px) / q;
      }
    }
    return flip ? 1 - x : x;
  }

 private:
  std::mt19937 gen_;
  bool has_gauss_ = false;
  double gauss_ = 0.0;
};

// A seed for an unseeded random op: drawn from one per-process engine seeded by
// std::random_device, so every run (and every node execution) differs.
inline uint32_t fresh_random_seed() {
  static std::mutex mu;
  static std::mt19937 engine{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<uint32_t>(engine());
}

}  // namespace kiln

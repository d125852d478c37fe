// exp, sigmoid and tanh on vectors of the target's width (kernel_util.h's Floats), for kernels that take
// millions of them per step: the recurrent cells' gates (bench_recurrent). libm's scalar calls cost about
// 20 ns each, which at an LSTM's 4 H gates per unit, step and example made them the step's largest part.
//
// exp: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor polynomial to r^7, scaled by 2^n through the
// exponent bits; within 2 ulp of libm's expf over [-87, 88] (kernels/cpu/vector_math_test.cpp). tanh: an odd
// polynomial to x^13 below 0.4 in magnitude, where 1 - 2 / (e^{2x} + 1) would cancel, that formula above.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {

using Ints = std::int32_t __attribute__((vector_size(kLanes * sizeof(std::int32_t))));

inline Floats splat(float v) { return Floats{} + v; }

// a b + c, in one rounding where the target has fused multiply-adds (the build keeps GCC from fusing on its
// own, -ffp-contract=off): the polynomials below are chains of them.
inline Floats multiply_add(Floats a, Floats b, Floats c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

inline Floats vector_exp(Floats x) {
  const Floats hi = splat(88.0f), lo = splat(-87.0f);
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  // n = round(x / ln2), by adding 1.5 2^23 so the sum's low mantissa bits hold n.
  const Floats shifter = splat(12582912.0f);
  const Floats t = x * splat(1.44269504088896341f) + shifter;
  const Floats n = t - shifter;
  const Floats r = (x - n * splat(0.693359375f)) + n * splat(2.12194440e-4f);
  Floats p = splat(1.0f / 5040.0f);
  p = multiply_add(p, r, splat(1.0f / 720.0f));
  p = multiply_add(p, r, splat(1.0f / 120.0f));
  p = multiply_add(p, r, splat(1.0f / 24.0f));
  p = multiply_add(p, r, splat(1.0f / 6.0f));
  p = multiply_add(p, r, splat(0.5f));
  p = multiply_add(p, r, splat(1.0f));
  p = multiply_add(p, r, splat(1.0f));
  const Ints scale = (__builtin_convertvector(n, Ints) + 127) << 23;
  Floats two_n;
  static_assert(sizeof two_n == sizeof scale);
  __builtin_memcpy(&two_n, &scale, sizeof two_n);
  return p * two_n;
}

inline Floats vector_sigmoid(Floats x) { return splat(1.0f) / (splat(1.0f) + vector_exp(-x)); }

inline Floats vector_tanh(Floats x) {
  const Floats ax = x < splat(0.0f) ? -x : x;
  const Floats e = vector_exp(ax + ax);
  const Floats big = splat(1.0f) - splat(2.0f) / (e + splat(1.0f));
  const Floats x2 = x * x;
  Floats p = splat(-0.00359212803f);  // the series' coefficients, -21844 / 6081075 for x^13 first
  p = multiply_add(p, x2, splat(0.00886323552f));
  p = multiply_add(p, x2, splat(-0.0218694885f));
  p = multiply_add(p, x2, splat(0.0539682540f));
  p = multiply_add(p, x2, splat(-0.133333333f));
  p = multiply_add(p, x2, splat(0.333333333f));
  const Floats small = x - x * x2 * p;
  return ax < splat(0.4f) ? small : (x < splat(0.0f) ? -big : big);
}

// fn over [0, n) of `v` in place, vector by vector; the tail through a padded vector.
template <class Fn>
void apply_vector(float* v, std::int64_t n, Fn fn) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(v + i, fn(load(v + i)));
  if (i == n) return;
  float pad[kLanes] = {};
  for (std::int64_t j = i; j < n; ++j) pad[j - i] = v[j];
  const Floats out = fn(load(pad));
  store(pad, out);
  for (std::int64_t j = i; j < n; ++j) v[j] = pad[j - i];
}

// out[i] = fn(a[i] + b[i] + c[i]) for i in [0, n): a gate's activation from its three terms, in one pass.
template <class Fn>
void apply_sum_into(const float* a, const float* b, const float* c, float* out, std::int64_t n, Fn fn) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, fn(load(a + i) + load(b + i) + load(c + i)));
  if (i == n) return;
  float pad[kLanes] = {};
  for (std::int64_t j = i; j < n; ++j) pad[j - i] = a[j] + b[j] + c[j];
  store(pad, fn(load(pad)));
  for (std::int64_t j = i; j < n; ++j) out[j] = pad[j - i];
}

// Reductions of a row of n floats, kLanes partial results at a time and then across the lanes: the
// attention's softmax rows and their gradient's dot products (bench_workloads transformer_text_b32, where
// the scalar loops took 8 % of the step).
inline float row_max(const float* v, std::int64_t n) {
  float mx = v[0];
  std::int64_t i = 0;
  if (n >= kLanes) {
    Floats m = load(v);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      const Floats x = load(v + i);
      m = x > m ? x : m;
    }
    for (int j = 0; j < kLanes; ++j) mx = std::max(mx, m[j]);
  }
  for (; i < n; ++i) mx = std::max(mx, v[i]);
  return mx;
}

inline float row_sum(const float* v, std::int64_t n) {
  Floats acc{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += load(v + i);
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += acc[j];
  for (; i < n; ++i) sum += v[i];
  return sum;
}

inline float row_dot(const float* a, const float* b, std::int64_t n) {
  Floats acc{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += load(a + i) * load(b + i);
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += acc[j];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline void sigmoid_in_place(float* v, std::int64_t n) { apply_vector(v, n, vector_sigmoid); }
inline void tanh_in_place(float* v, std::int64_t n) { apply_vector(v, n, vector_tanh); }

}  // namespace tctl::cpu

/* SPDX-License-Identifier: MIT */
/* MSL's types as Apple's compiler has them: half is a built-in floating type
 * rounded at each operation, bfloat converts from half, a user type reaches
 * half through one user conversion, `c ? half : float` is float, vectors
 * have MSL's sizes and swizzles, constexpr vectors, volatile vectors, vector
 * modf, and calls that stay unambiguous beside a user's complex overloads.
 * Each kernel is compiled on its own and checked against a reference. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sm_run.h"

static void setup(void) { sm_run_open(); }
static void teardown(void) { sm_run_close(); }
TestSuite(types, .init = setup, .fini = teardown, .timeout = 120);

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
/* Metal's default, fast math */
#define run_k(src, in, o, n) sm_run_k(src, -1, in, N_OF(in), o, n)
static const float none[1] = {0}; /* for kernels that read no input */
#define HEAD                                                                                       \
  "#include <metal_stdlib>\n"                                                                      \
  "using namespace metal;\n"
#define KERNEL                                                                                     \
  "kernel void k(device const float *in [[buffer(0)]], device float *o [[buffer(1)]]) {\n"

Test(types, half_converts_to_bfloat_by_static_cast) {
  /* 1 + 2^-10 is a half; bfloat keeps 7 fraction bits: 1.0 (to nearest even);
   * 3 + 2^-9 rounds to 3; 0.1 as half (0x2E66) then to bfloat: 0.10009765625 */
  const float in[4] = {1.0009765625f, 3.001953125f, 0.1f, -65504.0f};
  float o[4];
  run_k(HEAD KERNEL "  for (int i = 0; i < 4; i++) {\n"
                    "    half h = half(in[i]);\n"
                    "    bfloat b = static_cast<bfloat>(h);\n"
                    "    o[i] = float(b);\n"
                    "  }\n"
                    "}\n",
        in, o, 4);
  const float want[4] = {1.0f, 3.0f, 0.10009765625f, -65536.0f};
  for (int i = 0; i < 4; i++)
    cr_expect_eq(o[i], want[i], "%d: %.9g, expected %.9g", i, o[i], want[i]);
}

Test(types, braced_constexpr_int3) {
  float o[4];
  run_k(HEAD "constexpr constant int3 OFFS = {1, 2, 3};\n" KERNEL "  constexpr int3 k{4, 5, 6};\n"
             "  static_assert(k[1] == 5, \"a constant expression\");\n"
             "  constexpr int3 m = int3(7, 8, 9);\n"
             "  o[0] = OFFS.x + 10 * OFFS.z;\n"
             "  o[1] = k.x + 10 * k.z;\n"
             "  o[2] = m.y;\n"
             "  o[3] = (k + OFFS).y;\n"
             "}\n",
        none, o, 4);
  const float want[4] = {31, 64, 8, 7};
  for (int i = 0; i < 4; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

Test(types, a_user_operator_float_converts_to_half) {
  const float in[2] = {1.5f, 1.0001f};
  float o[3];
  run_k(HEAD "struct scaled {\n"
             "  float v;\n"
             "  operator float() const { return v * 2.0f; }\n"
             "};\n" KERNEL "  scaled s{in[0]};\n"
             "  half h = s;\n" /* copy-initialised: one user conversion in MSL */
             "  o[0] = h;\n"
             "  o[1] = half(scaled{in[1]});\n"
             "  bfloat b = s;\n"
             "  o[2] = float(b);\n"
             "}\n",
        in, o, 3);
  cr_expect_eq(o[0], 3.0f);
  cr_expect_eq(o[1], 2.0f, "2.0002 rounds to the half 2.0: %.9g", o[1]);
  cr_expect_eq(o[2], 3.0f);
}

Test(types, a_swizzle_is_deduced_as_a_template_argument) {
  const float in[4] = {1, 2, 3, 4};
  float o[4];
  run_k(HEAD "template <class T> T twice(T v) { return v + v; }\n"
             "template <class T> T pick(bool c, T a, T b) { return c ? a : b; }\n" KERNEL
             "  float4 a(in[0], in[1], in[2], in[3]);\n"
             "  float2 r = twice(a.zw);\n"
             "  float2 s = pick(true, a.yx, a.yx);\n"
             "  o[0] = r.x; o[1] = r.y; o[2] = s.x; o[3] = s.y;\n"
             "}\n",
        in, o, 4);
  const float want[4] = {6, 8, 2, 1};
  for (int i = 0; i < 4; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

Test(types, assigning_a_swizzle_to_the_same_swizzle_writes_only_its_components) {
  float o[8];
  const float in8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  run_k(HEAD KERNEL "  float4 a(in[0], in[1], in[2], in[3]), b(in[4], in[5], in[6], in[7]);\n"
                    "  a.xy = b.xy;\n"
                    "  float4 c(in[0], in[1], in[2], in[3]);\n"
                    "  c.zw = b.zw;\n"
                    "  o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;\n"
                    "  o[4] = c.x; o[5] = c.y; o[6] = c.z; o[7] = c.w;\n"
                    "}\n",
        in8, o, 8);
  const float want[8] = {5, 6, 3, 4, 1, 2, 7, 8};
  for (int i = 0; i < 8; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

Test(types, a_conditional_of_half_and_float_is_float) {
  /* 1 + 2^-20 is not a half: typed half, the result would be 1 */
  const float in[2] = {1.00000095367431640625f, 0.5f};
  float o[2];
  run_k(HEAD KERNEL
        "  half h = half(in[1]);\n"
        "  float f = in[0];\n"
        "  bool c = in[1] > 1.0f;\n"
        "  auto r = c ? h : f;\n"
        "  static_assert(is_same<decltype(r), float>::value, \"MSL: half and float give float\");\n"
        "  o[0] = r;\n"
        "  o[1] = !c ? h : 0;\n"
        "}\n",
        in, o, 2);
  cr_expect_eq(o[0], in[0], "%.9g", o[0]);
  cr_expect_eq(o[1], 0.5f);
}

Test(types, vector_sizes_and_alignments_as_msl) {
  float o[12];
  run_k(HEAD KERNEL "  o[0] = sizeof(float3); o[1] = alignof(float3);\n"
                    "  o[2] = sizeof(packed_float3); o[3] = alignof(packed_float3);\n"
                    "  o[4] = sizeof(half3); o[5] = alignof(half3);\n"
                    "  o[6] = sizeof(packed_half3); o[7] = sizeof(bool4);\n"
                    "  o[8] = sizeof(half); o[9] = alignof(half);\n"
                    "  o[10] = sizeof(bfloat4); o[11] = sizeof(float2);\n"
                    "}\n",
        none, o, 12);
  const float want[12] = {16, 16, 12, 4, 8, 8, 6, 4, 2, 2, 8, 8};
  for (int i = 0; i < 12; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

Test(types, half_arithmetic_rounds_at_each_operation) {
  /* 1 + 2^-11 is a tie between halves 1 and 1 + 2^-10: to even, 1. Twice
   * that is 1; summed in float and rounded once, 1 + 2^-10. Safe math: fast
   * math may reassociate the sums, as Metal's does. */
  const float in[3] = {1.0f, 0.00048828125f, 0.00048828125f};
  float o[3];
  sm_run_k(HEAD KERNEL "  half a = half(in[0]), b = half(in[1]), c = half(in[2]);\n"
                       "  o[0] = a + b + c;\n"
                       "  half d = a;\n"
                       "  d += b; d += c;\n"
                       "  o[1] = d;\n"
                       "  o[2] = a + (b + c);\n"
                       "}\n",
           0, in, N_OF(in), o, 3);
  cr_expect_eq(o[0], 1.0f, "(a + b) + c = %.9g: each + rounds to half", o[0]);
  cr_expect_eq(o[1], 1.0f, "%.9g", o[1]);
  cr_expect_eq(o[2], 1.0009765625f, "a + (b + c) = %.9g", o[2]);
}

/* Integer to half conversions of many threads at once (the thread loop is
 * vectorised) and of vectors: each integer type, exact below 2048. */
Test(types, integers_convert_to_half_in_vectorised_loops_and_vectors) {
  enum { N = 256, ROWS = 5 };
  static const char *const src =
      HEAD "kernel void k(device const half *in [[buffer(0)]], device float *o [[buffer(1)]],\n"
           "              uint i [[thread_position_in_grid]]) {\n"
           "  o[i] = in[0] + i * in[1];\n" /* mlx's arange */
           "  o[1 * 256 + i] = half4(uint4(i, i + 1, i + 2, i + 3)).w;\n"
           "  o[2 * 256 + i] = half4(int4(i) - 300).y;\n"
           "  o[3 * 256 + i] = half4(ushort4(i) + ushort4(0, 1, 2, 5)).w;\n"
           "  o[4 * 256 + i] = half(uchar(i)) + half(short(-int(i)));\n"
           "}\n";
  id error = 0;
  id lib = sm_compile(src, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  const uint16_t in[2] = {0x3800, 0x3000}; /* 0.5, 0.125 */
  id bufs[2] = {sm_buffer(in, sizeof in), sm_buffer(NULL, ROWS * N * sizeof(float))};
  sm_dispatch(lib, "k", bufs, 2, SM_SIZE(N, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  const float *o = sm_contents(bufs[1]);
  for (int i = 0; i < N; i++) {
    const float want[ROWS] = {0.5f + 0.125f * (float)i, (float)(i + 3), (float)(i - 300),
                              (float)(i + 5), 0.0f};
    for (int r = 0; r < ROWS; r++)
      cr_expect_eq(o[r * N + i], want[r], "row %d, thread %d: %g, want %g", r, i, o[r * N + i],
                   want[r]);
  }
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
  sm_release(lib);
}

Test(types, log1p_and_erf_beside_a_user_complex_type) {
  /* as mlx writes them: its own float, bfloat and complex overloads */
  const float in[2] = {0.5f, 1.0f};
  float o[4];
  run_k(HEAD "struct complex64_t {\n"
             "  float real, imag;\n"
             "  constexpr complex64_t(float r, float i) : real(r), imag(i) {}\n"
             "  template <typename T, typename = typename enable_if<is_convertible<T, "
             "float>::value>::type>\n"
             "  constexpr complex64_t(T x) : real(x), imag(0) {}\n"
             "};\n"
             "inline float log1p(float x) { return log(1.0f + x); }\n"
             "inline bfloat log1p(bfloat x) { return bfloat(log1p(float(x))); }\n"
             "inline complex64_t log1p(complex64_t c) { return {log1p(c.real), c.imag}; }\n"
             "inline float erf(float x) { return x > 0 ? 0.5f : -0.5f; }\n"
             "inline complex64_t erf(complex64_t c) { return {erf(c.real), 0}; }\n" KERNEL
             "  half h = half(in[0]);\n"
             "  o[0] = log1p(h);\n"
             "  o[1] = erf(h);\n"
             "  o[2] = log1p(in[1]);\n"
             "  o[3] = log1p(complex64_t(in[1], 0)).real;\n"
             "}\n",
        in, o, 4);
  cr_expect_lt(o[0] > 0.405465f ? o[0] - 0.405465f : 0.405465f - o[0], 1e-5f, "%.9g", o[0]);
  cr_expect_eq(o[1], 0.5f);
  cr_expect_lt(o[2] > 0.693147f ? o[2] - 0.693147f : 0.693147f - o[2], 1e-5f, "%.9g", o[2]);
  cr_expect_eq(o[3], o[2]);
}

Test(types, modf_of_vectors) {
  const float in[4] = {1.25f, -2.5f, 3.0f, -0.75f};
  float o[12];
  run_k(HEAD KERNEL "  float4 x(in[0], in[1], in[2], in[3]), ip;\n"
                    "  float4 fr = modf(x, ip);\n"
                    "  half2 hip;\n"
                    "  half2 hfr = modf(half2(x.xy), hip);\n"
                    "  for (int i = 0; i < 4; i++) { o[i] = fr[i]; o[4 + i] = ip[i]; }\n"
                    "  o[8] = hfr.x; o[9] = hfr.y; o[10] = hip.x; o[11] = hip.y;\n"
                    "}\n",
        in, o, 12);
  const float want[12] = {0.25f, -0.5f, 0, -0.75f, 1, -2, 3, -0.0f, 0.25f, -0.5f, 1, -2};
  for (int i = 0; i < 12; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

Test(types, volatile_vectors_are_assigned_and_read) {
  const float in[4] = {1, 2, 3, 4};
  float o[4];
  run_k(HEAD KERNEL "  volatile float4 v;\n"
                    "  v = float4(in[0], in[1], in[2], in[3]);\n"
                    "  v.y = 7.0f;\n"
                    "  float4 r = v;\n"
                    "  o[0] = r.x; o[1] = r.y; o[2] = v[2]; o[3] = r.w;\n"
                    "}\n",
        in, o, 4);
  const float want[4] = {1, 7, 3, 4};
  for (int i = 0; i < 4; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

/* A clang older than softmetal needs is refused by name, with the minimum. */
Test(types, a_clang_that_is_too_old_is_refused_by_name) {
  char dir[256], cxx[300];
  mkdir(getenv("SOFTMETAL_CACHE_DIR"), 0700); /* the first compile makes it; none may have run */
  snprintf(dir, sizeof dir, "%s/old-clang-%d", getenv("SOFTMETAL_CACHE_DIR"), (int)getpid());
  cr_assert_eq(mkdir(dir, 0700), 0);
  snprintf(cxx, sizeof cxx, "%s/clang++-14", dir);
  FILE *f = fopen(cxx, "w");
  cr_assert_not_null(f);
  fputs("#!/bin/sh\necho 'Debian clang version 14.0.6'\necho 'Target: x86_64-pc-linux-gnu'\n", f);
  fclose(f);
  cr_assert_eq(chmod(cxx, 0700), 0);
  /* a cache of its own, removed after: the compiler's --version is kept there */
  char cache[300], *old_cache = strdup(getenv("SOFTMETAL_CACHE_DIR"));
  snprintf(cache, sizeof cache, "%s/cache", dir);
  setenv("SOFTMETAL_CACHE_DIR", cache, 1);
  setenv("SOFTMETAL_CXX", cxx, 1);
  id error = 0;
  id lib = sm_compile("kernel void k(device float *a [[buffer(0)]]) { a[0] = 1; }\n", &error);
  unsetenv("SOFTMETAL_CXX");
  setenv("SOFTMETAL_CACHE_DIR", old_cache, 1);
  free(old_cache);
  cr_assert_null(lib);
  const char *msg = sm_error_text(error);
  cr_expect(strstr(msg, cxx) && strstr(msg, "clang version 14.0.6") &&
                strstr(msg, "needs clang 19 or newer"),
            "%s", msg);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

/* With half built in, float and half overloads tie for an int or a double
 * (a literal such as 2.0): the float one is taken, as before. */
Test(types, math_of_int_and_double_arguments_is_float_math) {
  const float in[2] = {3.0f, 0.5f};
  float o[4];
  run_k(HEAD KERNEL "  int i = int(in[0]);\n"
                    "  o[0] = sqrt(4.0);\n"
                    "  o[1] = fabs(-i);\n"
                    "  o[2] = pow(2.0, in[0]);\n"
                    "  o[3] = precise::sqrt(i + 1);\n"
                    "  static_assert(is_same<decltype(exp(1.0)), float>::value, \"\");\n"
                    "  static_assert(is_same<decltype(exp(half(1))), half>::value, \"\");\n"
                    "}\n",
        in, o, 4);
  const float want[4] = {2, 3, 8, 2};
  for (int i = 0; i < 4; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

Test(types, rgba_swizzles_read_and_assign) {
  const float in[4] = {1, 2, 3, 4};
  float o[8];
  run_k(HEAD KERNEL "  float4 a(in[0], in[1], in[2], in[3]);\n"
                    "  float4 b = a.bgra;\n"
                    "  a.rg = float2(9, 8);\n"
                    "  half2 h = half4(a).ar;\n"
                    "  o[0] = b.x; o[1] = b.y; o[2] = b.z; o[3] = b.w;\n"
                    "  o[4] = a.x; o[5] = a.y; o[6] = a.b; o[7] = h.x + h.y;\n"
                    "}\n",
        in, o, 8);
  const float want[8] = {3, 2, 1, 4, 9, 8, 3, 13};
  for (int i = 0; i < 8; i++) cr_expect_eq(o[i], want[i], "%d: %g, expected %g", i, o[i], want[i]);
}

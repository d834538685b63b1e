/* SPDX-License-Identifier: MIT */
/* softmetal's metal_stdlib surface that third-party kernels use: integer
 * functions, numeric_limits and type traits, metal::/fast::/precise:: math,
 * constant-space tables, atomics, matrices, bfloat, metal::array. Each kernel
 * is checked against a reference computed here. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "sm_run.h"

static const char *const SOURCE_PARTS[] = {
    "#include <metal_stdlib>\n"
    "#include <metal_integer>\n"
    "using namespace metal;\n"
    "#if !defined(__METAL__) || !defined(__HAVE_BFLOAT__)\n"
    "#error \"__METAL__ and __HAVE_BFLOAT__ are predefined\"\n"
    "#endif\n"
    "static_assert(metal::is_floating_point_v<half> && metal::is_floating_point_v<bfloat>, \"\");\n"
    "static_assert(metal::is_floating_point_v<float> && !metal::is_floating_point_v<int>, \"\");\n"
    "static_assert(metal::is_integral_v<ushort> && metal::is_signed_v<half>, \"\");\n"
    "static_assert(metal::is_same_v<metal::enable_if_t<true, half>, half>, \"\");\n"
    "static_assert(metal::is_same_v<decltype(absdiff(char(1), char(2))), uchar>, \"\");\n"
    "static_assert(float(metal::numeric_limits<half>::max()) == 65504.0f, \"constexpr half\");\n"
    "static_assert(metal::numeric_limits<bfloat>::digits == 8, \"\");\n"
    "static_assert(metal::is_same_v<decltype(metal::exp(bfloat(1.0f))), float>,\n"
    "              \"MSL has no bfloat math: the argument converts to float\");\n"
    "\n"
    "kernel void integer_ops(device const int *a [[buffer(0)]],\n"
    "                        device const int *b [[buffer(1)]],\n"
    "                        device int *out [[buffer(2)]],\n"
    "                        uint i [[thread_position_in_grid]]) {\n"
    "  int x = a[i], y = b[i];\n"
    "  device int *o = out + 18 * i;\n"
    "  o[0] = mulhi(x, y);\n"
    "  o[1] = madhi(x, y, 7);\n"
    "  o[2] = addsat(x, y);\n"
    "  o[3] = subsat(x, y);\n"
    "  o[4] = int(absdiff(x, y));\n"
    "  o[5] = reverse_bits(x);\n"
    "  o[6] = hadd(x, y);\n"
    "  o[7] = rhadd(x, y);\n"
    "  o[8] = madsat(x, y, 1);\n"
    "  o[9] = insert_bits(x, y, 4u, 8u);\n"
    "  o[10] = extract_bits(x, 4u, 8u);\n"
    "  o[11] = int(metal::addsat(uint(x), uint(y)));\n"
    "  o[12] = int(metal::subsat(uint(x), uint(y)));\n"
    "  o[13] = int(addsat(char(x), char(y)));\n"
    "  o[14] = int(subsat(short(x), short(y)));\n"
    "  o[15] = int(mulhi(uint(x), uint(y)));\n"
    "  int2 v = addsat(int2(x, y), int2(y, -1));\n"
    "  o[16] = v.x;\n"
    "  o[17] = int(absdiff(int2(x), int2(y)).y);\n"
    "}\n"
    "\n"
    "kernel void limits(device uint *o [[buffer(0)]]) {\n"
    "  o[0] = as_type<ushort>(numeric_limits<half>::max());\n"
    "  o[1] = as_type<ushort>(numeric_limits<half>::min());\n"
    "  o[2] = as_type<ushort>(numeric_limits<half>::lowest());\n"
    "  o[3] = as_type<ushort>(numeric_limits<half>::epsilon());\n"
    "  o[4] = as_type<ushort>(numeric_limits<half>::infinity());\n"
    "  o[5] = as_type<ushort>(numeric_limits<half>::quiet_NaN());\n"
    "  o[6] = as_type<ushort>(numeric_limits<half>::denorm_min());\n"
    "  o[7] = as_type<ushort>(metal::numeric_limits<bfloat>::max());\n"
    "  o[8] = as_type<ushort>(metal::numeric_limits<bfloat>::min());\n"
    "  o[9] = as_type<ushort>(metal::numeric_limits<bfloat>::lowest());\n"
    "  o[10] = as_type<ushort>(metal::numeric_limits<bfloat>::epsilon());\n"
    "  o[11] = as_type<ushort>(metal::numeric_limits<bfloat>::infinity());\n"
    "  o[12] = as_type<ushort>(metal::numeric_limits<bfloat>::quiet_NaN());\n"
    "  o[13] = as_type<uint>(numeric_limits<float>::max());\n"
    "  o[14] = as_type<uint>(numeric_limits<float>::min());\n"
    "  o[15] = as_type<uint>(numeric_limits<float>::lowest());\n"
    "  o[16] = as_type<uint>(numeric_limits<float>::epsilon());\n"
    "  o[17] = as_type<uint>(numeric_limits<float>::infinity());\n"
    "  o[18] = as_type<uint>(numeric_limits<int>::min());\n"
    "  o[19] = as_type<uint>(numeric_limits<int>::max());\n"
    "  o[20] = numeric_limits<uchar>::max();\n"
    "  o[21] = as_type<uint>(int(numeric_limits<short>::lowest()));\n"
    "  o[22] = numeric_limits<uint>::max();\n"
    "  o[23] = numeric_limits<half>::digits;\n"
    "}\n"
    "\n",
    "constant float table[4] = {1.0f, 2.0f, 4.0f, 8.0f};\n"
    "struct Coeffs { float a; float b; float c[2]; };\n"
    "constant Coeffs coeffs = {0.5f, -1.0f, {3.0f, 4.0f}};\n"
    "METAL_FUNC float twice(float x) { return 2.0f * x; }\n"
    "constexpr int cube(int n) { return n * n * n; }\n"
    "\n"
    "kernel void math_ns(device const float *in [[buffer(0)]],\n"
    "                    device float *out [[buffer(1)]],\n"
    "                    uint3 pos [[thread_position_in_grid]],\n"
    "                    ushort2 tg [[threads_per_threadgroup]]) {\n"
    "  uint i = pos.x;\n"
    "  float x = in[i];\n"
    "  device float *o = out + 16 * i;\n"
    "  o[0] = metal::exp(x);\n"
    "  o[1] = metal::fast::exp(x);\n"
    "  o[2] = metal::precise::exp(x);\n"
    "  o[3] = metal::precise::divide(x, 3.0f);\n"
    "  o[4] = metal::divide(x, 3.0f);\n"
    "  o[5] = metal::pow(2.0f, x);\n"
    "  o[6] = metal::fast::divide(1.0f, x + 4.0f);\n"
    "  o[7] = metal::clamp(x, -0.5f, 0.5f);\n"
    "  o[8] = metal::select(x, -x, x < 0.0f);\n"
    "  o[9] = metal::fma(x, 2.0f, 1.0f);\n"
    "  o[10] = metal::min(x, 0.25f) + metal::max(x, -0.25f);\n"
    "  o[11] = metal::fmax3(x, 0.1f, -0.1f) + metal::fmedian3(x, 0.1f, -0.1f);\n"
    "  o[12] = as_type<float>(as_type<uint>(x) ^ 0x80000000u);\n"
    "  float acc = 0.0f;\n"
    "#pragma clang loop unroll(full)\n"
    "  for (int k = 0; k < 4; k++) acc += table[k] * coeffs.c[k & 1];\n"
    "  o[13] = acc + coeffs.a * twice(x) + float(cube(3)) + coeffs.b;\n"
    "  o[14] = float(pos.y + pos.z + tg.x + tg.y);\n"
    "  o[15] = metal::precise::tan(x);\n"
    "}\n"
    "\n"
    "kernel void atomics(device atomic<float> *fsum [[buffer(0)]],\n"
    "                    device metal::atomic_uint *count [[buffer(1)]],\n"
    "                    device atomic_int *low [[buffer(2)]],\n"
    "                    uint i [[thread_position_in_grid]]) {\n"
    "  metal::atomic_fetch_add_explicit(fsum, 0.25f, metal::memory_order_relaxed);\n"
    "  atomic_fetch_add_explicit(count, 1u, memory_order_relaxed);\n"
    "  atomic_fetch_min_explicit(low, -int(i), memory_order_relaxed);\n"
    "}\n"
    "\n",
    "kernel void matrices(device const float *in [[buffer(0)]],\n"
    "                     device float *out [[buffer(1)]],\n"
    "                     uint i [[thread_position_in_grid]]) {\n"
    "  device const float *p = in + 16 * i;\n"
    "  float4x4 m(float4(p[0], p[1], p[2], p[3]), float4(p[4], p[5], p[6], p[7]),\n"
    "             float4(p[8], p[9], p[10], p[11]), float4(p[12], p[13], p[14], p[15]));\n"
    "  float4 v = float4(1.0f, 2.0f, 3.0f, 4.0f);\n"
    "  float4 mv = m * v, vm = v * m;\n"
    "  float4x4 mm = m * transpose(m);\n"
    "  float2x2 a(1.0f, 2.0f, 3.0f, 4.0f);\n"
    "  float2 av = a * float2(1.0f, 10.0f);\n"
    "  float3x3 id3(2.0f);\n"
    "  float3 w = id3 * float3(p[0], p[1], p[2]);\n"
    "  half4x4 hm = half4x4(m);\n"
    "  device float *o = out + 32 * i;\n"
    "  for (int k = 0; k < 4; k++) { o[k] = mv[k]; o[4 + k] = vm[k]; o[8 + k] = mm[k][k]; }\n"
    "  o[12] = mm[1][2]; o[13] = av.x; o[14] = av.y; o[15] = w.x + w.y + w.z;\n"
    "  o[16] = float(hm[3][1]);\n"
    "}\n"
    "\n"
    "kernel void bfloat_and_array(device const float *in [[buffer(0)]],\n"
    "                             device float *out [[buffer(1)]],\n"
    "                             uint i [[thread_position_in_grid]]) {\n"
    "  bfloat b = bfloat(in[i]);\n"
    "  metal::array<float, 3> arr = {float(b), metal::exp(b), 0.0f};\n"
    "  arr[2] = float(arr.size());\n"
    "  for (uint k = 0; k < arr.size(); k++) out[3 * i + k] = arr[k];\n"
    "}\n"
    "\n"
    "kernel void half_conversions(device const half *in [[buffer(0)]],\n"
    "                             device float *out [[buffer(1)]],\n"
    "                             uint i [[thread_position_in_grid]]) {\n"
    "  half h = in[i];\n"
    "  half z = i % 2 ? h : 0;\n"
    "  uint u = h;\n"
    "  int acc = 5001;\n"
    "  acc += h;\n"
    "  float f = 0.5f;\n"
    "  f += h;\n"
    "  out[4 * i] = z;\n"
    "  out[4 * i + 1] = float(u) + float(int(h));\n"
    "  out[4 * i + 2] = float(acc);\n"
    "  out[4 * i + 3] = f;\n"
    "}\n",
    "\n"
    "// packed vectors of another element type convert explicitly (ggml: float4(packed_char4))\n"
    "kernel void packed_conversions(device const packed_char4 *in [[buffer(0)]],\n"
    "                               device float4 *out [[buffer(1)]],\n"
    "                               uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = float4(in[i]) * 0.5f + float4(int4(in[i]));\n"
    "}\n"
    "\n"
    "kernel void fill_shuffles(device int *out [[buffer(0)]],\n"
    "                          uint lane [[thread_index_in_simdgroup]],\n"
    "                          uint tid [[thread_index_in_threadgroup]]) {\n"
    "  int d = int(lane), f = 100 + int(lane);\n"
    "  device int *o = out + 4 * tid;\n"
    "  o[0] = simd_shuffle_and_fill_up(d, f, ushort(3));\n"
    "  o[1] = simd_shuffle_and_fill_down(d, f, ushort(5));\n"
    "  o[2] = simd_shuffle_and_fill_up(d, f, ushort(2), ushort(8));\n"
    "  o[3] = metal::simd_shuffle_and_fill_down(d, f, ushort(3), ushort(4));\n"
    "}\n"};

static char SOURCE[16384];
static id lib;

static void setup(void) {
  sm_run_open();
  SOURCE[0] = 0;
  for (size_t i = 0; i < sizeof SOURCE_PARTS / sizeof SOURCE_PARTS[0]; i++) {
    cr_assert_lt(strlen(SOURCE) + strlen(SOURCE_PARTS[i]), sizeof SOURCE);
    strcat(SOURCE, SOURCE_PARTS[i]);
  }
  id error = 0;
  lib = sm_compile(SOURCE, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
}
static void teardown(void) {
  sm_release(lib);
  sm_run_close();
}
TestSuite(stdlib, .init = setup, .fini = teardown, .timeout = 120);

/* ---- references, with MSL's rules */
static int64_t floor_half(int64_t s) { return s >= 0 ? s / 2 : -((-s + 1) / 2); }
static int32_t sat32(int64_t v) {
  return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
}
static uint32_t satu32(int64_t v) {
  return v > (int64_t)UINT32_MAX ? UINT32_MAX : v < 0 ? 0 : (uint32_t)v;
}
static int32_t rev32(int32_t x) {
  uint32_t u = (uint32_t)x, r = 0;
  for (int i = 0; i < 32; i++, u >>= 1) r = (r << 1) | (u & 1u);
  return (int32_t)r;
}
static int32_t abs_diff32(int32_t x, int32_t y) {
  int64_t d = (int64_t)x - y;
  return (int32_t)(uint32_t)(d < 0 ? -d : d);
}

Test(stdlib, integer_functions_saturate_and_do_not_overflow) {
  const int32_t vals[] = {
      0,      1,          -1,         7,         -8,        100,           200,
      -200,   0x12345678, -0x7654321, INT32_MAX, INT32_MIN, INT32_MAX - 3, 40000,
      -40000, 127};
  enum { V = sizeof vals / sizeof vals[0], N = V * V };
  int32_t a[N], b[N];
  for (int i = 0; i < N; i++) a[i] = vals[i / V], b[i] = vals[i % V];
  id bufs[3] = {sm_buffer(a, sizeof a), sm_buffer(b, sizeof b), sm_buffer(NULL, N * 18 * 4)};
  sm_dispatch(lib, "integer_ops", bufs, 3, SM_SIZE(N, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  const int32_t *o = sm_contents(bufs[2]);
  for (int i = 0; i < N; i++, o += 18) {
    int64_t x = a[i], y = b[i];
    uint32_t ux = (uint32_t)x, uy = (uint32_t)y;
    int8_t cx = (int8_t)x, cy = (int8_t)y;
    int16_t sx = (int16_t)x, sy = (int16_t)y;
    int cs = cx + cy, ss = sx - sy;
    int32_t expect[18] = {
        (int32_t)((x * y) >> 32),
        (int32_t)(uint32_t)((uint32_t)(int32_t)((x * y) >> 32) + 7u),
        sat32(x + y),
        sat32(x - y),
        abs_diff32(a[i], b[i]),
        rev32(a[i]),
        (int32_t)floor_half(x + y),
        (int32_t)floor_half(x + y + 1),
        sat32(x * y + 1),
        (int32_t)(((uint32_t)x & ~0xFF0u) | (((uint32_t)y << 4) & 0xFF0u)),
        (int32_t)(int8_t)(uint8_t)((uint32_t)x >> 4),
        (int32_t)satu32((int64_t)ux + uy),
        (int32_t)satu32((int64_t)ux - uy),
        cs > 127    ? 127
        : cs < -128 ? -128
                    : cs,
        ss > 32767    ? 32767
        : ss < -32768 ? -32768
                      : ss,
        (int32_t)(uint32_t)(((uint64_t)ux * uy) >> 32),
        sat32(x + y),
        abs_diff32(a[i], b[i]),
    };
    for (int k = 0; k < 18; k++)
      cr_expect_eq(o[k], expect[k], "x=%d y=%d function %d: %d, expected %d", a[i], b[i], k, o[k],
                   expect[k]);
  }
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
}

/* Safe math: under fast math (Metal's default) infinities and NaNs are
 * undefined, and clang 19 takes infinity()'s float result to be finite. */
Test(stdlib, numeric_limits_of_half_bfloat_float_and_integers) {
  id error = 0;
  id safe = sm_compile_mode(SOURCE, 0, &error);
  cr_assert_not_null(safe, "%s", sm_error_text(error));
  id out = sm_buffer(NULL, 24 * 4);
  sm_dispatch(safe, "limits", &out, 1, SM_SIZE(1, 1, 1), SM_SIZE(1, 1, 1), false, 0);
  sm_release(safe);
  const uint32_t *o = sm_contents(out);
  const uint32_t expect[24] = {
      0x7BFF,     0x0400,     0xFBFF,     0x1400,           0x7C00,     0x7E00, 0x0001, /* half */
      0x7F7F,     0x0080,     0xFF7F,     0x3C00,           0x7F80,     0x7FC0,         /* bfloat */
      0x7F7FFFFF, 0x00800000, 0xFF7FFFFF, 0x34000000,       0x7F800000,                 /* float */
      0x80000000, 0x7FFFFFFF, 255,        (uint32_t)-32768, 0xFFFFFFFF, 11};
  for (int k = 0; k < 24; k++)
    cr_expect_eq(o[k], expect[k], "limit %d: %#x, expected %#x", k, o[k], expect[k]);
  sm_release(out);
}

static float rel_err(float got, double want) {
  return (float)(want == 0 ? fabs(got) : fabs(got - want) / fabs(want));
}

Test(stdlib, metal_fast_and_precise_math_and_constant_tables) {
  enum { N = 96 };
  float in[N];
  for (int i = 0; i < N; i++) in[i] = -3.0f + 0.0625f * (float)i + 0.001f * (float)(i % 7);
  id bufs[2] = {sm_buffer(in, sizeof in), sm_buffer(NULL, N * 16 * 4)};
  sm_dispatch(lib, "math_ns", bufs, 2, SM_SIZE(N, 1, 1), SM_SIZE(32, 1, 1), false, 0);
  const float *o = sm_contents(bufs[1]);
  for (int i = 0; i < N; i++, o += 16) {
    float x = in[i];
    double e = exp((double)x);
    cr_expect_lt(rel_err(o[0], e), 4e-6f, "exp(%g) = %.9g", x, o[0]);
    cr_expect_lt(rel_err(o[1], e), 4e-6f, "fast::exp(%g) = %.9g", x, o[1]);
    cr_expect_eq(o[2], expf(x), "precise::exp(%g) = %.9g is libm's under fast math", x, o[2]);
    cr_expect_eq(o[3], x / 3.0f, "precise::divide(%g, 3) = %.9g: correctly rounded", x, o[3]);
    cr_expect_lt(rel_err(o[4], x / 3.0), 4e-7f, "divide(%g, 3) = %.9g", x, o[4]);
    cr_expect_lt(rel_err(o[5], pow(2.0, x)), 4e-6f, "pow(2, %g) = %.9g", x, o[5]);
    cr_expect_lt(rel_err(o[6], 1.0 / (x + 4.0)), 4e-7f, "fast::divide");
    cr_expect_eq(o[7], fminf(fmaxf(x, -0.5f), 0.5f));
    cr_expect_eq(o[8], fabsf(x));
    cr_expect_eq(o[9], fmaf(x, 2.0f, 1.0f));
    cr_expect_eq(o[10], fminf(x, 0.25f) + fmaxf(x, -0.25f));
    float med = fmaxf(fminf(x, 0.1f), fminf(fmaxf(x, 0.1f), -0.1f));
    cr_expect_eq(o[11], fmaxf(fmaxf(x, 0.1f), -0.1f) + med, "fmax3 + fmedian3 at %g", x);
    cr_expect_eq(o[12], -x);
    /* table . (3, 4, 3, 4) = 3 + 8 + 12 + 32 = 55; + 0.5 * 2x + 27 - 1 */
    cr_expect_lt(rel_err(o[13], 55.0 + x + 27.0 - 1.0), 1e-6f, "constant tables at %g: %g", x,
                 o[13]);
    cr_expect_eq(o[14], 33.0f,
                 "uint3 grid position (y, z = 0) and ushort2 threadgroup size (32, 1)");
    cr_expect_eq(o[15], tanf(x), "precise::tan(%g) = %.9g is libm's under fast math", x, o[15]);
  }
  sm_release(bufs[0]);
  sm_release(bufs[1]);
}

Test(stdlib, atomic_float_add_count_and_min) {
  enum { N = 1000 };
  float fsum = 1.0f;
  uint32_t count = 0;
  int32_t low = 5;
  id bufs[3] = {sm_buffer(&fsum, 4), sm_buffer(&count, 4), sm_buffer(&low, 4)};
  sm_dispatch(lib, "atomics", bufs, 3, SM_SIZE(N, 1, 1), SM_SIZE(100, 1, 1), false, 0);
  cr_expect_eq(*(float *)sm_contents(bufs[0]), 1.0f + 0.25f * N);
  cr_expect_eq(*(uint32_t *)sm_contents(bufs[1]), N);
  cr_expect_eq(*(int32_t *)sm_contents(bufs[2]), -(N - 1));
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
}

Test(stdlib, column_major_matrices) {
  enum { N = 8 };
  float in[N * 16];
  for (int i = 0; i < N * 16; i++) in[i] = (float)((i * 7) % 13) - 6.0f;
  id bufs[2] = {sm_buffer(in, sizeof in), sm_buffer(NULL, N * 32 * 4)};
  sm_dispatch(lib, "matrices", bufs, 2, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
  const float *o = sm_contents(bufs[1]);
  for (int i = 0; i < N; i++, o += 32) {
    const float *m = in + 16 * i; /* m[c * 4 + r]: column c, row r */
    const float v[4] = {1, 2, 3, 4};
    for (int r = 0; r < 4; r++) {
      float mv = 0, vm = 0, mm = 0;
      for (int c = 0; c < 4; c++) {
        mv += m[c * 4 + r] * v[c];
        vm += v[c] * m[r * 4 + c];
        mm += m[c * 4 + r] * m[c * 4 + r];
      }
      cr_expect_eq(o[r], mv, "(m * v)[%d]", r);
      cr_expect_eq(o[4 + r], vm, "(v * m)[%d]", r);
      cr_expect_eq(o[8 + r], mm, "(m * transpose(m))[%d][%d]", r, r);
    }
    float m12 = 0; /* column 1, row 2 of m * m^T = row 2 of m . row 1 of m */
    for (int c = 0; c < 4; c++) m12 += m[c * 4 + 2] * m[c * 4 + 1];
    cr_expect_eq(o[12], m12);
    cr_expect_eq(o[13], 31.0f, "float2x2(1, 2, 3, 4) * (1, 10): columns (1, 2) and (3, 4)");
    cr_expect_eq(o[14], 42.0f);
    cr_expect_eq(o[15], 2.0f * (m[0] + m[1] + m[2]), "float3x3(2) is 2 on the diagonal");
    cr_expect_eq(o[16], m[3 * 4 + 1], "half4x4(float4x4) converts each element");
  }
  sm_release(bufs[0]);
  sm_release(bufs[1]);
}

static float bf16_round(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  x += 0x7FFFu + ((x >> 16) & 1u);
  x &= 0xFFFF0000u;
  memcpy(&f, &x, 4);
  return f;
}

Test(stdlib, bfloat_math_computes_in_float_and_metal_array) {
  enum { N = 64 };
  float in[N];
  for (int i = 0; i < N; i++) in[i] = -4.0f + 0.1234567f * (float)i;
  id bufs[2] = {sm_buffer(in, sizeof in), sm_buffer(NULL, N * 3 * 4)};
  sm_dispatch(lib, "bfloat_and_array", bufs, 2, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
  const float *o = sm_contents(bufs[1]);
  for (int i = 0; i < N; i++) {
    float b = bf16_round(in[i]);
    cr_expect_eq(o[3 * i], b, "bfloat(%g) rounds to nearest even", in[i]);
    cr_expect_lt(rel_err(o[3 * i + 1], exp((double)b)), 4e-6f,
                 "exp(bfloat) is a float, not rounded to bfloat");
    cr_expect_eq(o[3 * i + 2], 3.0f);
  }
  sm_release(bufs[0]);
  sm_release(bufs[1]);
}

/* Round to half (normal range), to nearest even. */
static float half_round(float f) {
  if (f == 0.0f) return f;
  int e;
  frexpf(f, &e);
  return ldexpf(nearbyintf(ldexpf(f, 11 - e)), e - 11);
}
static uint16_t half_bits(float f) { /* exact halves in the normal range only */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, exp = ((x >> 23) & 0xFFu) - 127 + 15;
  return (uint16_t)(sign | (exp << 10) | ((x & 0x7FFFFFu) >> 13));
}

Test(stdlib, half_converts_as_an_arithmetic_type) {
  const float vals[] = {0.5f, 1.0f, 2.5f, 3.75f, 100.5f, 1000.0f, 7.0f, 0.25f};
  enum { N = sizeof vals / sizeof vals[0] };
  uint16_t in[N];
  for (int i = 0; i < N; i++) in[i] = half_bits(vals[i]);
  id bufs[2] = {sm_buffer(in, sizeof in), sm_buffer(NULL, N * 4 * 4)};
  sm_dispatch(lib, "half_conversions", bufs, 2, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
  const float *o = sm_contents(bufs[1]);
  for (int i = 0; i < N; i++) {
    float h = vals[i];
    cr_expect_eq(o[4 * i], i % 2 ? h : 0.0f, "c ? half : 0 is a half");
    cr_expect_eq(o[4 * i + 1], 2.0f * (float)(int)h, "half to uint and int truncate");
    cr_expect_eq(o[4 * i + 2], (float)(int)half_round(half_round(5001.0f) + h),
                 "int += half is a half addition: %g", o[4 * i + 2]);
    cr_expect_eq(o[4 * i + 3], 0.5f + h, "float += half is a float addition");
  }
  sm_release(bufs[0]);
  sm_release(bufs[1]);
}

Test(stdlib, packed_vectors_convert_to_vectors_of_other_types) {
  int8_t in[8] = {-128, -3, 0, 1, 7, 64, 127, -1};
  id bufs[2] = {sm_buffer(in, sizeof in), sm_buffer(NULL, 8 * 4)};
  sm_dispatch(lib, "packed_conversions", bufs, 2, SM_SIZE(2, 1, 1), SM_SIZE(2, 1, 1), false, 0);
  const float *o = sm_contents(bufs[1]);
  for (int i = 0; i < 8; i++) cr_expect_eq(o[i], 1.5f * (float)in[i], "[%d]: %g", i, o[i]);
  sm_release(bufs[0]);
  sm_release(bufs[1]);
}

Test(stdlib, simd_shuffle_and_fill_within_vectors_of_modulo_lanes) {
  enum { N = 64 };
  id out = sm_buffer(NULL, N * 4 * 4);
  sm_dispatch(lib, "fill_shuffles", &out, 1, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
  const int32_t *o = sm_contents(out);
  for (int t = 0; t < N; t++) {
    int l = t % 32, in8 = l % 8, lo8 = l - in8, in4 = l % 4, lo4 = l - in4;
    int want[4] = {
        l >= 3 ? l - 3 : 100 + 32 - 3 + l,
        l + 5 < 32 ? l + 5 : 100 + l + 5 - 32,
        in8 >= 2 ? lo8 + in8 - 2 : 100 + lo8 + 8 - 2 + in8,
        in4 + 3 < 4 ? lo4 + in4 + 3 : 100 + lo4 + in4 + 3 - 4,
    };
    for (int k = 0; k < 4; k++)
      cr_expect_eq(o[4 * t + k], want[k], "thread %d, shuffle %d: %d, expected %d", t, k,
                   o[4 * t + k], want[k]);
  }
  sm_release(out);
}

/* What Metal's compiler provides beyond metal_stdlib's core, used as real
 * code does: <simd/simd.h> and <simd/vector_types.h> types (SPIR-V
 * translators' outputs, metal-rs's examples), the other
 * metal_* headers, uniform<T>, Apple's internal traits specialised for a user
 * type, Metal 3.2's memory model and coherent(device), brace construction of
 * a user matrix type, and os_log printing from a kernel. */
static const char ADDITIONS[] =
    "#include <simd/simd.h>\n"
    "#include <simd/vector_types.h>\n"
    "#include <metal_stdlib>\n"
    "#include <metal_logging>\n"
    "#include <metal_math>\n"
    "#include <metal_compute>\n"
    "#include <metal_atomic>\n"
    "#include <metal_uniform>\n"
    "#include <metal_type_traits>\n"
    "using namespace metal;\n"
    "struct cfloat { float re, im; };\n"
    "namespace metal {\n"
    "template <> struct _numeric_limits_impl<cfloat> {\n"
    "  static constexpr bool is_specialized = true;\n"
    "  static cfloat max() { return {1.f, 2.f}; }\n"
    "};\n"
    "}\n"
    "template <typename T>\n"
    "constexpr constant bool is_ok = _disjunction<is_same<T, int>, is_same<T, float>>::value;\n"
    "static_assert(is_ok<float> && !is_ok<half>, \"\");\n"
    "static_assert(_conjunction<is_same<int, int>, _negation<is_same<int, float>>>::value, \"\");\n"
    "static_assert(__is_valid_simdgroup_type<half4>::value && "
    "!__is_valid_simdgroup_type<ulong>::value,\n"
    "              \"SIMD-group functions take no 64-bit integers\");\n"
    "struct mat2 {\n"
    "  float2 c[2];\n"
    "  mat2(initializer_list<float2> cols) {\n"
    "    int k = 0;\n"
    "    for (auto v : cols) c[k++] = v;\n"
    "  }\n"
    "};\n"
    "kernel void additions(device float *o [[buffer(0)]],\n"
    "                      coherent(device) device atomic_int *cnt [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "  simd::float4 a = simd::float4(float(i), 1.f, 2.f, 3.f);\n"
    "  simd_float2x2 m = simd_float2x2(simd_float2(1.f, 2.f), simd_float2(3.f, 4.f));\n"
    "  uniform<float> u = make_uniform(2.5f);\n"
    "  float uu = u * 2.f;\n"
    "  mat2 mm = {float2(5.f, 6.f), float2(7.f, 8.f)};\n"
    "  atomic_fetch_add_explicit(cnt, 1, memory_order_relaxed);\n"
    "  atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);\n"
    "  o[4 * i + 0] = a.x + a.w;\n"
    "  o[4 * i + 1] = (m * simd_float2(1.f, 1.f)).y;\n"
    "  o[4 * i + 2] = uu + numeric_limits<cfloat>::max().im;\n"
    "  o[4 * i + 3] = mm.c[1].x;\n"
    "  if (i == 5) os_log_default.log_info(\"additions thread %u value %d\", i, 42);\n"
    "}\n";

/* ADDITIONS compiled with MTLCompileOptions.enableLogging = logging. */
static id compile_logging(bool logging, id *error) {
  id fresh = SEND0(id, sm_class_named("MTLCompileOptions"), "alloc");
  id options = SEND0(id, fresh, "init");
  cr_assert_eq(SEND0(BOOL, options, "enableLogging"), 0, "NO by default, as Metal");
  SEND(void, (id, SEL, BOOL), options, "setEnableLogging:", logging);
  id library = SEND(id, (id, SEL, id, id, id *), sm_dev,
                    "newLibraryWithSource:options:error:", sm_str(ADDITIONS), options, error);
  sm_release(options);
  return library;
}

Test(stdlib, headers_uniform_traits_memory_model_and_logging) {
  cr_redirect_stderr();
  id error = 0;
  id l = compile_logging(true, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  id o = sm_buffer(NULL, 4 * 4 * 8), cnt = sm_buffer(NULL, 4);
  id bufs[] = {o, cnt};
  sm_dispatch(l, "additions", bufs, 2, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  const float *r = sm_contents(o);
  for (int i = 0; i < 8; i++) {
    cr_assert_eq(r[4 * i + 0], (float)i + 3.f);
    cr_assert_eq(r[4 * i + 1], 6.f, "column-major product: %g", (double)r[4 * i + 1]);
    cr_assert_eq(r[4 * i + 2], 7.f);
    cr_assert_eq(r[4 * i + 3], 7.f);
  }
  cr_assert_eq(*(const int *)sm_contents(cnt), 8);
  fflush(stderr);
  FILE *err = cr_get_redirected_stderr();
  char text[4096] = "";
  size_t n = fread(text, 1, sizeof text - 1, err);
  text[n] = 0;
  cr_assert(strstr(text, "[5,0,0] info: additions thread 5 value 42\n"), "stderr: %s", text);
  sm_release(o);
  sm_release(cnt);
  sm_release(l);
}

/* os_log prints only from a library compiled with enableLogging (Metal 3.2);
 * without options or with NO, the kernel runs and prints nothing. */
Test(stdlib, os_log_prints_only_with_enable_logging) {
  cr_redirect_stderr();
  for (int k = 0; k < 2; k++) {
    id error = 0;
    id l = k == 0 ? sm_compile(ADDITIONS, &error) : compile_logging(false, &error);
    cr_assert_not_null(l, "%s", sm_error_text(error));
    id o = sm_buffer(NULL, 4 * 4 * 8), cnt = sm_buffer(NULL, 4);
    id bufs[] = {o, cnt};
    sm_dispatch(l, "additions", bufs, 2, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
    cr_assert_eq(*(const int *)sm_contents(cnt), 8, "the kernel ran");
    sm_release(o);
    sm_release(cnt);
    sm_release(l);
  }
  fflush(stderr);
  FILE *err = cr_get_redirected_stderr();
  char text[4096] = "";
  size_t n = fread(text, 1, sizeof text - 1, err);
  text[n] = 0;
  cr_assert(!strstr(text, "os_log"), "stderr: %s", text);
}

/* uniform<T> in constant expressions (`constexpr const uniform<int> step =
 * make_uniform(BN);`, as blocked matrix-vector kernels write it), and the
 * product of simdgroup matrices written with `*` (a Winograd-style transform
 * `(G * g) * Gt`): each a kernel of ours against a reference here. */
static const char UNIFORM_AND_MATRIX_PRODUCT[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "template <int BN>\n"
    "struct blocked_sum {\n"
    "  static void run(device const float *x, device float *out, int n, uint i) {\n"
    "    constexpr const uniform<int> step = make_uniform(BN);\n"
    "    const uniform<int> size = make_uniform(n);\n"
    "    const uniform<int> iters = size / step;\n"
    "    const uniform<int> tail = size - step * iters;\n"
    "    static_assert(int(step) == BN, \"a constant expression\");\n"
    "    float acc = 0.f;\n"
    "    for (int k = 0; k < iters; ++k)\n"
    "      for (int j = 0; j < BN; ++j) acc += x[k * BN + j] * float(i + 1);\n"
    "    for (int j = 0; j < tail; ++j) acc += 100.f * x[int(step * iters) + j];\n"
    "    out[i] = acc;\n"
    "  }\n"
    "};\n"
    "kernel void ublocked(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],\n"
    "                     constant int &n [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n"
    "  blocked_sum<4>::run(x, out, n, i);\n"
    "}\n"
    "kernel void mat_product(device const float *g [[buffer(0)]],\n"
    "                        device const float *x [[buffer(1)]],\n"
    "                        device float *out [[buffer(2)]],\n"
    "                        uint lane [[thread_index_in_simdgroup]]) {\n"
    "  simdgroup_float8x8 G, X, Gt;\n"
    "  simdgroup_load(G, g);\n"
    "  simdgroup_load(X, x);\n"
    "  simdgroup_load(Gt, g, 8, ulong2(0, 0), true);\n"
    "  simdgroup_float8x8 r = (G * X) * Gt;\n"
    "  simdgroup_store(r, out);\n"
    "  simdgroup_half8x8 h = simdgroup_half8x8(half(2)) * simdgroup_half8x8(half(3));\n"
    "  if (lane == 0) out[64] = float(h.thread_elements()[0]);\n"
    "}\n";

Test(stdlib, uniform_constant_expressions_and_simdgroup_matrix_product) {
  id error = 0;
  id l = sm_compile(UNIFORM_AND_MATRIX_PRODUCT, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  enum { N = 27, T = 5 };
  float x[N];
  for (int k = 0; k < N; k++) x[k] = (float)(k % 7) - 2.5f;
  int n = N;
  id xb = sm_buffer(x, sizeof x), ob = sm_buffer(NULL, T * 4), nb = sm_buffer(&n, 4);
  id bufs[] = {xb, ob, nb};
  sm_dispatch(l, "ublocked", bufs, 3, SM_SIZE(T, 1, 1), SM_SIZE(T, 1, 1), false, 0);
  for (int i = 0; i < T; i++) {
    float want = 0.f;
    for (int k = 0; k < N / 4; k++)
      for (int j = 0; j < 4; j++) want += x[k * 4 + j] * (float)(i + 1);
    for (int j = 0; j < N % 4; j++) want += 100.f * x[(N / 4) * 4 + j];
    cr_assert_eq(((const float *)sm_contents(ob))[i], want, "[%d]", i);
  }
  /* small integers: every product and sum is exact in float */
  float g[64], m[64], want[64], tmp[64];
  for (int k = 0; k < 64; k++) g[k] = (float)((k * 5) % 7 - 3), m[k] = (float)((k * 3) % 5 - 2);
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 8; c++) {
      float a = 0.f;
      for (int k = 0; k < 8; k++) a += g[r * 8 + k] * m[k * 8 + c];
      tmp[r * 8 + c] = a;
    }
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 8; c++) {
      float a = 0.f;
      for (int k = 0; k < 8; k++) a += tmp[r * 8 + k] * g[c * 8 + k]; /* Gt[k][c] = G[c][k] */
      want[r * 8 + c] = a;
    }
  id gb = sm_buffer(g, sizeof g), mb = sm_buffer(m, sizeof m), rb = sm_buffer(NULL, 65 * 4);
  id mbufs[] = {gb, mb, rb};
  sm_dispatch(l, "mat_product", mbufs, 3, SM_SIZE(32, 1, 1), SM_SIZE(32, 1, 1), false, 0);
  const float *got = sm_contents(rb);
  for (int k = 0; k < 64; k++)
    cr_assert_eq(got[k], want[k], "[%d][%d]: %g, want %g", k / 8, k % 8, (double)got[k],
                 (double)want[k]);
  cr_assert_eq(got[64], 6.f, "diagonal 2 times diagonal 3");
  sm_release(xb);
  sm_release(ob);
  sm_release(nb);
  sm_release(gb);
  sm_release(mb);
  sm_release(rb);
  sm_release(l);
}

/* The geometric functions beyond dot/length (faceforward, reflect, refract,
 * distance_squared), determinant, and the pack/unpack functions of
 * metal_pack, against the definitions of Apple's specification computed
 * here. Inputs are small integers and halves, so results are exact except
 * refract's square root, which is compared with C's sqrtf of the same k. */
static const char GEOMETRY_AND_PACK[] =
    "#include <metal_stdlib>\n"
    "#include <metal_geometric>\n"
    "#include <metal_pack>\n"
    "using namespace metal;\n"
    "kernel void geom(device float *o [[buffer(0)]], device const float *v [[buffer(1)]]) {\n"
    "  float3 i = float3(v[0], v[1], v[2]), n = float3(v[3], v[4], v[5]);\n"
    "  float3 r = reflect(i, n);\n"
    "  o[0] = r.x; o[1] = r.y; o[2] = r.z;\n"
    "  float2 f = faceforward(float2(1, 2), float2(v[0], v[1]), float2(v[3], v[4]));\n"
    "  o[3] = f.x; o[4] = f.y;\n"
    "  o[5] = distance_squared(i, n);\n"
    "  float2 t = refract(float2(0.6f, -0.8f), float2(0, 1), 0.5f);\n"
    "  o[6] = t.x; o[7] = t.y;\n"
    "  float2 tir = refract(float2(0.8f, -0.6f), float2(0, 1), 2.0f);\n"
    "  o[8] = tir.x; o[9] = tir.y;\n"
    "  o[10] = determinant(float2x2(v[0], v[1], v[2], v[3]));\n"
    "  o[11] = determinant(float3x3(float3(2, 0, 1), float3(1, 3, 2), float3(1, 1, 1)));\n"
    "  o[12] = determinant(float4x4(float4(1, 0, 2, -1), float4(3, 0, 0, 5), float4(2, 1, 4, -3),\n"
    "                               float4(1, 0, 5, 0)));\n"
    "  o[13] = float(determinant(half2x2(half2(3, 1), half2(4, 2))));\n"
    "}\n"
    "kernel void packs(device uint *p [[buffer(0)]], device float *u [[buffer(1)]]) {\n"
    "  p[0] = pack_float_to_unorm4x8(float4(0.0f, 1.0f, 0.5f, 2.0f));\n"
    "  p[1] = pack_float_to_snorm4x8(float4(-1.0f, 1.0f, -0.5f, -3.0f));\n"
    "  p[2] = pack_float_to_unorm2x16(float2(0.25f, -1.0f));\n"
    "  p[3] = pack_float_to_snorm2x16(float2(-0.25f, 0.5f));\n"
    "  p[4] = pack_half_to_unorm4x8(half4(0.25h, 0.75h, 1.0h, 0.0h));\n"
    "  p[5] = pack_half_to_snorm2x16(half2(-1.0h, 1.0h));\n"
    "  p[6] = pack_float_to_unorm4x8(float4(NAN, 0.0f, 0.0f, 0.0f));\n"
    "  float4 a = unpack_unorm4x8_to_float(0x80FF0033u);\n"
    "  float4 b = unpack_snorm4x8_to_float(0x80817F00u);\n"
    "  float2 c = unpack_unorm2x16_to_float(0xFFFF0000u);\n"
    "  float2 d = unpack_snorm2x16_to_float(0x80007FFFu);\n"
    "  half4 e = unpack_unorm4x8_to_half(0x00FF00FFu);\n"
    "  for (int k = 0; k < 4; k++) { u[k] = a[k]; u[4 + k] = b[k]; u[12 + k] = float(e[k]); }\n"
    "  u[8] = c.x; u[9] = c.y; u[10] = d.x; u[11] = d.y;\n"
    "}\n";

static uint32_t pack_ref(const float *v, int n, int w, int is_signed) {
  uint32_t r = 0, mask = (1u << w) - 1u;
  float scale = is_signed ? (float)(mask >> 1) : (float)mask;
  for (int i = 0; i < n; i++) {
    float f = v[i];
    if (f != f) f = 0.0f;
    float lo = is_signed ? -1.0f : 0.0f;
    f = f < lo ? lo : f > 1.0f ? 1.0f : f;
    r |= ((uint32_t)(int32_t)rintf(f * scale) & mask) << (i * w);
  }
  return r;
}

Test(stdlib, geometric_determinant_and_pack_functions) {
  id error = 0;
  id l = sm_compile(GEOMETRY_AND_PACK, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  const float v[6] = {1.0f, -2.0f, 3.0f, 0.0f, 1.0f, 2.0f};
  id ob = sm_buffer(NULL, 16 * 4), vb = sm_buffer(v, sizeof v);
  id gb[] = {ob, vb};
  sm_dispatch(l, "geom", gb, 2, SM_SIZE(1, 1, 1), SM_SIZE(1, 1, 1), false, 0);
  const float *o = sm_contents(ob);
  float dni = v[3] * v[0] + v[4] * v[1] + v[5] * v[2]; /* dot(n, i) = 4 */
  for (int k = 0; k < 3; k++) cr_expect_eq(o[k], v[k] - 2.0f * dni * v[3 + k], "reflect[%d]", k);
  /* dot(nref, i) = 0 * 1 + 1 * -2 = -2 < 0: n */
  cr_expect_eq(o[3], 1.0f);
  cr_expect_eq(o[4], 2.0f);
  cr_expect_eq(o[5], 1.0f + 9.0f + 1.0f, "distance_squared");
  float d = -0.8f, eta = 0.5f, k = 1.0f - eta * eta * (1.0f - d * d);
  cr_expect_eq(o[6], eta * 0.6f, "refract.x");
  cr_expect_eq(o[7], eta * -0.8f - (eta * d + sqrtf(k)) * 1.0f, "refract.y: %g", (double)o[7]);
  cr_expect_eq(o[8], 0.0f, "total internal reflection");
  cr_expect_eq(o[9], 0.0f, "total internal reflection");
  cr_expect_eq(o[10], v[0] * v[3] - v[2] * v[1], "2x2 (columns (1,-2), (3,0))");
  /* columns (2,0,1), (1,3,2), (1,1,1): det = 2(3-2) - 1(0-1) + 1(0-3) = 0 */
  cr_expect_eq(o[11],
               2.0f * (3.0f * 1.0f - 1.0f * 2.0f) - 1.0f * (0.0f * 1.0f - 1.0f * 1.0f) +
                   1.0f * (0.0f * 2.0f - 3.0f * 1.0f),
               "3x3: %g", (double)o[11]);
  /* the 4x4's rows are the columns above: expand along the second row of the
   * transposed matrix, which has one non-zero entry (column 1 = (3,0,0,5)) */
  cr_expect_eq(o[12], 30.0f, "4x4: %g", (double)o[12]);
  cr_expect_eq(o[13], 2.0f, "half 2x2");

  id pb = sm_buffer(NULL, 8 * 4), ub = sm_buffer(NULL, 16 * 4);
  id bufs[] = {pb, ub};
  sm_dispatch(l, "packs", bufs, 2, SM_SIZE(1, 1, 1), SM_SIZE(1, 1, 1), false, 0);
  const uint32_t *p = sm_contents(pb);
  const float a0[4] = {0.0f, 1.0f, 0.5f, 2.0f}, a1[4] = {-1.0f, 1.0f, -0.5f, -3.0f};
  const float a2[2] = {0.25f, -1.0f}, a3[2] = {-0.25f, 0.5f};
  const float a4[4] = {0.25f, 0.75f, 1.0f, 0.0f}, a5[2] = {-1.0f, 1.0f};
  cr_expect_eq(p[0], pack_ref(a0, 4, 8, 0), "%#x", p[0]);
  cr_expect_eq(p[0], 0xFF80FF00u, "0.5 * 255 = 127.5 rounds to even 128");
  cr_expect_eq(p[1], pack_ref(a1, 4, 8, 1), "%#x", p[1]);
  cr_expect_eq(p[2], pack_ref(a2, 2, 16, 0), "%#x", p[2]);
  cr_expect_eq(p[3], pack_ref(a3, 2, 16, 1), "%#x", p[3]);
  cr_expect_eq(p[4], pack_ref(a4, 4, 8, 0), "%#x", p[4]);
  cr_expect_eq(p[5], pack_ref(a5, 2, 16, 1), "%#x", p[5]);
  cr_expect_eq(p[6], 0u, "NaN packs as 0");
  const float *u = sm_contents(ub);
  const uint8_t ua[4] = {0x33, 0x00, 0xFF, 0x80};
  const int8_t sb[4] = {0x00, 0x7F, (int8_t)0x81, (int8_t)0x80};
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(u[i], (float)ua[i] / 255.0f, "unorm8[%d]: %a, want %a", i, (double)u[i],
                 (double)((float)ua[i] / 255.0f));
    float s = (float)sb[i] / 127.0f;
    cr_expect_eq(u[4 + i], s < -1.0f ? -1.0f : s, "snorm8[%d]: %g", i, (double)u[4 + i]);
    cr_expect_eq(u[12 + i], (i % 2 == 0) ? 1.0f : 0.0f, "unorm8 to half[%d]", i);
  }
  cr_expect_eq(u[8], 0.0f);
  cr_expect_eq(u[9], 1.0f);
  cr_expect_eq(u[10], 1.0f, "0x7FFF is 1");
  cr_expect_eq(u[11], -1.0f, "0x8000 clamps to -1");
  sm_release(ob);
  sm_release(vb);
  sm_release(pb);
  sm_release(ub);
  sm_release(l);
}

/* precise::divide is correctly rounded in every math mode, also when one
 * kernel divides several numerators by the same divisor: under fast math
 * (Metal's default, as here) the compiler may otherwise share one rounded
 * reciprocal between the divisions and multiply, an error of up to 2 ulp. */
static const char SHARED_DIVISOR[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void pdiv(device float *o [[buffer(0)]], device const float *n [[buffer(1)]],\n"
    "                 constant float &d [[buffer(2)]]) {\n"
    "  o[0] = precise::divide(n[0], d);\n"
    "  o[1] = precise::divide(n[1], d);\n"
    "  o[2] = precise::divide(n[2], d);\n"
    "  o[3] = precise::divide(n[3], d);\n"
    "#pragma unroll\n"
    "  for (int k = 4; k < 8; k++) o[k] = precise::divide(n[k], 255.0f);\n"
    "  o[8] = precise::divide(n[0], 255.0f) + precise::divide(n[1], 255.0f);\n"
    "}\n";

Test(stdlib, precise_divide_by_a_shared_divisor_is_correctly_rounded) {
  id error = 0;
  id l = sm_compile(SHARED_DIVISOR, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  const float n[8] = {51.0f, 1.0f, 7.0f, 100.0f, 254.0f, 3.0f, 17.0f, 129.0f};
  const float d = 255.0f;
  id ob = sm_buffer(NULL, 9 * 4), nb = sm_buffer(n, sizeof n), db = sm_buffer(&d, 4);
  id bufs[] = {ob, nb, db};
  sm_dispatch(l, "pdiv", bufs, 3, SM_SIZE(1, 1, 1), SM_SIZE(1, 1, 1), false, 0);
  const float *o = sm_contents(ob);
  for (int k = 0; k < 8; k++)
    cr_expect_eq(o[k], n[k] / d, "%g / 255: %a, want %a", (double)n[k], (double)o[k],
                 (double)(n[k] / d));
  cr_expect_eq(o[8], n[0] / 255.0f + n[1] / 255.0f, "%a", (double)o[8]);
  sm_release(ob);
  sm_release(nb);
  sm_release(db);
  sm_release(l);
}

static const char NAN_MIN_MAX[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void nan_min_max(device const float *a [[buffer(0)]],\n"
    "                        device const float *b [[buffer(1)]], device float *o [[buffer(2)]],\n"
    "                        uint i [[thread_position_in_grid]]) {\n"
    "  device float *r = o + 6 * i;\n"
    "  r[0] = max(a[i], b[i]);\n"
    "  r[1] = min(a[i], b[i]);\n"
    "  r[2] = fmax(a[i], b[i]);\n"
    "  r[3] = fmin(a[i], b[i]);\n"
    "  r[4] = float(max(half(a[i]), half(b[i])));\n"
    "  r[5] = max(float2(a[i]), float2(b[i])).y;\n"
    "}\n"
    "/* ggml's flash-attention block scan: the extremes of a block of half\n"
    " * values, some lanes reading NaN bits */\n"
    "kernel void nan_block_extremes(device const half *m [[buffer(0)]],\n"
    "                               device half *o [[buffer(1)]],\n"
    "                               ushort lane [[thread_index_in_simdgroup]]) {\n"
    "  half lo = MAXHALF, hi = -MAXHALF;\n"
    "  for (short k = 0; k < 2; ++k) {\n"
    "    lo = min(lo, m[k * 32 + lane]);\n"
    "    hi = max(hi, m[k * 32 + lane]);\n"
    "  }\n"
    "  lo = simd_min(lo);\n"
    "  hi = simd_max(hi);\n"
    "  if (lane == 0) { o[0] = lo; o[1] = hi; }\n"
    "}\n";

/* Apple GPUs' min and max give the other operand where one is NaN, fast
 * math (the default) included; a NaN in a block ggml scans for its extremes
 * (rows past a tensor's end) must not turn them into NaN. */
Test(stdlib, min_and_max_of_a_nan_give_the_other_operand_under_fast_math) {
  id error = 0;
  id l = sm_compile(NAN_MIN_MAX, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  const uint32_t qnan = 0x7FC00000u;
  float nan;
  memcpy(&nan, &qnan, 4);
  const float a[4] = {1.0f, nan, nan, -2.0f}, b[4] = {nan, 3.0f, nan, 5.0f};
  const float want_max[4] = {1.0f, 3.0f, nan, 5.0f}, want_min[4] = {1.0f, 3.0f, nan, -2.0f};
  id ob = sm_buffer(NULL, 4 * 6 * 4), ab = sm_buffer(a, sizeof a), bb = sm_buffer(b, sizeof b);
  id bufs[] = {ab, bb, ob};
  sm_dispatch(l, "nan_min_max", bufs, 3, SM_SIZE(4, 1, 1), SM_SIZE(4, 1, 1), false, 0);
  const float *o = sm_contents(ob);
  for (int i = 0; i < 4; i++) {
    const float want[6] = {want_max[i], want_min[i], want_max[i],
                           want_min[i], want_max[i], want_max[i]};
    for (int k = 0; k < 6; k++) {
      if (isnan(want[k]))
        cr_expect(isnan(o[6 * i + k]), "case %d result %d: %g, want NaN", i, k,
                  (double)o[6 * i + k]);
      else
        cr_expect_eq(o[6 * i + k], want[k], "case %d result %d: %g, want %g", i, k,
                     (double)o[6 * i + k], (double)want[k]);
    }
  }
  /* 64 halves from -63/128 up by 1/64 (none 0: normal halves, made from
   * the float's bits); the bits of lanes 3, 17 and 40 NaN */
  uint16_t m[64];
  for (int k = 0; k < 64; k++) {
    float v = -0.5f + ((float)k + 0.5f) / 64.0f;
    uint32_t u;
    memcpy(&u, &v, 4);
    m[k] = (uint16_t)(((u >> 16) & 0x8000u) | ((((u >> 23) & 0xFFu) - 112u) << 10) |
                      ((u >> 13) & 0x3FFu));
  }
  m[3] = m[17] = m[40] = 0x7E00u;
  id mb = sm_buffer(m, sizeof m), hb = sm_buffer(NULL, 4);
  id bufs2[] = {mb, hb};
  sm_dispatch(l, "nan_block_extremes", bufs2, 2, SM_SIZE(32, 1, 1), SM_SIZE(32, 1, 1), false, 0);
  const uint16_t *h = sm_contents(hb);
  cr_expect_eq(h[0], m[0], "simd_min of the block: 0x%04x, want 0x%04x", h[0], m[0]);
  cr_expect_eq(h[1], m[63], "simd_max of the block: 0x%04x, want 0x%04x", h[1], m[63]);
  sm_release(ob);
  sm_release(ab);
  sm_release(bb);
  sm_release(mb);
  sm_release(hb);
  sm_release(l);
}

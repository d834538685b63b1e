/* SPDX-License-Identifier: MIT */
/* MSL's vector semantics, each written as a kernel and checked against a C
 * reference: conversions between vector types convert each element (never
 * reinterpret the bits, which clang's own vectors do for a cast between
 * vectors of one size), constructors from several parts and broadcasts,
 * comparisons that give boolN (true is 1, not an all-ones mask), select, all
 * and any, packed vectors, vec<T, N> deduced in user templates (from
 * swizzles too), swizzles as values and as assigned targets (in templates
 * too, never a store into a temporary), conditionals of half, bfloat and
 * vectors, braces that fill in order and zero the rest; and, refused at the
 * user's line and column, implicit conversions between vector types, operands
 * of two vector types, constructors of the wrong size and narrowing braces. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_run.h"

static void setup(void) { sm_run_open(); }
static void teardown(void) { sm_run_close(); }
TestSuite(vectors, .init = setup, .fini = teardown, .timeout = 120);

/* Runs kernel `k` of src (fast math, Metal's default) on one thread. */
static void run_k(const char *src, const float *in, size_t n_in, float *got, size_t n) {
  sm_run_k(src, -1, in, n_in, got, n);
}
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define HEAD                                                                                       \
  "#include <metal_stdlib>\n"                                                                      \
  "using namespace metal;\n"
#define KERNEL                                                                                     \
  "kernel void k(device const float *in [[buffer(0)]], device float *o [[buffer(1)]]) {\n"

static void expect_all(const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    cr_expect(got[i] == want[i] || (got[i] != got[i] && want[i] != want[i]),
              "o[%zu] = %.9g, expected %.9g", i, got[i], want[i]);
}

/* The trap: int4 and float4 have one size, and a cast between clang's own
 * vectors of one size reinterprets the bits (1 as a float is 1.4e-45). Every
 * MSL spelling of the conversion converts each element. */
Test(vectors, a_cast_between_vector_types_converts_each_element) {
  const float in[4] = {1, -2, 3, 1065353216}; /* the last: the bits of 1.0f */
  float o[24];
  run_k(HEAD "template <class T, class U> T to(U u) { return T(u); }\n"
             "template <class T, class U> T to_c(U u) { return (T)u; }\n" KERNEL
             "  int4 i = int4(int(in[0]), int(in[1]), int(in[2]), int(in[3]));\n"
             "  float4 a = float4(i);\n"
             "  float4 b = static_cast<float4>(i);\n"
             "  float4 c = (float4)i;\n"
             "  float4 d = to<float4>(i);\n"
             "  float4 e = to_c<float4>(i);\n"
             "  uint4 u = uint4(i * i);\n"
             "  float4 f = float4(u);\n"
             "  for (int j = 0; j < 4; j++) {\n"
             "    o[j] = a[j]; o[4 + j] = b[j]; o[8 + j] = c[j];\n"
             "    o[12 + j] = d[j]; o[16 + j] = e[j]; o[20 + j] = f[j];\n"
             "  }\n"
             "}\n",
        in, N_OF(in), o, N_OF(o));
  float want[24];
  for (int k = 0; k < 5; k++)
    for (int j = 0; j < 4; j++) want[4 * k + j] = (float)(int)in[j];
  for (int j = 0; j < 4; j++) {
    int32_t v = (int32_t)in[j];
    want[20 + j] = (float)(uint32_t)((uint32_t)v * (uint32_t)v);
  }
  expect_all(o, want, N_OF(o));
}

/* float to int truncates toward zero; float to half rounds to nearest even;
 * half to float and back is exact. */
Test(vectors, float_to_int_and_half_conversions_are_elementwise) {
  const float in[4] = {1.75f, -2.75f, 1.00048828125f /* 1 + 2^-11, a tie */,
                       1.00146484375f /* 1 + 3 * 2^-11, a tie */};
  float o[12];
  run_k(HEAD KERNEL
        "  float4 f(in[0], in[1], in[2], in[3]);\n"
        "  int4 i = int4(f);\n"
        "  half4 h = half4(f);\n"
        "  short4 s = static_cast<short4>(f);\n"
        "  for (int j = 0; j < 4; j++) { o[j] = i[j]; o[4 + j] = float(h[j]); o[8 + j] = s[j]; }\n"
        "}\n",
        in, N_OF(in), o, N_OF(o));
  const float want[12] = {1, -2, 1, 1, 1.75f, -2.75f, 1.0f, 1.001953125f, 1, -2, 1, 1};
  expect_all(o, want, N_OF(o));
}

Test(vectors, constructors_from_parts_and_broadcasts) {
  const float in[4] = {1, 2, 3, 4};
  float o[20];
  run_k(HEAD KERNEL
        "  float4 a(in[0], in[1], in[2], in[3]);\n"
        "  float4 b = float4(a.zw, in[0], 7);\n"
        "  float4 c = float4(a.xy, a.wz);\n"
        "  float3 d = float3(1);\n"
        "  int3 e = int3(in[3] + 0.5f);\n"
        "  half2 h2 = half2(a.yx);\n"
        "  float4 f = float4(h2, int2(5, 6));\n"
        "  for (int j = 0; j < 4; j++) { o[j] = b[j]; o[4 + j] = c[j]; o[8 + j] = f[j]; }\n"
        "  for (int j = 0; j < 3; j++) { o[12 + j] = d[j]; o[15 + j] = e[j]; }\n"
        "  o[18] = sizeof(b); o[19] = sizeof(d);\n"
        "}\n",
        in, N_OF(in), o, N_OF(o));
  const float want[20] = {3, 4, 1, 7, 1, 2, 4, 3, 2, 1, 5, 6, 1, 1, 1, 4, 4, 4, 16, 16};
  expect_all(o, want, N_OF(o));
}

/* MSL: a comparison of vectors is a boolN; as a number true is 1 (clang's
 * own vectors give an all-ones mask, -1). */
Test(vectors, comparisons_give_bool_vectors) {
  const float in[8] = {1, 5, 3, 8, 2, 4, 3, 9};
  float o[23];
  run_k(HEAD KERNEL
        "  float4 a(in[0], in[1], in[2], in[3]), b(in[4], in[5], in[6], in[7]);\n"
        "  bool4 m = a < b;\n"
        "  auto n = a >= b;\n"
        "  static_assert(is_same<decltype(n), bool4>::value, \"a comparison is a bool4\");\n"
        "  float4 fm = float4(m);\n"
        "  int4 im = int4(a == b);\n"
        "  float4 s = select(a, b, m);\n"
        "  for (int j = 0; j < 4; j++) { o[j] = fm[j]; o[4 + j] = im[j]; o[8 + j] = s[j]; }\n"
        "  for (int j = 0; j < 4; j++) o[12 + j] = n[j];\n"
        "  o[16] = all(m); o[17] = any(m); o[18] = all(a <= a); o[19] = any(a != a);\n"
        "  o[20] = sizeof(bool4); o[21] = (a < b).x + (a < b).y; o[22] = int(m.w) * 10;\n"
        "}\n",
        in, N_OF(in), o, N_OF(o));
  float want[23];
  for (int j = 0; j < 4; j++) {
    float a = in[j], b = in[4 + j];
    want[j] = a < b ? 1.0f : 0.0f;
    want[4 + j] = a == b ? 1.0f : 0.0f;
    want[8 + j] = a < b ? b : a;
    want[12 + j] = a >= b ? 1.0f : 0.0f;
  }
  want[16] = want[0] && want[1] && want[2] && want[3];
  want[17] = want[0] || want[1] || want[2] || want[3];
  want[18] = 1, want[19] = 0, want[20] = 4;
  want[21] = want[0] + want[1];
  want[22] = want[3] * 10;
  expect_all(o, want, N_OF(o));
}

/* packed_float3 is 12 bytes aligned to 4, read at a stride of 12 from a
 * buffer; float4(packed_float4) and packed from unpacked convert. */
Test(vectors, packed_vectors_as_msl_defines_them) {
  const float in[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  float o[12];
  run_k(HEAD KERNEL "  device const packed_float3 *p = (device const packed_float3 *)in;\n"
                    "  float3 v = float3(p[1]) * 2.0f;\n"
                    "  packed_float4 q = packed_float4(in[0], in[1], in[2], in[3]);\n"
                    "  float4 w = float4(q) + 1.0f;\n"
                    "  int4 iw = int4(q);\n"
                    "  packed_float3 back = v;\n"
                    "  o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = w.w; o[4] = iw.z;\n"
                    "  o[5] = sizeof(packed_float3); o[6] = alignof(packed_float3);\n"
                    "  o[7] = sizeof(packed_half3); o[8] = alignof(packed_half3);\n"
                    "  o[9] = back[2]; o[10] = sizeof(p[0]); o[11] = p[2].x;\n"
                    "}\n",
        in, N_OF(in), o, N_OF(o));
  const float want[12] = {8, 10, 12, 5, 3, 12, 4, 6, 2, 12, 12, 7};
  expect_all(o, want, N_OF(o));
}

Test(vectors, vec_of_t_and_n_is_deduced_in_user_templates) {
  const float in[4] = {1, 2, 3, 4};
  float o[6];
  run_k(HEAD "template <class T, int N> T total(vec<T, N> v) {\n"
             "  T s = 0;\n"
             "  for (int i = 0; i < N; i++) s += v[i];\n"
             "  return s;\n"
             "}\n"
             "template <class T, int N> int count(metal::vec<T, N>) { return N; }\n" KERNEL
             "  float4 a(in[0], in[1], in[2], in[3]);\n"
             "  metal::vec<float, 4> b = a * 2.0f;\n"
             "  static_assert(is_same<metal::vec<float, 4>, float4>::value, \"one type\");\n"
             "  static_assert(is_same<vec<half, 3>, half3>::value, \"one type\");\n"
             "  o[0] = total(a); o[1] = total(b); o[2] = total(a * a); o[3] = count(a.xyz);\n"
             "  o[4] = total(int3(1, 2, 3)); o[5] = count(half2(0));\n"
             "}\n",
        in, N_OF(in), o, N_OF(o));
  const float want[6] = {10, 20, 30, 3, 6, 2};
  expect_all(o, want, N_OF(o));
}

/* MSL's usual conversions in conditionals: half and float give float (1 +
 * 2^-20 is no half), bfloat and float give float, half and an integer half;
 * vector operands of one type keep it, swizzles included. */
Test(vectors, conditionals_of_half_bfloat_and_vectors) {
  const float in[4] = {1.00000095367431640625f, 0.5f, 2.0f, 3.0f};
  float o[10];
  run_k(HEAD KERNEL
        "  bool c = in[1] > 1.0f;\n"
        "  half h = half(in[1]);\n"
        "  bfloat bf = bfloat(in[2]);\n"
        "  float f = in[0];\n"
        "  auto r0 = c ? h : f;\n"
        "  auto r1 = !c ? bf : f;\n"
        "  auto r2 = c ? f : bf;\n"
        "  auto r3 = c ? h : 3;\n"
        "  static_assert(is_same<decltype(r0), float>::value, \"half and float: float\");\n"
        "  static_assert(is_same<decltype(r1), float>::value, \"bfloat and float: float\");\n"
        "  static_assert(is_same<decltype(r3), half>::value, \"half and int: half\");\n"
        "  float4 a(in[0], in[1], in[2], in[3]);\n"
        "  float4 v = c ? a : a.wzyx;\n"
        "  float2 w = !c ? a.xy : a.zw;\n"
        "  o[0] = r0; o[1] = r1; o[2] = r2; o[3] = r3;\n"
        "  o[4] = v.x; o[5] = v.y; o[6] = v.z; o[7] = v.w; o[8] = w.x; o[9] = w.y;\n"
        "}\n",
        in, N_OF(in), o, N_OF(o));
  const float want[10] = {in[0], 2.0f, 2.0f, 3.0f, 3.0f, 2.0f, 0.5f, in[0], in[0], 0.5f};
  expect_all(o, want, N_OF(o));
}

/* MSL has no implicit conversion between vector types of different element
 * types: refused, naming the user's line and column. */
Test(vectors, an_implicit_conversion_between_vector_types_is_an_error) {
  static const char *const bodies[] = {
      "  int4 i = int4(1);\n  float4 f = i;\n  o[0] = f.x;\n",
      "  float4 f = float4(1);\n  half4 h = f;\n  o[0] = h.x;\n",
      "  float2 f = float2(1);\n  f = int2(2);\n  o[0] = f.x;\n",
  };
  for (size_t i = 0; i < N_OF(bodies); i++) {
    char src[1024];
    snprintf(src, sizeof src, "%s%s%s}\n", HEAD, KERNEL, bodies[i]);
    id error = 0;
    id lib = sm_compile(src, &error);
    cr_expect_null(lib, "%zu: compiled", i);
    if (lib) {
      sm_release(lib);
      continue;
    }
    const char *msg = sm_error_text(error);
    cr_expect(strstr(msg, "program_source:5:") != NULL, "%zu: %s", i, msg);
  }
}

/* A swizzle is a value of its vector type: vec<T, N> and T deduce from it
 * (two different swizzles give one T), and it assigns (only its components,
 * compound assignments, increments and a scalar included). */
Test(vectors, swizzles_are_vectors_deduced_and_assigned) {
  const float in[4] = {1, 2, 3, 4};
  float o[20];
  run_k(HEAD "template <class T, int N> T total(vec<T, N> v) {\n"
             "  T s = 0;\n"
             "  for (int i = 0; i < N; i++) s += v[i];\n"
             "  return s;\n"
             "}\n"
             "template <class T> T pick(bool c, T a, T b) { return c ? a : b; }\n" KERNEL
             "  float4 a(in[0], in[1], in[2], in[3]);\n"
             "  o[0] = total(a.xy); o[1] = total(a.wzy); o[2] = total(a.bgra.rg);\n"
             "  float2 p = pick(in[0] > 0, a.zw, a.yx);\n"
             "  o[3] = p.x; o[4] = p.y;\n"
             "  static_assert(is_same<decltype(a.xy), float2>::value, \"a swizzle is a float2\");\n"
             "  float4 b = a;\n"
             "  b.xy += float2(10, 20);\n"
             "  b.zw *= 2.0f;\n"
             "  b.ar = b.ra;\n"
             "  o[5] = b.x; o[6] = b.y; o[7] = b.z; o[8] = b.w;\n"
             "  float3 c = float3(in[0], in[1], in[2]);\n"
             "  c.yz = 7;\n"
             "  o[9] = c.x; o[10] = c.y; o[11] = c.z;\n"
             "  int2 d = int2(5, 6);\n"
             "  d.yx = d;\n"
             "  o[12] = d.x; o[13] = d.y;\n"
             "  o[14] = sizeof(float4); o[15] = sizeof(int2);\n"
             "  float4 e = a;\n"
             "  e.zw++;\n"
             "  float4 f = e++;\n"
             "  --f.xy;\n"
             "  o[16] = e.x; o[17] = e.w; o[18] = f.x; o[19] = f.z;\n"
             "}\n",
        in, N_OF(in), o, N_OF(o));
  float b[4] = {in[0] + 10, in[1] + 20, in[2] * 2, in[3] * 2};
  float t = b[0];
  b[0] = b[3], b[3] = t; /* b.ar = b.ra */
  const float want[20] = {in[0] + in[1],
                          in[3] + in[2] + in[1],
                          in[2] + in[1],
                          in[2],
                          in[3],
                          b[0],
                          b[1],
                          b[2],
                          b[3],
                          in[0],
                          7,
                          7,
                          6,
                          5,
                          16,
                          8,
                          in[0] + 1,
                          in[3] + 2,
                          in[0] - 1,
                          in[2] + 1};
  expect_all(o, want, N_OF(o));
}

/* Assigning to a swizzle that names a component twice is an error, as in
 * MSL; so is a store into a component of a swizzle (a value here): it must
 * not write a temporary silently. */
Test(vectors, assigning_to_a_repeated_swizzle_or_into_a_swizzle_is_an_error) {
  static const char *const lines[] = {"  a.xx = float2(1, 2);\n", "  a.xy[0] = 1;\n",
                                      "  a.zw.x = 1;\n", "  a.xy.y += 1;\n"};
  for (size_t i = 0; i < N_OF(lines); i++) {
    char src[1024];
    snprintf(src, sizeof src, "%s%s  float4 a = float4(in[0]);\n%s  o[0] = a.x;\n}\n", HEAD, KERNEL,
             lines[i]);
    id error = 0;
    id lib = sm_compile(src, &error);
    cr_expect_null(lib, "%zu: compiled", i);
    if (lib)
      sm_release(lib);
    else
      cr_expect(strstr(sm_error_text(error), "program_source:5:") != NULL, "%zu: %s", i,
                sm_error_text(error));
  }
}

/* Swizzles read and assigned where the vector's type is a template's. */
Test(vectors, swizzles_in_templates) {
  const float in[4] = {1, 2, 3, 4};
  float o[10];
  run_k(
      HEAD
      "template <class V> auto lo(V v) { return v.xy; }\n"
      "template <class V, class W> void set_hi(thread V &v, W w) { v.zw = w; v.zw += w; v.x++; }\n"
      "template <class T> struct acc {\n"
      "  vec<T, 4> s;\n"
      "  void add(vec<T, 2> p) { s.xy += p; s.wz = s.xy; }\n"
      "};\n" KERNEL "  float4 a(in[0], in[1], in[2], in[3]);\n"
      "  float2 l = lo(a);\n"
      "  set_hi(a, float2(10, 20));\n"
      "  acc<half> h;\n"
      "  h.s = half4(0);\n"
      "  h.add(half2(in[0], in[1]));\n"
      "  o[0] = l.x; o[1] = l.y;\n"
      "  for (int j = 0; j < 4; j++) { o[2 + j] = a[j]; o[6 + j] = h.s[j]; }\n"
      "}\n",
      in, N_OF(in), o, N_OF(o));
  const float want[10] = {in[0], in[1], in[0] + 1, in[1], 20, 40, in[0], in[1], in[1], in[0]};
  expect_all(o, want, N_OF(o));
}

/* With a free operator+= of a user's type in scope, clang rebuilds `v.zw += w`
 * in a template (v's type a parameter) as a call on the swizzle's value: that
 * is a compile error, never an update of a temporary. Outside a template, and
 * in one where the vector's type is not a parameter, the same source updates
 * the vector. */
Test(vectors, a_swizzle_compound_assignment_never_updates_a_temporary) {
  const float in[4] = {1, 2, 3, 4};
  float o[6];
#define USER_OP                                                                                    \
  "struct cplx { float re, im; };\n"                                                               \
  "inline thread cplx &operator+=(thread cplx &a, cplx b) { a.re += b.re; return a; }\n"
  run_k(HEAD USER_OP
        "template <class T> float f(T t, float4 a) { a.zw += float2(10, 20); a.zw *= t; return "
        "a.w; }\n"
        "template <int N> float g(float4 a) { a.zw += float2(N, N); return a.w; }\n" KERNEL
        "  float4 a(in[0], in[1], in[2], in[3]);\n"
        "  a.zw += float2(10, 20);\n"
        "  a.xy++;\n"
        "  for (int j = 0; j < 4; j++) o[j] = a[j];\n"
        "  float4 b(in[0], in[1], in[2], in[3]);\n"
        "  o[4] = f(2.0f, b); o[5] = g<5>(b);\n"
        "}\n",
        in, N_OF(in), o, N_OF(o));
  const float want[6] = {in[0] + 1, in[1] + 1, in[2] + 10, in[3] + 20, (in[3] + 20) * 2, in[3] + 5};
  expect_all(o, want, N_OF(o));
  id error = 0;
  id lib =
      sm_compile(HEAD USER_OP "template <class V> void bump(thread V &v) { v.zw += 1.0f; }\n" KERNEL
                              "  float4 a(in[0]);\n"
                              "  bump(a);\n"
                              "  o[0] = a.z;\n"
                              "}\n",
                 &error);
#undef USER_OP
  cr_expect_null(lib, "a compound assignment to a swizzle in a template compiled");
  if (lib)
    sm_release(lib);
  else
    cr_expect(strstr(sm_error_text(error), "program_source:5:") != NULL, "%s",
              sm_error_text(error));
}

/* MSL refuses operands of two vector types (an implicit conversion) and a
 * vector built from too few or too many components; so does softmetal, at the
 * user's line, rather than convert, pad with zeros or write past the end. */
Test(vectors, mismatched_vector_operands_and_component_counts_are_errors) {
  static const char *const lines[] = {
      "  float4 r = a + i;\n",        "  bool4 r = a < i;\n",
      "  float4 r = a * h;\n",        "  float4 r = a + b;\n",
      "  float4 r = min(a, i);\n",    "  float4 r = float4(b);\n",
      "  float4 r = float4(b, 1);\n", "  float4 r = float4(a.xyz, b);\n",
      "  packed_float4 r = b;\n",     "  float3 r = float3(i);\n",
  };
  for (size_t n = 0; n < N_OF(lines); n++) {
    char src[1024];
    snprintf(
        src, sizeof src,
        "%s%s  float4 a = float4(in[0]); int4 i = int4(1); half4 h = half4(a); float2 b = a.xy;\n"
        "%s  o[0] = r[0];\n}\n",
        HEAD, KERNEL, lines[n]);
    id error = 0;
    id lib = sm_compile(src, &error);
    cr_expect_null(lib, "%s compiled", lines[n]);
    if (lib)
      sm_release(lib);
    else
      cr_expect(strstr(sm_error_text(error), "program_source:5:") != NULL, "%s",
                sm_error_text(error));
  }
}

/* Braces initialise as clang's vectors do under Apple's compiler: components
 * in order, the rest zero (`float4 v = {1}` is 1, 0, 0, 0); only one scalar
 * outside braces broadcasts (`float4(1)`, `float4 v = 1`). Members, arrays,
 * return statements, constant expressions, packed, half, bfloat and bool
 * vectors alike; braces may hold vectors (`{a.xy, b.zw}`). */
struct S4 {
  float v[4];
};
Test(vectors, braces_initialise_in_order_and_zero_fill) {
  const float in[4] = {1, 2, 3, 4};
  float o[64];
  for (size_t i = 0; i < N_OF(o); i++) o[i] = -100;
  run_k(HEAD
        "struct S { float4 a; };\n"
        "struct P { float2 p; float q; };\n"
        "constexpr float4 K = {7};\n"
        "constexpr int3 KI{5, 6};\n"
        "static_assert(K[0] == 7 && K[1] == 0 && K[3] == 0 && KI[1] == 6 && KI[2] == 0, \"\");\n"
        "float4 one(float x) { return {x}; }\n"
        "float4 all4(float x) { return {x, 2, 3, 4}; }\n"
        "template <class V> V braced(float x) { V v = {x}; return v; }\n" KERNEL
        "  float4 a = {in[0]};\n"
        "  float4 b{in[0], in[1]};\n"
        "  float4 c = float4(in[2]);\n"
        "  float4 d = in[3];\n"
        "  float4 e = {b.xy, a.yx};\n"
        "  S s = {{in[1]}};\n"
        "  float4 r = one(in[2]);\n"
        "  float4 r4 = all4(in[0]);\n"
        "  float4 t = braced<float4>(in[3]);\n"
        "  for (int j = 0; j < 4; j++) {\n"
        "    o[j] = a[j]; o[4 + j] = b[j]; o[8 + j] = c[j]; o[12 + j] = d[j];\n"
        "    o[16 + j] = e[j]; o[20 + j] = s.a[j]; o[24 + j] = r[j]; o[28 + j] = r4[j];\n"
        "    o[32 + j] = t[j];\n"
        "  }\n"
        "  packed_float3 p = {in[3]};\n"
        "  half4 h = {half(in[1]), 1};\n"
        "  bfloat3 bf = {bfloat(in[2])};\n"
        "  bool4 bb = {in[0] > 0};\n"
        "  uint2 u = {7u};\n"
        "  float3 arr[2] = {{in[0]}, {in[1], in[2]}};\n"
        "  P pp = {{in[3]}, in[0]};\n"
        "  float4 z = {};\n"
        "  for (int j = 0; j < 3; j++) { o[36 + j] = p[j]; o[39 + j] = bf[j]; }\n"
        "  for (int j = 0; j < 4; j++) { o[42 + j] = h[j]; o[46 + j] = bb[j]; o[50 + j] = z[j]; }\n"
        "  o[54] = u.x; o[55] = u.y;\n"
        "  for (int j = 0; j < 3; j++) { o[56 + j] = arr[0][j]; o[59 + j] = arr[1][j]; }\n"
        "  o[62] = pp.p.y; o[63] = pp.q + K[0] + KI[0];\n"
        "}\n",
        in, N_OF(in), o, N_OF(o));
  /* The reference: C's braces zero-fill as MSL's do; broadcasts written out. */
  struct S4 want4[9] = {
      {{in[0]}},
      {{in[0], in[1]}},
      {{in[2], in[2], in[2], in[2]}},
      {{in[3], in[3], in[3], in[3]}},
      {{in[0], in[1], 0, in[0]}},
      {{in[1]}},
      {{in[2]}},
      {{in[0], 2, 3, 4}},
      {{in[3]}},
  };
  float want[64] = {0};
  memcpy(want, want4, sizeof want4);
  const float rest[28] = {in[3], 0, 0, in[2], 0, 0, in[1], 1, 0, 0,     1,     0, 0, 0,
                          0,     0, 0, 0,     7, 0, in[0], 0, 0, in[1], in[2], 0, 0, in[0] + 7 + 5};
  memcpy(want + 36, rest, sizeof rest);
  expect_all(o, want, N_OF(o));
}

/* What MSL refuses in vector initialisation, refused at the user's line: a
 * parenthesised list of fewer components than the vector has, a narrowing
 * conversion in braces (a bfloat converts to int and half only explicitly:
 * an error too, never a broadcast), more components than the vector has,
 * and braces holding a vector and too few components. */
Test(vectors, vector_initialisers_msl_refuses_are_errors) {
  static const char *const lines[] = {
      "  float4 r = float4(in[0], in[1]);\n",
      "  float3 r = float3(0, 0);\n",
      "  float4 r = {n};\n",
      "  float4 r = {in[0], n};\n",
      "  half4 r = {in[0]};\n",
      "  bool4 r = {2};\n",
      "  float4 r = {1, 2, 3, 4, 5};\n",
      "  packed_float3 r = {1, 2, 3, 4};\n",
      "  float2 r{1, 2, 3};\n",
      "  float4 r = {in[0], b};\n",
      "  float4 r = float4(b, 1);\n",
      "  int4 r = {bf};\n",
      "  packed_half3 r = {bf};\n",
  };
  for (size_t k = 0; k < N_OF(lines); k++) {
    char src[1024];
    snprintf(src, sizeof src,
             "%s%s  int n = int(in[1]); float2 b = float2(in[0]); bfloat bf = bfloat(in[2]);\n"
             "%s  o[0] = r[0];\n}\n",
             HEAD, KERNEL, lines[k]);
    id error = 0;
    id lib = sm_compile(src, &error);
    cr_expect_null(lib, "%s compiled", lines[k]);
    if (lib)
      sm_release(lib);
    else
      cr_expect(strstr(sm_error_text(error), "program_source:5:") != NULL, "%s",
                sm_error_text(error));
  }
}

/* Matrices from braces: columns in braces or vectors, in order, the rest
 * zero; scalars in braces fill element by element, column-major. */
Test(vectors, matrices_initialise_from_braced_columns) {
  const float in[4] = {1, 2, 3, 4};
  float o[32];
  for (size_t i = 0; i < N_OF(o); i++) o[i] = -100;
  run_k(HEAD KERNEL
        "  float2x2 a = {{in[0], 2}, {3, in[3]}};\n"
        "  float3x3 b = {{1, 2, 3}, {4, 5, 6}, {7, 8, in[1]}};\n"
        "  float2x2 c = {1, 2, 3, in[2]};\n"
        "  float2 x = float2(in[3], in[2]);\n"
        "  float2x2 d = {x, x.yx};\n"
        "  float3x3 e = {{in[0], 1, 1}};\n"
        "  for (int j = 0; j < 4; j++) { o[j] = a[j / 2][j % 2]; o[4 + j] = c[j / 2][j % 2];\n"
        "                                o[8 + j] = d[j / 2][j % 2]; }\n"
        "  for (int j = 0; j < 9; j++) { o[12 + j] = b[j / 3][j % 3]; o[21 + j] = e[j / 3][j % 3]; "
        "}\n"
        "}\n",
        in, 4, o, N_OF(o));
  const float want[30] = {1, 2, 3, 4, 1, 2, 3, 3, 4, 3, 3, 4, 1, 2, 3,
                          4, 5, 6, 7, 8, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 30; i++) cr_expect_eq(o[i], want[i], "o[%d] = %g, want %g", i, o[i], want[i]);
}

/* A scalar operand converts to the vector's element type, except a
 * floating scalar to integer elements (Metal refuses `int4 + 1.5f`, as
 * clang does for its own vectors): refused at the user's line. An integer
 * scalar with float elements, and float with half elements, convert. */
Test(vectors, floating_scalars_with_integer_vectors_are_errors) {
  static const char *const refused[] = {
      "  int4 r = int4(n) + 1.5f;\n", "  int4 r = int4(n) * in[0];\n",
      "  uint2 r = uint2(n) - half(in[0]);\n", "  int4 r = 2.0f / int4(n);\n",
      "  bool4 r = int4(n) < in[0];\n"};
  static const char *const accepted[] = {"  float4 r = float4(in[0]) * n;\n",
                                         "  half4 r = half4(in[0]) * in[1];\n",
                                         "  int4 r = int4(n) << 2u;\n"};
  for (size_t k = 0; k < N_OF(refused) + N_OF(accepted); k++) {
    const bool ok = k >= N_OF(refused);
    const char *line = ok ? accepted[k - N_OF(refused)] : refused[k];
    char src[1024];
    snprintf(src, sizeof src, "%s%s  int n = int(in[1]);\n%s  o[0] = float(r[0]);\n}\n", HEAD,
             KERNEL, line);
    id error = 0;
    id lib = sm_compile(src, &error);
    if (ok) {
      cr_expect_not_null(lib, "%s: %s", line, sm_error_text(error));
    } else {
      cr_expect_null(lib, "%s compiled", line);
      if (!lib)
        cr_expect(strstr(sm_error_text(error), "program_source:5:") != NULL, "%s",
                  sm_error_text(error));
    }
    if (lib) sm_release(lib);
  }
}

/* More components in braces than the vector has, not all constants (so not
 * seen at compile time): the dispatch fails, never a silent drop. */
Test(vectors, too_many_components_at_run_time_fail_the_dispatch) {
  id error = 0;
  id lib =
      sm_compile(HEAD KERNEL "  float2 r = {in[0], in[1], in[0]};\n  o[0] = r[0];\n}\n", &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id bufs[2] = {sm_buffer(NULL, 16), sm_buffer(NULL, 16)};
  id cb = SEND0(id, sm_queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  id p = sm_pipeline(lib, "k");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (int i = 0; i < 2; i++)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
         0ul, (NSUInteger)i);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", SM_SIZE(1, 1, 1), SM_SIZE(1, 1, 1));
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_expect_eq(sm_u(cb, "status"), 5 /* Error */, "a dropped component passed silently");
  sm_release(p);
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
  sm_release(lib);
}

/* A float4 read and written through a pointer aligned to its element (4
 * bytes) but not to the vector (16): rows of 5 floats in one buffer, read as
 * float4 from a byte pointer, as kernels that keep tensors with any row
 * pitch do. Apple GPUs read and write such vectors; on x86-64 an aligned
 * vector move faulted here (reported as a read at address 0). */
Test(vectors, a_vector_at_an_element_aligned_address_reads_and_writes) {
  static const char src[] =
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "kernel void rows(device const char *in [[buffer(0)]], device char *out [[buffer(1)]],\n"
      "                 uint r [[thread_position_in_grid]]) {\n"
      "  device const float4 *x = (device const float4 *)(in + r * 20);\n"
      "  device float4 *y = (device float4 *)(out + r * 20);\n"
      "  float4 v = x[0];\n"
      "  y[0] = v * 2.0f + float4(dot(v, v));\n"
      "}\n";
  enum { ROWS = 8, PITCH = 5 };
  float in[ROWS * PITCH];
  for (int i = 0; i < ROWS * PITCH; i++) in[i] = (float)(i % 11) - 3.0f;
  id error = 0;
  id lib = sm_compile(src, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id bufs[2] = {sm_buffer(in, sizeof in), sm_buffer(NULL, sizeof in)};
  sm_dispatch(lib, "rows", bufs, 2, SM_SIZE(ROWS, 1, 1), SM_SIZE(ROWS, 1, 1), false, 0);
  const float *got = sm_contents(bufs[1]);
  for (int r = 0; r < ROWS; r++) {
    const float *v = in + r * PITCH;
    float d = v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
    for (int j = 0; j < 4; j++)
      cr_expect_float_eq(got[r * PITCH + j], v[j] * 2.0f + d, 1e-4f, "row %d element %d", r, j);
  }
  sm_release(bufs[0]);
  sm_release(bufs[1]);
  sm_release(lib);
}

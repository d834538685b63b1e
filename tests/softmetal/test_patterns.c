/* SPDX-License-Identifier: MIT */
/* Kernels of our own, written in the styles of the MSL that ML frameworks ship
 * (the constructs tests/softmetal/corpus exercised, which stays outside the
 * repository): kernel families instantiated by macros under [[host_name]],
 * function constants that size and switch behaviour, a tiled GEMM on
 * simdgroup matrices, quantized block structs, a bitonic sort network,
 * metal::array, atomics, half/float conditionals and simdgroup reductions.
 * Each runs against a reference computed here. Inputs are chosen so that the
 * exact answer is representable (small integers, powers of two), so results
 * are compared for equality wherever the reference can be exact. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_run.h"

static void setup(void) { sm_run_open(); }
static void teardown(void) { sm_run_close(); }
TestSuite(patterns, .init = setup, .fini = teardown, .timeout = 300);

enum { MATH_SAFE = 0 };
enum { MTL_DATA_TYPE_INT = 29, MTL_DATA_TYPE_BOOL = 53 };

static id compile_safe(const char *src) {
  id error = 0;
  id lib = sm_compile_mode(src, MATH_SAFE, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  return lib;
}

static uint16_t half_bits(float f) { /* exact normal halves and zero */
  uint32_t x;
  memcpy(&x, &f, 4);
  if (f == 0.0f) return (uint16_t)(x >> 16);
  return (uint16_t)(((x >> 16) & 0x8000u) | ((((x >> 23) & 0xFFu) - 112u) << 10) |
                    ((x & 0x7FFFFFu) >> 13));
}
static float half_value(uint16_t h) { /* normal halves and zero */
  uint32_t x = ((uint32_t)(h & 0x8000u) << 16) | ((((h >> 10) & 0x1Fu) + 112u) << 23) |
               ((uint32_t)(h & 0x3FFu) << 13);
  float f;
  memcpy(&f, &x, 4);
  return (h & 0x7FFFu) ? f : ((h & 0x8000u) ? -0.0f : 0.0f);
}

/* ---- a kernel family instantiated by macros: templates over the element
 * types and a functor, explicit instantiations named by [[host_name]] from
 * adjacent strings, contiguous and strided variants with a METAL_FUNC helper
 * and array-typed shape parameters read through constant pointers. */
static const char *const family_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "struct Axpby {\n"
    "  template <typename T, typename U>\n"
    "  METAL_FUNC U operator()(T x, T y, float a, float b) const {\n"
    "    return static_cast<U>(a * static_cast<float>(x) + b * static_cast<float>(y));\n"
    "  }\n"
    "};\n"
    "template <typename IdxT = int64_t>\n"
    "METAL_FUNC IdxT elem_to_loc(uint2 pos, constant const int *shape,\n"
    "                            constant const int64_t *strides) {\n"
    "  return IdxT(pos.x) * strides[1] + IdxT(pos.y) * strides[0];\n"
    "}\n"
    "template <typename T, typename U, typename Op>\n"
    "[[kernel]] void binary_vv(device const T *x [[buffer(0)]], device const T *y [[buffer(1)]],\n"
    "                          device U *out [[buffer(2)]], constant float2 &ab [[buffer(3)]],\n"
    "                          uint index [[thread_position_in_grid]]) {\n"
    "  out[index] = Op().template operator()<T, U>(x[index], y[index], ab.x, ab.y);\n"
    "}\n"
    "template <typename T, typename U, typename Op>\n"
    "[[kernel]] void binary_g(device const T *x [[buffer(0)]], device const T *y [[buffer(1)]],\n"
    "                         device U *out [[buffer(2)]], constant float2 &ab [[buffer(3)]],\n"
    "                         constant const int *shape [[buffer(4)]],\n"
    "                         constant const int64_t *strides [[buffer(5)]],\n"
    "                         uint2 pos [[thread_position_in_grid]],\n"
    "                         uint2 grid [[threads_per_grid]]) {\n"
    "  auto xi = elem_to_loc(pos, shape, strides);\n"
    "  out[pos.x + pos.y * grid.x] = Op().template operator()<T, U>(x[xi], y[pos.x + pos.y * "
    "grid.x], ab.x, ab.y);\n"
    "}\n"
    "#define instantiate_binary(name, tin, tout)                                      \\\n"
    "  template [[host_name(\"vv_\" #name)]] [[kernel]] decltype(binary_vv<tin, tout, Axpby>) \\\n"
    "      binary_vv<tin, tout, Axpby>;                                            \\\n"
    "  template [[host_name(\"g_\" #name)]] [[kernel]] decltype(binary_g<tin, tout, Axpby>)   \\\n"
    "      binary_g<tin, tout, Axpby>;\n"
    "#define instantiate_binary_all(tname, t) \\\n"
    "  instantiate_binary(tname, t, t)         \\\n"
    "  instantiate_binary(tname##_to_float32, t, float)\n"
    "instantiate_binary(float32, float, float)\n"
    "instantiate_binary_all(float16, half)\n"
    "instantiate_binary_all(int32, int)\n";

Test(patterns, kernel_family_from_macros_with_host_names) {
  id lib = compile_safe(family_src);
  id names = SEND0(id, lib, "functionNames");
  cr_assert_eq(sm_u(names, "count"), 10, "2 variants x 5 type pairs");
  enum { R = 5, C = 7, N = R * C };
  const float ab[2] = {2.0f, -0.5f};
  float xf[N], yf[N];
  for (int i = 0; i < N; i++) {
    xf[i] = (float)(i % 9) - 4.0f;
    yf[i] = (float)(i % 5) * 2.0f;
  }
  /* x read through strides: x is stored transposed (C rows of R) */
  float xt[N];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) xt[c * R + r] = xf[r * C + c];
  const int shape[2] = {R, C};
  const int64_t strides[2] = {1, R};

  { /* float32 -> float32, contiguous and strided */
    id b[6] = {sm_buffer(xf, sizeof xf),       sm_buffer(yf, sizeof yf),
               sm_buffer(NULL, sizeof xf),     sm_buffer(ab, sizeof ab),
               sm_buffer(shape, sizeof shape), sm_buffer(strides, sizeof strides)};
    sm_dispatch(lib, "vv_float32", b, 4, SM_SIZE(N, 1, 1), SM_SIZE(8, 1, 1), false, 0);
    const float *o = sm_contents(b[2]);
    for (int i = 0; i < N; i++)
      cr_expect_eq(o[i], 2.0f * xf[i] - 0.5f * yf[i], "vv_float32[%d] = %g", i, o[i]);
    id g[6] = {sm_buffer(xt, sizeof xt), b[1], sm_buffer(NULL, sizeof xf), b[3], b[4], b[5]};
    sm_dispatch(lib, "g_float32", g, 6, SM_SIZE(C, R, 1), SM_SIZE(4, 2, 1), false, 0);
    o = sm_contents(g[2]);
    for (int i = 0; i < N; i++)
      cr_expect_eq(o[i], 2.0f * xf[i] - 0.5f * yf[i], "g_float32[%d] = %g", i, o[i]);
    sm_release(g[0]);
    sm_release(g[2]);
    for (int i = 0; i < 6; i++) sm_release(b[i]);
  }
  { /* float16 -> float16 and float16 -> float32 */
    uint16_t xh[N], yh[N];
    for (int i = 0; i < N; i++) {
      xh[i] = half_bits(xf[i]);
      yh[i] = half_bits(yf[i]);
    }
    id b[4] = {sm_buffer(xh, sizeof xh), sm_buffer(yh, sizeof yh), sm_buffer(NULL, N * 2),
               sm_buffer(ab, sizeof ab)};
    sm_dispatch(lib, "vv_float16", b, 4, SM_SIZE(N, 1, 1), SM_SIZE(8, 1, 1), false, 0);
    const uint16_t *oh = sm_contents(b[2]);
    for (int i = 0; i < N; i++)
      cr_expect_eq(half_value(oh[i]), 2.0f * xf[i] - 0.5f * yf[i], "vv_float16[%d] = %g", i,
                   half_value(oh[i]));
    id f = sm_buffer(NULL, N * 4);
    id b2[4] = {b[0], b[1], f, b[3]};
    sm_dispatch(lib, "vv_float16_to_float32", b2, 4, SM_SIZE(N, 1, 1), SM_SIZE(8, 1, 1), false, 0);
    const float *o = sm_contents(f);
    for (int i = 0; i < N; i++)
      cr_expect_eq(o[i], 2.0f * xf[i] - 0.5f * yf[i], "vv_float16_to_float32[%d] = %g", i, o[i]);
    sm_release(f);
    for (int i = 0; i < 4; i++) sm_release(b[i]);
  }
  { /* int32 -> int32: the float result converted back */
    int32_t xi[N], yi[N];
    for (int i = 0; i < N; i++) {
      xi[i] = (int32_t)xf[i];
      yi[i] = (int32_t)yf[i];
    }
    id b[4] = {sm_buffer(xi, sizeof xi), sm_buffer(yi, sizeof yi), sm_buffer(NULL, N * 4),
               sm_buffer(ab, sizeof ab)};
    sm_dispatch(lib, "vv_int32", b, 4, SM_SIZE(N, 1, 1), SM_SIZE(8, 1, 1), false, 0);
    const int32_t *o = sm_contents(b[2]);
    for (int i = 0; i < N; i++)
      cr_expect_eq(o[i], (int32_t)(2.0f * xf[i] - 0.5f * yf[i]), "vv_int32[%d] = %d", i, o[i]);
    for (int i = 0; i < 4; i++) sm_release(b[i]);
  }
  sm_release(lib);
}

/* ---- function constants that switch parameters and size loops: a bool
 * that removes a buffer, an int that sets an unroll width (with a default
 * where it is not given, through is_function_constant_defined), program-scope
 * constants derived from them. */
static const char *const rowdot_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "constant bool has_bias [[function_constant(10)]];\n"
    "constant bool do_relu [[function_constant(11)]];\n"
    "constant int unroll [[function_constant(12)]];\n"
    "constant bool unroll_given = is_function_constant_defined(unroll);\n"
    "constant int UNROLL = unroll_given ? unroll : 1;\n"
    "constant bool no_relu = !do_relu;\n"
    "kernel void rowdot(device const float *a [[buffer(0)]],\n"
    "                   device const float *x [[buffer(1)]],\n"
    "                   device float *y [[buffer(2)]],\n"
    "                   device const float *bias [[buffer(3), function_constant(has_bias)]],\n"
    "                   constant uint &cols [[buffer(4)]],\n"
    "                   uint row [[thread_position_in_grid]]) {\n"
    "  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n"
    "  uint c = 0;\n"
    "  for (; c + UNROLL <= cols; c += UNROLL)\n"
    "    for (int u = 0; u < UNROLL; u++) acc[u] += a[row * cols + c + u] * x[c + u];\n"
    "  float s = 0.0f;\n"
    "  for (int u = 0; u < UNROLL; u++) s += acc[u];\n"
    "  for (; c < cols; c++) s += a[row * cols + c] * x[c];\n"
    "  if (has_bias) s += bias[row];\n"
    "  y[row] = no_relu ? s : max(s, 0.0f);\n"
    "}\n";

/* The kernel's own order of operations, in float. */
static float rowdot_ref(const float *a, const float *x, int cols, int unroll, const float *bias,
                        bool relu) {
  float acc[4] = {0, 0, 0, 0}, s = 0;
  int c = 0;
  for (; c + unroll <= cols; c += unroll)
    for (int u = 0; u < unroll; u++) acc[u] += a[c + u] * x[c + u];
  for (int u = 0; u < unroll; u++) s += acc[u];
  for (; c < cols; c++) s += a[c] * x[c];
  if (bias) s += *bias;
  return relu ? fmaxf(s, 0.0f) : s;
}

static id rowdot_pipeline(id lib, bool has_bias, bool relu, int unroll) {
  id fresh = SEND0(id, sm_class_named("MTLFunctionConstantValues"), "alloc"); /* SEND0 */
  id cv = SEND0(id, fresh, "init"); /* evaluates its receiver twice */
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), cv,
       "setConstantValue:type:atIndex:", &has_bias, (NSUInteger)MTL_DATA_TYPE_BOOL, 10ul);
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), cv,
       "setConstantValue:type:atIndex:", &relu, (NSUInteger)MTL_DATA_TYPE_BOOL, 11ul);
  if (unroll > 0)
    SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), cv,
         "setConstantValue:type:atIndex:", &unroll, (NSUInteger)MTL_DATA_TYPE_INT, 12ul);
  id error = 0;
  id fn = SEND(id, (id, SEL, id, id, id *), lib,
               "newFunctionWithName:constantValues:error:", sm_str("rowdot"), cv, &error);
  sm_release(cv);
  cr_assert_not_null(fn, "%s", sm_error_text(error));
  id p = SEND(id, (id, SEL, id, id *), sm_dev, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  sm_release(fn);
  return p;
}

Test(patterns, function_constants_switch_buffers_and_size_loops) {
  id lib = compile_safe(rowdot_src);
  enum { ROWS = 6, COLS = 11 };
  float a[ROWS * COLS], x[COLS], bias[ROWS];
  for (int i = 0; i < ROWS * COLS; i++) a[i] = (float)((i * 7) % 13) * 0.25f - 1.5f;
  for (int i = 0; i < COLS; i++) x[i] = (float)(i % 4) - 1.0f;
  for (int i = 0; i < ROWS; i++) bias[i] = (float)i - 3.0f;
  const uint32_t cols = COLS;
  static const struct {
    bool bias, relu;
    int unroll;
  } cases[] = {{false, false, 0}, {true, false, 4}, {true, true, 3}, {false, true, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    id b[5] = {sm_buffer(a, sizeof a), sm_buffer(x, sizeof x), sm_buffer(NULL, ROWS * 4),
               cases[k].bias ? sm_buffer(bias, sizeof bias) : 0, sm_buffer(&cols, 4)};
    /* without has_bias, buffer 3 need not be bound */
    sm_dispatch_pipeline(rowdot_pipeline(lib, cases[k].bias, cases[k].relu, cases[k].unroll),
                         "rowdot", b, 5, SM_SIZE(ROWS, 1, 1), SM_SIZE(2, 1, 1), false, 0);
    const float *y = sm_contents(b[2]);
    const int unroll = cases[k].unroll > 0 ? cases[k].unroll : 1;
    for (int r = 0; r < ROWS; r++) {
      float want =
          rowdot_ref(a + r * COLS, x, COLS, unroll, cases[k].bias ? bias + r : NULL, cases[k].relu);
      cr_expect_eq(y[r], want, "case %zu row %d: %g, expected %g", k, r, y[r], want);
    }
    for (int i = 0; i < 5; i++)
      if (b[i]) sm_release(b[i]);
  }
  sm_release(lib);
}

/* ---- a tiled GEMM on simdgroup matrices: 32 x 32 output tiles, four
 * simdgroups of 16 x 16 each (2 x 2 8x8 accumulators), K in steps of 8
 * through threadgroup tiles padded with zeros at the edges, the result staged
 * in threadgroup memory and written back within bounds. Templated over the
 * input type; accumulates in float. */
static const char *const gemm_src =
    "#include <metal_stdlib>\n"
    "#include <metal_simdgroup_matrix>\n"
    "using namespace metal;\n"
    "struct GemmParams { int M, N, K; };\n"
    "template <typename T, int BM = 32, int BN = 32, int BK = 8>\n"
    "[[kernel]] void tiled_gemm(device const T *A [[buffer(0)]], device const T *B [[buffer(1)]],\n"
    "                           device float *C [[buffer(2)]],\n"
    "                           constant GemmParams &p [[buffer(3)]],\n"
    "                           uint2 tg [[threadgroup_position_in_grid]],\n"
    "                           uint tid [[thread_index_in_threadgroup]],\n"
    "                           uint sg [[simdgroup_index_in_threadgroup]]) {\n"
    "  threadgroup T As[BM * BK];\n"
    "  threadgroup T Bs[BK * BN];\n"
    "  threadgroup float Cs[BM * BN];\n"
    "  const int row0 = int(tg.y) * BM, col0 = int(tg.x) * BN;\n"
    "  const int sr = int(sg / 2) * 16, sc = int(sg % 2) * 16;\n"
    "  simdgroup_float8x8 acc[2][2];\n"
    "  for (int i = 0; i < 2; i++)\n"
    "    for (int j = 0; j < 2; j++) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);\n"
    "  for (int k0 = 0; k0 < p.K; k0 += BK) {\n"
    "    for (uint e = tid; e < BM * BK; e += 128) {\n"
    "      int r = int(e) / BK, k = int(e) % BK;\n"
    "      bool in = row0 + r < p.M && k0 + k < p.K;\n"
    "      As[e] = in ? A[(row0 + r) * p.K + k0 + k] : T(0);\n"
    "    }\n"
    "    for (uint e = tid; e < BK * BN; e += 128) {\n"
    "      int k = int(e) / BN, c = int(e) % BN;\n"
    "      bool in = k0 + k < p.K && col0 + c < p.N;\n"
    "      Bs[e] = in ? B[(k0 + k) * p.N + col0 + c] : T(0);\n"
    "    }\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    simdgroup_matrix<T, 8, 8> a[2], b[2];\n"
    "    for (int i = 0; i < 2; i++) simdgroup_load(a[i], As + (sr + 8 * i) * BK, BK);\n"
    "    for (int j = 0; j < 2; j++) simdgroup_load(b[j], Bs + sc + 8 * j, BN);\n"
    "    for (int i = 0; i < 2; i++)\n"
    "      for (int j = 0; j < 2; j++) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], "
    "acc[i][j]);\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  }\n"
    "  for (int i = 0; i < 2; i++)\n"
    "    for (int j = 0; j < 2; j++)\n"
    "      simdgroup_store(acc[i][j], Cs + (sr + 8 * i) * BN + sc + 8 * j, BN);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  for (uint e = tid; e < BM * BN; e += 128) {\n"
    "    int r = int(e) / BN, c = int(e) % BN;\n"
    "    if (row0 + r < p.M && col0 + c < p.N) C[(row0 + r) * p.N + col0 + c] = Cs[e];\n"
    "  }\n"
    "}\n"
    "template [[host_name(\"gemm_f32\")]] [[kernel]] decltype(tiled_gemm<float>) "
    "tiled_gemm<float>;\n"
    "template [[host_name(\"gemm_f16\")]] [[kernel]] decltype(tiled_gemm<half>) "
    "tiled_gemm<half>;\n";

static void check_tiled_gemm(id lib, const char *kernel, bool half_inputs, int M, int N, int K) {
  float *a = malloc((size_t)M * K * 4), *b = malloc((size_t)K * N * 4);
  uint16_t *ah = malloc((size_t)M * K * 2), *bh = malloc((size_t)K * N * 2);
  cr_assert(a && b && ah && bh);
  for (int i = 0; i < M * K; i++) { /* small integers: every sum is exact */
    a[i] = (float)((i * 5) % 9) - 4.0f;
    ah[i] = half_bits(a[i]);
  }
  for (int i = 0; i < K * N; i++) {
    b[i] = (float)((i * 3) % 7) - 3.0f;
    bh[i] = half_bits(b[i]);
  }
  const int params[3] = {M, N, K};
  size_t es = half_inputs ? 2 : 4;
  id bufs[4] = {half_inputs ? sm_buffer(ah, (size_t)M * K * es) : sm_buffer(a, (size_t)M * K * es),
                half_inputs ? sm_buffer(bh, (size_t)K * N * es) : sm_buffer(b, (size_t)K * N * es),
                sm_buffer(NULL, (size_t)M * N * 4), sm_buffer(params, sizeof params)};
  sm_dispatch(lib, kernel, bufs, 4,
              SM_SIZE((NSUInteger)(N + 31) / 32, (NSUInteger)(M + 31) / 32, 1), SM_SIZE(128, 1, 1),
              true, 0);
  const float *c = sm_contents(bufs[2]);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float want = 0;
      for (int k = 0; k < K; k++) want += a[i * K + k] * b[k * N + j];
      cr_expect_eq(c[i * N + j], want, "%s %dx%dx%d [%d][%d]: %g, expected %g", kernel, M, N, K, i,
                   j, c[i * N + j], want);
    }
  for (int i = 0; i < 4; i++) sm_release(bufs[i]);
  free(a);
  free(b);
  free(ah);
  free(bh);
}

Test(patterns, tiled_gemm_on_simdgroup_matrices) {
  id lib = compile_safe(gemm_src);
  check_tiled_gemm(lib, "gemm_f32", false, 64, 64, 32); /* whole tiles */
  check_tiled_gemm(lib, "gemm_f32", false, 45, 38, 19); /* partial tiles in M, N and K */
  check_tiled_gemm(lib, "gemm_f16", true, 40, 33, 24);
  sm_release(lib);
}

/* ---- quantized blocks: a struct of a half scale, a half minimum and 32
 * 4-bit codes packed in 16 bytes; rows of blocks dequantized by get_rows, and
 * a matrix-vector product with one simdgroup a row, lanes striding over the
 * blocks and simd_sum combining them. The scale's choice between the low and
 * high nibble mirrors the half/float conditional real kernels write. */
static const char *const quant_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "#define QK 32\n"
    "typedef struct {\n"
    "  half d;\n"
    "  half m;\n"
    "  uint8_t qs[QK / 2];\n"
    "} block_q4m;\n"
    "static_assert(sizeof(block_q4m) == 2 * sizeof(half) + QK / 2, \"block_q4m packing\");\n"
    "struct rows_args { int nblocks; uint64_t row_bytes; };\n"
    "template <typename block, typename T>\n"
    "void dequantize_block(device const block *xb, thread T *out) {\n"
    "  for (int i = 0; i < QK / 2; i++) {\n"
    "    out[i] = T(float(xb->qs[i] & 0x0F) * float(xb->d) + float(xb->m));\n"
    "    out[i + QK / 2] = T(float(xb->qs[i] >> 4) * float(xb->d) + float(xb->m));\n"
    "  }\n"
    "}\n"
    "kernel void get_rows_q4m(device const char *src [[buffer(0)]],\n"
    "                         device const int *ids [[buffer(1)]],\n"
    "                         device float *dst [[buffer(2)]],\n"
    "                         constant rows_args &args [[buffer(3)]],\n"
    "                         uint row [[threadgroup_position_in_grid]],\n"
    "                         uint b [[thread_position_in_threadgroup]]) {\n"
    "  device const block_q4m *x = (device const block_q4m *)(src + ids[row] * args.row_bytes);\n"
    "  float tmp[QK];\n"
    "  dequantize_block(x + b, tmp);\n"
    "  for (int i = 0; i < QK; i++) dst[(row * args.nblocks + b) * QK + i] = tmp[i];\n"
    "}\n"
    "kernel void mv_q4m(device const block_q4m *w [[buffer(0)]], device const float *x "
    "[[buffer(1)]],\n"
    "                   device float *y [[buffer(2)]], constant rows_args &args [[buffer(3)]],\n"
    "                   uint row [[threadgroup_position_in_grid]],\n"
    "                   uint lane [[thread_index_in_simdgroup]]) {\n"
    "  float sum = 0.0f;\n"
    "  for (int ib = int(lane); ib < args.nblocks; ib += 32) {\n"
    "    device const block_q4m *xb = w + row * args.nblocks + ib;\n"
    "    device const float *xv = x + ib * QK;\n"
    "    for (int il = 0; il < 2; il++) {\n"
    "      float d = il == 0 ? xb->d : xb->d / 16.f;\n"
    "      ushort mask = il == 0 ? 0x0F : 0xF0;\n"
    "      for (int i = 0; i < QK / 2; i++)\n"
    "        sum += (d * float(xb->qs[i] & mask) + float(xb->m)) * xv[il * QK / 2 + i];\n"
    "    }\n"
    "  }\n"
    "  sum = simd_sum(sum);\n"
    "  if (lane == 0) y[row] = sum;\n"
    "}\n";

enum { QK = 32 };
struct block_q4m {
  uint16_t d, m;
  uint8_t qs[QK / 2];
};
struct rows_args {
  int32_t nblocks, pad;
  uint64_t row_bytes;
};

Test(patterns, quantized_block_structs) {
  _Static_assert(sizeof(struct block_q4m) == 20, "block layout");
  enum { ROWS = 4, NB = 40 }; /* 40 blocks: lanes 0-7 take two each */
  struct block_q4m w[ROWS * NB];
  float deq[ROWS * NB * QK];
  for (int r = 0; r < ROWS; r++)
    for (int bi = 0; bi < NB; bi++) {
      struct block_q4m *bl = &w[r * NB + bi];
      float d = ldexpf(1.0f, (bi + r) % 3 - 1), m = -(float)((bi * 3 + r) % 5);
      bl->d = half_bits(d);
      bl->m = half_bits(m);
      for (int i = 0; i < QK / 2; i++) {
        int lo = (i * 7 + bi + r) % 16, hi = (i * 5 + 3 * bi) % 16;
        bl->qs[i] = (uint8_t)(lo | hi << 4);
        deq[(r * NB + bi) * QK + i] = (float)lo * d + m;
        deq[(r * NB + bi) * QK + i + QK / 2] = (float)hi * d + m;
      }
    }
  struct rows_args args = {NB, 0, NB * sizeof(struct block_q4m)};
  id lib = compile_safe(quant_src);
  { /* get_rows of rows 3, 0, 2 */
    const int32_t ids[3] = {3, 0, 2};
    id b[4] = {sm_buffer(w, sizeof w), sm_buffer(ids, sizeof ids), sm_buffer(NULL, 3 * NB * QK * 4),
               sm_buffer(&args, sizeof args)};
    sm_dispatch(lib, "get_rows_q4m", b, 4, SM_SIZE(3, 1, 1), SM_SIZE(NB, 1, 1), true, 0);
    const float *o = sm_contents(b[2]);
    for (int k = 0; k < 3; k++)
      for (int i = 0; i < NB * QK; i++)
        cr_expect_eq(o[k * NB * QK + i], deq[ids[k] * NB * QK + i], "row %d [%d]: %g, expected %g",
                     ids[k], i, o[k * NB * QK + i], deq[ids[k] * NB * QK + i]);
    for (int i = 0; i < 4; i++) sm_release(b[i]);
  }
  { /* y = W x: small integers and powers of two, so every order sums exactly */
    float x[NB * QK];
    for (int i = 0; i < NB * QK; i++) x[i] = (float)((i * 3) % 5) - 2.0f;
    id b[4] = {sm_buffer(w, sizeof w), sm_buffer(x, sizeof x), sm_buffer(NULL, ROWS * 4),
               sm_buffer(&args, sizeof args)};
    sm_dispatch(lib, "mv_q4m", b, 4, SM_SIZE(ROWS, 1, 1), SM_SIZE(32, 1, 1), true, 0);
    const float *y = sm_contents(b[2]);
    for (int r = 0; r < ROWS; r++) {
      double want = 0;
      for (int i = 0; i < NB * QK; i++) want += (double)deq[r * NB * QK + i] * x[i];
      cr_expect_eq(y[r], (float)want, "y[%d] = %g, expected %g", r, y[r], want);
    }
    for (int i = 0; i < 4; i++) sm_release(b[i]);
  }
  sm_release(lib);
}

/* ---- a bitonic sort network in threadgroup memory, one threadgroup a row,
 * values and indices (argsort), NaN last as frameworks order them; a
 * comparator functor and the padding value from numeric_limits. */
static const char *const sort_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "template <typename T>\n"
    "struct NanLast {\n"
    "  static constexpr constant T init = numeric_limits<T>::has_quiet_NaN\n"
    "                                         ? numeric_limits<T>::quiet_NaN()\n"
    "                                         : numeric_limits<T>::max();\n"
    "  METAL_FUNC bool operator()(T a, T b) const {\n"
    "    if (a != a || b != b) return a == a;  /* NaN last */\n"
    "    return a < b;\n"
    "  }\n"
    "};\n"
    "template <typename T, typename Cmp, int N>\n"
    "[[kernel]] void bitonic_argsort(device const T *in [[buffer(0)]],\n"
    "                                device T *out [[buffer(1)]],\n"
    "                                device uint *idx [[buffer(2)]],\n"
    "                                constant int &n [[buffer(3)]],\n"
    "                                uint row [[threadgroup_position_in_grid]],\n"
    "                                uint tid [[thread_position_in_threadgroup]]) {\n"
    "  threadgroup T v[N];\n"
    "  threadgroup uint ix[N];\n"
    "  for (uint i = tid; i < N; i += N / 2) {\n"
    "    v[i] = int(i) < n ? in[row * n + i] : Cmp::init;\n"
    "    ix[i] = i;\n"
    "  }\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  Cmp less;\n"
    "  for (uint k = 2; k <= N; k <<= 1)\n"
    "    for (uint j = k >> 1; j > 0; j >>= 1) {\n"
    "      uint i = 2 * tid - (tid & (j - 1));\n"
    "      uint p = i + j;\n"
    "      bool up = (i & k) == 0;\n"
    "      T a = v[i], b = v[p];\n"
    "      uint ia = ix[i], ib = ix[p];\n"
    "      bool swap = up ? (less(b, a) || (!less(a, b) && ib < ia))\n"
    "                     : (less(a, b) || (!less(b, a) && ia < ib));\n"
    "      if (swap) { v[i] = b; v[p] = a; ix[i] = ib; ix[p] = ia; }\n"
    "      threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    }\n"
    "  for (uint i = tid; int(i) < n; i += N / 2) {\n"
    "    out[row * n + i] = v[i];\n"
    "    idx[row * n + i] = ix[i];\n"
    "  }\n"
    "}\n"
    "#define instantiate_sort(tname, T, N) \\\n"
    "  template [[host_name(\"argsort_\" #tname \"_\" #N)]] [[kernel]] \\\n"
    "  decltype(bitonic_argsort<T, NanLast<T>, N>) bitonic_argsort<T, NanLast<T>, N>;\n"
    "instantiate_sort(float32, float, 256)\n"
    "instantiate_sort(int32, int, 64)\n";

static int nan_last_cmp(const void *pa, const void *pb) {
  float a = *(const float *)pa, b = *(const float *)pb;
  if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
  return (a > b) - (a < b);
}

Test(patterns, bitonic_sort_network_with_nan_last) {
  id lib = compile_safe(sort_src);
  enum { ROWS = 3, NF = 200 }; /* 200 of 256: padded with NaN */
  float in[ROWS * NF];
  for (int i = 0; i < ROWS * NF; i++)
    in[i] = (float)((i * 37) % 101) * 0.5f - 25.0f + (float)(i % 3) * 0.125f;
  in[5] = NAN;
  in[17] = -INFINITY;
  in[NF + 3] = INFINITY;
  in[2 * NF + 9] = NAN;
  in[2 * NF + 10] = NAN;
  const int n = NF;
  id b[4] = {sm_buffer(in, sizeof in), sm_buffer(NULL, sizeof in), sm_buffer(NULL, ROWS * NF * 4),
             sm_buffer(&n, 4)};
  sm_dispatch(lib, "argsort_float32_256", b, 4, SM_SIZE(ROWS, 1, 1), SM_SIZE(128, 1, 1), true, 0);
  const float *o = sm_contents(b[1]);
  const uint32_t *ix = sm_contents(b[2]);
  for (int r = 0; r < ROWS; r++) {
    float want[NF];
    memcpy(want, in + r * NF, sizeof want);
    qsort(want, NF, sizeof want[0], nan_last_cmp);
    for (int i = 0; i < NF; i++) {
      float got = o[r * NF + i];
      cr_expect(isnan(want[i]) ? isnan(got) : got == want[i], "row %d [%d] = %g, expected %g", r, i,
                got, want[i]);
      cr_assert_lt(ix[r * NF + i], (uint32_t)NF);
      float at = in[r * NF + ix[r * NF + i]];
      cr_expect(isnan(got) ? isnan(at) : at == got, "row %d index %d -> %u holds %g, not %g", r, i,
                ix[r * NF + i], at, got);
    }
  }
  for (int i = 0; i < 4; i++) sm_release(b[i]);

  const int ni = 50; /* integers: padded with numeric_limits<int>::max() */
  int32_t vi[50];
  for (int i = 0; i < ni; i++) vi[i] = (i * 29) % 50 - 20;
  id c[4] = {sm_buffer(vi, sizeof vi), sm_buffer(NULL, sizeof vi), sm_buffer(NULL, sizeof vi),
             sm_buffer(&ni, 4)};
  sm_dispatch(lib, "argsort_int32_64", c, 4, SM_SIZE(1, 1, 1), SM_SIZE(32, 1, 1), true, 0);
  const int32_t *oi = sm_contents(c[1]);
  const uint32_t *ii = sm_contents(c[2]);
  for (int i = 0; i < ni; i++) { /* distinct values -20..29: sorted is i - 20 */
    cr_expect_eq(oi[i], i - 20, "int row [%d] = %d", i, oi[i]);
    cr_expect_eq(vi[ii[i]], i - 20, "int index [%d] = %u", i, ii[i]);
  }
  for (int i = 0; i < 4; i++) sm_release(c[i]);
  sm_release(lib);
}

/* ---- atomics and metal::array: a histogram through threadgroup atomics
 * declared in the kernel body and device atomics across threadgroups,
 * weights from a metal::array in a constant struct, an atomic<float> sum of
 * integer-valued floats (exact in any order) and a compare-exchange loop that
 * keeps a float maximum. */
static const char *const atomics_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "constant constexpr int BINS = 16;\n"
    "struct HistParams {\n"
    "  metal::array<float, 4> weights;\n"
    "  uint n;\n"
    "};\n"
    "METAL_FUNC void atomic_max_float(device atomic_uint *m, float v) {\n"
    "  uint expected = atomic_load_explicit(m, memory_order_relaxed);\n"
    "  while (as_type<float>(expected) < v &&\n"
    "         !atomic_compare_exchange_weak_explicit(m, &expected, as_type<uint>(v),\n"
    "                                                memory_order_relaxed, memory_order_relaxed)) "
    "{\n"
    "  }\n"
    "}\n"
    "kernel void histogram(device const uint *keys [[buffer(0)]],\n"
    "                      device atomic_uint *hist [[buffer(1)]],\n"
    "                      device atomic_float *weighted [[buffer(2)]],\n"
    "                      device atomic_uint *max_bits [[buffer(3)]],\n"
    "                      constant HistParams &p [[buffer(4)]],\n"
    "                      uint gid [[thread_position_in_grid]],\n"
    "                      uint tid [[thread_index_in_threadgroup]],\n"
    "                      uint tgsize [[threads_per_threadgroup]]) {\n"
    "  threadgroup atomic_uint local[BINS];\n"
    "  for (uint b = tid; b < BINS; b += tgsize) atomic_store_explicit(&local[b], 0u, "
    "memory_order_relaxed);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  if (gid < p.n) {\n"
    "    uint k = keys[gid];\n"
    "    atomic_fetch_add_explicit(&local[k % BINS], 1u, memory_order_relaxed);\n"
    "    float w = p.weights[k % p.weights.size()] * float(k);\n"
    "    atomic_fetch_add_explicit(weighted, w, memory_order_relaxed);\n"
    "    atomic_max_float(max_bits, w);\n"
    "  }\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  for (uint b = tid; b < BINS; b += tgsize) {\n"
    "    uint c = atomic_load_explicit(&local[b], memory_order_relaxed);\n"
    "    if (c) atomic_fetch_add_explicit(&hist[b], c, memory_order_relaxed);\n"
    "  }\n"
    "}\n";

Test(patterns, atomics_histogram_and_metal_array) {
  id lib = compile_safe(atomics_src);
  enum { N = 1000, BINS = 16 };
  uint32_t keys[N];
  for (int i = 0; i < N; i++) keys[i] = (uint32_t)((i * 7919) % 97);
  struct {
    float weights[4];
    uint32_t n;
  } params = {{1.0f, 2.0f, 0.5f, -1.0f}, N};
  const float zero = 0;
  const float lowest = -INFINITY;
  id b[5] = {sm_buffer(keys, sizeof keys), sm_buffer(NULL, BINS * 4), sm_buffer(&zero, 4),
             sm_buffer(&lowest, 4), sm_buffer(&params, sizeof params)};
  sm_dispatch(lib, "histogram", b, 5, SM_SIZE(N, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  uint32_t want[BINS] = {0};
  double wsum = 0;
  float wmax = -INFINITY;
  for (int i = 0; i < N; i++) {
    want[keys[i] % BINS]++;
    float w = params.weights[keys[i] % 4] * (float)keys[i];
    wsum += w;
    wmax = fmaxf(wmax, w);
  }
  const uint32_t *h = sm_contents(b[1]);
  for (int i = 0; i < BINS; i++)
    cr_expect_eq(h[i], want[i], "bin %d: %u, expected %u", i, h[i], want[i]);
  cr_expect_eq(*(const float *)sm_contents(b[2]), (float)wsum, "weighted sum %g, expected %g",
               *(const float *)sm_contents(b[2]), wsum);
  cr_expect_eq(*(const float *)sm_contents(b[3]), wmax, "max %g, expected %g",
               *(const float *)sm_contents(b[3]), wmax);
  for (int i = 0; i < 5; i++) sm_release(b[i]);
  sm_release(lib);
}

/* ---- half/float/integer conditionals as real kernels write them: MSL's
 * usual conversions pick float for half and float, half for half and an
 * integer, and the chosen type shows in the stored bits. */
static const char *const cond_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void conds(device const half *h [[buffer(0)]], device float *f_out [[buffer(1)]],\n"
    "                  device half *h_out [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n"
    "  const float third = 1.0f / 3.0f;\n"
    "  f_out[2 * i] = (i % 2) ? h[i] : h[i] / 3.f;   /* half, float: float */\n"
    "  f_out[2 * i + 1] = (i % 2) ? third : h[i];    /* float, half: float */\n"
    "  h_out[2 * i] = (i % 2) ? h[i] : 0;            /* half, int: half */\n"
    "  h_out[2 * i + 1] = (i % 2) ? h[i] * h[i] : 1u; /* half, uint: half */\n"
    "}\n";

Test(patterns, half_float_integer_conditionals) {
  id lib = compile_safe(cond_src);
  enum { N = 8 };
  uint16_t h[N];
  for (int i = 0; i < N; i++) h[i] = half_bits((float)(i + 1) * 0.5f);
  id b[3] = {sm_buffer(h, sizeof h), sm_buffer(NULL, 2 * N * 4), sm_buffer(NULL, 2 * N * 2)};
  sm_dispatch(lib, "conds", b, 3, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
  const float *f = sm_contents(b[1]);
  const uint16_t *ho = sm_contents(b[2]);
  for (int i = 0; i < N; i++) {
    float v = half_value(h[i]);
    /* float division, not half: v / 3 keeps float precision */
    cr_expect_eq(f[2 * i], (i % 2) ? v : v / 3.0f, "f_out[%d] = %.9g", 2 * i, f[2 * i]);
    cr_expect_eq(f[2 * i + 1], (i % 2) ? 1.0f / 3.0f : v, "f_out[%d] = %.9g", 2 * i + 1,
                 f[2 * i + 1]);
    cr_expect_eq(half_value(ho[2 * i]), (i % 2) ? v : 0.0f, "h_out[%d]", 2 * i);
    cr_expect_eq(half_value(ho[2 * i + 1]), (i % 2) ? v * v : 1.0f, "h_out[%d]", 2 * i + 1);
  }
  for (int i = 0; i < 3; i++) sm_release(b[i]);
  sm_release(lib);
}

/* ---- a row softmax as frameworks write it: N_READS values a thread,
 * simd_max and simd_sum within simdgroups, threadgroup arrays indexed by
 * simdgroup to combine them, a looped variant for rows longer than the
 * threadgroup. */
static const char *const softmax_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "template <typename T, int N_READS = 4>\n"
    "[[kernel]] void row_softmax(device const T *in [[buffer(0)]], device T *out [[buffer(1)]],\n"
    "                            constant int &axis_size [[buffer(2)]],\n"
    "                            uint row [[threadgroup_position_in_grid]],\n"
    "                            uint lid [[thread_position_in_threadgroup]],\n"
    "                            uint lsize [[threads_per_threadgroup]],\n"
    "                            uint sg [[simdgroup_index_in_threadgroup]],\n"
    "                            uint lane [[thread_index_in_simdgroup]],\n"
    "                            uint nsg [[simdgroups_per_threadgroup]]) {\n"
    "  threadgroup float local_max[32];\n"
    "  threadgroup float local_sum[32];\n"
    "  in += row * axis_size;\n"
    "  out += row * axis_size;\n"
    "  float m = -numeric_limits<float>::infinity();\n"
    "  for (int i = int(lid) * N_READS; i < axis_size; i += int(lsize) * N_READS)\n"
    "    for (int j = 0; j < N_READS && i + j < axis_size; j++) m = max(m, float(in[i + j]));\n"
    "  m = simd_max(m);\n"
    "  if (lane == 0) local_max[sg] = m;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  m = lane < nsg ? local_max[lane] : -numeric_limits<float>::infinity();\n"
    "  m = simd_max(m);\n"
    "  float s = 0.0f;\n"
    "  for (int i = int(lid) * N_READS; i < axis_size; i += int(lsize) * N_READS)\n"
    "    for (int j = 0; j < N_READS && i + j < axis_size; j++) s += exp(float(in[i + j]) - m);\n"
    "  s = simd_sum(s);\n"
    "  if (lane == 0) local_sum[sg] = s;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  s = lane < nsg ? local_sum[lane] : 0.0f;\n"
    "  s = simd_sum(s);\n"
    "  for (int i = int(lid) * N_READS; i < axis_size; i += int(lsize) * N_READS)\n"
    "    for (int j = 0; j < N_READS && i + j < axis_size; j++)\n"
    "      out[i + j] = T(exp(float(in[i + j]) - m) / s);\n"
    "}\n"
    "template [[host_name(\"softmax_float32\")]] [[kernel]] decltype(row_softmax<float>) "
    "row_softmax<float>;\n";

Test(patterns, row_softmax_with_simdgroup_reductions) {
  id lib = compile_safe(softmax_src);
  enum { ROWS = 3, COLS = 1000 };
  float *in = malloc(ROWS * COLS * 4);
  cr_assert_not_null(in);
  for (int i = 0; i < ROWS * COLS; i++) in[i] = (float)((i * 53) % 97) * 0.1f - 4.0f;
  const int axis = COLS;
  id b[3] = {sm_buffer(in, ROWS * COLS * 4), sm_buffer(NULL, ROWS * COLS * 4), sm_buffer(&axis, 4)};
  /* 96 threads: three simdgroups, ten or eleven strides of 4 per thread */
  sm_dispatch(lib, "softmax_float32", b, 3, SM_SIZE(ROWS, 1, 1), SM_SIZE(96, 1, 1), true, 0);
  const float *o = sm_contents(b[1]);
  for (int r = 0; r < ROWS; r++) {
    double m = -INFINITY, s = 0, total = 0;
    /* not fmax: GCC 12's aarch64 vectoriser fails on that reduction (ICE) */
    for (int i = 0; i < COLS; i++) m = in[r * COLS + i] > m ? in[r * COLS + i] : m;
    for (int i = 0; i < COLS; i++) s += exp(in[r * COLS + i] - m);
    for (int i = 0; i < COLS; i++) {
      double want = exp(in[r * COLS + i] - m) / s;
      total += o[r * COLS + i];
      cr_expect_leq(fabs(o[r * COLS + i] - want), 1e-5 * want, "row %d [%d] = %g, expected %g", r,
                    i, o[r * COLS + i], want);
    }
    cr_expect_leq(fabs(total - 1.0), 1e-4, "row %d sums to %g", r, total);
  }
  for (int i = 0; i < 3; i++) sm_release(b[i]);
  free(in);
  sm_release(lib);
}

/* ---- kernel templates inside a namespace, instantiated by their qualified
 * name from the global namespace (`template [[host_name("...")]] kernel void
 * ::ops::detail::binary_strided<T, F>(...)`, the `::` split from the rest
 * across a macro's lines), reading and writing through `device void *` and
 * `constant void *` at byte offsets with helpers overloaded on the address
 * space, thread-array parameters sized by a constant, and a result type the
 * functor decides (decltype over declval). */
static const char *const ns_family_src =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "namespace ops {\n"
    "namespace detail {\n"
    "constant constexpr unsigned max_dims = 4;\n"
    "template <typename F, typename... A>\n"
    "using ret_t = decltype(::metal::declval<F>()(::metal::declval<A>()...));\n"
    "template <typename I>\n"
    "inline I linear_offset(thread I pos[max_dims], constant long *strides, uint nd) {\n"
    "  I o = 0;\n"
    "  for (uint d = 0; d < nd; ++d) o += pos[d] * I(strides[d]);\n"
    "  return o;\n"
    "}\n"
    "template <typename I>\n"
    "inline void unravel(I idx, thread I pos[max_dims], constant long *sizes, uint nd) {\n"
    "  for (uint d = 0; d < nd; ++d) {\n"
    "    pos[d] = idx % I(sizes[d]);\n"
    "    idx /= I(sizes[d]);\n"
    "  }\n"
    "}\n"
    "template <typename T>\n"
    "inline constant T &at_bytes(constant void *p, long off) {\n"
    "  return *reinterpret_cast<constant T *>(static_cast<constant char *>(p) + off);\n"
    "}\n"
    "template <typename T>\n"
    "inline device T &at_bytes(device void *p, long off) {\n"
    "  return *reinterpret_cast<device T *>(static_cast<device char *>(p) + off);\n"
    "}\n"
    "template <typename T, typename F>\n"
    "kernel void binary_strided(device void *out [[buffer(0)]], constant void *a [[buffer(1)]],\n"
    "                           constant void *b [[buffer(2)]],\n"
    "                           constant long *sizes [[buffer(3)]],\n"
    "                           constant long *out_strides [[buffer(4)]],\n"
    "                           constant long *a_strides [[buffer(5)]],\n"
    "                           constant long *b_strides [[buffer(6)]],\n"
    "                           constant uint &nd [[buffer(7)]],\n"
    "                           uint i [[thread_position_in_grid]]) {\n"
    "  F f;\n"
    "  int pos[max_dims];\n"
    "  unravel(int(i), pos, sizes, nd);\n"
    "  const auto x = at_bytes<T>(a, linear_offset(pos, a_strides, nd));\n"
    "  const auto y = at_bytes<T>(b, linear_offset(pos, b_strides, nd));\n"
    "  at_bytes<ret_t<F, T, T>>(out, linear_offset(pos, out_strides, nd)) = f(x, y);\n"
    "}\n"
    "template <typename T, typename F>\n"
    "kernel void unary_dense(device ret_t<F, T> *out [[buffer(0)]], constant T *in [[buffer(1)]],\n"
    "                        uint i [[thread_position_in_grid]]) {\n"
    "  F f;\n"
    "  out[i] = f(in[i]);\n"
    "}\n"
    "} // namespace detail\n"
    "} // namespace ops\n"
    "struct sub_op {\n"
    "  template <typename T> T operator()(T x, T y) { return x - y; }\n"
    "};\n"
    "struct lt_op {\n"
    "  template <typename T> bool operator()(T x, T y) { return x < y; }\n"
    "};\n"
    "struct twice_op {\n"
    "  template <typename T> float operator()(T x) { return 2.0f * float(x); }\n"
    "};\n"
    "#define BINARY(NAME, T)                                                             \\\n"
    "  template [[host_name(#NAME \"_strided_\" #T)]] kernel void ::ops::detail::         \\\n"
    "      binary_strided<T, NAME##_op>(device void *, constant void *, constant void *, \\\n"
    "                                   constant long *, constant long *, constant long *, \\\n"
    "                                   constant long *, constant uint &, uint)\n"
    "#define UNARY(NAME, T)                                                              \\\n"
    "  static_assert(is_same_v<float, ::ops::detail::ret_t<NAME##_op, T>>, #NAME);      \\\n"
    "  template [[host_name(#NAME \"_dense_\" #T)]] kernel void ::                         \\\n"
    "      ops::detail::unary_dense<T, NAME##_op>(                                      \\\n"
    "          device ::ops::detail::ret_t<NAME##_op, T> * out, constant T * in, uint i)\n"
    "BINARY(sub, float);\n"
    "BINARY(sub, int);\n"
    "BINARY(lt, float);\n"
    "UNARY(twice, short);\n"
    "UNARY(twice, float);\n";

Test(patterns, namespaced_kernel_templates_instantiated_by_qualified_name) {
  id lib = compile_safe(ns_family_src);
  cr_assert_eq(sm_u(SEND0(id, lib, "functionNames"), "count"), 5);
  /* a 3 x 4 tensor: a row-major, b transposed (column-major), out padded rows of 5 */
  enum { R = 3, C = 4, N = R * C };
  const int64_t sizes[2] = {C, R}; /* innermost first */
  const int64_t a_str[2] = {4, 4 * C}, b_str[2] = {4 * R, 4}, o_str[2] = {4, 4 * 5};
  const uint32_t nd = 2;
  float af[N], bf[N];
  int32_t ai[N], bi[N];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      af[r * C + c] = (float)(r * 10 + c) * 0.5f;
      bf[c * R + r] = (float)((r * 7 + c * 3) % 5);
      ai[r * C + c] = r * 100 - c;
      bi[c * R + r] = c * c - r;
    }
  id s = sm_buffer(sizes, sizeof sizes), as = sm_buffer(a_str, sizeof a_str),
     bs = sm_buffer(b_str, sizeof b_str), os = sm_buffer(o_str, sizeof o_str),
     n = sm_buffer(&nd, sizeof nd);
  for (int k = 0; k < 3; k++) {
    const char *name = k == 0   ? "sub_strided_float"
                       : k == 1 ? "sub_strided_int"
                                : "lt_strided_float";
    id a = k == 1 ? sm_buffer(ai, sizeof ai) : sm_buffer(af, sizeof af);
    id b = k == 1 ? sm_buffer(bi, sizeof bi) : sm_buffer(bf, sizeof bf);
    unsigned char init[R * 5 * 4];
    memset(init, 0xEE, sizeof init);
    id o = sm_buffer(init, sizeof init);
    id bufs[8] = {o, a, b, s, os, as, bs, n};
    sm_dispatch(lib, name, bufs, 8, SM_SIZE(N, 1, 1), SM_SIZE(4, 1, 1), false, 0);
    const unsigned char *ob = sm_contents(o);
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) {
        const unsigned char *e = ob + r * 20 + c * 4;
        if (k == 0) {
          float got;
          memcpy(&got, e, 4);
          cr_expect_eq(got, af[r * C + c] - bf[c * R + r], "%s (%d, %d): %g", name, r, c, got);
        } else if (k == 1) {
          int32_t got;
          memcpy(&got, e, 4);
          cr_expect_eq(got, ai[r * C + c] - bi[c * R + r], "%s (%d, %d): %d", name, r, c, got);
        } else {
          cr_expect_eq(e[0], af[r * C + c] < bf[c * R + r], "%s (%d, %d): %d", name, r, c, e[0]);
          cr_expect_eq(e[1], 0xEE, "a bool result writes one byte");
        }
      }
    /* the padding column is untouched */
    for (int r = 0; r < R; r++) cr_expect_eq(ob[r * 20 + 16], 0xEE);
    sm_release(a);
    sm_release(b);
    sm_release(o);
  }
  int16_t sh[N];
  for (int i = 0; i < N; i++) sh[i] = (int16_t)(i * 37 - 200);
  id in = sm_buffer(sh, sizeof sh), out = sm_buffer(NULL, N * 4);
  id ub[2] = {out, in};
  sm_dispatch(lib, "twice_dense_short", ub, 2, SM_SIZE(N, 1, 1), SM_SIZE(4, 1, 1), false, 0);
  for (int i = 0; i < N; i++)
    cr_expect_eq(((const float *)sm_contents(out))[i], 2.0f * (float)sh[i], "[%d]", i);
  sm_release(in);
  sm_release(out);
  sm_release(s);
  sm_release(as);
  sm_release(bs);
  sm_release(os);
  sm_release(n);
  sm_release(lib);
}

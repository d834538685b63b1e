/* SPDX-License-Identifier: MIT */
/* Third-party MSL, laid out outside the repository by tools/softmetal/corpus.sh
 * from the files tests/softmetal/corpus/MANIFEST.tsv names; the suite reads them
 * from $CMETAL_MSL_CORPUS and skips without it. Each file compiles once per test
 * (the kernel cache serves the other processes), then some of its kernels run
 * against references computed here. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sm_run.h"

static void setup(void) { sm_run_open(); }
static void teardown(void) { sm_run_close(); }
TestSuite(corpus, .init = setup, .fini = teardown, .timeout = 600);

enum { MATH_SAFE = 0 };

#define CORPUS_SKIPPED                                                                             \
  "corpus skipped: CMETAL_MSL_CORPUS is not set; lay the corpus out with "                         \
  "tools/softmetal/corpus.sh SRC_DIR OUT_DIR (tests/softmetal/corpus/README.md) and run with "     \
  "CMETAL_MSL_CORPUS=OUT_DIR"

/* Said once per run, where ctest sees it (the suite then counts as skipped). */
ReportHook(PRE_ALL)(struct criterion_test_set *tests) {
  (void)tests;
  const char *dir = getenv("CMETAL_MSL_CORPUS");
  if (!dir || !*dir) fprintf(stderr, "%s\n", CORPUS_SKIPPED);
}

/* The corpus directory, or the test is skipped with the way to make one. */
static const char *corpus_dir(void) {
  const char *dir = getenv("CMETAL_MSL_CORPUS");
  if (!dir || !*dir) cr_skip_test(CORPUS_SKIPPED);
  return dir;
}

/* Compiles $CMETAL_MSL_CORPUS/rel in math_mode (see sm_compile_mode) and logs how long
 * it took; when line is not NULL, the file's one line equal to it is replaced
 * by with (a narrower set of template instantiations) before compiling. */
static id compile_file_with(const char *rel, long math_mode, const char *line, const char *with);
static id compile_file(const char *rel, long math_mode) {
  return compile_file_with(rel, math_mode, NULL, NULL);
}
static id compile_file_with(const char *rel, long math_mode, const char *line, const char *with) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", corpus_dir(), rel);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  cr_assert_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  cr_assert_gt(n, 0);
  rewind(f);
  char *src = malloc((size_t)n + 1);
  cr_assert_not_null(src);
  cr_assert_eq(fread(src, 1, (size_t)n, f), (size_t)n);
  src[n] = 0;
  fclose(f);
  if (line) {
    size_t len = strlen(line);
    char *at = strstr(src, line);
    cr_assert(at && (at == src || at[-1] == '\n') && (at[len] == '\n' || at[len] == 0) &&
                  !strstr(at + len, line),
              "%s: one line \"%s\"", rel, line);
    size_t head = (size_t)(at - src), wlen = strlen(with);
    char *edited = malloc((size_t)n - len + wlen + 1);
    cr_assert_not_null(edited);
    memcpy(edited, src, head);
    memcpy(edited + head, with, wlen);
    memcpy(edited + head + wlen, at + len, (size_t)n - head - len + 1);
    free(src);
    src = edited;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  id error = 0;
  id lib = sm_compile_mode(src, math_mode, &error);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  free(src);
  cr_assert_not_null(lib, "%s: %s", rel, sm_error_text(error));
  cr_log_info("%s: compiled in %.2f s", rel,
              (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return lib;
}

static id int_buffer(int v) { return sm_buffer(&v, sizeof v); }

static float half_round(float f) { /* to nearest even, normal range */
  if (f == 0.0f) return f;
  int e;
  frexpf(f, &e);
  return ldexpf(nearbyintf(ldexpf(f, 11 - e)), e - 11);
}
static float half_value(uint16_t h) { /* normal halves */
  uint32_t x = ((uint32_t)(h & 0x8000u) << 16) | ((((h >> 10) & 0x1Fu) + 112u) << 23) |
               ((uint32_t)(h & 0x3FFu) << 13);
  float f;
  memcpy(&f, &x, 4);
  return (h & 0x7FFFu) ? f : 0.0f;
}
static uint16_t half_bits(float f) { /* exact normal halves */
  uint32_t x;
  memcpy(&x, &f, 4);
  if (f == 0.0f) return (uint16_t)(x >> 16);
  return (uint16_t)(((x >> 16) & 0x8000u) | ((((x >> 23) & 0xFFu) - 112u) << 10) |
                    ((x & 0x7FFFFFu) >> 13));
}

/* ---- mlx arange.metal: elementwise, templates instantiated by macros */
Test(corpus, mlx_arange_elementwise) {
  id lib = compile_file("mlx/arange.metal", MATH_SAFE); /* mlx: -fno-fast-math */
  enum { N = 600 };
  {
    float start = 1.5f, step = 0.25f;
    id b[3] = {sm_buffer(&start, 4), sm_buffer(&step, 4), sm_buffer(NULL, N * 4)};
    sm_dispatch(lib, "arangefloat32", b, 3, SM_SIZE(N, 1, 1), SM_SIZE(64, 1, 1), false, 0);
    const float *o = sm_contents(b[2]);
    for (int i = 0; i < N; i++) cr_expect_eq(o[i], 1.5f + 0.25f * (float)i, "arangefloat32[%d]", i);
    for (int i = 0; i < 3; i++) sm_release(b[i]);
  }
  {
    uint16_t start = half_bits(0.5f), step = half_bits(0.125f);
    id b[3] = {sm_buffer(&start, 2), sm_buffer(&step, 2), sm_buffer(NULL, N * 2)};
    sm_dispatch(lib, "arangefloat16", b, 3, SM_SIZE(N, 1, 1), SM_SIZE(64, 1, 1), false, 0);
    const uint16_t *o = sm_contents(b[2]);
    for (int i = 0; i < N; i++)
      cr_expect_eq(half_value(o[i]), half_round(0.5f + half_round(0.125f * (float)i)),
                   "arangefloat16[%d] = %g", i, half_value(o[i]));
    for (int i = 0; i < 3; i++) sm_release(b[i]);
  }
  {
    int32_t start = -7, step = 3;
    id b[3] = {sm_buffer(&start, 4), sm_buffer(&step, 4), sm_buffer(NULL, N * 4)};
    sm_dispatch(lib, "arangeint32", b, 3, SM_SIZE(N, 1, 1), SM_SIZE(64, 1, 1), false, 0);
    const int32_t *o = sm_contents(b[2]);
    for (int i = 0; i < N; i++) cr_expect_eq(o[i], -7 + 3 * i, "arangeint32[%d]", i);
    for (int i = 0; i < 3; i++) sm_release(b[i]);
  }
  sm_release(lib);
}

/* ---- mlx softmax.metal: softmax over rows, simd reductions, threadgroup arrays */
static void check_softmax(id lib, const char *kernel, int rows, int axis, unsigned threads) {
  size_t n = (size_t)rows * (size_t)axis;
  float *in = malloc(n * 4);
  cr_assert_not_null(in);
  for (size_t i = 0; i < n; i++) in[i] = (float)((i * 37) % 101) * 0.05f - 2.5f + (float)(i % 3);
  id b[3] = {sm_buffer(in, n * 4), sm_buffer(NULL, n * 4), int_buffer(axis)};
  sm_dispatch(lib, kernel, b, 3, SM_SIZE((NSUInteger)rows, 1, 1), SM_SIZE(threads, 1, 1), true, 0);
  const float *o = sm_contents(b[1]);
  for (int r = 0; r < rows; r++) {
    const float *x = in + (size_t)r * axis;
    double m = x[0], s = 0;
    for (int i = 1; i < axis; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < axis; i++) s += exp((double)x[i] - m);
    for (int i = 0; i < axis; i++) {
      double want = exp((double)x[i] - m) / s;
      float got = o[(size_t)r * axis + i];
      cr_expect_leq(fabs(got - want), 1e-5 * want + 1e-9, "%s row %d [%d]: %g, expected %g", kernel,
                    r, i, got, want);
    }
  }
  for (int i = 0; i < 3; i++) sm_release(b[i]);
  free(in);
}

Test(corpus, mlx_softmax) {
  id lib = compile_file("mlx/softmax.metal", MATH_SAFE);     /* mlx: -fno-fast-math */
  check_softmax(lib, "block_softmax_float32", 3, 1000, 256); /* 4 values a thread */
  /* mlx runs the looped kernel with 1024 threads: it reads local_max[lane] of all
   * 32 simdgroups, so fewer threads read unwritten (poisoned) threadgroup memory. */
  check_softmax(lib, "looped_softmax_float32", 2, 5000, 1024);
  sm_release(lib);
}

/* ---- mlx sort.metal: block merge sort and argsort in threadgroup memory */
static int nan_last(const void *pa, const void *pb) {
  float a = *(const float *)pa, b = *(const float *)pb;
  if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
  return (a > b) - (a < b);
}

Test(corpus, mlx_block_sort_and_argsort) {
  id lib = compile_file("mlx/sort.metal", MATH_SAFE); /* mlx: -fno-fast-math */
  enum { SEG = 2, LEN = 500, BN = 128 };              /* BN * 4 values a block */
  float in[SEG * LEN];
  for (int i = 0; i < SEG * LEN; i++)
    in[i] = (float)((i * 7919) % 1013) - 500.0f + 0.25f * (float)(i / LEN);
  in[17] = NAN;
  in[LEN + 3] = -INFINITY;
  float want[SEG * LEN];
  memcpy(want, in, sizeof in);
  for (int s = 0; s < SEG; s++) qsort(want + s * LEN, LEN, sizeof(float), nan_last);

  id vals = sm_buffer(in, sizeof in), out = sm_buffer(NULL, sizeof in);
  id idx = sm_buffer(NULL, SEG * LEN * 4);
  id n = int_buffer(LEN), one = int_buffer(1), stride = int_buffer(LEN);
  id b[7] = {vals, out, n, one, one, stride, stride};
  sm_dispatch(lib, "c_block_sort_float32_float32_bn128_tn4", b, 7, SM_SIZE(1, SEG, 1),
              SM_SIZE(BN, 1, 1), true, 0);
  const float *o = sm_contents(out);
  for (int i = 0; i < SEG * LEN; i++)
    cr_expect(o[i] == want[i] || (isnan(o[i]) && isnan(want[i])), "sorted[%d] = %g, expected %g", i,
              o[i], want[i]);

  b[1] = idx;
  sm_dispatch(lib, "carg_block_sort_float32_uint32_bn128_tn4", b, 7, SM_SIZE(1, SEG, 1),
              SM_SIZE(BN, 1, 1), true, 0);
  const uint32_t *ix = sm_contents(idx);
  for (int s = 0; s < SEG; s++) {
    char seen[LEN] = {0};
    for (int i = 0; i < LEN; i++) {
      uint32_t k = ix[s * LEN + i];
      cr_assert_lt(k, LEN, "argsort index in the segment");
      cr_expect_eq(seen[k], 0, "argsort is a permutation");
      seen[k] = 1;
      float v = in[s * LEN + k], w = want[s * LEN + i];
      cr_expect(v == w || (isnan(v) && isnan(w)), "argsort[%d][%d] -> %g, expected %g", s, i, v, w);
    }
  }
  sm_release(vals);
  sm_release(out);
  sm_release(idx);
  sm_release(n);
  sm_release(one);
  sm_release(stride);
  sm_release(lib);
}

/* ---- mlx logsumexp.metal: a row reduction (max, then sum of exponentials) */
Test(corpus, mlx_logsumexp_reduction) {
  id lib = compile_file("mlx/logsumexp.metal", MATH_SAFE); /* mlx: -fno-fast-math */
  enum { ROWS = 4, AXIS = 900 };
  static float in[ROWS * AXIS];
  for (int i = 0; i < ROWS * AXIS; i++)
    in[i] = (float)((i * 53) % 97) * 0.1f - 4.0f + (float)(i / AXIS);
  id b[3] = {sm_buffer(in, sizeof in), sm_buffer(NULL, ROWS * 4), int_buffer(AXIS)};
  /* mlx: ceil(axis / 4) threads rounded up to whole simdgroups */
  sm_dispatch(lib, "block_logsumexp_float32", b, 3, SM_SIZE(ROWS, 1, 1), SM_SIZE(256, 1, 1), true,
              0);
  const float *o = sm_contents(b[1]);
  for (int r = 0; r < ROWS; r++) {
    double m = in[r * AXIS], s = 0;
    for (int i = 1; i < AXIS; i++) m = in[r * AXIS + i] > m ? in[r * AXIS + i] : m;
    for (int i = 0; i < AXIS; i++) s += exp((double)in[r * AXIS + i] - m);
    double want = log(s) + m;
    cr_expect_leq(fabs(o[r] - want), 1e-5 * fabs(want), "logsumexp row %d: %.9g, expected %.9g", r,
                  o[r], want);
  }
  for (int i = 0; i < 3; i++) sm_release(b[i]);
  sm_release(lib);
}

/* ---- mlx steel_gemm_fused.metal: tiled GEMM on simdgroup_float8x8, function
 * constants for alignment, batch and epilogue */
struct gemm_params { /* mlx::steel::GEMMParams */
  int M, N, K, lda, ldb, ldd, tiles_n, tiles_m;
  int64_t batch_stride_a, batch_stride_b, batch_stride_d;
  int swizzle_log, gemm_k_iterations_aligned, batch_ndim;
};

static void check_gemm(id lib, int M, int N, int K) {
  enum { BM = 32, BN = 32, BK = 16, WM = 2, WN = 2 };
  const char *kernel = "steel_gemm_fused_nn_float32_float32_bm32_bn32_bk16_wm2_wn2";
  float *a = malloc((size_t)M * K * 4), *b = malloc((size_t)K * N * 4);
  cr_assert(a && b);
  /* quarters in [-4, 4): every product and partial sum is exact in float */
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 13) % 32 - 16) * 0.25f;
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 7) % 32 - 16) * 0.25f;
  struct gemm_params p = {M,
                          N,
                          K,
                          K,
                          N,
                          N,
                          (N + BN - 1) / BN,
                          (M + BM - 1) / BM,
                          (int64_t)M * K,
                          (int64_t)K * N,
                          (int64_t)M * N,
                          0,
                          K / BK,
                          1};
  /* has_batch, use_out_source, do_axpby, align_M, align_N, align_K */
  const NSUInteger idx[6] = {10, 100, 110, 200, 201, 202};
  const bool val[6] = {false, false, false, M % BM == 0, N % BN == 0, K % BK == 0};
  id bufs[5] = {sm_buffer(a, (size_t)M * K * 4), sm_buffer(b, (size_t)K * N * 4), NULL,
                sm_buffer(NULL, (size_t)M * N * 4), sm_buffer(&p, sizeof p)};
  sm_dispatch_pipeline(sm_pipeline_bools(lib, kernel, idx, val, 6), kernel, bufs, 5,
                       SM_SIZE((NSUInteger)p.tiles_n, (NSUInteger)p.tiles_m, 1),
                       SM_SIZE(32, WN, WM), true, 0);
  const float *d = sm_contents(bufs[3]);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double want = 0;
      for (int k = 0; k < K; k++) want += (double)a[i * K + k] * b[k * N + j];
      cr_expect_eq(d[i * N + j], (float)want, "%dx%dx%d GEMM [%d][%d]: %g, expected %g", M, N, K, i,
                   j, d[i * N + j], want);
    }
  sm_release(bufs[0]);
  sm_release(bufs[1]);
  sm_release(bufs[3]);
  sm_release(bufs[4]);
  free(a);
  free(b);
}

/* mlx reads addmm_params->alpha of the argument use_out_source switches off
 * before testing use_out_source (Metal's specialization removes the read). */
Test(corpus, mlx_steel_gemm_on_simdgroup_matrices) {
  id lib = compile_file("mlx/steel_gemm_fused.metal", MATH_SAFE); /* mlx: -fno-fast-math */
  check_gemm(lib, 64, 96, 48);                                    /* aligned tiles */
  check_gemm(lib, 50, 70, 37);                                    /* partial tiles in M, N and K */
  sm_release(lib);
}

/* ---- mlx quantized.metal: affine quantization (a scale and a bias per group
 * of 64 values, 4-bit codes), dequantization and quantized matrix-vector
 * products. The file instantiates 2,052 kernels (6 widths x 3 group sizes x
 * 3 types x 38); all compile (about 200 s of CPU, once, see corpus/README.md),
 * too slow for every CI run: the test instantiates float, group size 64,
 * 4 bits (38 kernels). */
enum { QGS = 64, QBITS = 4 };

/* mlx's affine_quantize for one group: the same float operations in the
 * same order. */
static void quantize_group(const float *w, uint8_t *codes, float *scale_out, float *bias_out) {
  const float n_bins = (float)((1 << QBITS) - 1), eps = 1e-7f;
  float w_min = 3.40282347e38f, w_max = 0; /* mlx: Limits<T>::max and 0 */
  for (int i = 0; i < QGS; i++) {
    w_min = fminf(w_min, w[i]);
    w_max = fmaxf(w_max, w[i]);
  }
  float scale = fmaxf((w_max - w_min) / n_bins, eps);
  bool side = fabsf(w_min) > fabsf(w_max);
  scale = side ? scale : -scale;
  float edge = side ? w_min : w_max;
  float q0 = roundf(edge / scale);
  bool at_zero = q0 == 0.0f;
  scale = at_zero ? scale : edge / q0;
  float bias = at_zero ? 0 : edge;
  for (int i = 0; i < QGS; i++) codes[i] = (uint8_t)fminf(roundf((w[i] - bias) / scale), n_bins);
  *scale_out = scale;
  *bias_out = bias;
}

static void check_quantize_roundtrip(id lib) {
  enum { N = 8 * QGS };
  float w[N], scales[N / QGS], biases[N / QGS];
  uint8_t codes[N];
  for (int i = 0; i < N; i++)
    w[i] = (float)((i * 37) % 101) * 0.02f - 1.0f + 0.3f * (float)(i / QGS);
  for (int g = 0; g < N; g += 5) w[g] = -w[g]; /* groups whose edge is their minimum */
  for (int g = 0; g < N / QGS; g++)
    quantize_group(w + g * QGS, codes + g * QGS, scales + g, biases + g);

  id in = sm_buffer(w, sizeof w), packed = sm_buffer(NULL, N / 2);
  id s = sm_buffer(NULL, sizeof scales), b = sm_buffer(NULL, sizeof biases);
  id qb[4] = {in, packed, s, b};
  /* two values a thread, a group per simdgroup */
  sm_dispatch(lib, "affine_quantize_float_gs_64_b_4", qb, 4, SM_SIZE(N / 2, 1, 1),
              SM_SIZE(64, 1, 1), false, 0);
  const uint8_t *p = sm_contents(packed);
  const float *gs = sm_contents(s), *gb = sm_contents(b);
  for (int g = 0; g < N / QGS; g++) {
    cr_expect_eq(gs[g], scales[g], "scale of group %d: %g, expected %g", g, gs[g], scales[g]);
    cr_expect_eq(gb[g], biases[g], "bias of group %d: %g, expected %g", g, gb[g], biases[g]);
  }
  for (int i = 0; i < N / 2; i++) /* value 2i in the low nibble */
    cr_expect_eq(p[i], codes[2 * i] | codes[2 * i + 1] << 4, "byte %d: %#x, expected %#x", i, p[i],
                 codes[2 * i] | codes[2 * i + 1] << 4);

  id out = sm_buffer(NULL, sizeof w);
  id db[4] = {packed, s, b, out};
  sm_dispatch(lib, "affine_dequantize_float_gs_64_b_4", db, 4, SM_SIZE(N / 2, 1, 1),
              SM_SIZE(64, 1, 1), false, 0);
  const float *o = sm_contents(out);
  for (int i = 0; i < N; i++) {
    float want = scales[i / QGS] * (float)codes[i] + biases[i / QGS];
    cr_expect_leq(fabsf(o[i] - want), 1e-6f * fabsf(scales[i / QGS]) * 16,
                  "dequantized[%d]: %g, expected %g", i, o[i], want);
  }
  sm_release(in);
  sm_release(packed);
  sm_release(s);
  sm_release(b);
  sm_release(out);
}

/* y = dequantize(W) x for W of rows x cols, one vector x (mlx's qmv and
 * qmv_fast: 2 simdgroups of 4 rows each a threadgroup). */
static void check_qmv(id lib, const char *kernel, int rows, int cols) {
  size_t nw = (size_t)rows * cols, ng = nw / QGS;
  float *w = malloc(nw * 4), *x = malloc((size_t)cols * 4), *scales = malloc(ng * 4),
        *biases = malloc(ng * 4);
  uint8_t *codes = malloc(nw), *packed = calloc(nw / 2, 1);
  cr_assert(w && x && scales && biases && codes && packed);
  for (size_t i = 0; i < nw; i++) w[i] = (float)((i * 29) % 83) * 0.03f - 1.2f;
  for (int i = 0; i < cols; i++) x[i] = (float)((i * 11) % 17) * 0.125f - 1.0f;
  for (size_t g = 0; g < ng; g++)
    quantize_group(w + g * QGS, codes + g * QGS, scales + g, biases + g);
  for (size_t i = 0; i < nw; i++) packed[i / 2] |= (uint8_t)(codes[i] << (4 * (i % 2)));

  int zero = 0, one = 1;
  int64_t stride = 0;
  id b[15] = {sm_buffer(packed, nw / 2),
              sm_buffer(scales, ng * 4),
              sm_buffer(biases, ng * 4),
              sm_buffer(x, (size_t)cols * 4),
              sm_buffer(NULL, (size_t)rows * 4),
              int_buffer(cols),
              int_buffer(rows),
              int_buffer(zero),
              int_buffer(one),
              sm_buffer(&stride, 8),
              int_buffer(zero),
              int_buffer(one),
              sm_buffer(&stride, 8),
              sm_buffer(&stride, 8),
              sm_buffer(&stride, 8)};
  sm_dispatch(lib, kernel, b, 15, SM_SIZE(1, (NSUInteger)(rows + 7) / 8, 1), SM_SIZE(32, 2, 1),
              true, 0);
  const float *y = sm_contents(b[4]);
  for (int r = 0; r < rows; r++) {
    double want = 0, mag = 0;
    for (int k = 0; k < cols; k++) {
      size_t i = (size_t)r * cols + k;
      double wq = (double)scales[i / QGS] * codes[i] + biases[i / QGS];
      want += wq * x[k];
      mag += fabs(wq * x[k]);
    }
    cr_expect_leq(fabs(y[r] - want), 1e-5 * mag + 1e-6, "%s %dx%d row %d: %.9g, expected %.9g",
                  kernel, rows, cols, r, y[r], want);
  }
  for (int i = 0; i < 15; i++) sm_release(b[i]);
  free(w);
  free(x);
  free(scales);
  free(biases);
  free(codes);
  free(packed);
}

Test(corpus, mlx_affine_quantized) {
  id lib = compile_file_with("mlx/quantized.metal", MATH_SAFE, /* mlx: -fno-fast-math */
                             "instantiate_quantized_all() // clang-format on",
                             "instantiate_quantized_funcs(float, 64, 4)");
  check_quantize_roundtrip(lib);
  check_qmv(lib, "affine_qmv_fast_float_gs_64_b_4_batch_0", 16, 1024);
  check_qmv(lib, "affine_qmv_float_gs_64_b_4_batch_0", 13, 320); /* partial row block and K block */
  sm_release(lib);
}

/* ---- ggml-metal.metal (llama.cpp's kernels): get_rows of q4_0 and q8_0
 * blocks, as llama.cpp dequantizes token embeddings */
struct get_rows_args { /* ggml_metal_kargs_get_rows */
  int32_t ne00t, ne00;
  uint64_t nb01, nb02, nb03;
  int32_t ne10;
  uint64_t nb10, nb11, nb12, nb1, nb2, nb3;
};

enum { QK = 32, GR_ROWS = 5, GR_COLS = 128, GR_IDS = 3 };

/* block_q4_0: half d, 16 bytes of nibbles (value j < 16 low, j + 16 high),
 * value (q - 8) d; block_q8_0: half d, 32 int8, value q d. */
static void check_get_rows(id lib, const char *kernel, bool q4) {
  const size_t block = q4 ? 2 + QK / 2 : 2 + QK, row_bytes = GR_COLS / QK * block;
  uint8_t src[GR_ROWS * (GR_COLS / QK) * (2 + QK)] = {0};
  float want[GR_ROWS][GR_COLS];
  static const float scales[4] = {0.25f, 1.5f, 0.125f, 3.0f}; /* every product exact */
  for (int r = 0; r < GR_ROWS; r++)
    for (int b = 0; b < GR_COLS / QK; b++) {
      uint8_t *blk = src + (size_t)r * row_bytes + (size_t)b * block;
      float d = scales[(r + b) % 4];
      uint16_t h = half_bits(d);
      memcpy(blk, &h, 2);
      for (int j = 0; j < QK; j++) {
        int v = (r * 7 + b * 5 + j * 3) % (q4 ? 16 : 255);
        if (q4) {
          if (j < QK / 2)
            blk[2 + j] = (uint8_t)v;
          else
            blk[2 + j - QK / 2] |= (uint8_t)(v << 4);
          want[r][b * QK + j] = (float)(v - 8) * d;
        } else {
          blk[2 + j] = (uint8_t)(int8_t)(v - 127);
          want[r][b * QK + j] = (float)(v - 127) * d;
        }
      }
    }
  int32_t ids[GR_IDS] = {4, 0, 2};
  struct get_rows_args args = {
      GR_COLS / 16, GR_COLS,    row_bytes,   GR_ROWS * row_bytes,  GR_ROWS * row_bytes, GR_IDS, 4,
      sizeof ids,   sizeof ids, GR_COLS * 4, GR_IDS * GR_COLS * 4, GR_IDS * GR_COLS * 4};
  id b[4] = {sm_buffer(&args, sizeof args), sm_buffer(src, GR_ROWS * row_bytes),
             sm_buffer(ids, sizeof ids), sm_buffer(NULL, GR_IDS * GR_COLS * 4)};
  /* llama.cpp: one thread per 16 values, nw0 * ne10 threadgroups */
  sm_dispatch(lib, kernel, b, 4, SM_SIZE(GR_IDS, 1, 1), SM_SIZE(GR_COLS / 16, 1, 1), true, 0);
  const float *o = sm_contents(b[3]);
  for (int i = 0; i < GR_IDS; i++)
    for (int j = 0; j < GR_COLS; j++)
      cr_expect_eq(o[i * GR_COLS + j], want[ids[i]][j], "%s row %d [%d]: %g, expected %g", kernel,
                   ids[i], j, o[i * GR_COLS + j], want[ids[i]][j]);
  for (int i = 0; i < 4; i++) sm_release(b[i]);
}

Test(corpus, ggml_get_rows_q4_0_and_q8_0) {
  /* Minutes of a cold compile on a 2-core machine: the ctest entry
   * test_softmetal_corpus_slow (label slow) runs it, CI does not. */
  if (!getenv("CMETAL_CORPUS_SLOW"))
    cr_skip_test("ggml-metal.metal takes minutes to compile cold: ctest -L slow runs it");
  id lib = compile_file("ggml/ggml-metal.metal", MATH_SAFE);
  check_get_rows(lib, "kernel_get_rows_q4_0", true);
  check_get_rows(lib, "kernel_get_rows_q8_0", false);
  sm_release(lib);
}

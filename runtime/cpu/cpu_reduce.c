/* SPDX-License-Identifier: MIT */
/* CPU reductions: sum and mean accumulate floats in double and integers in
 * 64 bits (wrapping); max and min compare exactly and propagate NaN.
 *
 * Float sums are pairwise (include/cmetal/ops.h states the error bound): a
 * run of elements is cut in halves at multiples of CM__LEAF elements down
 * to leaves of at most CM__LEAF; a leaf is summed in CM__LANES interleaved
 * float64 lanes (element i into lane i % CM__LANES, in order; float16 and
 * bfloat16 lanes first add fours in float32, cm__leaf_quads), and the
 * lanes are added by a fixed tree. Long runs are read as the tree's four
 * quarters side by side (cm__fsum_side: the same tree, several streams of
 * loads), long integer ones in quarters too (cm__side_walk). Runs of one
 * reduction (reduced axes that do not merge into one run) and, in the
 * vector form, blocks of CM__VROWS rows are combined by a binary counter
 * (a pairwise tree over equal blocks). Every step depends only on the
 * shape and the data, never on the vector instructions in use or on
 * threads (see "threads" below): the same input gives the same bits.
 * Integer sums are exact modulo 2^64 in any order; max and min are exact
 * in any order (NaN wins). The kept axes are walked outside, the reduced
 * ones inside; when the reduced axis is strided but a kept axis is
 * contiguous (reducing the rows of a row-major matrix), whole rows are
 * accumulated into a vector instead. */
#include "cpu_ops.h"

#include "core/convert.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef union cm__acc {
    double d;
    int64_t i;
    uint64_t u;
} cm__acc;

enum { CM__RSUM, CM__RMAX, CM__RMIN, CM__RKINDS };

#define CM__VBLOCK 8192 /* columns per chunk: whole rows stream from memory */

/* The vector form's accumulators, one typed array per domain (typed
 * arrays, not unions, so that the loops vectorise). */
typedef struct cm__vacc {
    double d[CM__VBLOCK];
    int64_t i[CM__VBLOCK];
    uint64_t u[CM__VBLOCK];
} cm__vacc;

/* Accumulates n elements at p (byte stride s) into acc (a cm__acc), or,
 * for the vector form, contiguous element k into the cm__vacc's [k]. */
typedef void (*cm__acc_fn)(int64_t n, const char *p, int64_t s, void *acc);

/* Float max/min: once NaN, stays NaN. */
#define CM__FMAX(m, x) (((m) == (m) && ((x) != (x) || (x) > (m))) ? (x) : (m))
#define CM__FMIN(m, x) (((m) == (m) && ((x) != (x) || (x) < (m))) ? (x) : (m))
#define CM__IMAX(m, x) ((x) > (m) ? (x) : (m))
#define CM__IMIN(m, x) ((x) < (m) ? (x) : (m))

/* Scalar and vector accumulators over elements of T, loaded as AT into
 * acc field FIELD. */
#define CM__ACC(name, T, AT, FIELD, LOAD, STEP)                                                    \
    static void name(int64_t n, const char *p, int64_t s, void *acc_) {                            \
        cm__acc *acc = acc_;                                                                       \
        AT m = acc->FIELD;                                                                         \
        if (s == (int64_t)sizeof(T)) {                                                             \
            const T *q = (const T *)(const void *)p;                                               \
            int64_t i = 0;                                                                         \
            if (n >= 8) { /* eight independent chains: no add-latency bound */                     \
                AT k[8];                                                                           \
                for (int j = 0; j < 8; ++j)                                                        \
                    k[j] = (AT)LOAD(q[j]);                                                         \
                for (i = 8; i + 8 <= n; i += 8)                                                    \
                    for (int j = 0; j < 8; ++j) {                                                  \
                        const AT x = (AT)LOAD(q[i + j]);                                           \
                        k[j] = STEP(k[j], x);                                                      \
                    }                                                                              \
                for (int j = 0; j < 8; ++j)                                                        \
                    m = STEP(m, k[j]);                                                             \
            }                                                                                      \
            for (; i < n; ++i) {                                                                   \
                const AT x = (AT)LOAD(q[i]);                                                       \
                m = STEP(m, x);                                                                    \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const AT x = (AT)LOAD(*(const T *)(const void *)(p + i * s));                      \
                m = STEP(m, x);                                                                    \
            }                                                                                      \
        }                                                                                          \
        acc->FIELD = m;                                                                            \
    }                                                                                              \
    static void name##_vec(int64_t n, const char *p, int64_t s, void *acc_) {                      \
        (void)s; /* contiguous */                                                                  \
        AT *a = ((cm__vacc *)acc_)->FIELD;                                                         \
        const T *q = (const T *)(const void *)p;                                                   \
        for (int64_t i = 0; i < n; ++i) {                                                          \
            const AT x = (AT)LOAD(q[i]);                                                           \
            a[i] = STEP(a[i], x);                                                                  \
        }                                                                                          \
    }

#define CM__ADD(m, x) ((m) + (x))
/* Integers sum as uint64 (wrapping); signed ones sign-extend first. */
#define CM__SEXT(v) ((uint64_t)(int64_t)(v))

#define CM__FLOAT_ACCS(E, T, LD)                                                                   \
    CM__ACC(cm__acc_sum_##E, T, double, d, LD, CM__ADD)                                            \
    CM__ACC(cm__acc_max_##E, T, double, d, LD, CM__FMAX)                                           \
    CM__ACC(cm__acc_min_##E, T, double, d, LD, CM__FMIN)
#define CM__SIGNED_ACCS(E, T)                                                                      \
    CM__ACC(cm__acc_sum_##E, T, uint64_t, u, CM__SEXT, CM__ADD)                                    \
    CM__ACC(cm__acc_max_##E, T, int64_t, i, CM__LD_INT, CM__IMAX)                                  \
    CM__ACC(cm__acc_min_##E, T, int64_t, i, CM__LD_INT, CM__IMIN)
#define CM__UNSIGNED_ACCS(E, T)                                                                    \
    CM__ACC(cm__acc_sum_##E, T, uint64_t, u, CM__LD_UINT, CM__ADD)                                 \
    CM__ACC(cm__acc_max_##E, T, uint64_t, u, CM__LD_UINT, CM__IMAX)                                \
    CM__ACC(cm__acc_min_##E, T, uint64_t, u, CM__LD_UINT, CM__IMIN)

CM__SIGNED_ACCS(CM_BOOL, uint8_t)
CM__SIGNED_ACCS(CM_INT8, int8_t)
CM__SIGNED_ACCS(CM_INT16, int16_t)
CM__SIGNED_ACCS(CM_INT32, int32_t)
CM__SIGNED_ACCS(CM_INT64, int64_t)
CM__UNSIGNED_ACCS(CM_UINT8, uint8_t)
CM__UNSIGNED_ACCS(CM_UINT16, uint16_t)
CM__UNSIGNED_ACCS(CM_UINT32, uint32_t)
CM__UNSIGNED_ACCS(CM_UINT64, uint64_t)
CM__FLOAT_ACCS(CM_FLOAT16, uint16_t, CM__LD_F16)
CM__FLOAT_ACCS(CM_BFLOAT16, uint16_t, CM__LD_BF16)
CM__FLOAT_ACCS(CM_FLOAT32, float, CM__LD_SAME)
CM__FLOAT_ACCS(CM_FLOAT64, double, CM__LD_SAME)

#define CM__ACC_ROW(E, T, DOM, LD, KIND, SAT, MTL)                                                 \
    [E] = {{cm__acc_sum_##E, cm__acc_max_##E, cm__acc_min_##E},                                    \
           {cm__acc_sum_##E##_vec, cm__acc_max_##E##_vec, cm__acc_min_##E##_vec}},
/* [dtype][scalar, vector][kind] */
static const cm__acc_fn cm__acc_table[CM_DTYPE_COUNT][2][CM__RKINDS] = {
    CM__DTYPE_LIST(CM__ACC_ROW)};

/* ------------------------------------------------------------ fast kernels */

#define CM__LANES 16
#define CM__LEAF 512   /* elements per leaf: 32 per lane */
#define CM__VROWS 32   /* rows per block of the vector form's float sums */
#define CM__VCOLS 8192 /* columns per chunk of the vector form's float sums */

/* The tree over the lanes: lane j += lane j + w for w = 8, 4, 2, 1. */
static double cm__lane_tree(double *l) {
    for (int w = CM__LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j)
            l[j] = l[j] + l[j + w];
    return l[0];
}

/* GCC and Clang vector types keep the lanes in registers; elsewhere plain
 * arrays do the same arithmetic. The x86-64 ELF build of GCC also makes
 * AVX2 clones, chosen at load time. */
#if defined(__GNUC__) || defined(__clang__)
#define CM__VEC 1
typedef double cm__v4d __attribute__((vector_size(32)));
typedef float cm__v4f __attribute__((vector_size(16)));
typedef float cm__v8f __attribute__((vector_size(32)));
typedef int32_t cm__v8i32 __attribute__((vector_size(32)));
typedef uint32_t cm__v8u32 __attribute__((vector_size(32)));
typedef int64_t cm__v4i64 __attribute__((vector_size(32)));
typedef uint64_t cm__v4u64 __attribute__((vector_size(32)));
typedef int32_t cm__v4i32 __attribute__((vector_size(16)));
typedef uint32_t cm__v4u32 __attribute__((vector_size(16)));
typedef int8_t cm__v32i8 __attribute__((vector_size(32)));
typedef uint8_t cm__v32u8 __attribute__((vector_size(32)));
typedef int16_t cm__v16i16 __attribute__((vector_size(32)));
typedef uint16_t cm__v16u16 __attribute__((vector_size(32)));
#endif
/* Contiguous kernels ask for the line cm__cpu_prefetch_distance() bytes
 * ahead into L1 and four times as far into L2 (cpu_nd.c says why). */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define CM__PF_DECL const uintptr_t cm__pf = cm__cpu_prefetch_distance()
#define CM__PREFETCH(p) cm__cpu_prefetch_ahead(p, cm__pf)
/* Column max/min (CM__COLS_MM): each of `rows` rows (stride rs) asks for
 * its line at byte offset o + cm__pf into L1 and o + 4 cm__pf into L2,
 * once per 64 bytes. (The float column sums' eight rows a pass read
 * slower with it on a Xeon host: float16 0.49 -> 0.31 of memcpy.) */
#define CM__PREFETCH_ROWS(base, rows, rs, o)                                                       \
    do {                                                                                           \
        if (cm__pf != 0 && ((o) & 63) == 0)                                                        \
            for (int64_t pr_ = 0; pr_ < (rows); ++pr_) {                                           \
                const uintptr_t a_ = (uintptr_t)(base) + (uintptr_t)(pr_ * (rs)) + (o);            \
                cm__cpu_prefetch_ahead((const void *)a_, cm__pf);                                  \
            }                                                                                      \
    } while (0)
#else
#define CM__PF_DECL const int cm__pf = 0
#define CM__PREFETCH(p) ((void)cm__pf)
#define CM__PREFETCH_ROWS(base, rows, rs, o) ((void)cm__pf)
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define CM__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CM__CLONES
#endif

/* A leaf of m <= CM__LEAF contiguous floats or doubles (T, loaded as
 * four-lane vectors VT, widened by WIDEN). Four named accumulators: at -O2
 * GCC kept an array of them in memory, each add waiting on the last one's
 * store (float64 leaves in cache on one AMD EPYC core: 1.48 ns a line). */
#ifdef CM__VEC
#define CM__LEAF_F(name, T, VT, WIDEN)                                                             \
    CM__CLONES static double name(int64_t m, const T *q) {                                         \
        double l[CM__LANES];                                                                       \
        int64_t i = 0;                                                                             \
        CM__PF_DECL;                                                                               \
        cm__v4d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                            \
        for (; i + CM__LANES <= m; i += CM__LANES) {                                               \
            for (size_t o = 0; o < CM__LANES * sizeof(T); o += 64) /* each line */                 \
                CM__PREFETCH((const char *)(q + i) + o);                                           \
            VT x0, x1, x2, x3;                                                                     \
            memcpy(&x0, q + i, sizeof x0);                                                         \
            memcpy(&x1, q + i + 4, sizeof x1);                                                     \
            memcpy(&x2, q + i + 8, sizeof x2);                                                     \
            memcpy(&x3, q + i + 12, sizeof x3);                                                    \
            a0 += WIDEN(x0);                                                                       \
            a1 += WIDEN(x1);                                                                       \
            a2 += WIDEN(x2);                                                                       \
            a3 += WIDEN(x3);                                                                       \
        }                                                                                          \
        memcpy(l, &a0, sizeof a0);                                                                 \
        memcpy(l + 4, &a1, sizeof a1);                                                             \
        memcpy(l + 8, &a2, sizeof a2);                                                             \
        memcpy(l + 12, &a3, sizeof a3);                                                            \
        for (int j = 0; i < m; ++i, ++j)                                                           \
            l[j] += (double)q[i];                                                                  \
        return cm__lane_tree(l);                                                                   \
    }
#define CM__WIDEN_F32(x) __builtin_convertvector(x, cm__v4d)
#define CM__WIDEN_F64(x) (x)
#else
#define CM__LEAF_F(name, T, VT, WIDEN)                                                             \
    static double name(int64_t m, const T *q) {                                                    \
        double l[CM__LANES];                                                                       \
        int64_t i = 0;                                                                             \
        for (int j = 0; j < CM__LANES; ++j)                                                        \
            l[j] = 0.0;                                                                            \
        for (; i < m; ++i)                                                                         \
            l[i % CM__LANES] += (double)q[i];                                                      \
        return cm__lane_tree(l);                                                                   \
    }
#endif
CM__LEAF_F(cm__leaf_f32, float, cm__v4f, CM__WIDEN_F32)
CM__LEAF_F(cm__leaf_f64, double, cm__v4d, CM__WIDEN_F64)

/* A leaf of float16 or bfloat16 values (converted to float32 exactly, at
 * t): each lane first adds its elements of a 64-element group in float32,
 * pairwise (lane j: (x[j] + x[16 + j]) + (x[32 + j] + x[48 + j])), then that
 * in float64; a last partial group goes element by element. Four terms per
 * conversion to float64: converting every element made these sums
 * compute-bound (include/cmetal/ops.h states the bound). */
#define CM__QUAD 64
CM__CLONES static double cm__leaf_quads(int64_t m, const float *t) {
    double l[CM__LANES];
    int64_t i = 0;
#ifdef CM__VEC
    /* named accumulators, in registers (cm__leaf_f64 says why) */
    cm__v4d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
#define CM__QUADS_AT(j)                                                                            \
    __extension__({                                                                                \
        cm__v4f x0, x1, x2, x3;                                                                    \
        memcpy(&x0, t + i + 4 * (j), sizeof x0);                                                   \
        memcpy(&x1, t + i + 16 + 4 * (j), sizeof x1);                                              \
        memcpy(&x2, t + i + 32 + 4 * (j), sizeof x2);                                              \
        memcpy(&x3, t + i + 48 + 4 * (j), sizeof x3);                                              \
        __builtin_convertvector((x0 + x1) + (x2 + x3), cm__v4d);                                   \
    })
    for (; i + CM__QUAD <= m; i += CM__QUAD) {
        a0 += CM__QUADS_AT(0);
        a1 += CM__QUADS_AT(1);
        a2 += CM__QUADS_AT(2);
        a3 += CM__QUADS_AT(3);
    }
#undef CM__QUADS_AT
    memcpy(l, &a0, sizeof a0);
    memcpy(l + 4, &a1, sizeof a1);
    memcpy(l + 8, &a2, sizeof a2);
    memcpy(l + 12, &a3, sizeof a3);
#else
    for (int j = 0; j < CM__LANES; ++j)
        l[j] = 0.0;
    for (; i + CM__QUAD <= m; i += CM__QUAD)
        for (int j = 0; j < CM__LANES; ++j) {
            const float *x = t + i + j;
            l[j] += (double)((x[0] + x[16]) + (x[32] + x[48]));
        }
#endif
    for (; i < m; ++i)
        l[i % CM__LANES] += (double)t[i];
    return cm__lane_tree(l);
}

/* x86-64 with AVX2 and F16C: the same lanes with the widening conversions
 * GCC's vector types lower poorly (chosen at run time). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define CM__X86 1

static atomic_bool cm__reduce_portable; /* cm__cpu_reduce_force_portable */

static bool cm__avx2_usable(void) {
    static atomic_int state; /* 1 usable, -1 not, 0 not asked yet */
    if (atomic_load_explicit(&cm__reduce_portable, memory_order_relaxed))
        return false;
    int v = atomic_load_explicit(&state, memory_order_relaxed);
    if (v == 0) {
        /* Asked through cpuid alone (clang's __builtin_cpu_supports does
         * not know "f16c", and macOS targets lack libgcc's __cpu_model):
         * AVX, F16C and OSXSAVE (leaf 1 ECX), AVX2 (leaf 7 EBX), and the OS
         * saving the XMM and YMM state (XCR0 bits 1 and 2). */
        unsigned a = 0, b = 0, c = 0, d = 0;
        const unsigned need = bit_OSXSAVE | bit_AVX | bit_F16C;
        bool ok = __get_cpuid(1, &a, &b, &c, &d) && (c & need) == need;
        ok = ok && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_AVX2) != 0;
        if (ok) {
            unsigned lo = 0, hi = 0;
            __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            (void)hi;
            ok = (lo & 6u) == 6u;
        }
        v = ok ? 1 : -1;
        atomic_store_explicit(&state, v, memory_order_relaxed);
    }
    return v > 0;
}

/* cm__leaf_quads over float16 or bfloat16 read in place: LOAD16 gives a
 * row of 16 lanes as two vectors of float32, in lane order PERM (the
 * lanes each float64 vector holds, in order). */
#define CM__AVX_LEAF_H(name, LOAD16, LD, PERM)                                                     \
    __attribute__((target("avx2,f16c"))) static double name(int64_t m, const uint16_t *q) {        \
        static const int perm[CM__LANES] = PERM;                                                   \
        __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;                               \
        int64_t i = 0;                                                                             \
        CM__PF_DECL;                                                                               \
        for (; i + CM__QUAD <= m; i += CM__QUAD) {                                                 \
            CM__PREFETCH(q + i);                                                                   \
            CM__PREFETCH(q + i + 32);                                                              \
            __m256 l0, h0, l1, h1, l2, h2, l3, h3;                                                 \
            LOAD16(q + i, l0, h0);                                                                 \
            LOAD16(q + i + 16, l1, h1);                                                            \
            LOAD16(q + i + 32, l2, h2);                                                            \
            LOAD16(q + i + 48, l3, h3);                                                            \
            const __m256 lo = _mm256_add_ps(_mm256_add_ps(l0, l1), _mm256_add_ps(l2, l3));         \
            const __m256 hi = _mm256_add_ps(_mm256_add_ps(h0, h1), _mm256_add_ps(h2, h3));         \
            a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(lo)));                   \
            a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1)));                 \
            a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(hi)));                   \
            a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1)));                 \
        }                                                                                          \
        double v[CM__LANES], l[CM__LANES];                                                         \
        _mm256_storeu_pd(v, a0);                                                                   \
        _mm256_storeu_pd(v + 4, a1);                                                               \
        _mm256_storeu_pd(v + 8, a2);                                                               \
        _mm256_storeu_pd(v + 12, a3);                                                              \
        for (int j = 0; j < CM__LANES; ++j)                                                        \
            l[perm[j]] = v[j];                                                                     \
        for (; i < m; ++i)                                                                         \
            l[i % CM__LANES] += (double)LD(q[i]);                                                  \
        return cm__lane_tree(l);                                                                   \
    }
#define CM__AVX_LOAD_F16(p, lo, hi)                                                                \
    ((lo) = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))),                  \
     (hi) = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((p) + 8))))
#define CM__AVX_BF16(p)                                                                            \
    _mm256_castsi256_ps(_mm256_slli_epi32(                                                         \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))
#define CM__AVX_LOAD_BF16(p, lo, hi) ((lo) = CM__AVX_BF16(p), (hi) = CM__AVX_BF16((p) + 8))
/* float32: each conversion reads its four floats itself (fewer
 * instructions per line than loading eight and splitting them). */
__attribute__((target("avx2"))) static double cm__leaf_f32_avx(int64_t m, const float *q) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    CM__PF_DECL;
    for (; i + CM__LANES <= m; i += CM__LANES) {
        CM__PREFETCH(q + i);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(q + i)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(q + i + 4)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm_loadu_ps(q + i + 8)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm_loadu_ps(q + i + 12)));
    }
    double l[CM__LANES];
    _mm256_storeu_pd(l, a0);
    _mm256_storeu_pd(l + 4, a1);
    _mm256_storeu_pd(l + 8, a2);
    _mm256_storeu_pd(l + 12, a3);
    for (int j = 0; i < m; ++i, ++j)
        l[j] += (double)q[i];
    return cm__lane_tree(l);
}
/* bfloat16 for the leaves: 16 elements in one load, the even ones shifted
 * up and the odd ones masked (no shuffles), so lanes come even then odd. */
#define CM__AVX_LOAD_BF16_EO(p, ev, od)                                                            \
    do {                                                                                           \
        const __m256i x_ = _mm256_loadu_si256((const __m256i *)(const void *)(p));                 \
        (ev) = _mm256_castsi256_ps(_mm256_slli_epi32(x_, 16));                                     \
        (od) = _mm256_castsi256_ps(_mm256_and_si256(x_, _mm256_set1_epi32(-65536)));               \
    } while (0)
#define CM__PERM_NATURAL {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
#define CM__PERM_EVEN_ODD {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15}
CM__AVX_LEAF_H(cm__leaf_f16_avx, CM__AVX_LOAD_F16, cm__f16_to_f32, CM__PERM_NATURAL)
CM__AVX_LEAF_H(cm__leaf_bf16_avx, CM__AVX_LOAD_BF16_EO, cm__bf16_to_f32, CM__PERM_EVEN_ODD)

__attribute__((target("avx2"))) static void cm__vadd_f32_avx(int64_t m, const float *q, double *a) {
    int64_t j = 0;
    for (; j + 8 <= m; j += 8) {
        const __m256 x = _mm256_loadu_ps(q + j);
        _mm256_storeu_pd(a + j, _mm256_add_pd(_mm256_loadu_pd(a + j),
                                              _mm256_cvtps_pd(_mm256_castps256_ps128(x))));
        _mm256_storeu_pd(a + j + 4, _mm256_add_pd(_mm256_loadu_pd(a + j + 4),
                                                  _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    }
    for (; j < m; ++j)
        a[j] += (double)q[j];
}

/* cur[j] = the sum of `rows` rows (stride rs) of column j, rows in order
 * from 0.0, as the vector adds row by row give it; float16/bfloat16
 * (QUADS 1) add each four rows in float32 first ((r0 + r1) + (r2 + r3),
 * as cm__leaf_quads does along a run), the rows left over one by one.
 * Eight rows a pass over all m columns (eight streams of loads side by
 * side, each a long contiguous run), eight columns at a time in registers,
 * the running sums kept in cur (in cache) between passes: one load and
 * store of cur for eight rows. (Sixteen columns of 32 rows in registers,
 * 32 streams of one line each, read 0.1-0.2 of memcpy slower on a Xeon
 * and at about half the speed on an AMD EPYC; tools/bench/README.md has the figures.)
 * `below`: the rows of the column after these.
 * Narrow pieces (CM__VPF_MAX bytes of each row or less, with a gap to the
 * next row: 512 float32 columns of an 8192-wide matrix at 16 threads) are
 * too short for the hardware's stream prefetch, which starts over on every
 * row. On Intel each pass asks for the rows CM__VPF_AHEAD below its own, a
 * line at a time into L1, while it reads its own. A Xeon host, 8192 x 8192
 * float32 and 8192 x 16384 float16, the prefetch on and off alternated call
 * by call (31 pairs, a 512 MiB memcpy before each call), median speed-up of
 * a pair: 1.03-1.10 at 16 threads and 1.11-1.13 at 8. */
#define CM__VPF_AHEAD 8
#define CM__VPF_MAX 4096
/* Rows of a pass that ask for the row CM__VPF_AHEAD below: min(left, n),
 * 0 when left <= 0. */
static inline int cm__vpf_rows(int64_t left, int64_t n) {
    return left <= 0 ? 0 : (int)(left < n ? left : n);
}
#define CM__VPASS_AVX(name, T, LOAD8, LD, QUADS)                                                   \
    __attribute__((target("avx2,f16c"), always_inline)) static inline void name##_pass(            \
        int64_t m, const char *p, int64_t rs, double *cur, bool first, int nq, int ns, int pfn) {  \
        int64_t j = 0;                                                                             \
        for (; j + 8 <= m; j += 8) {                                                               \
            if (pfn > 0 && ((uintptr_t)j * sizeof(T) & 63) == 0)                                   \
                for (int t_ = 0; t_ < pfn; ++t_)                                                   \
                    _mm_prefetch(p + (CM__VPF_AHEAD + t_) * rs + j * (int64_t)sizeof(T),           \
                                 _MM_HINT_T0);                                                     \
            __m256d a = first ? _mm256_setzero_pd() : _mm256_loadu_pd(cur + j);                    \
            __m256d b = first ? _mm256_setzero_pd() : _mm256_loadu_pd(cur + j + 4);                \
            const char *r = p;                                                                     \
            for (int k = 0; k < nq; ++k, r += 4 * rs) {                                            \
                const __m256 s = _mm256_add_ps(                                                    \
                    _mm256_add_ps(LOAD8((const T *)(const void *)r + j),                           \
                                  LOAD8((const T *)(const void *)(r + rs) + j)),                   \
                    _mm256_add_ps(LOAD8((const T *)(const void *)(r + 2 * rs) + j),                \
                                  LOAD8((const T *)(const void *)(r + 3 * rs) + j)));              \
                a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(s)));                  \
                b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1)));                \
            }                                                                                      \
            for (int k = 0; k < ns; ++k, r += rs) {                                                \
                const __m256 x = LOAD8((const T *)(const void *)r + j);                            \
                a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));                  \
                b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));                \
            }                                                                                      \
            _mm256_storeu_pd(cur + j, a);                                                          \
            _mm256_storeu_pd(cur + j + 4, b);                                                      \
        }                                                                                          \
        for (; j < m; ++j) {                                                                       \
            double a = first ? 0.0 : cur[j];                                                       \
            const char *r = p;                                                                     \
            for (int k = 0; k < nq; ++k, r += 4 * rs) {                                            \
                float x[4];                                                                        \
                for (int t = 0; t < 4; ++t)                                                        \
                    x[t] = LD(((const T *)(const void *)(r + t * rs))[j]);                         \
                a += (double)((x[0] + x[1]) + (x[2] + x[3]));                                      \
            }                                                                                      \
            for (int k = 0; k < ns; ++k, r += rs)                                                  \
                a += (double)LD(((const T *)(const void *)r)[j]);                                  \
            cur[j] = a;                                                                            \
        }                                                                                          \
    }                                                                                              \
    __attribute__((target("avx2,f16c"))) static void name(                                         \
        int64_t m, int64_t rows, const char *p, int64_t rs, double *cur, int64_t below) {          \
        const int64_t quads = QUADS ? rows / 4 * 4 : 0;                                            \
        const int64_t w = m * (int64_t)sizeof(T);                                                  \
        const bool pf = cm__cpu_prefetch_distance() != 0 && w <= CM__VPF_MAX && rs > w;            \
        int64_t i = 0;                                                                             \
        /* rows from the block's start whose row CM__VPF_AHEAD below is in the column */           \
        const int64_t left = rows + below - CM__VPF_AHEAD;                                         \
        for (; i + 8 <= quads; i += 8)                                                             \
            name##_pass(m, p + i * rs, rs, cur, i == 0, 2, 0, pf ? cm__vpf_rows(left - i, 8) : 0); \
        for (; i + 4 <= quads; i += 4)                                                             \
            name##_pass(m, p + i * rs, rs, cur, i == 0, 1, 0, pf ? cm__vpf_rows(left - i, 4) : 0); \
        for (; i + 8 <= rows; i += 8)                                                              \
            name##_pass(m, p + i * rs, rs, cur, i == 0, 0, 8, pf ? cm__vpf_rows(left - i, 8) : 0); \
        if (i < rows)                                                                              \
            name##_pass(m, p + i * rs, rs, cur, i == 0, 0, (int)(rows - i),                        \
                        pf ? cm__vpf_rows(left - i, rows - i) : 0);                                \
    }
#define CM__AVX_LOAD8_F32(q) _mm256_loadu_ps(q)
#define CM__AVX_LOAD8_F16(q) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(q)))
CM__VPASS_AVX(cm__vblock_f32_avx, float, CM__AVX_LOAD8_F32, CM__LD_SAME, 0)
CM__VPASS_AVX(cm__vblock_f16_avx, uint16_t, CM__AVX_LOAD8_F16, cm__f16_to_f32, 1)
CM__VPASS_AVX(cm__vblock_bf16_avx, uint16_t, CM__AVX_BF16, cm__bf16_to_f32, 1)

void cm__cpu_reduce_force_portable(bool portable) {
    atomic_store_explicit(&cm__reduce_portable, portable, memory_order_relaxed);
}
#else
void cm__cpu_reduce_force_portable(bool portable) {
    (void)portable; /* the portable loops are the only ones */
}
#endif

/* One leaf of any float dtype at any stride: float32 and float64 rows are
 * read in place, the rest converted to float32 first (exactly). */
static double cm__leaf(cm_dtype d, int64_t m, const char *p, int64_t s) {
    if (d == CM_FLOAT64) {
        if (s == (int64_t)sizeof(double))
            return cm__leaf_f64(m, (const double *)(const void *)p);
        double t[CM__LEAF];
        for (int64_t i = 0; i < m; ++i)
            memcpy(&t[i], p + i * s, sizeof t[i]);
        return cm__leaf_f64(m, t);
    }
#ifdef CM__X86
    if (s == (int64_t)cm__dtype(d)->size && cm__avx2_usable()) {
        if (d == CM_FLOAT32)
            return cm__leaf_f32_avx(m, (const float *)(const void *)p);
        if (d == CM_FLOAT16)
            return cm__leaf_f16_avx(m, (const uint16_t *)(const void *)p);
        if (d == CM_BFLOAT16)
            return cm__leaf_bf16_avx(m, (const uint16_t *)(const void *)p);
    }
#endif
    if (d == CM_FLOAT32 && s == (int64_t)sizeof(float))
        return cm__leaf_f32(m, (const float *)(const void *)p);
    float t[CM__LEAF];
    cm__cpu_cast_kernel(d, CM_FLOAT32)(m, (char *)t, (int64_t)sizeof(float), p, s);
    return d == CM_FLOAT32 ? cm__leaf_f32(m, t) : cm__leaf_quads(m, t);
}

/* Where the pairwise tree cuts n elements: the first half's length, a
 * multiple of CM__LEAF (n > CM__LEAF). */
static int64_t cm__half(int64_t n) {
    const int64_t leaves = cm__div_up_i64(n, CM__LEAF);
    return (leaves + 1) / 2 * CM__LEAF;
}

/* The subtrees `depth` levels below the tree over [off, off + n), in order
 * (a node of at most one leaf is not cut further): offsets and lengths
 * appended at [*count]. */
static void cm__cut(int64_t off, int64_t n, int depth, int64_t *offs, int64_t *lens,
                    int64_t *count) {
    if (depth == 0 || n <= CM__LEAF) {
        offs[*count] = off;
        lens[(*count)++] = n;
        return;
    }
    const int64_t h = cm__half(n);
    cm__cut(off, h, depth - 1, offs, lens, count);
    cm__cut(off + h, n - h, depth - 1, offs, lens, count);
}

/* The tree's sum from its subtrees' sums (cm__cut's order). */
static double cm__cut_sum(const double *sums, int64_t n, int depth, int64_t *next) {
    if (depth == 0 || n <= CM__LEAF)
        return sums[(*next)++];
    const int64_t h = cm__half(n);
    const double a = cm__cut_sum(sums, h, depth - 1, next);
    return a + cm__cut_sum(sums, n - h, depth - 1, next);
}

#define CM__STREAMS 4 /* subtrees walked side by side */
/* Runs shorter than this many bytes are walked in one stream: rows of a
 * matrix read one after another are one long stream already, which four
 * short ones per row would break up. */
#define CM__SIDE_MIN_BYTES (256 * 1024)

/* The pairwise sums of k <= CM__STREAMS subtrees (at p[i], n[i] elements)
 * into out[i], walked side by side: one leaf of each in turn, so that k
 * streams of loads are in flight (one stream leaves a server core's memory
 * bandwidth unused). Each out[i] is the subtree's own recursion, bit for
 * bit: a node of at most one leaf waits whole while the others split. */
static void cm__fsum_side(cm_dtype d, int k, const char *const *p, const int64_t *n, int64_t s,
                          double *out) {
    bool split = false;
    for (int i = 0; i < k; ++i)
        split = split || n[i] > CM__LEAF;
    if (!split) {
        for (int i = 0; i < k; ++i)
            out[i] = cm__leaf(d, n[i], p[i], s);
        return;
    }
    const char *rp[CM__STREAMS];
    int64_t ln[CM__STREAMS], rn[CM__STREAMS];
    int kr = 0;
    for (int i = 0; i < k; ++i) {
        ln[i] = n[i] > CM__LEAF ? cm__half(n[i]) : n[i];
        if (ln[i] < n[i]) {
            rp[kr] = p[i] + ln[i] * s;
            rn[kr++] = n[i] - ln[i];
        }
    }
    double a[CM__STREAMS], b[CM__STREAMS];
    cm__fsum_side(d, k, p, ln, s, a);
    cm__fsum_side(d, kr, rp, rn, s, b);
    for (int i = 0, j = 0; i < k; ++i)
        out[i] = ln[i] < n[i] ? a[i] + b[j++] : a[i];
}

/* The pairwise sum of n elements: halves cut at a multiple of CM__LEAF
 * down to leaves (cm__fsum_side walks the four quarters together). */
static double cm__fsum(cm_dtype d, int64_t n, const char *p, int64_t s) {
    if (n <= CM__LEAF)
        return cm__leaf(d, n, p, s);
    const uint64_t step = s < 0 ? 0 - (uint64_t)s : s > 0 ? (uint64_t)s : 1;
    if ((uint64_t)n < CM__SIDE_MIN_BYTES / step) {
        const int64_t h = cm__half(n); /* the plain recursion */
        const double a = cm__fsum(d, h, p, s);
        return a + cm__fsum(d, n - h, p + h * s, s);
    }
    int64_t offs[CM__STREAMS], lens[CM__STREAMS], k = 0, next = 0;
    cm__cut(0, n, 2, offs, lens, &k);
    const char *q[CM__STREAMS];
    for (int64_t i = 0; i < k; ++i)
        q[i] = p + offs[i] * s;
    double sums[CM__STREAMS];
    cm__fsum_side(d, (int)k, q, lens, s, sums);
    return cm__cut_sum(sums, n, 2, &next);
}

/* A binary counter of partial sums: push k-th block's sum, merging equal
 * subtrees (earlier + later); fold ends it. */
typedef struct cm__pairs {
    double st[72];
    int depth;
    int64_t count;
} cm__pairs;

static void cm__pairs_push(cm__pairs *c, double v) {
    for (int64_t k = c->count++; k & 1; k >>= 1)
        v = c->st[--c->depth] + v;
    c->st[c->depth++] = v;
}

static double cm__pairs_fold(const cm__pairs *c) {
    if (c->depth == 0)
        return 0.0;
    double v = c->st[c->depth - 1];
    for (int i = c->depth - 2; i >= 0; --i)
        v = c->st[i] + v;
    return v;
}

/* Max and min over contiguous floats: lanes start at `init` (-inf or
 * +inf); once a lane meets a NaN it keeps it. A lane ends as the first of
 * its elements (in order) that is NaN, else the first that is largest
 * (smallest): so two steps of 16 are first picked between themselves and
 * the pick then against the lanes (the same result, bit for bit, and half
 * as long a chain of dependent picks per element: the loop was bound by
 * it on a Xeon). */
/* The lanes l[16] after i elements (a multiple of 16): the rest of the n
 * (into lanes 0, 1...), then the lanes in order; returns the pick. */
#define CM__FMM_FINISH(OP)                                                                         \
    do {                                                                                           \
        for (int j = 0; i < n; ++i, ++j) {                                                         \
            const float x = q[i];                                                                  \
            if (l[j] == l[j] && (x != x || x OP l[j]))                                             \
                l[j] = x;                                                                          \
        }                                                                                          \
        float m = l[0];                                                                            \
        for (int j = 1; j < CM__LANES; ++j)                                                        \
            if (m == m && (l[j] != l[j] || l[j] OP m))                                             \
                m = l[j];                                                                          \
        return m;                                                                                  \
    } while (0)
#ifdef CM__VEC
/* a, or x where x comes later and wins: a not NaN and x NaN or beyond a */
#define CM__FMM_PICK(a, x, OP)                                                                     \
    __extension__({                                                                                \
        const cm__v8i32 t_ = (((x)OP(a)) | ((x) != (x))) & ((a) == (a));                           \
        (cm__v8f)(((cm__v8i32)(x) & t_) | ((cm__v8i32)(a) & ~t_));                                 \
    })
#define CM__FMM_F32(name, OP)                                                                      \
    CM__CLONES static float name(int64_t n, const float *q, float init) {                          \
        float l[CM__LANES];                                                                        \
        int64_t i = 0;                                                                             \
        CM__PF_DECL;                                                                               \
        cm__v8f a0 = {init, init, init, init, init, init, init, init}, a1 = a0;                    \
        for (; i + 2 * CM__LANES <= n; i += 2 * CM__LANES) {                                       \
            CM__PREFETCH(q + i);                                                                   \
            CM__PREFETCH(q + i + CM__LANES);                                                       \
            cm__v8f x0, x1, y0, y1;                                                                \
            memcpy(&x0, q + i, sizeof x0);                                                         \
            memcpy(&x1, q + i + 8, sizeof x1);                                                     \
            memcpy(&y0, q + i + 16, sizeof y0);                                                    \
            memcpy(&y1, q + i + 24, sizeof y1);                                                    \
            x0 = CM__FMM_PICK(x0, y0, OP);                                                         \
            x1 = CM__FMM_PICK(x1, y1, OP);                                                         \
            a0 = CM__FMM_PICK(a0, x0, OP);                                                         \
            a1 = CM__FMM_PICK(a1, x1, OP);                                                         \
        }                                                                                          \
        for (; i + CM__LANES <= n; i += CM__LANES) {                                               \
            cm__v8f x0, x1;                                                                        \
            memcpy(&x0, q + i, sizeof x0);                                                         \
            memcpy(&x1, q + i + 8, sizeof x1);                                                     \
            a0 = CM__FMM_PICK(a0, x0, OP);                                                         \
            a1 = CM__FMM_PICK(a1, x1, OP);                                                         \
        }                                                                                          \
        memcpy(l, &a0, sizeof a0);                                                                 \
        memcpy(l + 8, &a1, sizeof a1);                                                             \
        CM__FMM_FINISH(OP);                                                                        \
    }
#else
#define CM__FMM_F32(name, OP)                                                                      \
    static float name(int64_t n, const float *q, float init) {                                     \
        float l[CM__LANES];                                                                        \
        int64_t i = 0;                                                                             \
        for (int j = 0; j < CM__LANES; ++j)                                                        \
            l[j] = init;                                                                           \
        for (; i + CM__LANES <= n; i += CM__LANES)                                                 \
            for (int j = 0; j < CM__LANES; ++j) {                                                  \
                const float x = q[i + j];                                                          \
                if (l[j] == l[j] && (x != x || x OP l[j]))                                         \
                    l[j] = x;                                                                      \
            }                                                                                      \
        CM__FMM_FINISH(OP);                                                                        \
    }
#endif
CM__FMM_F32(cm__max_f32, >)
CM__FMM_F32(cm__min_f32, <)

#ifdef CM__X86
/* The same lanes and picks without NaN: x86's maxps(x, a) is "x > a ? x :
 * a" and minps(x, a) "x < a ? x : a", the pick itself when neither is NaN
 * (ties, +0 against -0 included, keep a). The vector steps also note any
 * NaN; *clean says whether there was none (else the result is not the pick
 * and the exact kernel reads the run again). One instruction a pick instead
 * of five: on a Xeon host at a 1.9 GHz clock the exact loop read 0.34 of
 * memcpy on one core, where NumPy read 0.69; a 1 MiB run in cache on one
 * core of an AMD EPYC took 1.0 ns a line, now 0.55. */
#define CM__FMM_AVX(name, VOP, OP)                                                                 \
    __attribute__((target("avx2"))) static float name##_avx(int64_t n, const float *q, float init, \
                                                            bool *clean) {                         \
        float l[CM__LANES];                                                                        \
        int64_t i = 0;                                                                             \
        CM__PF_DECL;                                                                               \
        __m256 a0 = _mm256_set1_ps(init), a1 = a0, nans = _mm256_setzero_ps();                     \
        for (; i + 2 * CM__LANES <= n; i += 2 * CM__LANES) {                                       \
            CM__PREFETCH(q + i);                                                                   \
            CM__PREFETCH(q + i + CM__LANES);                                                       \
            __m256 x0 = _mm256_loadu_ps(q + i), x1 = _mm256_loadu_ps(q + i + 8);                   \
            const __m256 y0 = _mm256_loadu_ps(q + i + 16), y1 = _mm256_loadu_ps(q + i + 24);       \
            nans = _mm256_or_ps(nans, _mm256_or_ps(_mm256_cmp_ps(x0, y0, _CMP_UNORD_Q),            \
                                                   _mm256_cmp_ps(x1, y1, _CMP_UNORD_Q)));          \
            x0 = VOP(y0, x0);                                                                      \
            x1 = VOP(y1, x1);                                                                      \
            a0 = VOP(x0, a0);                                                                      \
            a1 = VOP(x1, a1);                                                                      \
        }                                                                                          \
        for (; i + CM__LANES <= n; i += CM__LANES) {                                               \
            const __m256 x0 = _mm256_loadu_ps(q + i), x1 = _mm256_loadu_ps(q + i + 8);             \
            nans = _mm256_or_ps(nans, _mm256_cmp_ps(x0, x1, _CMP_UNORD_Q));                        \
            a0 = VOP(x0, a0);                                                                      \
            a1 = VOP(x1, a1);                                                                      \
        }                                                                                          \
        *clean = _mm256_movemask_ps(nans) == 0;                                                    \
        _mm256_storeu_ps(l, a0);                                                                   \
        _mm256_storeu_ps(l + 8, a1);                                                               \
        CM__FMM_FINISH(OP);                                                                        \
    }
CM__FMM_AVX(cm__max_f32, _mm256_max_ps, >)
CM__FMM_AVX(cm__min_f32, _mm256_min_ps, <)
#endif

/* Integer sums of contiguous elements, modulo 2^64: 32- and 64-bit ones
 * widen to 64-bit lanes. */
#ifdef CM__VEC
#define CM__ISUM_WIDE(name, T, VIN, VWIDE, EXT)                                                    \
    CM__CLONES static uint64_t name(int64_t n, const T *q) {                                       \
        uint64_t s = 0;                                                                            \
        int64_t i = 0;                                                                             \
        CM__PF_DECL;                                                                               \
        cm__v4u64 a0 = {0}, a1 = {0};                                                              \
        for (; i + 8 <= n; i += 8) {                                                               \
            CM__PREFETCH(q + i);                                                                   \
            VIN x0, x1;                                                                            \
            memcpy(&x0, q + i, sizeof x0);                                                         \
            memcpy(&x1, q + i + 4, sizeof x1);                                                     \
            a0 += (cm__v4u64) __builtin_convertvector(x0, VWIDE);                                  \
            a1 += (cm__v4u64) __builtin_convertvector(x1, VWIDE);                                  \
        }                                                                                          \
        uint64_t l[8];                                                                             \
        memcpy(l, &a0, sizeof a0);                                                                 \
        memcpy(l + 4, &a1, sizeof a1);                                                             \
        for (int j = 0; j < 8; ++j)                                                                \
            s += l[j];                                                                             \
        for (; i < n; ++i)                                                                         \
            s += (uint64_t)(EXT)q[i];                                                              \
        return s;                                                                                  \
    }
/* Max (OP >) or min (OP <) of n >= 1 contiguous integers. */
#define CM__IMM(name, T, VT, MT, OP)                                                               \
    CM__CLONES static T name(int64_t n, const T *q, T init) {                                      \
        enum { NL = (int)(sizeof(VT) / sizeof(T)) };                                               \
        T l[2 * NL];                                                                               \
        int64_t i = 0;                                                                             \
        CM__PF_DECL;                                                                               \
        for (int j = 0; j < 2 * NL; ++j)                                                           \
            l[j] = init;                                                                           \
        VT a0, a1;                                                                                 \
        memcpy(&a0, l, sizeof a0);                                                                 \
        memcpy(&a1, l + NL, sizeof a1);                                                            \
        for (; i + 2 * NL <= n; i += 2 * NL) {                                                     \
            CM__PREFETCH(q + i);                                                                   \
            VT x0, x1;                                                                             \
            memcpy(&x0, q + i, sizeof x0);                                                         \
            memcpy(&x1, q + i + NL, sizeof x1);                                                    \
            const MT k0 = x0 OP a0, k1 = x1 OP a1;                                                 \
            a0 = (VT)(((MT)x0 & k0) | ((MT)a0 & ~k0));                                             \
            a1 = (VT)(((MT)x1 & k1) | ((MT)a1 & ~k1));                                             \
        }                                                                                          \
        memcpy(l, &a0, sizeof a0);                                                                 \
        memcpy(l + NL, &a1, sizeof a1);                                                            \
        T m = init;                                                                                \
        for (int j = 0; j < 2 * NL; ++j)                                                           \
            m = l[j] OP m ? l[j] : m;                                                              \
        for (; i < n; ++i)                                                                         \
            m = q[i] OP m ? q[i] : m;                                                              \
        return m;                                                                                  \
    }
#else
#define CM__ISUM_WIDE(name, T, VIN, VWIDE, EXT)                                                    \
    static uint64_t name(int64_t n, const T *q) {                                                  \
        uint64_t s = 0;                                                                            \
        for (int64_t i = 0; i < n; ++i)                                                            \
            s += (uint64_t)(EXT)q[i];                                                              \
        return s;                                                                                  \
    }
#define CM__IMM(name, T, VT, MT, OP)                                                               \
    static T name(int64_t n, const T *q, T init) {                                                 \
        T m = init;                                                                                \
        for (int64_t i = 0; i < n; ++i)                                                            \
            m = q[i] OP m ? q[i] : m;                                                              \
        return m;                                                                                  \
    }
#endif

/* 8- and 16-bit sums: 32 lanes of 32 bits over chunks of 2^15 (exact),
 * plain arrays (GCC widens these well, and not 8-byte vector types). */
#define CM__ISUM_SMALL(name, T, ELEM, EXT)                                                         \
    CM__CLONES static uint64_t name(int64_t n, const T *q) {                                       \
        uint64_t s = 0;                                                                            \
        while (n > 0) {                                                                            \
            const int64_t m = n < 32768 ? n : 32768;                                               \
            int64_t i = 0;                                                                         \
            CM__PF_DECL;                                                                           \
            ELEM l[32] = {0};                                                                      \
            for (; i + 32 <= m; i += 32) {                                                         \
                CM__PREFETCH(q + i);                                                               \
                for (int j = 0; j < 32; ++j)                                                       \
                    l[j] += (ELEM)q[i + j];                                                        \
            }                                                                                      \
            for (int j = 0; j < 32; ++j)                                                           \
                s += (uint64_t)(EXT)l[j];                                                          \
            for (; i < m; ++i)                                                                     \
                s += (uint64_t)(EXT)q[i];                                                          \
            q += m;                                                                                \
            n -= m;                                                                                \
        }                                                                                          \
        return s;                                                                                  \
    }

CM__ISUM_SMALL(cm__isum_i8_lanes, int8_t, int32_t, int64_t)
CM__ISUM_SMALL(cm__isum_u8_lanes, uint8_t, uint32_t, uint64_t)
#ifdef CM__X86
/* 8-bit sums with AVX2: vpsadbw adds each eight bytes into a 64-bit lane
 * in one instruction; signed bytes are biased to x + 128 first (the bias,
 * 128 per element, is taken off the total; exact modulo 2^64). */
__attribute__((target("avx2"))) static uint64_t cm__isum_8_avx(int64_t n, const uint8_t *q,
                                                               bool sgn) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i bias = _mm256_set1_epi8(sgn ? (char)-128 : 0);
    __m256i a0 = zero, a1 = zero;
    int64_t i = 0;
    CM__PF_DECL;
    for (; i + 64 <= n; i += 64) {
        CM__PREFETCH(q + i);
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + i));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + i + 32));
        a0 = _mm256_add_epi64(a0, _mm256_sad_epu8(_mm256_xor_si256(x0, bias), zero));
        a1 = _mm256_add_epi64(a1, _mm256_sad_epu8(_mm256_xor_si256(x1, bias), zero));
    }
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)(void *)l, _mm256_add_epi64(a0, a1));
    uint64_t s = (l[0] + l[1]) + (l[2] + l[3]);
    if (sgn)
        s -= 128u * (uint64_t)i;
    for (; i < n; ++i)
        s += sgn ? (uint64_t)(int64_t)(int8_t)q[i] : (uint64_t)q[i];
    return s;
}
#endif
/* name: the AVX2 kernel AVX (over the elements as unsigned UT, signed
 * when SGN) where usable, else name##_lanes. */
#ifdef CM__X86
#define CM__ISUM_PICK(name, T, AVX, UT, SGN)                                                       \
    static uint64_t name(int64_t n, const T *q) {                                                  \
        if (cm__avx2_usable())                                                                     \
            return AVX(n, (const UT *)(const void *)q, SGN);                                       \
        return name##_lanes(n, q);                                                                 \
    }
#else
#define CM__ISUM_PICK(name, T, AVX, UT, SGN)                                                       \
    static uint64_t name(int64_t n, const T *q) {                                                  \
        return name##_lanes(n, q);                                                                 \
    }
#endif
CM__ISUM_PICK(cm__isum_i8, int8_t, cm__isum_8_avx, uint8_t, true)
CM__ISUM_PICK(cm__isum_u8, uint8_t, cm__isum_8_avx, uint8_t, false)
CM__ISUM_SMALL(cm__isum_i16, int16_t, int32_t, int64_t)
CM__ISUM_SMALL(cm__isum_u16, uint16_t, uint32_t, uint64_t)
CM__ISUM_WIDE(cm__isum_i32_lanes, int32_t, cm__v4i32, cm__v4i64, int64_t)
CM__ISUM_WIDE(cm__isum_u32_lanes, uint32_t, cm__v4u32, cm__v4u64, uint64_t)
#ifdef CM__X86
/* 32-bit sums with AVX2: each element as lo + 65536 hi (lo its low 16
 * bits, hi the rest, signed for int32), summed in 32-bit lanes over
 * chunks of 2^16 elements a lane (no lane overflows; callers pass 64Ki
 * elements or fewer, cm__side_walk), then into 64 bits:
 * exact modulo 2^64 with no widening per element. (GCC lowered the
 * widening to three shuffles each four elements: 1.9 ns a line in cache
 * on one AMD EPYC core.) */
__attribute__((target("avx2"))) static uint64_t cm__isum_32_avx(int64_t n, const uint32_t *q,
                                                                bool sgn) {
    const __m256i low = _mm256_set1_epi32(0xffff);
    uint64_t s = 0;
    int64_t i = 0;
    CM__PF_DECL;
    while (n - i >= 16) {
        const int64_t left = (n - i) / 16 * 16;
        const int64_t end = i + (left < ((int64_t)16 << 16) ? left : ((int64_t)16 << 16));
        __m256i lo0 = _mm256_setzero_si256(), lo1 = lo0, hi0 = lo0, hi1 = lo0;
        for (; i < end; i += 16) {
            CM__PREFETCH(q + i);
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + i));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + i + 8));
            lo0 = _mm256_add_epi32(lo0, _mm256_and_si256(x0, low));
            lo1 = _mm256_add_epi32(lo1, _mm256_and_si256(x1, low));
            hi0 =
                _mm256_add_epi32(hi0, sgn ? _mm256_srai_epi32(x0, 16) : _mm256_srli_epi32(x0, 16));
            hi1 =
                _mm256_add_epi32(hi1, sgn ? _mm256_srai_epi32(x1, 16) : _mm256_srli_epi32(x1, 16));
        }
        uint32_t l[32];
        _mm256_storeu_si256((__m256i *)(void *)l, lo0);
        _mm256_storeu_si256((__m256i *)(void *)(l + 8), lo1);
        _mm256_storeu_si256((__m256i *)(void *)(l + 16), hi0);
        _mm256_storeu_si256((__m256i *)(void *)(l + 24), hi1);
        for (int j = 0; j < 16; ++j)
            s += (uint64_t)l[j] +
                 ((sgn ? (uint64_t)(int64_t)(int32_t)l[16 + j] : (uint64_t)l[16 + j]) << 16);
    }
    for (; i < n; ++i)
        s += sgn ? (uint64_t)(int64_t)(int32_t)q[i] : (uint64_t)q[i];
    return s;
}
#endif
CM__ISUM_PICK(cm__isum_i32, int32_t, cm__isum_32_avx, uint32_t, true)
CM__ISUM_PICK(cm__isum_u32, uint32_t, cm__isum_32_avx, uint32_t, false)
CM__ISUM_WIDE(cm__isum_i64, int64_t, cm__v4i64, cm__v4i64, int64_t)
CM__ISUM_WIDE(cm__isum_u64, uint64_t, cm__v4u64, cm__v4u64, uint64_t)

#define CM__IMM_PAIR(E, T, VT, MT)                                                                 \
    CM__IMM(cm__imax_##E, T, VT, MT, >)                                                            \
    CM__IMM(cm__imin_##E, T, VT, MT, <)
CM__IMM_PAIR(i8, int8_t, cm__v32i8, cm__v32i8)
CM__IMM_PAIR(u8, uint8_t, cm__v32u8, cm__v32i8)
CM__IMM_PAIR(i16, int16_t, cm__v16i16, cm__v16i16)
CM__IMM_PAIR(u16, uint16_t, cm__v16u16, cm__v16i16)
CM__IMM_PAIR(i32, int32_t, cm__v8i32, cm__v8i32)
CM__IMM_PAIR(u32, uint32_t, cm__v8u32, cm__v8i32)
CM__IMM_PAIR(i64, int64_t, cm__v4i64, cm__v4i64)
CM__IMM_PAIR(u64, uint64_t, cm__v4u64, cm__v4i64)

/* AVX2's own max and min of 8-, 16- and 32-bit integers (one instruction,
 * where the compare and blend above make a dependent chain), four vectors
 * a step. Exact in any order. 64-bit integers have none before AVX-512.
 * A 1 MiB run in cache on one core of an AMD EPYC: int32 0.80 -> 0.50 ns
 * a line, int8 1.3 -> 0.61. */
#ifdef CM__X86
#define CM__IMM_AVX(name, T, VOP, OP)                                                              \
    __attribute__((target("avx2"))) static T name(int64_t n, const T *q, T init) {                 \
        enum { NL = (int)(32 / sizeof(T)) };                                                       \
        T l[NL];                                                                                   \
        for (int j = 0; j < NL; ++j)                                                               \
            l[j] = init;                                                                           \
        __m256i a0 = _mm256_loadu_si256((const __m256i *)(const void *)l), a1 = a0, a2 = a0,       \
                a3 = a0;                                                                           \
        int64_t i = 0;                                                                             \
        CM__PF_DECL;                                                                               \
        for (; i + 4 * NL <= n; i += 4 * NL) {                                                     \
            const __m256i *v = (const __m256i *)(const void *)(q + i);                             \
            CM__PREFETCH(q + i);                                                                   \
            CM__PREFETCH(q + i + 2 * NL);                                                          \
            a0 = VOP(a0, _mm256_loadu_si256(v));                                                   \
            a1 = VOP(a1, _mm256_loadu_si256(v + 1));                                               \
            a2 = VOP(a2, _mm256_loadu_si256(v + 2));                                               \
            a3 = VOP(a3, _mm256_loadu_si256(v + 3));                                               \
        }                                                                                          \
        for (; i + NL <= n; i += NL)                                                               \
            a0 = VOP(a0, _mm256_loadu_si256((const __m256i *)(const void *)(q + i)));              \
        _mm256_storeu_si256((__m256i *)(void *)l, VOP(VOP(a0, a1), VOP(a2, a3)));                  \
        T m = init;                                                                                \
        for (int j = 0; j < NL; ++j)                                                               \
            m = l[j] OP m ? l[j] : m;                                                              \
        for (; i < n; ++i)                                                                         \
            m = q[i] OP m ? q[i] : m;                                                              \
        return m;                                                                                  \
    }
#define CM__IMM_AVX_PAIR(E, T, MAXI, MINI)                                                         \
    CM__IMM_AVX(cm__imax_avx_##E, T, MAXI, >)                                                      \
    CM__IMM_AVX(cm__imin_avx_##E, T, MINI, <)
CM__IMM_AVX_PAIR(i8, int8_t, _mm256_max_epi8, _mm256_min_epi8)
CM__IMM_AVX_PAIR(u8, uint8_t, _mm256_max_epu8, _mm256_min_epu8)
CM__IMM_AVX_PAIR(i16, int16_t, _mm256_max_epi16, _mm256_min_epi16)
CM__IMM_AVX_PAIR(u16, uint16_t, _mm256_max_epu16, _mm256_min_epu16)
CM__IMM_AVX_PAIR(i32, int32_t, _mm256_max_epi32, _mm256_min_epi32)
CM__IMM_AVX_PAIR(u32, uint32_t, _mm256_max_epu32, _mm256_min_epu32)
#define CM__IMM_BEST(KIND, E) (cm__avx2_usable() ? cm__i##KIND##_avx_##E : cm__i##KIND##_##E)
#else
#define CM__IMM_BEST(KIND, E) cm__i##KIND##_##E
#endif
/* 64-bit integers: the compare and blend everywhere. */
#define CM__IMM_PLAIN(KIND, E) cm__i##KIND##_##E

/* The contiguous integer kernels as cm__acc_fn (s is the element size). */
#define CM__IFAST(E, SUF, T, FIELD, AT, TMIN, TMAX, PICK)                                          \
    static void cm__fsum_##E(int64_t n, const char *p, int64_t s, void *acc) {                     \
        (void)s;                                                                                   \
        ((cm__acc *)acc)->u += cm__isum_##SUF(n, (const T *)(const void *)p);                      \
    }                                                                                              \
    static void cm__fmax_##E(int64_t n, const char *p, int64_t s, void *acc_) {                    \
        (void)s;                                                                                   \
        cm__acc *acc = acc_;                                                                       \
        if (n > 0) {                                                                               \
            const AT v = (AT)PICK(max, SUF)(n, (const T *)(const void *)p, TMIN);                  \
            acc->FIELD = CM__IMAX(acc->FIELD, v);                                                  \
        }                                                                                          \
    }                                                                                              \
    static void cm__fmin_##E(int64_t n, const char *p, int64_t s, void *acc_) {                    \
        (void)s;                                                                                   \
        cm__acc *acc = acc_;                                                                       \
        if (n > 0) {                                                                               \
            const AT v = (AT)PICK(min, SUF)(n, (const T *)(const void *)p, TMAX);                  \
            acc->FIELD = CM__IMIN(acc->FIELD, v);                                                  \
        }                                                                                          \
    }
CM__IFAST(CM_BOOL, u8, uint8_t, i, int64_t, 0, UINT8_MAX, CM__IMM_BEST)
CM__IFAST(CM_INT8, i8, int8_t, i, int64_t, INT8_MIN, INT8_MAX, CM__IMM_BEST)
CM__IFAST(CM_INT16, i16, int16_t, i, int64_t, INT16_MIN, INT16_MAX, CM__IMM_BEST)
CM__IFAST(CM_INT32, i32, int32_t, i, int64_t, INT32_MIN, INT32_MAX, CM__IMM_BEST)
CM__IFAST(CM_INT64, i64, int64_t, i, int64_t, INT64_MIN, INT64_MAX, CM__IMM_PLAIN)
CM__IFAST(CM_UINT8, u8, uint8_t, u, uint64_t, 0, UINT8_MAX, CM__IMM_BEST)
CM__IFAST(CM_UINT16, u16, uint16_t, u, uint64_t, 0, UINT16_MAX, CM__IMM_BEST)
CM__IFAST(CM_UINT32, u32, uint32_t, u, uint64_t, 0, UINT32_MAX, CM__IMM_BEST)
CM__IFAST(CM_UINT64, u64, uint64_t, u, uint64_t, 0, UINT64_MAX, CM__IMM_PLAIN)

/* Float max and min over contiguous float32, or float16/bfloat16 converted
 * to float32 a leaf at a time (exact), at any stride. */
static void cm__fminmax_run(cm_dtype d, bool max, int64_t n, const char *p, int64_t s,
                            cm__acc *acc) {
    const float init = max ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < n;) {
        float t[CM__LEAF];
        const float *q = t;
        int64_t m = n - i < CM__LEAF ? n - i : CM__LEAF;
        if (d == CM_FLOAT32 && s == (int64_t)sizeof(float)) {
            q = (const float *)(const void *)(p + i * s);
            m = n - i; /* all of it at once */
        } else {
            cm__cpu_cast_kernel(d, CM_FLOAT32)(m, (char *)t, (int64_t)sizeof(float), p + i * s, s);
        }
        float v = 0.0f;
        bool clean = false;
#ifdef CM__X86
        if (cm__avx2_usable())
            v = max ? cm__max_f32_avx(m, q, init, &clean) : cm__min_f32_avx(m, q, init, &clean);
#endif
        if (!clean)
            v = max ? cm__max_f32(m, q, init) : cm__min_f32(m, q, init);
        acc->d = max ? CM__FMAX(acc->d, v) : CM__FMIN(acc->d, v);
        i += m;
    }
}

/* An integer reduction fn (sums modulo 2^64, max, min) of n contiguous
 * elements of isz bytes: long runs as CM__STREAMS quarters side by side,
 * CM__SIDE_BYTES of each in turn (several streams of loads, as
 * cm__fsum_side). Float max and min read each 2^18-element block in one
 * pass (cm__fminmax_blocks): quarters of a block, 256 KiB apart, read at
 * half the speed of one pass on an AMD EPYC and no faster on a Xeon. */
#define CM__SIDE_BYTES 4096
static void cm__side_walk(cm__acc_fn fn, int64_t n, const char *p, int64_t isz, void *acc) {
    const int64_t chunk = CM__SIDE_BYTES / isz;
    const int64_t part = cm__div_up_i64(n, CM__STREAMS);
    if (n < CM__SIDE_MIN_BYTES / isz) {
        fn(n, p, isz, acc);
        return;
    }
    for (int64_t off = 0; off < part; off += chunk)
        for (int64_t k = 0; k < CM__STREAMS; ++k) {
            const int64_t b = k * part + off;
            const int64_t end = n < (k + 1) * part ? n : (k + 1) * part;
            const int64_t m = end - b < chunk ? end - b : chunk;
            if (m > 0)
                fn(m, p + b * isz, isz, acc);
        }
}

/* The contiguous integer kernels, [dtype][kind]; NULL for floats. */
#define CM__IFAST_ROW(E) [E] = {cm__fsum_##E, cm__fmax_##E, cm__fmin_##E},
static const cm__acc_fn cm__ifast_table[CM_DTYPE_COUNT][CM__RKINDS] = {
    CM__IFAST_ROW(CM_BOOL) CM__IFAST_ROW(CM_INT8) CM__IFAST_ROW(CM_INT16) CM__IFAST_ROW(CM_INT32)
        CM__IFAST_ROW(CM_INT64) CM__IFAST_ROW(CM_UINT8) CM__IFAST_ROW(CM_UINT16)
            CM__IFAST_ROW(CM_UINT32) CM__IFAST_ROW(CM_UINT64)};

/* How one reduction starts and ends for the input dtype. */
typedef struct cm__red {
    int kind; /* CM__RSUM, CM__RMAX, CM__RMIN */
    bool mean;
    int64_t count;      /* elements per output, for mean */
    cm_dtype acc_dtype; /* CM_FLOAT64, CM_INT64 or CM_UINT64 */
    char field;         /* the cm__acc member used: 'd', 'i' or 'u' */
    cm__acc init;
    cm_dtype out_dtype;
    cm__acc_fn scalar, vector;
    cm__acc_fn fast; /* contiguous integers, or NULL */
    cm_dtype in;
    int64_t isz; /* the input's element size */
} cm__red;

static void cm__red_setup(cm__red *r, const cm__op *op, int64_t count) {
    const cm_dtype in = op->in[0].dtype;
    const cm_dtype_kind k = cm__dtype(in)->kind;
    const bool is_float = k == CM_KIND_FLOAT;
    const bool is_signed = k == CM_KIND_SIGNED || k == CM_KIND_BOOL;
    memset(r, 0, sizeof *r);
    r->mean = op->code == CM_REDUCE_MEAN;
    r->count = count;
    r->kind = op->code == CM_REDUCE_MAX   ? CM__RMAX
              : op->code == CM_REDUCE_MIN ? CM__RMIN
                                          : CM__RSUM;
    r->acc_dtype = is_float ? CM_FLOAT64 : is_signed ? CM_INT64 : CM_UINT64;
    r->field = is_float ? 'd' : (is_signed && r->kind != CM__RSUM) ? 'i' : 'u';
    r->out_dtype = op->out.dtype;
    if (r->kind == CM__RSUM) {
        if (is_float)
            r->init.d = 0.0;
        else
            r->init.u = 0;
    } else if (is_float) {
        r->init.d = r->kind == CM__RMAX ? -INFINITY : INFINITY;
    } else if (is_signed) {
        r->init.i = r->kind == CM__RMAX ? INT64_MIN : INT64_MAX;
    } else {
        r->init.u = r->kind == CM__RMAX ? 0 : UINT64_MAX;
    }
    r->scalar = cm__acc_table[in][0][r->kind];
    r->vector = cm__acc_table[in][1][r->kind];
    r->fast = cm__ifast_table[in][r->kind];
    r->in = in;
    r->isz = (int64_t)cm__dtype(in)->size;
}

static void cm__red_store(const cm__red *r, char *dst, cm__acc acc) {
    const cm_dtype_kind out_kind = cm__dtype(r->out_dtype)->kind;
    if (r->mean && r->acc_dtype != CM_FLOAT64 && r->count > 0 &&
        (out_kind == CM_KIND_SIGNED || out_kind == CM_KIND_UNSIGNED)) {
        /* Integers into integers: the exact quotient, truncated toward 0. */
        cm__acc q;
        q.u = r->acc_dtype == CM_INT64 ? (uint64_t)((int64_t)acc.u / r->count)
                                       : acc.u / (uint64_t)r->count;
        cm__convert_element(r->out_dtype, dst, r->acc_dtype, &q);
        return;
    }
    if (r->mean) {
        double sum = r->acc_dtype == CM_FLOAT64 ? acc.d
                     : r->acc_dtype == CM_INT64 ? (double)(int64_t)acc.u
                                                : (double)acc.u;
        const double mean = sum / (double)r->count;
        cm__convert_element(r->out_dtype, dst, CM_FLOAT64, &mean);
        return;
    }
    cm__convert_element(r->out_dtype, dst, r->acc_dtype, &acc);
}

/* ------------------------------------------------------------ walking */

typedef struct cm__red_ctx {
    const cm__red *r;
    cm__cpu_nd inner; /* reduced axes, operand 0 = input */
    cm__acc acc;
    cm__pairs pairs; /* float sums: one partial sum per run */
} cm__red_ctx;

/* Float max and min of n elements at p (stride s) read in blocks of
 * CM__FBLOCK elements from the run's start, each block from the initial
 * value; the blocks' results are taken in order, keeping the first NaN,
 * else the first strictly larger (smaller) one. That pick is associative,
 * so threads may read ranges of blocks and the ranges' results be taken in
 * order (cm__fblock_task): the same bits, +0/-0 and NaN payloads included,
 * at any thread count. */
#define CM__FBLOCK ((int64_t)1 << 18)
static void cm__fminmax_blocks(const cm__red *r, int64_t n, const char *p, int64_t s,
                               cm__acc *acc) {
    const bool max = r->kind == CM__RMAX;
    for (int64_t i = 0; i < n; i += CM__FBLOCK) {
        const int64_t m = n - i < CM__FBLOCK ? n - i : CM__FBLOCK;
        const char *q = p + i * s;
        cm__acc a = r->init;
        if (r->in != CM_FLOAT64)
            cm__fminmax_run(r->in, max, m, q, s, &a);
        else if (r->fast != NULL && s == r->isz)
            cm__side_walk(r->fast, m, q, r->isz, &a);
        else
            r->scalar(m, q, s, &a);
        acc->d = max ? CM__FMAX(acc->d, a.d) : CM__FMIN(acc->d, a.d);
    }
}

static void cm__red_inner_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    cm__red_ctx *c = ctx;
    const cm__red *r = c->r;
    if (r->field == 'd' && r->kind == CM__RSUM) {
        cm__pairs_push(&c->pairs, cm__fsum(r->in, n, p[0], s[0]));
    } else if (r->field == 'd') {
        cm__fminmax_blocks(r, n, p[0], s[0], &c->acc);
    } else if (r->fast != NULL && s[0] == r->isz) {
        cm__side_walk(r->fast, n, p[0], r->isz, &c->acc);
    } else {
        r->scalar(n, p[0], s[0], &c->acc);
    }
}

/* One run of kept axes: each output reduces the inner axes at its input. */
static void cm__red_outer_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    cm__red_ctx *c = ctx;
    for (int64_t i = 0; i < n; ++i) {
        c->acc = c->r->init;
        memset(&c->pairs, 0, sizeof c->pairs);
        c->inner.base[0] = p[1] + i * s[1];
        cm__cpu_nd_foreach(&c->inner, cm__red_inner_run, c);
        if (c->r->field == 'd' && c->r->kind == CM__RSUM)
            c->acc.d = cm__pairs_fold(&c->pairs);
        cm__red_store(c->r, p[0] + i * s[0], c->acc);
    }
}

/* Vector form: kept nd's innermost axis is contiguous in the input and the
 * one reduced axis (stride rs, length rn) is walked row by row. */
typedef struct cm__vec_ctx {
    const cm__red *r;
    int64_t rn, rs;
    cm__vacc *acc;
    double *st; /* float sums: levels x w partial rows */
    float *t;   /* float sums: 4 x w float32 (float16, bfloat16 rows) */
    int64_t w;  /* float sums: columns per chunk */
} cm__vec_ctx;

/* a[j] += q[j] for j < m, in float64. */
CM__CLONES static void cm__vadd_f32(int64_t m, const float *q, double *a) {
    int64_t j = 0;
#ifdef CM__VEC
    for (; j + 8 <= m; j += 8) {
        cm__v4f x0, x1;
        cm__v4d a0, a1;
        memcpy(&x0, q + j, sizeof x0);
        memcpy(&x1, q + j + 4, sizeof x1);
        memcpy(&a0, a + j, sizeof a0);
        memcpy(&a1, a + j + 4, sizeof a1);
        a0 += __builtin_convertvector(x0, cm__v4d);
        a1 += __builtin_convertvector(x1, cm__v4d);
        memcpy(a + j, &a0, sizeof a0);
        memcpy(a + j + 4, &a1, sizeof a1);
    }
#endif
    for (; j < m; ++j)
        a[j] += (double)q[j];
}

CM__CLONES static void cm__vadd_f64(int64_t m, const double *q, double *a) {
    int64_t j = 0;
#ifdef CM__VEC
    for (; j + 8 <= m; j += 8) {
        cm__v4d x0, x1, a0, a1;
        memcpy(&x0, q + j, sizeof x0);
        memcpy(&x1, q + j + 4, sizeof x1);
        memcpy(&a0, a + j, sizeof a0);
        memcpy(&a1, a + j + 4, sizeof a1);
        a0 += x0;
        a1 += x1;
        memcpy(a + j, &a0, sizeof a0);
        memcpy(a + j + 4, &a1, sizeof a1);
    }
#endif
    for (; j < m; ++j)
        a[j] += q[j];
}

/* a[j] += the float32 sum (t[j] + t[w + j]) + (t[2w + j] + t[3w + j]). */
static void cm__vadd_quads(int64_t m, const float *t, int64_t w, double *a) {
    for (int64_t j = 0; j < m; ++j)
        a[j] += (double)((t[j] + t[w + j]) + (t[2 * w + j] + t[3 * w + j]));
}

/* Float sums in the vector form: for each column, blocks of CM__VROWS rows
 * summed in order, the blocks' sums combined by a binary counter. */
static void cm__red_vsum_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__vec_ctx *c = ctx;
    const cm__red *r = c->r;
    const int64_t w = c->w;
    float *t = c->t;
    void (*vadd)(int64_t, const float *, double *) = cm__vadd_f32;
#ifdef CM__X86
    if (cm__avx2_usable())
        vadd = cm__vadd_f32_avx;
#endif
    for (int64_t j0 = 0; j0 < n; j0 += w) {
        const int64_t m = n - j0 < w ? n - j0 : w;
        const char *col = p[1] + j0 * s[1];
        int depth = 0;
        for (int64_t b = 0, i = 0; i < c->rn; ++b) {
            double *cur = c->st + depth * w;
            const int64_t end = c->rn - i < CM__VROWS ? c->rn : i + CM__VROWS;
#ifdef CM__X86
            if (vadd == cm__vadd_f32_avx && r->in != CM_FLOAT64) {
                const char *at = col + i * c->rs;
                if (r->in == CM_FLOAT32)
                    cm__vblock_f32_avx(m, end - i, at, c->rs, cur, c->rn - end);
                else if (r->in == CM_FLOAT16)
                    cm__vblock_f16_avx(m, end - i, at, c->rs, cur, c->rn - end);
                else
                    cm__vblock_bf16_avx(m, end - i, at, c->rs, cur, c->rn - end);
                i = end;
            }
#endif
            if (i < end)
                for (int64_t j = 0; j < m; ++j)
                    cur[j] = 0.0;
            if (r->in == CM_FLOAT16 || r->in == CM_BFLOAT16)
                for (; i + 4 <= end; i += 4) {
                    for (int k = 0; k < 4; ++k)
                        cm__cpu_cast_kernel(r->in, CM_FLOAT32)(m, (char *)(t + k * w),
                                                               (int64_t)sizeof(float),
                                                               col + (i + k) * c->rs, s[1]);
                    cm__vadd_quads(m, t, w, cur);
                }
            for (; i < end; ++i) {
                const char *row = col + i * c->rs;
                if (r->in == CM_FLOAT32) {
                    vadd(m, (const float *)(const void *)row, cur);
                } else if (r->in == CM_FLOAT64) {
                    cm__vadd_f64(m, (const double *)(const void *)row, cur);
                } else {
                    cm__cpu_cast_kernel(r->in, CM_FLOAT32)(m, (char *)t, (int64_t)sizeof(float),
                                                           row, s[1]);
                    vadd(m, t, cur);
                }
            }
            int top = depth;
            for (int64_t k = b; k & 1; k >>= 1) {
                --top;
                double *lo = c->st + top * w;
                for (int64_t j = 0; j < m; ++j)
                    lo[j] = lo[j] + lo[w + j];
            }
            depth = top + 1;
        }
        for (int l = depth - 2; l >= 0; --l) {
            double *lo = c->st + l * w;
            for (int64_t j = 0; j < m; ++j)
                lo[j] = lo[j] + lo[w + j];
        }
        for (int64_t j = 0; j < m; ++j) {
            cm__acc a;
            a.d = depth > 0 ? c->st[j] : 0.0;
            cm__red_store(r, p[0] + (j0 + j) * s[0], a);
        }
    }
}

/* Max and min down columns: m contiguous columns of rn rows (stride rs),
 * four rows at a time (four streams of loads; the last pass repeats its
 * last row, which changes nothing), each row's vector compared in turn
 * with the columns' accumulators acc (element type), which stay in cache;
 * exact, rows in order (a float column that meets a NaN keeps it); the
 * results into out[0, m). On Intel each row asks for its line 4 and 16 KiB
 * ahead (CM__PREFETCH_ROWS; a Xeon host: min f32 and max i32 over axis 0
 * 0.53-0.56 -> 0.57-0.67 of memcpy in one session). */
#ifdef CM__VEC
#define CM__COLS_ROWS 4
/* A pass's rows from row i (the last row repeated past rn), and its
 * columns from j on picked one by one (after the vectors). */
#define CM__COLS_PASS_ROWS(T)                                                                      \
    const T *r[CM__COLS_ROWS];                                                                     \
    for (int t = 0; t < CM__COLS_ROWS; ++t) {                                                      \
        r[t] = (const T *)(const void *)(p + (i + t < rn ? i + t : rn - 1) * rs);                  \
    }
#define CM__COLS_TAIL(T, OP, FLOAT)                                                                \
    for (; j < m; ++j) {                                                                           \
        T a = acc[j];                                                                              \
        for (int t = 0; t < CM__COLS_ROWS; ++t) {                                                  \
            const T x = r[t][j];                                                                   \
            if ((!(FLOAT) || a == a) && ((FLOAT && x != x) || x OP a))                             \
                a = x;                                                                             \
        }                                                                                          \
        acc[j] = a;                                                                                \
    }
#define CM__COLS_MM(name, T, VT, MT, OP, AT, FLOAT)                                                \
    CM__CLONES static void name(int64_t m, int64_t rn, const char *p, int64_t rs, T init,          \
                                T *acc) {                                                          \
        enum { NL = (int)(sizeof(VT) / sizeof(T)) };                                               \
        for (int64_t j = 0; j < m; ++j)                                                            \
            acc[j] = init;                                                                         \
        for (int64_t i = 0; i < rn; i += CM__COLS_ROWS) {                                          \
            CM__COLS_PASS_ROWS(T);                                                                 \
            int64_t j = 0;                                                                         \
            CM__PF_DECL;                                                                           \
            for (; j + NL <= m; j += NL) {                                                         \
                CM__PREFETCH_ROWS(p + i * rs, rn - i < CM__COLS_ROWS ? rn - i : CM__COLS_ROWS, rs, \
                                  (uintptr_t)j * sizeof(T));                                       \
                VT a;                                                                              \
                memcpy(&a, acc + j, sizeof a);                                                     \
                for (int t = 0; t < CM__COLS_ROWS; ++t) {                                          \
                    VT x;                                                                          \
                    memcpy(&x, r[t] + j, sizeof x);                                                \
                    MT k = x OP a;                                                                 \
                    if (FLOAT)                                                                     \
                        k = (k | (x != x)) & (a == a);                                             \
                    a = (VT)(((MT)x & k) | ((MT)a & ~k));                                          \
                }                                                                                  \
                memcpy(acc + j, &a, sizeof a);                                                     \
            }                                                                                      \
            CM__COLS_TAIL(T, OP, FLOAT);                                                           \
        }                                                                                          \
    }
typedef int32_t cm__v8m32 __attribute__((vector_size(32)));
#define CM__COLS_PAIR(E, T, VT, MT, AT, FLOAT)                                                     \
    CM__COLS_MM(cm__cmax_##E, T, VT, MT, >, AT, FLOAT)                                             \
    CM__COLS_MM(cm__cmin_##E, T, VT, MT, <, AT, FLOAT)
CM__COLS_PAIR(f32, float, cm__v8f, cm__v8m32, double, 1)
CM__COLS_PAIR(i8, int8_t, cm__v32i8, cm__v32i8, int64_t, 0)
CM__COLS_PAIR(u8, uint8_t, cm__v32u8, cm__v32i8, uint64_t, 0)
CM__COLS_PAIR(b8, uint8_t, cm__v32u8, cm__v32i8, int64_t, 0)
CM__COLS_PAIR(i16, int16_t, cm__v16i16, cm__v16i16, int64_t, 0)
CM__COLS_PAIR(u16, uint16_t, cm__v16u16, cm__v16i16, uint64_t, 0)
CM__COLS_PAIR(i32, int32_t, cm__v8i32, cm__v8i32, int64_t, 0)
CM__COLS_PAIR(u32, uint32_t, cm__v8u32, cm__v8i32, uint64_t, 0)
CM__COLS_PAIR(i64, int64_t, cm__v4i64, cm__v4i64, int64_t, 0)
CM__COLS_PAIR(u64, uint64_t, cm__v4u64, cm__v4i64, uint64_t, 0)

#ifdef CM__X86
/* The same passes with AVX2's max and min (cm__max_f32_avx and
 * CM__IMM_AVX say why): float32 through maxps/minps, which pick as the
 * exact loop does when no NaN is met; false when one was (the exact loop
 * then reads the columns again). 8- to 32-bit integers through vpmax and
 * vpmin. */
#define CM__COLS_AVX(name, T, VOP, OP, FLOAT, VT, LOAD, STORE, NANS)                               \
    __attribute__((target("avx2"))) static bool name##_avx(int64_t m, int64_t rn, const char *p,   \
                                                           int64_t rs, T init, T *acc) {           \
        enum { NL = (int)(32 / sizeof(T)) };                                                       \
        for (int64_t j = 0; j < m; ++j)                                                            \
            acc[j] = init;                                                                         \
        __m256 nans = _mm256_setzero_ps();                                                         \
        for (int64_t i = 0; i < rn; i += CM__COLS_ROWS) {                                          \
            CM__COLS_PASS_ROWS(T);                                                                 \
            int64_t j = 0;                                                                         \
            CM__PF_DECL;                                                                           \
            for (; j + NL <= m; j += NL) {                                                         \
                CM__PREFETCH_ROWS(p + i * rs, rn - i < CM__COLS_ROWS ? rn - i : CM__COLS_ROWS, rs, \
                                  (uintptr_t)j * sizeof(T));                                       \
                VT a = LOAD(acc + j);                                                              \
                const VT x0 = LOAD(r[0] + j), x1 = LOAD(r[1] + j);                                 \
                const VT x2 = LOAD(r[2] + j), x3 = LOAD(r[3] + j);                                 \
                NANS;                                                                              \
                a = VOP(x3, VOP(x2, VOP(x1, VOP(x0, a))));                                         \
                STORE(acc + j, a);                                                                 \
            }                                                                                      \
            CM__COLS_TAIL(T, OP, FLOAT);                                                           \
        }                                                                                          \
        return _mm256_movemask_ps(nans) == 0;                                                      \
    }
#define CM__COLS_LOADF(q) _mm256_loadu_ps(q)
#define CM__COLS_STOREF(q, v) _mm256_storeu_ps(q, v)
#define CM__COLS_LOADI(q) _mm256_loadu_si256((const __m256i *)(const void *)(q))
#define CM__COLS_STOREI(q, v) _mm256_storeu_si256((__m256i *)(void *)(q), v)
#define CM__COLS_NANS                                                                              \
    nans = _mm256_or_ps(nans, _mm256_or_ps(_mm256_cmp_ps(x0, x1, _CMP_UNORD_Q),                    \
                                           _mm256_cmp_ps(x2, x3, _CMP_UNORD_Q)))
#define CM__COLS_NONE (void)0
CM__COLS_AVX(cm__cmax_f32, float, _mm256_max_ps, >, 1, __m256, CM__COLS_LOADF, CM__COLS_STOREF,
             CM__COLS_NANS)
CM__COLS_AVX(cm__cmin_f32, float, _mm256_min_ps, <, 1, __m256, CM__COLS_LOADF, CM__COLS_STOREF,
             CM__COLS_NANS)
#define CM__COLS_AVX_I(E, T, MAXI, MINI)                                                           \
    CM__COLS_AVX(cm__cmax_##E, T, MAXI, >, 0, __m256i, CM__COLS_LOADI, CM__COLS_STOREI,            \
                 CM__COLS_NONE)                                                                    \
    CM__COLS_AVX(cm__cmin_##E, T, MINI, <, 0, __m256i, CM__COLS_LOADI, CM__COLS_STOREI,            \
                 CM__COLS_NONE)
CM__COLS_AVX_I(i8, int8_t, _mm256_max_epi8, _mm256_min_epi8)
CM__COLS_AVX_I(u8, uint8_t, _mm256_max_epu8, _mm256_min_epu8)
CM__COLS_AVX_I(b8, uint8_t, _mm256_max_epu8, _mm256_min_epu8)
CM__COLS_AVX_I(i16, int16_t, _mm256_max_epi16, _mm256_min_epi16)
CM__COLS_AVX_I(u16, uint16_t, _mm256_max_epu16, _mm256_min_epu16)
CM__COLS_AVX_I(i32, int32_t, _mm256_max_epi32, _mm256_min_epi32)
CM__COLS_AVX_I(u32, uint32_t, _mm256_max_epu32, _mm256_min_epu32)
/* The AVX2 passes where usable, else (or after a NaN) the exact ones. */
#define CM__COLS_RUN(KIND, SUF, m, rn, p, rs, init, acc)                                           \
    do {                                                                                           \
        if (!cm__avx2_usable() || !cm__c##KIND##_##SUF##_avx(m, rn, p, rs, init, acc))             \
            cm__c##KIND##_##SUF(m, rn, p, rs, init, acc);                                          \
    } while (0)
#else
#define CM__COLS_RUN(KIND, SUF, m, rn, p, rs, init, acc)                                           \
    cm__c##KIND##_##SUF(m, rn, p, rs, init, acc)
#endif
#define CM__COLS_PLAIN(KIND, SUF, m, rn, p, rs, init, acc)                                         \
    cm__c##KIND##_##SUF(m, rn, p, rs, init, acc)

/* The column max/min of the vector form where there is one: true when
 * done, the results left in the element type in v's scratch
 * (cm__cols_scratch; cm__vec_result reads them). m may be up to
 * cm__vec_width's columns: 32 KiB of each row for elements under 4 bytes
 * (8 KiB pieces of the rows of a 32 KiB-wide int8 matrix read at a third of
 * the speed of whole rows on a Xeon), within the scratch's 64 KiB. */
static void *cm__cols_scratch(const cm__red *r, cm__vacc *v) {
    return r->field == 'd' ? (void *)v->u : (void *)v->d; /* an array the result does not use */
}

static bool cm__cols_minmax(const cm__red *r, int64_t m, int64_t rn, const char *p, int64_t rs,
                            cm__vacc *v) {
    const bool mx = r->kind == CM__RMAX;
    void *scratch = cm__cols_scratch(r, v);
#define CM__COLS_CASE(E, SUF, T, FIELD, TMIN, TMAX, RUN)                                           \
    case E:                                                                                        \
        if (mx)                                                                                    \
            RUN(max, SUF, m, rn, p, rs, (T)(TMIN), (T *)scratch);                                  \
        else                                                                                       \
            RUN(min, SUF, m, rn, p, rs, (T)(TMAX), (T *)scratch);                                  \
        return true;
    switch (r->in) {
        CM__COLS_CASE(CM_FLOAT32, f32, float, d, -INFINITY, INFINITY, CM__COLS_RUN)
        CM__COLS_CASE(CM_BOOL, b8, uint8_t, i, 0, UINT8_MAX, CM__COLS_RUN)
        CM__COLS_CASE(CM_INT8, i8, int8_t, i, INT8_MIN, INT8_MAX, CM__COLS_RUN)
        CM__COLS_CASE(CM_UINT8, u8, uint8_t, u, 0, UINT8_MAX, CM__COLS_RUN)
        CM__COLS_CASE(CM_INT16, i16, int16_t, i, INT16_MIN, INT16_MAX, CM__COLS_RUN)
        CM__COLS_CASE(CM_UINT16, u16, uint16_t, u, 0, UINT16_MAX, CM__COLS_RUN)
        CM__COLS_CASE(CM_INT32, i32, int32_t, i, INT32_MIN, INT32_MAX, CM__COLS_RUN)
        CM__COLS_CASE(CM_UINT32, u32, uint32_t, u, 0, UINT32_MAX, CM__COLS_RUN)
        CM__COLS_CASE(CM_INT64, i64, int64_t, i, INT64_MIN, INT64_MAX, CM__COLS_PLAIN)
        CM__COLS_CASE(CM_UINT64, u64, uint64_t, u, 0, UINT64_MAX, CM__COLS_PLAIN)
    default: return false;
    }
#undef CM__COLS_CASE
}

/* Columns per chunk of the vector form. */
static int64_t cm__vec_width(const cm__red *r) {
    if (r->kind == CM__RSUM || r->in == CM_FLOAT64 || r->in == CM_FLOAT16 || r->in == CM_BFLOAT16 ||
        r->isz >= 4)
        return CM__VBLOCK;
    return ((int64_t)32 << 10) / r->isz; /* 1- and 2-byte integers: 32 KiB of a row */
}

/* Result j of a chunk: from the scratch after cm__cols_minmax (mm), else
 * from v's field. */
static cm__acc cm__vec_result(const cm__red *r, cm__vacc *v, bool mm, int64_t j) {
    cm__acc a;
    if (!mm) {
        if (r->field == 'd')
            a.d = v->d[j];
        else if (r->field == 'i')
            a.i = v->i[j];
        else
            a.u = v->u[j];
        return a;
    }
    const void *s = cm__cols_scratch(r, v);
    switch (r->in) {
    case CM_FLOAT32: a.d = ((const float *)s)[j]; break;
    case CM_BOOL: a.i = ((const uint8_t *)s)[j]; break;
    case CM_INT8: a.i = ((const int8_t *)s)[j]; break;
    case CM_UINT8: a.u = ((const uint8_t *)s)[j]; break;
    case CM_INT16: a.i = ((const int16_t *)s)[j]; break;
    case CM_UINT16: a.u = ((const uint16_t *)s)[j]; break;
    case CM_INT32: a.i = ((const int32_t *)s)[j]; break;
    case CM_UINT32: a.u = ((const uint32_t *)s)[j]; break;
    case CM_INT64: a.i = ((const int64_t *)s)[j]; break;
    default: a.u = ((const uint64_t *)s)[j]; break;
    }
    return a;
}
#else
static bool cm__cols_minmax(const cm__red *r, int64_t m, int64_t rn, const char *p, int64_t rs,
                            cm__vacc *v) {
    (void)r, (void)m, (void)rn, (void)p, (void)rs, (void)v;
    return false;
}

static int64_t cm__vec_width(const cm__red *r) {
    (void)r;
    return CM__VBLOCK;
}

static cm__acc cm__vec_result(const cm__red *r, cm__vacc *v, bool mm, int64_t j) {
    (void)mm;
    cm__acc a;
    if (r->field == 'd')
        a.d = v->d[j];
    else if (r->field == 'i')
        a.i = v->i[j];
    else
        a.u = v->u[j];
    return a;
}
#endif

/* Integer sums down columns (the vector form): a[j] += the m contiguous
 * columns of rn rows (stride rs), four rows a pass (four streams of
 * loads, one accumulator load and store for four rows); exact modulo 2^64
 * in any order. */
#define CM__ISUM_COLS(name, T, EXT)                                                                \
    CM__CLONES static void name(int64_t m, int64_t rn, const char *p, int64_t rs, uint64_t *a) {   \
        int64_t i = 0;                                                                             \
        for (; i + 4 <= rn; i += 4) {                                                              \
            const T *r0 = (const T *)(const void *)(p + i * rs);                                   \
            const T *r1 = (const T *)(const void *)(p + (i + 1) * rs);                             \
            const T *r2 = (const T *)(const void *)(p + (i + 2) * rs);                             \
            const T *r3 = (const T *)(const void *)(p + (i + 3) * rs);                             \
            for (int64_t j = 0; j < m; ++j)                                                        \
                a[j] += ((uint64_t)(EXT)r0[j] + (uint64_t)(EXT)r1[j]) +                            \
                        ((uint64_t)(EXT)r2[j] + (uint64_t)(EXT)r3[j]);                             \
        }                                                                                          \
        for (; i < rn; ++i) {                                                                      \
            const T *r0 = (const T *)(const void *)(p + i * rs);                                   \
            for (int64_t j = 0; j < m; ++j)                                                        \
                a[j] += (uint64_t)(EXT)r0[j];                                                      \
        }                                                                                          \
    }
/* 8- and 16-bit elements: blocks of up to CM__NARROW_ROWS rows summed in
 * 32-bit lanes first (t, m of them; no block can overflow them: 32768 x
 * 65535 < 2^31), each block then added into a in 64 bits: twice the
 * elements per vector of 64-bit lanes, and t (32 KiB) stays in L1. int8
 * sums down the rows of a 256 MiB matrix read at 0.17 of memcpy on a Xeon
 * with 64-bit lanes alone. */
#define CM__NARROW_ROWS 32768
#define CM__ISUM_COLS_NARROW(name, T, T32, EXT)                                                    \
    CM__CLONES static void name(int64_t m, int64_t rn, const char *p, int64_t rs, uint64_t *a,     \
                                T32 *t) {                                                          \
        for (int64_t i0 = 0; i0 < rn; i0 += CM__NARROW_ROWS) {                                     \
            const int64_t i1 = rn - i0 < CM__NARROW_ROWS ? rn : i0 + CM__NARROW_ROWS;              \
            for (int64_t j = 0; j < m; ++j)                                                        \
                t[j] = 0;                                                                          \
            int64_t i = i0;                                                                        \
            for (; i + 4 <= i1; i += 4) {                                                          \
                const T *r0 = (const T *)(const void *)(p + i * rs);                               \
                const T *r1 = (const T *)(const void *)(p + (i + 1) * rs);                         \
                const T *r2 = (const T *)(const void *)(p + (i + 2) * rs);                         \
                const T *r3 = (const T *)(const void *)(p + (i + 3) * rs);                         \
                for (int64_t j = 0; j < m; ++j)                                                    \
                    t[j] += ((T32)r0[j] + (T32)r1[j]) + ((T32)r2[j] + (T32)r3[j]);                 \
            }                                                                                      \
            for (; i < i1; ++i) {                                                                  \
                const T *r0 = (const T *)(const void *)(p + i * rs);                               \
                for (int64_t j = 0; j < m; ++j)                                                    \
                    t[j] += (T32)r0[j];                                                            \
            }                                                                                      \
            for (int64_t j = 0; j < m; ++j)                                                        \
                a[j] += (uint64_t)(EXT)t[j];                                                       \
        }                                                                                          \
    }
CM__ISUM_COLS_NARROW(cm__csum_b8, uint8_t, uint32_t, uint64_t)
CM__ISUM_COLS_NARROW(cm__csum_i8, int8_t, int32_t, int64_t)
CM__ISUM_COLS_NARROW(cm__csum_u8, uint8_t, uint32_t, uint64_t)
CM__ISUM_COLS_NARROW(cm__csum_i16, int16_t, int32_t, int64_t)
CM__ISUM_COLS_NARROW(cm__csum_u16, uint16_t, uint32_t, uint64_t)
CM__ISUM_COLS(cm__csum_i32, int32_t, int64_t)
CM__ISUM_COLS(cm__csum_u32, uint32_t, uint64_t)
CM__ISUM_COLS(cm__csum_i64, int64_t, int64_t)
CM__ISUM_COLS(cm__csum_u64, uint64_t, uint64_t)

/* The column integer sum of the vector form where there is one: true when
 * done (sums added into v->u). */
static bool cm__cols_isum(const cm__red *r, int64_t m, int64_t rn, const char *p, int64_t rs,
                          cm__vacc *v) {
    void *t = v->d; /* scratch: integer sums use v->u */
    switch (r->in) {
    case CM_BOOL: cm__csum_b8(m, rn, p, rs, v->u, t); return true;
    case CM_INT8: cm__csum_i8(m, rn, p, rs, v->u, t); return true;
    case CM_UINT8: cm__csum_u8(m, rn, p, rs, v->u, t); return true;
    case CM_INT16: cm__csum_i16(m, rn, p, rs, v->u, t); return true;
    case CM_UINT16: cm__csum_u16(m, rn, p, rs, v->u, t); return true;
    case CM_INT32: cm__csum_i32(m, rn, p, rs, v->u); return true;
    case CM_UINT32: cm__csum_u32(m, rn, p, rs, v->u); return true;
    case CM_INT64: cm__csum_i64(m, rn, p, rs, v->u); return true;
    case CM_UINT64: cm__csum_u64(m, rn, p, rs, v->u); return true;
    default: return false;
    }
}

/* One chunk of m columns of the vector form (contiguous elements, rows
 * rs bytes apart): true when the results are in cm__cols_minmax's scratch,
 * false when in v's field (cm__vec_result reads either). */
static bool cm__vec_chunk(const cm__red *r, int64_t m, int64_t rn, const char *row, int64_t rs,
                          cm__vacc *v) {
    if (r->kind != CM__RSUM && cm__cols_minmax(r, m, rn, row, rs, v))
        return true;
    for (int64_t j = 0; j < m; ++j) { /* m <= CM__VBLOCK here (cm__vec_width) */
        v->d[j] = r->init.d;
        v->i[j] = r->init.i;
        v->u[j] = r->init.u;
    }
    if (r->kind != CM__RSUM || !cm__cols_isum(r, m, rn, row, rs, v))
        for (int64_t i = 0; i < rn; ++i)
            r->vector(m, row + i * rs, r->isz, v);
    return false;
}

static void cm__red_vec_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__vec_ctx *c = ctx;
    cm__vacc *v = c->acc;
    const cm__red *r = c->r;
    const int64_t width = cm__vec_width(r);
    for (int64_t j0 = 0; j0 < n; j0 += width) {
        const int64_t m = n - j0 < width ? n - j0 : width;
        const char *row = p[1] + j0 * s[1];
        const bool mm = cm__vec_chunk(r, m, c->rn, row, c->rs, v);
        for (int64_t j = 0; j < m; ++j)
            cm__red_store(r, p[0] + (j0 + j) * s[0], cm__vec_result(r, v, mm, j));
    }
}

/* The reduction over kept axes `kept` (out, in) of the inner axes `red`:
 * the vector form or one output at a time. Outputs are independent, so
 * any part of kept gives its outputs the bits the whole would. */
typedef struct cm__kept_ctx {
    const cm__red *r;
    const cm__cpu_nd *red;
} cm__kept_ctx;

static void cm__red_kept(cm__cpu_nd *kept, void *ctx) {
    const cm__kept_ctx *k = ctx;
    const cm__red *r = k->r;
    const cm__cpu_nd *red = k->red;
    const int64_t isz = r->isz;
    if (red->ndim == 1 && kept->ndim >= 1 && red->strides[0][0] != isz &&
        kept->strides[1][kept->ndim - 1] == isz) {
        cm__vec_ctx c = {.r = r, .rn = red->shape[0], .rs = red->strides[0][0]};
        if (r->field == 'd' && r->kind == CM__RSUM) {
            /* Levels of the binary counter: one more than the bits of the
             * block count. Without memory, narrow chunks on the stack give
             * the same bits (columns are independent). */
            int levels = 1;
            for (int64_t nb = cm__div_up_i64(c.rn, CM__VROWS); nb > 0; nb >>= 1)
                ++levels;
            double small[72 * 8];
            float small_t[4 * 8];
            c.w = CM__VCOLS;
            c.st = cm__alloc_raw(
                (size_t)levels * CM__VCOLS * sizeof(double) + 4 * CM__VCOLS * sizeof(float), 64);
            if (c.st != NULL) {
                c.t = (float *)(void *)(c.st + (size_t)levels * CM__VCOLS);
            } else {
                c.w = 8;
                c.st = small;
                c.t = small_t;
            }
            cm__cpu_nd_foreach(kept, cm__red_vsum_run, &c);
            if (c.st != small)
                cm__free(c.st);
            return;
        }
        c.acc = cm__alloc_raw(sizeof *c.acc, 64);
        if (c.acc != NULL) {
            cm__cpu_nd_foreach(kept, cm__red_vec_run, &c);
            cm__free(c.acc);
            return;
        } /* else the per-output walk below needs no memory */
    }
    cm__red_ctx c = {.r = r, .inner = *red};
    cm__cpu_nd_foreach(kept, cm__red_outer_run, &c);
}

/* ------------------------------------------------------------ threads
 * Few outputs of many elements each: each output's reduction is split.
 * Float sums: the pairwise tree of one run (cm__fsum) is cut at a depth
 * into subtrees, which the threads sum, and the subtrees' sums are added
 * up the same tree; runs of a reduction of several runs are summed by the
 * threads a batch at a time and pushed into the binary counter in order.
 * Either way every addition is the one a single thread does. Integer sums
 * (modulo 2^64), integer max and min are exact in any order: each thread
 * reduces a slab of the outermost reduced axis and the slabs are combined.
 * Float max and min of one run: threads read ranges of its blocks
 * (cm__fminmax_blocks), whose results are taken in order; of several runs
 * they stay on one thread. */

#define CM__SUBTREE_DEPTH_MAX 10 /* at most 1024 subtrees */
#define CM__RUN_BATCH 4096       /* runs summed per batch */

typedef struct cm__par {
    const cm__red *r;
    cm__cpu_nd red;   /* one reduction's input (operand 0) */
    const char *base; /* float sums of one run: its start */
    int64_t stride;
    int64_t nodes; /* subtrees or runs of this round */
    int64_t first; /* runs: the index of the first of this batch */
    int64_t chunk; /* runs or slabs per task */
    int64_t off[1 << CM__SUBTREE_DEPTH_MAX], len[1 << CM__SUBTREE_DEPTH_MAX];
    double sum[CM__RUN_BATCH > (1 << CM__SUBTREE_DEPTH_MAX) ? CM__RUN_BATCH
                                                            : (1 << CM__SUBTREE_DEPTH_MAX)];
    cm__acc part[CM_CPU_MAX_THREADS];
} cm__par;

static void cm__subtree_task(void *ctx, int64_t t) {
    cm__par *c = ctx;
    c->sum[t] = cm__fsum(c->r->in, c->len[t], c->base + c->off[t] * c->stride, c->stride);
}

/* The start of run `i` of red (every axis but the innermost, row-major). */
static const char *cm__run_at(const cm__cpu_nd *red, int64_t i) {
    const char *p = red->base[0];
    for (int32_t k = red->ndim - 2; k >= 0; --k) {
        p += (i % red->shape[k]) * red->strides[0][k];
        i /= red->shape[k];
    }
    return p;
}

static void cm__runs_task(void *ctx, int64_t t) {
    cm__par *c = ctx;
    const int32_t last = c->red.ndim - 1;
    for (int64_t j = t * c->chunk; j < (t + 1) * c->chunk && j < c->nodes; ++j)
        c->sum[j] = cm__fsum(c->r->in, c->red.shape[last], cm__run_at(&c->red, c->first + j),
                             c->red.strides[0][last]);
}

static void cm__fblock_task(void *ctx, int64_t t) {
    cm__par *c = ctx;
    const int64_t n = c->red.shape[0], s = c->red.strides[0][0];
    const int64_t begin = t * c->chunk * CM__FBLOCK;
    const int64_t len = n - begin < c->chunk * CM__FBLOCK ? n - begin : c->chunk * CM__FBLOCK;
    c->part[t] = c->r->init;
    cm__fminmax_blocks(c->r, len, c->red.base[0] + begin * s, s, &c->part[t]);
}

static void cm__slab_task(void *ctx, int64_t t) {
    cm__par *c = ctx;
    cm__red_ctx rc = {.r = c->r, .inner = c->red, .acc = c->r->init};
    const int64_t n = c->red.shape[0];
    const int64_t begin = t * c->chunk, end = n - begin < c->chunk ? n : begin + c->chunk;
    cm__cpu_nd_slice(&rc.inner, 0, begin, end);
    cm__cpu_nd_foreach(&rc.inner, cm__red_inner_run, &rc);
    c->part[t] = rc.acc;
}

/* One output's reduction of c->red split across the pool; false when this
 * kind stays on one thread. */
static bool cm__red_one_parallel(cm__par *c, cm__cpu_pool *pool, cm__acc *out) {
    const cm__red *r = c->r;
    const cm__cpu_nd *red = &c->red;
    const int64_t threads = (int64_t)cm__cpu_pool_threads(pool);
    if (r->field == 'd' && r->kind == CM__RSUM) {
        const int32_t last = red->ndim - 1;
        if (red->ndim == 1) {
            int depth = 2; /* four subtrees per thread, for balance */
            while ((1 << depth) < 4 * threads && depth < CM__SUBTREE_DEPTH_MAX)
                ++depth;
            c->nodes = 0;
            c->base = red->base[0];
            c->stride = red->strides[0][0];
            cm__cut(0, red->shape[0], depth, c->off, c->len, &c->nodes);
            cm__cpu_pool_run(pool, c->nodes, cm__subtree_task, c);
            int64_t next = 0;
            out->d = cm__cut_sum(c->sum, red->shape[0], depth, &next);
            return true;
        }
        int64_t runs = 1;
        for (int32_t k = 0; k < last; ++k)
            runs *= red->shape[k];
        cm__pairs pairs;
        memset(&pairs, 0, sizeof pairs);
        for (c->first = 0; c->first < runs; c->first += CM__RUN_BATCH) {
            c->nodes = runs - c->first < CM__RUN_BATCH ? runs - c->first : CM__RUN_BATCH;
            c->chunk = cm__div_up_i64(c->nodes, threads);
            cm__cpu_pool_run(pool, cm__div_up_i64(c->nodes, c->chunk), cm__runs_task, c);
            for (int64_t j = 0; j < c->nodes; ++j)
                cm__pairs_push(&pairs, c->sum[j]);
        }
        out->d = cm__pairs_fold(&pairs);
        return true;
    }
    if (r->field == 'd') {
        if (red->ndim != 1 || red->shape[0] <= CM__FBLOCK)
            return false;
        const int64_t blocks = cm__div_up_i64(red->shape[0], CM__FBLOCK);
        c->chunk = cm__div_up_i64(blocks, threads); /* blocks per task */
        const int64_t ntasks = cm__div_up_i64(blocks, c->chunk);
        cm__cpu_pool_run(pool, ntasks, cm__fblock_task, c);
        cm__acc a = r->init;
        for (int64_t t = 0; t < ntasks; ++t)
            a.d = r->kind == CM__RMAX ? CM__FMAX(a.d, c->part[t].d) : CM__FMIN(a.d, c->part[t].d);
        *out = a;
        return true;
    }
    const int64_t n = red->shape[0];
    const int64_t parts = n < threads ? n : threads;
    c->chunk = cm__div_up_i64(n, parts);
    const int64_t ntasks = cm__div_up_i64(n, c->chunk);
    cm__cpu_pool_run(pool, ntasks, cm__slab_task, c);
    cm__acc a = r->init;
    for (int64_t t = 0; t < ntasks; ++t) {
        const cm__acc x = c->part[t];
        if (r->kind == CM__RSUM)
            a.u += x.u;
        else if (r->field == 'i')
            a.i = r->kind == CM__RMAX ? CM__IMAX(a.i, x.i) : CM__IMIN(a.i, x.i);
        else
            a.u = r->kind == CM__RMAX ? CM__IMAX(a.u, x.u) : CM__IMIN(a.u, x.u);
    }
    *out = a;
    return true;
}

typedef struct cm__few_ctx {
    cm__par *par;
    cm__cpu_pool *pool;
    cm__red_ctx one; /* the single-threaded walk, for float max and min */
} cm__few_ctx;

static void cm__red_few_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    cm__few_ctx *c = ctx;
    for (int64_t i = 0; i < n; ++i) {
        c->par->red.base[0] = p[1] + i * s[1];
        cm__acc acc;
        if (cm__red_one_parallel(c->par, c->pool, &acc)) {
            cm__red_store(c->par->r, p[0] + i * s[0], acc);
        } else {
            char *q[2] = {p[0] + i * s[0], p[1] + i * s[1]};
            cm__red_outer_run(1, q, s, &c->one);
        }
    }
}

/* Exact reductions down the rows of a matrix (the vector form with one
 * kept axis): each thread reduces a slab of rows over every column, into
 * its own row of partial results, and the partials are combined in slab
 * order. Cutting the columns instead (cm__cpu_nd_split) gives each thread
 * short pieces of every row (2 KiB of a 32 KiB float32 row at 16
 * threads), which read far slower than whole rows: a slab of whole rows
 * is one contiguous stream. Integer sums are exact modulo 2^64 and integer
 * max/min in any order; float max/min combine by the pick of the column
 * kernels (the first NaN, else the first strictly larger or smaller), which
 * gives the bits one thread gives. Float sums keep the column split (their
 * pairwise blocks are fixed by the shape). */
typedef struct cm__rows_ctx {
    const cm__red *r;
    int64_t m, rn, rs; /* columns, rows, row stride (bytes) */
    const char *base;  /* row 0, column 0 */
    int64_t chunk;     /* rows per task */
    int64_t ntasks;
    cm__acc *part;   /* ntasks x m */
    cm__vacc *vacc;  /* one per task */
    char *out;       /* output column 0 */
    int64_t os;      /* output column stride (bytes) */
    int64_t threads; /* tasks that combine the partials */
} cm__rows_ctx;

static void cm__rows_task(void *ctx, int64_t t) {
    const cm__rows_ctx *c = ctx;
    const cm__red *r = c->r;
    cm__vacc *v = c->vacc + t;
    const int64_t b = t * c->chunk, rn = c->rn - b < c->chunk ? c->rn - b : c->chunk;
    const int64_t width = cm__vec_width(r);
    for (int64_t j0 = 0; j0 < c->m; j0 += width) {
        const int64_t m = c->m - j0 < width ? c->m - j0 : width;
        const char *row = c->base + b * c->rs + j0 * r->isz;
        const bool mm = cm__vec_chunk(r, m, rn, row, c->rs, v);
        cm__acc *out = c->part + t * c->m + j0;
        for (int64_t j = 0; j < m; ++j)
            out[j] = cm__vec_result(r, v, mm, j);
    }
}

/* a combined with x, x from the later rows. */
static cm__acc cm__combine(const cm__red *r, cm__acc a, cm__acc x) {
    if (r->kind == CM__RSUM)
        a.u += x.u;
    else if (r->field == 'd')
        a.d = r->kind == CM__RMAX ? CM__FMAX(a.d, x.d) : CM__FMIN(a.d, x.d);
    else if (r->field == 'i')
        a.i = r->kind == CM__RMAX ? CM__IMAX(a.i, x.i) : CM__IMIN(a.i, x.i);
    else
        a.u = r->kind == CM__RMAX ? CM__IMAX(a.u, x.u) : CM__IMIN(a.u, x.u);
    return a;
}

/* Columns [j0, j1) of the partial rows, combined in slab order (each
 * column apart, so cutting the columns keeps the bits). */
static void cm__rows_combine(void *ctx, int64_t t) {
    const cm__rows_ctx *c = ctx;
    const int64_t j0 = c->m * t / c->threads, j1 = c->m * (t + 1) / c->threads;
    for (int64_t j = j0; j < j1; ++j) {
        cm__acc a = c->part[j];
        for (int64_t k = 1; k < c->ntasks; ++k)
            a = cm__combine(c->r, a, c->part[k * c->m + j]);
        cm__red_store(c->r, c->out + j * c->os, a);
    }
}

#define CM__ROWS_PART_MAX ((size_t)32 << 20) /* bytes of partial results */

/* The reduction of kept (out, in; one axis, contiguous in the input) over
 * red (one strided axis) by slabs of rows; false when it does not apply
 * or finds no memory (the caller then splits the columns). */
static bool cm__red_rows_parallel(const cm__red *r, const cm__cpu_nd *kept, const cm__cpu_nd *red,
                                  cm__cpu_pool *pool) {
    const int64_t threads = (int64_t)cm__cpu_pool_threads(pool);
    if ((r->field == 'd' && r->kind == CM__RSUM) || kept->ndim != 1 || red->ndim != 1 ||
        kept->strides[1][0] != r->isz || red->strides[0][0] == r->isz)
        return false;
    const int64_t m = kept->shape[0], rn = red->shape[0];
    /* Enough rows for every thread, and columns too narrow to cut well:
     * under 64 KiB of each row per thread. */
    if (rn < 4 * threads || m * r->isz / threads >= ((int64_t)64 << 10))
        return false;
    cm__rows_ctx c = {.r = r,
                      .m = m,
                      .rn = rn,
                      .rs = red->strides[0][0],
                      .base = kept->base[1],
                      .chunk = cm__div_up_i64(rn, threads),
                      .out = kept->base[0],
                      .os = kept->strides[0][0],
                      .threads = threads};
    const int64_t ntasks = c.ntasks = cm__div_up_i64(rn, c.chunk);
    size_t part = 0, vacc = 0;
    if (cm__mul_overflow_size((size_t)ntasks * (size_t)m, sizeof(cm__acc), &part) ||
        part > CM__ROWS_PART_MAX || cm__mul_overflow_size((size_t)ntasks, sizeof(cm__vacc), &vacc))
        return false;
    c.part = cm__alloc_raw(part, 64);
    c.vacc = cm__alloc_raw(vacc, 64);
    if (c.part == NULL || c.vacc == NULL) {
        cm__free(c.part);
        cm__free(c.vacc);
        return false;
    }
    cm__cpu_pool_run(pool, ntasks, cm__rows_task, &c);
    /* On the threads too: 16 slabs of 8192 columns took 0.2 ms on one core. */
    cm__cpu_pool_run(pool, threads, cm__rows_combine, &c);
    cm__free(c.part);
    cm__free(c.vacc);
    return true;
}

cm_status cm__cpu_reduce(const cm__op *op, cm__cpu_nd *nd, cm__cpu_pool *pool) {
    /* Split the axes into kept (out, in) and reduced (in). */
    cm__cpu_nd kept, red;
    memset(&kept, 0, sizeof kept);
    memset(&red, 0, sizeof red);
    kept.nops = 2;
    kept.base[0] = nd->base[0];
    kept.base[1] = nd->base[1];
    red.nops = 1;
    red.base[0] = nd->base[1];
    int64_t count = 1;
    for (int32_t k = 0; k < nd->ndim; ++k) {
        if (op->axis < 0 || k == op->axis) {
            red.shape[red.ndim] = nd->shape[k];
            red.strides[0][red.ndim++] = nd->strides[1][k];
            count *= nd->shape[k];
        } else {
            kept.shape[kept.ndim] = nd->shape[k];
            kept.strides[0][kept.ndim] = nd->strides[0][k];
            kept.strides[1][kept.ndim++] = nd->strides[1][k];
        }
    }
    cm__red r;
    cm__red_setup(&r, op, count);
    cm__cpu_nd_simplify(&red, 0);
    /* Flipping negative reduced axes moved the start of every reduction by
     * the same amount; kept axes address the reductions from there. */
    kept.base[1] += red.base[0] - nd->base[1];
    cm__cpu_nd_simplify(&kept, 1);
    const int64_t threads = (int64_t)cm__cpu_pool_threads(pool);
    const int64_t outputs = op->numel / count;
    int64_t bytes = 0;
    if (cm__mul_overflow_i64(op->numel, r.isz, &bytes))
        bytes = INT64_MAX;
    cm__kept_ctx k = {.r = &r, .red = &red};
    if (threads > 1 && bytes >= CM__CPU_PARALLEL_MIN_BYTES && outputs < threads && red.ndim >= 1) {
        cm__par *par = cm__alloc(sizeof *par, 64);
        if (par != NULL) {
            par->r = &r;
            par->red = red;
            cm__few_ctx c = {.par = par, .pool = pool, .one = {.r = &r, .inner = red}};
            cm__cpu_nd_foreach(&kept, cm__red_few_run, &c);
            cm__free(par);
            return CM_OK;
        } /* else one thread needs no memory */
    }
    if (threads > 1 && bytes >= CM__CPU_PARALLEL_MIN_BYTES &&
        cm__red_rows_parallel(&r, &kept, &red, pool))
        return CM_OK;
    cm__cpu_nd_split(pool, &kept, bytes, cm__red_kept, &k);
    return CM_OK;
}

/* SPDX-License-Identifier: MIT */
/* CPU elementwise kernels: unary and binary ops per dtype, each with a
 * contiguous loop (also with one broadcast operand) the compiler can
 * vectorise and a strided loop. float16 and bfloat16 run the float32
 * kernels on blocks converted to float32 and round once on the way out. */
#include "cpu_ops.h"

#include "core/convert.h"
#include "core/op_table.h"

#include <math.h>

/* ------------------------------------------------------------ generators */

#define CM__BIN(name, T, R, EXPR)                                                                  \
    static void name(int64_t n, char *o, int64_t os, const char *a, int64_t as, const char *b,     \
                     int64_t bs) {                                                                 \
        const int64_t tz = (int64_t)sizeof(T);                                                     \
        if (os == (int64_t)sizeof(R) && as == tz && bs == tz) {                                    \
            R *po = (R *)(void *)o;                                                                \
            const T *pa = (const T *)(const void *)a, *pb = (const T *)(const void *)b;            \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const T x = pa[i], y = pb[i];                                                      \
                po[i] = (R)(EXPR);                                                                 \
            }                                                                                      \
        } else if (os == (int64_t)sizeof(R) && as == tz && bs == 0) {                              \
            R *po = (R *)(void *)o;                                                                \
            const T *pa = (const T *)(const void *)a;                                              \
            const T y = *(const T *)(const void *)b;                                               \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const T x = pa[i];                                                                 \
                po[i] = (R)(EXPR);                                                                 \
            }                                                                                      \
        } else if (os == (int64_t)sizeof(R) && as == 0 && bs == tz) {                              \
            R *po = (R *)(void *)o;                                                                \
            const T *pb = (const T *)(const void *)b;                                              \
            const T x = *(const T *)(const void *)a;                                               \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const T y = pb[i];                                                                 \
                po[i] = (R)(EXPR);                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const T x = *(const T *)(const void *)(a + i * as);                                \
                const T y = *(const T *)(const void *)(b + i * bs);                                \
                *(R *)(void *)(o + i * os) = (R)(EXPR);                                            \
            }                                                                                      \
        }                                                                                          \
    }

#define CM__UN(name, T, EXPR)                                                                      \
    static void name(int64_t n, char *o, int64_t os, const char *a, int64_t as) {                  \
        if (os == (int64_t)sizeof(T) && as == (int64_t)sizeof(T)) {                                \
            T *po = (T *)(void *)o;                                                                \
            const T *pa = (const T *)(const void *)a;                                              \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const T x = pa[i];                                                                 \
                po[i] = (T)(EXPR);                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const T x = *(const T *)(const void *)(a + i * as);                                \
                *(T *)(void *)(o + i * os) = (T)(EXPR);                                            \
            }                                                                                      \
        }                                                                                          \
    }

#define CM__CMP_DEFS(E, T)                                                                         \
    CM__BIN(cm__eq_##E, T, uint8_t, x == y)                                                        \
    CM__BIN(cm__ne_##E, T, uint8_t, x != y)                                                        \
    CM__BIN(cm__lt_##E, T, uint8_t, x < y)                                                         \
    CM__BIN(cm__le_##E, T, uint8_t, x <= y)                                                        \
    CM__BIN(cm__gt_##E, T, uint8_t, x > y)                                                         \
    CM__BIN(cm__ge_##E, T, uint8_t, x >= y)

/* Integers wrap through the unsigned type U (no signed overflow). */
#define CM__INT_DEFS(E, T, U, SIGNED)                                                              \
    CM__BIN(cm__add_##E, T, T, (U)x + (U)y)                                                        \
    CM__BIN(cm__sub_##E, T, T, (U)x - (U)y)                                                        \
    CM__BIN(cm__mul_##E, T, T, (U)x *(U)y)                                                         \
    CM__BIN(cm__div_##E, T, T,                                                                     \
            y == 0                     ? (T)0                                                      \
            : (SIGNED && y == (T) - 1) ? (T)(0u - (U)x)                                            \
                                       : (T)(x / y))                                               \
    CM__BIN(cm__min_##E, T, T, x < y ? x : y)                                                      \
    CM__BIN(cm__max_##E, T, T, x > y ? x : y)                                                      \
    CM__CMP_DEFS(E, T)                                                                             \
    CM__UN(cm__neg_##E, T, 0u - (U)x)                                                              \
    CM__UN(cm__square_##E, T, (U)x *(U)x)

#define CM__SIGNED_DEFS(E, T, U)                                                                   \
    CM__INT_DEFS(E, T, U, 1)                                                                       \
    CM__UN(cm__abs_##E, T, x < 0 ? (T)(0u - (U)x) : x)                                             \
    CM__UN(cm__relu_##E, T, x > 0 ? x : 0)                                                         \
    CM__UN(cm__sign_##E, T, (x > 0) - (x < 0))

#define CM__UNSIGNED_DEFS(E, T, U)                                                                 \
    CM__INT_DEFS(E, T, U, 0)                                                                       \
    CM__UN(cm__abs_##E, T, x)                                                                      \
    CM__UN(cm__relu_##E, T, x)                                                                     \
    CM__UN(cm__sign_##E, T, x != 0)

/* Floats: min/max propagate NaN; SUF is the libm suffix (f or empty). */
#define CM__FLOAT_DEFS(E, T, SUF)                                                                  \
    CM__BIN(cm__add_##E, T, T, x + y)                                                              \
    CM__BIN(cm__sub_##E, T, T, x - y)                                                              \
    CM__BIN(cm__mul_##E, T, T, x *y)                                                               \
    CM__BIN(cm__div_##E, T, T, x / y)                                                              \
    CM__BIN(cm__min_##E, T, T, (x != x || x < y) ? x : y)                                          \
    CM__BIN(cm__max_##E, T, T, (x != x || x > y) ? x : y)                                          \
    CM__CMP_DEFS(E, T)                                                                             \
    CM__UN(cm__neg_##E, T, -x)                                                                     \
    CM__UN(cm__abs_##E, T, fabs##SUF(x))                                                           \
    CM__UN(cm__square_##E, T, x *x)                                                                \
    CM__UN(cm__relu_##E, T, (x != x || x > 0) ? x : (T)0)                                          \
    CM__UN(cm__sign_##E, T, x > 0 ? (T)1 : x < 0 ? (T) - 1 : x == x ? (T)0 : x)                    \
    CM__UN(cm__sqrt_##E, T, sqrt##SUF(x))                                                          \
    CM__UN(cm__rsqrt_##E, T, (T)1 / sqrt##SUF(x))                                                  \
    CM__UN(cm__exp_##E, T, exp##SUF(x))                                                            \
    CM__UN(cm__log_##E, T, log##SUF(x))                                                            \
    CM__UN(cm__sin_##E, T, sin##SUF(x))                                                            \
    CM__UN(cm__cos_##E, T, cos##SUF(x))                                                            \
    CM__UN(cm__tanh_##E, T, tanh##SUF(x))                                                          \
    CM__UN(cm__sigmoid_##E, T, (T)1 / ((T)1 + exp##SUF(-x)))                                       \
    CM__UN(cm__floor_##E, T, floor##SUF(x))                                                        \
    CM__UN(cm__ceil_##E, T, ceil##SUF(x))

CM__SIGNED_DEFS(CM_INT8, int8_t, uint32_t)
CM__SIGNED_DEFS(CM_INT16, int16_t, uint32_t)
CM__SIGNED_DEFS(CM_INT32, int32_t, uint32_t)
CM__SIGNED_DEFS(CM_INT64, int64_t, uint64_t)
CM__UNSIGNED_DEFS(CM_UINT8, uint8_t, uint32_t)
CM__UNSIGNED_DEFS(CM_UINT16, uint16_t, uint32_t)
CM__UNSIGNED_DEFS(CM_UINT32, uint32_t, uint32_t)
CM__UNSIGNED_DEFS(CM_UINT64, uint64_t, uint64_t)
CM__FLOAT_DEFS(CM_FLOAT32, float, f)
CM__FLOAT_DEFS(CM_FLOAT64, double, )
/* bool: logical and / or, and comparisons. */
CM__BIN(cm__min_CM_BOOL, uint8_t, uint8_t, x < y ? x : y)
CM__BIN(cm__max_CM_BOOL, uint8_t, uint8_t, x > y ? x : y)
CM__CMP_DEFS(CM_BOOL, uint8_t)

/* ------------------------------------------------------------ float16, bfloat16 */

#define CM__BLOCK 256

static void cm__half_load(float *dst, const char *src, int64_t ss, int64_t n, bool bf16) {
    if (ss == 2) {
        const uint16_t *s = (const uint16_t *)(const void *)src;
        if (bf16)
            for (int64_t i = 0; i < n; ++i)
                dst[i] = cm__bf16_to_f32(s[i]);
        else
            for (int64_t i = 0; i < n; ++i)
                dst[i] = cm__f16_to_f32(s[i]);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = *(const uint16_t *)(const void *)(src + i * ss);
        dst[i] = bf16 ? cm__bf16_to_f32(h) : cm__f16_to_f32(h);
    }
}

static void cm__half_store(char *dst, int64_t ds, const float *src, int64_t n, bool bf16) {
    if (ds == 2) {
        uint16_t *d = (uint16_t *)(void *)dst;
        if (bf16)
            for (int64_t i = 0; i < n; ++i)
                d[i] = cm__f32_to_bf16(src[i]);
        else
            for (int64_t i = 0; i < n; ++i)
                d[i] = cm__f32_to_f16(src[i]);
        return;
    }
    for (int64_t i = 0; i < n; ++i)
        *(uint16_t *)(void *)(dst + i * ds) =
            bf16 ? cm__f32_to_bf16(src[i]) : cm__f32_to_f16(src[i]);
}

static void cm__half_unary(cm__cpu_map1_fn f32, bool bf16, int64_t n, char *o, int64_t os,
                           const char *a, int64_t as) {
    float t[CM__BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += CM__BLOCK) {
        const int64_t m = n - i0 < CM__BLOCK ? n - i0 : CM__BLOCK;
        cm__half_load(t, a + i0 * as, as, m, bf16);
        f32(m, (char *)t, 4, (const char *)t, 4);
        cm__half_store(o + i0 * os, os, t, m, bf16);
    }
}

static void cm__half_binary(cm__cpu_map2_fn f32, bool bf16, bool cmp, int64_t n, char *o,
                            int64_t os, const char *a, int64_t as, const char *b, int64_t bs) {
    float ta[CM__BLOCK], tb[CM__BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += CM__BLOCK) {
        const int64_t m = n - i0 < CM__BLOCK ? n - i0 : CM__BLOCK;
        cm__half_load(ta, a + i0 * as, as, m, bf16);
        cm__half_load(tb, b + i0 * bs, bs, m, bf16);
        if (cmp) {
            f32(m, o + i0 * os, os, (const char *)ta, 4, (const char *)tb, 4);
        } else {
            f32(m, (char *)ta, 4, (const char *)ta, 4, (const char *)tb, 4);
            cm__half_store(o + i0 * os, os, ta, m, bf16);
        }
    }
}

#define CM__HALF_UN(op, E, BF)                                                                     \
    static void cm__##op##_##E(int64_t n, char *o, int64_t os, const char *a, int64_t as) {        \
        cm__half_unary(cm__##op##_CM_FLOAT32, BF, n, o, os, a, as);                                \
    }
#define CM__HALF_BIN(op, E, BF, CMP)                                                               \
    static void cm__##op##_##E(int64_t n, char *o, int64_t os, const char *a, int64_t as,          \
                               const char *b, int64_t bs) {                                        \
        cm__half_binary(cm__##op##_CM_FLOAT32, BF, CMP, n, o, os, a, as, b, bs);                   \
    }
/* Every op of the table (runtime/core/op_table.h) for a half type. */
#define CM__HALF_UN_ROW(E, BF, NAME, name, CLASS) CM__HALF_UN(name, E, BF)
#define CM__HALF_BIN_CMP_CM__BIN_ARITH false
#define CM__HALF_BIN_CMP_CM__BIN_ORDER false
#define CM__HALF_BIN_CMP_CM__BIN_COMPARE true
#define CM__HALF_BIN_ROW(E, BF, NAME, name, CLASS)                                                 \
    CM__HALF_BIN(name, E, BF, CM__HALF_BIN_CMP_##CLASS)
#define CM__HALF_DEFS(E, BF)                                                                       \
    CM__BINARY_OPS(CM__HALF_BIN_ROW, E, BF) CM__UNARY_OPS(CM__HALF_UN_ROW, E, BF)

CM__HALF_DEFS(CM_FLOAT16, false)
CM__HALF_DEFS(CM_BFLOAT16, true)

/* ------------------------------------------------------------ tables */

/* A row per dtype, an entry per op of the table that the dtype takes
 * (its class, runtime/core/op_table.h): bool takes the order and
 * comparison ops, integers every op but the float-only unary ones. */
#define CM__ENTRY(K, E, NAME, name) [K##NAME][E] = cm__##name##_##E,
#define CM__BIN_BOOL_CM__BIN_ARITH(E, NAME, name)
#define CM__BIN_BOOL_CM__BIN_ORDER(E, NAME, name) CM__ENTRY(CM_BINARY_, E, NAME, name)
#define CM__BIN_BOOL_CM__BIN_COMPARE(E, NAME, name) CM__ENTRY(CM_BINARY_, E, NAME, name)
#define CM__BIN_BOOL(E, NAME, name, CLASS) CM__BIN_BOOL_##CLASS(E, NAME, name)
#define CM__BIN_ANY(E, NAME, name, CLASS) CM__ENTRY(CM_BINARY_, E, NAME, name)
#define CM__BIN_ROW(E) CM__BINARY_OPS(CM__BIN_ANY, E)

static const cm__cpu_map2_fn cm__binary_table[CM_BINARY_COUNT][CM_DTYPE_COUNT] = {
    CM__BINARY_OPS(CM__BIN_BOOL, CM_BOOL) CM__BIN_ROW(CM_INT8) CM__BIN_ROW(CM_INT16)
        CM__BIN_ROW(CM_INT32) CM__BIN_ROW(CM_INT64) CM__BIN_ROW(CM_UINT8) CM__BIN_ROW(CM_UINT16)
            CM__BIN_ROW(CM_UINT32) CM__BIN_ROW(CM_UINT64) CM__BIN_ROW(CM_FLOAT16)
                CM__BIN_ROW(CM_BFLOAT16) CM__BIN_ROW(CM_FLOAT32) CM__BIN_ROW(CM_FLOAT64)};

#define CM__UN_INT_CM__UN_ANY(E, NAME, name) CM__ENTRY(CM_UNARY_, E, NAME, name)
#define CM__UN_INT_CM__UN_FLOAT(E, NAME, name)
#define CM__UN_INT_ENTRY(E, NAME, name, CLASS) CM__UN_INT_##CLASS(E, NAME, name)
#define CM__UN_FLOAT_ENTRY(E, NAME, name, CLASS) CM__ENTRY(CM_UNARY_, E, NAME, name)
#define CM__UN_INT_ROW(E) CM__UNARY_OPS(CM__UN_INT_ENTRY, E)
#define CM__UN_FLOAT_ROW(E) CM__UNARY_OPS(CM__UN_FLOAT_ENTRY, E)

static const cm__cpu_map1_fn cm__unary_table[CM_UNARY_COUNT][CM_DTYPE_COUNT] = {
    CM__UN_INT_ROW(CM_INT8) CM__UN_INT_ROW(CM_INT16) CM__UN_INT_ROW(CM_INT32)
        CM__UN_INT_ROW(CM_INT64) CM__UN_INT_ROW(CM_UINT8) CM__UN_INT_ROW(CM_UINT16)
            CM__UN_INT_ROW(CM_UINT32) CM__UN_INT_ROW(CM_UINT64) CM__UN_FLOAT_ROW(CM_FLOAT16)
                CM__UN_FLOAT_ROW(CM_BFLOAT16) CM__UN_FLOAT_ROW(CM_FLOAT32)
                    CM__UN_FLOAT_ROW(CM_FLOAT64)};

cm__cpu_map1_fn cm__cpu_unary_kernel(cm_unary_op op, cm_dtype dtype) {
    return cm__unary_table[op][dtype];
}

cm__cpu_map2_fn cm__cpu_binary_kernel(cm_binary_op op, cm_dtype dtype) {
    return cm__binary_table[op][dtype];
}

/* ------------------------------------------------------------ streaming
 * The memory-bound float ops over contiguous runs whose output bypasses
 * the caches (non-temporal stores, x86-64 SSE2), each input line asked
 * for cm__cpu_prefetch_distance() bytes ahead into L1 and four times as
 * far into L2. An ordinary store reads its line for ownership first: a
 * third more traffic for a + b, and on a Xeon host one core's loop then
 * reached 0.55-0.64 of memcpy, the streaming one 0.99-1.0 (16 threads:
 * 66-80 -> 110-123 GB/s; tools/bench/README.md). Each vector form below
 * gives, lane by lane, the bits of the scalar expression in
 * CM__FLOAT_DEFS (the same IEEE operations and NaN rules), but for which
 * payload a sum or product of two NaNs keeps: compilers order the operands
 * of a commutative op either way, in the scalar loop too (ops.h leaves it
 * open). The unaligned head and the tail run the scalar kernel itself. The
 * caller orders the stores (sfence) before the op returns. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>

/* V: the vector type, S: the intrinsics' suffix (ps, pd); the four
 * arithmetic ops are the intrinsics of their names. */
#define CM__VEC_OP2(op, E, V, S)                                                                   \
    static inline V cm__v_##op##_##E(V x, V y) {                                                   \
        return _mm_##op##_##S(x, y);                                                               \
    }
#define CM__VEC_DEFS(E, T, V, S)                                                                   \
    CM__VEC_OP2(add, E, V, S)                                                                      \
    CM__VEC_OP2(sub, E, V, S)                                                                      \
    CM__VEC_OP2(mul, E, V, S)                                                                      \
    CM__VEC_OP2(div, E, V, S)                                                                      \
    /* x where x is NaN or x < y (x > y), else y */                                                \
    static inline V cm__v_min_##E(V x, V y) {                                                      \
        const V m = _mm_or_##S(_mm_cmpunord_##S(x, x), _mm_cmplt_##S(x, y));                       \
        return _mm_or_##S(_mm_and_##S(m, x), _mm_andnot_##S(m, y));                                \
    }                                                                                              \
    static inline V cm__v_max_##E(V x, V y) {                                                      \
        const V m = _mm_or_##S(_mm_cmpunord_##S(x, x), _mm_cmpgt_##S(x, y));                       \
        return _mm_or_##S(_mm_and_##S(m, x), _mm_andnot_##S(m, y));                                \
    }                                                                                              \
    static inline V cm__v_neg_##E(V x) {                                                           \
        return _mm_xor_##S(x, _mm_set1_##S((T) - 0.0));                                            \
    }                                                                                              \
    static inline V cm__v_abs_##E(V x) {                                                           \
        return _mm_andnot_##S(_mm_set1_##S((T) - 0.0), x);                                         \
    }                                                                                              \
    static inline V cm__v_square_##E(V x) {                                                        \
        return _mm_mul_##S(x, x);                                                                  \
    }                                                                                              \
    /* x where x is NaN or x > 0, else +0 */                                                       \
    static inline V cm__v_relu_##E(V x) {                                                          \
        return _mm_and_##S(                                                                        \
            _mm_or_##S(_mm_cmpunord_##S(x, x), _mm_cmpgt_##S(x, _mm_setzero_##S())), x);           \
    }                                                                                              \
    static inline V cm__v_sqrt_##E(V x) {                                                          \
        return _mm_sqrt_##S(x);                                                                    \
    }                                                                                              \
    static inline V cm__v_rsqrt_##E(V x) {                                                         \
        return _mm_div_##S(_mm_set1_##S((T)1), _mm_sqrt_##S(x));                                   \
    }

#define CM__STREAM_BIN(op, E, T, V, S)                                                             \
    static void cm__stream_##op##_##E(int64_t n, char *o, int64_t os, const char *a, int64_t as,   \
                                      const char *b, int64_t bs) {                                 \
        enum { PER = (int)(sizeof(V) / sizeof(T)) }; /* contiguous: the caller checked */          \
        const int64_t z = (int64_t)sizeof(T);                                                      \
        const uintptr_t pf = cm__cpu_prefetch_distance();                                          \
        int64_t i = cm__cpu_unaligned_head(o, sizeof(T), 16, n);                                   \
        cm__##op##_##E(i, o, os, a, as, b, bs);                                                    \
        T *po = (T *)(void *)o;                                                                    \
        const T *pa = (const T *)(const void *)a, *pb = (const T *)(const void *)b;                \
        for (; i + 4 * PER <= n; i += 4 * PER) {                                                   \
            cm__cpu_prefetch_ahead(pa + i, pf);                                                    \
            cm__cpu_prefetch_ahead(pb + i, pf);                                                    \
            for (int k = 0; k < 4 * PER; k += PER)                                                 \
                _mm_stream_##S(po + i + k, cm__v_##op##_##E(_mm_loadu_##S(pa + i + k),             \
                                                            _mm_loadu_##S(pb + i + k)));           \
        }                                                                                          \
        cm__##op##_##E(n - i, o + i * z, os, a + i * z, as, b + i * z, bs);                        \
    }

#define CM__STREAM_UN(op, E, T, V, S)                                                              \
    static void cm__stream_##op##_##E(int64_t n, char *o, int64_t os, const char *a, int64_t as) { \
        enum { PER = (int)(sizeof(V) / sizeof(T)) }; /* contiguous: the caller checked */          \
        const int64_t z = (int64_t)sizeof(T);                                                      \
        const uintptr_t pf = cm__cpu_prefetch_distance();                                          \
        int64_t i = cm__cpu_unaligned_head(o, sizeof(T), 16, n);                                   \
        cm__##op##_##E(i, o, os, a, as);                                                           \
        T *po = (T *)(void *)o;                                                                    \
        const T *pa = (const T *)(const void *)a;                                                  \
        for (; i + 4 * PER <= n; i += 4 * PER) {                                                   \
            cm__cpu_prefetch_ahead(pa + i, pf);                                                    \
            for (int k = 0; k < 4 * PER; k += PER)                                                 \
                _mm_stream_##S(po + i + k, cm__v_##op##_##E(_mm_loadu_##S(pa + i + k)));           \
        }                                                                                          \
        cm__##op##_##E(n - i, o + i * z, os, a + i * z, as);                                       \
    }

/* The ops that stream, with their enum names. */
#define CM__STREAM_BIN_OPS(X, ...)                                                                 \
    X(ADD, add, __VA_ARGS__)                                                                       \
    X(SUB, sub, __VA_ARGS__)                                                                       \
    X(MUL, mul, __VA_ARGS__)                                                                       \
    X(DIV, div, __VA_ARGS__)                                                                       \
    X(MIN, min, __VA_ARGS__)                                                                       \
    X(MAX, max, __VA_ARGS__)
#define CM__STREAM_UN_OPS(X, ...)                                                                  \
    X(NEG, neg, __VA_ARGS__)                                                                       \
    X(ABS, abs, __VA_ARGS__)                                                                       \
    X(SQUARE, square, __VA_ARGS__)                                                                 \
    X(RELU, relu, __VA_ARGS__)                                                                     \
    X(SQRT, sqrt, __VA_ARGS__)                                                                     \
    X(RSQRT, rsqrt, __VA_ARGS__)

#define CM__STREAM_BIN_FN(NAME, op, E, T, V, S) CM__STREAM_BIN(op, E, T, V, S)
#define CM__STREAM_UN_FN(NAME, op, E, T, V, S) CM__STREAM_UN(op, E, T, V, S)
#define CM__STREAM_DEFS(E, T, V, S)                                                                \
    CM__VEC_DEFS(E, T, V, S)                                                                       \
    CM__STREAM_BIN_OPS(CM__STREAM_BIN_FN, E, T, V, S)                                              \
    CM__STREAM_UN_OPS(CM__STREAM_UN_FN, E, T, V, S)
CM__STREAM_DEFS(CM_FLOAT32, float, __m128, ps)
CM__STREAM_DEFS(CM_FLOAT64, double, __m128d, pd)

#define CM__STREAM_BIN_ENTRY(NAME, op, E) [CM_BINARY_##NAME][E] = cm__stream_##op##_##E,
#define CM__STREAM_UN_ENTRY(NAME, op, E) [CM_UNARY_##NAME][E] = cm__stream_##op##_##E,
static const cm__cpu_map2_fn cm__binary_stream_table[CM_BINARY_COUNT][CM_DTYPE_COUNT] = {
    CM__STREAM_BIN_OPS(CM__STREAM_BIN_ENTRY, CM_FLOAT32)
        CM__STREAM_BIN_OPS(CM__STREAM_BIN_ENTRY, CM_FLOAT64)};
static const cm__cpu_map1_fn cm__unary_stream_table[CM_UNARY_COUNT][CM_DTYPE_COUNT] = {
    CM__STREAM_UN_OPS(CM__STREAM_UN_ENTRY, CM_FLOAT32)
        CM__STREAM_UN_OPS(CM__STREAM_UN_ENTRY, CM_FLOAT64)};

cm__cpu_map2_fn cm__cpu_binary_stream_kernel(cm_binary_op op, cm_dtype dtype) {
    return cm__binary_stream_table[op][dtype];
}

cm__cpu_map1_fn cm__cpu_unary_stream_kernel(cm_unary_op op, cm_dtype dtype) {
    return cm__unary_stream_table[op][dtype];
}
#else
cm__cpu_map2_fn cm__cpu_binary_stream_kernel(cm_binary_op op, cm_dtype dtype) {
    (void)op, (void)dtype;
    return NULL;
}

cm__cpu_map1_fn cm__cpu_unary_stream_kernel(cm_unary_op op, cm_dtype dtype) {
    (void)op, (void)dtype;
    return NULL;
}
#endif

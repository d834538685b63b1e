/* SPDX-License-Identifier: MIT */
/* Element conversions shared by the core (fill values, reduction results)
 * and the CPU kernels (cast, float16/bfloat16 arithmetic). Platform-free
 * C11, branch-light so that loops over them vectorise. The rules are those
 * of include/cmetal/ops.h. */
#ifndef CMETAL_CORE_CONVERT_H
#define CMETAL_CORE_CONVERT_H

#include <stdint.h>
#include <string.h>

#include <cmetal/dtype.h>

static inline uint32_t cm__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float cm__f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint64_t cm__f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* float16 -> float32, exact. The exponent is rebiased by a multiply, which
 * also normalises subnormals; infinities and NaNs keep their payload. */
static inline float cm__f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t rest = (uint32_t)(h & 0x7fffu);
    const float scaled = cm__f32_from_bits(rest << 13) * 0x1p112f;
    const uint32_t special = (rest << 13) | 0x7f800000u; /* inf/NaN */
    const uint32_t bits = rest >= 0x7c00u ? special : cm__f32_bits(scaled);
    return cm__f32_from_bits(sign | bits);
}

/* float32 -> float16, round to nearest even. Every case is computed and
 * one selected, without branches, so that loops vectorise. */
static inline uint16_t cm__f32_to_f16(float f) {
    const uint32_t x = cm__f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t u = x & 0x7fffffffu;
    /* Normal: rebias the exponent ((15 - 127) << 23), add half an ulp minus
     * one plus the lowest kept bit; a carry into the exponent is right. */
    const uint32_t norm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
    /* Below 2^-14: adding 0.5 puts the subnormal unit 2^-24 at the last
     * mantissa bit, and the FPU rounds to nearest even. */
    const uint32_t sub = cm__f32_bits(cm__f32_from_bits(u) + 0.5f) - 0x3f000000u;
    /* NaN: keep the top payload bits, set the quiet bit only if none is
     * left (a NaN must stay a NaN). */
    const uint32_t payload = (u >> 13) & 0x3ffu;
    const uint32_t nan = 0x7c00u | payload | (payload == 0 ? 0x200u : 0u);
    uint32_t out = u < 0x38800000u ? sub : norm;
    out = u >= 0x47800000u ? 0x7c00u : out; /* >= 65536: infinity */
    out = u > 0x7f800000u ? nan : out;
    return (uint16_t)(sign | out);
}

/* bfloat16 <-> float32. */
static inline float cm__bf16_to_f32(uint16_t h) {
    return cm__f32_from_bits((uint32_t)h << 16);
}

/* Round to nearest even; a NaN keeps its top payload bits, quieted only if
 * none is left. Branch-free, so that loops vectorise. */
static inline uint16_t cm__f32_to_bf16(float f) {
    const uint32_t u = cm__f32_bits(f);
    const uint32_t h = u >> 16;
    const uint32_t nan = (h & 0x7fu) ? h : h | 0x40u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* float64 -> a binary format with `mbits` fraction bits and exponent bias
 * `bias` (float16: 10, 15; bfloat16: 7, 127), rounded once to nearest
 * even. */
static inline uint16_t cm__f64_to_small(double d, int mbits, int bias) {
    uint64_t b = cm__f64_bits(d);
    const uint16_t sign = (uint16_t)((b >> 48) & 0x8000u);
    b &= 0x7fffffffffffffffull;
    const uint32_t inf = (uint32_t)(2 * bias + 1) << mbits;
    if (b >= 0x7ff0000000000000ull) {
        if (b == 0x7ff0000000000000ull)
            return (uint16_t)(sign | inf);
        uint32_t payload = (uint32_t)(b >> (52 - mbits)) & ((1u << mbits) - 1u);
        if (payload == 0)
            payload = 1u << (mbits - 1);
        return (uint16_t)(sign | inf | payload);
    }
    const int e = (int)(b >> 52) - 1023;
    if (e > bias)
        return (uint16_t)(sign | inf);
    const int emin = 1 - bias;
    if (e < emin - mbits - 1) /* below half the smallest subnormal */
        return sign;
    const uint64_t mant = (b & 0xfffffffffffffull) | (b >> 52 ? 1ull << 52 : 0);
    const int shift = 52 - mbits + (e < emin ? emin - e : 0);
    uint64_t q = mant >> shift;
    const uint64_t rem = mant & ((1ull << shift) - 1u);
    const uint64_t half = 1ull << (shift - 1);
    q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
    if (e < emin)
        return (uint16_t)(sign | q); /* may round up to the smallest normal */
    return (uint16_t)(sign | (((uint32_t)(e + bias - 1) << mbits) + (uint32_t)q));
}

static inline uint16_t cm__f64_to_f16(double d) {
    return cm__f64_to_small(d, 10, 15);
}
static inline uint16_t cm__f64_to_bf16(double d) {
    return cm__f64_to_small(d, 7, 127);
}

/* A 64-bit integer as a double that rounds to any format of at most 51
 * fraction bits exactly as the integer would: bits below the 53 kept are
 * folded into a sticky bit (round to odd). */
static inline double cm__u64_to_f64_sticky(uint64_t m) {
    int k = 0;
    while ((m >> k) >= (1ull << 53))
        ++k;
    if (k == 0)
        return (double)m;
    const uint64_t lost = m & ((1ull << k) - 1u);
    const uint64_t kept = (m >> k) | (lost ? 1u : 0u);
    double d = (double)kept; /* exact: below 2^53 */
    for (int i = 0; i < k; ++i)
        d *= 2.0;
    return d;
}
static inline double cm__i64_to_f64_sticky(int64_t v) {
    const uint64_t m = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
    const double d = cm__u64_to_f64_sticky(m);
    return v < 0 ? -d : d;
}

/* float64 -> integers: truncate, saturate, NaN -> 0. */
#define CM__SAT_FROM_F64(name, T, lo, hi_excl, minv, maxv)                                         \
    static inline T name(double x) {                                                               \
        return x != x ? (T)0 : x >= hi_excl ? (T)(maxv) : x <= lo ? (T)(minv) : (T)x;              \
    }
CM__SAT_FROM_F64(cm__f64_to_i8, int8_t, -128.0, 128.0, INT8_MIN, INT8_MAX)
CM__SAT_FROM_F64(cm__f64_to_i16, int16_t, -32768.0, 32768.0, INT16_MIN, INT16_MAX)
CM__SAT_FROM_F64(cm__f64_to_i32, int32_t, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX)
CM__SAT_FROM_F64(cm__f64_to_i64, int64_t, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN,
                 INT64_MAX)
CM__SAT_FROM_F64(cm__f64_to_u8, uint8_t, -1.0, 256.0, 0, UINT8_MAX)
CM__SAT_FROM_F64(cm__f64_to_u16, uint16_t, -1.0, 65536.0, 0, UINT16_MAX)
CM__SAT_FROM_F64(cm__f64_to_u32, uint32_t, -1.0, 4294967296.0, 0, UINT32_MAX)
CM__SAT_FROM_F64(cm__f64_to_u64, uint64_t, -1.0, 18446744073709551616.0, 0, UINT64_MAX)
#undef CM__SAT_FROM_F64

/* ------------------------------------------------------------ dtype lists
 * X(enum, C storage type, load domain, load macro, store kind, saturating
 * float64 converter, MTLDataType): the one table of the dtypes. The last
 * column names the dtype's MTLDataType (CM__MTL_DATA_<name> in
 * runtime/metal/metal_internal.h), NONE where Metal has none: the MSL
 * kernels of msl/ take exactly the dtypes that have one (msl/common.h is
 * checked against this table by tests/core/test_tables.c). Every element
 * is loaded into one of four domains that hold it exactly: F (float: float16, bfloat16, float32), D (double:
 * float64), I (int64: signed integers and bool), U (uint64: unsigned). A
 * conversion is CM__STORE_<kind>_<domain>(value): one rounding at most.
 * CM__DTYPE_LIST_WITH passes leading arguments through, for cross
 * products (the preprocessor cannot nest one list in itself). */
#define CM__LD_INT(v) ((int64_t)(v))
#define CM__LD_UINT(v) ((uint64_t)(v))
#define CM__LD_F16(v) cm__f16_to_f32(v)
#define CM__LD_BF16(v) cm__bf16_to_f32(v)
#define CM__LD_SAME(v) (v)

#define CM__DTYPE_LIST(X)                                                                          \
    X(CM_BOOL, uint8_t, I, CM__LD_INT, BOOL, cm__f64_to_u8, BOOL)                                  \
    X(CM_INT8, int8_t, I, CM__LD_INT, INT, cm__f64_to_i8, CHAR)                                    \
    X(CM_INT16, int16_t, I, CM__LD_INT, INT, cm__f64_to_i16, SHORT)                                \
    X(CM_INT32, int32_t, I, CM__LD_INT, INT, cm__f64_to_i32, INT)                                  \
    X(CM_INT64, int64_t, I, CM__LD_INT, INT, cm__f64_to_i64, LONG)                                 \
    X(CM_UINT8, uint8_t, U, CM__LD_UINT, INT, cm__f64_to_u8, UCHAR)                                \
    X(CM_UINT16, uint16_t, U, CM__LD_UINT, INT, cm__f64_to_u16, USHORT)                            \
    X(CM_UINT32, uint32_t, U, CM__LD_UINT, INT, cm__f64_to_u32, UINT)                              \
    X(CM_UINT64, uint64_t, U, CM__LD_UINT, INT, cm__f64_to_u64, ULONG)                             \
    X(CM_FLOAT16, uint16_t, F, CM__LD_F16, F16, cm__f64_to_u16, HALF)                              \
    X(CM_BFLOAT16, uint16_t, F, CM__LD_BF16, BF16, cm__f64_to_u16, BFLOAT)                         \
    X(CM_FLOAT32, float, F, CM__LD_SAME, F32, cm__f64_to_u32, FLOAT)                               \
    X(CM_FLOAT64, double, D, CM__LD_SAME, F64, cm__f64_to_u64, NONE)

/* The two copies of the table must agree: their enums, storage sizes and
 * load domains are summed into one number each. */
#define CM__DTYPE_SUM(E, T, DOM, LD, KIND, SAT, MTL)                                               \
    +(int)(E) * 1000 + (int)sizeof(T) * 10 + CM__DOM_##DOM
#define CM__DTYPE_SUM_WITH(P, E, T, DOM, LD, KIND, SAT, MTL)                                       \
    CM__DTYPE_SUM(E, T, DOM, LD, KIND, SAT, MTL)
#define CM__DOM_I 1
#define CM__DOM_U 2
#define CM__DOM_F 3
#define CM__DOM_D 4

#define CM__DTYPE_LIST_WITH(X, ...)                                                                \
    X(__VA_ARGS__, CM_BOOL, uint8_t, I, CM__LD_INT, BOOL, cm__f64_to_u8, BOOL)                     \
    X(__VA_ARGS__, CM_INT8, int8_t, I, CM__LD_INT, INT, cm__f64_to_i8, CHAR)                       \
    X(__VA_ARGS__, CM_INT16, int16_t, I, CM__LD_INT, INT, cm__f64_to_i16, SHORT)                   \
    X(__VA_ARGS__, CM_INT32, int32_t, I, CM__LD_INT, INT, cm__f64_to_i32, INT)                     \
    X(__VA_ARGS__, CM_INT64, int64_t, I, CM__LD_INT, INT, cm__f64_to_i64, LONG)                    \
    X(__VA_ARGS__, CM_UINT8, uint8_t, U, CM__LD_UINT, INT, cm__f64_to_u8, UCHAR)                   \
    X(__VA_ARGS__, CM_UINT16, uint16_t, U, CM__LD_UINT, INT, cm__f64_to_u16, USHORT)               \
    X(__VA_ARGS__, CM_UINT32, uint32_t, U, CM__LD_UINT, INT, cm__f64_to_u32, UINT)                 \
    X(__VA_ARGS__, CM_UINT64, uint64_t, U, CM__LD_UINT, INT, cm__f64_to_u64, ULONG)                \
    X(__VA_ARGS__, CM_FLOAT16, uint16_t, F, CM__LD_F16, F16, cm__f64_to_u16, HALF)                 \
    X(__VA_ARGS__, CM_BFLOAT16, uint16_t, F, CM__LD_BF16, BF16, cm__f64_to_u16, BFLOAT)            \
    X(__VA_ARGS__, CM_FLOAT32, float, F, CM__LD_SAME, F32, cm__f64_to_u32, FLOAT)                  \
    X(__VA_ARGS__, CM_FLOAT64, double, D, CM__LD_SAME, F64, cm__f64_to_u64, NONE)

_Static_assert((0 CM__DTYPE_LIST(CM__DTYPE_SUM)) == (0 CM__DTYPE_LIST_WITH(CM__DTYPE_SUM_WITH, _)),
               "CM__DTYPE_LIST and CM__DTYPE_LIST_WITH differ");

/* CM__STORE_<kind>_<domain>(T, sat, v): v of the domain as a T. */
#define CM__STORE_BOOL_F(T, sat, v) ((T)((v) != 0))
#define CM__STORE_BOOL_D(T, sat, v) ((T)((v) != 0))
#define CM__STORE_BOOL_I(T, sat, v) ((T)((v) != 0))
#define CM__STORE_BOOL_U(T, sat, v) ((T)((v) != 0))
#define CM__STORE_INT_F(T, sat, v) sat((double)(v))
#define CM__STORE_INT_D(T, sat, v) sat(v)
#define CM__STORE_INT_I(T, sat, v) ((T)(uint64_t)(v))
#define CM__STORE_INT_U(T, sat, v) ((T)(v))
#define CM__STORE_F16_F(T, sat, v) cm__f32_to_f16(v)
#define CM__STORE_F16_D(T, sat, v) cm__f64_to_f16(v)
#define CM__STORE_F16_I(T, sat, v) cm__f64_to_f16(cm__i64_to_f64_sticky(v))
#define CM__STORE_F16_U(T, sat, v) cm__f64_to_f16(cm__u64_to_f64_sticky(v))
#define CM__STORE_BF16_F(T, sat, v) cm__f32_to_bf16(v)
#define CM__STORE_BF16_D(T, sat, v) cm__f64_to_bf16(v)
#define CM__STORE_BF16_I(T, sat, v) cm__f64_to_bf16(cm__i64_to_f64_sticky(v))
#define CM__STORE_BF16_U(T, sat, v) cm__f64_to_bf16(cm__u64_to_f64_sticky(v))
#define CM__STORE_F32_F(T, sat, v) (v)
#define CM__STORE_F32_D(T, sat, v) ((float)(v))
#define CM__STORE_F32_I(T, sat, v) ((float)(v))
#define CM__STORE_F32_U(T, sat, v) ((float)(v))
#define CM__STORE_F64_F(T, sat, v) ((double)(v))
#define CM__STORE_F64_D(T, sat, v) (v)
#define CM__STORE_F64_I(T, sat, v) ((double)(v))
#define CM__STORE_F64_U(T, sat, v) ((double)(v))

/* Converts `v`, loaded into domain DOM, to dtype storage type T. */
#define CM__CONVERT(DOM, KIND, T, SAT, v) CM__STORE_##KIND##_##DOM(T, SAT, v)

#endif /* CMETAL_CORE_CONVERT_H */

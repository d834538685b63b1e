/* SPDX-License-Identifier: MIT */
/* Helpers for the op suites: views of every layout filled with
 * deterministic values, element access as raw bytes, and reference
 * conversions written independently of the library. Public API only. */
#ifndef CMETAL_TESTS_OPS_UTIL_H
#define CMETAL_TESTS_OPS_UTIL_H

#include <cmetal/cmetal.h>

#include <criterion/criterion.h>

#include "check.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

typedef union elem {
    uint8_t b[8];
    uint8_t u8;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    float f32;
    double f64;
} elem;

enum layout { L_CONTIG, L_TRANSPOSED, L_STEP, L_NEGATIVE, L_BROADCAST, L_COUNT };
static const char *const layout_names[L_COUNT] = {"contiguous", "transposed", "step", "negative",
                                                  "broadcast"};

static inline size_t dsize(cm_dtype d) {
    cm_dtype_info info;
    cm_dtype_get_info(d, &info);
    return info.size;
}
static inline const char *dname(cm_dtype d) {
    cm_dtype_info info;
    return cm_dtype_get_info(d, &info) == CM_OK ? info.name : "?";
}
static inline bool dfloat(cm_dtype d) {
    return d == CM_FLOAT16 || d == CM_BFLOAT16 || d == CM_FLOAT32 || d == CM_FLOAT64;
}
static inline bool dsigned(cm_dtype d) {
    return d == CM_INT8 || d == CM_INT16 || d == CM_INT32 || d == CM_INT64;
}

/* ------------------------------------------------------------ reference
 * The references compute in ref_t: long double where it has a 64-bit
 * mantissa (x87 on x86-64), which holds every value of every dtype; double
 * where long double is double (Apple arm64), or with -DCMTEST_REF_DOUBLE
 * (which tries that build here). With double, a check whose reference
 * needs more than 53 bits (a 64-bit integer beyond 2^53 converted to
 * float64) skips itself and is counted; integers are compared as
 * integers everywhere. */
#if defined(CMTEST_REF_DOUBLE) || LDBL_MANT_DIG < 64
typedef double ref_t;
#define REF_LONG_DOUBLE 0
#define REF_MANT_DIG DBL_MANT_DIG
#define REF_FN(f) f
#define REF_G "g" /* printf conversion of a ref_t: "%.17" REF_G */
#else
typedef long double ref_t;
#define REF_LONG_DOUBLE 1
#define REF_MANT_DIG LDBL_MANT_DIG
#define REF_FN(f) f##l
#define REF_G "Lg"
#endif

/* float16 / bfloat16 decoding from the definition, and encoding by
 * searching the ordered positive bit patterns (no bit tricks). */

static inline ref_t ref_small_value(uint16_t h, bool bf16) {
    const int mbits = bf16 ? 7 : 10, bias = bf16 ? 127 : 15;
    const int e = (h >> mbits) & (bf16 ? 0xff : 0x1f);
    const int m = h & ((1 << mbits) - 1);
    const ref_t sign = (h & 0x8000) ? -1 : 1;
    if (e == (bf16 ? 0xff : 0x1f))
        return m ? (ref_t)NAN : sign * (ref_t)INFINITY;
    if (e == 0)
        return sign * REF_FN(ldexp)((ref_t)m, 1 - bias - mbits);
    return sign * REF_FN(ldexp)((ref_t)(m + (1 << mbits)), e - bias - mbits);
}

/* Nearest, ties to even; overflow to infinity. x must not be NaN. The
 * differences below are exact in double too (x is within a factor two of
 * the patterns it lies between, or they are far apart). */
static inline uint16_t ref_small_encode(ref_t x, bool bf16) {
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const ref_t ax = REF_FN(fabs)(x);
    const uint16_t inf = bf16 ? 0x7f80 : 0x7c00;
    /* Largest finite pattern lo with value <= ax. */
    uint16_t lo = 0, hi = inf;
    if (ax >= ref_small_value(inf, bf16))
        return sign | inf;
    while (hi - lo > 1) {
        const uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (ref_small_value(mid, bf16) <= ax)
            lo = mid;
        else
            hi = mid;
    }
    /* Between lo and lo + 1 (lo + 1 may be infinity: the rounding bound is
     * then max + half an ulp). */
    const ref_t vlo = ref_small_value(lo, bf16);
    ref_t vhi = ref_small_value((uint16_t)(lo + 1), bf16);
    if (lo + 1 == inf)
        vhi = vlo + (vlo - ref_small_value((uint16_t)(lo - 1), bf16));
    const ref_t dlo = ax - vlo, dhi = vhi - ax;
    uint16_t r = lo;
    if (dhi < dlo || (dhi == dlo && (lo & 1)))
        r = (uint16_t)(lo + 1);
    return sign | r;
}

static inline bool ref_small_isnan(uint16_t h, bool bf16) {
    return bf16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}

/* Valgrind emulates long double as double (with infinities that do not
 * compare): there a long double reference is wrong, and the tests that
 * depend on it skip themselves. The double-reference build
 * (test_ops_matrix_cpu_double_ref) runs them under valgrind in full. */
static inline bool ref_trustworthy(void) {
#if REF_LONG_DOUBLE
    if (RUNNING_ON_VALGRIND)
        return false;
    const char *preload = getenv("LD_PRELOAD");
    return preload == NULL || strstr(preload, "vgpreload") == NULL;
#else
    return true;
#endif
}

#define REQUIRE_TRUSTWORTHY_REFERENCE()                                                            \
    do {                                                                                           \
        if (!ref_trustworthy())                                                                    \
            cr_skip_test("the long double reference is double under valgrind; "                    \
                         "test_ops_matrix_cpu_double_ref runs this test there");                   \
    } while (0)

/* An integer element's bits, sign-extended to 64; and back, truncated. */
static inline uint64_t bits64(cm_dtype d, elem e) {
    switch (d) {
    case CM_INT8: return (uint64_t)(int64_t)e.i8;
    case CM_INT16: return (uint64_t)(int64_t)e.i16;
    case CM_INT32: return (uint64_t)(int64_t)e.i32;
    case CM_INT64: return (uint64_t)e.i64;
    case CM_UINT16: return e.u16;
    case CM_UINT32: return e.u32;
    case CM_UINT64: return e.u64;
    default: return e.u8;
    }
}

static inline elem of_bits(cm_dtype d, uint64_t bits) {
    elem r;
    memset(&r, 0, sizeof r);
    memcpy(r.b, &bits, dsize(d)); /* little-endian truncation */
    return r;
}

/* An element as a ref_t (exact unless ref_holds says otherwise). */
static inline ref_t elem_value(cm_dtype d, elem e) {
    switch (d) {
    case CM_BOOL: return e.u8;
    case CM_INT8: return e.i8;
    case CM_INT16: return e.i16;
    case CM_INT32: return e.i32;
    case CM_INT64: return (ref_t)e.i64;
    case CM_UINT8: return e.u8;
    case CM_UINT16: return e.u16;
    case CM_UINT32: return e.u32;
    case CM_UINT64: return (ref_t)e.u64;
    case CM_FLOAT16: return ref_small_value(e.u16, false);
    case CM_BFLOAT16: return ref_small_value(e.u16, true);
    case CM_FLOAT32: return e.f32;
    case CM_FLOAT64: return e.f64;
    default: return 0;
    }
}

static inline bool wide_int(cm_dtype d) {
    return d == CM_INT64 || d == CM_UINT64;
}

static inline uint64_t wide_magnitude(cm_dtype d, elem e) {
    return d == CM_INT64 && e.i64 < 0 ? 0 - e.u64 : e.u64;
}

static inline int bit_length(uint64_t m) {
    int n = 0;
    for (; m != 0; m >>= 1)
        ++n;
    return n;
}

/* Whether ref_t holds e's value exactly: all but 64-bit integers with more
 * significant bits than REF_MANT_DIG. */
static inline bool ref_holds(cm_dtype d, elem e) {
    if (!wide_int(d))
        return true;
    uint64_t mag = wide_magnitude(d, e);
    while (mag != 0 && (mag & 1) == 0)
        mag >>= 1; /* trailing zeros cost no precision */
    return bit_length(mag) <= REF_MANT_DIG;
}

/* e's value rounded to odd at REF_MANT_DIG bits: a 64-bit integer cut to
 * that many significant bits, the last one set if any bit cut was. One more
 * rounding to nearest, to REF_MANT_DIG - 2 bits or fewer, rounds the value
 * itself correctly (Boldo and Melquiond's rounding to odd): so a double
 * reference converts every 64-bit integer exactly to float32 and narrower. */
static inline ref_t elem_value_odd(cm_dtype d, elem e) {
    if (!wide_int(d))
        return elem_value(d, e);
    const uint64_t mag = wide_magnitude(d, e);
    const int len = bit_length(mag);
    const int cut = len > REF_MANT_DIG ? len - REF_MANT_DIG : 0;
    uint64_t kept = mag >> cut;
    if (cut > 0 && (mag & ((1ull << cut) - 1)) != 0)
        kept |= 1;
    const ref_t v = REF_FN(ldexp)((ref_t)kept, cut);
    return d == CM_INT64 && e.i64 < 0 ? -v : v;
}

/* -1, 0 or 1 as a is below, equal to or above b; integers exactly, floats
 * by value (0 when either is NaN). */
static inline int elem_order(cm_dtype d, elem a, elem b) {
    if (!dfloat(d)) {
        const uint64_t x = bits64(d, a), y = bits64(d, b);
        if (dsigned(d))
            return (int64_t)x<(int64_t)y ? -1 : (int64_t)x>(int64_t) y;
        return x < y ? -1 : x > y;
    }
    const ref_t x = elem_value(d, a), y = elem_value(d, b);
    return x < y ? -1 : x > y;
}

/* The reference conversion of a value (exact ref_t) to dtype d: nonzero
 * -> true; float to int truncates and saturates, NaN -> 0; int to int
 * wraps (done by the caller, see ref_convert); floats round to nearest
 * even. The saturation bounds are powers of two, exact in any ref_t. */
static inline elem ref_from_value(cm_dtype d, ref_t x) {
    elem r;
    memset(&r, 0, sizeof r);
    if (d == CM_BOOL) {
        r.u8 = x != 0;
        return r;
    }
    if (!dfloat(d)) {
        const int bits = 8 * (int)dsize(d) - (dsigned(d) ? 1 : 0);
        const ref_t top = REF_FN(ldexp)(1, bits); /* the first value above range */
        const ref_t t = isnan(x) ? 0 : REF_FN(trunc)(x);
        if (t >= top)
            return of_bits(d, ~0ull >> (64 - bits));
        if (dsigned(d))
            return of_bits(d, t < -top ? 0 - (1ull << bits) : (uint64_t)(int64_t)t);
        return of_bits(d, t < 0 ? 0 : (uint64_t)t);
    }
    if (isnan(x)) { /* the NaN's payload is checked separately */
        switch (d) {
        case CM_FLOAT16: r.u16 = 0x7e00; break;
        case CM_BFLOAT16: r.u16 = 0x7fc0; break;
        case CM_FLOAT32: r.f32 = NAN; break;
        default: r.f64 = NAN; break;
        }
        return r;
    }
    switch (d) {
    case CM_FLOAT16: r.u16 = ref_small_encode(x, false); break;
    case CM_BFLOAT16: r.u16 = ref_small_encode(x, true); break;
    case CM_FLOAT32: r.f32 = (float)x; break; /* one rounding from exact */
    default: r.f64 = (double)x; break;
    }
    return r;
}

static inline bool elem_isnan(cm_dtype d, elem e) {
    switch (d) {
    case CM_FLOAT16: return ref_small_isnan(e.u16, false);
    case CM_BFLOAT16: return ref_small_isnan(e.u16, true);
    case CM_FLOAT32: return isnan(e.f32);
    case CM_FLOAT64: return isnan(e.f64);
    default: return false;
    }
}

/* Integer-to-integer conversions wrap, to bool test for zero; everything
 * else by value. */
static inline elem ref_convert(cm_dtype to, cm_dtype from, elem v) {
    if (!dfloat(from) && !dfloat(to))
        return to == CM_BOOL ? of_bits(to, bits64(from, v) != 0) : of_bits(to, bits64(from, v));
    return ref_from_value(to, elem_value_odd(from, v));
}

/* Whether ref_convert(to, from, v) is exact with ref_t: all but a 64-bit
 * integer that ref_t does not hold to float64 (rounding to odd needs two
 * bits more than float64 has). */
static inline bool ref_convert_exact(cm_dtype to, cm_dtype from, elem v) {
    return to != CM_FLOAT64 || ref_holds(from, v);
}

static inline bool elem_bits_equal(cm_dtype d, elem a, elem b) {
    return memcmp(a.b, b.b, dsize(d)) == 0;
}

/* ------------------------------------------------------------ values */

static inline uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A deterministic element of d: edge values, random bits, moderate
 * numbers; `tame` keeps floats finite in [-8, 8] and integers small. */
static inline elem gen_elem(cm_dtype d, uint64_t i, uint64_t seed, bool tame) {
    uint64_t r = mix(i * 1000003u + seed);
    elem e;
    memset(&e, 0, sizeof e);
    const unsigned pick = (unsigned)(r >> 56) % 8;
    r = mix(r);
    if (tame) {
        const ref_t x = (ref_t)((int64_t)(r % 33) - 16) / 2;
        if (d == CM_BOOL)
            e.u8 = (uint8_t)(r & 1);
        else if (!dfloat(d) && !dsigned(d))
            e = ref_from_value(d, REF_FN(fabs)(x) * 2);
        else
            e = ref_from_value(d, x);
        return e;
    }
    switch (d) {
    case CM_BOOL: e.u8 = (uint8_t)(r & 1); return e;
    case CM_FLOAT32: {
        static const float sp[] = {0.0f,  -0.0f, 1.0f,  -1.5f,           2.5f,  65504.0f, 65520.0f,
                                   1e10f, -3e9f, 1e-7f, 1.17549435e-38f, 1e-45f};
        if (pick == 0) {
            e.f32 = INFINITY;
            return e;
        }
        if (pick == 1) {
            e.f32 = sp[r % 12];
            return e;
        }
        if (pick == 2) {
            e.u32 = (uint32_t)r;
            return e;
        }
        e.f32 = (float)((int64_t)(r % 20001) - 10000) / 64.0f;
        return e;
    }
    case CM_FLOAT64: {
        static const double sp[] = {0.0,
                                    -0.0,
                                    1.0,
                                    -1.5,
                                    2.5,
                                    65504.0,
                                    65520.0,
                                    1e300,
                                    -9.3e18,
                                    1e-7,
                                    2.2250738585072014e-308,
                                    5e-324,
                                    1.8446744073709552e19,
                                    -9.223372036854775808e18};
        if (pick == 0) {
            e.f64 = NAN;
            return e;
        }
        if (pick == 1) {
            e.f64 = sp[r % 14];
            return e;
        }
        if (pick == 2) {
            e.u64 = r;
            return e;
        }
        e.f64 = (double)((int64_t)(r % 2000001) - 1000000) / 1024.0;
        return e;
    }
    default: break;
    }
    if (pick < 2 && !dfloat(d)) { /* extremes */
        const unsigned which = (unsigned)(r % 4);
        uint64_t bits = which == 0 ? 0 : which == 1 ? ~0ull : which == 2 ? 1 : 0;
        if (which == 3) { /* the signed minimum */
            bits = 1ull << (8 * dsize(d) - 1);
        }
        memcpy(e.b, &bits, dsize(d));
        return e;
    }
    if (pick < 5 || !dfloat(d)) { /* random bits */
        memcpy(e.b, &r, dsize(d));
        if (!dfloat(d) && pick >= 5) { /* small values too */
            int64_t v = (int64_t)(r % 201) - 100;
            if (!dsigned(d) && v < 0)
                v = -v;
            uint64_t bits = (uint64_t)v;
            memcpy(e.b, &bits, dsize(d));
        }
        return e;
    }
    return ref_from_value(d, (ref_t)((int64_t)(r % 2001) - 1000) / 16);
}

/* ------------------------------------------------------------ tensors */

static inline cm_tensor *new_tensor(cm_device *dev, cm_dtype d, int32_t ndim,
                                    const int64_t *shape) {
    cm_tensor_desc desc = {.dtype = d, .ndim = ndim, .shape = shape};
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(dev, &desc, &t));
    return t;
}

static inline int64_t numel_of(int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t k = 0; k < ndim; ++k)
        n *= shape[k];
    return n;
}

/* Writes gen_elem values over a compact tensor's storage. */
static inline void fill_gen(cm_tensor *t, uint64_t seed, bool tame) {
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    if (info.numel == 0)
        return;
    void *p = NULL;
    CHECK(cm_tensor_host_write(t, info.dtype, &p));
    const size_t sz = dsize(info.dtype);
    for (int64_t i = 0; i < info.numel; ++i) {
        elem e = gen_elem(info.dtype, (uint64_t)i, seed, tame);
        memcpy((char *)p + (size_t)i * sz, e.b, sz);
    }
}

/* A view of `shape` with layout L over a fresh buffer filled by fill_gen
 * (seed, tame). *parent_out, if not NULL, receives the compact tensor that
 * owns the whole buffer (+1). */
static inline cm_tensor *make_view(cm_device *dev, cm_dtype d, int32_t ndim, const int64_t *shape,
                                   enum layout L, uint64_t seed, bool tame,
                                   cm_tensor **parent_out) {
    int64_t ps[CM_MAX_NDIM] = {0}; /* the first ndim set below; GCC -O3 cannot tell */
    if (ndim > 0)
        memcpy(ps, shape, sizeof(int64_t) * (size_t)ndim);
    if (ndim == 0)
        L = L_CONTIG;
    if (L == L_TRANSPOSED && ndim >= 2)
        for (int32_t k = 0; k < ndim; ++k)
            ps[k] = shape[ndim - 1 - k];
    if (L == L_STEP) {
        ps[ndim - 1] = shape[ndim - 1] * 2 + 1;
        if (ndim >= 2)
            ps[0] = shape[0] * 3;
    }
    if (L == L_BROADCAST)
        ps[0] = 1;
    cm_tensor *parent = new_tensor(dev, d, ndim, ps);
    fill_gen(parent, seed, tame);
    cm_tensor *v = NULL, *tmp = NULL;
    switch (L) {
    case L_CONTIG:
        CHECK(cm_tensor_retain(parent));
        v = parent;
        break;
    case L_TRANSPOSED: {
        int32_t axes[CM_MAX_NDIM];
        for (int32_t k = 0; k < ndim; ++k)
            axes[k] = ndim - 1 - k;
        CHECK(cm_tensor_permute(parent, axes, &v));
        break;
    }
    case L_STEP:
        CHECK(cm_tensor_slice(parent, ndim - 1, 1, CM_SLICE_DEFAULT, 2, &tmp));
        if (ndim >= 2) {
            CHECK(cm_tensor_slice(tmp, 0, 2, CM_SLICE_DEFAULT, 3, &v));
            cm_tensor_release(tmp);
        } else {
            v = tmp;
        }
        break;
    case L_NEGATIVE:
        CHECK(cm_tensor_slice(parent, 0, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &tmp));
        if (ndim >= 2) {
            CHECK(cm_tensor_slice(tmp, ndim - 1, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &v));
            cm_tensor_release(tmp);
        } else {
            v = tmp;
        }
        break;
    case L_BROADCAST: CHECK(cm_tensor_broadcast_to(parent, ndim, shape, &v)); break;
    default: break;
    }
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(v, &info));
    cr_assert_eq(info.ndim, ndim);
    for (int32_t k = 0; k < ndim; ++k)
        cr_assert_eq(info.shape[k], shape[k], "layout %s axis %d", layout_names[L], k);
    if (parent_out != NULL)
        *parent_out = parent;
    else
        cm_tensor_release(parent);
    return v;
}

static inline elem get_at(const cm_tensor *t, const int64_t *idx) {
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    elem e;
    memset(&e, 0, sizeof e);
    CHECK(cm_tensor_get_element(t, info.ndim ? idx : NULL, info.dtype, e.b));
    return e;
}

/* Next multi-index in row-major order; false after the last. */
static inline bool next_index(int32_t ndim, const int64_t *shape, int64_t *idx) {
    for (int32_t k = ndim - 1; k >= 0; --k) {
        if (++idx[k] < shape[k])
            return true;
        idx[k] = 0;
    }
    return false;
}

/* Index of a broadcast input of shape (nd, sh) for out index oi (ondim). */
static inline void bcast_index(int32_t ondim, const int64_t *oi, int32_t nd, const int64_t *sh,
                               int64_t *ii) {
    for (int32_t k = 0; k < nd; ++k)
        ii[k] = sh[k] == 1 ? 0 : oi[k + ondim - nd];
}

static inline cm_device *cpu(void) {
    cm_device *d = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &d));
    return d;
}

/* Shapes every op is run over: 0-d, empty, single, odd lengths, size-one
 * axes, 4-d, and rows long enough for vectorised loops. */
typedef struct test_shape {
    int32_t ndim;
    int64_t shape[4];
} test_shape;
static const test_shape test_shapes[] = {
    {0, {0}},    {1, {0}},       {1, {1}},      {1, {13}},         {2, {3, 0}},   {2, {4, 7}},
    {2, {1, 9}}, {3, {2, 3, 5}}, {2, {17, 33}}, {4, {2, 1, 3, 4}}, {2, {1, 300}},
};
#define N_TEST_SHAPES (sizeof test_shapes / sizeof test_shapes[0])

/* float64 last: the Metal device computes all but it. */
static const cm_dtype all_dtypes[] = {CM_BOOL,     CM_INT8,    CM_INT16,  CM_INT32,  CM_INT64,
                                      CM_UINT8,    CM_UINT16,  CM_UINT32, CM_UINT64, CM_FLOAT16,
                                      CM_BFLOAT16, CM_FLOAT32, CM_FLOAT64};
#define N_DTYPES 13

#endif /* CMETAL_TESTS_OPS_UTIL_H */

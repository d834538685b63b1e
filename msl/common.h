/* SPDX-License-Identifier: MIT */
// Shared by every msl/*.metal file: the build joins this header and the
// .metal files into one source (msl/CMakeLists.txt), compiled once per
// device. These kernels have run only on softmetal (tools/softmetal), never
// on real Metal hardware.
//
// Design: kernels are generic over dtype at run time. Each element is
// loaded as raw bits, decoded into a small tagged value (int64, uint64 or
// float), computed on, and encoded into the output dtype by the rules of
// include/cmetal/ops.h, bit for bit as runtime/core/convert.h. float16 and
// bfloat16 are decoded and encoded with integer bit operations (no half or
// bfloat arithmetic), so NaN payloads survive and no rounding depends on
// the GPU's float16 units or on flushing of subnormals. NaN tests look at
// the bits, so they hold even where fast math is on.
#include <metal_stdlib>
using namespace metal;

// cm_dtype values (include/cmetal/dtype.h): every dtype of CM__DTYPE_LIST
// (runtime/core/convert.h) with an MTLDataType, checked with its size and
// domain below by tests/core/test_tables.c.
#define CM_BOOL 1
#define CM_INT8 2
#define CM_INT16 3
#define CM_INT32 4
#define CM_INT64 5
#define CM_UINT8 6
#define CM_UINT16 7
#define CM_UINT32 8
#define CM_UINT64 9
#define CM_FLOAT16 10
#define CM_BFLOAT16 11
#define CM_FLOAT32 12

#define CM_MAX_NDIM 16

// The arguments of every elementwise kernel (fill, copy, cast, unary,
// binary); runtime/metal/metal_ops.c has the same layout. Byte offsets are
// those of element 0 from the start of the bound buffer (bound at offset
// 0), so negative strides stay inside the buffer.
struct cm_ew_args {
    uint ndim;
    uint code;       // cm_unary_op / cm_binary_op
    uint out_dtype;
    uint in0_dtype;
    uint in1_dtype;
    uint pad_;
    long numel;
    long out_offset;
    long in0_offset;
    long in1_offset;
    ulong value;     // fill: the element's bits
    long shape[CM_MAX_NDIM];
    long out_strides[CM_MAX_NDIM];
    long in0_strides[CM_MAX_NDIM];
    long in1_strides[CM_MAX_NDIM];
};

// Reductions: `outer` axes index the outputs, `inner` axes the reduced
// elements of one output (both coalesced by the host). A long reduction of
// few outputs is split: stage 1 reduces `split` chunks of `chunk` elements
// per output into 64-bit partial accumulators, stage 2 combines them.
#define CM_REDUCE_WHOLE 0u
#define CM_REDUCE_PARTIAL 1u
#define CM_REDUCE_FINISH 2u

struct cm_reduce_args {
    uint outer_ndim;
    uint inner_ndim;
    uint code;       // cm_reduce_op
    uint out_dtype;
    uint in_dtype;
    uint stage;      // CM_REDUCE_WHOLE, _PARTIAL or _FINISH
    long nout;       // outputs
    long count;      // reduced elements per output
    long split;      // chunks per output (1 unless split)
    long chunk;      // elements per chunk
    long out_offset;
    long in_offset;
    long outer_shape[CM_MAX_NDIM];
    long outer_out_strides[CM_MAX_NDIM];
    long outer_in_strides[CM_MAX_NDIM];
    long inner_shape[CM_MAX_NDIM];
    long inner_in_strides[CM_MAX_NDIM];
};

// ---------------------------------------------------------------- bits

inline uint cm_dtype_size(uint dt) {
    switch (dt) {
    case CM_BOOL: case CM_INT8: case CM_UINT8: return 1;
    case CM_INT16: case CM_UINT16: case CM_FLOAT16: case CM_BFLOAT16: return 2;
    case CM_INT32: case CM_UINT32: case CM_FLOAT32: return 4;
    case CM_INT64: case CM_UINT64: return 8;
    default: return 1; // not reached: the host checks the dtype
    }
}

inline ulong cm_load_bits(device const uchar *base, long byte, uint size) {
    device const uchar *p = base + byte;
    switch (size) {
    case 1: return ulong(*p);
    case 2: return ulong(*(device const ushort *)p);
    case 4: return ulong(*(device const uint *)p);
    default: return *(device const ulong *)p;
    }
}

inline void cm_store_bits(device uchar *base, long byte, uint size, ulong v) {
    device uchar *p = base + byte;
    switch (size) {
    case 1: *p = uchar(v); break;
    case 2: *(device ushort *)p = ushort(v); break;
    case 4: *(device uint *)p = uint(v); break;
    default: *(device ulong *)p = v; break;
    }
}

// Element offset of linear index i (row-major over shape) along strides.
inline long cm_offset(long i, uint ndim, constant long *shape, constant long *strides) {
    if (ndim == 1u) // the common case once the host has coalesced axes
        return i * strides[0];
    long off = 0;
    for (uint k = ndim; k-- > 0;) {
        const long n = shape[k];
        const long q = i / n;
        off += (i - q * n) * strides[k];
        i = q;
    }
    return off;
}

// Whether out and in0 (and in1 when operands is 3) are each one contiguous
// run of 4-byte elements (the host coalesces contiguous axes into one):
// the elementwise kernels then index float pointers directly. The same for
// every thread of the grid.
inline bool cm_contiguous_f32(constant cm_ew_args &a, uint operands) {
    if (a.ndim != 1u || a.out_strides[0] != 1 || a.in0_strides[0] != 1 ||
        (a.out_offset | a.in0_offset) % 4 != 0)
        return false;
    return operands < 3u || (a.in1_strides[0] == 1 && a.in1_offset % 4 == 0);
}

// ---------------------------------------------------------------- floats

inline bool cm_isnan(float f) {
    return (as_type<uint>(f) & 0x7fffffffu) > 0x7f800000u;
}

// float16 bits -> float32, exact, payloads kept.
inline float cm_f16_to_f32(uint h) {
    const uint sign = (h & 0x8000u) << 16;
    const uint e = (h >> 10) & 0x1fu;
    const uint m = h & 0x3ffu;
    if (e == 0x1fu)
        return as_type<float>(sign | 0x7f800000u | (m << 13));
    if (e == 0u) // subnormal or zero: m * 2^-24 is exact
        return as_type<float>(sign | as_type<uint>(float(m) * 5.9604644775390625e-8f));
    return as_type<float>(sign | ((e + 112u) << 23) | (m << 13));
}

// float32 -> float16 bits, nearest even; NaN stays NaN with its sign and
// top payload bits.
inline uint cm_f32_to_f16(float f) {
    uint u = as_type<uint>(f);
    const uint sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    uint out;
    if (u >= 0x47800000u) { // >= 65536, inf or NaN
        uint payload = (u >> 13) & 0x3ffu;
        if (u > 0x7f800000u && payload == 0u)
            payload = 0x200u;
        out = u > 0x7f800000u ? (0x7c00u | payload) : 0x7c00u;
    } else if (u < 0x38800000u) { // float16 subnormal or zero: units of 2^-24
        const uint e = u >> 23;
        const uint shift = 126u - e;
        if (e == 0u || shift >= 25u) {
            out = 0u;
        } else {
            const uint mant = (u & 0x7fffffu) | 0x800000u;
            uint q = mant >> shift;
            const uint rem = mant & ((1u << shift) - 1u);
            const uint half = 1u << (shift - 1u);
            if (rem > half || (rem == half && (q & 1u) != 0u))
                q += 1u;
            out = q;
        }
    } else {
        const uint odd = (u >> 13) & 1u;
        u += 0xc8000fffu + odd; // rebias, add half - 1 (+1 when odd)
        out = u >> 13;
    }
    return sign | out;
}

inline float cm_bf16_to_f32(uint h) {
    return as_type<float>(h << 16);
}

inline uint cm_f32_to_bf16(float f) {
    const uint u = as_type<uint>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        const uint h = u >> 16;
        return (h & 0x7fu) != 0u ? h : (h | 0x40u);
    }
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// A 64-bit magnitude m > 0 as a binary float with `mbits` fraction bits
// and exponent bias `bias`, nearest even; overflow gives infinity. Integers
// never land in the subnormal range of float16, bfloat16 or float32.
inline uint cm_u64_to_float_bits(ulong m, uint mbits, uint bias) {
    if (m == 0ul)
        return 0u;
    const uint hi = uint(m >> 32);
    const uint p = hi != 0u ? 63u - clz(hi) : 31u - clz(uint(m));
    ulong q;
    if (p <= mbits) {
        q = m << (mbits - p);
    } else {
        const uint shift = p - mbits;
        q = m >> shift;
        const ulong rem = m & ((1ul << shift) - 1ul);
        const ulong half = 1ul << (shift - 1u);
        if (rem > half || (rem == half && (q & 1ul) != 0ul))
            q += 1ul;
    }
    const ulong inf = ulong(2u * bias + 1u) << mbits;
    const ulong bits = (ulong(p + bias - 1u) << mbits) + q; // a carry is right
    return uint(bits >= inf ? inf : bits);
}

// ---------------------------------------------------------------- values

#define CM_DOM_I 0u // signed integers and bool, sign-extended to 64 bits
#define CM_DOM_U 1u // unsigned integers
#define CM_DOM_F 2u // float16, bfloat16, float32 as float

struct cm_num {
    uint dom;
    ulong x; // DOM_I / DOM_U
    float f; // DOM_F
};

inline uint cm_domain(uint dt) {
    switch (dt) {
    case CM_BOOL: case CM_INT8: case CM_INT16: case CM_INT32: case CM_INT64: return CM_DOM_I;
    case CM_UINT8: case CM_UINT16: case CM_UINT32: case CM_UINT64: return CM_DOM_U;
    case CM_FLOAT16: case CM_BFLOAT16: case CM_FLOAT32: return CM_DOM_F;
    default: return CM_DOM_I; // not reached
    }
}

inline cm_num cm_decode(ulong bits, uint dt) {
    cm_num v;
    v.dom = cm_domain(dt);
    v.x = bits;
    v.f = 0.0f;
    switch (dt) {
    case CM_INT8: v.x = ulong(long(char(uchar(bits)))); break;
    case CM_INT16: v.x = ulong(long(short(ushort(bits)))); break;
    case CM_INT32: v.x = ulong(long(int(uint(bits)))); break;
    case CM_FLOAT16: v.f = cm_f16_to_f32(uint(bits)); break;
    case CM_BFLOAT16: v.f = cm_bf16_to_f32(uint(bits)); break;
    case CM_FLOAT32: v.f = as_type<float>(uint(bits)); break;
    default: break;
    }
    return v;
}

inline cm_num cm_num_int(ulong x, uint dom) {
    cm_num v;
    v.dom = dom;
    v.x = x;
    v.f = 0.0f;
    return v;
}

inline cm_num cm_num_float(float f) {
    cm_num v;
    v.dom = CM_DOM_F;
    v.x = 0ul;
    v.f = f;
    return v;
}

// float -> integer dtype: truncate, saturate, NaN -> 0 (bits, unmasked).
inline ulong cm_float_to_int(float f, uint dt) {
    if (cm_isnan(f))
        return 0ul;
    switch (dt) {
    case CM_INT8: return f >= 128.0f ? 127ul : f <= -128.0f ? ulong(-128l) : ulong(long(int(f)));
    case CM_INT16:
        return f >= 32768.0f ? 32767ul : f <= -32768.0f ? ulong(-32768l) : ulong(long(int(f)));
    case CM_INT32:
        return f >= 2147483648.0f ? 2147483647ul
               : f <= -2147483648.0f ? ulong(long(-2147483647) - 1l)
                                     : ulong(long(int(f)));
    case CM_INT64:
        return f >= 9223372036854775808.0f ? 0x7ffffffffffffffful
               : f <= -9223372036854775808.0f ? 0x8000000000000000ul
                                              : ulong(long(f));
    case CM_UINT8: return f >= 256.0f ? 255ul : f < 1.0f ? 0ul : ulong(uint(f));
    case CM_UINT16: return f >= 65536.0f ? 65535ul : f < 1.0f ? 0ul : ulong(uint(f));
    case CM_UINT32: return f >= 4294967296.0f ? 4294967295ul : f < 1.0f ? 0ul : ulong(uint(f));
    default: return f >= 18446744073709551616.0f ? ~0ul : f < 1.0f ? 0ul : ulong(f);
    }
}

// A value as the bits of dtype dt, by the conversion rules of ops.h.
inline ulong cm_encode(cm_num v, uint dt) {
    if (dt == CM_BOOL)
        return v.dom == CM_DOM_F ? ulong((as_type<uint>(v.f) & 0x7fffffffu) != 0u)
                                 : ulong(v.x != 0ul);
    if (cm_domain(dt) != CM_DOM_F) // integers: wrap (truncation on store) or saturate
        return v.dom == CM_DOM_F ? cm_float_to_int(v.f, dt) : v.x;
    if (v.dom == CM_DOM_F) {
        switch (dt) {
        case CM_FLOAT16: return cm_f32_to_f16(v.f);
        case CM_BFLOAT16: return cm_f32_to_bf16(v.f);
        default: return as_type<uint>(v.f);
        }
    }
    const bool neg = v.dom == CM_DOM_I && long(v.x) < 0l;
    const ulong m = neg ? 0ul - v.x : v.x;
    switch (dt) {
    case CM_FLOAT16: return (neg ? 0x8000u : 0u) | cm_u64_to_float_bits(m, 10u, 15u);
    case CM_BFLOAT16: return (neg ? 0x8000u : 0u) | cm_u64_to_float_bits(m, 7u, 127u);
    default: return (neg ? 0x80000000u : 0u) | cm_u64_to_float_bits(m, 23u, 127u);
    }
}

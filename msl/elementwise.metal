// SPDX-License-Identifier: MIT
// Unary and binary elementwise ops over up to 16 strided axes (inputs
// broadcast with stride 0). Integers compute in 64 bits and wrap when
// stored; float16 and bfloat16 compute in float32 and round once.

// cm_unary_op values (include/cmetal/ops.h; every op of
// runtime/core/op_table.h, checked by tests/core/test_tables.c).
#define CM_UNARY_NEG 1
#define CM_UNARY_ABS 2
#define CM_UNARY_SQUARE 3
#define CM_UNARY_RELU 4
#define CM_UNARY_SIGN 5
#define CM_UNARY_SQRT 6
#define CM_UNARY_RSQRT 7
#define CM_UNARY_EXP 8
#define CM_UNARY_LOG 9
#define CM_UNARY_SIN 10
#define CM_UNARY_COS 11
#define CM_UNARY_TANH 12
#define CM_UNARY_SIGMOID 13
#define CM_UNARY_FLOOR 14
#define CM_UNARY_CEIL 15

// cm_binary_op values.
#define CM_BINARY_ADD 1
#define CM_BINARY_SUB 2
#define CM_BINARY_MUL 3
#define CM_BINARY_DIV 4
#define CM_BINARY_MIN 5
#define CM_BINARY_MAX 6
#define CM_BINARY_EQ 7
#define CM_BINARY_NE 8
#define CM_BINARY_LT 9
#define CM_BINARY_LE 10
#define CM_BINARY_GT 11
#define CM_BINARY_GE 12

inline float cm_unary_float(uint op, float x) {
    const uint b = as_type<uint>(x);
    switch (op) {
    case CM_UNARY_NEG: return as_type<float>(b ^ 0x80000000u);
    case CM_UNARY_ABS: return as_type<float>(b & 0x7fffffffu);
    case CM_UNARY_SQUARE: return x * x;
    case CM_UNARY_RELU: return (cm_isnan(x) || x > 0.0f) ? x : 0.0f;
    case CM_UNARY_SIGN: return cm_isnan(x) ? x : x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f;
    case CM_UNARY_SQRT: return precise::sqrt(x);
    case CM_UNARY_RSQRT: return 1.0f / precise::sqrt(x);
    case CM_UNARY_EXP: return precise::exp(x);
    case CM_UNARY_LOG: return precise::log(x);
    case CM_UNARY_SIN: return precise::sin(x);
    case CM_UNARY_COS: return precise::cos(x);
    case CM_UNARY_TANH: return precise::tanh(x);
    case CM_UNARY_SIGMOID: return 1.0f / (1.0f + precise::exp(-x));
    case CM_UNARY_FLOOR: return floor(x);
    case CM_UNARY_CEIL: return ceil(x);
    default: return x; // not reached: the host checks the op
    }
}

inline ulong cm_unary_int(uint op, ulong x, bool is_signed) {
    const long s = long(x);
    switch (op) {
    case CM_UNARY_NEG: return 0ul - x;
    case CM_UNARY_ABS: return (is_signed && s < 0l) ? 0ul - x : x;
    case CM_UNARY_SQUARE: return x * x;
    case CM_UNARY_RELU: return (is_signed && s < 0l) ? 0ul : x;
    case CM_UNARY_SIGN:
        if (!is_signed)
            return x != 0ul ? 1ul : 0ul;
        return s > 0l ? 1ul : s < 0l ? ~0ul : 0ul;
    default: return x; // not reached: float-only ops take floats
    }
}

kernel void cm_unary(device uchar *out [[buffer(0)]],
                     device const uchar *in0 [[buffer(1)]],
                     constant cm_ew_args &a [[buffer(2)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    if (a.out_dtype == CM_FLOAT32 && cm_contiguous_f32(a, 2u)) { // the common case, undecoded
        device float *o = (device float *)(out + a.out_offset);
        device const float *x = (device const float *)(in0 + a.in0_offset);
        for (long i = long(gid); i < a.numel; i += long(gsize))
            o[i] = cm_unary_float(a.code, x[i]);
        return;
    }
    const uint dt = a.out_dtype, size = cm_dtype_size(dt), dom = cm_domain(dt);
    for (long i = long(gid); i < a.numel; i += long(gsize)) {
        const long o = cm_offset(i, a.ndim, a.shape, a.out_strides);
        const long s = cm_offset(i, a.ndim, a.shape, a.in0_strides);
        const cm_num x = cm_decode(cm_load_bits(in0, a.in0_offset + s * long(size), size), dt);
        const cm_num r = dom == CM_DOM_F
                             ? cm_num_float(cm_unary_float(a.code, x.f))
                             : cm_num_int(cm_unary_int(a.code, x.x, dom == CM_DOM_I), dom);
        cm_store_bits(out, a.out_offset + o * long(size), size, cm_encode(r, dt));
    }
}

// Whether the op compares (its result is bool).
inline bool cm_binary_compares(uint op) {
    switch (op) {
    case CM_BINARY_EQ: case CM_BINARY_NE: case CM_BINARY_LT:
    case CM_BINARY_LE: case CM_BINARY_GT: case CM_BINARY_GE: return true;
    default: return false;
    }
}

// Comparisons: NaN is unequal to everything.
inline bool cm_compare(uint op, cm_num x, cm_num y) {
    if (x.dom == CM_DOM_F) {
        if (cm_isnan(x.f) || cm_isnan(y.f))
            return op == CM_BINARY_NE;
        switch (op) {
        case CM_BINARY_EQ: return x.f == y.f;
        case CM_BINARY_NE: return x.f != y.f;
        case CM_BINARY_LT: return x.f < y.f;
        case CM_BINARY_LE: return x.f <= y.f;
        case CM_BINARY_GT: return x.f > y.f;
        case CM_BINARY_GE: return x.f >= y.f;
        default: return false; // not reached
        }
    }
    if (x.dom == CM_DOM_I) {
        const long p = long(x.x), q = long(y.x);
        switch (op) {
        case CM_BINARY_EQ: return p == q;
        case CM_BINARY_NE: return p != q;
        case CM_BINARY_LT: return p < q;
        case CM_BINARY_LE: return p <= q;
        case CM_BINARY_GT: return p > q;
        case CM_BINARY_GE: return p >= q;
        default: return false; // not reached
        }
    }
    switch (op) {
    case CM_BINARY_EQ: return x.x == y.x;
    case CM_BINARY_NE: return x.x != y.x;
    case CM_BINARY_LT: return x.x < y.x;
    case CM_BINARY_LE: return x.x <= y.x;
    case CM_BINARY_GT: return x.x > y.x;
    case CM_BINARY_GE: return x.x >= y.x;
    default: return false; // not reached
    }
}

inline float cm_binary_float(uint op, float x, float y) {
    switch (op) {
    case CM_BINARY_ADD: return x + y;
    case CM_BINARY_SUB: return x - y;
    case CM_BINARY_MUL: return x * y;
    case CM_BINARY_DIV: return x / y;
    case CM_BINARY_MIN: return (cm_isnan(x) || x < y) ? x : y;
    case CM_BINARY_MAX: return (cm_isnan(x) || x > y) ? x : y;
    default: return x; // not reached
    }
}

// Integer division truncates; x / 0 = 0 and MIN / -1 = MIN (wraps).
inline ulong cm_binary_int(uint op, ulong x, ulong y, bool is_signed) {
    const long p = long(x), q = long(y);
    switch (op) {
    case CM_BINARY_ADD: return x + y;
    case CM_BINARY_SUB: return x - y;
    case CM_BINARY_MUL: return x * y;
    case CM_BINARY_DIV:
        if (y == 0ul)
            return 0ul;
        if (!is_signed)
            return x / y;
        return q == -1l ? 0ul - x : ulong(p / q);
    case CM_BINARY_MIN: return (is_signed ? p < q : x < y) ? x : y;
    case CM_BINARY_MAX: return (is_signed ? p > q : x > y) ? x : y;
    default: return x; // not reached
    }
}

kernel void cm_binary(device uchar *out [[buffer(0)]],
                      device const uchar *in0 [[buffer(1)]],
                      device const uchar *in1 [[buffer(2)]],
                      constant cm_ew_args &a [[buffer(3)]],
                      uint gid [[thread_position_in_grid]],
                      uint gsize [[threads_per_grid]]) {
    const bool compare = cm_binary_compares(a.code);
    if (a.in0_dtype == CM_FLOAT32 && a.out_dtype == CM_FLOAT32 && !compare &&
        cm_contiguous_f32(a, 3u)) { // the common case, without the decoding
        device float *o = (device float *)(out + a.out_offset);
        device const float *x = (device const float *)(in0 + a.in0_offset);
        device const float *y = (device const float *)(in1 + a.in1_offset);
        for (long i = long(gid); i < a.numel; i += long(gsize))
            o[i] = cm_binary_float(a.code, x[i], y[i]);
        return;
    }
    const uint dt = a.in0_dtype, size = cm_dtype_size(dt), dom = cm_domain(dt);
    const uint odt = a.out_dtype, osize = cm_dtype_size(odt);
    for (long i = long(gid); i < a.numel; i += long(gsize)) {
        const long o = cm_offset(i, a.ndim, a.shape, a.out_strides);
        const long s0 = cm_offset(i, a.ndim, a.shape, a.in0_strides);
        const long s1 = cm_offset(i, a.ndim, a.shape, a.in1_strides);
        const cm_num x = cm_decode(cm_load_bits(in0, a.in0_offset + s0 * long(size), size), dt);
        const cm_num y = cm_decode(cm_load_bits(in1, a.in1_offset + s1 * long(size), size), dt);
        ulong r;
        if (compare)
            r = cm_compare(a.code, x, y) ? 1ul : 0ul;
        else if (dom == CM_DOM_F)
            r = cm_encode(cm_num_float(cm_binary_float(a.code, x.f, y.f)), odt);
        else
            r = cm_binary_int(a.code, x.x, y.x, dom == CM_DOM_I);
        cm_store_bits(out, a.out_offset + o * long(osize), osize, r);
    }
}

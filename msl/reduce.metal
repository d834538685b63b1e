// SPDX-License-Identifier: MIT
// Reductions (sum, mean, max, min) of the `count` inner elements of each
// output. Accumulators are 64-bit words: float sums in float32 (low 32
// bits), signed integer and bool sums in int64, unsigned in uint64, both
// wrapping; max and min compare in the input's domain and propagate NaN.
// mean divides the float32 sum by the count in float32; of integers it is
// the truncating integer quotient for integer outputs (as truncating the
// exact mean) and the float32 quotient for float outputs.

// cm_reduce_op values (include/cmetal/ops.h).
#define CM_REDUCE_SUM 1
#define CM_REDUCE_MEAN 2
#define CM_REDUCE_MAX 3
#define CM_REDUCE_MIN 4

inline ulong cm_acc_identity(uint op, uint dom) {
    if (op == CM_REDUCE_MAX)
        return dom == CM_DOM_F ? 0xff800000ul : dom == CM_DOM_I ? 0x8000000000000000ul : 0ul;
    if (op == CM_REDUCE_MIN)
        return dom == CM_DOM_F ? 0x7f800000ul : dom == CM_DOM_I ? 0x7ffffffffffffffful : ~0ul;
    return 0ul; // also float +0.0
}

inline ulong cm_acc_of(cm_num v) {
    return v.dom == CM_DOM_F ? ulong(as_type<uint>(v.f)) : v.x;
}

inline ulong cm_acc_combine(uint op, uint dom, ulong a, ulong b) {
    if (dom == CM_DOM_F) {
        const float x = as_type<float>(uint(a)), y = as_type<float>(uint(b));
        float r;
        if (op == CM_REDUCE_MAX)
            r = cm_isnan(x) ? x : (cm_isnan(y) || y > x) ? y : x;
        else if (op == CM_REDUCE_MIN)
            r = cm_isnan(x) ? x : (cm_isnan(y) || y < x) ? y : x;
        else
            r = x + y;
        return ulong(as_type<uint>(r));
    }
    if (op == CM_REDUCE_MAX)
        return (dom == CM_DOM_I ? long(b) > long(a) : b > a) ? b : a;
    if (op == CM_REDUCE_MIN)
        return (dom == CM_DOM_I ? long(b) < long(a) : b < a) ? b : a;
    return a + b;
}

// The accumulator of one output as the bits of the output dtype.
inline ulong cm_acc_result(uint op, uint dom, ulong acc, long count, uint odt) {
    if (op != CM_REDUCE_MEAN) {
        cm_num v;
        v.dom = dom;
        v.x = acc;
        v.f = as_type<float>(uint(acc));
        return cm_encode(v, odt);
    }
    if (dom == CM_DOM_F)
        return cm_encode(cm_num_float(as_type<float>(uint(acc)) / float(count)), odt);
    if (odt == CM_BOOL)
        return acc != 0ul ? 1ul : 0ul;
    if (cm_domain(odt) != CM_DOM_F)
        return dom == CM_DOM_I ? ulong(long(acc) / count) : acc / ulong(count);
    const float sum = as_type<float>(uint(cm_encode(cm_num_int(acc, dom), CM_FLOAT32)));
    return cm_encode(cm_num_float(sum / float(count)), odt);
}

inline ulong cm_reduce_run(constant cm_reduce_args &a, device const uchar *in0, long base,
                           long first, long end, long step, uint dom, uint isize) {
    ulong acc = cm_acc_identity(a.code, dom);
    for (long r = first; r < end; r += step) {
        const long s = base + cm_offset(r, a.inner_ndim, a.inner_shape, a.inner_in_strides);
        const cm_num v = cm_decode(cm_load_bits(in0, a.in_offset + s * long(isize), isize),
                                   a.in_dtype);
        acc = cm_acc_combine(a.code, dom, acc, cm_acc_of(v));
    }
    return acc;
}

// One thread per output: for short reductions (stage WHOLE), and to
// combine the partial accumulators of a split one (stage FINISH: in0 holds
// `split` 64-bit accumulators per output).
kernel void cm_reduce_serial(device uchar *out [[buffer(0)]],
                             device const uchar *in0 [[buffer(1)]],
                             constant cm_reduce_args &a [[buffer(2)]],
                             uint gid [[thread_position_in_grid]],
                             uint gsize [[threads_per_grid]]) {
    const uint dom = cm_domain(a.in_dtype), isize = cm_dtype_size(a.in_dtype);
    const uint osize = cm_dtype_size(a.out_dtype);
    for (long m = long(gid); m < a.nout; m += long(gsize)) {
        ulong acc;
        if (a.stage == CM_REDUCE_FINISH) {
            acc = cm_acc_identity(a.code, dom);
            for (long s = 0; s < a.split; ++s)
                acc = cm_acc_combine(a.code, dom, acc,
                                     cm_load_bits(in0, (m * a.split + s) * 8l, 8u));
        } else {
            const long ib = cm_offset(m, a.outer_ndim, a.outer_shape, a.outer_in_strides);
            acc = cm_reduce_run(a, in0, ib, 0, a.count, 1, dom, isize);
        }
        const long ob = cm_offset(m, a.outer_ndim, a.outer_shape, a.outer_out_strides);
        cm_store_bits(out, a.out_offset + ob * long(osize), osize,
                      cm_acc_result(a.code, dom, acc, a.count, a.out_dtype));
    }
}

// One threadgroup (at most 256 threads) per output, or per chunk of an
// output in stage PARTIAL (out then receives the 64-bit accumulators), with
// threadgroup memory and barriers only: every Metal GPU has them (the SIMD
// version, for GPUs with SIMD-group functions, is in reduce_simd.metal).
// Each thread accumulates a strided share into its slot; the slots are
// combined in halves down to slot 0, which thread 0 stores.
kernel void cm_reduce_threadgroup_tg(device uchar *out [[buffer(0)]],
                                     device const uchar *in0 [[buffer(1)]],
                                     constant cm_reduce_args &a [[buffer(2)]],
                                     uint tid [[thread_index_in_threadgroup]],
                                     uint tsize [[threads_per_threadgroup]],
                                     uint group [[threadgroup_position_in_grid]],
                                     uint ngroups [[threadgroups_per_grid]]) {
    threadgroup ulong partial[256];
    const uint dom = cm_domain(a.in_dtype), isize = cm_dtype_size(a.in_dtype);
    const uint osize = cm_dtype_size(a.out_dtype);
    uint half_size = 1u; // the smallest power of two >= tsize, halved
    while (half_size < tsize)
        half_size <<= 1;
    half_size >>= 1;
    const long tasks = a.nout * a.split; // (output, chunk) pairs
    for (long t = long(group); t < tasks; t += long(ngroups)) {
        const long m = t / a.split, first = (t - m * a.split) * a.chunk;
        const long end = first + a.chunk < a.count ? first + a.chunk : a.count;
        const long ib = cm_offset(m, a.outer_ndim, a.outer_shape, a.outer_in_strides);
        partial[tid] = cm_reduce_run(a, in0, ib, first + long(tid), end, long(tsize), dom, isize);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint s = half_size; s > 0u; s >>= 1) {
            if (tid < s && tid + s < tsize)
                partial[tid] = cm_acc_combine(a.code, dom, partial[tid], partial[tid + s]);
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (tid == 0u && a.stage == CM_REDUCE_PARTIAL) {
            cm_store_bits(out, t * 8l, 8u, partial[0]);
        } else if (tid == 0u) {
            const long ob = cm_offset(m, a.outer_ndim, a.outer_shape, a.outer_out_strides);
            cm_store_bits(out, a.out_offset + ob * long(osize), osize,
                          cm_acc_result(a.code, dom, partial[0], a.count, a.out_dtype));
        }
        threadgroup_barrier(mem_flags::mem_threadgroup); // partial is reused
    }
}

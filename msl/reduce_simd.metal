// SPDX-License-Identifier: MIT
// The reduction kernel that combines by SIMD-group shuffles
// (simd_shuffle_down): for GPUs with SIMD-group functions only (Apple7 and
// later, Mac2), so it is a library of its own, compiled after common.h and
// reduce.metal where the device has them. Elsewhere cm_reduce_threadgroup_tg
// (reduce.metal) does the same with threadgroup memory.

// One threadgroup (a multiple of the SIMD width, 32 or 64 lanes, at most 256
// threads) per output, or per chunk of an output in stage PARTIAL (out then
// receives the 64-bit accumulators): each thread accumulates a strided
// share; simdgroups combine by shuffles into lane 0, which puts its result
// in threadgroup memory; then every simdgroup combines those results the
// same way and thread 0 stores. The shuffles are written
// in the kernel body rather than in a helper: softmetal runs every kernel of
// a library on fibers when a helper outside a kernel uses a simd_ function.
kernel void cm_reduce_threadgroup(device uchar *out [[buffer(0)]],
                                  device const uchar *in0 [[buffer(1)]],
                                  constant cm_reduce_args &a [[buffer(2)]],
                                  uint tid [[thread_index_in_threadgroup]],
                                  uint tsize [[threads_per_threadgroup]],
                                  uint group [[threadgroup_position_in_grid]],
                                  uint ngroups [[threadgroups_per_grid]],
                                  uint lane [[thread_index_in_simdgroup]],
                                  uint width [[threads_per_simdgroup]],
                                  uint sg [[simdgroup_index_in_threadgroup]],
                                  uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup ulong partial[32];
    const uint dom = cm_domain(a.in_dtype), isize = cm_dtype_size(a.in_dtype);
    const uint osize = cm_dtype_size(a.out_dtype);
    const long tasks = a.nout * a.split; // (output, chunk) pairs
    for (long t = long(group); t < tasks; t += long(ngroups)) {
        const long m = t / a.split, first = (t - m * a.split) * a.chunk;
        const long end = first + a.chunk < a.count ? first + a.chunk : a.count;
        const long ib = cm_offset(m, a.outer_ndim, a.outer_shape, a.outer_in_strides);
        ulong acc = cm_reduce_run(a, in0, ib, first + long(tid), end, long(tsize), dom, isize);
        for (uint round = 0u; round < 2u; ++round) {
            for (ushort d = ushort(width / 2u); d > 0; d >>= 1) {
                const uint lo = simd_shuffle_down(uint(acc), d);
                const uint hi = simd_shuffle_down(uint(acc >> 32), d);
                acc = cm_acc_combine(a.code, dom, acc, (ulong(hi) << 32) | ulong(lo));
            }
            if (round == 0u) {
                if (lane == 0u)
                    partial[sg] = acc;
                threadgroup_barrier(mem_flags::mem_threadgroup);
                acc = lane < nsg ? partial[lane] : cm_acc_identity(a.code, dom);
            }
        }
        if (tid == 0u && a.stage == CM_REDUCE_PARTIAL) {
            cm_store_bits(out, t * 8l, 8u, acc);
        } else if (tid == 0u) {
            const long ob = cm_offset(m, a.outer_ndim, a.outer_shape, a.outer_out_strides);
            cm_store_bits(out, a.out_offset + ob * long(osize), osize,
                          cm_acc_result(a.code, dom, acc, a.count, a.out_dtype));
        }
        threadgroup_barrier(mem_flags::mem_threadgroup); // partial is reused
    }
}

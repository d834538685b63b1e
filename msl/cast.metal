// SPDX-License-Identifier: MIT
// Cast between any two dtypes (float64 excepted) by the rules of ops.h.

kernel void cm_cast(device uchar *out [[buffer(0)]],
                    device const uchar *in0 [[buffer(1)]],
                    constant cm_ew_args &a [[buffer(2)]],
                    uint gid [[thread_position_in_grid]],
                    uint gsize [[threads_per_grid]]) {
    const uint osize = cm_dtype_size(a.out_dtype), isize = cm_dtype_size(a.in0_dtype);
    for (long i = long(gid); i < a.numel; i += long(gsize)) {
        const long o = cm_offset(i, a.ndim, a.shape, a.out_strides);
        const long s = cm_offset(i, a.ndim, a.shape, a.in0_strides);
        const cm_num v = cm_decode(cm_load_bits(in0, a.in0_offset + s * long(isize), isize),
                                   a.in0_dtype);
        cm_store_bits(out, a.out_offset + o * long(osize), osize, cm_encode(v, a.out_dtype));
    }
}

// SPDX-License-Identifier: MIT
// Fill and strided copy, by element size: bits move unchanged.

kernel void cm_fill(device uchar *out [[buffer(0)]],
                    constant cm_ew_args &a [[buffer(1)]],
                    uint gid [[thread_position_in_grid]],
                    uint gsize [[threads_per_grid]]) {
    const uint size = cm_dtype_size(a.out_dtype);
    for (long i = long(gid); i < a.numel; i += long(gsize)) {
        const long o = cm_offset(i, a.ndim, a.shape, a.out_strides);
        cm_store_bits(out, a.out_offset + o * long(size), size, a.value);
    }
}

kernel void cm_copy(device uchar *out [[buffer(0)]],
                    device const uchar *in0 [[buffer(1)]],
                    constant cm_ew_args &a [[buffer(2)]],
                    uint gid [[thread_position_in_grid]],
                    uint gsize [[threads_per_grid]]) {
    const long size = long(cm_dtype_size(a.out_dtype));
    for (long i = long(gid); i < a.numel; i += long(gsize)) {
        const long o = cm_offset(i, a.ndim, a.shape, a.out_strides);
        const long s = cm_offset(i, a.ndim, a.shape, a.in0_strides);
        const ulong v = cm_load_bits(in0, a.in0_offset + s * size, uint(size));
        cm_store_bits(out, a.out_offset + o * size, uint(size), v);
    }
}

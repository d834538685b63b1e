/* SPDX-License-Identifier: MIT */
/* cmetal/ops.h: fill, copy, cast, elementwise math and reductions.
 *
 * Every op writes into a caller-made output tensor (the last tensor
 * argument; cm_fill's only tensor is the one filled) and runs on the device
 * that holds the tensors, on `stream` (the last argument): a stream of that
 * device, or NULL for its default stream. On the CPU an op has finished
 * when it returns; on Metal it is queued in order on its stream, and host
 * access (cm_tensor_host_read, ...) waits for it.
 *
 * Streams (see cmetal/stream.h): ops on one stream run in order. Ops on
 * different streams may run at the same time: order them with a fence
 * (cm_stream_signal, then cm_stream_wait on the other stream) when one
 * writes memory the other reads or writes. Host access and
 * cm_device_synchronize wait for the work of every stream.
 *
 * Common rules
 * - Devices: all tensors of one call must be on the same device, else
 *   CM_ERR_INVALID_ARGUMENT naming both arguments; so must the stream.
 * - Outputs: a read-only output (or a broadcast view) is refused with
 *   CM_ERR_READ_ONLY.
 * - Aliasing: an output may be the very same view as an elementwise input
 *   (same buffer, byte offset, dtype size and strides over the output's
 *   shape): each element is read before it is written. Any other overlap of
 *   the output's byte range with an input's is refused with
 *   CM_ERR_INVALID_ARGUMENT naming both arguments (copy through a
 *   temporary). Views that share no byte are never refused, interleaved
 *   ones included (x[0::2] and x[1::2]); the check is exact for those and
 *   for disjoint byte ranges, and may refuse other views that interleave
 *   without sharing a byte (their strides' gcd does not separate them).
 *   Reductions never allow their output to overlap their input.
 * - dtypes: no implicit promotion. cm_cast is the one op that converts.
 *   An op that has no meaning for a dtype fails with CM_ERR_UNSUPPORTED;
 *   Metal devices refuse float64 the same way.
 * - Zero-size tensors are valid everywhere and do nothing (see reductions).
 * - Errors: every failure sets cm_last_error() to a message naming the
 *   function, the argument and the value. The errors listed here are found
 *   before any element is written, and leave the output unchanged.
 *
 * Conversion rules (cm_cast, cm_fill's value, reduction results)
 * - to bool: nonzero -> 1, zero -> 0 (NaN is nonzero: 1).
 * - integer or bool to integer: two's complement wrap-around (as NumPy).
 * - float to integer: truncation toward zero, saturating at the target's
 *   minimum and maximum; NaN -> 0; +inf/-inf -> max/min.
 * - to float16, bfloat16, float32, float64: rounded once to nearest, ties
 *   to even (overflow gives infinity). Infinities are kept, NaN stays NaN
 *   with its sign and the top bits of its payload (quieted only where the
 *   payload would otherwise vanish), so float16 -> float32 -> float16 and
 *   bfloat16 -> float32 -> bfloat16 give back every bit pattern.
 *
 * Ownership (all functions): borrows every tensor for the duration of the
 * call. A device that finishes the op later (Metal) keeps what it needs,
 * so the tensors may be released as soon as the call returns.
 * Thread-safety (all functions): calls on different output tensors may run
 * on any threads; two calls writing overlapping memory at the same time, or
 * writing memory another call reads, are a data race. */
#ifndef CMETAL_OPS_H
#define CMETAL_OPS_H

#include <cmetal/stream.h>
#include <cmetal/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets every element of `tensor` to `*value`, one element of `dtype`,
 * converted to the tensor's dtype by the conversion rules above. Pass an
 * int64 or uint64 to set any integer exactly, a float64 for floats.
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL, bad dtype), CM_ERR_READ_ONLY. */
CM_API cm_status cm_fill(cm_tensor *tensor, cm_dtype dtype, const void *value, cm_stream *stream);

/* dst[i] = src[i] for every multi-index i. src and dst have equal shapes
 * and dtypes and any layouts: strided, transposed, negative strides, or a
 * broadcast src (stride 0). Copying a view into a new compact tensor makes
 * it contiguous. Bits are copied unchanged (NaN payloads included).
 * Errors: CM_ERR_INVALID_ARGUMENT (shapes differ, overlap, devices),
 * CM_ERR_DTYPE_MISMATCH, CM_ERR_READ_ONLY. */
CM_API cm_status cm_copy(const cm_tensor *src, cm_tensor *dst, cm_stream *stream);

/* dst[i] = src[i] converted to dst's dtype by the conversion rules above;
 * any pair of dtypes, equal shapes. Equal dtypes behave as cm_copy.
 * Errors: as cm_copy, without CM_ERR_DTYPE_MISMATCH. */
CM_API cm_status cm_cast(const cm_tensor *src, cm_tensor *dst, cm_stream *stream);

typedef enum cm_unary_op {
    CM_UNARY_INVALID = 0,
    /* Every dtype but bool. Integers wrap (neg and abs of the minimum give
     * the minimum); unsigned neg is 0 - x modulo 2^bits. */
    CM_UNARY_NEG = 1,
    CM_UNARY_ABS = 2,
    CM_UNARY_SQUARE = 3, /* x * x */
    CM_UNARY_RELU = 4,   /* max(x, 0); NaN stays NaN */
    CM_UNARY_SIGN = 5,   /* -1, 0 or 1; NaN stays NaN; -0.0 and 0.0 give 0.0 */
    /* Floating dtypes only. */
    CM_UNARY_SQRT = 6,
    CM_UNARY_RSQRT = 7, /* 1 / sqrt(x) */
    CM_UNARY_EXP = 8,
    CM_UNARY_LOG = 9,
    CM_UNARY_SIN = 10,
    CM_UNARY_COS = 11,
    CM_UNARY_TANH = 12,
    CM_UNARY_SIGMOID = 13, /* 1 / (1 + exp(-x)) */
    CM_UNARY_FLOOR = 14,
    CM_UNARY_CEIL = 15,
    CM_UNARY_COUNT = 16
} cm_unary_op;

/* out[i] = op(x[i]). x and out have equal shapes and the same dtype.
 * float16 and bfloat16 compute in float32 and round once to the dtype;
 * float32 uses the C library's float functions (exp, log, sin, cos, tanh
 * within a few ulp; sqrt, floor, ceil, neg, abs exact), float64 the double
 * ones. out may be x itself.
 * Errors: CM_ERR_INVALID_ARGUMENT (op, shapes, overlap, devices),
 * CM_ERR_DTYPE_MISMATCH, CM_ERR_UNSUPPORTED (op undefined for the dtype),
 * CM_ERR_READ_ONLY. */
CM_API cm_status cm_unary(cm_unary_op op, const cm_tensor *x, cm_tensor *out, cm_stream *stream);

typedef enum cm_binary_op {
    CM_BINARY_INVALID = 0,
    /* Arithmetic: every dtype but bool; out has the inputs' dtype.
     * Integers wrap modulo 2^bits. Integer div truncates toward zero;
     * x / 0 gives 0 and MIN / -1 gives MIN (no trap). Float arithmetic is
     * IEEE 754's in the dtype; which payload a NaN result carries is not
     * specified (of two NaN inputs, either may win, as compilers and GPUs
     * differ). Float min/max propagate NaN (as NumPy's minimum/maximum).
     * min and max also accept bool (logical and / or). */
    CM_BINARY_ADD = 1,
    CM_BINARY_SUB = 2,
    CM_BINARY_MUL = 3,
    CM_BINARY_DIV = 4,
    CM_BINARY_MIN = 5,
    CM_BINARY_MAX = 6,
    /* Comparisons: every dtype; out is bool (1 or 0). NaN compares unequal
     * to everything, itself included (ne gives 1). */
    CM_BINARY_EQ = 7,
    CM_BINARY_NE = 8,
    CM_BINARY_LT = 9,
    CM_BINARY_LE = 10,
    CM_BINARY_GT = 11,
    CM_BINARY_GE = 12,
    CM_BINARY_COUNT = 13
} cm_binary_op;

/* out[i] = a[i] op b[i], with a and b broadcast to out's shape by NumPy's
 * rules (align trailing axes; a size-1 or missing axis repeats). a and b
 * have the same dtype; out has it too, or bool for comparisons. float16 and
 * bfloat16 compute in float32 and round once (exactly rounded for add, sub,
 * mul, div). out may be a or b itself (the identical view).
 * Errors: CM_ERR_INVALID_ARGUMENT (op, shapes that do not broadcast to
 * out's, overlap, devices), CM_ERR_DTYPE_MISMATCH, CM_ERR_UNSUPPORTED,
 * CM_ERR_READ_ONLY. */
CM_API cm_status cm_binary(cm_binary_op op, const cm_tensor *a, const cm_tensor *b, cm_tensor *out,
                           cm_stream *stream);

typedef enum cm_reduce_op {
    CM_REDUCE_INVALID = 0,
    CM_REDUCE_SUM = 1,
    CM_REDUCE_MEAN = 2,
    CM_REDUCE_MAX = 3,
    CM_REDUCE_MIN = 4,
    CM_REDUCE_COUNT = 5
} cm_reduce_op;

/* For cm_reduce: reduce over every element. */
#define CM_AXIS_ALL INT32_MIN

/* Reduces x over `axis` (negative counts from the end) or over all
 * elements (CM_AXIS_ALL). out's shape says whether reduced axes are kept:
 * - one axis: x's shape without that axis, or with it as size 1 (keepdims);
 * - all: 0-d, or x's ndim axes of size 1 (keepdims).
 * out may have any dtype; the result is converted to it by the conversion
 * rules above.
 * Accumulation: sum and mean of floating dtypes accumulate in float64 on
 * the CPU (at least float32 on every device); of signed integers and bool
 * in int64, of unsigned integers in uint64, wrapping modulo 2^64. mean is
 * that sum, converted to float64, divided by the count; except that the
 * mean of integers or bool into an integer output is the exact quotient of
 * the wrapped sum by the count, truncated toward zero, on every device.
 * max and min compare
 * in the input's dtype and propagate NaN. A float max or min reads its
 * elements in blocks of 2^18 from the run's start and takes the blocks'
 * results in order, keeping the first NaN, else the first strictly larger
 * (smaller) result; which of +0 and -0, or which NaN payload, it returns
 * depends on the shape alone, never on threads.
 * Float sums on the CPU are pairwise, in float64: elements are added in 16
 * interleaved lanes over blocks of 512 (or, summing along a strided axis
 * with a contiguous kept axis, in order over blocks of 32 rows), and the
 * partial sums by a balanced tree. For n terms x_i (every float16,
 * bfloat16 and float32 is exact in float64) the float64 result s satisfies
 *   |s - sum x_i| <= gamma_k * sum |x_i|,  gamma_k = k u / (1 - k u),
 *   k = 40 + 2 ceil(log2 n),  u = 2^-53,
 * before the one rounding to the output dtype (and mean's division); a
 * running sum's bound has k = n - 1. float16 and bfloat16 lanes first add
 * their terms four at a time in float32, pairwise ((a + b) + (c + d): 4
 * elements 16 apart along a run, or 4 consecutive rows of a column),
 * which widens the bound to
 *   |s - sum x_i| <= (g + gamma_k (1 + g)) * sum |x_i|,
 *   g = 2 u' / (1 - 2 u'),  u' = 2^-24,
 * still far below a float32 running sum's (n - 1) u'. The order depends only on the shape
 * and strides, never on the CPU's vector instructions or threads: the
 * same input gives the same bits on every run.
 * Zero-size: sum gives 0, mean NaN (0 for integer outputs), and max or min
 * of an empty reduction fails with CM_ERR_INVALID_ARGUMENT.
 * Errors: CM_ERR_INVALID_ARGUMENT (op, axis, out shape, any overlap of out
 * with x, devices), CM_ERR_UNSUPPORTED (float64 on Metal), CM_ERR_READ_ONLY. */
CM_API cm_status cm_reduce(cm_reduce_op op, const cm_tensor *x, int32_t axis, cm_tensor *out,
                           cm_stream *stream);

/* "add", "sqrt", "sum"...; "invalid" otherwise. Static strings. */
CM_API const char *cm_unary_op_name(cm_unary_op op);
CM_API const char *cm_binary_op_name(cm_binary_op op);
CM_API const char *cm_reduce_op_name(cm_reduce_op op);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_OPS_H */

/* SPDX-License-Identifier: MIT */
/* Ops: the one place that validates them (shapes, dtypes, broadcasting,
 * aliasing, read-only outputs, devices) before handing a cm__op to the
 * device's backend. */
#include "backend.h"
#include "convert.h"
#include "op_table.h"

#include <cmetal/ops.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ names */

#define CM__OP_NAME(K, NAME, name, CLASS) [K##NAME] = #name,
#define CM__OP_CLASS(K, NAME, name, CLASS) [K##NAME] = CLASS,
static const char *const cm__unary_names[CM_UNARY_COUNT] = {CM__UNARY_OPS(CM__OP_NAME, CM_UNARY_)};
static const char *const cm__binary_names[CM_BINARY_COUNT] = {
    CM__BINARY_OPS(CM__OP_NAME, CM_BINARY_)};
static const char *const cm__reduce_names[CM_REDUCE_COUNT] = {
    CM__REDUCE_OPS(CM__OP_NAME, CM_REDUCE_)};
static const cm__op_class cm__unary_classes[CM_UNARY_COUNT] = {
    CM__UNARY_OPS(CM__OP_CLASS, CM_UNARY_)};
static const cm__op_class cm__binary_classes[CM_BINARY_COUNT] = {
    CM__BINARY_OPS(CM__OP_CLASS, CM_BINARY_)};
#undef CM__OP_NAME
#undef CM__OP_CLASS

const char *cm_unary_op_name(cm_unary_op op) {
    return (int)op > 0 && op < CM_UNARY_COUNT ? cm__unary_names[op] : "invalid";
}
const char *cm_binary_op_name(cm_binary_op op) {
    return (int)op > 0 && op < CM_BINARY_COUNT ? cm__binary_names[op] : "invalid";
}
const char *cm_reduce_op_name(cm_reduce_op op) {
    return (int)op > 0 && op < CM_REDUCE_COUNT ? cm__reduce_names[op] : "invalid";
}

/* ------------------------------------------------------------ conversion */

#define CM__STORE_CASE(DOM, E, T, SDOM_, LD, KIND, SAT, MTL)                                       \
    case E: {                                                                                      \
        T r_ = CM__CONVERT(DOM, KIND, T, SAT, v);                                                  \
        memcpy(dst, &r_, sizeof r_);                                                               \
        return;                                                                                    \
    }
#define CM__STORE_FN(DOM, VT)                                                                      \
    static void cm__store_from_##DOM(cm_dtype to, void *dst, VT v) {                               \
        switch (to) {                                                                              \
            CM__DTYPE_LIST_WITH(CM__STORE_CASE, DOM)                                               \
        default: break;                                                                            \
        }                                                                                          \
    }
CM__STORE_FN(F, float)
CM__STORE_FN(D, double)
CM__STORE_FN(I, int64_t)
CM__STORE_FN(U, uint64_t)

void cm__convert_element(cm_dtype to, void *dst, cm_dtype from, const void *src) {
    switch (from) {
#define CM__LOAD_CASE(E, T, DOM, LD, KIND, SAT, MTL)                                               \
    case E: {                                                                                      \
        T s_;                                                                                      \
        memcpy(&s_, src, sizeof s_);                                                               \
        cm__store_from_##DOM(to, dst, LD(s_));                                                     \
        return;                                                                                    \
    }
        CM__DTYPE_LIST(CM__LOAD_CASE)
#undef CM__LOAD_CASE
    default: break;
    }
}

/* ------------------------------------------------------------ checks */

static const char *cm__dname(cm_dtype dtype) {
    const cm_dtype_info *info = cm__dtype(dtype);
    return info ? info->name : "invalid";
}

/* "[2, 3]" into buf. */
static const char *cm__fmt_shape(char *buf, size_t cap, int32_t ndim, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int32_t k = 0; k < ndim && n < cap; ++k)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, k ? ", " : "", shape[k]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

static int64_t cm__numel(const cm_tensor *t) {
    int64_t n = 1;
    for (int32_t k = 0; k < t->ndim; ++k)
        if (t->shape[k] == 0)
            return 0; /* before the product: {2^40, 2^40, 0} is a valid empty shape */
    for (int32_t k = 0; k < t->ndim; ++k)
        n *= t->shape[k]; /* validated when the tensor was made */
    return n;
}

static cm_status cm__check_out(const char *func, const char *name, const cm_tensor *t) {
    if (t->flags & CM_TENSOR_READ_ONLY)
        return cm__fail_as(func, CM_ERR_READ_ONLY,
                           "%s is read-only (a read-only view, buffer or broadcast view) and "
                           "cannot be written",
                           name);
    return CM_OK;
}

/* One device, or two handles of it: every CPU device (the shared one and
 * those opened with threads) runs on the same host memory. */
static bool cm__same_device(const cm_device *x, const cm_device *y) {
    return x == y ||
           (x->backend == y->backend && (x->impl == y->impl || x->backend->type == CM_DEVICE_CPU));
}

static cm_status cm__check_device(const char *func, const char *out_name, const cm_tensor *out,
                                  const char *name, const cm_tensor *t) {
    cm_device *a = out->buffer->device, *b = t->buffer->device;
    if (!cm__same_device(a, b))
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "%s is on a %s device but %s is on a different (%s) device; an "
                           "op needs all its tensors on one device",
                           name, cm_device_type_name(b->backend->type), out_name,
                           cm_device_type_name(a->backend->type));
    return CM_OK;
}

static cm_status cm__check_same_shape(const char *func, const char *name_a, const cm_tensor *a,
                                      const char *name_b, const cm_tensor *b) {
    bool same = a->ndim == b->ndim;
    for (int32_t k = 0; same && k < a->ndim; ++k)
        same = a->shape[k] == b->shape[k];
    if (!same) {
        char sa[160], sb[160];
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "%s shape %s differs from %s shape %s",
                           name_a, cm__fmt_shape(sa, sizeof sa, a->ndim, a->shape), name_b,
                           cm__fmt_shape(sb, sizeof sb, b->ndim, b->shape));
    }
    return CM_OK;
}

/* t as an operand over its own shape. A size-1 axis gets stride 0: its
 * stride is never stepped, so a view may hold any value there (INT64_MAX
 * included), and no backend should scale it to bytes. */
static void cm__operand_of(const cm_tensor *t, cm__operand *o) {
    o->buffer = t->buffer;
    o->dtype = t->dtype;
    o->byte_offset = t->byte_offset;
    memset(o->strides, 0, sizeof o->strides);
    for (int32_t k = 0; k < t->ndim; ++k)
        o->strides[k] = t->shape[k] == 1 ? 0 : t->strides[k];
}

/* t broadcast to (ndim, shape) by NumPy's rules, as an operand. */
static cm_status cm__broadcast_operand(const char *func, const char *name, const cm_tensor *t,
                                       const char *out_name, int32_t ndim, const int64_t *shape,
                                       cm__operand *o) {
    cm__operand_of(t, o);
    memset(o->strides, 0, sizeof o->strides);
    const int32_t lead = ndim - t->ndim;
    bool ok = lead >= 0;
    for (int32_t k = 0; ok && k < t->ndim; ++k) {
        const int64_t have = t->shape[k], want = shape[k + lead];
        if (have == want)
            o->strides[k + lead] = have == 1 ? 0 : t->strides[k];
        else if (have == 1)
            o->strides[k + lead] = 0;
        else
            ok = false;
    }
    if (!ok) {
        char sa[160], sb[160];
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "%s shape %s does not broadcast to %s shape %s", name,
                           cm__fmt_shape(sa, sizeof sa, t->ndim, t->shape), out_name,
                           cm__fmt_shape(sb, sizeof sb, ndim, shape));
    }
    return CM_OK;
}

/* Where a tensor's buffer starts, for comparing addresses: the host address,
 * comparable across buffers (two wraps of one memory alias), else the
 * buffer itself, comparable only within it. */
static uintptr_t cm__base(const cm_tensor *t) {
    return t->buffer->host != NULL ? (uintptr_t)t->buffer->host : (uintptr_t)(void *)t->buffer;
}

/* The first element's address, comparable as cm__base's. */
static uintptr_t cm__first(const cm_tensor *t) {
    return cm__base(t) + (uintptr_t)t->byte_offset;
}

/* Address range [begin, end) of a tensor's elements. */
static void cm__range(const cm_tensor *t, uintptr_t *begin, uintptr_t *end) {
    cm_tensor_info info;
    cm_tensor_get_info(t, &info); /* cannot fail for a valid tensor */
    *begin = cm__base(t) + (uintptr_t)info.extent_begin;
    *end = cm__base(t) + (uintptr_t)info.extent_end;
}

static uint64_t cm__gcd(uint64_t a, uint64_t b) {
    while (b != 0) {
        const uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Whether two views whose byte ranges overlap are still disjoint because
 * they interleave, as x[0::2] and x[1::2] do: every element of a starts at
 * first(a) + k * g, g the gcd of both views' byte strides, so with
 * r = (first(b) - first(a)) mod g the views can share a byte only if
 * r < size(a) or g - r < size(b). */
static bool cm__interleaved(const cm_tensor *a, const cm_tensor *b) {
    const cm_tensor *views[2] = {a, b};
    uint64_t g = 0;
    for (int v = 0; v < 2; ++v) {
        const uint64_t size = cm__dtype(views[v]->dtype)->size;
        for (int32_t k = 0; k < views[v]->ndim; ++k)
            if (views[v]->shape[k] > 1) { /* within the buffer: cannot overflow */
                const int64_t st = views[v]->strides[k];
                g = cm__gcd(g, (uint64_t)(st < 0 ? -st : st) * size);
            }
    }
    if (g == 0)
        return false; /* two single elements whose ranges overlap */
    const uint64_t size_a = cm__dtype(a->dtype)->size, size_b = cm__dtype(b->dtype)->size;
    const uintptr_t fa = cm__first(a), fb = cm__first(b);
    const uint64_t r = fb >= fa ? (uint64_t)(fb - fa) % g : (g - (uint64_t)(fa - fb) % g) % g;
    return r >= size_a && g - r >= size_b;
}

/* Refuses partial overlap of out with an input; the identical view (same
 * first element, element size and strides over out's shape) is allowed
 * when `identical_ok`. `in_strides` are the input's strides broadcast to
 * out's shape. */
static cm_status cm__check_alias(const char *func, const char *out_name, const cm_tensor *out,
                                 const char *name, const cm_tensor *in, const int64_t *in_strides,
                                 bool identical_ok) {
    if (out->buffer->host == NULL || in->buffer->host == NULL) {
        if (out->buffer != in->buffer)
            return CM_OK;
    }
    uintptr_t ob, oe, ib, ie;
    cm__range(out, &ob, &oe);
    cm__range(in, &ib, &ie);
    if (ob == oe || ib == ie || oe <= ib || ie <= ob)
        return CM_OK;
    if (identical_ok && in_strides != NULL) {
        bool same = cm__first(out) == cm__first(in) &&
                    cm__dtype(out->dtype)->size == cm__dtype(in->dtype)->size;
        for (int32_t k = 0; same && k < out->ndim; ++k)
            same = out->shape[k] == 1 || out->strides[k] == in_strides[k];
        if (same)
            return CM_OK;
    }
    if (cm__interleaved(out, in))
        return CM_OK;
    const uintptr_t base = ob < ib ? ob : ib;
    return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                       "%s overlaps %s in memory without being the identical view (%s spans "
                       "bytes [%zu, %zu) and %s bytes [%zu, %zu) of the same memory); write "
                       "to a separate tensor",
                       out_name, name, out_name, (size_t)(ob - base), (size_t)(oe - base), name,
                       (size_t)(ib - base), (size_t)(ie - base));
}

/* The stream an op on `t`'s device runs on: `stream`, or the device's
 * default stream when NULL. */
static cm_status cm__op_stream(const char *func, const cm_tensor *t, cm_stream *stream,
                               cm_stream **out) {
    cm_device *device = t->buffer->device;
    if (stream == NULL) {
        *out = device->default_stream;
        return CM_OK;
    }
    if (!cm__same_device(stream->device, device))
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "stream = %p belongs to a different (%s) device than the tensors "
                           "(%s); pass a stream of their device, or NULL for its default",
                           (void *)stream, cm_device_type_name(stream->device->backend->type),
                           cm_device_type_name(device->backend->type));
    *out = stream;
    return CM_OK;
}

static cm_status cm__dispatch(cm__op *op) {
    cm_device *device = op->out.buffer->device;
    if (device->backend->run_op == NULL)
        return cm__fail_as(op->func, CM_ERR_UNSUPPORTED, "the %s device runs no ops",
                           cm_device_type_name(device->backend->type));
    return device->backend->run_op(device, op);
}

/* An op over out's shape. */
static void cm__op_init(cm__op *op, const char *func, cm__op_kind kind, int32_t code,
                        const cm_tensor *out, cm_stream *stream) {
    memset(op, 0, sizeof *op);
    op->func = func;
    op->stream = stream;
    op->kind = kind;
    op->code = code;
    op->ndim = out->ndim;
    memcpy(op->shape, out->shape, sizeof op->shape);
    op->numel = cm__numel(out);
    op->axis = -1;
    cm__operand_of(out, &op->out);
}

static bool cm__is_float(cm_dtype d) {
    return cm__dtype(d)->kind == CM_KIND_FLOAT;
}

/* The checks every op with one input starts with: out writable, in on
 * out's device, and the stream (NULL: the default one) of that device. */
static cm_status cm__check_one_input(const char *func, const char *out_name, const cm_tensor *out,
                                     const char *in_name, const cm_tensor *in, cm_stream **stream) {
    CM__TRY(cm__check_out(func, out_name, out));
    CM__TRY(cm__check_device(func, out_name, out, in_name, in));
    return cm__op_stream(func, out, *stream, stream);
}

/* ------------------------------------------------------------ fill */

cm_status cm_fill(cm_tensor *tensor, cm_dtype dtype, const void *value, cm_stream *stream) {
    CM__REQUIRE_NONNULL(tensor);
    CM__REQUIRE_NONNULL(value);
    CM__REQUIRE_ARG(cm__dtype(dtype) != NULL, "dtype = %d is not a cm_dtype", (int)dtype);
    CM__TRY(cm__op_stream(__func__, tensor, stream, &stream));
    CM__TRY(cm__check_out(__func__, "tensor", tensor));
    cm__op op;
    cm__op_init(&op, __func__, CM__OP_FILL, 0, tensor, stream);
    if (op.numel == 0)
        return CM_OK;
    cm__convert_element(tensor->dtype, op.value.bytes, dtype, value);
    return cm__dispatch(&op);
}

/* ------------------------------------------------------------ copy, cast */

static cm_status cm__copy_or_cast(const char *func, cm__op_kind kind, const cm_tensor *src,
                                  cm_tensor *dst, cm_stream *stream) {
    CM__TRY(cm__check_one_input(func, "dst", dst, "src", src, &stream));
    if (kind == CM__OP_COPY && src->dtype != dst->dtype)
        return cm__fail_as(func, CM_ERR_DTYPE_MISMATCH,
                           "src dtype %s differs from dst dtype %s (cm_cast converts)",
                           cm__dname(src->dtype), cm__dname(dst->dtype));
    CM__TRY(cm__check_same_shape(func, "src", src, "dst", dst));
    cm__op op;
    cm__op_init(&op, func, src->dtype == dst->dtype ? CM__OP_COPY : kind, 0, dst, stream);
    op.nin = 1;
    cm__operand_of(src, &op.in[0]);
    CM__TRY(cm__check_alias(func, "dst", dst, "src", src, op.in[0].strides, true));
    if (op.numel == 0)
        return CM_OK;
    return cm__dispatch(&op);
}

cm_status cm_copy(const cm_tensor *src, cm_tensor *dst, cm_stream *stream) {
    CM__REQUIRE_NONNULL(src);
    CM__REQUIRE_NONNULL(dst);
    return cm__copy_or_cast(__func__, CM__OP_COPY, src, dst, stream);
}

cm_status cm_cast(const cm_tensor *src, cm_tensor *dst, cm_stream *stream) {
    CM__REQUIRE_NONNULL(src);
    CM__REQUIRE_NONNULL(dst);
    return cm__copy_or_cast(__func__, CM__OP_CAST, src, dst, stream);
}

/* ------------------------------------------------------------ elementwise */

static bool cm__unary_float_only(cm_unary_op op) {
    return cm__unary_classes[op] == CM__UN_FLOAT;
}

cm_status cm_unary(cm_unary_op op, const cm_tensor *x, cm_tensor *out, cm_stream *stream) {
    CM__REQUIRE_ARG((int)op > 0 && op < CM_UNARY_COUNT, "op = %d is not a cm_unary_op", (int)op);
    CM__REQUIRE_NONNULL(x);
    CM__REQUIRE_NONNULL(out);
    const char *func = __func__;
    CM__TRY(cm__check_one_input(func, "out", out, "x", x, &stream));
    if (x->dtype != out->dtype)
        return cm__fail_as(func, CM_ERR_DTYPE_MISMATCH, "x dtype %s differs from out dtype %s",
                           cm__dname(x->dtype), cm__dname(out->dtype));
    if (x->dtype == CM_BOOL || (cm__unary_float_only(op) && !cm__is_float(x->dtype)))
        return cm__fail_as(func, CM_ERR_UNSUPPORTED, "op = %s is not defined for x dtype %s%s",
                           cm_unary_op_name(op), cm__dname(x->dtype),
                           x->dtype == CM_BOOL ? "" : " (cast to a floating dtype first)");
    CM__TRY(cm__check_same_shape(func, "x", x, "out", out));
    cm__op o;
    cm__op_init(&o, func, CM__OP_UNARY, (int32_t)op, out, stream);
    o.nin = 1;
    cm__operand_of(x, &o.in[0]);
    CM__TRY(cm__check_alias(func, "out", out, "x", x, o.in[0].strides, true));
    if (o.numel == 0)
        return CM_OK;
    return cm__dispatch(&o);
}

static bool cm__binary_is_comparison(cm_binary_op op) {
    return cm__binary_classes[op] == CM__BIN_COMPARE;
}

cm_status cm_binary(cm_binary_op op, const cm_tensor *a, const cm_tensor *b, cm_tensor *out,
                    cm_stream *stream) {
    CM__REQUIRE_ARG((int)op > 0 && op < CM_BINARY_COUNT, "op = %d is not a cm_binary_op", (int)op);
    CM__REQUIRE_NONNULL(a);
    CM__REQUIRE_NONNULL(b);
    CM__REQUIRE_NONNULL(out);
    const char *func = __func__;
    CM__TRY(cm__check_out(func, "out", out));
    CM__TRY(cm__check_device(func, "out", out, "a", a));
    CM__TRY(cm__check_device(func, "out", out, "b", b));
    CM__TRY(cm__op_stream(func, out, stream, &stream));
    if (a->dtype != b->dtype)
        return cm__fail_as(func, CM_ERR_DTYPE_MISMATCH,
                           "a dtype %s differs from b dtype %s (cm_cast converts)",
                           cm__dname(a->dtype), cm__dname(b->dtype));
    const bool cmp = cm__binary_is_comparison(op);
    const cm_dtype want = cmp ? CM_BOOL : a->dtype;
    if (out->dtype != want)
        return cm__fail_as(func, CM_ERR_DTYPE_MISMATCH, "out dtype %s must be %s for op = %s",
                           cm__dname(out->dtype), cm__dname(want), cm_binary_op_name(op));
    if (a->dtype == CM_BOOL && cm__binary_classes[op] == CM__BIN_ARITH)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED, "op = %s is not defined for dtype bool",
                           cm_binary_op_name(op));
    cm__op o;
    cm__op_init(&o, func, CM__OP_BINARY, (int32_t)op, out, stream);
    o.nin = 2;
    CM__TRY(cm__broadcast_operand(func, "a", a, "out", out->ndim, out->shape, &o.in[0]));
    CM__TRY(cm__broadcast_operand(func, "b", b, "out", out->ndim, out->shape, &o.in[1]));
    CM__TRY(cm__check_alias(func, "out", out, "a", a, o.in[0].strides, true));
    CM__TRY(cm__check_alias(func, "out", out, "b", b, o.in[1].strides, true));
    if (o.numel == 0)
        return CM_OK;
    return cm__dispatch(&o);
}

/* ------------------------------------------------------------ reduce */

cm_status cm_reduce(cm_reduce_op op, const cm_tensor *x, int32_t axis, cm_tensor *out,
                    cm_stream *stream) {
    CM__REQUIRE_ARG((int)op > 0 && op < CM_REDUCE_COUNT, "op = %d is not a cm_reduce_op", (int)op);
    CM__REQUIRE_NONNULL(x);
    CM__REQUIRE_NONNULL(out);
    const char *func = __func__;
    CM__TRY(cm__check_one_input(func, "out", out, "x", x, &stream));
    const int32_t nd = x->ndim;
    int32_t a = -1;
    if (axis != CM_AXIS_ALL) {
        if (axis < -nd || axis >= nd)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "axis = %d is out of range for a %d-d x (use CM_AXIS_ALL to "
                               "reduce every element)",
                               axis, nd);
        a = axis < 0 ? axis + nd : axis;
    }
    /* out's shape: x's without the reduced axes, or with them as size 1. */
    cm__op o;
    memset(&o, 0, sizeof o);
    bool keep = out->ndim == nd, ok = keep || out->ndim == (a < 0 ? 0 : nd - 1);
    for (int32_t k = 0, j = 0; ok && k < nd; ++k) {
        const bool reduced = a < 0 || k == a;
        if (keep) {
            ok = out->shape[k] == (reduced ? 1 : x->shape[k]);
            o.out.strides[k] = reduced || x->shape[k] == 1 ? 0 : out->strides[k];
        } else if (!reduced) {
            ok = out->shape[j] == x->shape[k];
            o.out.strides[k] = x->shape[k] == 1 ? 0 : out->strides[j];
            j++;
        }
    }
    if (!ok) {
        char sx[160], so[160], over[32] = "every axis";
        if (a >= 0)
            snprintf(over, sizeof over, "axis %d", a);
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "out shape %s does not match x shape %s reduced over %s (with or "
                           "without keeping size-1 axes)",
                           cm__fmt_shape(so, sizeof so, out->ndim, out->shape),
                           cm__fmt_shape(sx, sizeof sx, nd, x->shape), over);
    }
    CM__TRY(cm__check_alias(func, "out", out, "x", x, NULL, false));
    const int64_t n = cm__numel(x);
    if (cm__numel(out) == 0)
        return CM_OK;
    if (n == 0) {
        if (op == CM_REDUCE_MAX || op == CM_REDUCE_MIN)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "op = %s over zero elements of x (axis %d of size 0) has no "
                               "identity",
                               cm_reduce_op_name(op), a < 0 ? 0 : a);
        const double v = op == CM_REDUCE_SUM ? 0.0 : NAN;
        return cm_fill(out, CM_FLOAT64, &v, stream);
    }
    o.func = func;
    o.stream = stream;
    o.kind = CM__OP_REDUCE;
    o.code = (int32_t)op;
    o.ndim = nd;
    memcpy(o.shape, x->shape, sizeof o.shape);
    o.numel = n;
    o.axis = a;
    o.nin = 1;
    o.out.buffer = out->buffer;
    o.out.dtype = out->dtype;
    o.out.byte_offset = out->byte_offset;
    cm__operand_of(x, &o.in[0]);
    return cm__dispatch(&o);
}

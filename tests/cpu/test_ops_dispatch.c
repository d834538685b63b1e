/* SPDX-License-Identifier: MIT */
/* Dispatch of ops through cm__backend.run_op, with a stand-in backend (an
 * internal test: it builds a device from the backend table). Checks that
 * the core refuses mixed devices, that a backend sees validated,
 * broadcast-resolved ops, and that it may refuse a dtype (as Metal refuses
 * float64). */
#include "core/backend.h"

#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <string.h>

static cm__op last_op;
static int op_calls;

static void fake_destroy(cm_device *device) {
    (void)device;
}
static cm_status fake_info(const cm_device *device, cm_device_info *out) {
    (void)device;
    memset(out, 0, sizeof *out);
    out->type = CM_DEVICE_METAL;
    return CM_OK;
}
static cm_status fake_alloc(cm_device *device, cm_buffer *buffer, const char *label) {
    (void)device;
    (void)label;
    buffer->host = cm__alloc_raw(buffer->size, 64);
    return buffer->host || buffer->size == 0 ? CM_OK : CM_ERR_OUT_OF_MEMORY;
}
static cm_status fake_wrap(cm_device *device, cm_buffer *buffer, const cm_host_memory_desc *d) {
    (void)device;
    buffer->host = d->data;
    return CM_OK;
}
static void fake_free(cm_buffer *buffer) {
    if (!(buffer->flags & CM_BUFFER_FOREIGN))
        cm__free(buffer->host);
}
static cm_status fake_run_op(cm_device *device, const cm__op *op) {
    (void)device;
    op_calls++;
    last_op = *op;
    if (op->out.dtype == CM_FLOAT64)
        return cm__fail_as(op->func, CM_ERR_UNSUPPORTED, "float64 is not available on this device");
    return CM_OK;
}

static const cm__backend fake_backend = {
    .type = CM_DEVICE_METAL,
    .destroy = fake_destroy,
    .get_info = fake_info,
    .buffer_alloc = fake_alloc,
    .buffer_wrap_host = fake_wrap,
    .buffer_free = fake_free,
    .run_op = fake_run_op,
};

static cm_tensor *tensor_on(cm_device *dev, cm_dtype d, int32_t ndim, const int64_t *shape) {
    cm_tensor_desc desc = {.dtype = d, .ndim = ndim, .shape = shape};
    cm_tensor *t = NULL;
    cr_assert_eq(cm_tensor_create(dev, &desc, &t), CM_OK, "%s", cm_last_error());
    return t;
}

Test(ops_dispatch, tensors_on_different_devices_are_refused) {
    cm_device *fake = NULL, *cpu = NULL;
    cr_assert_eq(cm__device_new(&fake_backend, NULL, &fake), CM_OK);
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &cpu), CM_OK);
    const int64_t s[1] = {4};
    cm_tensor *a = tensor_on(cpu, CM_FLOAT32, 1, s), *b = tensor_on(fake, CM_FLOAT32, 1, s);
    cr_assert_eq(cm_copy(a, b, NULL), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(),
                     "cm_copy: src is on a cpu device but dst is on a different (metal) device") !=
                  NULL,
              "%s", cm_last_error());
    cr_assert_eq(cm_binary(CM_BINARY_ADD, b, a, b, NULL), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "b is on a cpu device") != NULL, "%s", cm_last_error());
    cr_assert_eq(op_calls, 0);
    /* Two handles of the CPU device are one device. */
    cm_device *cpu2 = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &cpu2), CM_OK);
    cm_tensor *c = tensor_on(cpu2, CM_FLOAT32, 1, s);
    cr_assert_eq(cm_copy(a, c, NULL), CM_OK, "%s", cm_last_error());
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(c);
    cm_device_release(cpu2);
    cm_device_release(cpu);
    cm_device_release(fake);
}

Test(ops_dispatch, backend_gets_broadcast_resolved_ops_and_may_refuse_a_dtype) {
    cm_device *fake = NULL;
    cr_assert_eq(cm__device_new(&fake_backend, NULL, &fake), CM_OK);
    const int64_t s23[2] = {2, 3}, s3[1] = {3};
    cm_tensor *a = tensor_on(fake, CM_FLOAT32, 2, s23), *b = tensor_on(fake, CM_FLOAT32, 1, s3);
    cm_tensor *o = tensor_on(fake, CM_BOOL, 2, s23);
    cr_assert_eq(cm_binary(CM_BINARY_LT, a, b, o, NULL), CM_OK, "%s", cm_last_error());
    cr_assert_eq(op_calls, 1);
    cr_assert_eq(last_op.kind, CM__OP_BINARY);
    cr_assert_eq(last_op.code, CM_BINARY_LT);
    cr_assert_eq(last_op.ndim, 2);
    cr_assert_eq(last_op.numel, 6);
    cr_assert_eq(last_op.nin, 2);
    cr_assert_eq(last_op.in[1].strides[0], 0); /* broadcast axis */
    cr_assert_eq(last_op.in[1].strides[1], 1);
    cr_assert_eq(last_op.out.strides[0], 3);
    /* A reduction over axis 1 with the axis dropped: out stride 0 there. */
    const int64_t s2[1] = {2};
    cm_tensor *r = tensor_on(fake, CM_FLOAT32, 1, s2);
    cr_assert_eq(cm_reduce(CM_REDUCE_MAX, a, 1, r, NULL), CM_OK, "%s", cm_last_error());
    cm_tensor_release(r);
    cr_assert_eq(last_op.kind, CM__OP_REDUCE);
    cr_assert_eq(last_op.axis, 1);
    cr_assert_eq(last_op.out.strides[1], 0);
    cr_assert_eq(last_op.out.strides[0], 1);
    /* The backend's refusal reaches the caller under the public name. */
    cm_tensor *d = tensor_on(fake, CM_FLOAT64, 2, s23);
    cr_assert_eq(cm_cast(a, d, NULL), CM_ERR_UNSUPPORTED);
    cr_assert(strstr(cm_last_error(), "cm_cast: float64 is not available") != NULL, "%s",
              cm_last_error());
    /* Empty ops never reach the backend. */
    const int zero_calls = op_calls;
    const int64_t z[1] = {0};
    cm_tensor *e = tensor_on(fake, CM_FLOAT32, 1, z);
    const double one = 1.0;
    cr_assert_eq(cm_fill(e, CM_FLOAT64, &one, NULL), CM_OK);
    cr_assert_eq(op_calls, zero_calls);
    cm_tensor_release(e);
    cm_tensor_release(d);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(o);
    cm_device_release(fake);
}

/* SPDX-License-Identifier: MIT */
/* A hand-built DLPack producer for the tests: a legacy and a versioned
 * managed tensor over caller memory, whose deleters count their calls. */
#ifndef CMETAL_TESTS_DLPACK_PRODUCER_H
#define CMETAL_TESTS_DLPACK_PRODUCER_H

#include <cmetal/cmetal.h>

#include <stdatomic.h>
#include <string.h>

typedef struct producer {
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned;
    int64_t shape[CM_MAX_NDIM + 2];
    int64_t strides[CM_MAX_NDIM + 2];
    atomic_int deleted; /* deleter calls */
} producer;

static inline void producer_count_legacy(DLManagedTensor *self) {
    producer *p = self->manager_ctx;
    atomic_fetch_add(&p->deleted, 1);
}

static inline void producer_count_versioned(DLManagedTensorVersioned *self) {
    producer *p = self->manager_ctx;
    atomic_fetch_add(&p->deleted, 1);
}

/* Sets both managed tensors to the same DLTensor. `strides` NULL leaves
 * dl_tensor.strides NULL. */
static inline void producer_init(producer *p, void *data, DLDataType dtype, int ndim,
                                 const int64_t *shape, const int64_t *strides) {
    memset(p, 0, sizeof *p);
    atomic_init(&p->deleted, 0);
    if (ndim > 0 && shape != NULL)
        memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    if (ndim > 0 && strides != NULL)
        memcpy(p->strides, strides, (size_t)ndim * sizeof *strides);
    DLTensor t = {
        .data = data,
        .device = {.device_type = kDLCPU, .device_id = 0},
        .ndim = ndim,
        .dtype = dtype,
        .shape = ndim > 0 ? p->shape : NULL,
        .strides = strides != NULL ? p->strides : NULL,
        .byte_offset = 0,
    };
    p->legacy.dl_tensor = t;
    p->legacy.manager_ctx = p;
    p->legacy.deleter = producer_count_legacy;
    p->versioned.version.major = 1;
    p->versioned.version.minor = 0;
    p->versioned.manager_ctx = p;
    p->versioned.deleter = producer_count_versioned;
    p->versioned.flags = 0;
    p->versioned.dl_tensor = t;
}

/* Applies the same edit to both DLTensors. */
#define PRODUCER_SET(p, field, value)                                                              \
    do {                                                                                           \
        (p)->legacy.dl_tensor.field = (value);                                                     \
        (p)->versioned.dl_tensor.field = (value);                                                  \
    } while (0)

static inline DLDataType dl_dtype(uint8_t code, uint8_t bits, uint16_t lanes) {
    DLDataType d = {.code = code, .bits = bits, .lanes = lanes};
    return d;
}

#define DL_F32 dl_dtype(kDLFloat, 32, 1)

#endif

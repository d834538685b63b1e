/* SPDX-License-Identifier: MIT */
/* cmetal/dtype.h: element types and their DLPack encoding. */
#ifndef CMETAL_DTYPE_H
#define CMETAL_DTYPE_H

#include <cmetal/status.h>

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. 0 is invalid so that a zeroed desc is caught. Values are
 * part of the ABI and never renumbered. */
typedef enum cm_dtype {
    CM_DTYPE_INVALID = 0,
    CM_BOOL = 1, /* one byte, 0 or 1 (DLPack kDLBool, 8 bits) */
    CM_INT8 = 2,
    CM_INT16 = 3,
    CM_INT32 = 4,
    CM_INT64 = 5,
    CM_UINT8 = 6,
    CM_UINT16 = 7,
    CM_UINT32 = 8,
    CM_UINT64 = 9,
    CM_FLOAT16 = 10,  /* IEEE 754 binary16 */
    CM_BFLOAT16 = 11, /* upper half of a binary32 */
    CM_FLOAT32 = 12,
    CM_FLOAT64 = 13, /* on Metal devices storage only: see below */
    CM_DTYPE_COUNT = 14
} cm_dtype;

/* float64 on a Metal device (Metal has no double): a float64 tensor is
 * storage only there. It may be created, wrapped, imported and exported
 * through DLPack, and read and written by the host (cm_tensor_host_read,
 * cm_tensor_host_write, cm_tensor_get_element...), so that data passes
 * through unchanged; nothing computes on it on the device: every op of
 * cmetal/ops.h (cm_copy and cm_cast included), cm_kernel_dispatch and
 * cm_body_kernel_dispatch fail with CM_ERR_UNSUPPORTED naming the
 * argument. Cast it on the CPU device (to float32) to compute on Metal. */

typedef enum cm_dtype_kind {
    CM_KIND_BOOL = 1,
    CM_KIND_SIGNED = 2,
    CM_KIND_UNSIGNED = 3,
    CM_KIND_FLOAT = 4
} cm_dtype_kind;

typedef struct cm_dtype_info {
    const char *name; /* "float16": static string, the NumPy name */
    size_t size;      /* bytes per element */
    cm_dtype_kind kind;
    uint8_t dl_code;   /* DLPack DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2,
                           kDLBfloat 4, kDLBool 6 */
    uint8_t dl_bits;   /* 8 * size */
    uint16_t dl_lanes; /* always 1: vector lanes are not element types here */
} cm_dtype_info;

/* Fills *out for a valid dtype.
 * Errors: CM_ERR_INVALID_ARGUMENT for a value that is not a cm_dtype or a
 * NULL out. Thread-safety: pure. */
CM_API cm_status cm_dtype_get_info(cm_dtype dtype, cm_dtype_info *out);

/* Maps a DLPack (code, bits, lanes) triple to a cm_dtype.
 * Errors: CM_ERR_UNSUPPORTED naming the triple when cmetal has no such
 * element type (complex, float8, lanes != 1, opaque handles...);
 * CM_ERR_INVALID_ARGUMENT for a NULL out. Thread-safety: pure. */
CM_API cm_status cm_dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes, cm_dtype *out);

/* Maps a NumPy-style name ("float32", "bool", "bfloat16") to a cm_dtype.
 * Errors: CM_ERR_INVALID_ARGUMENT naming the string. */
CM_API cm_status cm_dtype_from_name(const char *name, cm_dtype *out);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_DTYPE_H */

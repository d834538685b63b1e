/* SPDX-License-Identifier: MIT */
/* Element type table and its DLPack encoding. */
#include "backend.h"

#include <cmetal/dtype.h>

#include <string.h>

/* DLPack type codes (DLDataTypeCode), from the spec. */
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

static const cm_dtype_info cm__dtypes[CM_DTYPE_COUNT] = {
    [CM_BOOL] = {"bool", 1, CM_KIND_BOOL, DL_BOOL, 8, 1},
    [CM_INT8] = {"int8", 1, CM_KIND_SIGNED, DL_INT, 8, 1},
    [CM_INT16] = {"int16", 2, CM_KIND_SIGNED, DL_INT, 16, 1},
    [CM_INT32] = {"int32", 4, CM_KIND_SIGNED, DL_INT, 32, 1},
    [CM_INT64] = {"int64", 8, CM_KIND_SIGNED, DL_INT, 64, 1},
    [CM_UINT8] = {"uint8", 1, CM_KIND_UNSIGNED, DL_UINT, 8, 1},
    [CM_UINT16] = {"uint16", 2, CM_KIND_UNSIGNED, DL_UINT, 16, 1},
    [CM_UINT32] = {"uint32", 4, CM_KIND_UNSIGNED, DL_UINT, 32, 1},
    [CM_UINT64] = {"uint64", 8, CM_KIND_UNSIGNED, DL_UINT, 64, 1},
    [CM_FLOAT16] = {"float16", 2, CM_KIND_FLOAT, DL_FLOAT, 16, 1},
    [CM_BFLOAT16] = {"bfloat16", 2, CM_KIND_FLOAT, DL_BFLOAT, 16, 1},
    [CM_FLOAT32] = {"float32", 4, CM_KIND_FLOAT, DL_FLOAT, 32, 1},
    [CM_FLOAT64] = {"float64", 8, CM_KIND_FLOAT, DL_FLOAT, 64, 1},
};

const cm_dtype_info *cm__dtype(cm_dtype dtype) {
    if ((int)dtype <= CM_DTYPE_INVALID || (int)dtype >= CM_DTYPE_COUNT)
        return NULL;
    return &cm__dtypes[dtype];
}

cm_status cm_dtype_get_info(cm_dtype dtype, cm_dtype_info *out) {
    CM__REQUIRE_NONNULL(out);
    const cm_dtype_info *info = cm__dtype(dtype);
    CM__REQUIRE_ARG(info != NULL, "dtype = %d is not a cm_dtype", (int)dtype);
    *out = *info;
    return CM_OK;
}

cm_status cm_dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes, cm_dtype *out) {
    CM__REQUIRE_NONNULL(out);
    if (lanes == 1) {
        for (int d = 1; d < CM_DTYPE_COUNT; ++d) {
            if (cm__dtypes[d].dl_code == code && cm__dtypes[d].dl_bits == bits) {
                *out = (cm_dtype)d;
                return CM_OK;
            }
        }
    }
    return cm__fail(CM_ERR_UNSUPPORTED,
                    "DLPack dtype (code = %u, bits = %u, lanes = %u) has no cmetal "
                    "element type",
                    (unsigned)code, (unsigned)bits, (unsigned)lanes);
}

cm_status cm_dtype_from_name(const char *name, cm_dtype *out) {
    CM__REQUIRE_NONNULL(name);
    CM__REQUIRE_NONNULL(out);
    for (int d = 1; d < CM_DTYPE_COUNT; ++d) {
        if (strcmp(cm__dtypes[d].name, name) == 0) {
            *out = (cm_dtype)d;
            return CM_OK;
        }
    }
    return cm__fail(CM_ERR_INVALID_ARGUMENT, "name = \"%.64s\" is not a dtype name", name);
}

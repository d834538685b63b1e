/* SPDX-License-Identifier: MIT */
/* The device factory: counting and opening devices by type, through the
 * backends' entry points (runtime/cpu, runtime/metal), which make their
 * devices with cm__device_new (device.c). */
#include "backend.h"

#include <cmetal/device.h>

#include <stdlib.h>
#include <string.h>

/* CM_DEVICE_DEFAULT: CMETAL_DEVICE if set, else Metal when present. */
static cm_status cm__resolve_default(cm_device_type *type) {
    const char *env = getenv("CMETAL_DEVICE");
    if (env != NULL && env[0] != '\0') {
        if (strcmp(env, "cpu") == 0) {
            *type = CM_DEVICE_CPU;
        } else if (strcmp(env, "metal") == 0) {
            *type = CM_DEVICE_METAL;
        } else {
            return cm__fail_as("cm_device_open", CM_ERR_INVALID_ARGUMENT,
                               "CMETAL_DEVICE = \"%.32s\" must be \"cpu\" or \"metal\"", env);
        }
        return CM_OK;
    }
    uint32_t n = 0;
    *type = (cm__metal_device_count(&n) == CM_OK && n > 0) ? CM_DEVICE_METAL : CM_DEVICE_CPU;
    return CM_OK;
}

cm_status cm_device_count(cm_device_type type, uint32_t *count) {
    CM__REQUIRE_NONNULL(count);
    *count = 0;
    switch (type) {
    case CM_DEVICE_CPU: return cm__cpu_device_count(count);
    case CM_DEVICE_METAL:
        /* Absence of Metal is a count of zero, not an error. */
        if (cm__metal_device_count(count) != CM_OK)
            *count = 0;
        return CM_OK;
    case CM_DEVICE_DEFAULT: break;
    }
    return cm__fail(CM_ERR_INVALID_ARGUMENT, "type = %d must be CM_DEVICE_CPU or CM_DEVICE_METAL",
                    (int)type);
}

cm_status cm_device_open(cm_device_type type, uint32_t index, cm_device **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    if (type == CM_DEVICE_DEFAULT)
        CM__TRY(cm__resolve_default(&type));
    switch (type) {
    case CM_DEVICE_CPU: return cm__cpu_device_open(index, out);
    case CM_DEVICE_METAL: return cm__metal_device_open(index, out);
    case CM_DEVICE_DEFAULT: break;
    }
    return cm__fail(CM_ERR_INVALID_ARGUMENT,
                    "type = %d must be CM_DEVICE_DEFAULT, CM_DEVICE_CPU or CM_DEVICE_METAL",
                    (int)type);
}

cm_status cm_device_open_desc(const cm_device_desc *desc, cm_device **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(desc);
    cm_device_type type = desc->type;
    if (type == CM_DEVICE_DEFAULT)
        CM__TRY(cm__resolve_default(&type));
    if (type != CM_DEVICE_CPU && type != CM_DEVICE_METAL)
        return cm__fail(CM_ERR_INVALID_ARGUMENT,
                        "desc->type = %d must be CM_DEVICE_DEFAULT, CM_DEVICE_CPU or "
                        "CM_DEVICE_METAL",
                        (int)desc->type);
    if (type == CM_DEVICE_CPU && desc->cpu_threads > CM_CPU_MAX_THREADS)
        return cm__fail(CM_ERR_INVALID_ARGUMENT,
                        "desc->cpu_threads = %u exceeds CM_CPU_MAX_THREADS (%d)", desc->cpu_threads,
                        CM_CPU_MAX_THREADS);
    if (type == CM_DEVICE_METAL && desc->cpu_threads != 0)
        return cm__fail(CM_ERR_INVALID_ARGUMENT,
                        "desc->cpu_threads = %u: threads apply to the CPU device only, "
                        "it must be 0 for Metal",
                        desc->cpu_threads);
    if (type == CM_DEVICE_CPU)
        return cm__cpu_device_open_threads(desc->index, desc->cpu_threads, out);
    return cm_device_open(type, desc->index, out);
}

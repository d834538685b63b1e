/* SPDX-License-Identifier: MIT */
/* The Metal backend of a build configured with -DCMETAL_METAL=OFF: no
 * Metal devices, and a clear error from every Metal entry point. */
#include "core/backend.h"

cm_status cm__metal_device_count(uint32_t *count) {
    *count = 0;
    return CM_OK;
}

cm_status cm__metal_device_open(uint32_t index, cm_device **out) {
    (void)index;
    *out = NULL;
    return cm__fail_as("cm_device_open", CM_ERR_NO_DEVICE,
                       "type = metal: this build of cmetal has no Metal backend "
                       "(configured with -DCMETAL_METAL=OFF), so CMETAL_METAL_FRAMEWORK "
                       "has no effect");
}

#include <cmetal/metal.h>

static cm_status cm__no_metal(const char *func) {
    return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                       "this build of cmetal has no Metal backend (configured with "
                       "-DCMETAL_METAL=OFF)");
}

cm_status cm_device_get_metal_device(const cm_device *device, void **out) {
    (void)device;
    if (out != NULL)
        *out = NULL;
    return cm__no_metal(__func__);
}

cm_status cm_stream_get_metal_queue(const cm_stream *stream, void **out) {
    (void)stream;
    if (out != NULL)
        *out = NULL;
    return cm__no_metal(__func__);
}

cm_status cm_kernel_get_metal_pipeline(const cm_kernel *kernel, void **out) {
    (void)kernel;
    if (out != NULL)
        *out = NULL;
    return cm__no_metal(__func__);
}

cm_status cm_device_get_metal_residency_set(const cm_device *device, void **out) {
    (void)device;
    if (out != NULL)
        *out = NULL;
    return cm__no_metal(__func__);
}

cm_status cm_device_wrap_metal(void *mtl_device, cm_device **out) {
    (void)mtl_device;
    if (out != NULL)
        *out = NULL;
    return cm__no_metal(__func__);
}

cm_status cm_stream_wrap_metal(cm_device *device, void *queue, cm_stream **out) {
    (void)device;
    (void)queue;
    if (out != NULL)
        *out = NULL;
    return cm__no_metal(__func__);
}

cm_status cm_fence_wrap_metal(cm_device *device, void *shared_event, uint64_t value,
                              cm_fence **out) {
    (void)device;
    (void)shared_event;
    (void)value;
    if (out != NULL)
        *out = NULL;
    return cm__no_metal(__func__);
}

cm_status cm_capture_begin(const cm_capture_desc *desc) {
    (void)desc;
    return cm__no_metal(__func__);
}

cm_status cm_capture_end(void) {
    return cm__no_metal(__func__);
}

/* SPDX-License-Identifier: MIT */
/* Custom kernels (cmetal/kernel.h) in a build configured with
 * -DCMETAL_KERNELS=OFF (amalgamation: CMETAL_NO_KERNELS): every entry point
 * fails with CM_ERR_UNSUPPORTED naming the option. No library or kernel can
 * exist, so releasing NULL is the one call that succeeds, as in full builds.
 * The library's own ops on Metal do not need this part. */
#include "backend.h"

#include <cmetal/kernel.h>

static cm_status cm__no_kernels(const char *func) {
    return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                       "custom kernels were left out of this build (CMETAL_KERNELS=OFF)");
}

cm_status cm_library_create(cm_device *device, const cm_library_desc *desc, cm_library **out) {
    (void)device;
    (void)desc;
    if (out != NULL)
        *out = NULL;
    return cm__no_kernels(__func__);
}

cm_status cm_library_load(cm_device *device, const void *data, size_t size, cm_library **out) {
    (void)device;
    (void)data;
    (void)size;
    if (out != NULL)
        *out = NULL;
    return cm__no_kernels(__func__);
}

cm_status cm_library_load_file(cm_device *device, const char *path, cm_library **out) {
    (void)device;
    (void)path;
    if (out != NULL)
        *out = NULL;
    return cm__no_kernels(__func__);
}

cm_status cm_device_set_pipeline_cache(cm_device *device, const char *path) {
    (void)device;
    (void)path;
    return cm__no_kernels(__func__);
}

cm_status cm_device_save_pipeline_cache(cm_device *device) {
    (void)device;
    return cm__no_kernels(__func__);
}

cm_status cm_library_retain(cm_library *library) {
    (void)library;
    return cm__no_kernels(__func__);
}

cm_status cm_library_release(cm_library *library) {
    return library == NULL ? CM_OK : cm__no_kernels(__func__);
}

cm_status cm_kernel_create(cm_library *library, const cm_kernel_desc *desc, cm_kernel **out) {
    (void)library;
    (void)desc;
    if (out != NULL)
        *out = NULL;
    return cm__no_kernels(__func__);
}

cm_status cm_kernel_retain(cm_kernel *kernel) {
    (void)kernel;
    return cm__no_kernels(__func__);
}

cm_status cm_kernel_release(cm_kernel *kernel) {
    return kernel == NULL ? CM_OK : cm__no_kernels(__func__);
}

cm_status cm_kernel_get_info(const cm_kernel *kernel, cm_kernel_info *out) {
    (void)kernel;
    (void)out;
    return cm__no_kernels(__func__);
}

cm_status cm_kernel_dispatch(cm_kernel *kernel, cm_stream *stream, const cm_dispatch_desc *desc) {
    (void)kernel;
    (void)stream;
    (void)desc;
    return cm__no_kernels(__func__);
}

cm_status cm_body_kernel_create(cm_device *device, const cm_body_kernel_desc *desc,
                                cm_body_kernel **out) {
    (void)device;
    (void)desc;
    if (out != NULL)
        *out = NULL;
    return cm__no_kernels(__func__);
}

cm_status cm_body_kernel_retain(cm_body_kernel *kernel) {
    (void)kernel;
    return cm__no_kernels(__func__);
}

cm_status cm_body_kernel_release(cm_body_kernel *kernel) {
    return kernel == NULL ? CM_OK : cm__no_kernels(__func__);
}

cm_status cm_body_kernel_dispatch(cm_body_kernel *kernel, cm_stream *stream,
                                  const cm_body_dispatch_desc *desc) {
    (void)kernel;
    (void)stream;
    (void)desc;
    return cm__no_kernels(__func__);
}

cm_status cm_body_kernel_get_source(cm_body_kernel *kernel, const cm_body_dispatch_desc *desc,
                                    char *buf, size_t cap, size_t *length) {
    (void)kernel;
    (void)desc;
    if (buf != NULL && cap > 0)
        buf[0] = '\0';
    if (length != NULL)
        *length = 0;
    return cm__no_kernels(__func__);
}

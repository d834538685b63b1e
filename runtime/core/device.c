/* SPDX-License-Identifier: MIT */
/* Devices: the constructor and destructor every backend's device goes
 * through, reference counting, info. Opening by type is device_open.c. */
#include "backend.h"

#include <cmetal/device.h>

#include <string.h>

const char *cm_device_type_name(cm_device_type type) {
    switch (type) {
    case CM_DEVICE_DEFAULT: return "default";
    case CM_DEVICE_CPU: return "cpu";
    case CM_DEVICE_METAL: return "metal";
    }
    return "unknown";
}

/* ------------------------------------------------------------ construction */

cm_status cm__device_init(cm_device *device, const cm__backend *backend, void *impl,
                          cm_stream *default_stream) {
    cm__ref_init(&device->ref);
    device->backend = backend;
    device->impl = impl;
    if (pthread_mutex_init(&device->streams_lock, NULL) != 0)
        return cm__fail_as("cm_device_open", CM_ERR_OUT_OF_MEMORY, "pthread_mutex_init failed");
    device->default_stream = default_stream;
    cm_status status = default_stream != NULL
                           ? cm__stream_init(default_stream, device, true, NULL, NULL)
                           : cm__stream_new(device, true, NULL, NULL, &device->default_stream);
    if (status != CM_OK)
        pthread_mutex_destroy(&device->streams_lock);
    return status;
}

cm_status cm__device_new(const cm__backend *backend, void *impl, cm_device **out) {
    cm_device *device = CM__NEW(cm_device);
    if (device == NULL)
        return cm__fail_as("cm_device_open", CM_ERR_OUT_OF_MEMORY, "no memory for a %s device",
                           cm_device_type_name(backend->type));
    const cm_status status = cm__device_init(device, backend, impl, NULL);
    if (status != CM_OK) {
        cm__free(device);
        return status;
    }
    *out = device;
    return CM_OK;
}

void cm__device_destroy(cm_device *device) {
    cm__stream_destroy(device->default_stream);
    device->backend->destroy(device);
    pthread_mutex_destroy(&device->streams_lock);
    cm__free(device);
}

cm_status cm_device_retain(cm_device *device) {
    CM__REQUIRE_NONNULL(device);
    if (!device->immortal)
        cm__ref_retain(&device->ref);
    return CM_OK;
}

cm_status cm_device_release(cm_device *device) {
    if (device != NULL && !device->immortal && cm__ref_release(&device->ref))
        cm__device_destroy(device);
    return CM_OK;
}

cm_status cm_device_get_info(const cm_device *device, cm_device_info *out) {
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(out);
    memset(out, 0, sizeof *out);
    return device->backend->get_info(device, out);
}

cm_status cm_device_synchronize(cm_device *device) {
    CM__REQUIRE_NONNULL(device);
    return cm__device_sync_streams(__func__, device);
}

/* SPDX-License-Identifier: MIT */
/* cmetal/memory.h: argument checks in front of the backend's buffer cache. */
#include "backend.h"

#include <cmetal/memory.h>

/* The device's cache, or CM_ERR_UNSUPPORTED as `func`. */
static cm_status cm__memory_of(const char *func, const cm_device *device,
                               const cm__memory_backend **out) {
    *out = device->backend->memory;
    if (*out == NULL)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "device is a %s device: only Metal devices have a buffer cache",
                           cm_device_type_name(device->backend->type));
    return CM_OK;
}

cm_status cm_device_get_memory_info(const cm_device *device, cm_memory_info *out) {
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(out);
    const cm__memory_backend *memory;
    CM__TRY(cm__memory_of(__func__, device, &memory));
    memory->info(device, out);
    return CM_OK;
}

cm_status cm_device_reset_peak_memory(cm_device *device) {
    CM__REQUIRE_NONNULL(device);
    const cm__memory_backend *memory;
    CM__TRY(cm__memory_of(__func__, device, &memory));
    memory->reset_peak(device);
    return CM_OK;
}

/* Sets the cache limit (`cache`) or the memory limit; the old one into
 * *previous unless NULL. */
static cm_status cm__set_limit(const char *func, cm_device *device, bool cache, uint64_t bytes,
                               uint64_t *previous) {
    const cm__memory_backend *memory;
    CM__TRY(cm__memory_of(func, device, &memory));
    const uint64_t old = memory->set_limit(device, cache, bytes);
    if (previous != NULL)
        *previous = old;
    return CM_OK;
}

cm_status cm_device_set_cache_limit(cm_device *device, uint64_t bytes, uint64_t *previous) {
    CM__REQUIRE_NONNULL(device);
    return cm__set_limit(__func__, device, true, bytes, previous);
}

cm_status cm_device_set_memory_limit(cm_device *device, uint64_t bytes, uint64_t *previous) {
    CM__REQUIRE_NONNULL(device);
    return cm__set_limit(__func__, device, false, bytes, previous);
}

cm_status cm_device_clear_cache(cm_device *device) {
    CM__REQUIRE_NONNULL(device);
    const cm__memory_backend *memory;
    CM__TRY(cm__memory_of(__func__, device, &memory));
    memory->clear(device);
    return CM_OK;
}

cm_status cm_device_set_wired_limit(cm_device *device, uint64_t bytes, uint64_t *previous) {
    CM__REQUIRE_NONNULL(device);
    const cm__memory_backend *memory;
    CM__TRY(cm__memory_of(__func__, device, &memory));
    uint64_t old = 0;
    if (!memory->set_wired_limit(device, bytes, &old))
        return cm__fail(CM_ERR_UNSUPPORTED,
                        "the device has no residency sets (newResidencySetWithDescriptor:error:, "
                        "macOS 15 and GPU family Apple6 or later): nothing is wired");
    if (previous != NULL)
        *previous = old;
    return CM_OK;
}

/* Stand-in for the Metal backend until it is built: no Metal devices. */
#include "core/backend.h"

cm_status cm__metal_device_count(uint32_t *count) {
    *count = 0;
    return CM_OK;
}

cm_status cm__metal_device_open(uint32_t index, cm_device **out) {
    (void)index;
    *out = NULL;
    return cm__fail_as("cm_device_open", CM_ERR_NO_DEVICE,
                       "type = metal: this build of cmetal has no Metal backend yet");
}

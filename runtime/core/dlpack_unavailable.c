/* SPDX-License-Identifier: MIT */
/* DLPack in a build configured with -DCMETAL_DLPACK=OFF (amalgamation:
 * CMETAL_NO_DLPACK): every entry point fails with CM_ERR_UNSUPPORTED naming
 * the option, and nothing of the caller's is touched but *out. */
#include "backend.h"

#include <cmetal/dlpack.h>

#include <string.h>

static cm_status cm__no_dlpack(const char *func) {
    return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                       "DLPack was left out of this build (CMETAL_DLPACK=OFF)");
}

cm_status cm_dlpack_export(const cm_tensor *tensor, const cm_dlpack_export_desc *desc,
                           cm_dlpack_managed *out) {
    (void)tensor;
    (void)desc;
    if (out != NULL)
        memset(out, 0, sizeof *out);
    return cm__no_dlpack(__func__);
}

cm_status cm_dlpack_import(DLManagedTensor *managed, const cm_dlpack_import_desc *desc,
                           cm_tensor **out) {
    (void)managed;
    (void)desc;
    if (out != NULL)
        *out = NULL;
    return cm__no_dlpack(__func__);
}

cm_status cm_dlpack_import_versioned(DLManagedTensorVersioned *managed,
                                     const cm_dlpack_import_desc *desc, cm_tensor **out) {
    (void)managed;
    (void)desc;
    if (out != NULL)
        *out = NULL;
    return cm__no_dlpack(__func__);
}

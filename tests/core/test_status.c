/* SPDX-License-Identifier: MIT */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <string.h>

Test(status, names_and_texts_cover_every_code) {
    cr_assert_str_eq(cm_status_name(CM_OK), "CM_OK");
    cr_assert_str_eq(cm_status_name(CM_ERR_OUT_OF_MEMORY), "CM_ERR_OUT_OF_MEMORY");
    cr_assert_str_eq(cm_status_str(CM_ERR_READ_ONLY), "write to read-only data");
    cr_assert_str_eq(cm_status_name((cm_status)999), "CM_STATUS_UNKNOWN");
    cr_assert_str_eq(cm_status_str((cm_status)-1), "unknown status");
    for (int s = CM_OK; s <= CM_ERR_INTERNAL; ++s)
        cr_assert(strncmp(cm_status_name((cm_status)s), "CM_", 3) == 0, "code %d", s);
}

Test(status, version_matches_macros) {
    cr_assert_eq(cm_version(), CM_VERSION_NUMBER);
    cr_assert_str_eq(cm_version_string(), "0.1.0");
}

Test(status, set_allocator_rejects_missing_functions) {
    cm_allocator a = {0};
    cr_assert_eq(cm_set_allocator(&a), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "cm_set_allocator: allocator->alloc = NULL") != NULL, "%s",
              cm_last_error());
    cr_assert_eq(cm_set_allocator(NULL), CM_OK);
}

/* SPDX-License-Identifier: MIT */
/* The bridge built against a runtime library that does not exist, as on a
 * machine without libobjc: every entry point reports it, nothing crashes. */
#include "objc/bridge.h"

#include <criterion/criterion.h>

#include <string.h>

#define MISSING "\"/nonexistent/libobjc.so.4\""

Test(objc_no_runtime, init_reports_the_missing_runtime) {
    cr_assert_eq(cm__objc_init(), CM_ERR_NO_DEVICE);
    cr_assert(strstr(cm_last_error(), "init_reports_the_missing_runtime") != NULL,
              "names the caller: %s", cm_last_error());
    cr_assert(strstr(cm_last_error(), "cannot load the Objective-C runtime " MISSING) != NULL, "%s",
              cm_last_error());
    /* Kept: the next call says the same. */
    cr_assert_eq(cm__objc_init_as("cm_again"), CM_ERR_NO_DEVICE);
    cr_assert(strncmp(cm_last_error(), "cm_again: cannot load", 21) == 0, "%s", cm_last_error());
}

Test(objc_no_runtime, metal_load_and_default_device_say_no_device) {
    cr_assert_eq(cm__metal_load_as("cm_device_metal"), CM_ERR_NO_DEVICE);
    cr_assert(strstr(cm_last_error(), "cm_device_metal: cannot load the "
                                      "Objective-C runtime") != NULL,
              "%s", cm_last_error());
    cm__id device = (cm__id)1;
    cr_assert_eq(cm__metal_default_device("cm_device_metal", &device), CM_ERR_NO_DEVICE);
    cr_assert_null(device);
    cr_assert_null(cm__metal_framework_path());
}

static void never_called(void *context, cm__id command_buffer) {
    (void)context, (void)command_buffer;
    cr_assert_fail("a block that could not be made was invoked");
}

Test(objc_no_runtime, helpers_degrade_without_crashing) {
    cr_assert_eq(cm__objc_init(), CM_ERR_NO_DEVICE);
    cr_assert_null(cm__objc_pool_push());
    cm__objc_pool_pop(NULL);
    cr_assert_null(CM__CLASS(NSString));
    cm__id s = (cm__id)1;
    cr_assert_eq(cm__ns_string_from_utf8("cm_test", "x", &s), CM_ERR_UNSUPPORTED);
    cr_assert_null(s);
    cr_assert(strstr(cm_last_error(), "no NSString class") != NULL, "%s", cm_last_error());
    cm__block blk;
    cr_assert_eq(cm__block_init_completed(&blk, never_called, NULL, NULL), CM_ERR_UNSUPPORTED);
    cr_assert(strstr(cm_last_error(), "no blocks runtime") != NULL, "%s", cm_last_error());
}

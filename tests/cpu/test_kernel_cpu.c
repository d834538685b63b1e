/* SPDX-License-Identifier: MIT */
/* cmetal/kernel.h on the CPU device (every build, the minimal one too):
 * each entry point fails with CM_ERR_UNSUPPORTED and says to open a Metal
 * device; argument errors come first. */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>

#include "check.h"

Test(kernel_cpu, every_entry_point_says_to_open_a_metal_device) {
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu));
    cm_library *lib = (cm_library *)1;
    EXPECT_FAIL(cm_library_create(cpu, &(cm_library_desc){.source = "kernel void f() {}"}, &lib),
                CM_ERR_UNSUPPORTED,
                "cm_library_create: the cpu device runs no custom kernels: open a Metal device");
    cr_assert_null(lib);
    EXPECT_FAIL(cm_library_load(cpu, "x", 1, &lib), CM_ERR_UNSUPPORTED,
                "cm_library_load: the cpu device runs no custom kernels: open a Metal device");
    EXPECT_FAIL(cm_library_load_file(cpu, "/dev/null", &lib), CM_ERR_UNSUPPORTED,
                "cm_library_load_file: the cpu device runs no custom kernels");
    cm_body_kernel *bk = (cm_body_kernel *)1;
    EXPECT_FAIL(cm_body_kernel_create(cpu,
                                      &(cm_body_kernel_desc){.name = "f",
                                                             .body = "",
                                                             .output_names = (const char *[]){"y"},
                                                             .output_count = 1},
                                      &bk),
                CM_ERR_UNSUPPORTED, "cm_body_kernel_create: the cpu device runs no custom kernels");
    cr_assert_null(bk);
    EXPECT_FAIL(cm_device_set_pipeline_cache(cpu, "/tmp/cmetal-pipelines"), CM_ERR_UNSUPPORTED,
                "cm_device_set_pipeline_cache: the cpu device runs no custom kernels");
    EXPECT_FAIL(cm_device_save_pipeline_cache(cpu), CM_ERR_UNSUPPORTED,
                "cm_device_save_pipeline_cache: the cpu device runs no custom kernels");
    /* NULL arguments are named before the device is asked. */
    EXPECT_FAIL(cm_library_create(cpu, NULL, &lib), CM_ERR_INVALID_ARGUMENT, "desc = NULL");
    EXPECT_FAIL(cm_library_create(NULL, &(cm_library_desc){.source = ""}, &lib),
                CM_ERR_INVALID_ARGUMENT, "device = NULL");
    EXPECT_FAIL(cm_kernel_create(NULL, &(cm_kernel_desc){.name = "f"}, NULL),
                CM_ERR_INVALID_ARGUMENT, "out = NULL");
    CHECK(cm_library_release(NULL));
    CHECK(cm_kernel_release(NULL));
    CHECK(cm_body_kernel_release(NULL));
    cm_device_release(cpu);
}

/* SPDX-License-Identifier: MIT */
/* The DLPack ABI as include/cmetal/dlpack.h declares it (over Debian's 0.6
 * header or a 1.x one), checked against the spec's LP64 layout, and the
 * documentation contract of the header. */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASSERT_LAYOUT(type, field, offset)                                                         \
    cr_assert_eq(offsetof(type, field), (size_t)(offset), #type "." #field " at %zu",              \
                 offsetof(type, field))

Test(dlpack_abi, structs_match_the_spec_on_lp64) {
    cr_assert_eq(sizeof(void *), 8, "these offsets are LP64's");
    cr_assert_eq(sizeof(DLDevice), 8);
    ASSERT_LAYOUT(DLDevice, device_type, 0);
    ASSERT_LAYOUT(DLDevice, device_id, 4);
    cr_assert_eq(sizeof(((DLDevice *)0)->device_type), 4);

    cr_assert_eq(sizeof(DLDataType), 4);
    ASSERT_LAYOUT(DLDataType, code, 0);
    ASSERT_LAYOUT(DLDataType, bits, 1);
    ASSERT_LAYOUT(DLDataType, lanes, 2);

    cr_assert_eq(sizeof(DLTensor), 48);
    ASSERT_LAYOUT(DLTensor, data, 0);
    ASSERT_LAYOUT(DLTensor, device, 8);
    ASSERT_LAYOUT(DLTensor, ndim, 16);
    ASSERT_LAYOUT(DLTensor, dtype, 20);
    ASSERT_LAYOUT(DLTensor, shape, 24);
    ASSERT_LAYOUT(DLTensor, strides, 32);
    ASSERT_LAYOUT(DLTensor, byte_offset, 40);

    cr_assert_eq(sizeof(DLManagedTensor), 64);
    ASSERT_LAYOUT(DLManagedTensor, dl_tensor, 0);
    ASSERT_LAYOUT(DLManagedTensor, manager_ctx, 48);
    ASSERT_LAYOUT(DLManagedTensor, deleter, 56);

    cr_assert_eq(sizeof(DLPackVersion), 8);
    ASSERT_LAYOUT(DLPackVersion, major, 0);
    ASSERT_LAYOUT(DLPackVersion, minor, 4);

    cr_assert_eq(sizeof(DLManagedTensorVersioned), 80);
    ASSERT_LAYOUT(DLManagedTensorVersioned, version, 0);
    ASSERT_LAYOUT(DLManagedTensorVersioned, manager_ctx, 8);
    ASSERT_LAYOUT(DLManagedTensorVersioned, deleter, 16);
    ASSERT_LAYOUT(DLManagedTensorVersioned, flags, 24);
    ASSERT_LAYOUT(DLManagedTensorVersioned, dl_tensor, 32);
    cr_assert_eq(sizeof(((DLManagedTensorVersioned *)0)->flags), 8);
}

Test(dlpack_abi, installed_header_version_is_reported) {
#ifdef DLPACK_MAJOR_VERSION
    cr_log_info("dlpack.h %d.%d: a 1.x header", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
    cr_assert_geq(DLPACK_MAJOR_VERSION, 1);
#else
    cr_log_info("dlpack.h %d: cmetal/dlpack.h declares the 1.x ABI", DLPACK_VERSION);
    cr_assert_lt(DLPACK_VERSION, 100);
#endif
}

Test(dlpack_abi, constants_match_the_spec) {
    cr_assert_eq(DLPACK_FLAG_BITMASK_READ_ONLY, 1u);
    cr_assert_eq(DLPACK_FLAG_BITMASK_IS_COPIED, 2u);
    cr_assert_eq(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4u);
    cr_assert_eq(kDLBool, 6);
    cr_assert_eq(kDLBfloat, 4);
    cr_assert_eq(kDLComplex, 5);
    cr_assert_eq(kDLCPU, 1);
    cr_assert_eq(kDLCUDAHost, 3);
    cr_assert_eq(kDLMetal, 8);
    cr_assert_eq(kDLROCMHost, 11);
    cr_assert_eq(kDLCUDAManaged, 13);
    cr_assert_eq(kDLOneAPI, 14);
    cr_assert_eq(kDLWebGPU, 15);
    cr_assert_eq(kDLHexagon, 16);
    cr_assert_eq(CM_DLPACK_MAJOR_VERSION, 1);
}

/* The header promises an Ownership and a Thread-safety line in the comment
 * of every function it declares. */
Test(dlpack_abi, every_function_documents_ownership_and_threads) {
    char path[1024];
    const char *here = __FILE__;
    const char *cut = strstr(here, "tests/core/");
    cr_assert_not_null(cut, "__FILE__ = %s", here);
    snprintf(path, sizeof path, "%.*sinclude/cmetal/dlpack.h", (int)(cut - here), here);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    int functions = 0;
    for (char *at = strstr(text, "CM_API cm_status "); at != NULL;
         at = strstr(at + 1, "CM_API cm_status ")) {
        /* The comment just before the declaration. */
        char *end = at;
        while (end > text && strncmp(end, "*/", 2) != 0)
            --end;
        char *begin = end;
        while (begin > text && strncmp(begin, "/*", 2) != 0)
            --begin;
        char saved = *end;
        *end = '\0';
        char name[64] = "";
        sscanf(at + strlen("CM_API cm_status "), "%63[a-z_]", name);
        cr_assert(strstr(begin, "Ownership:") != NULL, "%s has no Ownership line", name);
        cr_assert(strstr(begin, "Thread-safety:") != NULL, "%s has no Thread-safety line", name);
        *end = saved;
        functions++;
    }
    cr_assert_eq(functions, 3, "cm_dlpack_export, cm_dlpack_import, cm_dlpack_import_versioned");
    cr_assert(strstr(text, "exactly once") != NULL);
}

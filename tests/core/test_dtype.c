/* SPDX-License-Identifier: MIT */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

Test(dtype, table_matches_numpy_names_sizes_and_dlpack_codes) {
    static const struct {
        cm_dtype dtype;
        const char *name;
        size_t size;
        uint8_t code;
    } expect[] = {
        {CM_BOOL, "bool", 1, 6},         {CM_INT8, "int8", 1, 0},
        {CM_INT16, "int16", 2, 0},       {CM_INT32, "int32", 4, 0},
        {CM_INT64, "int64", 8, 0},       {CM_UINT8, "uint8", 1, 1},
        {CM_UINT16, "uint16", 2, 1},     {CM_UINT32, "uint32", 4, 1},
        {CM_UINT64, "uint64", 8, 1},     {CM_FLOAT16, "float16", 2, 2},
        {CM_BFLOAT16, "bfloat16", 2, 4}, {CM_FLOAT32, "float32", 4, 2},
        {CM_FLOAT64, "float64", 8, 2},
    };
    cr_assert_eq(sizeof expect / sizeof expect[0], CM_DTYPE_COUNT - 1);
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; ++i) {
        cm_dtype_info info;
        cr_assert_eq(cm_dtype_get_info(expect[i].dtype, &info), CM_OK);
        cr_assert_str_eq(info.name, expect[i].name);
        cr_assert_eq(info.size, expect[i].size, "%s", info.name);
        cr_assert_eq(info.dl_code, expect[i].code, "%s", info.name);
        cr_assert_eq(info.dl_bits, 8 * expect[i].size, "%s", info.name);
        cr_assert_eq(info.dl_lanes, 1);

        cm_dtype back = CM_DTYPE_INVALID;
        cr_assert_eq(cm_dtype_from_dlpack(info.dl_code, info.dl_bits, 1, &back), CM_OK);
        cr_assert_eq(back, expect[i].dtype, "%s", info.name);
        cr_assert_eq(cm_dtype_from_name(info.name, &back), CM_OK);
        cr_assert_eq(back, expect[i].dtype);
    }
}

Test(dtype, kinds_are_reported) {
    cm_dtype_info info;
    cm_dtype_get_info(CM_UINT16, &info);
    cr_assert_eq(info.kind, CM_KIND_UNSIGNED);
    cm_dtype_get_info(CM_BFLOAT16, &info);
    cr_assert_eq(info.kind, CM_KIND_FLOAT);
    cm_dtype_get_info(CM_BOOL, &info);
    cr_assert_eq(info.kind, CM_KIND_BOOL);
}

Test(dtype, invalid_values_are_rejected_with_the_value) {
    cm_dtype_info info;
    cr_assert_eq(cm_dtype_get_info(CM_DTYPE_INVALID, &info), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "cm_dtype_get_info: dtype = 0 is not a cm_dtype"));
    cr_assert_eq(cm_dtype_get_info((cm_dtype)CM_DTYPE_COUNT, &info), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "dtype = 14"));
    cr_assert_eq(cm_dtype_get_info(CM_INT8, NULL), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "out = NULL"));
}

Test(dtype, unknown_dlpack_types_are_rejected_naming_the_triple) {
    cm_dtype out = CM_INT8;
    /* complex64, float8 (code 7), 2-lane float32, bool of 1 bit, int of 24 bits */
    const uint8_t codes[] = {5, 7, 2, 6, 0, 3};
    const uint8_t bits[] = {64, 8, 32, 1, 24, 64};
    const uint16_t lanes[] = {1, 1, 2, 1, 1, 1};
    for (int i = 0; i < 6; ++i) {
        cr_assert_eq(cm_dtype_from_dlpack(codes[i], bits[i], lanes[i], &out), CM_ERR_UNSUPPORTED);
        char want[96];
        snprintf(want, sizeof want, "(code = %u, bits = %u, lanes = %u)", codes[i], bits[i],
                 lanes[i]);
        cr_assert(strstr(cm_last_error(), want), "%s", cm_last_error());
    }
    cr_assert_eq(out, CM_INT8, "out is untouched on failure");
}

Test(dtype, from_name_rejects_unknown_names) {
    cm_dtype out;
    cr_assert_eq(cm_dtype_from_name("float128", &out), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "name = \"float128\""));
    cr_assert_eq(cm_dtype_from_name(NULL, &out), CM_ERR_INVALID_ARGUMENT);
}

/* SPDX-License-Identifier: MIT */
/* Assertions shared by the Criterion suites: a call that must succeed, and
 * one that must fail with a given status and a message naming the cause. */
#ifndef CMETAL_TESTS_CHECK_H
#define CMETAL_TESTS_CHECK_H

#include <cmetal/status.h>

#include <criterion/criterion.h>
#include <string.h>

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        cm_status s_ = (expr);                                                                     \
        cr_assert_eq(s_, CM_OK, "%s -> %s: %s", #expr, cm_status_name(s_), cm_last_error());       \
    } while (0)

#define EXPECT_FAIL(expr, status, needle)                                                          \
    do {                                                                                           \
        cm_status s_ = (expr);                                                                     \
        cr_assert_eq(s_, (status), "%s -> %s (%s), expected %s", #expr, cm_status_name(s_),        \
                     cm_last_error(), cm_status_name(status));                                     \
        cr_assert(strstr(cm_last_error(), (needle)) != NULL, "message \"%s\" lacks \"%s\"",        \
                  cm_last_error(), (needle));                                                      \
    } while (0)

#endif

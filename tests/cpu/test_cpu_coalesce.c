/* SPDX-License-Identifier: MIT */
/* Dimension coalescing of the CPU backend (an internal test): the layouts
 * that must collapse to a single run, and those that must not. */
#include "cpu/cpu_ops.h"

#include <criterion/criterion.h>
#include <string.h>

static cm__cpu_nd nd2(int32_t ndim, const int64_t *shape, const int64_t *s0, const int64_t *s1) {
    cm__cpu_nd nd;
    memset(&nd, 0, sizeof nd);
    static char mem[1 << 16];
    nd.ndim = ndim;
    nd.nops = 2;
    nd.base[0] = mem + 30000;
    nd.base[1] = mem + 30000;
    for (int32_t k = 0; k < ndim; ++k) {
        nd.shape[k] = shape[k];
        nd.strides[0][k] = s0[k];
        nd.strides[1][k] = s1[k];
    }
    return nd;
}

Test(cpu_coalesce, contiguous_views_become_one_run) {
    const int64_t shape[3] = {4, 5, 6}, s[3] = {120, 24, 4};
    cm__cpu_nd nd = nd2(3, shape, s, s);
    cm__cpu_nd_simplify(&nd, 0);
    cr_assert_eq(nd.ndim, 1);
    cr_assert_eq(nd.shape[0], 120);
    cr_assert_eq(nd.strides[0][0], 4);
}

Test(cpu_coalesce, equally_permuted_operands_are_reordered_then_merged) {
    /* Both operands are the same transposed view of a 6 x 5 matrix. */
    const int64_t shape[2] = {5, 6}, s[2] = {4, 20};
    cm__cpu_nd nd = nd2(2, shape, s, s);
    cm__cpu_nd_simplify(&nd, 0);
    cr_assert_eq(nd.ndim, 1);
    cr_assert_eq(nd.strides[1][0], 4);
}

Test(cpu_coalesce, reversed_operands_walk_forwards) {
    const int64_t shape[2] = {3, 4}, s[2] = {-16, -4};
    cm__cpu_nd nd = nd2(2, shape, s, s);
    char *end = nd.base[0];
    cm__cpu_nd_simplify(&nd, 0);
    cr_assert_eq(nd.ndim, 1);
    cr_assert_eq(nd.strides[0][0], 4);
    cr_assert_eq(nd.base[0], end - 44, "starts at the last element");
}

Test(cpu_coalesce, size_one_axes_vanish_and_row_slices_stay_rows) {
    /* out compact [4, 1, 3]; in = x[:, :, :3] of a [4, 1, 6] tensor */
    const int64_t shape[3] = {4, 1, 3}, so[3] = {12, 12, 4}, si[3] = {24, 99, 4};
    cm__cpu_nd nd = nd2(3, shape, so, si);
    cm__cpu_nd_simplify(&nd, 0);
    cr_assert_eq(nd.ndim, 2);
    cr_assert_eq(nd.shape[0], 4);
    cr_assert_eq(nd.shape[1], 3);
}

Test(cpu_coalesce, broadcast_source_merges_with_stride_zero) {
    const int64_t shape[2] = {7, 9}, so[2] = {36, 4}, si[2] = {0, 0};
    cm__cpu_nd nd = nd2(2, shape, so, si);
    cm__cpu_nd_simplify(&nd, 0);
    cr_assert_eq(nd.ndim, 1);
    cr_assert_eq(nd.shape[0], 63);
    cr_assert_eq(nd.strides[1][0], 0);
}

Test(cpu_coalesce, transposes_do_not_merge) {
    const int64_t shape[2] = {8, 16}, so[2] = {64, 4}, si[2] = {4, 32};
    cm__cpu_nd nd = nd2(2, shape, so, si);
    cm__cpu_nd_simplify(&nd, 0);
    cr_assert_eq(nd.ndim, 2);
    cr_assert_eq(nd.strides[0][1], 4, "out's fastest axis innermost");
}

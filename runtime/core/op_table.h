/* SPDX-License-Identifier: MIT */
/* The ops of cmetal/ops.h, one row each: the only place an op's properties
 * are written. A row is X(..., NAME, name, CLASS): the op is CM_UNARY_NAME
 * (CM_BINARY_NAME, CM_REDUCE_NAME) of the public enum, `name` is what
 * cm_*_op_name returns and names its CPU kernels (runtime/cpu/cpu_math.c:
 * cm__<name>_<dtype>), and the MSL kernels see it as the macro of the same
 * name and value (msl/elementwise.metal, msl/reduce.metal; checked against
 * this table by tests/core/test_tables.c). The class says the rest:
 *
 *   class            arity  takes                  result   MSL functions
 *   CM__UN_ANY       1      numbers (no bool)      x's      cm_unary_float, cm_unary_int
 *   CM__UN_FLOAT     1      floats                 x's      cm_unary_float
 *   CM__BIN_ARITH    2      numbers (no bool)      a's      cm_binary_float, cm_binary_int
 *   CM__BIN_ORDER    2      numbers and bool       a's      cm_binary_float, cm_binary_int
 *   CM__BIN_COMPARE  2      numbers and bool       bool     cm_compare, cm_binary_compares
 *   CM__RED          1      every dtype (reduce)   out's    reduce.metal
 *
 * The leading arguments of a list pass through to X. Adding an op: a row
 * here, its value in the public enum (the count is checked below), its CPU
 * kernels and its MSL cases; ARCHITECTURE.md lists the files. */
#ifndef CMETAL_CORE_OP_TABLE_H
#define CMETAL_CORE_OP_TABLE_H

#include <cmetal/ops.h>

typedef enum cm__op_class {
    CM__UN_ANY,
    CM__UN_FLOAT,
    CM__BIN_ARITH,
    CM__BIN_ORDER,
    CM__BIN_COMPARE,
    CM__RED,
} cm__op_class;

#define CM__UNARY_OPS(X, ...)                                                                      \
    X(__VA_ARGS__, NEG, neg, CM__UN_ANY)                                                           \
    X(__VA_ARGS__, ABS, abs, CM__UN_ANY)                                                           \
    X(__VA_ARGS__, SQUARE, square, CM__UN_ANY)                                                     \
    X(__VA_ARGS__, RELU, relu, CM__UN_ANY)                                                         \
    X(__VA_ARGS__, SIGN, sign, CM__UN_ANY)                                                         \
    X(__VA_ARGS__, SQRT, sqrt, CM__UN_FLOAT)                                                       \
    X(__VA_ARGS__, RSQRT, rsqrt, CM__UN_FLOAT)                                                     \
    X(__VA_ARGS__, EXP, exp, CM__UN_FLOAT)                                                         \
    X(__VA_ARGS__, LOG, log, CM__UN_FLOAT)                                                         \
    X(__VA_ARGS__, SIN, sin, CM__UN_FLOAT)                                                         \
    X(__VA_ARGS__, COS, cos, CM__UN_FLOAT)                                                         \
    X(__VA_ARGS__, TANH, tanh, CM__UN_FLOAT)                                                       \
    X(__VA_ARGS__, SIGMOID, sigmoid, CM__UN_FLOAT)                                                 \
    X(__VA_ARGS__, FLOOR, floor, CM__UN_FLOAT)                                                     \
    X(__VA_ARGS__, CEIL, ceil, CM__UN_FLOAT)

#define CM__BINARY_OPS(X, ...)                                                                     \
    X(__VA_ARGS__, ADD, add, CM__BIN_ARITH)                                                        \
    X(__VA_ARGS__, SUB, sub, CM__BIN_ARITH)                                                        \
    X(__VA_ARGS__, MUL, mul, CM__BIN_ARITH)                                                        \
    X(__VA_ARGS__, DIV, div, CM__BIN_ARITH)                                                        \
    X(__VA_ARGS__, MIN, min, CM__BIN_ORDER)                                                        \
    X(__VA_ARGS__, MAX, max, CM__BIN_ORDER)                                                        \
    X(__VA_ARGS__, EQ, eq, CM__BIN_COMPARE)                                                        \
    X(__VA_ARGS__, NE, ne, CM__BIN_COMPARE)                                                        \
    X(__VA_ARGS__, LT, lt, CM__BIN_COMPARE)                                                        \
    X(__VA_ARGS__, LE, le, CM__BIN_COMPARE)                                                        \
    X(__VA_ARGS__, GT, gt, CM__BIN_COMPARE)                                                        \
    X(__VA_ARGS__, GE, ge, CM__BIN_COMPARE)

#define CM__REDUCE_OPS(X, ...)                                                                     \
    X(__VA_ARGS__, SUM, sum, CM__RED)                                                              \
    X(__VA_ARGS__, MEAN, mean, CM__RED)                                                            \
    X(__VA_ARGS__, MAX, max, CM__RED)                                                              \
    X(__VA_ARGS__, MIN, min, CM__RED)

/* Every enum value from 1 to COUNT - 1 has a row: a value added to the
 * public enum without a row (or a row without a value) stops the build. */
#define CM__OP_ROW_ONE(P, NAME, name, CLASS) +1
_Static_assert(0 CM__UNARY_OPS(CM__OP_ROW_ONE, _) == CM_UNARY_COUNT - 1,
               "cm_unary_op and CM__UNARY_OPS differ");
_Static_assert(0 CM__BINARY_OPS(CM__OP_ROW_ONE, _) == CM_BINARY_COUNT - 1,
               "cm_binary_op and CM__BINARY_OPS differ");
_Static_assert(0 CM__REDUCE_OPS(CM__OP_ROW_ONE, _) == CM_REDUCE_COUNT - 1,
               "cm_reduce_op and CM__REDUCE_OPS differ");
#undef CM__OP_ROW_ONE

#endif

/* SPDX-License-Identifier: MIT */
/* What the body kernels (body_kernel.c) use of the kernel API (kernel.c). */
#ifndef CMETAL_CORE_KERNEL_INTERNAL_H
#define CMETAL_CORE_KERNEL_INTERNAL_H

#include "backend.h"

/* The device's kernel backend, or NULL with CM_ERR_UNSUPPORTED as `func`. */
const cm__kernel_backend *cm__kernels_of(const char *func, const cm_device *device);

/* The compile options of a desc's math mode and MSL version, checked
 * (errors as `func`). */
cm_status cm__resolve_options(const char *func, cm_math_mode mode, uint32_t version,
                              cm__compile_options *out);

/* A library compiled from `source` or, when source is NULL, from `size`
 * bytes at `data`. */
cm_status cm__library_new(const char *func, cm_device *device, const char *source,
                          const cm__compile_options *options, const void *data, size_t size,
                          cm_library **out);

/* Checks a dispatch into *d (binds: its argument storage, 2 *
 * CM_KERNEL_MAX_BUFFERS entries) without encoding anything. */
cm_status cm__launch_prepare(const char *func, cm_kernel *kernel, cm_stream *stream,
                             const cm_kernel_arg *args, uint32_t nargs, cm_grid_unit unit,
                             const uint64_t grid[3], const uint32_t group[3], cm__kernel_launch *d,
                             cm__kernel_bind *binds);

/* Runs a checked launch on the kernel's backend (an empty grid runs
 * nothing). */
cm_status cm__launch(cm_kernel *kernel, const cm__kernel_launch *d);

#endif /* CMETAL_CORE_KERNEL_INTERNAL_H */

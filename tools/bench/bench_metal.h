/* SPDX-License-Identifier: MIT */
/* cmetal-bench --device metal: Metal figures (bench_metal.c). */
#ifndef CMETAL_BENCH_METAL_H
#define CMETAL_BENCH_METAL_H

#include <stdbool.h>

/* Measures dispatch overhead per op (1 and 64 ops per sync), buffer
 * allocation, and host-to-device / device-to-host copies of `mib` MiB of
 * private storage as ratios to memcpy in the same run; prints a table or
 * JSON. Returns the process exit status. */
int bench_metal(bool json, long mib, int reps);

#endif

/* SPDX-License-Identifier: MIT */
/* The CPU device's op entry of a build configured with -DCMETAL_CPU_OPS=OFF
 * (amalgamation: CMETAL_NO_CPU_OPS): the core still checks every op, and
 * an op with elements to compute fails here, naming the public function.
 * The kernels (cpu_ops.c, cpu_nd.c, cpu_cast.c, cpu_math.c, cpu_reduce.c)
 * are not in the library. */
#include "cpu_ops.h"

cm_status cm__cpu_run_op(cm_device *device, const cm__op *op) {
    (void)device;
    return cm__fail_as(op->func, CM_ERR_UNSUPPORTED,
                       "the CPU op kernels were left out of this build (CMETAL_CPU_OPS=OFF)");
}

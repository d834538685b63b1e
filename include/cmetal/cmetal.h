/* SPDX-License-Identifier: MIT */
/* cmetal.h: the whole public API of cmetal. Each header also compiles alone,
 * as C11 and as C++. */
#ifndef CMETAL_CMETAL_H
#define CMETAL_CMETAL_H

#include <cmetal/status.h>
#include <cmetal/dtype.h>
#include <cmetal/device.h>
#include <cmetal/buffer.h>
#include <cmetal/memory.h>
#include <cmetal/tensor.h>
#include <cmetal/stream.h>
#include <cmetal/metal.h>
#include <cmetal/ops.h>
#include <cmetal/kernel.h>
#include <cmetal/dlpack.h>

#endif /* CMETAL_CMETAL_H */

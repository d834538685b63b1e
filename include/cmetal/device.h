/* SPDX-License-Identifier: MIT */
/* cmetal/device.h: devices.
 *
 * A device is where buffers live and ops run: the CPU, or a Metal GPU
 * (Apple's Metal.framework, or softmetal on Linux, loaded at run time). */
#ifndef CMETAL_DEVICE_H
#define CMETAL_DEVICE_H

#include <cmetal/status.h>

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_device cm_device;

typedef enum cm_device_type {
    /* Resolved by cm_device_open: the CMETAL_DEVICE environment variable
     * ("cpu" or "metal") if set, else Metal when a Metal device exists, else
     * the CPU. */
    CM_DEVICE_DEFAULT = 0,
    CM_DEVICE_CPU = 1,
    CM_DEVICE_METAL = 2
} cm_device_type;

/* GPU families (MTLGPUFamily, asked with supportsFamily:). */
enum {
    CM_GPU_FAMILY_APPLE7 = 1u << 0, /* MTLGPUFamilyApple7 (1007): M1, A14 */
    CM_GPU_FAMILY_APPLE8 = 1u << 1, /* MTLGPUFamilyApple8 (1008): M2, A15 */
    CM_GPU_FAMILY_APPLE9 = 1u << 2, /* MTLGPUFamilyApple9 (1009): M3, A17 */
    CM_GPU_FAMILY_MAC2 = 1u << 3,   /* MTLGPUFamilyMac2 (2002) */
    CM_GPU_FAMILY_METAL3 = 1u << 4  /* MTLGPUFamilyMetal3 (5001) */
};

typedef struct cm_device_info {
    cm_device_type type;              /* never CM_DEVICE_DEFAULT */
    char name[128];                   /* "cpu", or the MTLDevice name */
    bool unified_memory;              /* host and device share memory */
    bool software;                    /* a software implementation (softmetal, cpu) */
    uint64_t registry_id;             /* MTLDevice registryID; 0 on the CPU */
    uint64_t max_buffer_length;       /* bytes: MTLDevice maxBufferLength; on the
                                         CPU PTRDIFF_MAX, no limit of its own (the
                                         host's memory decides) */
    uint64_t recommended_working_set; /* bytes; 0 when unknown */
    uint64_t max_threads_per_threadgroup[3];
    uint32_t gpu_families; /* CM_GPU_FAMILY_* the device supports (Metal) */
    uint32_t cpu_threads;  /* CPU: threads its large ops use (the
                                         caller's included); 1 by default, 0
                                         on Metal */
} cm_device_info;

/* The most threads a CPU device may be opened with. */
#define CM_CPU_MAX_THREADS 256

/* How to open a device; zero means the default for every field. */
typedef struct cm_device_desc {
    cm_device_type type; /* as cm_device_open's type */
    uint32_t index;      /* as cm_device_open's index */
    /* CPU only: threads that run one large op (copy, cast, elementwise,
     * reductions), the calling thread included. 0 and 1: the calling
     * thread alone, and no thread is ever started (the default: a library
     * starts no threads uninvited). 2 to CM_CPU_MAX_THREADS: the device
     * starts cpu_threads - 1 workers on its first large op and joins them
     * when it is destroyed. Results are the same bits for every count:
     * work is split at boundaries fixed by the shape alone, and partial
     * float sums are combined in the same pairwise tree. Ops below about
     * 1 MiB, float max/min reducing to fewer outputs than threads, and an
     * op issued while another thread's op holds the workers run on the
     * calling thread alone. Must be 0 for Metal. */
    uint32_t cpu_threads;
} cm_device_desc;

/* Opens device `index` (0-based) of `type`; CM_DEVICE_DEFAULT resolves as
 * described above and then takes index 0 when index is 0.
 * Ownership: returns +1 in *out; release with cm_device_release. Buffers and
 * tensors retain their device, so it may be released before them.
 * Errors: CM_ERR_INVALID_ARGUMENT (type, NULL out, bad CMETAL_DEVICE),
 * CM_ERR_NO_DEVICE (no such device, no Metal framework), CM_ERR_OUT_OF_MEMORY.
 * On failure *out is NULL. Thread-safety: safe from any thread.
 * The CPU device is one process-wide object: every open returns the same
 * handle, it is never freed, and opening it allocates nothing. */
CM_API cm_status cm_device_open(cm_device_type type, uint32_t index, cm_device **out);

/* cm_device_open with options. A CPU device with cpu_threads >= 2 is a
 * device of its own (each call makes a new one, reference counted like a
 * Metal device) over the same host memory as the shared CPU device, so
 * tensors of any CPU devices may be mixed in one op (it runs with the
 * threads of the output's device); with 0 or 1 the shared CPU device is
 * returned.
 * Ownership: returns +1 in *out; release with cm_device_release. The
 * workers are joined by the last release, after every buffer made on the
 * device is gone; none is left running.
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL desc or out, desc->type,
 * desc->cpu_threads above CM_CPU_MAX_THREADS or non-zero for Metal),
 * otherwise as cm_device_open. On failure *out is NULL.
 * Thread-safety: safe from any thread; the device may be used from several
 * threads at once (one op at a time uses the workers, others run alone). */
CM_API cm_status cm_device_open_desc(const cm_device_desc *desc, cm_device **out);

/* Number of devices of `type` present (0 when none; the CPU has one).
 * Errors: CM_ERR_INVALID_ARGUMENT for type or NULL count. */
CM_API cm_status cm_device_count(cm_device_type type, uint32_t *count);

/* Reference counting. release(NULL) is a no-op; retain(NULL) fails with
 * CM_ERR_INVALID_ARGUMENT. The last release frees the device once every
 * buffer made on it is gone. Thread-safety: atomic. */
CM_API cm_status cm_device_retain(cm_device *device);
CM_API cm_status cm_device_release(cm_device *device);

/* Fills *out. Thread-safety: safe from any thread. */
CM_API cm_status cm_device_get_info(const cm_device *device, cm_device_info *out);

/* Waits until all work submitted on the device has finished. On the CPU
 * nothing is ever pending. Errors: CM_ERR_DEVICE with the driver's message
 * when earlier work failed. */
CM_API cm_status cm_device_synchronize(cm_device *device);

/* "cpu", "metal", "default"; "unknown" otherwise. Static string. */
CM_API const char *cm_device_type_name(cm_device_type type);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_DEVICE_H */

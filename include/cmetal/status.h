/* SPDX-License-Identifier: MIT */
/* cmetal/status.h: status codes, the last-error message, the version and the
 * allocator hook.
 *
 * Every function of cmetal that can fail returns a cm_status. CM_OK is 0; any
 * other value is an error, and cm_last_error() then holds a message naming
 * the function, the argument and the offending value, for example
 * "cm_tensor_slice: step = 0 must be non-zero".
 *
 * The few functions that cannot fail (cm_version, cm_version_string,
 * cm_status_name, cm_status_str, cm_last_error) return their value directly.
 */
#ifndef CMETAL_STATUS_H
#define CMETAL_STATUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The project's version: CMakeLists.txt reads these three lines. */
#define CM_VERSION_MAJOR 0
#define CM_VERSION_MINOR 1
#define CM_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, as returned by cm_version(). */
#define CM_VERSION_NUMBER (CM_VERSION_MAJOR * 10000 + CM_VERSION_MINOR * 100 + CM_VERSION_PATCH)

#if defined(_WIN32) && defined(CMETAL_SHARED_BUILD)
#define CM_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define CM_API __attribute__((visibility("default")))
#else
#define CM_API
#endif

/* X(name, value, short description). Values are never renumbered; new codes
 * are only appended. */
#define CM_STATUS_LIST(X)                                                                          \
    X(CM_OK, 0, "success")                                                                         \
    X(CM_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                              \
    X(CM_ERR_OUT_OF_MEMORY, 2, "out of memory")                                                    \
    X(CM_ERR_OUT_OF_BOUNDS, 3, "out of bounds")                                                    \
    X(CM_ERR_OVERFLOW, 4, "size or offset overflows")                                              \
    X(CM_ERR_UNSUPPORTED, 5, "unsupported on this device or build")                                \
    X(CM_ERR_READ_ONLY, 6, "write to read-only data")                                              \
    X(CM_ERR_NOT_HOST_VISIBLE, 7, "storage is not visible to the host")                            \
    X(CM_ERR_DTYPE_MISMATCH, 8, "dtype mismatch")                                                  \
    X(CM_ERR_NO_DEVICE, 9, "no such device")                                                       \
    X(CM_ERR_DEVICE, 10, "device or driver error")                                                 \
    X(CM_ERR_VERSION, 11, "incompatible version")                                                  \
    X(CM_ERR_COPY_REQUIRED, 12, "a copy is required but was not allowed")                          \
    X(CM_ERR_COMPILE, 13, "kernel compilation failed")                                             \
    X(CM_ERR_INTERNAL, 14, "internal error")

typedef enum cm_status {
#define CM__STATUS_ENUM(name, value, text) name = value,
    CM_STATUS_LIST(CM__STATUS_ENUM)
#undef CM__STATUS_ENUM
} cm_status;

/* "CM_ERR_OUT_OF_MEMORY" for CM_ERR_OUT_OF_MEMORY; "CM_STATUS_UNKNOWN" for a
 * value that is not a cm_status. The string is static. */
CM_API const char *cm_status_name(cm_status status);

/* A short static description, "out of memory"; "unknown status" otherwise. */
CM_API const char *cm_status_str(cm_status status);

/* The message of the most recent failed call on the calling thread, or ""
 * if none has failed. Successful calls leave it unchanged (as errno). A
 * compiler's diagnostics come whole (messages are cut only past 64 KiB).
 * Ownership: borrows thread-local storage, valid until the next cmetal call
 * on this thread. Thread-safety: each thread has its own message. */
CM_API const char *cm_last_error(void);

/* CM_VERSION_NUMBER of the library actually linked, and "0.1.0". */
CM_API uint32_t cm_version(void);
CM_API const char *cm_version_string(void);

/* How this copy of the library was built. Strings are static. */
typedef struct cm_build_info {
    const char *version;      /* "0.1.0" */
    const char *objc_runtime; /* "apple", "gnu", or "none" (no Metal backend) */
    int metal_backend;        /* 1 when the Metal backend is compiled in */
    int sanitizers;           /* 1 when built with ASan/UBSan (CMETAL_SANITIZE) */
    const char *compiler;     /* e.g. "gcc 12.2.0" */
} cm_build_info;

/* Fills *out. Errors: CM_ERR_INVALID_ARGUMENT for a NULL out. */
CM_API cm_status cm_get_build_info(cm_build_info *out);

/* Host memory allocator used for every allocation cmetal makes: objects,
 * shape arrays and the CPU device's buffers. alloc returns memory aligned to
 * at least `align` (a power of two) or NULL; free accepts NULL. */
typedef struct cm_allocator {
    void *(*alloc)(size_t size, size_t align, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} cm_allocator;

/* Replaces the allocator (NULL restores the default, aligned_alloc/free).
 * Call it only while no cmetal object exists: memory is always returned to
 * the allocator that made it only if this rule is kept.
 * Errors: CM_ERR_INVALID_ARGUMENT if one of alloc/free is NULL.
 * Thread-safety: not thread-safe; call it before any other thread uses
 * cmetal. */
CM_API cm_status cm_set_allocator(const cm_allocator *allocator);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_STATUS_H */

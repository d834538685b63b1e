/* SPDX-License-Identifier: MIT */
/* Status names, the thread-local last-error message, the version and the
 * process allocator. */
#include "backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CM__ERROR_CAPACITY 512

static _Thread_local char cm__last_error[CM__ERROR_CAPACITY];

const char *cm_status_name(cm_status status) {
    switch (status) {
#define CM__STATUS_NAME(name, value, text) \
    case name:                             \
        return #name;
        CM_STATUS_LIST(CM__STATUS_NAME)
#undef CM__STATUS_NAME
    }
    return "CM_STATUS_UNKNOWN";
}

const char *cm_status_str(cm_status status) {
    switch (status) {
#define CM__STATUS_TEXT(name, value, text) \
    case name:                             \
        return text;
        CM_STATUS_LIST(CM__STATUS_TEXT)
#undef CM__STATUS_TEXT
    }
    return "unknown status";
}

const char *cm_last_error(void) {
    return cm__last_error;
}

void cm__set_last_error(const char *text) {
    snprintf(cm__last_error, sizeof cm__last_error, "%s", text);
}

cm_status cm__fail_at(const char *func, cm_status status, const char *fmt, ...) {
    int n = snprintf(cm__last_error, sizeof cm__last_error, "%s: ", func);
    if (n < 0 || (size_t)n >= sizeof cm__last_error)
        return status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cm__last_error + n, sizeof cm__last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

uint32_t cm_version(void) {
    return CM_VERSION_NUMBER;
}

#define CM__STR2(x) #x
#define CM__STR(x) CM__STR2(x)
const char *cm_version_string(void) {
    return CM__STR(CM_VERSION_MAJOR) "." CM__STR(CM_VERSION_MINOR) "." CM__STR(
        CM_VERSION_PATCH);
}

#ifndef CMETAL_OBJC_RUNTIME_NAME
#define CMETAL_OBJC_RUNTIME_NAME "none"
#endif
#ifndef CMETAL_HAS_METAL
#define CMETAL_HAS_METAL 0
#endif
#ifndef CMETAL_SANITIZED
#define CMETAL_SANITIZED 0
#endif

cm_status cm_get_build_info(cm_build_info *out) {
    CM__REQUIRE_NONNULL(out);
#if defined(__clang__)
    static const char compiler[] = "clang " __clang_version__;
#elif defined(__GNUC__)
    static const char compiler[] = "gcc " __VERSION__;
#else
    static const char compiler[] = "unknown";
#endif
    *out = (cm_build_info){
        .version = cm_version_string(),
        .objc_runtime = CMETAL_OBJC_RUNTIME_NAME,
        .metal_backend = CMETAL_HAS_METAL,
        .sanitizers = CMETAL_SANITIZED,
        .compiler = compiler,
    };
    return CM_OK;
}

/* Default allocator: malloc where its own alignment is enough (the common,
 * cheaper path); aligned_alloc needs a size that is a multiple of the
 * alignment, so round up (checked). */
static void *cm__default_alloc(size_t size, size_t align, void *user) {
    (void)user;
    if (align <= _Alignof(max_align_t))
        return malloc(size);
    size_t rounded;
    if (cm__add_overflow_size(size, align - 1, &rounded))
        return NULL;
    rounded &= ~(align - 1);
    if (rounded == 0)
        rounded = align;
    return aligned_alloc(align, rounded);
}

static void cm__default_free(void *ptr, void *user) {
    (void)user;
    free(ptr);
}

static cm_allocator cm__allocator = {cm__default_alloc, cm__default_free, NULL};
bool cm__allocator_default = true;

cm_status cm_set_allocator(const cm_allocator *allocator) {
    if (allocator == NULL) {
        cm__allocator = (cm_allocator){cm__default_alloc, cm__default_free, NULL};
        cm__allocator_default = true;
        return CM_OK;
    }
    CM__REQUIRE_ARG(allocator->alloc != NULL && allocator->free != NULL,
                    "allocator->%s = NULL must not be NULL",
                    allocator->alloc == NULL ? "alloc" : "free");
    cm__allocator = *allocator;
    cm__allocator_default = false;
    return CM_OK;
}

void *cm__alloc_raw(size_t size, size_t align) {
    if (align < _Alignof(max_align_t))
        align = _Alignof(max_align_t);
    if (size == 0)
        size = 1;
    if (cm__allocator.alloc == cm__default_alloc && align == _Alignof(max_align_t))
        return malloc(size); /* the common case, without the indirect calls */
    return cm__allocator.alloc(size, align, cm__allocator.user);
}

void *cm__alloc(size_t size, size_t align) {
    void *p = cm__alloc_raw(size, align);
    if (p != NULL && size > 0)
        memset(p, 0, size);
    return p;
}

void cm__free(void *ptr) {
    if (cm__allocator.free == cm__default_free)
        free(ptr);
    else if (ptr != NULL)
        cm__allocator.free(ptr, cm__allocator.user);
}

/* SPDX-License-Identifier: MIT */
/* Status names, the thread-local last-error message, the version and the
 * process allocator. */
#include "backend.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CM__ERROR_CAPACITY 512
/* A longer message (a compiler's diagnostics) goes whole into a buffer of
 * this size, made on the thread's first one and freed when it exits. */
#define CM__ERROR_MAX ((size_t)64 * 1024)

static _Thread_local char cm__last_error[CM__ERROR_CAPACITY];
static _Thread_local char *cm__long_error; /* CM__ERROR_MAX bytes, or NULL */
static _Thread_local bool cm__error_is_long;

/* The long buffers are message storage, not objects: plain malloc, so that
 * an allocator set later never frees what another one made. */
static pthread_key_t cm__long_key;
static pthread_once_t cm__long_once = PTHREAD_ONCE_INIT;
static bool cm__long_key_ok;

static void cm__long_key_make(void) {
    cm__long_key_ok = pthread_key_create(&cm__long_key, free) == 0;
}

/* This thread's long buffer, or NULL when none can be had. */
static char *cm__long_buffer(void) {
    if (cm__long_error == NULL) {
        pthread_once(&cm__long_once, cm__long_key_make);
        if (!cm__long_key_ok)
            return NULL;
        char *buf = malloc(CM__ERROR_MAX);
        if (buf == NULL)
            return NULL;
        if (pthread_setspecific(cm__long_key, buf) != 0) {
            free(buf);
            return NULL;
        }
        cm__long_error = buf;
    }
    return cm__long_error;
}

const char *cm_status_name(cm_status status) {
    switch (status) {
#define CM__STATUS_NAME(name, value, text)                                                         \
    case name: return #name;
        CM_STATUS_LIST(CM__STATUS_NAME)
#undef CM__STATUS_NAME
    }
    return "CM_STATUS_UNKNOWN";
}

const char *cm_status_str(cm_status status) {
    switch (status) {
#define CM__STATUS_TEXT(name, value, text)                                                         \
    case name: return text;
        CM_STATUS_LIST(CM__STATUS_TEXT)
#undef CM__STATUS_TEXT
    }
    return "unknown status";
}

const char *cm_last_error(void) {
    return cm__error_is_long ? cm__long_error : cm__last_error;
}

void cm__set_last_error(const char *text) {
    if (text == cm_last_error())
        return; /* already the message (and no copy onto itself) */
    const size_t len = strlen(text);
    cm__error_is_long = false;
    char *big = len >= sizeof cm__last_error ? cm__long_buffer() : NULL;
    if (big != NULL) {
        snprintf(big, CM__ERROR_MAX, "%s", text);
        cm__error_is_long = true;
    } else {
        snprintf(cm__last_error, sizeof cm__last_error, "%s", text);
    }
}

cm_status cm__fail_at(const char *func, cm_status status, const char *fmt, ...) {
    cm__error_is_long = false;
    int n = snprintf(cm__last_error, sizeof cm__last_error, "%s: ", func);
    if (n < 0 || (size_t)n >= sizeof cm__last_error)
        return status;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int m = vsnprintf(cm__last_error + n, sizeof cm__last_error - (size_t)n, fmt, ap);
    va_end(ap);
    /* Too long for the fixed buffer: whole into the long one (cut at
     * CM__ERROR_MAX), or left cut here when there is none. */
    char *big = m >= 0 && (size_t)n + (size_t)m >= sizeof cm__last_error ? cm__long_buffer() : NULL;
    if (big != NULL) {
        memcpy(big, cm__last_error, (size_t)n);
        vsnprintf(big + n, CM__ERROR_MAX - (size_t)n, fmt, again);
        cm__error_is_long = true;
    }
    va_end(again);
    return status;
}

uint32_t cm_version(void) {
    return CM_VERSION_NUMBER;
}

#define CM__STR2(x) #x
#define CM__STR(x) CM__STR2(x)
const char *cm_version_string(void) {
    return CM__STR(CM_VERSION_MAJOR) "." CM__STR(CM_VERSION_MINOR) "." CM__STR(CM_VERSION_PATCH);
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

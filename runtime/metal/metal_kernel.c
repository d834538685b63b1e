/* SPDX-License-Identifier: MIT */
/* The kernel backend table of the Metal device (cmetal/kernel.h):
 * libraries, kernels and dispatches over metal_pipeline.c and
 * metal_encode.c, and the pipeline cache on disk. */
#include "metal_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ kernel.h backend */

typedef struct cm__metal_lib {
    cm__id library; /* +1 */
    uint64_t serial;
} cm__metal_lib;

/* Boxes what cm__metal_library(_data) gave (consumes `library`). */
static cm_status cm__kb_box(const char *func, cm_status status, cm__id library, uint64_t serial,
                            void **out) {
    if (status != CM_OK)
        return status;
    cm__metal_lib *lib = CM__NEW(cm__metal_lib);
    if (lib == NULL) {
        cm__objc_release(library);
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a library");
    }
    *lib = (cm__metal_lib){.library = library, .serial = serial};
    *out = lib;
    return CM_OK;
}

static cm_status cm__kb_library_create(const char *func, cm_device *device, const char *source,
                                       const cm__compile_options *options, void **out) {
    cm__id library = NULL;
    uint64_t serial = 0;
    const cm_status status =
        cm__metal_library(func, cm__mtl_dev(device), source, options, &library, &serial);
    return cm__kb_box(func, status, library, serial, out);
}

static cm_status cm__kb_library_load(const char *func, cm_device *device, const void *data,
                                     size_t size, void **out) {
    cm__id library = NULL;
    uint64_t serial = 0;
    const cm_status status =
        cm__metal_library_data(func, cm__mtl_dev(device), data, size, &library, &serial);
    return cm__kb_box(func, status, library, serial, out);
}

static void cm__kb_library_release(void *library) {
    cm__metal_lib *lib = library;
    cm__objc_release(lib->library);
    cm__free(lib);
}

static cm_status cm__kb_kernel_create(const char *func, cm_library *library,
                                      const cm_kernel_desc *desc, void **out, cm_kernel_info *info,
                                      cm__kernel_signature *sig) {
    cm__metal_lib *lib = library->impl;
    return cm__metal_pipeline(func, cm__mtl_dev(library->device), lib->library, lib->serial,
                              desc->name, desc->constants, desc->constant_count, desc->label,
                              (cm__id *)out, info, sig);
}

static void cm__kb_kernel_release(void *kernel) {
    cm__objc_release(kernel);
}

static cm_status cm__kb_dispatch(cm_kernel *kernel, const cm__kernel_launch *d) {
    return cm__metal_dispatch(kernel->impl, d);
}

/* A new binary archive (+1) of the device, loaded from path when path is
 * not NULL; NULL when the framework refuses it. */
static cm__id cm__archive_new(cm__id device, const char *path) {
    cm__id desc = cm__objc_new(CM__CLASS(MTLBinaryArchiveDescriptor));
    if (desc == NULL)
        return NULL;
    void *pool = cm__objc_pool_push();
    cm__id archive = NULL;
    cm__id url = NULL;
    if (path != NULL) {
        cm__id text = NULL;
        if (cm__ns_string_from_utf8(__func__, path, &text) == CM_OK) {
            url = cm__msg_fileURLWithPath((cm__id)CM__CLASS(NSURL), text); /* autoreleased */
            cm__objc_release(text);
        }
    }
    if (path == NULL || url != NULL) {
        if (url != NULL)
            cm__msg_setUrl(desc, url);
        cm__id error = NULL;
        archive = cm__msg_newBinaryArchiveWithDescriptor_error(device, desc, &error);
    }
    cm__objc_pool_pop(pool);
    cm__objc_release(desc);
    return archive;
}

static cm_status cm__kb_pipeline_cache_set(const char *func, cm_device *device, const char *path) {
    cm__metal_device *d = cm__mtl_dev(device);
    /* The directory must exist: cmetal creates no directories. */
    const char *slash = strrchr(path, '/');
    if (slash != NULL && slash != path) {
        const size_t n = (size_t)(slash - path);
        char *dir = cm__alloc(n + 1, 1);
        if (dir == NULL)
            return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for the path");
        memcpy(dir, path, n);
        dir[n] = '\0';
        struct stat st;
        const int rc = stat(dir, &st);
        const int err = errno;
        const bool is_dir = rc == 0 && S_ISDIR(st.st_mode);
        cm_status status = CM_OK;
        if (!is_dir)
            status = cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                 "path = \"%s\": its directory \"%s\" %s (create it first)", path,
                                 dir, rc != 0 ? strerror(err) : "is not a directory");
        cm__free(dir);
        if (status != CM_OK)
            return status;
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "path = \"%s\" is a directory", path);
    const size_t n = strlen(path);
    char *copy = cm__alloc(n + 1, 1);
    if (copy == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for the path");
    memcpy(copy, path, n + 1);
    pthread_mutex_lock(&d->cache_lock);
    cm_status status = CM_OK;
    if (d->archive != NULL) {
        status = cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                             "path = \"%s\": the device already has the pipeline cache \"%s\"",
                             path, d->archive_path);
    } else if (CM__CLASS(MTLBinaryArchiveDescriptor) == NULL ||
               !cm__msg_respondsToSelector(d->device,
                                           CM__SEL(newBinaryArchiveWithDescriptor_error))) {
        status = cm__fail_as(func, CM_ERR_UNSUPPORTED,
                             "this Metal framework has no MTLBinaryArchive (macOS 11 / iOS 14)");
    } else {
        /* A file that cannot be used (corrupt, of another device or OS)
         * is ignored: the archive starts empty and the next save replaces
         * it. */
        cm__id archive = access(path, F_OK) == 0 ? cm__archive_new(d->device, path) : NULL;
        if (archive == NULL)
            archive = cm__archive_new(d->device, NULL);
        if (archive == NULL) {
            status = cm__fail_as(func, CM_ERR_DEVICE,
                                 "newBinaryArchiveWithDescriptor:error: returned nil for an "
                                 "empty archive");
        } else {
            d->archive = archive;
            d->archive_path = copy;
            copy = NULL;
        }
    }
    pthread_mutex_unlock(&d->cache_lock);
    cm__free(copy);
    return status;
}

static cm_status cm__kb_pipeline_cache_save(const char *func, cm_device *device) {
    cm__metal_device *d = cm__mtl_dev(device);
    pthread_mutex_lock(&d->cache_lock);
    cm_status status = CM_OK;
    if (d->archive == NULL) {
        status = cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                             "the device has no pipeline cache (call "
                             "cm_device_set_pipeline_cache first)");
    } else {
        /* Written beside the file, then renamed over it: a reader (or an
         * archive mapping the old file) never sees a half-written one. */
        static atomic_uint counter;
        const size_t n = strlen(d->archive_path) + 48;
        char *tmp = cm__alloc(n, 1);
        if (tmp == NULL) {
            pthread_mutex_unlock(&d->cache_lock);
            return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for the path");
        }
        snprintf(tmp, n, "%s.tmp-%ld-%u", d->archive_path, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        void *pool = cm__objc_pool_push();
        cm__id text = NULL;
        status = cm__ns_string_from_utf8(func, tmp, &text);
        if (status == CM_OK) {
            cm__id url = cm__msg_fileURLWithPath((cm__id)CM__CLASS(NSURL), text);
            cm__objc_release(text);
            cm__id error = NULL;
            if (url == NULL)
                status =
                    cm__fail_as(func, CM_ERR_DEVICE, "fileURLWithPath: returned nil for %s", tmp);
            else if (!cm__msg_serializeToURL_error(d->archive, url, &error))
                status = cm__fail_ns_error(func, CM_ERR_DEVICE, error,
                                           "cannot write the pipeline cache");
            else if (rename(tmp, d->archive_path) != 0)
                status = cm__fail_as(func, CM_ERR_DEVICE, "cannot rename %s to %s: %s", tmp,
                                     d->archive_path, strerror(errno));
        }
        cm__objc_pool_pop(pool);
        if (status != CM_OK)
            (void)unlink(tmp);
        cm__free(tmp);
    }
    pthread_mutex_unlock(&d->cache_lock);
    return status;
}

const cm__kernel_backend cm__metal_kernel_backend = {
    .library_create = cm__kb_library_create,
    .library_load = cm__kb_library_load,
    .library_release = cm__kb_library_release,
    .kernel_create = cm__kb_kernel_create,
    .kernel_release = cm__kb_kernel_release,
    .dispatch = cm__kb_dispatch,
    .pipeline_cache_set = cm__kb_pipeline_cache_set,
    .pipeline_cache_save = cm__kb_pipeline_cache_save,
};

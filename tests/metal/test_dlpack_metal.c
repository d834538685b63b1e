/* SPDX-License-Identifier: MIT */
/* DLPack on the Metal device (softmetal on Linux): kDLMetal export and
 * import with the PyTorch MPS / MLX conventions (data = id<MTLBuffer>,
 * byte_offset = the view's offset), kDLCPU exports of Metal storage, and
 * host memory imported onto a Metal device. */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "softmetal_hooks.h"

static cm_device *metal(void) {
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_METAL, 0, &d), CM_OK, "%s", cm_last_error());
    return d;
}

/* A 4x6 float32 tensor with element i = i, in `storage`. */
static cm_tensor *iota(cm_device *d, cm_storage_mode storage) {
    cm_tensor *t = NULL;
    cr_assert_eq(cm_tensor_create(d,
                                  &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                    .ndim = 2,
                                                    .shape = (int64_t[]){4, 6},
                                                    .storage = storage},
                                  &t),
                 CM_OK);
    float v[24];
    for (int i = 0; i < 24; ++i)
        v[i] = (float)i;
    cm_tensor_info info;
    cm_tensor_get_info(t, &info);
    cr_assert_eq(cm_buffer_write(info.buffer, 0, v, sizeof v), CM_OK, "%s", cm_last_error());
    return t;
}

Test(dlpack_metal, export_gives_the_mtlbuffer_and_the_view_offset) {
    cm_device *d = metal();
    cm_tensor *t = iota(d, CM_STORAGE_PRIVATE), *col = NULL;
    /* t[1:, ::-2]: element 0 is t[1][5], a negative stride */
    cm_tensor *rows = NULL;
    cr_assert_eq(cm_tensor_slice(t, 0, 1, CM_SLICE_DEFAULT, 1, &rows), CM_OK);
    cr_assert_eq(cm_tensor_slice(rows, 1, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -2, &col), CM_OK);
    cm_tensor_info info;
    cm_tensor_get_info(col, &info);
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(col, &(cm_dlpack_export_desc){.max_version = {1, 3}}, &m), CM_OK,
                 "%s", cm_last_error());
    cr_assert_not_null(m.versioned);
    const DLTensor *dl = &m.versioned->dl_tensor;
    cr_assert_eq(dl->device.device_type, kDLMetal);
    cr_assert_eq(dl->device.device_id, 0);
    cm_buffer_info binfo;
    cm_buffer_get_info(info.buffer, &binfo);
    cr_assert_eq(dl->data, binfo.native, "data is the id<MTLBuffer>");
    cr_assert_eq(dl->byte_offset, (uint64_t)(6 + 5) * 4, "byte_offset locates element 0");
    cr_assert_eq(dl->strides[1], -2);
    cr_assert_eq(dl->strides[0], 6);
    cr_assert_eq(m.versioned->flags & DLPACK_FLAG_BITMASK_IS_COPIED, 0);
    cr_assert(!m.copied);

    /* Import it back: the same MTLBuffer, the same elements. */
    cm_tensor *back = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(m.versioned, NULL, &back), CM_OK, "%s",
                 cm_last_error());
    cm_tensor_info bi;
    cm_tensor_get_info(back, &bi);
    cm_buffer_info bb;
    cm_buffer_get_info(bi.buffer, &bb);
    cr_assert_eq(bb.native, binfo.native);
    cr_assert_eq(bi.byte_offset, 44);
    float got[3];
    cr_assert_eq(cm_buffer_read(bi.buffer, 44, &got[0], 4), CM_OK);
    cr_assert_eq(got[0], 11.0f);
    cm_tensor_release(back); /* runs our own deleter: the export's tensor reference */
    cm_tensor_release(col);
    cm_tensor_release(rows);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(dlpack_metal, shared_storage_exports_for_the_cpu_without_a_copy) {
    cm_device *d = metal();
    cm_tensor *t = iota(d, CM_STORAGE_SHARED);
    cm_tensor_info info;
    cm_tensor_get_info(t, &info);
    cm_buffer_info binfo;
    cm_buffer_get_info(info.buffer, &binfo);
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(
                     t, &(cm_dlpack_export_desc){.device_type = kDLCPU, .copy = CM_COPY_NEVER}, &m),
                 CM_OK, "%s", cm_last_error());
    cr_assert_not_null(m.legacy);
    cr_assert_eq(m.legacy->dl_tensor.device.device_type, kDLCPU);
    cr_assert_eq(m.legacy->dl_tensor.data, binfo.host, "contents: unified memory, zero-copy");
    ((float *)m.legacy->dl_tensor.data)[7] = -1.0f;
    float v = 0;
    cr_assert_eq(cm_tensor_get_element(t, (int64_t[]){1, 1}, CM_FLOAT32, &v), CM_OK);
    cr_assert_eq(v, -1.0f, "a write by the consumer shows in cmetal");
    m.legacy->deleter(m.legacy);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(dlpack_metal, private_storage_for_the_cpu_copies_or_refuses) {
    cm_device *d = metal();
    cm_tensor *t = iota(d, CM_STORAGE_PRIVATE), *tt = NULL;
    cr_assert_eq(cm_tensor_transpose(t, 0, 1, &tt), CM_OK);
    cm_dlpack_managed m;
    EXPECT_FAIL(cm_dlpack_export(
                    tt, &(cm_dlpack_export_desc){.device_type = kDLCPU, .copy = CM_COPY_NEVER}, &m),
                CM_ERR_COPY_REQUIRED, "private storage on the metal device has no host address");
    cr_assert_eq(
        cm_dlpack_export(tt, &(cm_dlpack_export_desc){.device_type = kDLCPU, .max_version = {1, 0}},
                         &m),
        CM_OK, "%s", cm_last_error());
    cr_assert(m.copied);
    cr_assert(m.versioned->flags & DLPACK_FLAG_BITMASK_IS_COPIED);
    const DLTensor *dl = &m.versioned->dl_tensor;
    cr_assert_eq(dl->device.device_type, kDLCPU);
    cr_assert_eq(dl->shape[0], 6);
    cr_assert_eq(dl->strides[0], 4, "the copy is compact row-major");
    const float *p = dl->data;
    for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 4; ++j)
            cr_assert_eq(p[i * 4 + j], (float)(j * 6 + i));
    m.versioned->deleter(m.versioned);
    cm_tensor_release(tt);
    cm_tensor_release(t);
    cm_device_release(d);
}

/* A producer of kDLMetal tensors: wraps one MTLBuffer and counts deleter
 * calls, as a PyTorch MPS or MLX export would look. */
static atomic_int deleted;
static void producer_deleter(DLManagedTensorVersioned *self) {
    atomic_fetch_add(&deleted, 1);
    cm_buffer_release(self->manager_ctx);
    free(self->dl_tensor.shape);
    free(self);
}

static DLManagedTensorVersioned *produce(cm_buffer *owner, void *mtl, uint64_t byte_offset,
                                         int64_t n) {
    DLManagedTensorVersioned *m = calloc(1, sizeof *m);
    int64_t *shape = malloc(2 * sizeof *shape);
    shape[0] = n;
    shape[1] = 1; /* strides after the shape */
    cm_buffer_retain(owner);
    m->version = (DLPackVersion){1, 1};
    m->manager_ctx = owner;
    m->deleter = producer_deleter;
    m->dl_tensor = (DLTensor){.data = mtl,
                              .device = {kDLMetal, 0},
                              .ndim = 1,
                              .dtype = {2, 32, 1},
                              .shape = shape,
                              .strides = shape + 1,
                              .byte_offset = byte_offset};
    return m;
}

Test(dlpack_metal, imports_keep_the_producer_alive_until_the_last_view) {
    cm_device *d = metal();
    cm_tensor *src = iota(d, CM_STORAGE_SHARED);
    cm_tensor_info info;
    cm_tensor_get_info(src, &info);
    cm_buffer_info binfo;
    cm_buffer_get_info(info.buffer, &binfo);
    atomic_store(&deleted, 0);
    DLManagedTensorVersioned *m = produce(info.buffer, binfo.native, 8 * 4, 10);
    cm_tensor *t = NULL, *v = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(m, NULL, &t), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_tensor_slice(t, 0, 2, 6, 1, &v), CM_OK);
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&deleted), 0, "a view still uses the producer's buffer");
    float x = 0;
    cr_assert_eq(cm_tensor_get_element(v, (int64_t[]){0}, CM_FLOAT32, &x), CM_OK);
    cr_assert_eq(x, 10.0f, "byte_offset 32 + 2 elements: element 10");
    cm_tensor_release(v);
    cr_assert_eq(atomic_load(&deleted), 1, "the deleter ran once, with the last view");

    /* A view past the buffer's length is refused and calls nothing. */
    m = produce(info.buffer, binfo.native, 0, 25);
    EXPECT_FAIL(cm_dlpack_import_versioned(m, NULL, &t), CM_ERR_OUT_OF_BOUNDS,
                "of a 96-byte buffer");
    cr_assert_null(t);
    cr_assert_eq(atomic_load(&deleted), 1, "ownership stayed with the caller");
    producer_deleter(m);

    /* kDLMetal onto the CPU device is refused clearly. */
    cm_device *cpu = NULL;
    cm_device_open(CM_DEVICE_CPU, 0, &cpu);
    m = produce(info.buffer, binfo.native, 0, 4);
    EXPECT_FAIL(cm_dlpack_import_versioned(m, &(cm_dlpack_import_desc){.device = cpu}, &t),
                CM_ERR_UNSUPPORTED,
                "desc->device is a cpu device but dl_tensor.device is kDLMetal");
    producer_deleter(m);
    cm_device_release(cpu);
    cm_tensor_release(src);
    cm_device_release(d);
}

/* Host memory onto a Metal device: mapped in place when page-aligned. */
static atomic_int host_deleted;
static void host_deleter(DLManagedTensor *self) {
    atomic_fetch_add(&host_deleted, 1);
    free(self);
}

static DLManagedTensor *host_tensor(void *data, int64_t *shape) {
    DLManagedTensor *m = calloc(1, sizeof *m);
    m->deleter = host_deleter;
    m->dl_tensor = (DLTensor){
        .data = data, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {2, 32, 1}, .shape = shape};
    return m;
}

Test(dlpack_metal, host_memory_maps_onto_metal_when_aligned_else_copies_as_allowed) {
    cm_device *d = metal();
    const int64_t n = CM_METAL_PAGE_SIZE / 4;
    float *page = aligned_alloc(CM_METAL_PAGE_SIZE, CM_METAL_PAGE_SIZE);
    for (int64_t i = 0; i < n; ++i)
        page[i] = (float)i;
    int64_t shape[1] = {n};
    atomic_store(&host_deleted, 0);
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import(host_tensor(page, shape),
                                  &(cm_dlpack_import_desc){.device = d, .copy = CM_COPY_NEVER}, &t),
                 CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cm_tensor_get_info(t, &info);
    cr_assert_eq(info.device_type, CM_DEVICE_METAL);
    cm_buffer_info binfo;
    cm_buffer_get_info(info.buffer, &binfo);
    cr_assert_eq(binfo.host, page, "mapped without a copy");
    cr_assert_eq(binfo.flags & CM_BUFFER_COPIED, 0);
    cm_tensor_release(t);
    /* from Metal's deallocator: at the release or a little later */
    cr_assert_eq(sm_await_count(&host_deleted, 1), 1);

    /* Unaligned: refused under CM_COPY_NEVER, ownership kept... */
    int64_t small[1] = {5};
    DLManagedTensor *m = host_tensor(page + 1, small);
    EXPECT_FAIL(
        cm_dlpack_import(m, &(cm_dlpack_import_desc){.device = d, .copy = CM_COPY_NEVER}, &t),
        CM_ERR_COPY_REQUIRED, "aligned to the host's page size");
    /* named as the import's arguments, not the wrap's */
    cr_assert(strncmp(cm_last_error(), "cm_dlpack_import: dl_tensor.data = ", 35) == 0, "%s",
              cm_last_error());
    cr_assert(strstr(cm_last_error(), "desc->copy = CM_COPY_NEVER") != NULL, "%s", cm_last_error());
    cr_assert(strstr(cm_last_error(), "cm_buffer_wrap_host") == NULL, "%s", cm_last_error());
    cr_assert_eq(atomic_load(&host_deleted), 1);
    /* ...and copied under CM_COPY_IF_NEEDED, the producer released at once. */
    cr_assert_eq(cm_dlpack_import(m, &(cm_dlpack_import_desc){.device = d}, &t), CM_OK, "%s",
                 cm_last_error());
    cr_assert_eq(atomic_load(&host_deleted), 2);
    cm_tensor_get_info(t, &info);
    cm_buffer_get_info(info.buffer, &binfo);
    cr_assert(binfo.flags & CM_BUFFER_COPIED, "the import says it copied");
    float x = 0;
    cr_assert_eq(cm_tensor_get_element(t, (int64_t[]){4}, CM_FLOAT32, &x), CM_OK);
    cr_assert_eq(x, 5.0f);
    cm_tensor_release(t);
    free(page);
    cm_device_release(d);
}

/* Allocation failures while importing page-aligned host memory onto the
 * Metal device (a no-copy wrap whose deallocator takes the release callback
 * over): every failure is CM_ERR_OUT_OF_MEMORY, calls no deleter and leaves
 * no cmetal allocation behind. */
static atomic_long alloc_live, alloc_count;
static long alloc_fail_at;

static void *failing_alloc(size_t size, size_t align, void *user) {
    (void)user;
    if (atomic_fetch_add(&alloc_count, 1) + 1 == alloc_fail_at)
        return NULL;
    void *p = aligned_alloc(align, (size + align - 1) / align * align);
    if (p != NULL)
        atomic_fetch_add(&alloc_live, 1);
    return p;
}

static void counting_free(void *p, void *user) {
    (void)user;
    if (p != NULL)
        atomic_fetch_sub(&alloc_live, 1);
    free(p);
}

Test(dlpack_metal, host_import_onto_metal_fails_cleanly_at_every_allocation) {
    cr_assert_eq(cm_set_allocator(&(cm_allocator){failing_alloc, counting_free, NULL}), CM_OK);
    cm_device *d = metal();
    float *page = aligned_alloc(CM_METAL_PAGE_SIZE, CM_METAL_PAGE_SIZE);
    int64_t shape[1] = {CM_METAL_PAGE_SIZE / 4};
    const long live = atomic_load(&alloc_live);
    int failures = 0;
    for (long n = 1; n < 100; ++n) {
        atomic_store(&host_deleted, 0);
        DLManagedTensor *m = host_tensor(page, shape);
        atomic_store(&alloc_count, 0);
        alloc_fail_at = n;
        cm_tensor *t = NULL;
        cm_status s = cm_dlpack_import(m, &(cm_dlpack_import_desc){.device = d}, &t);
        alloc_fail_at = 0;
        if (s == CM_OK) {
            cr_assert_gt(failures, 0);
            cm_tensor_release(t);
            cm_device_synchronize(d);
            cr_assert_eq(atomic_load(&host_deleted), 1);
            break;
        }
        failures++;
        cr_assert_eq(s, CM_ERR_OUT_OF_MEMORY, "allocation %ld: %s", n, cm_last_error());
        cr_assert_null(t);
        cm_device_synchronize(d);
        cr_assert_eq(atomic_load(&host_deleted), 0, "allocation %ld: the caller keeps it", n);
        cr_assert_eq(atomic_load(&alloc_live), live, "allocation %ld: nothing leaked", n);
        host_deleter(m);
    }
    cr_assert_eq(atomic_load(&alloc_live), live);
    free(page);
    cm_device_release(d);
}

/* A kDLMetal export of managed storage the host wrote: the consumer's GPU
 * reads the device copy, so the export must send didModifyRange: first
 * (strict softmetal keeps the two copies apart). The consumer here is
 * cmetal itself, importing the MTLBuffer and copying it on the GPU. */
static void managed_host_writes_reach_the_consumer(bool no_wait) {
    cm_device *d = metal();
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(
        d,
        &(cm_tensor_desc){
            .dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){8}, .storage = CM_STORAGE_MANAGED},
        &t));
    float *host = NULL;
    CHECK(cm_tensor_host_write(t, CM_FLOAT32, (void **)&host));
    for (int i = 0; i < 8; ++i)
        host[i] = (float)(i + 1);
    cm_dlpack_managed m;
    CHECK(cm_dlpack_export(t, &(cm_dlpack_export_desc){.device_type = kDLMetal, .no_wait = no_wait},
                           &m));
    cr_assert_not_null(m.legacy);
    cm_tensor *consumer = NULL, *out = NULL;
    CHECK(cm_dlpack_import(m.legacy, &(cm_dlpack_import_desc){.device = d}, &consumer));
    CHECK(cm_tensor_create(
        d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){8}}, &out));
    CHECK(cm_copy(consumer, out, NULL));
    const float *got = NULL;
    CHECK(cm_tensor_host_read(out, CM_FLOAT32, (const void **)&got));
    for (int i = 0; i < 8; ++i)
        cr_assert_eq(got[i], (float)(i + 1), "element %d: %g (no_wait %d)", i, got[i], no_wait);
    cm_tensor_release(out);
    cm_tensor_release(consumer);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(dlpack_metal, managed_host_writes_reach_a_kdlmetal_consumer) {
    managed_host_writes_reach_the_consumer(false);
    managed_host_writes_reach_the_consumer(true);
}

/* DLPack export and import over a stand-in for the Metal backend (a
 * backend table whose buffers may have no host address), through the
 * internal backend interface: the export asks the buffer, not the device
 * type, and waits for pending device work through the backend's hook. */
#include <cmetal/cmetal.h>

#include "core/backend.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static int g_prepare_calls;
static bool g_prepare_write;
static int g_metal_native; /* the stand-in "MTLBuffer" of private buffers */

static void fake_destroy(cm_device *device) { (void)device; }

static cm_status fake_get_info(const cm_device *device, cm_device_info *out) {
    (void)device;
    out->type = CM_DEVICE_METAL;
    return CM_OK;
}

static cm_status fake_synchronize(cm_device *device) {
    (void)device;
    return CM_OK;
}

static cm_status fake_buffer_alloc(cm_device *device, cm_buffer *buffer) {
    (void)device;
    buffer->native = &g_metal_native;
    if (buffer->storage == CM_STORAGE_PRIVATE)
        return CM_OK; /* no host address */
    buffer->host = calloc(1, buffer->size > 0 ? buffer->size : 1);
    return buffer->host != NULL ? CM_OK : CM_ERR_OUT_OF_MEMORY;
}

static cm_status fake_wrap(cm_device *device, cm_buffer *buffer, const cm_host_memory_desc *desc) {
    (void)device;
    buffer->host = desc->data;
    return CM_OK;
}

static void fake_buffer_free(cm_buffer *buffer) {
    if (!(buffer->flags & CM_BUFFER_FOREIGN))
        free(buffer->host);
}

static cm_status fake_prepare_host(cm_buffer *buffer, bool write) {
    (void)buffer;
    g_prepare_calls++;
    g_prepare_write = write;
    return CM_OK;
}

static const cm__backend fake_metal = {
    .type = CM_DEVICE_METAL,
    .destroy = fake_destroy,
    .get_info = fake_get_info,
    .synchronize = fake_synchronize,
    .buffer_alloc = fake_buffer_alloc,
    .buffer_wrap_host = fake_wrap,
    .buffer_free = fake_buffer_free,
    .buffer_prepare_host = fake_prepare_host,
};

static cm_device *g_metal;

static void setup(void) {
    cr_assert_eq(cm__device_new(&fake_metal, NULL, &g_metal), CM_OK);
    g_prepare_calls = 0;
}

static void teardown(void) {
    cm_device_release(g_metal);
}

static cm_tensor *metal_tensor(cm_storage_mode storage) {
    const int64_t shape[2] = {2, 3};
    cm_tensor_desc desc = {.dtype = CM_FLOAT32, .ndim = 2, .shape = shape, .storage = storage};
    cm_tensor *t = NULL;
    cr_assert_eq(cm_tensor_create(g_metal, &desc, &t), CM_OK, "%s", cm_last_error());
    return t;
}

TestSuite(dlpack_backend, .init = setup, .fini = teardown);

Test(dlpack_backend, metal_tensors_default_to_kdlmetal_which_is_not_yet_supported) {
    cm_tensor *t = metal_tensor(CM_STORAGE_SHARED);
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(t, NULL, &m), CM_ERR_UNSUPPORTED);
    cr_assert(strstr(cm_last_error(), "cm_dlpack_export: device type 8 (kDLMetal)") != NULL, "%s",
              cm_last_error());
    cr_assert_null(m.legacy);
    cr_assert_eq(g_prepare_calls, 0, "nothing waited for a failed export");
    cm_tensor_release(t);
}

Test(dlpack_backend, host_visible_storage_exports_for_the_cpu_after_pending_work) {
    cm_tensor *t = metal_tensor(CM_STORAGE_SHARED);
    cm_tensor *row = NULL;
    cr_assert_eq(cm_tensor_select(t, 0, 1, &row), CM_OK);
    cm_dlpack_export_desc desc = {.max_version = {1, 0}, .device_type = kDLCPU};
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(row, &desc, &m), CM_OK, "%s", cm_last_error());
    cr_assert_eq(g_prepare_calls, 1);
    cr_assert(g_prepare_write, "a writable export waits for reads too");
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(row, &info), CM_OK);
    cm_buffer_info bi;
    cr_assert_eq(cm_buffer_get_info(info.buffer, &bi), CM_OK);
    cr_assert_eq(m.versioned->dl_tensor.data, (char *)bi.host + 3 * sizeof(float));
    cr_assert_eq(m.versioned->dl_tensor.device.device_type, kDLCPU);
    m.versioned->deleter(m.versioned);

    desc.read_only = true;
    cr_assert_eq(cm_dlpack_export(row, &desc, &m), CM_OK);
    cr_assert(!g_prepare_write, "a read-only export waits for writes only");
    m.versioned->deleter(m.versioned);

    desc = (cm_dlpack_export_desc){.device_type = kDLCPU, .copy = CM_COPY_ALWAYS};
    cr_assert_eq(cm_dlpack_export(row, &desc, &m), CM_OK, "%s", cm_last_error());
    cr_assert(!g_prepare_write, "a copy only reads");
    cr_assert(m.copied);
    cm_tensor_release(row);
    cm_tensor_release(t);
    m.legacy->deleter(m.legacy); /* the copy lives on a CPU device of its own */
}

Test(dlpack_backend, private_storage_needs_a_copy) {
    cm_tensor *t = metal_tensor(CM_STORAGE_PRIVATE);
    cm_dlpack_managed m;
    cm_dlpack_export_desc desc = {.device_type = kDLCPU, .copy = CM_COPY_NEVER};
    cr_assert_eq(cm_dlpack_export(t, &desc, &m), CM_ERR_COPY_REQUIRED);
    cr_assert(strstr(cm_last_error(), "private storage on the metal device has no host address")
                  != NULL, "%s", cm_last_error());
    desc.copy = CM_COPY_IF_NEEDED;
    cr_assert_eq(cm_dlpack_export(t, &desc, &m), CM_ERR_NOT_HOST_VISIBLE);
    cr_assert(strstr(cm_last_error(), "arrives with the Metal backend") != NULL, "%s",
              cm_last_error());
    cr_assert_null(m.legacy);
    cr_assert_null(m.versioned);
    cm_tensor_release(t);
}

static int g_deleted;
static void count_delete(DLManagedTensor *self) {
    (void)self;
    g_deleted++;
}

Test(dlpack_backend, import_onto_a_metal_device_is_not_yet_supported) {
    float data[4] = {0};
    int64_t shape[1] = {4};
    DLManagedTensor m = {
        .dl_tensor = {.data = data, .device = {kDLCPU, 0}, .ndim = 1,
                      .dtype = {kDLFloat, 32, 1}, .shape = shape},
        .deleter = count_delete,
    };
    cm_dlpack_import_desc desc = {.device = g_metal};
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import(&m, &desc, &t), CM_ERR_UNSUPPORTED);
    cr_assert(strstr(cm_last_error(), "cm_dlpack_import: desc->device is a metal device") != NULL,
              "%s", cm_last_error());
    cr_assert_null(t);
    cr_assert_eq(g_deleted, 0);
}

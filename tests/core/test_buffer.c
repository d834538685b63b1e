/* SPDX-License-Identifier: MIT */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <string.h>

static cm_device *cpu(void) {
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &d), CM_OK, "%s", cm_last_error());
    return d;
}

Test(device, cpu_opens_and_describes_itself) {
    cm_device *d = cpu();
    cm_device_info info;
    cr_assert_eq(cm_device_get_info(d, &info), CM_OK);
    cr_assert_eq(info.type, CM_DEVICE_CPU);
    cr_assert_str_eq(info.name, "cpu");
    cr_assert(info.unified_memory);
    uint32_t n = 0;
    cr_assert_eq(cm_device_count(CM_DEVICE_CPU, &n), CM_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(cm_device_synchronize(d), CM_OK);
    cm_device_release(d);
}

Test(device, bad_arguments_are_named) {
    cm_device *d = (cm_device *)0x1;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 1, &d), CM_ERR_NO_DEVICE);
    cr_assert_null(d);
    cr_assert(strstr(cm_last_error(), "index = 1"));
    cr_assert_eq(cm_device_open((cm_device_type)7, 0, &d), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "type = 7"));
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, NULL), CM_ERR_INVALID_ARGUMENT);
    cr_assert_eq(cm_device_retain(NULL), CM_ERR_INVALID_ARGUMENT);
    cr_assert_eq(cm_device_release(NULL), CM_OK);
    cr_assert_str_eq(cm_device_type_name(CM_DEVICE_METAL), "metal");
}

Test(device, cmetal_device_env_selects_the_default) {
    cm_device *d = NULL;
    setenv("CMETAL_DEVICE", "cpu", 1);
    cr_assert_eq(cm_device_open(CM_DEVICE_DEFAULT, 0, &d), CM_OK);
    cm_device_info info;
    cm_device_get_info(d, &info);
    cr_assert_eq(info.type, CM_DEVICE_CPU);
    cm_device_release(d);
    setenv("CMETAL_DEVICE", "gpu", 1);
    cr_assert_eq(cm_device_open(CM_DEVICE_DEFAULT, 0, &d), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "CMETAL_DEVICE = \"gpu\""), "%s", cm_last_error());
    unsetenv("CMETAL_DEVICE");
}

Test(buffer, cpu_buffers_are_256_byte_aligned_and_writable) {
    cm_device *d = cpu();
    const size_t sizes[] = {0, 1, 255, 256, 4097, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
        cm_buffer *b = NULL;
        cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = sizes[i]}, &b), CM_OK);
        cm_buffer_info info;
        cr_assert_eq(cm_buffer_get_info(b, &info), CM_OK);
        cr_assert_eq(info.size, sizes[i]);
        cr_assert_eq(info.storage, CM_STORAGE_SHARED);
        cr_assert_eq(info.device_type, CM_DEVICE_CPU);
        cr_assert_not_null(info.host, "even an empty buffer has a valid address");
        cr_assert_eq((uintptr_t)info.host % 256, 0);
        cr_assert_null(info.native);
        memset(info.host, 0xab, sizes[i]);
        cm_device *owner = NULL;
        cr_assert_eq(cm_buffer_get_device(b, &owner), CM_OK);
        cr_assert_eq(owner, d);
        cm_buffer_release(b);
    }
    cm_device_release(d);
}

Test(buffer, outlives_the_device_reference_it_was_made_with) {
    cm_device *d = cpu();
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_create(d, NULL, &b), CM_OK);
    cm_device_release(d); /* the buffer keeps the device alive */
    cm_device_info info;
    cm_device *owner = NULL;
    cm_buffer_get_device(b, &owner);
    cr_assert_eq(cm_device_get_info(owner, &info), CM_OK);
    cm_buffer_release(b);
}

Test(buffer, huge_sizes_fail_cleanly) {
    cm_device *d = cpu();
    cm_buffer *b = (cm_buffer *)0x1;
    cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = SIZE_MAX}, &b),
                 CM_ERR_OUT_OF_MEMORY);
    cr_assert_null(b);
    cr_assert(strstr(cm_last_error(), "exceeds the CPU device's maximum"), "%s", cm_last_error());
    cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = (size_t)1 << 62}, &b),
                 CM_ERR_OUT_OF_MEMORY);
    cr_assert(strstr(cm_last_error(), "could not allocate 4611686018427387904 bytes"), "%s",
              cm_last_error());
    cm_device_release(d);
}

Test(buffer, storage_modes_the_cpu_lacks_are_unsupported) {
    cm_device *d = cpu();
    cm_buffer *b = NULL;
    cr_assert_eq(
        cm_buffer_create(d, &(cm_buffer_desc){.size = 16, .storage = CM_STORAGE_PRIVATE}, &b),
        CM_ERR_UNSUPPORTED);
    cr_assert(strstr(cm_last_error(), "desc->storage = private"), "%s", cm_last_error());
    cr_assert_eq(
        cm_buffer_create(d, &(cm_buffer_desc){.size = 16, .storage = CM_STORAGE_MANAGED}, &b),
        CM_ERR_UNSUPPORTED);
    cr_assert_eq(
        cm_buffer_create(d, &(cm_buffer_desc){.size = 16, .storage = (cm_storage_mode)9}, &b),
        CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "desc->storage = 9"));
    cr_assert_eq(cm_buffer_create(NULL, NULL, &b), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "device = NULL"));
    cm_device_release(d);
}

static atomic_int released;
static void count_release(void *ctx) {
    cr_assert_eq(ctx, &released);
    atomic_fetch_add(&released, 1);
}

Test(buffer, wrapped_memory_is_used_in_place_and_released_once) {
    cm_device *d = cpu();
    static char memory[100];
    atomic_store(&released, 0);
    cm_host_memory_desc desc = {.data = memory,
                                .size = sizeof memory,
                                .release = count_release,
                                .release_context = &released};
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_wrap_host(d, &desc, &b), CM_OK);
    cm_buffer_info info;
    cm_buffer_get_info(b, &info);
    cr_assert_eq(info.host, memory);
    cr_assert_eq(info.flags & CM_BUFFER_FOREIGN, CM_BUFFER_FOREIGN);
    cr_assert_eq(info.flags & CM_BUFFER_COPIED, 0);
    cm_buffer_retain(b);
    cm_buffer_release(b);
    cr_assert_eq(atomic_load(&released), 0, "still referenced");
    cm_buffer_release(b);
    cr_assert_eq(atomic_load(&released), 1);
    cm_device_release(d);
}

Test(buffer, copy_always_copies_and_releases_the_original_at_once) {
    cm_device *d = cpu();
    char memory[64];
    memset(memory, 7, sizeof memory);
    atomic_store(&released, 0);
    cm_host_memory_desc desc = {.data = memory,
                                .size = sizeof memory,
                                .copy = CM_COPY_ALWAYS,
                                .release = count_release,
                                .release_context = &released};
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_wrap_host(d, &desc, &b), CM_OK);
    cr_assert_eq(atomic_load(&released), 1);
    cm_buffer_info info;
    cm_buffer_get_info(b, &info);
    cr_assert_neq(info.host, memory);
    cr_assert_eq(info.flags & (CM_BUFFER_COPIED | CM_BUFFER_FOREIGN), CM_BUFFER_COPIED);
    cr_assert_eq(memcmp(info.host, memory, sizeof memory), 0);
    cm_buffer_release(b);
    cr_assert_eq(atomic_load(&released), 1);
    cm_device_release(d);
}

Test(buffer, failed_wraps_never_call_the_release_callback) {
    cm_device *d = cpu();
    atomic_store(&released, 0);
    cm_buffer *b = (cm_buffer *)0x1;
    cm_host_memory_desc desc = {
        .data = NULL, .size = 8, .release = count_release, .release_context = &released};
    cr_assert_eq(cm_buffer_wrap_host(d, &desc, &b), CM_ERR_INVALID_ARGUMENT);
    cr_assert_null(b);
    cr_assert(strstr(cm_last_error(), "desc->data = NULL with desc->size = 8"));
    char mem[8];
    desc = (cm_host_memory_desc){.data = mem, .size = 8, .flags = 0x80, .release = count_release};
    cr_assert_eq(cm_buffer_wrap_host(d, &desc, &b), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "desc->flags = 0x80"));
    desc = (cm_host_memory_desc){.data = mem, .size = 8, .copy = (cm_copy_policy)5};
    cr_assert_eq(cm_buffer_wrap_host(d, &desc, &b), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "desc->copy = 5"));
    cr_assert_eq(atomic_load(&released), 0);
    cm_device_release(d);
}

Test(buffer, read_and_write_copy_ranges_and_check_bounds) {
    cm_device *d = cpu();
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = 32}, &b), CM_OK);
    const char text[] = "0123456789";
    cr_assert_eq(cm_buffer_write(b, 20, text, 10), CM_OK);
    char back[11] = {0};
    cr_assert_eq(cm_buffer_read(b, 20, back, 10), CM_OK);
    cr_assert_str_eq(back, "0123456789");
    cr_assert_eq(cm_buffer_write(b, 23, text, 10), CM_ERR_OUT_OF_BOUNDS);
    cr_assert(strstr(cm_last_error(),
                     "cm_buffer_write: offset = 23 with size = 10 reaches past the 32-byte buffer"),
              "%s", cm_last_error());
    cr_assert_eq(cm_buffer_read(b, SIZE_MAX, back, 2), CM_ERR_OUT_OF_BOUNDS);
    cr_assert_eq(cm_buffer_read(b, 0, NULL, 2), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "data = NULL"));
    cr_assert_eq(cm_buffer_read(b, 32, NULL, 0), CM_OK, "empty ranges are fine at the end");
    cm_buffer_release(b);

    static char ro[8];
    cr_assert_eq(
        cm_buffer_wrap_host(
            d, &(cm_host_memory_desc){.data = ro, .size = 8, .flags = CM_BUFFER_READ_ONLY}, &b),
        CM_OK);
    cr_assert_eq(cm_buffer_write(b, 0, text, 1), CM_ERR_READ_ONLY);
    cr_assert(strstr(cm_last_error(), "read-only"));
    cr_assert_eq(cm_buffer_read(b, 0, back, 8), CM_OK);
    cm_buffer_release(b);
    cm_device_release(d);
}

Test(stream, cpu_streams_are_idle_and_fences_signaled) {
    cm_device *d = cpu();
    cm_stream *def = NULL, *s = NULL;
    cr_assert_eq(cm_device_get_stream(d, &def), CM_OK);
    cr_assert_not_null(def);
    cr_assert_eq(cm_stream_create(d, &s), CM_OK);
    cr_assert_eq(cm_stream_flush(s), CM_OK);
    cr_assert_eq(cm_stream_synchronize(def), CM_OK);
    uint64_t n = 99;
    cr_assert_eq(cm_stream_get_submissions(s, &n), CM_OK);
    cr_assert_eq(n, 0);
    cm_fence *f = NULL;
    cr_assert_eq(cm_stream_signal(s, &f), CM_OK);
    cm_fence_info info;
    cr_assert_eq(cm_fence_get_info(f, &info), CM_OK);
    cr_assert(info.signaled);
    cr_assert_eq(info.device_type, CM_DEVICE_CPU);
    cr_assert_null(info.shared_event);
    cr_assert_eq(cm_stream_wait(def, f), CM_OK);
    cr_assert_eq(cm_fence_wait(f, 0), CM_OK);
    cm_device_release(d); /* the stream and fence keep it alive */
    cm_fence_release(f);
    cm_stream_retain(def);
    cm_stream_release(def);
    cm_stream_release(s);
    cr_assert_eq(cm_stream_create(NULL, &s), CM_ERR_INVALID_ARGUMENT);
    cr_assert_null(s);
}

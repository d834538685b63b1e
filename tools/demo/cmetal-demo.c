/* cmetal-demo: the main job. Opens the default device, makes a tensor,
 * takes views of it without copying, and prints them. Uses only the public
 * API; read it as an example. */
#include <cmetal/cmetal.h>

#include <stdio.h>
#include <stdlib.h>

/* Any failing call prints its status and message and exits. */
#define CHECK(call)                                                              \
    do {                                                                         \
        cm_status s_ = (call);                                                   \
        if (s_ != CM_OK) {                                                       \
            fprintf(stderr, "cmetal-demo: %s failed: %s (%s)\n", #call,          \
                    cm_last_error(), cm_status_name(s_));                         \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static void print_tensor(const char *label, const cm_tensor *t) {
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    printf("%s: shape (", label);
    for (int32_t k = 0; k < info.ndim; ++k)
        printf(k ? ", %lld" : "%lld", (long long)info.shape[k]);
    printf("), strides (");
    for (int32_t k = 0; k < info.ndim; ++k)
        printf(k ? ", %lld" : "%lld", (long long)info.strides[k]);
    printf("), byte_offset %llu, %s\n", (unsigned long long)info.byte_offset,
           info.contiguous ? "contiguous" : "strided view");
    if (info.ndim != 2)
        return;
    for (int64_t i = 0; i < info.shape[0]; ++i) {
        printf("    ");
        for (int64_t j = 0; j < info.shape[1]; ++j) {
            float v;
            CHECK(cm_tensor_get_element(t, (int64_t[]){i, j}, CM_FLOAT32, &v));
            printf("%6.1f", (double)v);
        }
        printf("\n");
    }
}

int main(void) {
    printf("cmetal %s\n", cm_version_string());

    cm_device *device = NULL;
    CHECK(cm_device_open(CM_DEVICE_DEFAULT, 0, &device));
    cm_device_info dinfo;
    CHECK(cm_device_get_info(device, &dinfo));
    printf("device: %s (%s)\n\n", dinfo.name, cm_device_type_name(dinfo.type));

    /* A 3x4 float32 tensor holding 0..11. */
    cm_tensor *a = NULL;
    CHECK(cm_tensor_create(device, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 2,
                                                     .shape = (int64_t[]){3, 4}},
                           &a));
    float *data = NULL;
    CHECK(cm_tensor_host_write(a, CM_FLOAT32, (void **)&data));
    for (int i = 0; i < 12; ++i)
        data[i] = (float)i;
    print_tensor("a", a);

    /* Views share a's buffer: no element is copied. */
    cm_tensor *at = NULL, *rev = NULL;
    CHECK(cm_tensor_transpose(a, 0, 1, &at));
    print_tensor("a transposed", at);
    CHECK(cm_tensor_slice(a, 1, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -2, &rev));
    print_tensor("a[:, ::-2]", rev);

    /* A write through the original shows in every view. */
    data[1] = 100.0f;
    float v;
    CHECK(cm_tensor_get_element(at, (int64_t[]){1, 0}, CM_FLOAT32, &v));
    printf("\nafter a[0, 1] = 100: a transposed[1, 0] = %.1f (same memory)\n", (double)v);

    /* Bad input is refused with a message naming the argument. */
    cm_tensor *bad = NULL;
    cm_status s = cm_tensor_slice(a, 2, 0, 1, 1, &bad);
    printf("slicing axis 2 of a 2-d tensor: %s: %s\n", cm_status_name(s), cm_last_error());

    cm_tensor_release(rev);
    cm_tensor_release(at);
    cm_tensor_release(a);
    cm_device_release(device);
    return 0;
}

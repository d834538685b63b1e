/* SPDX-License-Identifier: MIT */
/* A program that knows cmetal only through its installed headers and
 * pkg-config: it must build, link and run. */
#include <cmetal/cmetal.h>

#include <stdio.h>

int main(void) {
    cm_device *d = NULL;
    cm_tensor *t = NULL;
    if (cm_device_open(CM_DEVICE_CPU, 0, &d) != CM_OK ||
        cm_tensor_create(d,
                         &(cm_tensor_desc){.dtype = CM_INT32, .ndim = 1, .shape = (int64_t[]){3}},
                         &t) != CM_OK) {
        fprintf(stderr, "consumer: %s\n", cm_last_error());
        return 1;
    }
    int32_t v = 7, back = 0;
    cm_tensor_set_element(t, (int64_t[]){2}, CM_INT32, &v);
    cm_tensor_get_element(t, (int64_t[]){2}, CM_INT32, &back);
    cm_tensor_release(t);
    cm_device_release(d);
    printf("consumer: cmetal %s, element = %d\n", cm_version_string(), back);
    return back == 7 ? 0 : 1;
}

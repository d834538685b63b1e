#include <criterion/criterion.h>
#include "softmetal/sm_test.h"
Test(msl, placeholder) { cr_assert(1); }

/* cmetal.h: the whole public API of cmetal. */
#ifndef CMETAL_CMETAL_H
#define CMETAL_CMETAL_H

#include <cmetal/status.h>

#endif /* CMETAL_CMETAL_H */

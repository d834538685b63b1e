/* SPDX-License-Identifier: MIT */
/* softmetal's <objc/objc.h>: the Objective-C base types for programs that
 * clang compiles for GNU libobjc (-fobjc-runtime=gcc) against softmetal.
 * id, Class and SEL are clang's built-in types; BOOL is a signed char as on
 * Intel Macs (the same registers and values as GNU libobjc's). */
#ifndef SOFTMETAL_OBJC_OBJC_H
#define SOFTMETAL_OBJC_OBJC_H

#ifndef __OBJC__
typedef struct objc_object *id;
typedef struct objc_class *Class;
typedef const struct objc_selector *SEL;
#endif

typedef signed char BOOL;
#define YES ((BOOL)1)
#define NO ((BOOL)0)

typedef id (*IMP)(id, SEL, ...);

/* As Apple's: a null pointer constant (nullptr in C++). */
#ifndef nil
#if defined(__cplusplus) && __cplusplus >= 201103L
#define nil nullptr
#define Nil nullptr
#else
#define nil ((void *)0)
#define Nil ((void *)0)
#endif
#endif

#endif

/* control.h - the browser's control messages on the console WebSocket (text
 * frames of labvm-console.v1): today only {"type":"resize","cols":C,"rows":R}.
 * Pure: no connection, no session (fuzzed in tests/fuzz/fuzz_control.c). */
#ifndef LABVM_CONSOLE_CONTROL_H
#define LABVM_CONSOLE_CONTROL_H

#include <stddef.h>

#define CONTROL_MAX 512 /* a longer text frame is not a control message */

/* 1 and *cols, *rows (each 1..1000) for a well-formed resize message; 0 for
 * anything else (malformed, another type, out of range, too long). */
int control_resize(const void *p, size_t n, int *cols, int *rows);

#endif

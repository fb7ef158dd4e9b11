/* pump.h - moving the waiting line (queue.h): admit heads while their seats
 * look free, through the normal start (start.h start_queued). Whoever sees
 * free seats runs it: a queued student's poll, an End, a refused start. */
#ifndef LABVM_FCGI_PUMP_H
#define LABVM_FCGI_PUMP_H

#include "lab.h"

/* Lapse stale places, then admit the heads of every capacity pool's line
 * (a few at most per call). */
void queue_pump(struct labctx *x);

#endif

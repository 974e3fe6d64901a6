/*
 * trace.h - the process's Chrome trace files (CHORUS_TIMELINE). One file per expanded name,
 * shared by everything in the process that traces into it: the collectives of every
 * communicator (a row per communicator, src/coll/api.c) and the engine (a row per tensor,
 * src/engine/timeline.c). The file is a JSON array of trace events; it is closed with its
 * bracket when the last holder releases it, or at exit, so it is valid JSON after either.
 */
#ifndef CHORUS_TRACE_H
#define CHORUS_TRACE_H

#include <stddef.h>

#include "base/base.h"

typedef struct chorus_trace chorus_trace;

/* The file pattern names for rank: "%r" replaced by the rank. A pattern without "%r" names a
 * file of rank 0 only: other ranks get *out = NULL and 0. Otherwise *out is the (shared,
 * reference-counted) trace of the expanded name, opened on first use, and 0; -1 with the
 * reason in why when the file cannot be written; every later acquire of the same name fails
 * alike without trying again, returning -2 (the failure was already reported). */
int chorus__trace_acquire(const char *pattern, int rank, chorus_trace **out, char *why, size_t len);
/* Drops a reference; the last one writes the closing bracket (a later acquire goes on after
 * the last event). NULL is ignored. */
void chorus__trace_release(chorus_trace *t);
/* The expanded file name of t. */
const char *chorus__trace_path(const chorus_trace *t);
/* A new row (Chrome trace tid) named name, unique in the file. */
int chorus__trace_row(chorus_trace *t, const char *name);
/* Writes one event: fields is the text between the braces after "pid" and "tid" (e.g.
 * "\"name\":\"x\",\"ph\":\"X\",\"ts\":1,\"dur\":2"); tid is a row of t (0: the process row). */
void chorus__trace_event(chorus_trace *t, int tid, const char *fmt, ...) CHORUS__PRINTF(3, 4);
/* Pushes what was written to the file (the events so far readable while it runs). */
void chorus__trace_flush(chorus_trace *t);
/* Microseconds from the opening of t to s (a chorus__now() time). */
long long chorus__trace_us(const chorus_trace *t, double s);
/* Writes s as a JSON string (quoted, escaped) to the buffer: at most len bytes with the NUL. */
void chorus__json_string(char *out, size_t len, const char *s);

#endif

/*
 * chorus/tensorboard.h - scalars as TensorBoard event files, for `tensorboard --logdir DIR`.
 *
 * An event file (events.out.tfevents.<seconds>.<host>.<pid>) is a sequence of records: the
 * data's length (uint64, little-endian), the masked CRC32C of those 8 bytes, the data, the
 * masked CRC32C of the data. The first record is the event {wall_time, file_version:
 * "brain.Event:2"}; each scalar is an event {wall_time, step, summary {value {tag,
 * simple_value}}} in the protobuf encoding of TensorFlow's Event and Summary messages.
 * docs/MONITORING.md lists the tags Chorus itself writes.
 *
 * Two ways in: a writer of your own (chorus_tb_open on a directory), or the runtime's
 * per-rank writers, switched on by CHORUS_TENSORBOARD=DIR: chorus_log_scalar then writes rank
 * k's scalars to DIR/rank<k>/ (one run per rank in TensorBoard), from C, from chorus.torch or
 * from chorus.log_scalar in Python. Failures return a chorus_result; chorus_last_error(NULL)
 * (chorus_last_error(comm) for chorus_log_scalar) has the detail.
 */
#ifndef CHORUS_TENSORBOARD_H
#define CHORUS_TENSORBOARD_H

#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chorus_tb chorus_tb;

/* Creates dir (with its parents) and a new event file in it, writes the file_version record
 * and sets *out. A writer is used by one thread at a time. Errors: CHORUS_ERR_INVALID_ARG (dir
 * or out NULL), CHORUS_ERR_NOMEM, CHORUS_ERR_SYSTEM (the directory or file cannot be created or
 * written; the detail names it and what the OS said). */
chorus_result chorus_tb_open(const char *dir, chorus_tb **out);

/* Appends the scalar value of tag (at most 255 bytes) at step, stamped with the wall-clock
 * time, and flushes it to the file so that TensorBoard sees it while the run goes on.
 * Errors: CHORUS_ERR_INVALID_ARG (w or tag NULL, tag empty or too long), CHORUS_ERR_SYSTEM (a
 * failed write: the writer is then broken and every later call fails alike). */
chorus_result chorus_tb_scalar(chorus_tb *w, const char *tag, int64_t step, double value);

/* The path of w's event file (valid until chorus_tb_close). */
const char *chorus_tb_path(const chorus_tb *w);

/* Closes the file and frees w; NULL is ignored. */
void chorus_tb_close(chorus_tb *w);

/* The runtime's scalars: with CHORUS_TENSORBOARD=DIR, appends value of tag at step to the
 * event file of this process's rank in comm's job (comm's world rank k: DIR/rank<k>/, opened
 * on first use and closed at exit); without it, does nothing and returns CHORUS_OK. Safe to
 * call from several threads. Errors: those of chorus_tb_open and chorus_tb_scalar, and
 * CHORUS_ERR_INVALID_ARG for a NULL comm; the detail is in chorus_last_error(comm). */
chorus_result chorus_log_scalar(chorus_comm *comm, const char *tag, int64_t step, double value);

#ifdef __cplusplus
}
#endif

#endif

/*
 * chorus/checkpoint.h - crash-safe checkpoint files: the one on-disk container Chorus uses for
 * state that must survive the job (the trainer's checkpoints, an elastic program's state).
 *
 * A checkpoint is an opaque payload saved for a step under a name in a directory, as the file
 * <dir>/<name>.<step, 20 digits>.ckpt. It is written to a temporary file, fsynced, renamed into
 * place and the directory fsynced, so a crash at any moment (kill -9, power loss) leaves the
 * previous checkpoints intact and never a torn file under a checkpoint's name. The file is a
 * 48-byte header (magic "CHORCKPT", version, header length, step, payload length, CRC32 of the
 * payload, CRC32 of the header) followed by the payload, and ends exactly after it: every
 * truncation and every single-bit flip is detected. Loading takes the newest valid file and
 * falls back to older ones. The payload's own layout is the caller's (the trainer puts its own
 * small versioned header inside, see chorus/nn.h).
 *
 * Every function returns a chorus_result; on failure chorus_last_error(NULL) gives the detail
 * (which file, what is wrong with it, what the OS said). That detail is thread-local, so
 * threads may save and load checkpoints concurrently as long as two threads (or processes) do
 * not write the same name in the same directory at once. Names: letters, digits, '-', '_' and
 * '.', at most 100 bytes.
 */
#ifndef CHORUS_CHECKPOINT_H
#define CHORUS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Saves len bytes of data as checkpoint `step` of `name` in dir (created with its parents if
 * missing), durably, replacing a checkpoint of the same step; then deletes all but the newest
 * `keep` checkpoints of `name` (only once the new one is durable) and the temporary files of
 * writers that died mid-write. data may be NULL when len is 0.
 * Errors: CHORUS_ERR_INVALID_ARG (dir NULL, bad name, keep < 1, data NULL with len > 0),
 * CHORUS_ERR_SYSTEM (the directory or file could not be created, written, synced or renamed;
 * the previous checkpoints are then untouched). */
chorus_result chorus_checkpoint_save(const char *dir, const char *name, uint64_t step,
                                     const void *data, size_t len, int keep);

/* Loads the newest valid checkpoint of `name` in dir: sets *step, and *data to a malloc'ed copy
 * of its payload (free it) of *len bytes. A newer file that is torn, truncated, damaged or
 * unreadable is skipped with a WARN log line and the next older one tried; after success
 * chorus_last_error(NULL) lists the skipped files and why ("skipped damaged checkpoint
 * <path>: <reason>; ..."), and is empty when none was skipped.
 * Errors: CHORUS_ERR_INVALID_ARG when an argument is NULL or the name is bad, and when no valid
 * checkpoint exists (the detail then says "no valid checkpoint '<name>' in <dir>" and lists
 * every damaged file with its reason); *data is then untouched. */
chorus_result chorus_checkpoint_load(const char *dir, const char *name, uint64_t *step, void **data,
                                     size_t *len);

/* As chorus_checkpoint_load, among the checkpoints of steps before `below` only: the one to
 * fall back to when the newest valid one cannot be used with other state saved beside it (a
 * parameter server's shards of that step that are damaged).
 * Errors: those of chorus_checkpoint_load ("no valid checkpoint '<name>' in <dir> of a step
 * before <below>"). */
chorus_result chorus_checkpoint_load_before(const char *dir, const char *name, uint64_t below,
                                            uint64_t *step, void **data, size_t *len);

/* Lists the steps of the checkpoint files of `name` in dir, newest first, whether valid or not
 * (validity is checked by loading): *steps is malloc'ed (free it; NULL when *count is 0). A
 * directory that does not exist holds no checkpoints (CHORUS_OK, *count 0).
 * Errors: CHORUS_ERR_INVALID_ARG (NULL argument, bad name), CHORUS_ERR_SYSTEM (the directory
 * exists but cannot be read), CHORUS_ERR_NOMEM. */
chorus_result chorus_checkpoint_list(const char *dir, const char *name, uint64_t **steps,
                                     size_t *count);

/* Writes the path of checkpoint `step` of `name` in dir into out (len bytes), for messages.
 * Errors: CHORUS_ERR_INVALID_ARG (NULL argument, bad name, or out too short: out then holds a
 * truncated path). */
chorus_result chorus_checkpoint_path(const char *dir, const char *name, uint64_t step, char *out,
                                     size_t len);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_CHECKPOINT_H */

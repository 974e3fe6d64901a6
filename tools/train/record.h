/*
 * record.h - what chorus-train records about a run and checks before its first step: the
 * resolved configuration (the options that decide the result, as "--name value" pairs), which
 * every rank must share and a --resume must not change; the directory's checkpoints, which a
 * fresh run must not mix with its own; and each rank's compressor memory, saved with every
 * checkpoint so that a resumed run compresses as one that never stopped.
 */
#ifndef CHORUS_TRAIN_RECORD_H
#define CHORUS_TRAIN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "chorus/engine.h"

/* How an option is checked: REC_RESULT, REC_NOTE and REC_RANKS are compared across the ranks;
 * REC_RESULT also against the checkpoint on --resume (refused when it differs), REC_NOTE noted
 * when it differs there (the checkpoint's value wins), REC_RANKS is compared across ranks only
 * (a layout or length that may change on resume). REC_BITS may differ between ranks and is
 * noted when it differs from the checkpoint's: it changes the order of floating-point sums
 * (BLAS threads, the number of ranks), so the last bits of the result. */
typedef enum rec_kind {
    REC_RESULT = 'R',
    REC_NOTE = 'N',
    REC_RANKS = 'A',
    REC_BITS = 'B'
} rec_kind;

/* Lines "<kind> --<name> <value>\n". */
typedef struct rec_config {
    char text[4096];
    size_t n;
} rec_config;

/* Adds one option (name with its dashes, "--lr") with a printf-formatted value. */
void rec_add(rec_config *c, rec_kind kind, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Collective over comm, before the first step: whether every rank holds the same configuration.
 * 0 when they agree; 1 when not, with why naming each differing option and the ranks (the same
 * text on every rank); -1 when the exchange failed (why says so). */
int rec_agree(const rec_config *c, chorus_comm *comm, char *why, size_t len);

/* Rank 0, before training: for a fresh run, refuses a directory holding checkpoints (1 and
 * why); for --resume, compares c with the configuration recorded in dir: 1 and why naming each
 * REC_RESULT option that differs, else 0 with note (possibly empty) for the REC_NOTE ones. A
 * directory without a record (written before records were kept) passes. -1 when dir cannot be
 * read (why says so). */
int rec_check_dir(const rec_config *c, const char *dir, int resume, char *why, size_t len,
                  char *note, size_t nlen);

/* Replaces the value of option name in c (the --seed a resumed run goes on with). */
void rec_set(rec_config *c, const char *name, const char *value);
/* The value of option name in the recorded configuration of dir into out; 0 when found. */
int rec_saved_value(const char *dir, const char *name, char *out, size_t len);

/* The newest valid checkpoint `name` of dir (a small text beside the checkpoints) into *data
 * (malloc'ed, *n bytes); 0 when found. A damaged file is never skipped silently: a warning on
 * stderr names it and why. */
int rec_load_text(const char *dir, const char *name, char **data, size_t *n);

/* Rank 0: writes c as the directory's record. 0, or -1 with why. */
int rec_save(const rec_config *c, const char *dir, char *why, size_t len);

/* This rank's compressor memory as checkpoint `step` of dir (the file names the rank and the
 * step), before rank 0 writes the step's checkpoint; this rank's files of other steps than
 * this one and the newest checkpoint before it are deleted. 0, or -1 with why. */
int rec_save_compressor(chorus_compressor *comp, const char *dir, int rank, uint64_t step,
                        char *why, size_t len);
/* Restores this rank's compressor memory saved with checkpoint `step`. 0, or -1 with why. */
int rec_load_compressor(chorus_compressor *comp, const char *dir, int rank, uint64_t step,
                        char *why, size_t len);

#endif

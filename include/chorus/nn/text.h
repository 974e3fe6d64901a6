/*
 * chorus/nn/text.h - text for the GPT (nn.h): the fortune databases of Debian's `fortunes`
 * package read as bytes (tokens 0..255), split into a training and a held-out part by whole
 * fortunes, and cut into windows of context + 1 tokens. Included by chorus/nn.h, which states
 * the library's conventions (errors, threading).
 */
#ifndef CHORUS_NN_TEXT_H
#define CHORUS_NN_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NN_FORTUNES_DEFAULT_DIR "/usr/share/games/fortunes"
/* Every NN_TEXT_HELD_OUT-th fortune goes to the held-out part. */
#define NN_TEXT_HELD_OUT 20

typedef struct nn_text {
    uint8_t *bytes; /* (n) the text; each byte is a token */
    size_t n;
} nn_text;

/* Reads every fortune database in dir (NULL: NN_FORTUNES_DEFAULT_DIR): the regular files whose
 * name does not end in ".dat" (the index files strfile writes), in name order. A database is
 * fortunes separated by lines holding only "%"; fortune k of them all (counted from 0 across
 * the files) goes to val when k % NN_TEXT_HELD_OUT == NN_TEXT_HELD_OUT - 1, else to train, each
 * followed by the line "%", so that both read as a fortune database. Errors: a directory that
 * is missing or holds no database (CHORUS_ERR_INVALID_ARG, the message says how to install
 * them: sudo apt-get install fortunes), a file that cannot be read (CHORUS_ERR_SYSTEM),
 * CHORUS_ERR_NOMEM; train and val are left empty then. */
chorus_result nn_text_load_fortunes(const char *dir, nn_text *train, nn_text *val);
/* Frees the bytes; an empty (or failed) text may be freed too. */
void nn_text_free(nn_text *t);

/* Windows of context + 1 tokens, starting every `context` tokens: (n - 1) / context of them
 * (the last token of one window is the first of the next). */
size_t nn_text_windows(const nn_text *t, int context);
/* Window w: its first context tokens into x, the same shifted by one (the next tokens to
 * predict) into y. */
void nn_text_window(const nn_text *t, int context, size_t w, int32_t *x, int32_t *y);

/* The mean loss (nats per token) on val of the unigram model of train (byte frequencies, one
 * added to every count): the loss a model that ignores the context cannot beat. */
double nn_text_unigram_loss(const nn_text *train, const nn_text *val);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_NN_TEXT_H */

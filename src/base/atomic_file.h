/*
 * atomic_file.h - internals of the crash-safe state files whose public API is
 * chorus/checkpoint.h (implemented in atomic_file.c): a checkpoint is written to a temporary file,
 * fsynced, renamed into place and the directory fsynced, so a crash (kill -9, power loss)
 * leaves either the previous set of checkpoints or the new set, never a half-written file
 * under a checkpoint's name. Each file carries a header with magic, version, sizes and CRC32s
 * of the header and of the payload; a torn or damaged file is detected and the next older one
 * is used. The newest `keep` files are kept.
 *
 * File name: <dir>/<name>.<step, 20 digits>.ckpt. Layout (little-endian):
 *   0  char[8] "CHORCKPT"    8  u32 version (1)     12 u32 header bytes (48)
 *   16 u64 step              24 u64 payload bytes   32 u32 CRC32 of the payload
 *   36 u32 flags (0)         40 u32 reserved (0)    44 u32 CRC32 of bytes 0..43
 *   48 payload; the file ends exactly after it.
 */
#ifndef CHORUS_ATOMIC_FILE_H
#define CHORUS_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define CHORUS_CKPT_MAGIC       "CHORCKPT"
#define CHORUS_CKPT_VERSION     1u
#define CHORUS_CKPT_HDR_LEN     48
#define CHORUS_CKPT_MAX_PAYLOAD ((uint64_t)1 << 40)

/* CRC-32 (IEEE 802.3, as zlib's crc32): crc = chorus__crc32(0, p, n) for a whole buffer, or
 * chained over pieces. Table-driven, no zlib needed. */
uint32_t chorus__crc32(uint32_t crc, const void *p, size_t n);

/* write() until all n bytes are written (EINTR retried); 0 or -1 with errno. */
int chorus__write_all(int fd, const void *p, size_t n);
/* mkdir -p; 0 or -1 with errno. */
int chorus__mkdir_p(const char *dir);

/* Validates a whole checkpoint image held in memory. On success sets *step and points
 * *payload and *plen into buf; otherwise writes what is wrong into why and returns
 * CHORUS_ERR_PROTOCOL. Never reads outside buf[0..len). */
chorus_result chorus__ckpt_parse(const unsigned char *buf, size_t len, uint64_t *step,
                                 const unsigned char **payload, size_t *plen, char *why,
                                 size_t why_len);

#endif

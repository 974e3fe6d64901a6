/*
 * byteorder.h - little-endian loads and stores of 16, 32 and 64-bit integers at any alignment:
 * the byte order of everything Chorus writes for another process or a later run (wire headers,
 * checkpoint and file headers), whatever the host's own order.
 */
#ifndef CHORUS_BYTEORDER_H
#define CHORUS_BYTEORDER_H

#include <stdint.h>

static inline void chorus__put_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline void chorus__put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static inline void chorus__put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint16_t chorus__get_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t chorus__get_le32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint64_t chorus__get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#endif

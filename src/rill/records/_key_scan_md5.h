/*
 * MD5 (RFC 1321) for rill.records._key_scan, and the key table's digest of a record key. Included by
 * _key_scan.c only (its functions are static). The additive constants are made from sines at the
 * module's start (md5_init_table), as the RFC defines them.
 */
#ifndef RILL_KEY_SCAN_MD5_H
#define RILL_KEY_SCAN_MD5_H

#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define DIGEST_SIZE 16

/* ---- MD5 ------------------------------------------------------------------------------------ */

static uint32_t md5_t[64];
static const uint8_t md5_shift[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};

static void
md5_init_table(void)
{
    for (int i = 0; i < 64; i++)
        md5_t[i] = (uint32_t)floor(fabs(sin((double)(i + 1))) * 4294967296.0);
}

static inline uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void
md5_block(uint32_t h[4], const uint8_t *block)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)block[4 * i] | (uint32_t)block[4 * i + 1] << 8 | (uint32_t)block[4 * i + 2] << 16
               | (uint32_t)block[4 * i + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g, round = i >> 4;
        switch (round) {
        case 0: f = (b & c) | (~b & d); g = i; break;
        case 1: f = (b & d) | (c & ~d); g = (5 * i + 1) & 15; break;
        case 2: f = b ^ c ^ d; g = (3 * i + 5) & 15; break;
        default: f = c ^ (b | ~d); g = (7 * i) & 15; break;
        }
        uint32_t next = b + rotl(a + f + md5_t[i] + m[g], md5_shift[round][i & 3]);
        a = d;
        d = c;
        c = b;
        b = next;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void
md5(const uint8_t *data, Py_ssize_t n, uint8_t out[DIGEST_SIZE])
{
    uint32_t h[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    Py_ssize_t full = n & ~(Py_ssize_t)63;
    for (Py_ssize_t p = 0; p < full; p += 64)
        md5_block(h, data + p);
    uint8_t tail[128];
    Py_ssize_t rest = n - full;
    memcpy(tail, data + full, (size_t)rest);
    tail[rest] = 0x80;
    Py_ssize_t tail_len = rest < 56 ? 64 : 128;
    memset(tail + rest + 1, 0, (size_t)(tail_len - rest - 1));
    uint64_t bits = (uint64_t)n << 3;
    for (int i = 0; i < 8; i++)
        tail[tail_len - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(h, tail);
    if (tail_len == 128)
        md5_block(h, tail + 64);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(h[i] >> (8 * j));
}

/* The table's key for a record key: the key shorter than 16 bytes padded to 16 (a 0x80 byte, then
 * zeros: one padded key per key), else its MD5 digest. A padded key equal to a long key's digest
 * would take an MD5 preimage. */
typedef struct {
    uint8_t bytes[DIGEST_SIZE];
} digest_t;

static inline void
pad_into(const uint8_t *key, Py_ssize_t n, digest_t *d)
{
    memcpy(d->bytes, key, (size_t)n);
    d->bytes[n] = 0x80;
    memset(d->bytes + n + 1, 0, (size_t)(DIGEST_SIZE - n - 1));
}

static inline void
digest_into(const uint8_t *key, Py_ssize_t n, digest_t *d)
{
    if (n < DIGEST_SIZE)
        pad_into(key, n, d);
    else
        md5(key, n, d->bytes);
}

#endif

/* base_headers.c - base/list.h and base/byteorder.h: queues keep order through pushes, pops and
 * unlinks from the head, the middle and the tail (the tail pointer stays right, so a later push
 * lands last); an element that is not queued is left alone; little-endian stores put the low
 * byte first whatever the host, and loads give back what was stored at any alignment. */
#include <string.h>

#include "base/byteorder.h"
#include "base/list.h"
#include "harness.h"

typedef struct item {
    struct item *next;
    int v;
} item;

CHORUS_SLIST(itemq, item, next)

/* The values of q in order, as digits ("" when empty); checks that tail is the last one. */
static const char *order(item *head, item *tail, char *out)
{
    size_t n = 0;
    item *last = NULL;
    for (item *x = head; x; last = x, x = x->next) out[n++] = (char)('0' + x->v);
    out[n] = 0;
    ASSERT(tail == last);
    return out;
}

int main(void)
{
    item it[6];
    for (int i = 0; i < 6; i++) it[i] = (item){.next = &it[5], .v = i}; /* stale links */
    item *head = NULL, *tail = NULL;
    char buf[16];
    ASSERT(itemq_pop(&head, &tail) == NULL);
    for (int i = 0; i < 5; i++) itemq_push(&head, &tail, &it[i]);
    ASSERT(!strcmp(order(head, tail, buf), "01234"));
    itemq_unlink(&head, &tail, &it[2]); /* middle */
    ASSERT(it[2].next == NULL);
    ASSERT(!strcmp(order(head, tail, buf), "0134"));
    itemq_unlink(&head, &tail, &it[4]); /* tail */
    ASSERT(!strcmp(order(head, tail, buf), "013"));
    itemq_push(&head, &tail, &it[4]);
    ASSERT(!strcmp(order(head, tail, buf), "0134"));
    itemq_unlink(&head, &tail, &it[0]); /* head */
    ASSERT(!strcmp(order(head, tail, buf), "134"));
    itemq_unlink(&head, &tail, &it[5]); /* not queued: nothing changes */
    ASSERT(!strcmp(order(head, tail, buf), "134"));
    ASSERT(itemq_pop(&head, &tail) == &it[1]);
    ASSERT(it[1].next == NULL);
    ASSERT(itemq_pop(&head, &tail) == &it[3]);
    ASSERT(itemq_pop(&head, &tail) == &it[4]);
    ASSERT(head == NULL && tail == NULL);
    itemq_push(&head, &tail, &it[2]); /* an emptied queue works again */
    ASSERT(!strcmp(order(head, tail, buf), "2"));
    itemq_unlink(&head, &tail, &it[2]);
    ASSERT(head == NULL && tail == NULL);

    unsigned char b[19] = {0};
    for (int off = 0; off < 3; off++) { /* unaligned too */
        unsigned char *p = b + off;
        chorus__put_le16(p, 0x0102);
        ASSERT_EQ(p[0], 0x02);
        ASSERT_EQ(p[1], 0x01);
        ASSERT_EQ(chorus__get_le16(p), 0x0102);
        chorus__put_le32(p, 0x01020304u);
        ASSERT(p[0] == 0x04 && p[1] == 0x03 && p[2] == 0x02 && p[3] == 0x01);
        ASSERT_EQ(chorus__get_le32(p), 0x01020304u);
        chorus__put_le64(p, 0x0102030405060708ull);
        for (int i = 0; i < 8; i++) ASSERT_EQ(p[i], 8 - i);
        ASSERT_EQ(chorus__get_le64(p), 0x0102030405060708ull);
        chorus__put_le64(p + 8, 0xfedcba9876543210ull); /* the high bit survives */
        ASSERT_EQ(chorus__get_le64(p + 8), 0xfedcba9876543210ull);
        ASSERT_EQ(chorus__get_le32(p + 12), 0xfedcba98u);
        ASSERT_EQ(chorus__get_le16(p + 8), 0x3210);
    }
    return 0;
}

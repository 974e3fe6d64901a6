/*
 * list.h - intrusive singly-linked queues: an element carries its own link (a `next` field),
 * the queue is a head and a tail pointer, and nothing is allocated.
 *
 * CHORUS_SLIST(name, type, next) defines, for elements of `type` linked through field `next`,
 * three static inline functions:
 *   name_push(&head, &tail, x)    appends x (its link is cleared first);
 *   name_pop(&head, &tail)        removes and returns the first element, or NULL when empty;
 *   name_unlink(&head, &tail, x)  removes x wherever it is (nothing when it is not queued) and
 *                                 clears its link; the search costs the elements before x.
 * An element is in at most one queue of a given field at a time; the caller locks.
 */
#ifndef CHORUS_LIST_H
#define CHORUS_LIST_H

#include <stddef.h>

#define CHORUS_SLIST(name, type, next)                                                             \
    static inline void name##_push(type **head, type **tail, type *x)                              \
    {                                                                                              \
        x->next = NULL;                                                                            \
        if (*tail)                                                                                 \
            (*tail)->next = x;                                                                     \
        else                                                                                       \
            *head = x;                                                                             \
        *tail = x;                                                                                 \
    }                                                                                              \
    static inline type *name##_pop(type **head, type **tail)                                       \
    {                                                                                              \
        type *x = *head;                                                                           \
        if (!x) return NULL;                                                                       \
        *head = x->next;                                                                           \
        if (!*head) *tail = NULL;                                                                  \
        x->next = NULL;                                                                            \
        return x;                                                                                  \
    }                                                                                              \
    static inline void name##_unlink(type **head, type **tail, type *x)                            \
    {                                                                                              \
        type *prev = NULL;                                                                         \
        for (type *it = *head; it; prev = it, it = it->next)                                       \
            if (it == x) {                                                                         \
                if (prev)                                                                          \
                    prev->next = x->next;                                                          \
                else                                                                               \
                    *head = x->next;                                                               \
                if (*tail == x) *tail = prev;                                                      \
                x->next = NULL;                                                                    \
                return;                                                                            \
            }                                                                                      \
    }

#endif

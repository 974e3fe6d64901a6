"""Reads TensorBoard event files byte by byte and checks every record.

    python3 tb_read.py FILE [--tags a,b,...] [--min N] [--steps N]

Each record: uint64 length, masked CRC32C of the 8 length bytes, the data, masked CRC32C of
the data (both checked with Debian's python3-crc32c, an implementation independent of
Chorus's). The data is a protobuf Event, decoded field by field here: the first record must
be {wall_time, file_version "brain.Event:2"}, every other one {wall_time, step,
summary {value {tag, simple_value}}}. --tags: every tag must appear, and no other; --steps N:
every tag at steps 1..N exactly once; --min N: at least N scalar records. Prints one line per
tag; exits non-zero with the reason on the first fault.
"""
import argparse
import collections
import struct
import sys

import crc32c


def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    v = shift = 0
    while True:
        byte = b[i]
        i += 1
        v |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return v, i


def fields(b):
    """The (field number, wire type, value) of a protobuf message, every byte accounted for."""
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        if i > len(b):
            raise ValueError("field %d runs past the message" % num)
        out.append((num, wire, v))
    return out


def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        if len(data) - i < 12:
            raise ValueError("%s: %d trailing bytes, not a record" % (path, len(data) - i))
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (lcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        if lcrc != masked(head):
            raise ValueError("%s: bad length CRC at offset %d" % (path, i))
        body = data[i + 12:i + 12 + n]
        (dcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if len(body) != n or dcrc != masked(body):
            raise ValueError("%s: bad data CRC at offset %d" % (path, i))
        yield body
        i += 16 + n


def event(body):
    ev = {"step": 0, "values": []}
    for num, wire, v in fields(body):
        if (num, wire) == (1, 1):
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif (num, wire) == (2, 0):
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v  # int64
        elif (num, wire) == (3, 2):
            ev["file_version"] = v.decode()
        elif (num, wire) == (5, 2):
            for snum, swire, sv in fields(v):
                assert (snum, swire) == (1, 2), "Summary field %d" % snum
                val = {}
                for vnum, vwire, vv in fields(sv):
                    if (vnum, vwire) == (1, 2):
                        val["tag"] = vv.decode()
                    elif (vnum, vwire) == (2, 5):
                        val["simple_value"] = struct.unpack("<f", vv)[0]
                    else:
                        raise ValueError("Summary.Value field %d" % vnum)
                ev["values"].append(val)
        else:
            raise ValueError("Event field %d (wire type %d)" % (num, wire))
    assert ev.get("wall_time", 0) > 1.5e9, ev
    return ev


def read(path):
    evs = [event(b) for b in records(path)]
    assert evs and evs[0].get("file_version") == "brain.Event:2", "first record: %r" % evs[:1]
    return evs[1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--tags", default="")
    ap.add_argument("--min", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    evs = read(a.file)
    seen = collections.defaultdict(list)
    for ev in evs:
        assert len(ev["values"]) == 1, ev
        v = ev["values"][0]
        seen[v["tag"]].append((ev["step"], v["simple_value"]))
    want = set(a.tags.split(",")) if a.tags else None
    if want is not None and set(seen) != want:
        sys.exit("%s: tags %s, expected %s" % (a.file, sorted(seen), sorted(want)))
    if len(evs) < a.min:
        sys.exit("%s: %d scalar records, expected at least %d" % (a.file, len(evs), a.min))
    for tag, pts in sorted(seen.items()):
        if a.steps and [s for s, _ in pts] != list(range(1, a.steps + 1)):
            sys.exit("%s: %s at steps %s" % (a.file, tag, [s for s, _ in pts]))
        print("%s: %s %s" % (a.file, tag, " ".join("%d:%.6g" % p for p in pts)))
    print("%s: %d records, CRCs and protobuf checked" % (a.file, len(evs) + 1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# make_seeds.py - writes the seed corpora of the fuzz targets (tests/fuzz/seeds/<target>/):
# one valid example of each message or file they parse, so that fuzzing starts past the
# magic numbers and checksums. Run from the repository root; the output is checked in.
import gzip, os, struct, zlib

def hdr(typ, length, comm=0, tag=0, coll=0, seq=0, count=0):
    return struct.pack('<IHHQiIQQQ', 0x53524843, 1, typ, comm, tag, coll, seq, count, length)

def kv(op, key=b'', val=b''):
    return struct.pack('<III', op, len(key), len(val)) + key + val

def put(target, name, data):
    d = os.path.join('tests/fuzz/seeds', target)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, name), 'wb').write(data)

hello = b'run-1-abcdef'.ljust(64, b'\0') + struct.pack('<iiii', 1, 4, 1, 2)
abort = struct.pack('<ii', 2, 4) + b'rank 2 (host a) was lost'
put('fuzz_wire', 'hdr', b'\0' + hdr(16, 30))
put('fuzz_wire', 'hello', b'\1' + hello)
put('fuzz_wire', 'abort', b'\2' + abort)
put('fuzz_wire', 'kv', b'\3' + kv(2, b'rank/0', b'127.0.0.1:4000\nhost\nid'))

reqs = [kv(2, b'rank/0', b'1.2.3.4:5'), kv(8, b'rank/0'), kv(3, b'rank/0'), kv(4, b'n', b'3'),
        kv(5, b'rank/0'), kv(8, b'missing'), kv(3, b'waits')]
put('fuzz_store', 'requests', b'\0' + b''.join(bytes([len(r)]) + r for r in reqs))
put('fuzz_store', 'auth-hello', b'\1' + hdr(8, 36) + struct.pack('<I', 1) + bytes(range(32)))

payload = bytes(range(40))
h = b'CHORCKPT' + struct.pack('<IIQQI', 1, 48, 7, len(payload), zlib.crc32(payload)) + b'\0' * 8
h += struct.pack('<I', zlib.crc32(h))
put('fuzz_ckpt', 'valid', b'\0' + h + payload)
put('fuzz_ckpt', 'fixup', b'\1' + h + payload)

# a trainer checkpoint payload for fuzz_nn_ckpt's model (linear 2 -> 2, SGD with momentum: 6
# parameters, 6 floats of state); the fixed-up copy gets the model's signature from the harness
nn = b'CHNNSTAT' + struct.pack('<IIQQQ', 1, 0, 6, 6, 3) + struct.pack('<6Q', 0, 3, 3, 1, 1, 0)
nn += struct.pack('<12f', *[0.5 * i for i in range(12)])
put('fuzz_nn_ckpt', 'raw', b'\0' + nn)
put('fuzz_nn_ckpt', 'fixup', b'\1' + nn)

img = struct.pack('>IIII', 0x803, 2, 3, 3) + bytes(18)
lab = struct.pack('>II', 0x801, 5) + bytes([1, 2, 3, 4, 5])
put('fuzz_idx', 'images', b'\1' + img)
put('fuzz_idx', 'labels', b'\0' + lab)
put('fuzz_idx', 'images-gz', b'\1' + gzip.compress(img, mtime=0))
put('fuzz_idx', 'labels-gz', b'\0' + gzip.compress(lab, mtime=0))

put('fuzz_auth', 'hello-proof', bytes([36]) + struct.pack('<I', 1) + bytes(range(32)) + bytes(32))

# the engine's negotiation messages (src/wire/engine_msg.c)
def s32(b):
    return struct.pack('<I', len(b)) + b

def meta(kind=0, dtype=6, op=0, count=10, comp=b'', rounds=()):
    m = struct.pack('<BBBIQQdd', kind, dtype, op, 0, count, 0, 1.0, 1.0) + s32(comp)
    m += bytes([len(rounds)]) + b''.join(struct.pack('<BBBQ', *r) for r in rounds)
    return m

report = struct.pack('<I', 2) + s32(b'fc.grad') + meta() + s32(b'lr.grad') + \
    meta(dtype=7, comp=b'lowrank', rounds=((0, 0, 7, 6), (0, 0, 7, 4)))
report += struct.pack('<I', 1) + s32(b'fc.grad') + struct.pack('<I', 1500)
put('fuzz_engine_msg', 'report', b'\0' + report)
answer = struct.pack('<I', 4) + b'\3' + struct.pack('<I', 2)
answer += b'\1' + s32(b'fc.grad') + meta(comp=b'fp16', rounds=((0, 0, 4, 10),)) + struct.pack('<i', 3)
answer += b'\2' + s32(b'x') + bytes([5]) + s32(b"tensor 'x': ranks disagree")
answer += b'\4' + s32(b'stall shutdown after 2.0 s')
put('fuzz_engine_msg', 'answer', b'\1' + answer)

# a compressor's saved memory for fuzz_compress_state: top-k (first byte 0) with one tensor "g"
# of 4 elements and its residual; PowerSGD (first byte 2) with a 2 x 2 view and a rank-2 Q
def comp_state(spec, tensors):
    out = b'CHCMPST1' + spec.ljust(32, b'\0') + struct.pack('<Q', len(tensors))
    for name, count, words, arrays in tensors:
        out += struct.pack('<8Q', len(name), count, *words) + name + arrays
    return out
put('fuzz_compress_state', 'topk',
    b'\0' + comp_state(b'topk:0.5', [(b'g', 4, (3, 0, 0, 0, 0, 1), struct.pack('<4f', 1, -2, 0.5, 0))]))
put('fuzz_compress_state', 'powersgd',
    b'\2' + comp_state(b'powersgd:2', [(b'w', 4, (7, 2, 2, 2, 2, 5),
                                        struct.pack('<4f', 1, 2, 3, 4) + struct.pack('<4f', 0.5, 0.5, -0.5, 0.5))]))

"""A model of the barrier protocol of `persistent_layout` (kernels/decode.cuh), written before the
kernel could run on a GPU (session 27): each role's sequence of barriers and its token-buffer and
item-slot reads and writes, mirrored from the kernel's two loops, for random item lists (0 to 4
tokens an item, both layouts: kv adds the mid-token barrier). It checks that both roles meet the
same number of barriers (a mismatch hangs the block) and that every read sees the value written
for it, published by an earlier barrier and not written again in the read's phase. It checks the
model, not the kernel: change both together. Usage: python3 bench/decode_protocol_sim.py"""
import random

def state_role(items, kv):
    ev = []  # (kind, phase-relative ops)
    cur = 0
    k = 0
    while True:
        ev.append(('bar',))
        ev.append(('rd_item', k & 1, k))
        if k >= len(items):
            break
        n = items[k]
        for t in range(n):
            ev.append(('rd_tok', cur, (k, t)))
            if kv:
                ev.append(('bar',))
                ev.append(('rd_tok', cur, (k, t)))  # reads after the mid barrier
            cur ^= 1
            if t + 1 < n:
                ev.append(('bar',))
        ev.append(('rd_item', k & 1, k))  # rout at the end
        k += 1
    return ev

def token_role(items, kv):
    ev = []
    cur = 0
    ev.append(('wr_item', 0, 0))
    if len(items) > 0 and items[0] > 0:
        ev.append(('wr_tok', 0, (0, 0)))
    k = 0
    while True:
        ev.append(('bar',))
        if k >= len(items):
            break
        ev.append(('wr_item', (k + 1) & 1, k + 1))
        n = items[k]
        n1_tokens = k + 1 < len(items) and items[k + 1] > 0
        for t in range(n):
            more = t + 1 < n
            nxt = more or n1_tokens
            tok = (k, t + 1) if more else (k + 1, 0)
            if kv:
                ev.append(('bar',))
                if nxt:
                    ev.append(('wr_tok', cur ^ 1, tok))
            elif nxt:
                ev.append(('wr_tok', cur ^ 1, tok))
            cur ^= 1
            if more:
                ev.append(('bar',))
        if n == 0 and n1_tokens:
            ev.append(('wr_tok', cur, (k + 1, 0)))
        k += 1
    return ev

def phases(ev):
    p = 0
    out = []
    for e in ev:
        if e[0] == 'bar':
            p += 1
        else:
            out.append((p,) + e)
    return p, out

def check(items, kv):
    ns, s = phases(state_role(items, kv))
    nt, t = phases(token_role(items, kv))
    assert ns == nt, (items, kv, ns, nt)
    writes = {}  # (buf kind, slot) -> list of (phase, value)
    for (ph, kind, slot, val) in t:
        key = ('tok' if 'tok' in kind else 'item', slot)
        writes.setdefault(key, []).append((ph, val))
    for (ph, kind, slot, val) in s:
        key = ('tok' if 'tok' in kind else 'item', slot)
        ws = writes.get(key, [])
        # the last write published before this phase (phase < ph)
        before = [w for w in ws if w[0] < ph]
        assert before, (items, kv, 'read of unwritten', kind, slot, val, ph)
        assert before[-1][1] == val, (items, kv, 'stale/wrong', kind, slot, val, ph, before[-1])
        same = [w for w in ws if w[0] == ph]
        assert not same, (items, kv, 'write in the read phase', kind, slot, val, ph, same)
    return ns

random.seed(1)
n = 0
for trial in range(20000):
    L = random.randint(1, 8)
    items = [random.choice([0, 1, 1, 2, 3, 4]) for _ in range(L)]
    for kv in (False, True):
        check(items, kv)
        n += 1
print('ok', n)

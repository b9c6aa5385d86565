#!/usr/bin/env python3
"""How much memory-level parallelism each decode form has, measured on the GPU at hand by taking
SMs away.

Why: the decode anchor (gdn 16/32, 256 sequences x 1 token, f32 state, 1.07 GB read and written)
is bound by bytes in flight. By Little's law a GPU with 1.45x the bandwidth at the same latency
(an H200 against an H100) needs 1.45x the bytes in flight per SM. On the H100, a kernel that keeps
its time on 132 / 1.45 = 91 SMs holds enough bytes per SM to feed an H200 from all 132; one that
slows there does not. A proxy (it assumes the two memories' latencies equal), not an H200 number.

How: a spinning kernel (PTX below, loaded through libcuda by ctypes in PyTorch's context) holds K
SMs, one block an SM with all the opt-in shared memory (no other block fits beside it: the
driver reserves 1 KB a block), on its own stream; each block writes its %smid (checked: K
distinct SMs) and spins until a flag is set after the timed calls (or 30 s pass: an error). Then,
on the SMs left, CUDA events around 10 back-to-back calls, median of 15 rounds after warm-up:
  * the copy floor (`a.mul_(s)` in place over 1.07 GB, as bench/copy_floor.py);
  * deltarule through the public wrapper `deltarule.gdn_decode` (pool of 512 rows, every second
    row named), under each form `DELTARULE_CUDA_DECODE_FORM` forces (auto: the rule's pick), with
    `DELTARULE_CUDA_SMS` set to the SMs left (the persistent form's grid is 4 blocks an SM);
  * fla's `fused_recurrent_gated_delta_rule` (dense initial and final state), when importable.
Each (form, K) runs in a child process (the backend reads its environment once). Correctness: each
child poisons `o` with NaN, runs one call on a fresh pool and prints checksums of `o` and the pool;
every form and K must agree to the last bit (the forms are bit-equal on the device tests).

Needs PyTorch and the deltarule wheel (and fla for its row); sm_90 (the PTX targets it):
    python3 bench/sm_probe.py [--holds 0 41] [--forms auto block4 block5 block6 persistent]
                              [--rounds 2] [--no-fla]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import torch

PTX = r"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry occupy(.param .u64 flag, .param .u64 smids, .param .u64 timeout_ns)
{
  .reg .pred p;
  .reg .b32 r<4>;
  .reg .b64 rd<8>;
  mov.u32 r0, %tid.x;
  setp.ne.u32 p, r0, 0;
  @p bra DONE;
  ld.param.u64 rd0, [flag];
  ld.param.u64 rd1, [smids];
  ld.param.u64 rd2, [timeout_ns];
  cvta.to.global.u64 rd0, rd0;
  cvta.to.global.u64 rd1, rd1;
  mov.u32 r1, %smid;
  mov.u32 r2, %ctaid.x;
  mul.wide.u32 rd3, r2, 4;
  add.s64 rd3, rd1, rd3;
  st.global.u32 [rd3], r1;
  mov.u64 rd4, %globaltimer;
LOOP:
  ld.volatile.global.u32 r3, [rd0];
  setp.ne.u32 p, r3, 0;
  @p bra DONE;
  nanosleep.u32 2000;
  mov.u64 rd5, %globaltimer;
  sub.s64 rd6, rd5, rd4;
  setp.lt.u64 p, rd6, rd2;
  @p bra LOOP;
DONE:
  ret;
}
"""
# the values of DELTARULE_CUDA_DECODE_FORM; auto leaves it unset (the rule `DecodeForm::pick`)
FORMS = ("auto", "block4", "block5", "block6", "persistent")
N, HQ, HV, K = 256, 16, 32, 128
REPS, ROUNDS = 10, 15
TIMEOUT_NS = 30_000_000_000


class Occupier:
    """Holds `k` SMs with one spinning block each until `release`."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()  # PyTorch's primary context is current on this thread now
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check("cuModuleLoadData", self.cu.cuModuleLoadData(ctypes.byref(self.mod),
                                                                PTX.encode() + b"\0"))
        self.check("cuModuleGetFunction",
                   self.cu.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, b"occupy"))
        dev, optin, sms = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        self.check("cuCtxGetDevice", self.cu.cuCtxGetDevice(ctypes.byref(dev)))
        # 97: MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 16: MULTIPROCESSOR_COUNT
        self.check("attr", self.cu.cuDeviceGetAttribute(ctypes.byref(optin), 97, dev))
        self.check("attr", self.cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev))
        # 8: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.check("cuFuncSetAttribute", self.cu.cuFuncSetAttribute(self.fn, 8, optin))
        self.smem, self.sms = optin.value, sms.value
        self.flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.smids = torch.full((self.sms,), -1, dtype=torch.int32, device="cuda")
        self.stream = torch.cuda.Stream()
        self.k = 0

    @staticmethod
    def check(what, rc):
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def hold(self, k):
        self.k = k
        if k == 0:
            return
        self.flag.zero_()
        self.smids.fill_(-1)
        torch.cuda.synchronize()
        args = [ctypes.c_uint64(self.flag.data_ptr()), ctypes.c_uint64(self.smids.data_ptr()),
                ctypes.c_uint64(TIMEOUT_NS)]
        params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p)
                                         for a in args])
        self.check("cuLaunchKernel", self.cu.cuLaunchKernel(
            self.fn, k, 1, 1, 32, 1, 1, self.smem, ctypes.c_void_p(self.stream.cuda_stream),
            params, None))
        time.sleep(0.05)  # the blocks are resident long before this

    def release(self):
        if self.k == 0:
            return
        t0 = time.perf_counter()
        self.flag.fill_(1)
        self.stream.synchronize()
        torch.cuda.synchronize()
        ids = self.smids[: self.k].tolist()
        if len(set(ids)) != self.k or -1 in ids:
            raise RuntimeError(f"the spinning blocks did not hold {self.k} distinct SMs: {ids}")
        if time.perf_counter() - t0 > 10:
            raise RuntimeError("the spinning blocks ran into their timeout: the hold ended early")


def timed(fn, hold, occ):
    """Median GPU ms per call of `fn` over ROUNDS rounds of REPS calls, with `hold` SMs held."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    occ.hold(hold)
    ms = []
    try:
        for _ in range(ROUNDS):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(REPS):
                fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b) / REPS)
    finally:
        occ.release()
    return statistics.median(ms)


def inputs(seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    T = N  # one token a sequence
    q = torch.randn(T, HQ, K, device="cuda", generator=g).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(T, HQ, K, device="cuda", generator=g),
                                      dim=-1).bfloat16()
    v = torch.randn(T, HV, K, device="cuda", generator=g).bfloat16()
    gate = torch.nn.functional.logsigmoid(3 + torch.randn(T, HV, device="cuda", generator=g))
    beta = torch.sigmoid(torch.randn(T, HV, device="cuda", generator=g))
    cu = torch.arange(0, T + 1, 1, dtype=torch.int32, device="cuda")
    return q, k, v, gate, beta, cu


def child(kind, hold):
    occ = Occupier()
    # the timed work on a stream of its own (PyTorch's pool streams do not wait on each other,
    # where the legacy default stream would wait on the spinning one)
    with torch.cuda.stream(torch.cuda.Stream()):
        measure(occ, kind, hold)


def measure(occ, kind, hold):
    out = {"kind": kind, "hold": hold, "sms_left": occ.sms - hold,
           "device": torch.cuda.get_device_name()}
    big = torch.randn(N * HV * K * K, device="cuda")
    out["copy_ms"] = timed(lambda: big.mul_(1.0000001), hold, occ)
    del big
    q, k, v, gate, beta, cu = inputs()
    if kind == "fla":
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        h0 = 0.1 * torch.randn(N, HV, K, K, device="cuda")
        cu64 = cu.long()
        fn = lambda: fused_recurrent_gated_delta_rule(  # noqa: E731
            q[None], k[None], v[None], g=gate[None], beta=beta[None].bfloat16(), initial_state=h0,
            output_final_state=True, cu_seqlens=cu64)
        out["ms"] = timed(fn, hold, occ)
    else:
        import deltarule
        o = torch.empty(N, HV, K, dtype=torch.bfloat16, device="cuda")
        # POOL=stride (default 2: rows 0, 2, 4, ..) or POOL=random (N of 2N rows, shuffled)
        mode = os.environ.get("POOL", "2")
        if mode == "random":
            rows = 2 * N
            idx = torch.randperm(rows, generator=torch.Generator().manual_seed(2))[:N]
        else:
            rows = int(mode) * N
            idx = torch.arange(0, rows, int(mode))
        idx = idx.to(device="cuda", dtype=torch.int32)
        out["pool"] = mode

        def call(pool):
            return deltarule.gdn_decode(q, k, v, gate, beta, cu, state_pool=pool,
                                        state_indices=idx, out=o, state_layout="kv",
                                        max_seqlen=1)
        # correctness: a fresh pool, o poisoned, one call, checksums to compare across children
        gen = torch.Generator(device="cuda").manual_seed(1)
        pool = 0.1 * torch.randn(rows, HV, K, K, device="cuda", generator=gen)
        o.fill_(float("nan"))
        call(pool)
        torch.cuda.synchronize()
        if not torch.isfinite(o.float()).all():
            raise RuntimeError("non-finite o")
        out["o_sum"] = float(o.double().sum())
        out["pool_sum"] = float(pool.double().sum())
        out["ms"] = timed(lambda: call(pool), hold, occ)
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--holds", nargs="*", type=int, default=[0, 41])
    ap.add_argument("--forms", nargs="*", default=list(FORMS), choices=FORMS)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--stop", type=float, default=400, help="no new child after this many s")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "HOLD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]))
    kinds = list(args.forms) + ([] if args.no_fla else ["fla"])
    if not args.no_fla:
        import importlib.util

        if importlib.util.find_spec("fla") is None:
            print("fla is not importable: its row is left out")
            kinds.remove("fla")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for hold in args.holds:
            for kind in kinds:
                if time.perf_counter() - t0 > args.stop:
                    break
                env = dict(os.environ)
                env.pop("DELTARULE_CUDA_DECODE_FORM", None)
                if kind in FORMS:
                    if kind != "auto":
                        env["DELTARULE_CUDA_DECODE_FORM"] = kind
                    env["DELTARULE_CUDA_SMS"] = str(sms - hold)
                p = subprocess.run([sys.executable, __file__, "--child", kind, str(hold)], env=env,
                                   capture_output=True, text=True, timeout=240)
                line = [x for x in p.stdout.splitlines() if x.startswith("{")]
                if p.returncode != 0 or not line:
                    print(f"round {r} {kind} hold {hold}: rc {p.returncode} "
                          f"{p.stderr.strip()[-400:]}", flush=True)
                    continue
                rows.append(json.loads(line[-1]))
                print(line[-1], flush=True)
    sums = {(x["o_sum"], x["pool_sum"]) for x in rows if "o_sum" in x}
    if sums:
        print(f"checksums: {len(sums)} distinct over {sum('o_sum' in x for x in rows)} runs of "
              f"deltarule ({'bit-equal' if len(sums) == 1 else 'DIFFER: ' + str(sorted(sums))})")
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    print(f"SMs held | kind | ms (median of rounds) | copy ms same runs | x copy | x own time at "
          f"hold {args.holds[0]}")
    base = {}
    for hold in args.holds:
        for kind in kinds:
            sel = [x for x in rows if x["kind"] == kind and x["hold"] == hold]
            ms, cp = med([x["ms"] for x in sel]), med([x["copy_ms"] for x in sel])
            base.setdefault(kind, ms)
            print(f"{hold} ({sms - hold} left) | {kind} | {ms:.4f} | {cp:.4f} | {ms / cp:.3f} | "
                  f"{ms / base[kind]:.3f}")


if __name__ == "__main__":
    main()

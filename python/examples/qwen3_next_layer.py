"""One Qwen3-Next-shaped Gated DeltaNet layer (16 q/k heads, 32 value heads, head dim 128) through
a mixed batch, with the recurrent states in a model-owned pool:

1. two prefills of different lengths in one packed call, states written in place into pool rows;
2. one decode step for both sequences on the same pool.

Prints the error of each call against flash-linear-attention (when importable) and the engine's
float64 reference, and the GPU and host time of each call.

Run on a CUDA machine:  python python/examples/qwen3_next_layer.py
"""

import time

import torch
import torch.nn.functional as F

import deltarule

H, HV, D = 16, 32, 128
LENS = [1500, 3700]
POOL = 8
SLOTS = [5, 2]  # pool rows owned by the two requests
dev = torch.device("cuda")
torch.manual_seed(0)


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def timed(fn):
    """GPU time (events) and host time of one call, after a warm-up call."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    out = fn()
    end.record()
    host = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    return out, start.elapsed_time(end) * 1e3, host


def inputs(T):
    q = torch.randn(T, H, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(T, H, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(T, HV, D, device=dev, dtype=torch.bfloat16)
    a = torch.randn(T, HV, device=dev)  # raw gate input: g = -exp(A_log) softplus(a + dt_bias)
    b = torch.randn(T, HV, device=dev)  # beta logits
    return q, k, v, a, b


A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16))
dt = torch.exp(torch.empty(HV, device=dev).uniform_(-6.9, -2.3))
dt_bias = dt + torch.log(-torch.expm1(-dt))
common = dict(use_qk_l2norm=True, gate="softplus", A_log=A_log, dt_bias=dt_bias, beta_mode="logit",
              state_layout="vk")

# a model-owned pool [P, HV, V, K] (vLLM's layout); rows not named must stay untouched
pool = torch.randn(POOL, HV, D, D, device=dev) * 0.01
slots = torch.tensor(SLOTS, dtype=torch.int32, device=dev)

# ---- 1. prefill of two requests (fresh sequences: their pool rows hold stale data that the
# engine must overwrite; -1 would mean "start from zeros and do not write")
T = sum(LENS)
q, k, v, a, b = inputs(T)
cu = torch.tensor([0, LENS[0], T], dtype=torch.int32, device=dev)
pool[SLOTS] = 0  # new requests start from a zero state
pool_before = pool.clone()
call = lambda: deltarule.gdn_prefill(q, k, v, a, b, cu, state_pool=pool, state_indices=slots, **common)  # noqa: E731
pool.copy_(pool_before)
call()  # warm-up (compiles the kernels for this shape)
pool.copy_(pool_before)
(o, _, _), gpu_us, host_us = timed(call)
ref = deltarule.reference("gdn", q, k, v, a, b, cu, state_pool=pool_before, state_indices=slots, **common)
print(f"prefill {LENS}: GPU {gpu_us:.1f} us, host {host_us:.1f} us; vs float64: o {rel(o, ref['o']):.2e}, "
      f"pool {rel(pool, ref['final_state']):.2e}")
untouched = [r for r in range(POOL) if r not in SLOTS]
assert torch.equal(pool[untouched], pool_before[untouched]), "pool rows not named were touched"

try:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    fo, fs = chunk_gated_delta_rule(
        q[None], k[None], v[None], a[None], b[None], initial_state=pool_before[SLOTS],
        output_final_state=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        state_v_first=True, cu_seqlens=cu.long(), use_gate_in_kernel=True, A_log=A_log,
        dt_bias=dt_bias,
    )
    print(f"prefill vs fla: o max abs {float((o.float() - fo[0].float()).abs().max()):.3e} "
          f"(rel {rel(o, fo[0]):.2e}), state rel {rel(pool[SLOTS], fs):.2e}")
    have_fla = True
except ImportError as e:
    print(f"fla not importable ({e}): skipping the fla comparison")
    have_fla = False

# ---- 2. one decode step for both requests on the same pool
q1, k1, v1, a1, b1 = inputs(2)
cu1 = torch.tensor([0, 1, 2], dtype=torch.int32, device=dev)
pool_mid = pool.clone()
call = lambda: deltarule.gdn_decode(q1, k1, v1, a1, b1, cu1, state_pool=pool, state_indices=slots, **common)  # noqa: E731
call()
pool.copy_(pool_mid)
(o1, _, _), gpu_us, host_us = timed(call)
ref = deltarule.reference("gdn", q1, k1, v1, a1, b1, cu1, mode="decode", state_pool=pool_mid,
                          state_indices=slots, **common)
print(f"decode 2 x 1 token: GPU {gpu_us:.1f} us, host {host_us:.1f} us; vs float64: o "
      f"{rel(o1, ref['o']):.2e}, pool {rel(pool, ref['final_state']):.2e}")
if have_fla:
    fo1, fs1 = fused_recurrent_gated_delta_rule(
        q1[None], k1[None], v1[None], a1[None], beta=b1[None], initial_state=pool_mid[SLOTS],
        output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
        A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True, state_v_first=True,
        cu_seqlens=cu1.long(),
    )
    print(f"decode vs fla: o max abs {float((o1.float() - fo1[0].float()).abs().max()):.3e} "
          f"(rel {rel(o1, fo1[0]):.2e}), state rel {rel(pool[SLOTS], fs1):.2e}")

#!/usr/bin/env python3
"""End-to-end check of deltarule inside Hugging Face models, against flash-linear-attention and
transformers' own torch fallback.

Tiny randomly initialised models built from configs in code (no weights downloaded):
Qwen3NextForCausalLM, Qwen3_5ForCausalLM (the Qwen3.5 text model) and KimiLinearForCausalLM,
with K = V = --head-dim (128 or 64: the CUDA kernels' dims). For each model and each path
(``deltarule``: ``deltarule.fla.install()``; ``fla``: fla-core's functions; ``torch``:
transformers' fallback):

- forward on a left-padded batch and on packed varlen input (``cu_seq_lens_q``): the logits'
  relative L2 difference between paths (transformers' torch fallback ignores ``cu_seqlens``, so
  the packed comparison with it is n/a);
- greedy ``generate()`` of --new-tokens tokens from prompts of --prompts tokens: whether the
  tokens equal the reference path's (fla where it runs, else torch), time to first token and time
  per output token.

Then deltarule.fla's functions against fla's own on random bf16 inputs for every option they
share (grouped value heads, in-kernel L2 norm, gate forms, beta forms, varlen, initial and final
states, the V-first state layout, pooled decode with indices and accepted-token counts): relative
L2 against fla, and both against deltarule's float64 reference.

Prints two markdown tables. Every section runs in its own try/except and reports its error in the
table; --time-budget stops starting new sections once spent. Each function case prints a progress
line on stderr, and --out is rewritten after every case, so a run cut short keeps what it measured.
fla compiles and autotunes every Triton kernel for each new option set (a minute or more a case on
a fresh machine); with --skip-models, --fla-autotune first keeps only the first valid config of
each fla autotuner, which changes fla's speed, never its result.

    python bench/e2e_models.py                    # the GPU run (torch, triton, transformers, fla)
    python bench/e2e_models.py --quick            # fewer and shorter cases
    python bench/e2e_models.py --device cpu --quick --head-dim 32   # the same code on the CPU
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import itertools
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

import deltarule
import deltarule.fla as dfla

MODELS = ("qwen3_next", "qwen3_5", "kimi_linear")
TOL = 5e-3  # docs/spec.md: tensor-core paths against the float64 reference


class Budget:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise TimeoutError(f"skipped ({what}): time budget spent")


def short(e: BaseException, n: int = 90) -> str:
    s = f"{type(e).__name__}: {e}".replace("|", "/").replace("\n", " ")
    return s if len(s) <= n else s[: n - 3] + "..."


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    d = float(b.norm())
    return float((a - b).norm()) / (d if d > 0 else 1.0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------
# paths


def fla_available() -> Tuple[bool, str]:
    try:
        importlib.import_module("fla.ops.gated_delta_rule")
        importlib.import_module("fla.ops.kda")
        return True, ""
    except Exception as e:  # noqa: BLE001 - absent, or no triton/GPU
        return False, short(e, 60)


def _torch_function(value: Callable) -> Callable:
    """transformers' torch fallback behind a binding (its hub wrapper keeps it in a closure)."""
    import inspect

    try:
        tf = inspect.getclosurevars(value).nonlocals.get("torch_function")
    except (TypeError, ValueError):
        tf = None
    return tf or value


def _fla_function(name: str) -> Callable:
    mod = importlib.import_module("fla.ops.gated_delta_rule" if "gated" in name else "fla.ops.kda")
    fn = getattr(mod, name)
    sig = __import__("inspect").signature(fn).parameters
    known = set(sig)

    def call(*args, **kwargs):
        return fn(*args, **{k: v for k, v in kwargs.items() if k in known})

    return call


@contextlib.contextmanager
def path(name: str):
    """Runs the transformers models' delta-rule calls on ``name``: deltarule, fla or torch."""
    if name == "deltarule":
        ctx = dfla.install(fla=False)
    elif name == "torch":
        ctx = dfla.reroute(lambda target, value: _torch_function(value), fla=False)
    elif name == "fla":
        ctx = dfla.reroute(lambda target, value: _fla_function(target), fla=False)
    else:
        raise ValueError(name)
    with ctx:
        if not any(t.startswith("transformers.") for t in ctx.names):
            raise RuntimeError("no transformers binding of the delta-rule functions was found")
        yield


# ---------------------------------------------------------------------------------------------
# models


def build(model: str, hd: int, heads: int, layers: int, device, dtype, seed: int = 0):
    """A tiny model: ``layers`` layers (the last full attention, the others linear attention),
    linear-attention head dims K = V = ``hd``."""
    import transformers as tr

    torch.manual_seed(seed)
    hidden = max(64, heads * hd // 2)
    types_ = ["linear_attention"] * (layers - 1) + ["full_attention"]
    if model == "qwen3_next":
        cfg = tr.Qwen3NextConfig(
            vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
            num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
            linear_num_key_heads=heads, linear_num_value_heads=2 * heads,
            linear_key_head_dim=hd, linear_value_head_dim=hd, linear_conv_kernel_dim=4,
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
            shared_expert_intermediate_size=64, layer_types=types_,
            max_position_embeddings=16384)
        m = tr.Qwen3NextForCausalLM(cfg)
    elif model == "qwen3_5":
        cfg = tr.Qwen3_5TextConfig(
            vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
            num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
            linear_num_key_heads=heads, linear_num_value_heads=2 * heads,
            linear_key_head_dim=hd, linear_value_head_dim=hd, linear_conv_kernel_dim=4,
            layer_types=types_, max_position_embeddings=16384)
        m = tr.Qwen3_5ForCausalLM(cfg)
    elif model == "kimi_linear":
        cfg = tr.KimiLinearConfig(
            vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
            moe_intermediate_size=64, num_hidden_layers=layers, num_attention_heads=2,
            num_key_value_heads=2, kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16,
            qk_nope_head_dim=32, v_head_dim=32, num_local_experts=4, num_experts_per_tok=2,
            n_shared_experts=1, linear_head_dim=hd, linear_num_heads=heads,
            linear_conv_kernel_dim=4, layer_types=types_,
            mlp_layer_types=["dense"] + ["sparse"] * (layers - 1),
            max_position_embeddings=16384, pad_token_id=0, bos_token_id=1, eos_token_id=2)
        m = tr.KimiLinearForCausalLM(cfg)
    else:
        raise ValueError(model)
    # random weights give near-uniform logits, where greedy choices are ties that any rounding
    # flips; an output projection of std 1 makes a token choice depend on the layers' results
    with torch.no_grad():
        m.get_output_embeddings().weight.normal_(0.0, 1.0, generator=torch.Generator()
                                                  .manual_seed(seed + 1))
    return m.to(device=device, dtype=dtype).eval()


def padded_batch(vocab: int, lens: List[int], device, gen):
    T = max(lens)
    ids = torch.zeros(len(lens), T, dtype=torch.long)
    mask = torch.zeros(len(lens), T, dtype=torch.long)
    for i, n in enumerate(lens):
        ids[i, T - n:] = torch.randint(3, vocab, (n,), generator=gen)
        mask[i, T - n:] = 1
    return ids.to(device), mask.to(device)


def forward_logits(m, ids, mask=None, **kw):
    with torch.inference_mode():
        return m(input_ids=ids, attention_mask=mask, use_cache=False, **kw).logits.float()


def packed_inputs(vocab: int, lens: List[int], device, gen):
    ids = torch.randint(3, vocab, (1, sum(lens)), generator=gen).to(device)
    pos = torch.cat([torch.arange(n) for n in lens]).unsqueeze(0).to(device)
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=device)
    return ids, dict(position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                     max_length_q=max(lens), max_length_k=max(lens))


def timed_generate(m, ids, new_tokens: int, device
                   ) -> Tuple[List[int], float, float, List[float]]:
    """Greedy tokens, time to first token (s), time per output token (s), and each step's margin
    between the two largest logits (a small margin is a near-tie that rounding may flip)."""
    kw = dict(do_sample=False, use_cache=True, pad_token_id=0)
    with torch.inference_mode():
        # warm up with the timed run's own length, not just this shape's compiles: a first run
        # through new cache lengths is far slower than the next in the MoE models (H100,
        # Qwen3-Next tiny, prompt 256, deltarule: 30.6 ms a token in a first 9-token run, 7.0 in
        # the next), and a two-token warm-up left that cost in the timed run
        m.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        sync(device)
        t0 = time.perf_counter()
        m.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
        sync(device)
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = m.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        sync(device)
        total = time.perf_counter() - t0
        scores = m.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                            output_scores=True, return_dict_in_generate=True, **kw).scores
    margins = []
    for sc in scores:
        top = sc[0].float().topk(2).values
        margins.append(float(top[0] - top[1]))
    tpot = (total - ttft) / max(new_tokens - 1, 1)
    return out[0, ids.shape[1]:].tolist(), ttft, tpot, margins


def fmt_t(s: Optional[float]) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s"


def profile_decode(m, ids, label: str, top: int) -> None:
    """Prints where the host time of generating four tokens goes (torch.profiler, CPU and CUDA
    activities): the ``top`` operators by self CPU time and the host synchronisations, so a time
    per output token can be traced to its cause."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ids.is_cuda else [])
    kw = dict(do_sample=False, use_cache=True, pad_token_id=0)
    with torch.inference_mode(), profile(activities=acts) as prof:
        m.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)
        sync(ids.device)
    events = prof.key_averages()
    syncs = {e.key: e.count for e in events
             if "Synchronize" in e.key or e.key.startswith("cudaMemcpy")}
    print(f"\n## profile of 4 generated tokens: {label}; host synchronisations and copies: "
          f"{syncs or 'none'}")
    print(events.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60))


def model_rows(args, device, dtype, budget: Budget, fla_ok: bool, fla_why: str) -> List[List[str]]:
    rows: List[List[str]] = []
    paths = ["deltarule", "fla", "torch"] if fla_ok else ["deltarule", "torch"]
    ref_path = "fla" if fla_ok else "torch"
    for name in args.models:
        cells: Dict[str, Dict[str, Any]] = {p: {"logits": [], "tokens": [], "ttft": [],
                                                 "tpot": []} for p in paths}
        try:
            budget.check(f"{name} build")
            m = build(name, args.head_dim, args.heads, args.layers, device, dtype)
        except Exception as e:  # noqa: BLE001
            rows.append([name, "all", f"build failed: {short(e)}", "-", "-", "-"])
            continue
        gen = torch.Generator().manual_seed(1)
        vocab = m.config.vocab_size
        # forward: padded batch and packed varlen
        lens = [args.fwd_len, args.fwd_len * 3 // 4, args.fwd_len // 3]
        logits: Dict[str, Dict[str, Any]] = {}
        for kind in ("padded", "packed"):
            try:
                budget.check(f"{name} forward {kind}")
                if kind == "padded":
                    ids, mask = padded_batch(vocab, lens, device, gen)
                    extra: Dict[str, Any] = {}
                else:
                    ids, extra = packed_inputs(vocab, lens, device, gen)
                    mask = None
                for p in paths:
                    try:
                        with path(p):
                            out = forward_logits(m, ids, mask, **extra)
                        if mask is not None:
                            out = out[mask.bool()]
                        logits.setdefault(kind, {})[p] = out
                    except Exception as e:  # noqa: BLE001
                        cells[p]["logits"].append(f"{kind}: {short(e, 60)}")
            except Exception as e:  # noqa: BLE001
                for p in paths:
                    cells[p]["logits"].append(f"{kind}: {short(e, 60)}")
        for kind, got in logits.items():
            for p in paths:
                others = [o for o in paths if o != p and paths.index(o) > paths.index(p)]
                for o in others:
                    if p not in got or o not in got:
                        continue
                    if kind == "packed" and "torch" in (p, o) and name != "kimi_linear":
                        cells[p]["logits"].append(f"{kind} vs {o}: n/a (the torch fallback "
                                                  "ignores cu_seqlens)")
                        continue
                    cells[p]["logits"].append(f"{kind} vs {o}: {rel(got[p], got[o]):.2e}")
        # generation
        for n_prompt in args.prompts:
            try:
                budget.check(f"{name} generate {n_prompt}")
                ids = torch.randint(3, vocab, (1, n_prompt), generator=gen).to(device)
                toks: Dict[str, List[int]] = {}
                margins: Dict[str, List[float]] = {}
                for p in paths:
                    try:
                        budget.check(f"{name} generate {n_prompt} {p}")
                        with path(p):
                            toks[p], ttft, tpot, margins[p] = timed_generate(
                                m, ids, args.new_tokens, device)
                        cells[p]["ttft"].append(f"{n_prompt}: {fmt_t(ttft)}")
                        cells[p]["tpot"].append(f"{n_prompt}: {fmt_t(tpot)}")
                        if args.profile_decode and n_prompt == args.prompts[0]:
                            with path(p):
                                profile_decode(m, ids, f"{name} on {p}", args.profile_decode)
                    except Exception as e:  # noqa: BLE001
                        cells[p]["tokens"].append(f"{n_prompt}: {short(e, 60)}")
                for p in paths:
                    if p not in toks:
                        continue
                    if p == ref_path:
                        cells[p]["tokens"].append(f"{n_prompt}: reference")
                    elif ref_path in toks:
                        a, b = toks[p], toks[ref_path]
                        if a == b:
                            cells[p]["tokens"].append(f"{n_prompt}: yes")
                        else:
                            first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
                            gap = margins[ref_path][first]
                            cells[p]["tokens"].append(
                                f"{n_prompt}: no (from token {first}; {ref_path}'s top-2 logit "
                                f"margin there {gap:.2g})")
            except Exception as e:  # noqa: BLE001
                for p in paths:
                    cells[p]["tokens"].append(f"{n_prompt}: {short(e, 60)}")
        for p in paths:
            c = cells[p]
            rows.append([name, p, "; ".join(c["logits"]) or "-", "; ".join(c["tokens"]) or "-",
                         "; ".join(c["ttft"]) or "-", "; ".join(c["tpot"]) or "-"])
        if not fla_ok:
            rows.append([name, "fla", f"n/a: {fla_why}", "-", "-", "-"])
        del m
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


# ---------------------------------------------------------------------------------------------
# the functions against fla's


def _l2(x):
    return x / torch.sqrt((x.float() * x.float()).sum(-1, keepdim=True) + 1e-6).to(x.dtype)


FUNCTION_NAMES = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_kda",
                  "fused_recurrent_kda")


def function_cases(quick: bool, names=FUNCTION_NAMES):
    """(label, function name, kwargs builder options) for every shared option."""
    cases = []
    for fn in names:
        kda = "kda" in fn
        gates = ["log", "softplus"] + (["lower_bound"] if kda else [])
        for gva, l2, gate, beta, varlen, state, vfirst in itertools.product(
                (False, True), (False, True), gates, ("prob", "sigmoid", "sigmoid2"),
                (False, True), ("none", "both"), (False, True)):
            if quick and (l2 != gva or vfirst != varlen or beta == "sigmoid2"):
                continue
            if not quick and (vfirst and state == "none"):
                continue
            cases.append((fn, dict(gva=gva, l2=l2, gate=gate, beta=beta, varlen=varlen,
                                   state=state, vfirst=vfirst)))
        for pool in ("pool", "spec"):
            cases.append((fn if "recurrent" in fn else None, dict(pool=pool)))
    return [(f, o) for f, o in cases if f is not None]


def _inputs(fn: str, o: Dict[str, Any], hd: int, device, gen, T: int):
    kda = "kda" in fn
    H = 2
    HV = 4 if o.get("gva") else 2
    lens = [T, T // 2 + 3, 1, T // 3] if o.get("varlen") else [T, T]
    if "recurrent" in fn and not o.get("pool"):
        lens = [min(n, 64) for n in lens]
    if o.get("pool") == "pool":
        lens = [1, 1, 1]
    if o.get("pool") == "spec":
        lens = [3, 1, 2]
    N = len(lens)
    varlen = o.get("varlen") or o.get("pool")
    B, L = (1, sum(lens)) if varlen else (N, lens[0])
    bf = torch.bfloat16

    def r(*s):
        return torch.randn(*s, generator=gen).to(device)

    q = r(B, L, H, hd).to(bf)
    k = _l2(r(B, L, H, hd)).to(bf) if not o.get("l2") else r(B, L, H, hd).to(bf)
    v = r(B, L, HV, hd).to(bf)
    gs = (B, L, HV, hd) if kda else (B, L, HV)
    kw: Dict[str, Any] = {}
    gate = o.get("gate", "log")
    if gate == "log":
        g = -torch.rand(*gs, generator=gen).to(device) * (0.3 if kda else 1.0)
    else:
        g = r(*gs)
        kw["use_gate_in_kernel"] = True
        kw["A_log"] = (torch.rand(HV, generator=gen) * 2 - 1).to(device)
        kw["dt_bias"] = r(HV * hd if kda else HV)
        if gate == "lower_bound":
            kw["lower_bound"] = -5.0
    beta_mode = o.get("beta", "prob")
    beta = torch.rand(B, L, HV, generator=gen).to(device) if beta_mode == "prob" else r(B, L, HV)
    if beta_mode != "prob":
        kw["use_beta_sigmoid_in_kernel"] = True
        kw["allow_neg_eigval"] = beta_mode == "sigmoid2"
    if o.get("l2"):
        kw["use_qk_l2norm_in_kernel"] = True
    if varlen:
        kw["cu_seqlens"] = torch.tensor([0] + list(itertools.accumulate(lens)),
                                        dtype=torch.long, device=device)
    if o.get("vfirst"):
        kw["state_v_first"] = True
    if o.get("state") == "both":
        kw["initial_state"] = r(N, HV, hd, hd) * 0.1
        kw["output_final_state"] = True
    return q, k, v, g, beta, kw, lens


def _reference(fn: str, q, k, v, g, beta, kw: Dict[str, Any], cu) -> Dict[str, Any]:
    """deltarule's float64 reference of the same call (through deltarule.fla's own mapping)."""
    call = dfla.prepare(fn, q, k, v, g=g, beta=beta, **kw)
    c = dfla._case_args(call, snapshot=False)
    opts = dict(A_log=c["A_log"], dt_bias=c["dt_bias"], scale=c["scale"],
                use_qk_l2norm=c["use_qk_l2norm"], gate=c["gate"], lower_bound=c["lower_bound"],
                beta_mode=c["beta_mode"], state_layout=c["state_layout"])
    if "state_pool" in c:
        return deltarule.reference(call.op, c["q"], c["k"], c["v"], c["g"], c["beta"],
                                   c["cu_seqlens"], mode="decode",
                                   state_pool=call.pool.clone(), state_indices=call.indices,
                                   **opts)
    return deltarule.reference(call.op, c["q"], c["k"], c["v"], c["g"], c["beta"],
                               c["cu_seqlens"], initial_state=c.get("initial_state"),
                               checkpoint_every=c.get("checkpoint_every", 0), **opts)


def _fla_call(fn: str, q, k, v, g, beta, kw: Dict[str, Any]):
    """fla's own function; the pooled modes through fla's kda forward (fla 0.6 has the pool
    arguments there only) or n/a."""
    if "pool" in kw or "ssm_state_indices" in kw:
        if "kda" not in fn:
            raise NotImplementedError("fla 0.6's gdn functions take no pool arguments")
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

        kw = dict(kw)
        return fused_recurrent_kda_fwd(q, k, v, g, beta, inplace_final_state=True, **kw)
    mod = importlib.import_module("fla.ops.gated_delta_rule" if "gated" in fn else "fla.ops.kda")
    if fn == "fused_recurrent_gated_delta_rule":
        return getattr(mod, fn)(q, k, v, g=g, beta=beta, **kw)
    return getattr(mod, fn)(q, k, v, g, beta, **kw)


def fla_autotune_first() -> None:
    """Make every Triton autotuner (fla's included) run only the first config its pruning keeps:
    one compile per kernel variant instead of one per config. Results are unchanged (any config
    computes the same function); fla's timings are not its tuned ones."""
    from triton.runtime.autotuner import Autotuner

    orig = Autotuner.prune_configs

    def first(self, *a, **kw):
        return orig(self, *a, **kw)[:1]

    Autotuner.prune_configs = first


def function_rows(args, device, budget: Budget, fla_ok: bool, fla_why: str,
                  progress: Callable[[List[List[str]]], None] = lambda rows: None
                  ) -> List[List[str]]:
    rows: List[List[str]] = []
    gen = torch.Generator().manual_seed(7)
    T = 200 if args.quick else 300
    cases = function_cases(args.quick, args.functions)
    for i, (fn, o) in enumerate(cases):
        label = ", ".join(f"{k}={v}" for k, v in o.items() if v not in (False, None, "none"))
        if rows:
            progress(rows)
        t_case = time.monotonic()
        try:
            budget.check("functions")
            q, k, v, g, beta, kw, lens = _inputs(fn, o, args.head_dim, device, gen, T)
            N = len(lens)
            pooled = o.get("pool")
            if pooled:
                P = 2 * N * 3 + 1
                pool = torch.randn(P, v.shape[2], args.head_dim, args.head_dim,
                                   generator=gen).to(device) * 0.1
                if pooled == "pool":
                    # fla's kernels read no -1 rows: the -1 case is in python/tests
                    kw["ssm_state_indices"] = torch.tensor([4, 0, 1], dtype=torch.int32,
                                                           device=device)
                else:
                    kw["ssm_state_indices"] = torch.tensor(
                        [[0, 1, 2], [3, 5, 6], [7, 8, 9]], dtype=torch.int32, device=device)
                    kw["num_accepted_tokens"] = torch.tensor([2, 1, 3], dtype=torch.int32,
                                                             device=device)
                kw["initial_state"] = pool
            with torch.inference_mode():
                kw_d = {k_: (v_.clone() if k_ == "initial_state" else v_) for k_, v_ in kw.items()}
                fn_d = getattr(dfla, fn)
                if fn == "fused_recurrent_gated_delta_rule":
                    o_d, s_d = fn_d(q, k, v, g=g, beta=beta, **kw_d)
                else:
                    o_d, s_d = fn_d(q, k, v, g, beta, **kw_d)
                kw_r = {k_: (v_.clone() if k_ == "initial_state" else v_) for k_, v_ in kw.items()}
                ref = _reference(fn, q, k, v, g, beta, kw_r, kw.get("cu_seqlens"))
                o_ref = ref["o"].reshape(o_d.shape)
                vs_ref_o = rel(o_d, o_ref)
                s_ref = ref.get("final_state")
                cell_state = "-"
                if s_d is not None and s_ref is not None and not pooled:
                    cell_state = f"{rel(s_d, s_ref):.1e}"
                elif pooled == "pool" and s_ref is not None:
                    cell_state = f"{rel(s_d, s_ref):.1e}"
                fla_o = fla_s = "n/a"
                ok = vs_ref_o < TOL and (cell_state == "-" or float(cell_state) < TOL)
                if fla_ok:
                    try:
                        kw_f = {k_: (v_.clone() if k_ == "initial_state" else v_)
                                for k_, v_ in kw.items()}
                        o_f, s_f = _fla_call(fn, q, k, v, g, beta, kw_f)
                        fla_o = f"{rel(o_d, o_f):.1e} ({rel(o_f, o_ref):.1e})"
                        ok = ok and rel(o_d, o_f) < 2 * TOL
                        if s_d is not None and s_f is not None and s_d.shape == s_f.shape:
                            fla_s = f"{rel(s_d, s_f):.1e}"
                    except Exception as e:  # noqa: BLE001
                        fla_o = f"n/a: {short(e, 50)}"
                else:
                    fla_o = f"n/a: {fla_why}"
            rows.append([fn, label or "defaults", f"{vs_ref_o:.1e}", cell_state, fla_o, fla_s,
                         "pass" if ok else "FAIL"])
        except Exception as e:  # noqa: BLE001
            rows.append([fn, label or "defaults", short(e), "-", "-", "-", "error"])
        print(f"[{i + 1}/{len(cases)}] {fn} {label or 'defaults'}: {rows[-1][-1]} "
              f"({time.monotonic() - t_case:.1f} s)", file=sys.stderr, flush=True)
    return rows


def table(header: List[str], rows: List[List[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="model dtype (default bf16 on CUDA, f32 on CPU)")
    ap.add_argument("--head-dim", type=int, default=128, help="K = V of the linear attention")
    ap.add_argument("--heads", type=int, default=4, help="linear-attention key heads")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--prompts", nargs="+", type=int, default=None,
                    help="prompt lengths for generate (default 1024 8192)")
    ap.add_argument("--new-tokens", type=int, default=None, help="default 32")
    ap.add_argument("--fwd-len", type=int, default=None, help="longest forward sequence")
    ap.add_argument("--quick", action="store_true", help="fewer and shorter cases")
    ap.add_argument("--time-budget", type=float, default=1800.0, help="seconds for everything")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--skip-functions", action="store_true")
    ap.add_argument("--profile-decode", type=int, default=0, metavar="N",
                    help="print the N operators with the most host time while each path "
                         "generates 4 tokens from the first prompt (torch.profiler)")
    ap.add_argument("--functions", nargs="+", default=list(FUNCTION_NAMES), choices=FUNCTION_NAMES,
                    help="the fla functions checked (default all four)")
    ap.add_argument("--fla-autotune", choices=("full", "first"), default="full",
                    help="'first': each Triton autotuner runs only its first valid config "
                         "(function checks only: needs --skip-models)")
    ap.add_argument("--out", default=None, help="also write the tables to this file")
    args = ap.parse_args(argv)
    if args.fla_autotune == "first":
        if not args.skip_models:
            ap.error("--fla-autotune first changes fla's timings: use it with --skip-models")
        fla_autotune_first()
    device = torch.device(args.device)
    if args.prompts is None:
        args.prompts = [256, 1024] if args.quick else [1024, 8192]
    if args.new_tokens is None:
        args.new_tokens = 8 if args.quick else 32
    if args.fwd_len is None:
        args.fwd_len = 200 if args.quick else 1000
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}.get(
        args.dtype or ("bf16" if device.type == "cuda" else "f32"))
    budget = Budget(args.time_budget)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    fla_ok, fla_why = fla_available() if device.type == "cuda" else (False, "CPU tensors")
    versions = []
    for mod in ("torch", "transformers", "fla", "triton"):
        try:
            versions.append(f"{mod} {importlib.import_module(mod).__version__}")
        except Exception:  # noqa: BLE001
            versions.append(f"{mod} absent")
    print(f"device: {name}; {', '.join(versions)}; model dtype {dtype}; K = V = {args.head_dim}")
    print(f"deltarule backends: {deltarule.backends()}")
    out = []
    if not args.skip_models:
        t0 = time.monotonic()
        try:
            rows = model_rows(args, device, dtype, budget, fla_ok, fla_why)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rows = [["all", "-", short(e), "-", "-", "-"]]
        out.append(f"### Models ({name}, {time.monotonic() - t0:.0f} s)\n\n" + table(
            ["model", "path", "logits rel. diff", "tokens equal", "TTFT", "TPOT"], rows))
        print(out[-1] + "\n", flush=True)
    if not args.skip_functions:
        t0 = time.monotonic()
        n_cases = len(function_cases(args.quick, args.functions))
        tuned = "" if args.fla_autotune == "full" else ", fla autotune: first config"

        def section(rows: List[List[str]]) -> str:
            n_fail = sum(1 for r in rows if r[-1] != "pass")
            return (f"### deltarule.fla against fla and the float64 reference ({name}, "
                    f"{time.monotonic() - t0:.0f} s{tuned}, {len(rows) - n_fail}/{len(rows)} pass"
                    + (f", {n_cases - len(rows)} not run" if len(rows) < n_cases else "")
                    + ")\n\n" + table(["function", "options", "o vs f64", "state vs f64",
                                       "o vs fla (fla vs f64)", "state vs fla", "result"], rows))

        def progress(rows: List[List[str]]) -> None:
            if args.out:
                with open(args.out, "w") as f:
                    f.write("\n\n".join(out + [section(rows)]) + "\n")

        try:
            rows = function_rows(args, device, budget, fla_ok, fla_why, progress)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rows = [["all", "-", short(e), "-", "-", "-", "error"]]
        out.append(section(rows))
        print(out[-1] + "\n", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

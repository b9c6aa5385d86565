"""Tiny randomly initialised Hugging Face models (Qwen3-Next, Qwen3.5, Kimi Linear) on the CPU with
``deltarule.fla.install()`` against transformers' own torch fallback, a capture from a running
model, and bench/e2e_models.py (the GPU script) run on the CPU. Skipped without torch or
transformers."""

import importlib.util
import io
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import deltarule  # noqa: E402
from deltarule import _case  # noqa: E402
from deltarule import fla as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("e2e_models", ROOT / "bench" / "e2e_models.py")
e2e = importlib.util.module_from_spec(spec)
sys.modules["e2e_models"] = e2e
spec.loader.exec_module(e2e)

CPU = torch.device("cpu")


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("name", e2e.MODELS)
def test_tiny_model_on_deltarule_matches_the_torch_fallback(name):
    m = e2e.build(name, hd=32, heads=2, layers=3, device=CPU, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    ids, mask = e2e.padded_batch(m.config.vocab_size, [30, 17, 5], CPU, gen)
    with e2e.path("torch"):
        ref = e2e.forward_logits(m, ids, mask)
    with e2e.path("deltarule") as _:
        got = e2e.forward_logits(m, ids, mask)
    assert rel(got[mask.bool()], ref[mask.bool()]) < 1e-5
    prompt = ids[:1]
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        with e2e.path("torch"):
            a = m.generate(prompt, **kw)
        with F.install() as inst:
            assert any("modeling_" in n for n in inst.names), inst.names
            b = m.generate(prompt, **kw)
    assert a.tolist() == b.tolist()


def test_a_plain_forward_with_grad_is_refused_not_silently_detached():
    m = e2e.build("qwen3_next", hd=32, heads=2, layers=2, device=CPU, dtype=torch.float32)
    ids = torch.randint(3, 100, (1, 9))
    with F.install():
        with pytest.raises(NotImplementedError, match="requires grad"):
            m(input_ids=ids)


def test_capture_from_a_running_model_with_packed_sequences(tmp_path):
    m = e2e.build("qwen3_next", hd=32, heads=2, layers=3, device=CPU, dtype=torch.float32)
    gen = torch.Generator().manual_seed(2)
    ids, extra = e2e.packed_inputs(m.config.vocab_size, [12, 7, 20], CPU, gen)
    with F.install():
        with deltarule.capture(str(tmp_path), model=m, layer="model.layers.1.linear_attn",
                               call=0) as cap:
            e2e.forward_logits(m, ids, None, **extra)
    assert len(cap.paths) == 1
    meta, t = _case.load_case(cap.paths[0])
    assert meta["layer"] == "model.layers.1.linear_attn"
    assert meta["observed"].startswith("deltarule")
    assert t["cu_seqlens"].tolist() == [0, 12, 19, 39]
    assert meta["use_qk_l2norm"] == "true" and meta["gate"] == "precomputed"
    assert t["q"].shape == (39, 4, 32)  # transformers repeats q/k to the value heads
    # the observed output is the deltarule result for these inputs: replay it here
    o, _, _ = deltarule.gdn_prefill(t["q"], t["k"], t["v"], t["g"], t["beta"], t["cu_seqlens"],
                                    use_qk_l2norm=True, state_layout="kv")
    assert rel(o, t["observed.o"]) < 1e-6
    # the torch fallback's result, captured the same way, is close to it
    with e2e.path("torch"):
        with deltarule.capture(str(tmp_path / "torch"), model=m,
                               layer=m.model.layers[1].linear_attn, call=0) as cap2:
            e2e.forward_logits(m, ids[:, :12], None)
    meta2, t2 = _case.load_case(cap2.paths[0])
    assert meta2["observed"] == "transformers-torch"
    o2, _, _ = deltarule.gdn_prefill(t2["q"], t2["k"], t2["v"], t2["g"], t2["beta"],
                                     t2["cu_seqlens"], use_qk_l2norm=True, state_layout="kv")
    assert rel(o2, t2["observed.o"]) < 1e-5


def test_the_e2e_script_runs_on_the_cpu(tmp_path):
    out = tmp_path / "tables.md"
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = e2e.main(["--device", "cpu", "--quick", "--models", "kimi_linear", "--head-dim", "32",
                       "--heads", "2", "--layers", "2", "--prompts", "24", "--new-tokens", "4",
                       "--fwd-len", "20", "--time-budget", "600", "--out", str(out)])
    text = out.read_text()
    assert rc == 0
    assert "| kimi_linear | deltarule |" in text and "24: yes" in text, text
    rows = [line for line in text.splitlines() if line.startswith("| chunk") or
            line.startswith("| fused")]
    assert len(rows) > 50
    bad = [r for r in rows if not r.rstrip().endswith("| pass |")]
    assert not bad, bad[:5]
    assert "Error" not in text.split("### deltarule.fla")[0], text

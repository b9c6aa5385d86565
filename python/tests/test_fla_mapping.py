"""deltarule.fla without torch: the option, state and shape mapping onto the ops, and
install()/uninstall() over stand-in fla, user and transformers modules (CI runs these without
torch; python/tests/test_fla.py runs the functions on CPU tensors)."""

import sys
import types

import pytest

from deltarule import fla as F

# ---------------------------------------------------------------------------------------------
# mapping, no torch


def test_options_map_onto_the_ops():
    o = F.map_options("chunk_gated_delta_rule", "gdn")
    assert (o["gate"], o["beta_mode"], o["state_layout"], o["scale"], o["use_qk_l2norm"]) == \
        ("log", "prob", "kv", None, False)
    o = F.map_options("chunk_gated_delta_rule", "gdn", use_gate_in_kernel=True, has_A_log=True,
                      use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, state_v_first=True,
                      scale=0.5, use_qk_l2norm_in_kernel=True)
    assert (o["gate"], o["beta_mode"], o["state_layout"], o["scale"], o["use_qk_l2norm"],
            o["zero_dt_bias"]) == ("softplus", "logit2", "vk", 0.5, True, True)
    o = F.map_options("chunk_kda", "kda", use_gate_in_kernel=True, lower_bound=-3.0,
                      has_dt_bias=True)
    assert (o["gate"], o["lower_bound"], o["has_A_log"], o["zero_dt_bias"]) == \
        ("lower_bound", -3.0, False, False)
    # without the in-kernel gate, A_log and lower_bound are ignored, as fla ignores them
    o = F.map_options("chunk_kda", "kda", lower_bound=-3.0, has_A_log=True)
    assert o["gate"] == "log" and not o["has_A_log"]
    o = F.map_options("chunk_kda", "kda", use_beta_sigmoid_in_kernel=True)
    assert o["beta_mode"] == "logit"


@pytest.mark.parametrize("kw, arg", [
    (dict(allow_neg_eigval=True), "allow_neg_eigval"),
    (dict(use_gate_in_kernel=True), "A_log"),
    (dict(scale=0.0), "scale"),
    (dict(scale=-1.0), "scale"),
])
def test_option_errors_name_the_argument(kw, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        F.map_options("chunk_gated_delta_rule", "gdn", **kw)
    with pytest.raises(ValueError, match="`lower_bound`"):
        F.map_options("chunk_kda", "kda", use_gate_in_kernel=True, lower_bound=0.5)


def test_state_modes():
    ms = F.map_state
    assert ms("f", has_initial_state=False, indices_ndim=None, inplace_final_state=None,
              has_num_accepted_tokens=False) == "dense"
    assert ms("f", has_initial_state=True, indices_ndim=None, inplace_final_state=True,
              has_num_accepted_tokens=False) == "dense_inplace"
    assert ms("f", has_initial_state=False, indices_ndim=None, inplace_final_state=False,
              has_num_accepted_tokens=False) == "tokens"
    for inplace, want in ((None, "pool"), (True, "pool"), (False, "pool_tokens")):
        assert ms("f", has_initial_state=True, indices_ndim=1, inplace_final_state=inplace,
                  has_num_accepted_tokens=False) == want
    for inplace, want in ((None, "spec"), (True, "spec"), (False, "spec_tokens")):
        assert ms("f", has_initial_state=True, indices_ndim=2, inplace_final_state=inplace,
                  has_num_accepted_tokens=True) == want
    with pytest.raises(ValueError, match="`initial_state`"):
        ms("f", has_initial_state=False, indices_ndim=1, inplace_final_state=None,
           has_num_accepted_tokens=False)
    with pytest.raises(ValueError, match="`initial_state`"):
        ms("f", has_initial_state=False, indices_ndim=None, inplace_final_state=True,
           has_num_accepted_tokens=False)
    with pytest.raises(ValueError, match="`num_accepted_tokens`"):
        ms("f", has_initial_state=True, indices_ndim=1, inplace_final_state=None,
           has_num_accepted_tokens=True)
    with pytest.raises(ValueError, match="`ssm_state_indices`"):
        ms("f", has_initial_state=True, indices_ndim=3, inplace_final_state=None,
           has_num_accepted_tokens=False)


def test_shapes():
    d = F.map_shapes("f", "gdn", (3, 10, 2, 64), (3, 10, 2, 64), (3, 10, 4, 32), (3, 10, 4),
                     (3, 10, 4), None)
    assert d == {"B": 3, "T": 10, "N": 3, "H": 2, "HV": 4, "K": 64, "V": 32}
    d = F.map_shapes("f", "kda", (1, 10, 2, 64), (1, 10, 2, 64), (1, 10, 2, 64), (1, 10, 2, 64),
                     (1, 10, 2), 4)
    assert d["N"] == 3
    with pytest.raises(ValueError, match="`q`: expected batch size 1"):
        F.map_shapes("f", "gdn", (2, 10, 2, 64), (2, 10, 2, 64), (2, 10, 2, 64), None, None, 3)
    with pytest.raises(ValueError, match="`g`"):
        F.map_shapes("f", "kda", (1, 10, 2, 64), (1, 10, 2, 64), (1, 10, 2, 64), (1, 10, 2),
                     None, None)
    with pytest.raises(ValueError, match="`v`"):
        F.map_shapes("f", "gdn", (1, 10, 2, 64), (1, 10, 2, 64), (1, 10, 3, 64), None, None, None)
    with pytest.raises(NotImplementedError, match="`beta`"):
        F.map_shapes("f", "gdn", (1, 10, 2, 64), (1, 10, 2, 64), (1, 10, 2, 32), None,
                     (1, 10, 2, 32), None)


# ---------------------------------------------------------------------------------------------
# install / uninstall over stand-in modules, no torch


@pytest.fixture
def fake_modules():
    """A stand-in fla package, a user module that imported its functions, and a transformers
    modeling module whose binding is transformers' fallback wrapper (closure over package and
    func_name), removed afterwards."""
    names = ["fla", "fla.ops", "fla.ops.gated_delta_rule", "fla.ops.kda", "user_model_code",
             "transformers", "transformers.models", "transformers.models.fake",
             "transformers.models.fake.modeling_fake"]
    saved = {n: sys.modules.get(n) for n in names}
    mods = {n: types.ModuleType(n) for n in names}

    def fla_chunk(q, k, v, g, beta, **kw):
        return "fla-chunk"

    def fla_kda(q, k, v, g, beta, **kw):
        return "fla-kda"

    mods["fla.ops.gated_delta_rule"].chunk_gated_delta_rule = fla_chunk
    mods["fla.ops.gated_delta_rule"].chunk_gdn = fla_chunk
    mods["fla.ops.kda"].chunk_kda = fla_kda
    mods["user_model_code"].chunk_gated_delta_rule = fla_chunk
    mods["user_model_code"].my_alias = fla_chunk

    def hub(func_name, package):
        def deco(torch_function):
            implementation = torch_function

            def wrapped(*args, **kwargs):
                if package and func_name:
                    return implementation(*args, **kwargs)

            wrapped.__name__ = torch_function.__name__
            return wrapped
        return deco

    @hub("chunk_gated_delta_rule", "fla")
    def torch_chunk_gated_delta_rule(q, k, v, g, beta, **kw):
        return "torch"

    def unrelated(x):
        return x

    mods["transformers.models.fake.modeling_fake"].torch_chunk_gated_delta_rule = \
        torch_chunk_gated_delta_rule
    mods["transformers.models.fake.modeling_fake"].unrelated = unrelated
    sys.modules.update(mods)
    yield mods
    F.uninstall()
    for n, m in saved.items():
        if m is None:
            sys.modules.pop(n, None)
        else:
            sys.modules[n] = m


def test_install_patches_every_binding_and_uninstall_restores(fake_modules):
    m = fake_modules
    before = {(n, a): getattr(m[n], a) for n, a in (
        ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
        ("fla.ops.gated_delta_rule", "chunk_gdn"), ("fla.ops.kda", "chunk_kda"),
        ("user_model_code", "chunk_gated_delta_rule"), ("user_model_code", "my_alias"),
        ("transformers.models.fake.modeling_fake", "torch_chunk_gated_delta_rule"))}
    inst = F.install(backend_name="cpu")
    assert F.backend == "cpu"
    for (n, a), old in before.items():
        new = getattr(m[n], a)
        assert new is not old, (n, a)
        want = "chunk_kda" if a == "chunk_kda" else "chunk_gated_delta_rule"
        assert new._deltarule_fla == want
        assert new.__wrapped__ is F.FUNCTIONS[want]
    assert m["transformers.models.fake.modeling_fake"].unrelated.__name__ == "unrelated"
    assert len(inst.patched) == len(before)
    inst.uninstall()
    assert F.backend == "auto"
    for (n, a), old in before.items():
        assert getattr(m[n], a) is old, (n, a)
    with F.install(transformers=False) as inst:
        assert getattr(m["transformers.models.fake.modeling_fake"],
                       "torch_chunk_gated_delta_rule") is before[
            ("transformers.models.fake.modeling_fake", "torch_chunk_gated_delta_rule")]
        assert len(inst.patched) == len(before) - 1
    assert m["user_model_code"].my_alias is before[("user_model_code", "my_alias")]


def test_the_adapter_drops_keywords_the_function_does_not_name(fake_modules):
    seen = {}

    def target(*args, **kwargs):
        seen.update(kwargs)
        return "ok"

    call = F._adapter("chunk_gated_delta_rule", target)
    assert call(1, 2, 3, g=4, beta=5, cu_seqlens=None, position_ids=7, output_attentions=False) \
        == "ok"
    assert set(seen) == {"g", "beta", "cu_seqlens"}


def test_offsets_cache_holds_for_the_tensor_it_read_only():
    """fla callers make a new cu_seqlens per call: a new tensor at a freed one's address (version
    0 again) must be read afresh, not served the old contents."""
    from deltarule import _offsets

    class FakeTensor:
        def __init__(self, contents):
            self.contents = contents
            self._version = 0
            self.device = "cuda:0"

        def data_ptr(self):
            return 4096  # the same address for every object

        def numel(self):
            return len(self.contents)

        def tolist(self):
            return list(self.contents)

    _offsets.clear()
    seen = []
    a = FakeTensor([0, 5, 10])
    got, _ = _offsets.checked_contents("cu", a, seen.append)
    assert got == [0, 5, 10]
    got, _ = _offsets.checked_contents("cu", a, seen.append)  # the same object: cached
    assert len(seen) == 1
    del a
    b = FakeTensor([0, 2, 10])
    got, _ = _offsets.checked_contents("cu", b, seen.append)
    assert got == [0, 2, 10] and len(seen) == 2
    b._version += 1  # an in-place refill bumps the version: read again
    b.contents = [0, 9, 10]
    got, _ = _offsets.checked_contents("cu", b, seen.append)
    assert got == [0, 9, 10] and len(seen) == 3
    _offsets.clear()

"""Checks that need no GPU: the package imports with or without its extension, and (when the
extension is built) the fake kernels, autograd wiring and torch.compile tracing work on meta
tensors, which never reach a CUDA kernel."""

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import hopattn  # noqa: E402

needs_ext = pytest.mark.skipif(not hopattn.extension_available(),
                               reason=f"hopattn._C is not built ({hopattn.extension_error()})")


def meta(*shape, dtype=torch.bfloat16, grad=False):
    return torch.empty(*shape, dtype=dtype, device="meta").requires_grad_(grad)


def test_version_and_api():
    assert isinstance(hopattn.__version__, str) and hopattn.__version__.count(".") >= 2
    for name in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
                 "flash_attn_combine"):
        assert callable(getattr(hopattn, name))


def test_missing_extension_gives_build_instructions(tmp_path):
    # A copy of the pure-Python package, without _C: importing works, calling says how to build.
    pkg = tmp_path / "hopattn"
    pkg.mkdir()
    src = os.path.dirname(hopattn.__file__)
    for name in ("__init__.py", "_version.py", "_ops.py", "interface.py"):
        (pkg / name).write_text(open(f"{src}/{name}").read())
    code = textwrap.dedent("""
        import sys
        # An editable install's import hook would find the real hopattn._C: drop it.
        sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        import hopattn
        assert hopattn.__file__.startswith(sys.argv[1]), hopattn.__file__
        assert not hopattn.extension_available()
        try:
            hopattn.flash_attn_func(None, None, None)
        except ImportError as e:
            print("IMPORT-ERROR:", e)
    """)
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "IMPORT-ERROR:" in res.stdout
    assert "pip install" in res.stdout and "cmake" in res.stdout


@needs_ext
def test_ops_registered():
    for name in ("fwd", "fwd_kvcache", "bwd", "combine"):
        assert hasattr(torch.ops.hopattn, name)
    schema = str(torch.ops.hopattn.fwd_kvcache.default._schema)
    assert "Tensor(a!) k_cache" in schema and "Tensor(b!) v_cache" in schema


@needs_ext
def test_fake_shapes_dense_and_fp8():
    out, lse = torch.ops.hopattn.fwd(meta(2, 16, 8, 128), meta(2, 32, 2, 128), meta(2, 32, 2, 64))
    assert out.shape == (2, 16, 8, 64) and out.dtype == torch.bfloat16
    assert lse.shape == (2, 8, 16) and lse.dtype == torch.float32
    e4m3 = torch.float8_e4m3fn
    out, _ = torch.ops.hopattn.fwd(meta(2, 16, 8, 128, dtype=e4m3), meta(2, 32, 2, 128, dtype=e4m3),
                                   meta(2, 32, 2, 128, dtype=e4m3))
    assert out.dtype == torch.bfloat16


@needs_ext
def test_fake_shapes_varlen_bwd_combine_kvcache():
    cu = meta(4, dtype=torch.int32)
    out, lse = torch.ops.hopattn.fwd(meta(40, 8, 128), meta(50, 2, 128), meta(50, 2, 128), cu, cu,
                                     max_seqlen_q=20, max_seqlen_k=30)
    assert out.shape == (40, 8, 128) and lse.shape == (8, 40)
    dq, dk, dv = torch.ops.hopattn.bwd(meta(2, 16, 8, 128), meta(2, 16, 8, 128), meta(2, 32, 2, 128),
                                       meta(2, 32, 2, 128), meta(2, 16, 8, 128),
                                       meta(2, 8, 16, dtype=torch.float32))
    assert dq.shape == (2, 16, 8, 128) and dk.shape == (2, 32, 2, 128) and dv.shape == (2, 32, 2, 128)
    out, lse = torch.ops.hopattn.combine(meta(3, 2, 16, 8, 128, dtype=torch.float32),
                                         meta(3, 2, 8, 16, dtype=torch.float32), torch.float16)
    assert out.shape == (2, 16, 8, 128) and out.dtype == torch.float16 and lse.shape == (2, 8, 16)
    out, lse = torch.ops.hopattn.fwd_kvcache(meta(2, 1, 8, 128), meta(2, 64, 2, 128),
                                             meta(2, 64, 2, 128), meta(2, 1, 2, 128),
                                             meta(2, 1, 2, 128))
    assert out.shape == (2, 1, 8, 128) and lse.shape == (2, 8, 1)


@needs_ext
def test_autograd_on_meta():
    q, k, v = meta(2, 16, 8, 128, grad=True), meta(2, 32, 2, 128, grad=True), meta(2, 32, 2, 128, grad=True)
    out, lse = hopattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.requires_grad and not lse.requires_grad
    out.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


@needs_ext
def test_kvcache_backward_is_refused_clearly():
    q, k, v = meta(2, 1, 4, 128, grad=True), meta(2, 64, 4, 128), meta(2, 64, 4, 128)
    seqlens = meta(2, dtype=torch.int32)
    out = hopattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens)
    with pytest.raises(NotImplementedError, match="cache_seqlens"):
        out.sum().backward()


@needs_ext
@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_traces_without_graph_breaks(dynamic):
    torch._dynamo.reset()

    @torch.compile(fullgraph=True, backend="aot_eager", dynamic=dynamic)
    def step(q, k, v, cu):
        a = hopattn.flash_attn_func(q, k, v, causal=True, window_size=(8, -1), softcap=5.0)
        b, lse = hopattn.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 16, 16,
                                                return_attn_probs=True)
        return a.float().sum() + b.float().sum() + lse.sum()

    q, k, v = meta(2, 16, 8, 128, grad=True), meta(2, 16, 2, 128, grad=True), meta(2, 16, 2, 128, grad=True)
    step(q, k, v, meta(2, dtype=torch.int32)).backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape
    torch._dynamo.reset()


@needs_ext
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_on_meta(requires_grad):
    args = (meta(2, 16, 8, 128, grad=requires_grad), meta(2, 32, 2, 128, grad=requires_grad),
            meta(2, 32, 2, 128, grad=requires_grad))
    torch.library.opcheck(torch.ops.hopattn.fwd.default, args, dict(causal=True, softmax_scale=0.1))
    torch.library.opcheck(torch.ops.hopattn.combine.default,
                          (meta(3, 2, 16, 8, 128, dtype=torch.float32),
                           meta(3, 2, 8, 16, dtype=torch.float32)))


@needs_ext
def test_cpu_tensors_name_the_argument():
    q = torch.zeros(1, 16, 2, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^q: expected a CUDA tensor"):
        hopattn.flash_attn_func(q, q, q)

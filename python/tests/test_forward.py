"""Forward results against a float64 reference (see hopattn_testing for the accuracy rule).

Cases this build has no kernel for raise NotImplementedError and are skipped, so they start
counting as kernels land."""

import pytest

from hopattn_testing import (
    assert_lse_close,
    assert_within_fp8_bound,
    assert_within_rule,
    attention_ref,
    call_or_skip,
    require_hopper_extension,
)

torch, hopattn = require_hopper_extension()

from hopattn import (  # noqa: E402
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
)

DEV = "cuda"


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, dtype=dtype, device=DEV)


def check_dense(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
                **kwargs):
    out, lse = call_or_skip(flash_attn_func, q, k, v, softmax_scale=softmax_scale, causal=causal,
                            window_size=window, softcap=softcap, return_attn_probs=True, **kwargs)
    opts = dict(softmax_scale=softmax_scale, causal=causal, window=window, softcap=softcap)
    ref, ref_lse = attention_ref(q, k, v, **opts)
    lowp, _ = attention_ref(q, k, v, upcast=False, **opts)
    assert out.shape == q.shape[:-1] + (v.shape[-1],) and out.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    assert_within_rule(out, ref, lowp)
    assert_lse_close(lse, ref_lse)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(128, 128), (113, 203), (1, 239), (256, 97)])
@pytest.mark.parametrize("causal", [False, True])
def test_dense(dtype, head_dim, seqlen_q, seqlen_k, causal):
    torch.manual_seed(0)
    q = randn(2, seqlen_q, 4, head_dim, dtype=dtype)
    k = randn(2, seqlen_k, 4, head_dim, dtype=dtype)
    v = randn(2, seqlen_k, 4, head_dim, dtype=dtype)
    check_dense(q, k, v, causal=causal)


@pytest.mark.parametrize("nheads,nheads_k", [(8, 1), (8, 2), (6, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa(nheads, nheads_k, causal):
    torch.manual_seed(1)
    q = randn(2, 97, nheads, 128)
    k = randn(2, 150, nheads_k, 128)
    v = randn(2, 150, nheads_k, 128)
    check_dense(q, k, v, causal=causal)


@pytest.mark.parametrize("window", [(16, 0), (32, 32), (-1, 8), (0, 0), (50, -1)])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(128, 128), (100, 300), (300, 100)])
def test_window(window, seqlen_q, seqlen_k):
    torch.manual_seed(2)
    q = randn(2, seqlen_q, 4, 128)
    k = randn(2, seqlen_k, 4, 128)
    v = randn(2, seqlen_k, 4, 128)
    check_dense(q, k, v, window=window)


@pytest.mark.parametrize("causal", [False, True])
def test_causal_with_left_window(causal):
    torch.manual_seed(3)
    q, k, v = randn(1, 200, 4, 128), randn(1, 250, 4, 128), randn(1, 250, 4, 128)
    check_dense(q, k, v, causal=causal, window=(24, -1))


@pytest.mark.parametrize("softcap", [5.0, 30.0])
@pytest.mark.parametrize("causal", [False, True])
def test_softcap(softcap, causal):
    torch.manual_seed(4)
    q, k, v = randn(2, 128, 4, 128) * 3, randn(2, 160, 4, 128) * 3, randn(2, 160, 4, 128)
    check_dense(q, k, v, causal=causal, softcap=softcap)


def test_softmax_scale():
    torch.manual_seed(5)
    q, k, v = randn(2, 64, 4, 128), randn(2, 64, 4, 128), randn(2, 64, 4, 128)
    check_dense(q, k, v, softmax_scale=0.3)


def test_strided_inputs():
    # q, k, v as views into one packed (batch, seqlen, 3, nheads, d) tensor: no copies.
    torch.manual_seed(6)
    qkv = randn(2, 128, 3, 4, 128)
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    check_dense(q, k, v, causal=True)


def test_default_return_is_out_only():
    q, k, v = randn(1, 64, 2, 128), randn(1, 64, 2, 128), randn(1, 64, 2, 128)
    out = call_or_skip(flash_attn_func, q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape


def test_runs_on_current_stream():
    torch.manual_seed(7)
    q, k, v = randn(2, 256, 4, 128), randn(2, 256, 4, 128), randn(2, 256, 4, 128)
    expected = call_or_skip(flash_attn_func, q, k, v)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = flash_attn_func(q, k, v)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(out, expected)


# ---- fp8 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_with_descale(causal):
    torch.manual_seed(8)
    batch, nheads, nheads_k = 2, 8, 2
    e4m3 = torch.float8_e4m3fn
    q = randn(batch, 128, nheads, 128).to(e4m3)
    k = randn(batch, 192, nheads_k, 128).to(e4m3)
    v = randn(batch, 192, nheads_k, 128).to(e4m3)
    descale = [torch.rand(batch, nheads_k, device=DEV) + 0.5 for _ in range(3)]
    out = call_or_skip(flash_attn_func, q, k, v, causal=causal, q_descale=descale[0],
                       k_descale=descale[1], v_descale=descale[2])
    assert out.dtype == torch.bfloat16
    opts = dict(causal=causal, q_descale=descale[0], k_descale=descale[1], v_descale=descale[2])
    ref, _ = attention_ref(q, k, v, **opts)
    lowp, _ = attention_ref(q, k, v, upcast=False, **opts)
    # The kernel multiplies P in e4m3 as well, so it is allowed a little more than bf16 math.
    assert_within_rule(out, ref, lowp, factor=4.0, atol=1e-3)


@pytest.mark.parametrize("hadamard", [False, True])
def test_fp8_block_descales_from_quantize(hadamard):
    # quantize_qkv_fp8's (batch, heads, num_blocks) descales go straight into flash_attn_func.
    # With the rotation, Q and K are rotated alike and the reference is the unrotated attention.
    torch.manual_seed(9)
    q = randn(2, 300, 4, 128)
    k = randn(2, 384, 2, 128)
    v = randn(2, 384, 2, 128)
    q8, k8, v8, d = hopattn.quantize_qkv_fp8(q, k, v, q_block_rows=64, kv_block_rows=128, hadamard=hadamard)
    assert d["q_descale"].shape == (2, 4, 5) and d["k_descale"].shape == (2, 2, 3)
    out = call_or_skip(flash_attn_func, q8, k8, v8, causal=True, **d)
    ref, _ = attention_ref(q, k, v, causal=True)
    rel_rmse = ((out.double() - ref).pow(2).mean() / ref.pow(2).mean()).sqrt().item()
    assert rel_rmse < 0.1, rel_rmse  # the C++ test holds the kernel to a per-element bound


def test_fp8_one_block_descales_need_no_rows():
    # quantize_fp8 with block_rows=0 gives one block per (batch, head): no block sizes needed.
    torch.manual_seed(10)
    q, k, v = (randn(1, 200, 2, 64) for _ in range(3))
    q8, k8, v8, d = hopattn.quantize_qkv_fp8(q, k, v)
    d.pop("descale_block_rows")
    out = call_or_skip(flash_attn_func, q8, k8, v8, **d)
    ref, _ = attention_ref(q, k, v)
    rel_rmse = ((out.double() - ref).pow(2).mean() / ref.pow(2).mean()).sqrt().item()
    assert rel_rmse < 0.1, rel_rmse  # the C++ test holds the kernel to a per-element bound


# ---- varlen -------------------------------------------------------------------------------------


def pack(seqs):
    cu = [0]
    for s in seqs:
        cu.append(cu[-1] + s.shape[0])
    return torch.cat(seqs), torch.tensor(cu, dtype=torch.int32, device=DEV)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [(-1, -1), (20, 5)])
@pytest.mark.parametrize("nheads_k", [4, 1])
def test_varlen(causal, window, nheads_k):
    torch.manual_seed(9)
    lens_q = [17, 1, 128, 77, 200]
    lens_k = [33, 60, 128, 5, 250]
    if causal and window != (-1, -1):
        window = (window[0], -1)
    qs = [randn(n, 4, 128) for n in lens_q]
    ks = [randn(n, nheads_k, 128) for n in lens_k]
    vs = [randn(n, nheads_k, 128) for n in lens_k]
    q, cu_q = pack(qs)
    k, cu_k = pack(ks)
    v, _ = pack(vs)
    out, lse = call_or_skip(flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                            causal=causal, window_size=window, return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    opts = dict(causal=causal, window=window)
    refs, lowps, ref_lses = [], [], []
    for qi, ki, vi in zip(qs, ks, vs):
        r, rl = attention_ref(qi[None], ki[None], vi[None], **opts)
        lp, _ = attention_ref(qi[None], ki[None], vi[None], upcast=False, **opts)
        refs.append(r[0])
        lowps.append(lp[0])
        ref_lses.append(rl[0])
    assert_within_rule(out, torch.cat(refs), torch.cat(lowps))
    assert_lse_close(lse, torch.cat(ref_lses, dim=1))


def run_seqused(lens, used_q, used_k, nheads_k, head_dim, causal, dtype=None):
    """flash_attn_varlen_func over random packed sequences of `lens` rows (4 query heads),
    seqused_q / seqused_k limiting each to its first used_q[i] rows and used_k[i] keys. Returns
    the output and, per sequence, (q, k, v, out) of its used part, each (1, rows, heads, dim)."""
    qs = [randn(n, 4, head_dim) for n in lens]
    ks = [randn(n, nheads_k, head_dim) for n in lens]
    vs = [randn(n, nheads_k, head_dim) for n in lens]
    if dtype is not None:
        qs, ks, vs = ([t.to(dtype) for t in ts] for ts in (qs, ks, vs))
    q, cu = pack(qs)
    k, _ = pack(ks)
    v, _ = pack(vs)
    sq = torch.tensor(used_q, dtype=torch.int32, device=DEV)
    sk = torch.tensor(used_k, dtype=torch.int32, device=DEV)
    out = call_or_skip(flash_attn_varlen_func, q, k, v, cu, cu, max(lens), max(lens),
                       seqused_q=sq, seqused_k=sk, causal=causal)
    parts = []
    for i, (qi, ki, vi) in enumerate(zip(qs, ks, vs)):
        start = int(cu[i])
        parts.append((qi[None, :used_q[i]], ki[None, :used_k[i]], vi[None, :used_k[i]],
                      out[None, start:start + used_q[i]]))
    return out, parts


def test_varlen_seqused():
    # seqused_k limits each sequence's keys; seqused_q its rows (rows past it are not written).
    torch.manual_seed(10)
    _, parts = run_seqused([64, 100, 30], [50, 100, 1], [64, 20, 30], nheads_k=4, head_dim=128, causal=True)
    refs = [attention_ref(q, k, v, causal=True)[0][0] for q, k, v, _ in parts]
    lowps = [attention_ref(q, k, v, causal=True, upcast=False)[0][0] for q, k, v, _ in parts]
    assert_within_rule(torch.cat([o[0] for *_, o in parts]), torch.cat(refs), torch.cat(lowps))


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_varlen_seqused(head_dim, causal):
    # The FP8 kernels with seqused_q/k (d256 stores O from its V^T ring, d128 from its staging
    # buffer): sequence 0 ends its used rows inside a 128-row tile, sequence 2 uses one row, and
    # the used keys stop mid-block.
    torch.manual_seed(12)
    out, parts = run_seqused([200, 150, 64], [70, 150, 1], [200, 33, 64], nheads_k=2, head_dim=head_dim,
                             causal=causal, dtype=torch.float8_e4m3fn)
    assert out.dtype == torch.bfloat16
    for i, (q, k, v, o) in enumerate(parts):
        ref = attention_ref(q, k, v, causal=causal)[0]
        # Causal rows of sequence 1 see none or one key: the e4m3 error model, per element.
        assert_within_fp8_bound(o, q, k, v, ref, causal=causal, name=f"out of sequence {i}")


# ---- kv cache -----------------------------------------------------------------------------------


def test_kvcache_read_only():
    torch.manual_seed(11)
    batch, cache_len = 3, 256
    q = randn(batch, 1, 8, 128)
    k_cache, v_cache = randn(batch, cache_len, 2, 128), randn(batch, cache_len, 2, 128)
    lens = [1, 100, 256]
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    out, lse = call_or_skip(flash_attn_with_kvcache, q, k_cache, v_cache, cache_seqlens=seqlens,
                            causal=True, return_softmax_lse=True)
    for b in range(batch):
        kk, vv = k_cache[b:b + 1, :lens[b]], v_cache[b:b + 1, :lens[b]]
        ref, ref_lse = attention_ref(q[b:b + 1], kk, vv, causal=True)
        lowp, _ = attention_ref(q[b:b + 1], kk, vv, causal=True, upcast=False)
        assert_within_rule(out[b:b + 1], ref, lowp, name=f"out[{b}]")
        assert_lse_close(lse[b:b + 1], ref_lse, name=f"lse[{b}]")


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_append(paged):
    torch.manual_seed(12)
    batch, nheads, nheads_k, d, new = 2, 8, 2, 128, 3
    lens = [10, 190]
    cache_len, page = 256, 64
    q = randn(batch, new, nheads, d)
    k_new, v_new = randn(batch, new, nheads_k, d), randn(batch, new, nheads_k, d)
    k_dense, v_dense = randn(batch, cache_len, nheads_k, d), randn(batch, cache_len, nheads_k, d)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    if paged:
        pages_per_seq = cache_len // page
        perm = torch.randperm(batch * pages_per_seq, device=DEV)
        page_table = perm.view(batch, pages_per_seq).to(torch.int32)
        k_cache = torch.empty(batch * pages_per_seq, page, nheads_k, d, dtype=torch.bfloat16,
                              device=DEV)
        v_cache = torch.empty_like(k_cache)
        k_cache[perm] = k_dense.view(batch * pages_per_seq, page, nheads_k, d)
        v_cache[perm] = v_dense.view(batch * pages_per_seq, page, nheads_k, d)
    else:
        page_table = None
        k_cache, v_cache = k_dense.clone(), v_dense.clone()
    out = call_or_skip(flash_attn_with_kvcache, q, k_cache, v_cache, k=k_new, v=v_new,
                       cache_seqlens=seqlens, page_table=page_table, causal=True)

    def dense_view(cache):
        if not paged:
            return cache
        return cache[page_table.long()].view(batch, cache_len, nheads_k, d)

    kc, vc = dense_view(k_cache), dense_view(v_cache)
    for b in range(batch):
        n = lens[b]
        # The new rows were written at cache_seqlens; nothing else changed.
        assert torch.equal(kc[b, n:n + new], k_new[b]) and torch.equal(vc[b, n:n + new], v_new[b])
        assert torch.equal(kc[b, :n], k_dense[b, :n]) and torch.equal(kc[b, n + new:], k_dense[b, n + new:])
        kk, vv = kc[b:b + 1, :n + new], vc[b:b + 1, :n + new]
        ref, _ = attention_ref(q[b:b + 1], kk, vv, causal=True)
        lowp, _ = attention_ref(q[b:b + 1], kk, vv, causal=True, upcast=False)
        assert_within_rule(out[b:b + 1], ref, lowp, name=f"out[{b}]")


def test_kvcache_batch_idx():
    torch.manual_seed(13)
    q = randn(2, 1, 4, 128)
    k_cache, v_cache = randn(5, 128, 4, 128), randn(5, 128, 4, 128)
    idx = torch.tensor([4, 1], dtype=torch.int32, device=DEV)
    seqlens = torch.tensor([128, 40], dtype=torch.int32, device=DEV)
    out = call_or_skip(flash_attn_with_kvcache, q, k_cache, v_cache, cache_seqlens=seqlens,
                       cache_batch_idx=idx)
    for b, (row, n) in enumerate([(4, 128), (1, 40)]):
        kk, vv = k_cache[row:row + 1, :n], v_cache[row:row + 1, :n]
        ref, _ = attention_ref(q[b:b + 1], kk, vv)
        lowp, _ = attention_ref(q[b:b + 1], kk, vv, upcast=False)
        assert_within_rule(out[b:b + 1], ref, lowp, name=f"out[{b}]")


# ---- split-KV -----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_splits", [2, 3])
def test_num_splits(num_splits):
    torch.manual_seed(14)
    q, k, v = randn(2, 4, 8, 128), randn(2, 1000, 8, 128), randn(2, 1000, 8, 128)
    check_dense(q, k, v, num_splits=num_splits)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_combine(out_dtype):
    # Partial results of attention over three key chunks, merged.
    torch.manual_seed(15)
    batch, seqlen, nheads, d = 2, 16, 4, 128
    q = randn(batch, seqlen, nheads, d)
    chunks = [(randn(batch, n, nheads, d), randn(batch, n, nheads, d)) for n in (40, 100, 7)]
    outs, lses = [], []
    for k, v in chunks:
        o, l = attention_ref(q, k, v)
        outs.append(o.float())
        lses.append(l.float())
    out_partial = torch.stack(outs)  # (splits, batch, seqlen, nheads, d)
    lse_partial = torch.stack(lses)  # (splits, batch, nheads, seqlen)
    out, lse = call_or_skip(flash_attn_combine, out_partial, lse_partial, out_dtype=out_dtype)
    k_all = torch.cat([k for k, _ in chunks], dim=1)
    v_all = torch.cat([v for _, v in chunks], dim=1)
    ref, ref_lse = attention_ref(q, k_all, v_all)
    assert out.dtype == out_dtype and out.shape == ref.shape
    atol = 1e-5 if out_dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=1e-3 if atol > 1e-5 else 1e-5)
    assert_lse_close(lse, ref_lse)
    # out= is filled in place and returned.
    dst = torch.empty_like(out)
    res, _ = flash_attn_combine(out_partial, lse_partial, out=dst)
    assert res is dst and torch.equal(dst, out)

"""Invalid calls arrive as Python exceptions whose message is the core library's (or the
binding's, for what only torch can see) and starts with the offending argument's name:
ValueError for invalid arguments, NotImplementedError for valid requests this build lacks."""

import pytest

from hopattn_testing import require_hopper_extension

torch, hopattn = require_hopper_extension()

from hopattn import (  # noqa: E402
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
)

ops = torch.ops.hopattn
DEV = "cuda"
BF16 = torch.bfloat16


def qkv(batch=2, seqlen_q=64, seqlen_k=64, nheads=4, nheads_k=4, d=128, dv=None, dtype=BF16,
        device=DEV):
    q = torch.randn(batch, seqlen_q, nheads, d, dtype=dtype, device=device)
    k = torch.randn(batch, seqlen_k, nheads_k, d, dtype=dtype, device=device)
    v = torch.randn(batch, seqlen_k, nheads_k, dv or d, dtype=dtype, device=device)
    return q, k, v


def raises(exc, arg, fn, *args, **kwargs):
    """fn(...) raises exc whose message starts with 'arg:'; returns the message."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert msg.startswith(arg + ":"), f"expected a message about {arg!r}, got: {msg!r}"
    return msg


# ---- dtypes -------------------------------------------------------------------------------------


def test_fp32_q_is_value_error_naming_q():
    q, k, v = qkv(dtype=torch.float32)
    msg = raises(ValueError, "q", flash_attn_func, q, k, v)
    assert "fp32" in msg


def test_float64_q_has_no_core_dtype():
    q, k, v = qkv(dtype=torch.float64)
    msg = raises(ValueError, "q", flash_attn_func, q, k, v)
    assert "dtype" in msg


def test_k_dtype_differs_from_q():
    q, _, v = qkv()
    _, k, _ = qkv(dtype=torch.float16)
    raises(ValueError, "k", flash_attn_func, q, k, v)


# ---- shapes -------------------------------------------------------------------------------------


def test_mismatched_head_dims():
    q, _, v = qkv(d=128)
    _, k, _ = qkv(d=64)
    msg = raises(ValueError, "k", flash_attn_func, q, k, v)
    assert "head dim" in msg


def test_nheads_not_multiple_of_nheads_k():
    q, k, v = qkv(nheads=6, nheads_k=4)
    msg = raises(ValueError, "k", flash_attn_func, q, k, v)
    assert "multiple" in msg


def test_batch_mismatch():
    q, _, _ = qkv(batch=2)
    _, k, v = qkv(batch=3)
    raises(ValueError, "k", flash_attn_func, q, k, v)


def test_wrong_rank_q():
    q, k, v = qkv()
    raises(ValueError, "q", ops.fwd, q[0], k, v)


def test_unsupported_head_dim_is_not_implemented():
    # 72 is a valid head dim shape-wise, but no kernel is ever built for it.
    q, k, v = qkv(d=72)
    raises(NotImplementedError, "q", flash_attn_func, q, k, v)


# ---- memory layout ------------------------------------------------------------------------------


def test_non_contiguous_last_dim_through_the_op():
    q, k, v = qkv(d=256)
    q2 = q[..., ::2]  # head dim 128 with stride 2
    msg = raises(ValueError, "q", ops.fwd, q2, k[..., :128], v[..., :128])
    assert "contiguous" in msg


def test_misaligned_base_pointer():
    q, k, v = qkv()
    flat = torch.empty(q.numel() + 8, dtype=BF16, device=DEV)
    q_bad = flat[1:1 + q.numel()].view(q.shape)  # 2 bytes past a 16-byte boundary
    msg = raises(ValueError, "q", flash_attn_func, q_bad, k, v)
    assert "align" in msg


# ---- devices ------------------------------------------------------------------------------------


def test_cpu_q_names_q_and_device():
    q, k, v = qkv()
    msg = raises(ValueError, "q", flash_attn_func, q.cpu(), k, v)
    assert "device" in msg and "cpu" in msg


def test_cpu_k_names_k_and_device():
    q, k, v = qkv()
    msg = raises(ValueError, "k", flash_attn_func, q, k.cpu(), v)
    assert "device" in msg


def test_all_cpu_inputs():
    q, k, v = qkv(device="cpu")
    msg = raises(ValueError, "q", flash_attn_func, q, k, v)
    assert "CUDA" in msg


def test_other_gpu():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    q, k, v = qkv()
    msg = raises(ValueError, "v", flash_attn_func, q, k, v.to("cuda:1"))
    assert "cuda:1" in msg


# ---- scalar options -----------------------------------------------------------------------------


def test_bad_window():
    q, k, v = qkv()
    raises(ValueError, "window_left", flash_attn_func, q, k, v, window_size=(-2, -1))
    raises(ValueError, "window_right", flash_attn_func, q, k, v, window_size=(-1, -5))


def test_causal_with_right_window():
    q, k, v = qkv()
    raises(ValueError, "window_right", flash_attn_func, q, k, v, causal=True, window_size=(-1, 4))


def test_negative_softcap():
    q, k, v = qkv()
    raises(ValueError, "softcap", flash_attn_func, q, k, v, softcap=-1.0)


def test_non_finite_scale():
    q, k, v = qkv()
    raises(ValueError, "softmax_scale", flash_attn_func, q, k, v, softmax_scale=float("nan"))


def test_window_size_not_a_pair():
    q, k, v = qkv()
    raises(ValueError, "window_size", flash_attn_func, q, k, v, window_size=(1, 2, 3))


def test_negative_num_splits():
    q, k, v = qkv()
    raises(ValueError, "num_splits", flash_attn_func, q, k, v, num_splits=-1)


# ---- fp8 descale factors --------------------------------------------------------------------------


def test_descale_on_16bit_inputs():
    q, k, v = qkv()
    d = torch.ones(2, 4, dtype=torch.float32, device=DEV)
    raises(ValueError, "q_descale", flash_attn_func, q, k, v, q_descale=d)


def test_descale_wrong_shape_and_dtype():
    q, k, v = (t.to(torch.float8_e4m3fn) for t in qkv())
    raises(ValueError, "k_descale", flash_attn_func, q, k, v,
           k_descale=torch.ones(3, 4, device=DEV))
    raises(ValueError, "v_descale", flash_attn_func, q, k, v,
           v_descale=torch.ones(2, 4, dtype=torch.float16, device=DEV))


def test_block_descales_need_their_block_rows():
    q, k, v = (t.to(torch.float8_e4m3fn) for t in qkv())
    seqlen = q.shape[1]
    blocks = torch.ones(q.shape[0], q.shape[2], 3, device=DEV)  # three blocks of unknown size
    raises(ValueError, "q_block_rows", flash_attn_func, q, k, v, q_descale=blocks)
    kv_blocks = torch.ones(k.shape[0], k.shape[2], (k.shape[1] + 63) // 64, device=DEV)
    # K/V blocks must cover whole 128-key tiles.
    raises(ValueError, "block_descale.kv_block_rows", flash_attn_func, q, k, v, k_descale=kv_blocks,
           descale_block_rows=(0, 64))
    assert seqlen > 0


# ---- varlen -------------------------------------------------------------------------------------


def varlen_inputs(lens_q=(10, 30), lens_k=(20, 40), nheads=4, nheads_k=4, d=128):
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=DEV)
    q = torch.randn(sum(lens_q), nheads, d, dtype=BF16, device=DEV)
    k = torch.randn(sum(lens_k), nheads_k, d, dtype=BF16, device=DEV)
    v = torch.randn(sum(lens_k), nheads_k, d, dtype=BF16, device=DEV)
    return q, k, v, cu_q, cu_k, max(lens_q), max(lens_k)


def test_cu_seqlens_int64():
    q, k, v, cu_q, cu_k, mq, mk = varlen_inputs()
    msg = raises(ValueError, "cu_seqlens_q", flash_attn_varlen_func, q, k, v, cu_q.long(), cu_k,
                 mq, mk)
    assert "int32" in msg


def test_cu_seqlens_lengths_differ():
    q, k, v, cu_q, cu_k, mq, mk = varlen_inputs()
    raises(ValueError, "cu_seqlens_k", flash_attn_varlen_func, q, k, v, cu_q, cu_k[:2], mq, mk)


def test_cu_seqlens_k_missing():
    q, k, v, cu_q, _, mq, mk = varlen_inputs()
    raises(ValueError, "cu_seqlens_k", flash_attn_varlen_func, q, k, v, cu_q, None, mq, mk)


def test_cu_seqlens_on_cpu():
    q, k, v, cu_q, cu_k, mq, mk = varlen_inputs()
    msg = raises(ValueError, "cu_seqlens_k", flash_attn_varlen_func, q, k, v, cu_q, cu_k.cpu(),
                 mq, mk)
    assert "device" in msg


def test_seqused_wrong_length():
    q, k, v, cu_q, cu_k, mq, mk = varlen_inputs()
    used = torch.tensor([5], dtype=torch.int32, device=DEV)
    raises(ValueError, "seqused_k", flash_attn_varlen_func, q, k, v, cu_q, cu_k, mq, mk,
           seqused_k=used)


def test_varlen_with_dense_q():
    _, k, v, cu_q, cu_k, mq, mk = varlen_inputs()
    q4 = torch.randn(2, mq, 4, 128, dtype=BF16, device=DEV)
    raises(ValueError, "q", flash_attn_varlen_func, q4, k, v, cu_q, cu_k, mq, mk)


def test_negative_max_seqlen():
    q, k, v, cu_q, cu_k, mq, mk = varlen_inputs()
    raises(ValueError, "max_seqlen_q", flash_attn_varlen_func, q, k, v, cu_q, cu_k, -1, mk)


# ---- backward, kv cache, combine ----------------------------------------------------------------


def test_bwd_dout_shape():
    q, k, v = qkv()
    out = torch.empty_like(q)
    lse = torch.empty(2, 4, 64, dtype=torch.float32, device=DEV)
    raises(ValueError, "dout", ops.bwd, out[:, :32], q, k, v, out, lse)


def test_bwd_lse_dtype():
    q, k, v = qkv()
    out = torch.empty_like(q)
    lse = torch.empty(2, 4, 64, dtype=BF16, device=DEV)
    raises(ValueError, "lse", ops.bwd, out, q, k, v, out, lse)


def test_kvcache_new_k_without_v():
    q, k, v = qkv(seqlen_q=1)
    raises(ValueError, "v", flash_attn_with_kvcache, q, k, v, k=k[:, :1])


def test_fwd_refuses_k_new():
    # Appending writes into the cache: only fwd_kvcache declares that mutation.
    q, k, v = qkv(seqlen_q=1)
    raises(ValueError, "k_new", ops.fwd, q, k, v, k_new=k[:, :1], v_new=v[:, :1])


def test_combine_on_cpu():
    op = torch.zeros(2, 1, 8, 4, 128)
    lse = torch.zeros(2, 1, 4, 8)
    msg = raises(ValueError, "out_partial", flash_attn_combine, op, lse)
    assert "device" in msg


def test_combine_lse_on_other_device():
    op = torch.zeros(2, 1, 8, 4, 128, device=DEV)
    lse = torch.zeros(2, 1, 4, 8)
    raises(ValueError, "lse_partial", flash_attn_combine, op, lse)

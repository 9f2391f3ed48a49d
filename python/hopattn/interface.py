"""FlashAttention-3 compatible entry points.

Layouts (the ones FlashAttention users already have; the last dim must be contiguous):
    dense    q (batch, seqlen_q, nheads, head_dim), k/v (batch, seqlen_k, nheads_k, head_dim)
    varlen   q (total_q, nheads, head_dim), k/v (total_k, nheads_k, head_dim) with
             cu_seqlens_q/k (batch + 1,) int32 holding each sequence's start offset
    lse      float32 (batch, nheads, seqlen_q), or (nheads, total_q) for varlen

nheads must be a multiple of nheads_k (multi-query / grouped-query attention).
window_size = (left, right) limits each query to keys in [i - left, i + right] (aligned to the
bottom-right corner when seqlen_q != seqlen_k); -1 means unbounded. causal=True is right = 0.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from . import _ops

__all__ = [
    "quantize_fp8",
    "quantize_qkv_fp8",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_combine",
]


def _maybe_contiguous(x):
    # The kernels read rows with TMA: any batch/seq/head strides are fine, the last dim is not.
    return x.contiguous() if x is not None and x.stride(-1) != 1 else x


def _scale(softmax_scale: Optional[float], head_dim) -> float:
    # head_dim ** -0.5 rather than math.sqrt: stays symbolic under torch.compile(dynamic=True).
    return head_dim ** -0.5 if softmax_scale is None else softmax_scale


def _window(window_size: Sequence[int]) -> Tuple[int, int]:
    if len(window_size) != 2:
        raise ValueError(f"window_size: expected (left, right), got {window_size!r}")
    return int(window_size[0]), int(window_size[1])


def flash_attn_func(
    q,
    k,
    v,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Sequence[int] = (-1, -1),
    softcap: float = 0.0,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    num_splits: int = 1,
    pack_gqa: Optional[bool] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    descale_block_rows: Sequence[int] = (0, 0),
):
    """softmax(q k^T * softmax_scale + mask) v for fixed-length batches.

    q: (batch, seqlen_q, nheads, head_dim); k, v: (batch, seqlen_k, nheads_k, head_dim) in
    float16, bfloat16 or float8_e4m3fn. For float8_e4m3fn (head dims 64, 128, 256; bfloat16
    output) each of q/k/v_descale is optional and either float32 (batch, nheads_k), one factor
    per (batch, kv head) as in FlashAttention-3, or float32 (batch, heads, num_blocks) block
    descales as quantize_fp8 returns them, with descale_block_rows = (q rows, k/v rows) per
    block (k/v rows a multiple of 128; 0 when there is one block); see quantize_qkv_fp8.
    softmax_scale defaults to 1/sqrt(head_dim); softcap > 0
    replaces each score s by softcap * tanh(s / softcap). Differentiable in q, k and v.

    Returns out (batch, seqlen_q, nheads, head_dim), or (out, softmax_lse) with
    return_attn_probs=True, softmax_lse being float32 (batch, nheads, seqlen_q).
    """
    ops = _ops.require()
    q, k, v = (_maybe_contiguous(t) for t in (q, k, v))
    window_left, window_right = _window(window_size)
    out, lse = ops.fwd(
        q, k, v,
        softmax_scale=_scale(softmax_scale, q.shape[-1]),
        causal=causal,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
        q_descale=q_descale,
        k_descale=k_descale,
        v_descale=v_descale,
        num_splits=num_splits,
        pack_gqa=bool(pack_gqa),
        deterministic=deterministic,
        q_block_rows=int(descale_block_rows[0]),
        kv_block_rows=int(descale_block_rows[1]),
    )
    return (out, lse) if return_attn_probs else out


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    seqused_q=None,
    seqused_k=None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Sequence[int] = (-1, -1),
    softcap: float = 0.0,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    num_splits: int = 1,
    pack_gqa: Optional[bool] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    descale_block_rows: Sequence[int] = (0, 0),
):
    """Attention over packed variable-length sequences.

    q: (total_q, nheads, head_dim), k, v: (total_k, nheads_k, head_dim); cu_seqlens_q/k:
    int32 (batch + 1,) cumulative sequence starts (cu[0] = 0, cu[-1] = total); max_seqlen_q/k:
    upper bounds of the lengths. seqused_q/k (int32 (batch,)) optionally limit how many rows of
    each sequence are used. Differentiable in q, k and v.

    Returns out (total_q, nheads, head_dim), or (out, softmax_lse) with return_attn_probs=True,
    softmax_lse being float32 (nheads, total_q).
    """
    ops = _ops.require()
    q, k, v = (_maybe_contiguous(t) for t in (q, k, v))
    window_left, window_right = _window(window_size)
    out, lse = ops.fwd(
        q, k, v,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        seqused_q=seqused_q,
        seqused_k=seqused_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        softmax_scale=_scale(softmax_scale, q.shape[-1]),
        causal=causal,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
        q_descale=q_descale,
        k_descale=k_descale,
        v_descale=v_descale,
        num_splits=num_splits,
        pack_gqa=bool(pack_gqa),
        deterministic=deterministic,
        q_block_rows=int(descale_block_rows[0]),
        kv_block_rows=int(descale_block_rows[1]),
    )
    return (out, lse) if return_attn_probs else out


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    cache_seqlens: Union[None, int, "torch.Tensor"] = None,  # noqa: F821
    cache_batch_idx=None,
    page_table=None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Sequence[int] = (-1, -1),
    softcap: float = 0.0,
    num_splits: int = 0,
    pack_gqa: Optional[bool] = None,
    return_softmax_lse: bool = False,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """Attention of q against a KV cache, for decoding. Inference only (no gradient).

    q: (batch, seqlen_q, nheads, head_dim). k_cache, v_cache: (batch_cache, seqlen_cache,
    nheads_k, head_dim), or with page_table (batch, max_pages) int32 the paged layout
    (num_pages, page_size, nheads_k, head_dim). cache_seqlens: int32 (batch,) (or an int for
    all) current length of each cache row. cache_batch_idx: int32 (batch,) cache row of each
    batch entry. k, v: optional new keys/values (batch, seqlen_new, nheads_k, head_dim), written
    into the cache at cache_seqlens (in place) before attending. num_splits=0 lets the library
    choose the split-KV factor.

    Returns out (batch, seqlen_q, nheads, head_dim), or (out, softmax_lse) with
    return_softmax_lse=True.
    """
    ops = _ops.require()
    torch = _ops.torch
    if (k is None) != (v is None):
        raise ValueError(("v" if k is not None else "k")
                         + ": new keys and new values must be given together")
    q, k, v = (_maybe_contiguous(t) for t in (q, k, v))
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32,
                                   device=k_cache.device)
    window_left, window_right = _window(window_size)
    common = dict(
        softmax_scale=_scale(softmax_scale, q.shape[-1]),
        causal=causal,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
        q_descale=q_descale,
        k_descale=k_descale,
        v_descale=v_descale,
        cache_seqlens=cache_seqlens,
        cache_batch_idx=cache_batch_idx,
        page_table=page_table,
        num_splits=num_splits,
        pack_gqa=bool(pack_gqa),
    )
    if k is not None:
        # Writes k/v into k_cache/v_cache: the op's schema declares them mutated.
        out, lse = ops.fwd_kvcache(q, k_cache, v_cache, k_new=k, v_new=v, **common)
    else:
        out, lse = ops.fwd(q, k_cache, v_cache, **common)
    return (out, lse) if return_softmax_lse else out


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """Merges split-KV partial results.

    out_partial: float32 (num_splits, batch, seqlen, nheads, head_dim); lse_partial: float32
    (num_splits, batch, nheads, seqlen). Returns (out, softmax_lse): out (batch, seqlen, nheads,
    head_dim) in out_dtype (default float32, or out's dtype when out is given, which is then
    filled and returned), softmax_lse float32 (batch, nheads, seqlen).
    """
    ops = _ops.require()
    if out_dtype is None and out is not None:
        out_dtype = out.dtype
    result, lse = ops.combine(out_partial, lse_partial, out_dtype)
    if out is not None:
        out.copy_(result)
        result = out
    return result, lse


def quantize_qkv_fp8(q, k, v, q_block_rows: int = 0, kv_block_rows: int = 0, hadamard: bool = False,
                     seed: int = 0):
    """Quantize fp16/bf16 q, k, v (batch, seqlen, heads, head_dim) for the FP8 forward.

    Returns (q8, k8, v8, descales) where descales is a dict of keyword arguments for
    flash_attn_func: block descales of q_block_rows query rows and kv_block_rows key rows (a
    multiple of 128; 0 = one block per (batch, head)). hadamard=True rotates q and k with the
    same random signs (incoherent processing): attention is unchanged, outliers are spread.
        q8, k8, v8, d = hopattn.quantize_qkv_fp8(q, k, v, 64, 128, hadamard=True)
        out = hopattn.flash_attn_func(q8, k8, v8, causal=True, **d)
    """
    q8, qd = quantize_fp8(q, q_block_rows, hadamard, seed)
    k8, kd = quantize_fp8(k, kv_block_rows, hadamard, seed)
    v8, vd = quantize_fp8(v, kv_block_rows, False, seed)
    return q8, k8, v8, dict(q_descale=qd, k_descale=kd, v_descale=vd,
                            descale_block_rows=(q_block_rows, kv_block_rows))


def quantize_fp8(x, block_rows: int = 0, hadamard: bool = False, seed: int = 0):
    """Quantize a (batch, seqlen, nheads, head_dim) fp16/bf16 tensor to float8_e4m3fn.

    Returns (x_fp8, descale) with descale of shape (batch, nheads, num_blocks), one per block of
    `block_rows` rows of one head (0: one per (batch, head)), such that x ~= x_fp8 * descale.
    With hadamard=True each row is first multiplied by diag(random signs from `seed`) and the
    normalized Hadamard matrix (incoherent processing; head_dim 64, 128 or 256): quantize Q and K
    with the same seed, V without it, and attention is unchanged.
    """
    ops = _ops.require()
    return ops.quantize_fp8(x, block_rows, hadamard, seed)

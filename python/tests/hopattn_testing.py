"""Shared pieces of the hopattn Python tests: module-level skips, a float64 reference attention,
and the accuracy rule.

Accuracy rule (same as the C++ suites): with ref computed in float64 from the (upcast) inputs and
lowp the same plain torch math done in the input dtype,
    max|out - ref| <= 2 * max|lowp - ref| + 1e-5
i.e. the kernel may be at most twice as far from the exact answer as naive low-precision math.
"""

from __future__ import annotations

import math

import pytest


def require_hopper_extension():
    """Skips the calling test module unless torch, a compute-capability-9.0 GPU and the built
    extension are all there. Returns (torch, hopattn)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device", allow_module_level=True)
    cc = torch.cuda.get_device_capability()
    if cc != (9, 0):
        pytest.skip(f"hopattn needs compute capability 9.0, this GPU is {cc}", allow_module_level=True)
    hopattn = pytest.importorskip("hopattn")
    if not hopattn.extension_available():
        pytest.skip(f"hopattn._C is not built ({hopattn.extension_error()})", allow_module_level=True)
    return torch, hopattn


def call_or_skip(fn, *args, **kwargs):
    """Calls fn; a NotImplementedError (a kernel this build does not have yet) skips the test."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as e:
        pytest.skip(f"not supported yet: {e}")


# ---- reference attention ------------------------------------------------------------------------


def visible_mask(torch, seqlen_q, seqlen_k, causal=False, window=(-1, -1), device=None):
    """(seqlen_q, seqlen_k) bool, True where query i may see key j. Bottom-right aligned:
    i + shift - left <= j <= i + shift + right with shift = seqlen_k - seqlen_q, -1 = unbounded;
    causal means right = 0."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(seqlen_q, device=device).view(-1, 1) + (seqlen_k - seqlen_q)
    j = torch.arange(seqlen_k, device=device).view(1, -1)
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def attention_ref(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                  upcast=True, q_descale=None, k_descale=None, v_descale=None):
    """softmax(q k^T * scale (+ softcap) + mask) v on dense (batch, seqlen, heads, dim) inputs.

    upcast=True computes in float64 and returns float64 (out, lse); upcast=False does the same
    math in the inputs' dtype (the "naive low precision" baseline) and returns out in that dtype.
    Descale factors (batch, nheads_k) multiply the (e4m3) inputs per kv head.
    Rows that see no key give out = 0 and lse = -inf.
    """
    import torch

    batch, seqlen_q, nheads, head_dim = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    group = nheads // nheads_k
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)

    def prep(t, descale, heads_per_scale):
        if t.dtype == torch.float8_e4m3fn or upcast:
            t = t.to(torch.float64 if upcast else torch.bfloat16)
        if descale is not None:
            d = descale.to(t.dtype).repeat_interleave(heads_per_scale, dim=1)  # (batch, heads)
            t = t * d[:, None, :, None]
        return t

    q = prep(q, q_descale, group)
    k = prep(k, k_descale, 1)
    v = prep(v, v_descale, 1)
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)

    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    ok = visible_mask(torch, seqlen_q, seqlen_k, causal, window, device=q.device)
    scores = scores.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(scores.double() if upcast else scores.float(), dim=-1)
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no visible key -> 0
    out = torch.einsum("bhqk,bkhd->bqhd", p, v)
    return out, lse


def assert_within_fp8_bound(out, q, k, v, ref, *, causal=False, name="out"):
    """Every element of the e4m3 kernel's out within the per-element error model of the C++ FP8
    test (tests/gpu/test_fwd_fp8.cpp): P rounded to e4m3 (max(2^-4 p, 2^-10) per key), the FP8
    WGMMA's score error ((d / 32) 2^-13 scale max_j sum_d |q_d k_jd|, + 1e-4), the output's 16-bit
    rounding. Rows with few keys are where the rule of thumb of assert_within_rule is too tight:
    there e4m3's 3-bit P does not average out. Dense (batch, seqlen, heads, dim) inputs, the
    default softmax scale, no descales, window or softcap; seqlen_k > 0."""
    import torch

    assert torch.isfinite(out).all(), f"{name}: has NaN/inf"
    seqlen_q, seqlen_k, head_dim = q.shape[1], k.shape[1], q.shape[3]
    group = q.shape[2] // k.shape[2]
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2).abs()
    scale = 1.0 / math.sqrt(head_dim)
    ok = visible_mask(torch, seqlen_q, seqlen_k, causal, (-1, -1), device=q.device)  # (q, k)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    s = s.masked_fill(~ok, float("-inf"))
    p = torch.exp(s - s.amax(-1, keepdim=True)).nan_to_num(0.0)  # rows with no key: all 0
    l = p.sum(-1)  # (b, h, q)
    abs_dot = torch.einsum("bqhd,bkhd->bhqk", q.abs(), k.abs()).masked_fill(~ok, 0.0).amax(-1)
    s_err = (head_dim // 32) * 2.0 ** -13 * scale * abs_dot + 1e-4
    quant = torch.einsum("bhqk,bkhd->bqhd", torch.clamp(p * 2.0 ** -4, min=2.0 ** -10) * ok, v)
    mass = torch.einsum("bhqk,bkhd->bqhd", p, v)
    l_q = l.permute(0, 2, 1)[..., None]  # (b, q, h, 1)
    err_q = s_err.permute(0, 2, 1)[..., None]
    bound = torch.where(l_q > 0, (quant + err_q * mass) / l_q.clamp(min=1e-300), torch.zeros_like(quant))
    bound = bound + 2.0 ** -8 * ref.abs() + 1e-5
    err = (out.double() - ref).abs()
    bad = (~(err <= bound)).sum().item()  # NaN counts as outside
    worst = (err / bound).max().item()
    assert bad == 0, f"{name}: {bad} elements outside the e4m3 bound (worst at {worst:.2f}x the bound)"


def max_err(a, b) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def assert_within_rule(out, ref, lowp, name="out", factor=2.0, atol=1e-5):
    """max|out - ref| <= factor * max|lowp - ref| + atol, and out is finite."""
    import torch

    assert torch.isfinite(out).all(), f"{name}: has NaN/inf"
    err = max_err(out, ref)
    base = max_err(lowp, ref)
    assert err <= factor * base + atol, (
        f"{name}: max|out - ref| = {err:.3e} > {factor} * max|lowp - ref| ({base:.3e}) + {atol}")


def assert_lse_close(lse, ref_lse, name="lse"):
    """lse agrees with the float64 logsumexp where some key is visible (ref finite)."""
    import torch

    finite = torch.isfinite(ref_lse)
    assert torch.isfinite(lse[finite]).all(), f"{name}: non-finite where keys are visible"
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], atol=2e-3, rtol=1e-3,
                               msg=lambda m: f"{name}: {m}")

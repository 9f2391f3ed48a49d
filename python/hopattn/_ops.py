"""Loads the compiled operators (torch.ops.hopattn.*) and registers, for each of them, a fake
kernel (output shapes and dtypes, for torch.compile and meta tensors) and, for the forward, an
autograd formula that calls the backward operator.

The C++ library names this module in ``m.set_python_module("hopattn._ops")``: torch imports it
when it needs a fake kernel, and refuses registrations made from any other module.
"""

from __future__ import annotations

import importlib

try:
    import torch
except ImportError as _e:  # the package imports without torch; calls say what is missing
    torch = None
    _IMPORT_ERROR: Exception | None = _e
else:
    _IMPORT_ERROR = None

_C = None
if torch is not None:
    try:
        # Loading the library defines torch.ops.hopattn.*.
        _C = importlib.import_module(__package__ + "._C")
    except (ImportError, OSError) as _e:
        _IMPORT_ERROR = _e

_BUILD_HINT = (
    "hopattn's compiled extension (hopattn._C) is not available{why}. Build the core library and "
    "the extension first:\n"
    "    cmake -S <repo> -B <repo>/build -G Ninja && cmake --build <repo>/build --target hopattn\n"
    "    HOPATTN_BUILD_DIR=<repo>/build pip install --no-build-isolation <repo>/python\n"
    "(see python/README.md)"
)


def extension_available() -> bool:
    """True when the compiled operators are loaded (torch.ops.hopattn.* exist)."""
    return _C is not None


def extension_error() -> Exception | None:
    """Why the extension could not be loaded, or None when it is."""
    return _IMPORT_ERROR


def require():
    """Returns torch.ops.hopattn, or raises ImportError saying how to build the extension."""
    if _C is None:
        why = f" ({type(_IMPORT_ERROR).__name__}: {_IMPORT_ERROR})" if _IMPORT_ERROR else ""
        if torch is None:
            raise ImportError("hopattn needs PyTorch, which is not installed" + why)
        raise ImportError(_BUILD_HINT.format(why=why)) from _IMPORT_ERROR
    return torch.ops.hopattn


def _out_dtype_for(dtype):
    # e4m3 inputs produce bf16 outputs, every other dtype its own.
    return torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype


def _register() -> None:
    lib = "hopattn::"

    # ---- fake kernels: shapes and dtypes only -----------------------------------------------

    @torch.library.register_fake(lib + "fwd")
    def _fwd_fake(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, seqused_q=None, seqused_k=None,
                  max_seqlen_q=0, max_seqlen_k=0, softmax_scale=0.0, causal=False, window_left=-1,
                  window_right=-1, softcap=0.0, q_descale=None, k_descale=None, v_descale=None,
                  page_table=None, cache_seqlens=None, cache_batch_idx=None, k_new=None, v_new=None,
                  num_splits=1, pack_gqa=False, deterministic=False, q_block_rows=0,
                  kv_block_rows=0):
        if k_new is not None or v_new is not None:
            raise ValueError(("k_new" if k_new is not None else "v_new")
                             + ": appending to a KV cache writes k and v: use hopattn::fwd_kvcache")
        varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        if q.dim() != (3 if varlen else 4):
            layout = "(total_q, nheads, head_dim)" if varlen else "(batch, seqlen_q, nheads, head_dim)"
            raise ValueError(f"q: expected a rank-{3 if varlen else 4} tensor {layout}, "
                             f"got shape {tuple(q.shape)}")
        out = q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=_out_dtype_for(q.dtype))
        if varlen:
            lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        else:
            lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        return out, lse

    @torch.library.register_fake(lib + "fwd_kvcache")
    def _fwd_kvcache_fake(q, k_cache, v_cache, k_new=None, v_new=None, cache_seqlens=None,
                          cache_batch_idx=None, page_table=None, q_descale=None, k_descale=None,
                          v_descale=None, softmax_scale=0.0, causal=False, window_left=-1,
                          window_right=-1, softcap=0.0, num_splits=0, pack_gqa=False):
        if q.dim() != 4:
            raise ValueError("q: expected a rank-4 tensor (batch, seqlen_q, nheads, head_dim), "
                             f"got shape {tuple(q.shape)}")
        out = q.new_empty((*q.shape[:-1], v_cache.shape[-1]), dtype=_out_dtype_for(q.dtype))
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        return out, lse

    @torch.library.register_fake(lib + "bwd")
    def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q=None, cu_seqlens_k=None, seqused_q=None,
                  seqused_k=None, max_seqlen_q=0, max_seqlen_k=0, softmax_scale=0.0, causal=False,
                  window_left=-1, window_right=-1, softcap=0.0, deterministic=False):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    @torch.library.register_fake(lib + "combine")
    def _combine_fake(out_partial, lse_partial, out_dtype=None):
        out = out_partial.new_empty(out_partial.shape[1:],
                                    dtype=out_dtype if out_dtype is not None else out_partial.dtype)
        lse = lse_partial.new_empty(lse_partial.shape[1:], dtype=torch.float32)
        return out, lse

    @torch.library.register_fake(lib + "quantize_fp8")
    def _quantize_fp8_fake(x, block_rows=0, hadamard=False, seed=0):
        nb = 1 if block_rows <= 0 else (x.shape[1] + block_rows - 1) // block_rows
        out = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
        return out, x.new_empty((x.shape[0], x.shape[2], nb), dtype=torch.float32)

    # ---- autograd of the forward -------------------------------------------------------------

    fwd_arg_names = [a.name for a in torch.ops.hopattn.fwd.default._schema.arguments]
    # Options the backward kernel has no gradient for.
    no_grad_options = ("q_descale", "k_descale", "v_descale", "page_table", "cache_seqlens",
                       "cache_batch_idx")
    bwd_options = ("max_seqlen_q", "max_seqlen_k", "softmax_scale", "causal", "window_left",
                   "window_right", "softcap", "deterministic")

    def _fwd_setup_context(ctx, inputs, output):
        args = dict(zip(fwd_arg_names, inputs))
        out, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(args["q"], args["k"], args["v"], out, lse, args["cu_seqlens_q"],
                              args["cu_seqlens_k"], args["seqused_q"], args["seqused_k"])
        ctx.bwd_options = {name: args[name] for name in bwd_options}
        ctx.unsupported = next((n for n in no_grad_options if args[n] is not None), None)
        if ctx.unsupported is None and args["q"].dtype == torch.float8_e4m3fn:
            ctx.unsupported = "q"

    def _fwd_backward(ctx, dout, dlse):
        if ctx.unsupported is not None:
            raise NotImplementedError(
                f"{ctx.unsupported}: hopattn has no backward for calls with {ctx.unsupported} "
                "(KV-cache and e4m3 attention are inference-only)")
        q, k, v, out, lse, cu_q, cu_k, used_q, used_k = ctx.saved_tensors
        # The incoming gradient may be any view (even an expand of a scalar); the kernel wants
        # a dense tensor.
        dq, dk, dv = torch.ops.hopattn.bwd(dout.contiguous(), q, k, v, out, lse, cu_q, cu_k,
                                           used_q, used_k, **ctx.bwd_options)
        return (dq, dk, dv) + (None,) * (len(fwd_arg_names) - 3)

    torch.library.register_autograd(lib + "fwd", _fwd_backward, setup_context=_fwd_setup_context)


if _C is not None:
    _register()

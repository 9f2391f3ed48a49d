"""hopattn: FlashAttention-3 style attention for NVIDIA Hopper GPUs (sm_90a).

    from hopattn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)

The operators are also reachable as torch.ops.hopattn.{fwd, fwd_kvcache, bwd, combine}.
Importing this package works without the compiled extension; calling a function then raises
ImportError saying how to build it (see extension_available()).
"""

from ._version import __version__
from ._ops import extension_available, extension_error
from .interface import (
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
    quantize_fp8,
    quantize_qkv_fp8,
)

__all__ = [
    "__version__",
    "extension_available",
    "extension_error",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_combine",
    "quantize_fp8",
    "quantize_qkv_fp8",
]

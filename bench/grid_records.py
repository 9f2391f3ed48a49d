"""Which benchmark records are the paper's grid: shared by plot.py and vs_anchors.py."""


def is_plain_grid_record(r: dict) -> bool:
    """Dense self-attention without window, softcap or ablation variant (what the grid runs)."""
    return (r.get("seqlen_k", r["seqlen"]) == r["seqlen"]
            and r.get("window_left", -1) == -1 and r.get("window_right", -1) == -1
            and not r.get("softcap") and r.get("variant", "default") == "default")

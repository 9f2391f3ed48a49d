"""bench/vs_anchors.py on synthetic records and anchors (no GPU, no PyTorch needed)."""
import json
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "bench" / "vs_anchors.py"


def write_anchors(directory):
    fa3 = [{"hdim": 128, "causal": False, "seqlen": 1024, "fa3_fwd": 600.0, "fa3_bwd": 400.0,
            "fa3_fp8_fwd": 900.0, "cudnn_fwd": 500.0}]
    peers = [{"hdim": 128, "causal": False, "seqlen": 1024, "impl": "cudnn", "fwd_tflops": 505.0,
              "bwd_tflops": 320.0}]
    (directory / "2026-01-01-h200-fa3-official.json").write_text(json.dumps(fa3))
    (directory / "2026-01-01-h200-peers.json").write_text(json.dumps(peers))


def record(impl, direction, tflops, **kw):
    r = {"gpu": "NVIDIA H200", "impl": impl, "direction": direction, "dtype": "bf16", "hdim": 128,
         "causal": False, "seqlen": 1024, "batch": 16, "nheads": 16, "nheads_k": 16, "tflops": tflops}
    r.update(kw)
    return r


def run(results, anchors):
    return subprocess.run([sys.executable, str(TOOL), str(results), "--anchors-dir", str(anchors)],
                          capture_output=True, text=True)


def test_cells_against_each_anchor_column(tmp_path):
    write_anchors(tmp_path)
    records = [record("cudnn", "fwd", 550.0), record("hopattn", "fwd", 660.0),
               record("cudnn", "bwd", 300.0), record("hopattn", "bwd", 360.0),
               record("hopattn-fp8", "fwd", 990.0),
               record("hopattn", "fwd", 1.0, nheads_k=4),  # GQA: no anchor, must be ignored
               record("hopattn", "fwd", 1.0, window_left=64),  # a window: not the grid
               record("hopattn", "bwd", 1.0, dq_from_stored_ds=1)]  # a knob variant: not the rule's
    results = tmp_path / "r.json"
    results.write_text(json.dumps(records))
    out = run(results, tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # forward: 660 / 600 = 1.10; (660 / 550) / (600 / 500) = 1.00
    fwd = text.split("## hopattn fwd")[1].split("##")[0]
    assert "| 128 | no | - | 1.10 |" in fwd and "| 128 | no | - | 1.00 |" in fwd
    # backward: 360 / 400 = 0.90 over the peers file's cuDNN: (360 / 300) / (400 / 320) = 0.96
    bwd = text.split("## hopattn bwd")[1].split("##")[0]
    assert "| 128 | no | - | 0.90 |" in bwd and "| 128 | no | - | 0.96 |" in bwd
    assert "0 of 1 cells at or above 1.00" in bwd
    # FP8 against the FP8 column over cuDNN bf16: 990 / 900 = 1.10; (990 / 550) / (900 / 500) = 1.00
    fp8 = text.split("## hopattn-fp8 fwd")[1]
    assert "| 128 | no | - | 1.10 |" in fp8 and "| 128 | no | - | 1.00 |" in fp8


def test_hopattn_bench_e4m3_records_meet_the_fp8_column(tmp_path):
    # hopattn-bench names its e4m3 runs "hopattn" with dtype e4m3: 945 / 900 = 1.05, not 945 / 600.
    write_anchors(tmp_path)
    results = tmp_path / "r.json"
    results.write_text(json.dumps([record("hopattn", "fwd", 945.0, dtype="e4m3", kernel="fwd_sm90_e4m3_hd128",
                                          window_left=-1, window_right=-1, softcap=0.0, variant="default")]))
    out = run(results, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "## hopattn-fp8 fwd against FlashAttention-3's FP8 forward" in out.stdout
    assert "| 128 | no | - | 1.05 |" in out.stdout and "## hopattn fwd" not in out.stdout


def test_missing_anchors_is_an_error(tmp_path):
    results = tmp_path / "r.json"
    results.write_text(json.dumps([record("hopattn", "fwd", 600.0)]))
    out = run(results, tmp_path)
    assert out.returncode != 0 and "no *-h200-fa3-official.json" in out.stderr

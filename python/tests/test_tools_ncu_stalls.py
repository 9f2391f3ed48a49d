"""tools/ncu-stalls on a small synthetic ncu source page (no GPU, no PyTorch needed)."""
import csv
import gzip
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "ncu-stalls"
HEADER = ["Address", "Source", "# Samples", "Instructions Executed", "stall_wait", "stall_no_inst",
          "stall_barrier", "stall_wait (Not Issued)"]


def write_page(path, rows, zipped=False):
    opener = gzip.open if zipped else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void toy_kernel(int)"])
        w.writerow(HEADER)
        w.writerows(rows)


def run(path, *args):
    out = subprocess.run([sys.executable, str(TOOL), str(path), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_reasons_lines_and_pieces(tmp_path):
    # Two executed pieces (0x00-0x10 and 0x30) split by an unexecuted line at 0x20; the second
    # piece waits for instructions in 6 of its 8 samples.
    rows = [
        ["0x1000", "FFMA R1, R2, R3, R4", "10", "64", "7", "1", "2", "0"],
        ["0x1010", "BAR.SYNC 0x1", "30", "64", "0", "0", "30", "0"],
        ["0x1020", "EXIT", "0", "0", "0", "0", "0", "0"],
        ["0x1030", "STSM.16.M88.4 [R0], R4", "8", "8", "2", "6", "0", "99"],
    ]
    page = tmp_path / "toy-sass.csv.gz"
    write_page(page, rows, zipped=True)
    text = run(page, "--top", "2", "--min-share", "0")
    assert "4 SASS lines" in text and "48 warp-state samples" in text
    assert "barrier                     32  66.7%" in text          # 2 + 30 of 48
    assert "no_inst                      7  14.6%" in text
    assert "0x000010       30  barrier" in text                      # the line with the most samples first
    pieces = [l.split() for l in text.splitlines() if l.strip().startswith(("0.00", "0.05"))]
    assert [p[2] for p in pieces] == ["2", "1"]                      # lines per piece
    assert pieces[1][-1] == "75.0%"                                  # 6 of 8 samples wait for instructions


def test_rejects_other_files(tmp_path):
    page = tmp_path / "not-ncu.csv"
    page.write_text("a,b\n1,2\n")
    out = subprocess.run([sys.executable, str(TOOL), str(page)], capture_output=True, text=True)
    assert out.returncode != 0 and "expected a kernel-name line" in out.stderr

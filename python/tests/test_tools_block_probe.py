"""tools/block-probe-summary on synthetic block-probe stamps (no GPU, no PyTorch needed)."""
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "block-probe-summary"
TURN, BOUNDARY, TILE = 1000, 600, 8


def stamps(j):
    """A toy schedule: one block per turn, tiles of 8 blocks, a boundary adding 600 cycles."""
    k_waited = 10_000 + j * TURN + (j // TILE) * BOUNDARY
    v_issued = k_waited - 1500
    return [v_issued, v_issued - 200,          # V_j, K_j issued
            v_issued + 700, v_issued + 750,    # V_j landed, its V^T slot free (thread 32)
            v_issued + 1400, v_issued + 1450,  # V^T_j written: thread 32's warp, thread 0's warp
            k_waited, k_waited + 300,          # K_j waited, freed
            v_issued + 1450, v_issued + 1900]  # P V_j issued, V^T_j freed


def write(path, blocks, launches=2):
    with open(path, "w") as f:
        f.write("fwd e4m3 256 none 1024 16 8 1.0 900.0 fwd_sm90_e4m3_hd256\n")
        for launch in range(launches):
            for j in range(blocks):
                shift = 0 if launch == launches - 1 else 99_999  # only the last launch counts
                f.write(f"blockprobe {j}: " + " ".join(str(s + shift) for s in stamps(j)) + "\n")


def run(path, *args):
    out = subprocess.run([sys.executable, str(TOOL), str(path), *args], capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def test_turn_boundaries_and_chain(tmp_path):
    path = tmp_path / "probe.txt"
    write(path, 32)
    rc, text = run(path, "--stages", "2")
    assert rc == 0, text
    assert "32 blocks stamped; loop turn (median K-wait gap) 1000 SM cycles" in text
    assert "3 tile boundaries, each 600 cycles over a turn" in text
    lines = {l.split(" median")[0].strip(): l for l in text.splitlines() if " median " in l}
    assert "median    1700" in lines["K_j issued -> K_j waited (K's slack)"]
    assert "median     700" in lines["L: V_j issued -> landed"]
    # V_{j+2} issued two turns after V_j (within a tile): 2000 cycles.
    assert "median    2000" in lines["chain: V_j issued -> V_{j+stages} issued"]
    assert "median       0" in lines["V^T_j written -> P V_j issued (~0: waits V^T)"]


def test_no_stamps_is_an_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("fwd bf16 128 none 1024 16 8 1.0 500.0 fwd_sm90_bf16_hd128\n")
    rc, text = run(path)
    assert rc != 0 and "no blockprobe lines" in text

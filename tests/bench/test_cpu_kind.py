"""CPU kinds: the kind read from /proc/cpuinfo samples (Zen 4, Zen 5, an AVX2-only EPYC, Xeons with and without
AMX), in words, the nearest committed kind, and what ran beside a measurement (other processes' share of the
machine, from /proc/stat)."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.bench.neighbours import other_work
from playground.blas import first_processor
from playground.machine import cpu_kind, kind_words, nearest_kind

FLAGS_AVX512 = "fpu sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni"
CPUINFO = {
    "amd-zen4-avx512-bf16": ("AuthenticAMD", 25, 17, "AMD EPYC", f"{FLAGS_AVX512} avx512_bf16"),
    "amd-zen5-avx512-bf16": ("AuthenticAMD", 26, 2, "AMD EPYC", f"{FLAGS_AVX512} avx512_bf16 avx512_vp2intersect"),
    "amd-zen3-avx2": ("AuthenticAMD", 25, 1, "AMD EPYC", "fpu sse2 avx fma avx2"),
    "intel-avx512-bf16-amx": ("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8480+",
                              f"{FLAGS_AVX512} avx512_bf16 amx_bf16 amx_tile amx_int8"),
    "intel-avx512": ("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Processor", FLAGS_AVX512),
}


def _cpuinfo_text(vendor: str, family: int, model: int, name: str, flags: str) -> str:
    one = (f"vendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: {name}\n"
           f"flags\t\t: {flags}\n")
    return f"processor\t: 0\n{one}\nprocessor\t: 1\n{one}"


@pytest.mark.parametrize("kind", CPUINFO)
def test_the_cpu_kind_is_read_from_cpuinfo(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(_cpuinfo_text(*CPUINFO[kind]))
    assert cpu_kind(first_processor(path)) == kind


def test_a_kind_in_words_names_generation_family_and_units() -> None:
    assert kind_words("amd-zen4-avx512-bf16") == "AMD Zen 4, family 25: AVX-512, AVX-512 BF16, no AMX"
    assert kind_words("amd-zen5-avx512-bf16").startswith("AMD Zen 5, family 26")
    assert kind_words("amd-zen3-avx2") == "AMD Zen 3, family 25: AVX2, no AMX"
    assert kind_words("intel-avx512-bf16-amx") == "Intel: AVX-512, AVX-512 BF16, AMX"
    assert cpu_kind({}) == "unknown-noavx2" and cpu_kind({"CPU implementer": "0x41"}) == "arm-noavx2"


def test_the_nearest_kind_shares_the_vector_and_matrix_units() -> None:
    committed = ["amd-zen5-avx512-bf16", "intel-avx512", "amd-zen3-avx2"]
    assert nearest_kind("amd-zen5-avx512-bf16", committed) == "amd-zen5-avx512-bf16"  # the very kind
    assert nearest_kind("amd-zen4-avx512-bf16", committed) == "amd-zen5-avx512-bf16"  # bf16 and vendor alike
    assert nearest_kind("intel-avx512-bf16", committed) == "amd-zen5-avx512-bf16"  # bf16 first
    assert nearest_kind("intel-avx512", committed) == "intel-avx512"
    assert nearest_kind("intel-avx2", committed) == "amd-zen3-avx2"
    assert nearest_kind("intel-avx512-bf16-amx", committed) is None  # AMX: no committed kind has it
    assert nearest_kind("arm-noavx2", committed) is None


def test_other_work_is_the_machines_busy_time_less_ours(tmp_path: Path) -> None:
    stat, loadavg = tmp_path / "stat", tmp_path / "loadavg"
    loadavg.write_text("1.50 1.00 0.50 2/100 123\n")
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\n")
    with other_work(stat, loadavg) as record:
        stat.write_text("cpu  100000 0 100 800 0 0 0 0 0 0\n")  # every tick since busy, far more than ours
    assert record.other_share is not None and record.other_share > 0.9 and record.beside
    assert record.load_average == [1.5, 1.5] and record.to_dict()["beside_other_work"] is True
    with other_work(tmp_path / "missing", loadavg) as unread:
        pass
    assert unread.other_share is None and unread.beside is None


def test_our_childrens_cpu_time_is_ours_while_they_still_run() -> None:
    """An engine's own processes (vLLM's engine core runs in a child) are not other work: the CPU time of live
    processes below this one counts as ours (neighbours._descendant_ticks), before they end and are waited for."""
    import os
    import subprocess
    import sys
    import time

    from playground.bench.neighbours import _descendant_ticks

    before = _descendant_ticks()
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                              "while time.process_time() < 0.5: pass\nprint('burnt', flush=True)\ntime.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "burnt"  # half a second of CPU spent, and still running
        time.sleep(0.05)
        assert _descendant_ticks() - before >= 0.4 * os.sysconf("SC_CLK_TCK")
    finally:
        child.kill()
        child.wait()

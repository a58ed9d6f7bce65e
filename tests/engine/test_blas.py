"""The CPU matmul dispatch setting (`playground.blas`): set on AMD processors with AVX2, never over the user's."""

from __future__ import annotations

from pathlib import Path

from playground.blas import cpu_flags, first_processor, prefer_avx2_kernels

AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx fma avx2\n\nprocessor\t: 1\n"
INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx fma avx2 avx512f\n"
OLD_AMD = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx\n"


def _cpuinfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


def test_cpu_flags_reads_the_first_processor(tmp_path: Path) -> None:
    assert (cpu_flags(first_processor(_cpuinfo(tmp_path, AMD)))
            == ("AuthenticAMD", {"fpu", "sse2", "avx", "fma", "avx2"}))
    assert first_processor(_cpuinfo(tmp_path, INTEL + "model name\t: Xeon\n"))["model name"] == "Xeon"
    assert cpu_flags(first_processor(tmp_path / "missing")) == ("", set())


def test_avx2_path_only_on_amd_with_avx2_and_never_over_the_user(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    assert prefer_avx2_kernels(env, _cpuinfo(tmp_path, AMD)) and env == {"MKL_CBWR": "AVX2"}
    for text in (INTEL, OLD_AMD):
        env = {}
        assert not prefer_avx2_kernels(env, _cpuinfo(tmp_path, text)) and env == {}
    env = {"MKL_CBWR": "COMPATIBLE"}
    assert not prefer_avx2_kernels(env, _cpuinfo(tmp_path, AMD)) and env == {"MKL_CBWR": "COMPATIBLE"}
    assert not prefer_avx2_kernels({}, tmp_path / "missing")  # not Linux: nothing to read, nothing set

"""The C library of the int4 path (engine/native.py, engine/csrc/): built here with the machine's C compiler, once per
machine and source, in the folder the entry points name; where it cannot be had, one line says why and the default
target keeps float32 weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from playground.engine import Target, native


def test_without_a_compiler_one_line_says_why_and_float32_runs(tiny_root: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert native._load(enabled=False) == (None, "turned off (PLAYGROUND_NATIVE=0)")
    monkeypatch.setenv("CC", "/bin/false")
    lib, problem = native._load(cache=tmp_path)
    assert lib is None and problem.startswith("/bin/false failed") and "\n" not in problem
    monkeypatch.setattr(native, "_loaded", (None, problem))
    target = Target.load(str(tiny_root / "target"), weights="auto")
    assert target.weights == "float32" and target.weights_why == f"int4 weights: no C library: {problem}"
    assert target.forward([5, 6, 7], target.new_cache()).logits.shape[0] == 3


def test_a_folder_it_cannot_write_is_one_line_too(lib, tmp_path: Path) -> None:
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    lib, problem = native._load(cache=blocked / "native")
    assert lib is None and problem.startswith(f"cannot build it in {blocked / 'native'}: ") and "\n" not in problem


def test_the_library_is_built_once_per_machine_and_source(lib, tmp_path: Path) -> None:
    first, problem = native._load(cache=tmp_path)
    assert problem is None and first is not None
    files = list(tmp_path.glob("playground-*.so"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    assert native._load(cache=tmp_path)[1] is None and files[0].stat().st_mtime_ns == stamp  # found, not built again


def test_a_compiler_without_openmp_builds_it_on_one_thread(lib, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Where `-fopenmp` fails (a compiler without OpenMP), the sources build without it: the same numbers, on the
    calling thread whatever `threads` asks for."""
    monkeypatch.setattr(native, "OPENMP", "-fno-such-option-here")
    without_openmp, problem = native._load(cache=tmp_path)
    assert problem is None and without_openmp is not None and "openmp" not in native.instruction_path(without_openmp)
    g = torch.Generator().manual_seed(3)
    w, x = torch.randn(21, 64, generator=g), torch.randn(3, 64, generator=g)
    outs = []
    for library in (without_openmp, lib):
        packed = torch.empty(library.pg_q8_bytes(21, 64), dtype=torch.uint8)
        library.pg_pack_q8(w.data_ptr(), 21, 64, packed.data_ptr())
        out = torch.empty(3, 21)
        assert library.pg_product(8, packed.data_ptr(), 21, 64, x.data_ptr(), 3, out.data_ptr(), 2) == 0
        outs.append(out)
    assert torch.equal(outs[0], outs[1]) and torch.allclose(outs[0], x @ w.T, rtol=0.05, atol=0.2)


def test_the_entry_points_hand_the_engine_its_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PLAYGROUND_NATIVE=0 and PLAYGROUND_CACHE_DIR reach the engine through `flags.apply_engine_settings` (the CLI's
    and app.py's), the engine reading no setting itself."""
    from playground import flags

    monkeypatch.setattr(native, "_settings", dict(native._settings))
    monkeypatch.setattr(native, "_loaded", None)
    monkeypatch.setenv("PLAYGROUND_NATIVE", "0")
    flags.apply_engine_settings()
    assert native.load() == (None, "turned off (PLAYGROUND_NATIVE=0)")
    monkeypatch.setenv("PLAYGROUND_NATIVE", "1")
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    flags.apply_engine_settings()
    lib, problem = native.load()
    if lib is None:
        pytest.skip(f"no C library here: {problem}")
    assert list((tmp_path / "native").glob("playground-*.so"))
    monkeypatch.setattr(native, "_loaded", None)  # the next test's loads build their own again

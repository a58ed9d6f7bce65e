"""Command-line entry point: ``python -m playground COMMAND ...`` (generate, serve, vllm-command, vllm, train, bench,
bench-engines, replay, fingerprint, space), or ``eagle-playground ...`` after ``pip install -e .`` (pyproject.toml)."""

from __future__ import annotations

import sys

from playground import flags, generate, serve, space
from playground.bench import cli as bench_cli
from playground.bench import engines as bench_engines
from playground.bench import replay as bench_replay
from playground.health import measure as health_measure
from playground.serve import vllm_cli
from playground.train import cli as train_cli


def main(argv: list[str] | None = None) -> int:
    prog = "eagle-playground" if sys.argv[0].endswith("eagle-playground") else "python -m playground"
    parser = flags.OneLineParser(prog=prog, description="EAGLE Playground command line")
    commands = parser.add_subparsers(dest="command", required=True)
    generate.register(commands)
    serve.register(commands)
    vllm_cli.register(commands)
    train_cli.register(commands)
    bench_cli.register(commands)
    bench_engines.register(commands)
    bench_replay.register(commands)
    health_measure.register(commands)
    space.register(commands)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["vllm"]:  # everything after it is vLLM's own command line (its options, errors and exit codes)
        try:
            vllm_cli.run_vllm(argv[1:])
        except flags.UsageError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    args = parser.parse_args(argv)
    flags.apply_engine_settings(getattr(args, "threads", None))
    from playground.engine import CheckpointError, TargetError

    try:
        args.func(args)
    except (flags.UsageError, space.SpaceError, CheckpointError, TargetError, ValueError, KeyError,
            FileNotFoundError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

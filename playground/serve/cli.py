"""``python -m playground serve``: an OpenAI-compatible server over the local engine, speaking vLLM's dialect.

It serves one preset (or `--target` with `--drafter-path`: a pair of one's own) with one drafter and a fixed k, like
`vllm serve … --speculative-config …` (plus, with `--min-draft-prob`, adaptive draft length for every request), so
the remote backend (and any OpenAI client) can be tried and tested without a GPU:

- POST /v1/completions, /v1/chat/completions: streaming (SSE, one chunk per engine step) or not; `return_token_ids`
  adds each chunk's token ids; `stream_options.include_usage` adds a final usage chunk with vLLM's per-request
  `metrics.speculative_decoding` ('detailed');
- POST /tokenize, /detokenize; GET /v1/models, /health;
- GET /metrics: vLLM's spec-decode counters (`vllm:spec_decode_num_drafts_total`, ...) and token counters.

The pieces: `requests.py` (what is accepted), `responses.py` (the shapes sent back), `engine.py` (the engine and
its counters), `app.py` (FastAPI routes, limits, admission). Served by uvicorn.

Also ``python -m playground vllm-command``: check a preset's drafter against its target and print the matching
`vllm serve` command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import socket
import sys

from playground import flags
from playground.drafting import (
    DEFAULT_DRAFTER,
    PLAIN,
    method_for,
    method_of,
    parameters_for_other_method,
    parameters_problem,
)
from playground.presets import DEFAULT, get_preset
from playground.request.check import FIXED_K, default_choice

from .defaults import parse_override
from .engine import Limits, load_engine


def serve(args: argparse.Namespace) -> None:
    preset = flags.target_preset(args.preset, args.target)
    if args.drafter_path:
        drafter, k_auto = args.drafter or DEFAULT_DRAFTER, args.k == "auto"
    else:  # what is left unsaid, as `generate` and the Chat take it (request.default_choice)
        chains = not (getattr(args, "tree_nodes", 0) or args.min_draft_prob)
        drafter, k_auto = default_choice(preset, args.drafter, args.k, chains)
    k = 1 if k_auto else (args.k if isinstance(args.k, int) else FIXED_K)  # k auto: chosen as the engine loads
    limits = Limits(max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout, max_running=args.max_running,
                    max_waiting=args.max_waiting, default_max_tokens=args.default_max_tokens)
    tree, override = flags.tree_shape(args, k), parse_override(args.override_generation_config)
    # the port is taken before the model loads: a busy one is refused at once, in one line, and none is lost meanwhile
    with flags.listening_socket(args.host, args.port) as sock:
        # as `vllm serve MODEL` names the model MODEL, an own target is served by the name it was given
        engine = load_engine(preset, drafter, k,
                             args.served_model_name or args.target, args.min_draft_prob, args.drafter_path, tree,
                             args.generation_config, override, k_auto)
        _serve_on(sock, engine, limits, args)


def _serve_on(sock: socket.socket, engine, limits: Limits, args: argparse.Namespace) -> None:
    import uvicorn

    from .app import build_app

    api_keys = args.api_key or [os.environ.get("VLLM_API_KEY", "")]  # --api-key over VLLM_API_KEY, as in vLLM
    app = build_app(engine, limits, api_keys)
    config = uvicorn.Config(app, host=args.host, port=args.port, access_log=args.verbose,
                            log_level="info" if args.verbose else "warning", timeout_keep_alive=5,
                            limit_concurrency=limits.max_running + limits.max_waiting + 16)
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            host, port = sock.getsockname()[:2]
            adaptive = f", adaptive {engine.min_draft_prob:g}" if engine.min_draft_prob else ""
            drafting = (f"tree of {engine.tree.nodes} nodes, depth {engine.tree.depth}, top-{engine.tree.topk}"
                        if engine.tree else f"k={engine.k}")
            if engine.auto is not None:
                print(f"--k auto: {engine.auto.why}", flush=True)
            print(f"serving {engine.model_name} (drafter {engine.drafter}, {drafting}{adaptive}; sampling defaults: "
                  f"{engine.sampling.describe()}) on http://{host}:{port}", flush=True)
        try:
            await task
        except SystemExit:  # uvicorn's own start-up failure, which it has logged in one line
            raise flags.UsageError(f"the server on {args.host}:{args.port} stopped while starting") from None

    asyncio.run(run())


def vllm_command(args: argparse.Namespace) -> None:
    from playground.backends.vllm import serve_command
    from playground.request.fit import check_drafter_fits

    preset = get_preset(args.preset)
    settings = flags.method_settings(args)
    problem = (parameters_problem(dict(settings)) or parameters_for_other_method(args.drafter, [n for n, _ in settings])
               or (method_of(args.drafter).engine_problem("vllm") if method_of(args.drafter) else None))
    if problem:
        raise flags.UsageError(problem)
    drafter = None if args.drafter == PLAIN else preset.drafters.get(args.drafter, args.drafter)
    if drafter is not None and method_for(drafter).checkpoint and not args.no_check:
        for warning in check_drafter_fits(preset.target, drafter).warnings:
            print(f"warning: {warning}", file=sys.stderr)
    print(shlex.join(serve_command(preset, drafter, args.k, args.host, args.port, settings=settings)))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="an OpenAI-compatible server over the local engine (vLLM's metrics)")
    p.add_argument("--preset", default=DEFAULT, help=f"a local-engine preset (default: {DEFAULT})")
    flags.add_threads_flag(p)
    flags.add_pair_flags(p)
    p.add_argument("--drafter", help="none, a drafter name of the preset, a method that needs no checkpoint, or auto "
                   "(k auto chooses the method too); default: auto on our engine, chosen at start-up (the method and k "
                   "predicted fastest here, plain decoding where none pays)")
    p.add_argument("--k", type=flags.k_or_auto, help="speculative tokens per step (fixed for the server, as in "
                   "vLLM), or auto: the k predicted fastest on this machine, chosen at start-up (plain decoding "
                   f"where none pays); default: auto where it can choose, else {FIXED_K}")
    flags.add_min_draft_prob_flag(p)
    flags.add_tree_flags(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=flags.tcp_port, default=8000, help="0 = any free port (the URL is printed); a port "
                   "in use is refused before the model loads")
    p.add_argument("--served-model-name", help="the model name clients send (default: the preset's name)")
    p.add_argument("--generation-config", choices=["auto", "vllm"], default="auto",
                   help="auto: requests that leave out temperature or top_p get the model's recommended values (its "
                        "generation_config.json, else the preset's model card); vllm: OpenAI's 1.0 and 1.0")
    p.add_argument("--override-generation-config", metavar="JSON",
                   help="sampling defaults over those, e.g. '{\"temperature\": 0.5}' (temperature, top_p)")
    p.add_argument("--api-key", nargs="+", metavar="KEY", help="require 'Authorization: Bearer KEY' (one of the "
                   "keys) on the paths vLLM guards, /v1/... (401 otherwise); /health, /tokenize, /detokenize and "
                   "/metrics stay open, as in vLLM (default: VLLM_API_KEY, as vLLM reads it; none: all open)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    limits = Limits()
    p.add_argument("--max-body-bytes", type=int, default=limits.max_body_bytes,
                   help="larger request bodies are refused with 413 (default: %(default)s)")
    p.add_argument("--body-timeout", type=float, default=limits.body_timeout_s,
                   help="seconds a request body may take to arrive before 408 (default: %(default)s)")
    p.add_argument("--max-running", type=int, default=limits.max_running,
                   help="requests decoding at once (default: %(default)s)")
    p.add_argument("--max-waiting", type=int, default=limits.max_waiting,
                   help="requests queued beyond those; more get 429 (default: %(default)s)")
    p.add_argument("--default-max-tokens", type=int, default=limits.default_max_tokens,
                   help="answer budget when a request names none (capped by the context; default: %(default)s)")
    p.set_defaults(func=serve)

    p = subparsers.add_parser("vllm-command", help="check a preset's drafter against its target, print `vllm serve`")
    p.add_argument("--preset", default="kimi-k2.6")
    p.add_argument("--drafter", default=DEFAULT_DRAFTER, help="none, a drafter name of the preset, a folder / Hub id, "
                   "or ngram (prompt lookup)")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    flags.add_method_flags(p)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=flags.tcp_port, default=8000)
    p.add_argument("--no-check", action="store_true", help="skip reading the two config.json files")
    p.set_defaults(func=vllm_command)

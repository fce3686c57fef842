"""`onyxia web MODEL|FOLDER|PLAN -o DIR`: a folder that runs the model in a web page or Node
(onyxia/web/bundle.py; an LLM folder: onyxia/web/llm_bundle.py). onyxia/cli.py wires it in with
`add_web_parser(subparsers, model_args, load)`; errors are OnyxiaErrors the main command reports.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

import numpy as np

from onyxia.errors import CliError


def add_web_parser(sub, model_args: Callable[[argparse.ArgumentParser], None],
                   load: Callable[[argparse.Namespace], tuple]) -> argparse.ArgumentParser:
    """The `web` subcommand; `load(args)`: (graph or None for a plan file, compiled plan) of
    args.model at args.dim / args.static (the main command's loader)."""
    p = sub.add_parser("web", help="write a folder that runs the model in a web page or Node: plan, weights, "
                       "onyxia.js, index.html and the sample inputs it runs (sample_inputs.npz); for an LLM "
                       "folder, a page that streams generated text")
    model_args(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="sample input (default: random)")
    p.add_argument("--prompt", help="an LLM folder: the page's default prompt")
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N",
                   help="an LLM folder: tokens the page generates")
    p.add_argument("--max-length", type=int, default=None, metavar="L", help="an LLM folder: prompt + generated "
                   "tokens at most, the KV cache rows allocated (default: the folder's max_length)")
    p.add_argument("--decoder", metavar="FILE|DTYPE", help="an LLM folder's ONNX file when it has several")
    p.set_defaults(func=lambda args: cmd_web(args, load))
    return p


def cmd_web(args: argparse.Namespace, load: Callable[[argparse.Namespace], tuple]) -> int:
    from onyxia.web.bundle import write_demo

    if Path(args.model).is_dir():
        from onyxia.web.llm_bundle import write_llm_demo

        out = write_llm_demo(args.model, args.output, prompt=args.prompt, max_new_tokens=args.max_new_tokens,
                             max_length=args.max_length, decoder=args.decoder)
        print(f"web folder written to {out}: serve it over HTTP (python -m http.server -d {out}) and open index.html")
        return 0
    # A compiled plan (.onyxia) is rendered as it is (its dims: the ones it was compiled at).
    _graph, compiled = load(args)
    if _graph is None and (args.dim or args.static):
        raise CliError(f"{args.model} is a compiled plan: its dims are the ones it was compiled at (change them "
                       "in the page with updateDimensions); --dim/--static apply to ONNX models")
    feeds = {name: np.load(path, allow_pickle=False) for name, _, path in (i.partition("=") for i in args.input or ())}
    out = write_demo(compiled, args.output, feeds or None)
    print(f"web folder written to {out}: serve it over HTTP (python -m http.server -d {out}) and open index.html")
    return 0

"""``python -m polytf.model_zoo NAME [--batch B | --batch none | --sizes MxKxN] [--saved-model] -o PATH``:
write a zoo model as a frozen GraphDef (or, with ``--saved-model``, as a SavedModel directory);
``--batch none`` keeps the batch (and a BERT encoder's sequence) ``None``, as a serving export
has it (:mod:`polytf.model_zoo.dynamic_models`)."""

from __future__ import annotations

import argparse
import sys

from polytf.errors import PolytfError
from polytf.model_zoo.freeze import MODEL_NAMES, SIZED_MODELS, write_model_with_info


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1024x1024x1024"`` -> ``(1024, 1024, 1024)``; raises ValueError on anything else."""
    parts = text.lower().replace("×", "x").split("x")
    if not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"sizes must be positive integers joined by 'x' (e.g. 1024x1024x1024), not {text!r}")
    sizes = tuple(int(p) for p in parts)
    if min(sizes) < 1:
        raise ValueError(f"sizes must be positive, not {text!r}")
    return sizes


def _batch(text: str) -> int | None:
    """``--batch``: a whole number, or ``none`` (None)."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number nor none") from None


def _write_dynamic(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--batch none``: the model frozen with its None dimensions."""
    from polytf.model_zoo.dynamic_models import DYNAMIC_MODELS, write_dynamic_model

    if args.name not in DYNAMIC_MODELS or args.sizes is not None or args.saved_model:
        parser.error(f"--batch none is for {', '.join(DYNAMIC_MODELS)} as a .pb, without --sizes or --saved-model")
    print(write_dynamic_model(args.name, args.output))
    for name, shape, dtype in DYNAMIC_MODELS[args.name]:
        print(f"input: {name}:{','.join('?' if size is None else str(size) for size in shape)}" + ("" if dtype == "float32" else f" ({dtype})"))
    print("output: Identity")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m polytf.model_zoo",
        description="Write a test model with deterministic random weights as a frozen TensorFlow GraphDef (.pb). "
        "Every model has placeholder 'input' (matmul: 'a' and 'b') and output node 'Identity'.",
    )
    parser.add_argument("name", choices=MODEL_NAMES, help="which model")
    parser.add_argument(
        "--batch",
        type=_batch,
        default=1,
        help="leading input dimension (default 1; for odd_matmul: m, default 37), or none: left None, known only at the call "
        "(cifar_cnn, mobilenet_v2, resnet50, transformer_encoder; bert_encoder: batch and sequence)",
    )
    parser.add_argument("--sizes", metavar="MxKxN", help="matmul only: a is [M, K], b is [K, N] (default 256x256x256)")
    parser.add_argument(
        "--saved-model",
        action="store_true",
        help="write a SavedModel directory (signature 'serving_default', output key 'output') instead of a frozen .pb",
    )
    parser.add_argument("-o", "--output", required=True, help="the .pb file (with --saved-model: the directory) to write")
    args = parser.parse_args(argv)
    if args.batch is None:
        return _write_dynamic(parser, args)
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    sizes = None
    if args.sizes is not None:
        if args.name not in SIZED_MODELS:
            parser.error(f"--sizes is for {', '.join(SIZED_MODELS)} only; {args.name} takes --batch")
        try:
            sizes = parse_sizes(args.sizes)
        except ValueError as error:
            parser.error(str(error))
    elif args.name in SIZED_MODELS and args.batch != 1:
        parser.error(f"{args.name} takes --sizes {'x'.join(SIZED_MODELS[args.name])}, not --batch")
    if args.saved_model:
        if args.name in SIZED_MODELS:
            parser.error(f"--saved-model does not apply to {args.name} (it has no weights)")
        from polytf.model_zoo.saved_models import write_saved_model

        try:
            print(write_saved_model(args.name, args.output, batch=args.batch))
        except (PolytfError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        info = write_model_with_info(args.name, args.output, batch=args.batch, sizes=sizes)
    except (PolytfError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(info.path)
    for (name, shape), dtype in zip(info.placeholders, info.placeholder_dtypes):
        print(f"input: {name}:{','.join(str(d) for d in shape)}" + ("" if dtype == "float32" else f" ({dtype})"))
    print(f"output: {', '.join(info.output_names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

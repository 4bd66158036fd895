"""``python -m polytf.model_zoo NAME [--batch B] -o PATH``: write a zoo model as a frozen GraphDef."""

from __future__ import annotations

import argparse
import sys

from polytf.errors import PolytfError
from polytf.model_zoo.freeze import MODEL_NAMES, write_model_with_info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m polytf.model_zoo",
        description="Write a test model with deterministic random weights as a frozen TensorFlow GraphDef (.pb). "
        "Every model has placeholder 'input' and output node 'Identity'.",
    )
    parser.add_argument("name", choices=MODEL_NAMES, help="which model")
    parser.add_argument("--batch", type=int, default=1, help="leading input dimension (default 1; for odd_matmul: m, default 37)")
    parser.add_argument("-o", "--output", required=True, help="the .pb file to write")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    try:
        info = write_model_with_info(args.name, args.output, batch=args.batch)
    except PolytfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    shape = ",".join(str(d) for d in info.input_shape)
    print(info.path)
    print(f"input: {info.input_name}:{shape}")
    print(f"output: {', '.join(info.output_names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""python -m alignment.cli.lora_combiner --model_path BASE --lora_path ADAPTER --output_path OUT [--is_rm] [--bf16]:
a saved LoRA adapter merged into its base with PEFT's merge_and_unload and committed as a plain Hugging Face
folder (OpenRLHF's lora_combiner; alignment/models/combine.py)."""

from __future__ import annotations

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import LoraCombinerConfig, parse_args


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(LoraCombinerConfig, argv, prog="alignment.cli.lora_combiner")
    check_outputs(cfg)
    from alignment.models.combine import combine

    manifest = combine(cfg)
    print(cfg.ckpt.output_path)
    return manifest


if __name__ == "__main__":
    run_main(main)

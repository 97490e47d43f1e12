"""The bad-input corpus, the tools' cases (batch_inference, evaluate, interactive_chat, import_model, lora_combiner):
each case's name, the CLI, its argv (@MODEL@, @WORK@ and the bad files' names filled in by tests/test_bad_input.py,
which joins the stage families' tables), the text its one error line must hold, and whether it runs as a real
subprocess."""

from __future__ import annotations

from tests.bad_input_commands import EVAL, GEN

# (name, CLI, argv, what the one line must contain, run as a real subprocess): one case a line reads as a table
# fmt: off
TOOL_CASES = [
    # argparse: an unknown flag, a value of the wrong type, a choice that does not exist
    ("batch_unknown_eval_task", "batch_inference", [*GEN, "--eval_task", "classify"],
     "--eval_task: invalid choice: 'classify'", True),
    ("evaluate_generate_without_reward", "evaluate", EVAL, "--eval_task generate scores the responses: add "
     "--remote_rm_url reward_func.py|URL (with --label_key), --reward_pretrain RM_DIR, or only --label_key", False),
    ("evaluate_perplexity_without_responses", "evaluate", [*EVAL, "--eval_task", "perplexity"],
     "--eval_task perplexity needs the responses: set --output_key", False),
    ("evaluate_csft_on_pairs", "evaluate", [*EVAL, "--eval_task", "pairs", "--enable_csft"],
     "--eval_task pairs generates nothing: drop one of them", False),
    # what this machine cannot run: said before any model loads
    ("chat_4bit_without_cuda", "interactive_chat", ["--pretrain", "@MODEL@", "--load_in_4bit"],
     "--load_in_4bit needs a CUDA GPU", False),
    # importing a model: a folder that holds none
    ("import_folder_without_a_model", "import_model", ["@BAD@/no_data", "--save_path", "@WORK@/imported"],
     "is not a model: no config.json and no .gguf file", False),
    ("import_config_without_tokenizer", "import_model", ["@BAD@/config_only", "--save_path", "@WORK@/imported"],
     "no tokenizer next to the weights", False),
    ("chat_without_a_chat_template", "interactive_chat", ["--pretrain", "@BAD@/no_template", "--apply_chat_template"],
     "no chat template", False),
    # where things are: model, data and output paths
    ("batch_output_path_ftpx", "batch_inference", [*GEN, "--output_path", "ftpx://h/gen"], "--output_path ftpx://",
     False),
    # outputs that would replace a file, an input model or the checkpoints (the commit replaces the whole folder)
    ("batch_output_path_is_a_file", "batch_inference", [*GEN, "--output_path", "@BAD@/notes.txt"],
     "--output_path @BAD@/notes.txt: is a file; pass a directory path", False),
    # a reward_func file, called once before any group is placed (alignment/cli/preflight.py)
    ("batch_null_prompt", "batch_inference", [*GEN, "--dataset", "@BAD@/null_prompt.jsonl"],
     "null_prompt.jsonl row 1: --input_key 'input' is null; expected a string", False),
    # distillation, LoRA merging, the optimizer
    ("lora_combiner_not_an_adapter", "lora_combiner", ["--model_path", "@MODEL@", "--lora_path", "@MODEL@",
                                                       "--output_path", "@WORK@/merged"],
     "--lora_path @MODEL@: no adapter_config.json there", False),
    # issue 62, item 7: what reached a traceback, a misleading line or a run that trained on nothing
    ("batch_output_path_read_only", "batch_inference", [*GEN, "--output_path", "@RO@/gen"],
     "--output_path @RO@/gen: cannot create files in @RO@", False),
    # images (docs/vision.md): before any model loads, named with the file and row
    ("eval_images_pairs", "evaluate", [*EVAL, "--max_images_per_prompt", "1", "--eval_task", "pairs"],
     "images are built for --eval_task generate", False),
]
# fmt: on

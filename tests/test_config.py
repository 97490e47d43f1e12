"""The config schema: CLI flags with OpenRLHF names, YAML files, validation messages, the wandb key
moved out of the command line."""

import json
import subprocess
import sys

import pytest

from alignment.cli.common import argv_without_wandb_key
from alignment.config import ConfigError, SFTConfig, config_to_argv, parse_args
from alignment.config.base import public_dict
from alignment.config.tracking import WANDB_SWITCHES
from tests.conftest import REPO, python_env

# The SFT command line of OpenRLHF's README, only model and data paths changed.
OPENRLHF_SFT = [
    "--max_len",
    "4096",
    "--dataset",
    "data.jsonl",
    "--input_key",
    "question",
    "--output_key",
    "response",
    "--input_template",
    "User: {}\nAssistant: ",
    "--train_batch_size",
    "256",
    "--micro_train_batch_size",
    "2",
    "--max_samples",
    "500000",
    "--pretrain",
    "model_dir",
    "--save_path",
    "./checkpoint/llama3-8b-sft",
    "--save_steps",
    "-1",
    "--logging_steps",
    "1",
    "--eval_steps",
    "-1",
    "--zero_stage",
    "2",
    "--max_epochs",
    "1",
    "--packing_samples",
    "--bf16",
    "--flash_attn",
    "--learning_rate",
    "5e-6",
    "--gradient_checkpointing",
]


def test_openrlhf_sft_flags_parse():
    cfg = parse_args(SFTConfig, OPENRLHF_SFT)
    assert cfg.max_len == 4096 and cfg.input_key == "question" and cfg.packing_samples and cfg.bf16
    assert cfg.input_template == "User: {}\nAssistant: " and cfg.learning_rate == 5e-6 and cfg.zero_stage == 2


def test_yaml_then_flags_precedence(tmp_path):
    f = tmp_path / "sft.yaml"
    f.write_text("pretrain: a\ndataset: d.jsonl\noutput_key: out\nlearning_rate: 1e-4\ntarget_modules: q_proj,v_proj\n")
    cfg = parse_args(SFTConfig, ["--config", str(f), "--learning_rate", "2e-4"])
    assert cfg.learning_rate == 2e-4 and cfg.pretrain == "a" and cfg.target_modules == ["q_proj", "v_proj"]


def test_roundtrip_argv():
    cfg = parse_args(SFTConfig, OPENRLHF_SFT)
    again = parse_args(SFTConfig, config_to_argv(cfg))
    assert again == cfg


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--dataset", "d"], "--pretrain is required"),
        (
            ["--pretrain", "m", "--dataset", "a,b", "--dataset_probs", "0.5"],
            "--dataset_probs has 1 values for 2 datasets",
        ),
        (["--pretrain", "m", "--dataset", "d", "--input_template", "no slot"], "has no '{}'"),
        (["--pretrain", "m", "--dataset", "d", "--lora_dropout", "1.5"], "--lora_dropout 1.5"),
    ],
)
def test_validation_names_the_flag(argv, needle):
    with pytest.raises(ConfigError, match=None) as e:
        parse_args(SFTConfig, argv)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_yaml_key(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("pretrian: a\n")
    with pytest.raises(ConfigError, match="unknown option 'pretrian'"):
        parse_args(SFTConfig, ["--config", str(f)])


def test_batch_divisibility_message():
    cfg = parse_args(
        SFTConfig, ["--pretrain", "m", "--dataset", "d", "--train_batch_size", "12", "--micro_train_batch_size", "4"]
    )
    assert cfg.accumulation_steps(world_size=1) == 3
    with pytest.raises(
        ConfigError, match=r"--train_batch_size 12 is not divisible by --micro_train_batch_size 4 x world size 2"
    ):
        cfg.accumulation_steps(world_size=2)


def test_secret_field_masked():
    cfg = parse_args(SFTConfig, ["--pretrain", "m", "--dataset", "d", "--use_wandb", "planted-key-123"])
    assert "planted-key-123" not in str(public_dict(cfg))


@pytest.mark.parametrize(
    "args, moved, key",
    [
        (["--use_wandb", "k3y", "--x"], ["--use_wandb", "env", "--x"], "k3y"),
        (["--use_wandb=k3y"], ["--use_wandb=env"], "k3y"),
        (["--use_wand", "k3y"], ["--use_wand", "env"], "k3y"),  # argparse's prefix matching
        (["--use_wandb", "offline"], ["--use_wandb", "offline"], None),  # switches are not keys
        (["--use_wandb", "ENV"], ["--use_wandb", "ENV"], None),
        (["--use_wandb", "--bf16"], ["--use_wandb", "--bf16"], None),  # no value: argparse's error
        (["--use_", "k3y"], ["--use_", "k3y"], None),  # ambiguous: not ours to read
    ],
)
def test_wandb_key_is_found_on_the_command_line(args, moved, key):
    assert argv_without_wandb_key(args) == (moved, key)


def test_a_wandb_key_on_the_command_line_leaves_argv_at_start(tmp_path):
    """The CLI re-executes itself (same PID) with the key in WANDB_API_KEY and `--use_wandb env` in
    argv; the process that goes on (here: to refuse a bad flag) has no key in /proc/<pid>/cmdline.
    A sitecustomize records every interpreter start of the process: its PID, cmdline and key."""
    key, log = "SECRETKEY123", tmp_path / "starts.jsonl"
    (tmp_path / "sitecustomize.py").write_text(
        "import json, os\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps([os.getpid(), open('/proc/self/cmdline', 'rb').read().decode(),\n"
        "                        os.environ.get('WANDB_API_KEY')]) + '\\n')\n"
    )
    env = python_env(PYTHONPATH=f"{tmp_path}:{REPO}")
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-X", "utf8", "-m", "alignment.cli.train_sft", "--use_wandb", key, "--no_such_flag"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    starts = [json.loads(line) for line in log.read_text().splitlines()]
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.startswith("error: unrecognized argument --no_such_flag"), proc.stderr
    assert key not in proc.stdout + proc.stderr
    assert len(starts) == 2 and starts[0][0] == starts[1][0], starts  # one re-exec, same PID
    first, then = (s[1].split("\0")[:-1] for s in starts)
    assert key in first and starts[0][2] is None
    assert (
        then == [sys.executable, "-X", "utf8", "-m", "alignment.cli.train_sft", "--use_wandb", "env", "--no_such_flag"]
        and starts[1][2] == key
    )
    cfg = parse_args(SFTConfig, ["--pretrain", "m", "--dataset", "d", "--use_wandb", "env"])
    assert cfg.use_wandb == "env" and cfg.use_wandb.lower() in WANDB_SWITCHES  # the key is read from the env


RECIPE_SCHEMAS = {
    "sft": "SFTConfig",
    "rm": "RMConfig",
    "ppo": "PPOConfig",
    "grpo": "PPOConfig",
    "agent": "PPOConfig",
    "dpo": "DPOConfig",
    "kto": "KTOConfig",
    "generate": "BatchInferenceConfig",
    "score": "BatchInferenceConfig",
    "tiny_base": "TinyBaseConfig",
    "kd": "KDConfig",
    "opd": "OPDConfig",
    "evaluate": "EvaluateConfig",
}


def _recipe_files():
    from tests.conftest import REPO

    return sorted((p.parent.name, p.stem) for p in (REPO / "deployments" / "recipes").glob("*/*.yaml"))


@pytest.mark.parametrize("recipe, role", _recipe_files())
def test_shipped_recipe_files_load_into_their_schema(recipe, role):
    """Every deployments/recipes/<recipe>/<role>.yaml is valid YAML whose keys are its stage's flags (a
    broken comment line once failed only the slow iterative-DPO flow tests)."""
    import alignment.config as config
    from alignment.config import load_yaml
    from tests.conftest import REPO

    values = load_yaml(
        getattr(config, RECIPE_SCHEMAS[role]), REPO / "deployments" / "recipes" / recipe / f"{role}.yaml"
    )
    assert values


@pytest.mark.parametrize("recipe", ["tiny", "smollm2", "llama3-8b", "tiny-csft", "tiny-idpo", "tiny-rs", "tiny-vision"])
def test_a_stage_job_config_round_trips_through_its_yaml(recipe, tmp_path):
    """A flow's stage job reads its resolved config from <stage dir>/config.yaml: the YAML rebuilds
    the exact config the task validated, for every stage of every shipped recipe."""
    from alignflow.tasks.orchestration.recipes import load_recipe
    from alignflow.tasks.orchestration.stage_spec import STAGES, build_config, job_config
    from alignment.config.cli import config_to_yaml, load_yaml

    rec = load_recipe(recipe)
    roles = {"generate": "batch_inference", "score": "batch_inference", **{s: s for s in STAGES}}
    checked = 0
    for role, stage in roles.items():
        if not rec.has(role):
            continue
        given = {} if stage == "tiny_base" else {"pretrain": str(tmp_path)}
        if stage in ("sft", "dpo") and recipe in ("tiny-csft", "tiny-idpo", "tiny-rs"):  # the flow's generated data
            (tmp_path / "rows.jsonl").write_text("{}\n")
            given["dataset"] = str(tmp_path / "rows.jsonl")
        if stage == "ppo":
            given["reward_pretrain"] = str(tmp_path)
        if stage in ("kd", "opd"):  # the distill flow's `teacher`
            given["teacher_model"] = str(tmp_path)
        cfg = job_config(stage, build_config(stage, rec.file(role), given), "s3://bucket/run/stage-0123", "run")
        (tmp_path / "config.yaml").write_text(config_to_yaml(cfg))
        assert STAGES[stage].config(**load_yaml(STAGES[stage].config, tmp_path / "config.yaml")) == cfg, role
        checked += 1
    assert checked >= 2


def test_zero_stage_unset_is_0_on_one_rank_and_2_otherwise():
    """ZeRO-1/2 on a single rank partition nothing and only add copies: unset --zero_stage runs stage 0
    there (no --adam_offload, which needs ZeRO), 2 on several ranks; a given stage is kept as given."""
    from alignment.distributed.deepspeed_config import train_ds_config

    def stage(world_size, *argv):
        cfg = parse_args(SFTConfig, ["--pretrain", "m", "--dataset", "d", "--output_key", "o", *argv])
        return train_ds_config(cfg, world_size, False, "cpu")["zero_optimization"]["stage"]

    assert (stage(1), stage(2), stage(1, "--adam_offload"), stage(8, "--adam_offload")) == (0, 2, 2, 2)
    assert (stage(1, "--zero_stage", "2"), stage(2, "--zero_stage", "3"), stage(4, "--zero_stage", "0")) == (2, 3, 0)


@pytest.mark.parametrize("value", ["-1e-3", "-.5", "-1E+2"])
def test_negative_numbers_in_any_notation_reach_the_check(value):
    """argparse alone reads -1e-3 as a flag ("expected one argument"); the real problem is the sign."""
    with pytest.raises(ConfigError, match=rf"^--learning_rate {float(value)}: must be > 0$"):
        parse_args(SFTConfig, ["--pretrain", "m", "--dataset", "d", "--learning_rate", value])


def test_checkpoints_may_live_directly_inside_the_output(tmp_path):
    """OpenRLHF's `--ckpt.path <save>/ckpt` and our default ./ckpt/checkpoints in ./ckpt: a checkpoint folder
    directly inside the output is carried over by the commit (alignment/outputs.py); deeper, or an output
    inside its checkpoint folder, is refused."""
    base = ["--pretrain", "m", "--dataset", "d"]
    assert parse_args(SFTConfig, base).ckpt_path == "./ckpt/checkpoints"
    for extra in (["--save_steps", "5"], ["--save_minutes", "10"], ["--load_checkpoint"]):
        parse_args(SFTConfig, [*base, *extra])
    with pytest.raises(ConfigError, match="^--ckpt_path ./ckpt/a/b lies deeper inside --save_path ./ckpt"):
        parse_args(SFTConfig, [*base, "--save_steps", "5", "--ckpt_path", "./ckpt/a/b"])
    # by path components: out_ckpt is beside out, not in it
    parse_args(
        SFTConfig,
        [*base, "--save_steps", "5", "--save_path", str(tmp_path / "out"), "--ckpt_path", str(tmp_path / "out_ckpt")],
    )
    with pytest.raises(ConfigError, match="lies in --ckpt_path"):  # store URIs compare as normalized URIs
        parse_args(SFTConfig, [*base, "--save_steps", "5", "--save_path", "s3://b/run/", "--ckpt_path", "s3://b//run"])

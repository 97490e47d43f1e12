"""Values are of their field's type wherever they come from (alignment/config/values.py): a YAML file, a flow's
parameters, the command line; a run's name is one folder of the store. Each refusal is one ConfigError line
naming where the value came from, the key and the type."""

from __future__ import annotations

import pytest

from alignment.config import ConfigError, SFTConfig
from alignment.config.cli import load_yaml, parse_args

BASE = ["--pretrain", "m", "--dataset", "d"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("train_batch_size: 8.5", "--train_batch_size 8.5: expected an integer (int), got a fraction"),
        ("learning_rate: true", "--learning_rate True: expected a number (float), got a boolean"),
        ("zero_stage: false", "--zero_stage False: expected an integer (int), got a boolean"),
        ("input_key: [a, b]", "--input_key ['a', 'b']: expected a string (str), got a list"),
        ("input_key: {a: 1}", "unknown option --input_key.a"),  # a mapping reads as a dotted group
        ("learning_rate: .inf", "--learning_rate inf: expected a finite number (float)"),
        ("learning_rate: nan", "--learning_rate 'nan': expected a finite number (float)"),
        ("train: {batch_size: 8.5}", "--train_batch_size 8.5: expected an integer (int)"),  # OpenRLHF's nesting
    ],
)
def test_a_yaml_value_of_the_wrong_type_is_one_line(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as e:
        load_yaml(SFTConfig, path)
    assert str(e.value).startswith(f"--config {path}: {needle}"), str(e.value)
    assert "\n" not in str(e.value)


def test_yaml_values_that_read_as_their_type_are_kept(tmp_path):
    """YAML reads 1e-5 as a string; JSON-ish 8.0 is a whole number; a list field takes "a,b"."""
    path = tmp_path / "ok.yaml"
    path.write_text("learning_rate: 1e-5\ntrain_batch_size: 8.0\ntarget_modules: q_proj,v_proj\nbf16: 'false'\n")
    values = load_yaml(SFTConfig, path)
    assert values == {"learning_rate": 1e-5, "train_batch_size": 8, "target_modules": ["q_proj", "v_proj"]} | {
        "bf16": False
    }
    assert type(values["train_batch_size"]) is int


@pytest.mark.parametrize("value", ["inf", "=-inf", "nan", "Infinity"])
def test_a_non_finite_number_on_the_command_line_is_refused(value):
    with pytest.raises(ConfigError, match=r"^command line: --learning_rate .*: expected a finite number \(float\)"):
        parse_args(
            SFTConfig,
            [
                *BASE,
                f"--learning_rate{value}" if value[0] == "=" else "--learning_rate",
                *([] if value[0] == "=" else [value]),
            ],
        )


def test_flow_parameters_are_typed_and_run_names_are_folder_names():
    from alignflow.flows.compare import compare_flow
    from alignflow.flows.sft import sft_flow

    for over, needle in [
        ({"train_batch_size": 8.5}, "--train_batch_size 8.5: expected an integer (int), got a fraction"),
        ({"learning_rate": True}, "--learning_rate True: expected a number (float), got a boolean"),
        ({"train": {"batch_size": 8.5}}, "--train_batch_size 8.5: expected an integer (int)"),
        ({"input_key": ["a"]}, "--input_key ['a']: expected a string (str), got a list"),
        ({"learning_rate": float("inf")}, "--learning_rate inf: expected a finite number (float)"),
    ]:
        with pytest.raises(ConfigError) as e:
            sft_flow.validate_parameters({"sft": over})
        assert str(e.value).startswith(f"sft: flow parameter sft: {needle}"), str(e.value)
    assert sft_flow.validate_parameters({"sft": {"train_batch_size": 8.0}})["sft"].train_batch_size == 8
    for name in ("../../escaped", "", "  ", ".hidden", "a/b", "a\\b", "x..y", "tab\there"):
        with pytest.raises(ConfigError, match=r"^sft: run_name=.*: a run's name is one folder name under the store"):
            sft_flow.validate_parameters({"run_name": name})
    assert sft_flow.validate_parameters({"run_name": "sft-2026.12_a"})["run_name"] == "sft-2026.12_a"
    with pytest.raises(ConfigError, match=r"^compare: promote_to='\.\./other': a run's name is one folder name"):
        compare_flow.validate_parameters({"variants": {"a": {}, "b": {}}, "promote_to": "../other"})

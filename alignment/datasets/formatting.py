"""Turn a row into prompt/response text: chat template, --input_template, or plain text."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from alignment.datasets.sources import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def require_chat_template(
    tokenizer: PreTrainedTokenizerBase, where: str, otherwise: str = "use --input_template instead"
) -> None:
    """`otherwise`: the other way to format prompts that the calling CLI offers."""
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"--apply_chat_template: the tokenizer of {where} has no chat template; "
            f"pass --tokenizer_chat_template '<jinja>' or {otherwise}"
        )


def get_field(row: dict, key: str, flag: str, index: int, source: str) -> Any:
    if key not in row:
        raise DataError(
            f"{source} row {index}: missing key {key!r} ({flag}); the row has keys "
            f"{sorted(row)[:8]}: set {flag} to one of them"
        )
    return row[key]


def describe(value: object) -> str:
    """What a JSON value is, in the file's terms, for messages: 'a number (5)', 'null'."""
    if value is None:
        return "null"
    kinds = {
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        dict: "an object",
        list: "a list",
        type(None): "null",
    }
    short = json.dumps(value)[:60] if not isinstance(value, str) else repr(value[:40])
    return f"{kinds.get(type(value), type(value).__name__)} ({short})"


def is_message(m: object) -> bool:
    return isinstance(m, dict) and "role" in m and "content" in m


def get_text(row: dict, key: str, flag: str, index: int, source: str, optional: bool = False) -> Any:
    """A prompt or response field: a string, one {role, content} message or a non-empty list of them
    (or null when `optional`: a row without a prompt part). Anything else is reported here with its
    row and key, not later as a shapeless type error."""
    value = get_field(row, key, flag, index, source)
    if (
        (optional and value is None)
        or isinstance(value, str)
        or is_message(value)
        or (isinstance(value, list) and value and all(is_message(m) for m in value))
    ):
        return value
    raise DataError(
        f"{source} row {index}: {flag} {key!r} is {describe(value)}; expected a string or a list "
        f"of {{role, content}} messages"
    )


def as_messages(value: Any, role: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
        return list(value)
    raise DataError(f"expected a string or a list of {{role, content}} messages, got {type(value).__name__}")


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    msgs = as_messages(value, "user")
    return "\n".join(m["content"] for m in msgs)


def chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def end_at_eos(text: str, eos: str | None) -> str:
    """`text` cut right after its final EOS when only whitespace follows it (a chat template's newline
    after the end-of-turn token). A reward model reads its value at the last token, and generation
    stops at EOS, so PPO's queries end there: training and scoring must read the same token."""
    if eos:
        stripped = text.rstrip()
        if stripped.endswith(eos):
            return stripped
    return text


def prompt_text(
    tokenizer: PreTrainedTokenizerBase, value: Any, apply_chat_template: bool, input_template: str | None
) -> str:
    """The prompt as the model sees it at generation time (shared by SFT, RL prompts and eval)."""
    if apply_chat_template:
        return chat(tokenizer, as_messages(value, "user"), add_generation_prompt=True)
    text = as_text(value)
    return input_template.format(text) if input_template else text


def prompt_and_response(
    tokenizer: PreTrainedTokenizerBase,
    prompt: Any,
    response: Any,
    apply_chat_template: bool,
    input_template: str | None,
) -> tuple[str, str]:
    """(prompt as seen at generation time, response continuing it); together the whole sample.

    `prompt` None means the sample has no prompt part (the response is all of it). Plain-text
    responses get the EOS token appended so the model learns (and the RM sees) where they stop.
    """
    if apply_chat_template:
        prompt_msgs = as_messages(prompt, "user") if prompt is not None else []
        head = chat(tokenizer, prompt_msgs, add_generation_prompt=True) if prompt_msgs else ""
        full = chat(tokenizer, prompt_msgs + as_messages(response, "assistant"), add_generation_prompt=False)
        if not full.startswith(head):
            raise DataError(
                "the chat template renders the prompt differently inside the full conversation, so "
                "response tokens can't be located; use a template whose prompt is a prefix, or --input_template"
            )
        return head, full[len(head) :]
    head = prompt_text(tokenizer, prompt, False, input_template) if prompt is not None else ""
    text = as_text(response)
    eos = tokenizer.eos_token or ""
    if eos and not text.endswith(eos):
        text += eos
    return head, text

"""`python -m alignment.cli.interactive_chat` driven as a terminal program through a pseudo-terminal
(pexpect): replies stream after `Assistant: `, each followed by a new `User: ` prompt; /reset clears the
history; /exit and Ctrl-D quit with status 0; a tokenizer without a chat template is one error line.
The two-turn test talks to the SFT model; the others use the random-weight base and check only the protocol."""

from __future__ import annotations

import re

import pexpect
import pytest

from alignment import storage
from alignment.cli.interactive_chat import fit, render
from alignment.config import ChatConfig
from tests.conftest import PYTHON, REPO, python_env

TIMEOUT = 120  # per expect: the machine may be slow and shared
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # readline's terminal modes (e.g. bracketed paste)


def spawn(*args: str) -> pexpect.spawn:
    return pexpect.spawn(
        PYTHON,
        ["-m", "alignment.cli.interactive_chat", *args],
        cwd=str(REPO),
        env=python_env(OMP_NUM_THREADS=1),
        encoding="utf-8",
        codec_errors="replace",
        timeout=TIMEOUT,
    )


def ask(child: pexpect.spawn, question: str) -> str:
    """Send one message; the streamed reply, once the next `User: ` prompt is shown."""
    child.sendline(question)
    child.expect_exact("Assistant: ")
    child.expect_exact("User: ")
    return ESCAPES.sub("", child.before).replace("\r", "").strip()


def assert_exits_cleanly(child: pexpect.spawn) -> None:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before


def test_two_turns_reset_and_exit(tiny_sft):
    """With the SFT model (the protocol tests below use random weights): a question from its
    training demonstrations gets the demonstrated answer, streamed."""
    child = spawn("--pretrain", str(tiny_sft), "--apply_chat_template", "--max_new_tokens", "12", "--greedy")
    try:
        child.expect_exact("User: ")
        first = ask(child, "What is 1 * 7?")
        assert first == "1 * 7 = 7", first
        ask(child, "What is 29 + 36?")  # a second turn, answered with the first in its prompt
        child.sendline("/reset")
        child.expect_exact("[history cleared]")
        child.expect_exact("User: ")
        child.sendline("")  # empty input is ignored: just a new prompt
        child.expect_exact("User: ")
        # Greedy and a cleared history: the same question gets exactly the first turn's reply.
        assert ask(child, "What is 1 * 7?") == first
        child.sendline("/exit")
        assert_exits_cleanly(child)
    finally:
        child.close(force=True)


def test_plain_text_from_a_store_uri_and_ctrl_d(tiny_base, tmp_path):
    uri = f"file://{tmp_path}/store/base"
    storage.commit_dir(tiny_base, uri, metadata={"stage": "tiny_base"})
    child = spawn("--pretrain", uri, "--max_new_tokens", "8", "--greedy")
    try:
        child.expect_exact("User: ")
        ask(child, "What is 2 + 3?")
        child.sendeof()
        assert_exits_cleanly(child)
    finally:
        child.close(force=True)


def test_history_is_the_prompt_and_oldest_turns_go_first(tiny_base):
    from alignment.models.loading import load_tokenizer

    tok = load_tokenizer(str(tiny_base))
    messages = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "2 + 3 = 5"},
        {"role": "user", "content": "What is 4 + 4?"},
    ]
    plain = render(tok, messages, apply_chat_template=False)
    assert plain == "User: What is 2 + 3?\nAssistant: 2 + 3 = 5\nUser: What is 4 + 4?\nAssistant: "
    templated = render(tok, messages, apply_chat_template=True)
    assert templated.index("2 + 3 = 5") < templated.index("What is 4 + 4?")

    last_alone = len(tok(render(tok, messages[2:], False), add_special_tokens=False)["input_ids"])
    cfg = ChatConfig(pretrain=str(tiny_base), max_new_tokens=4, max_len=last_alone + 4).validate()
    ids, budget = fit(tok, messages, cfg)  # the whole chat does not fit: the first exchange goes
    assert messages == [{"role": "user", "content": "What is 4 + 4?"}]
    assert (len(ids), budget) == (last_alone, 4)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--max_len", "8", "--max_new_tokens", "8"], "--max_len 8 must be larger"),
        (["--temperature", "0"], "--temperature 0.0 must be > 0"),
    ],
)
def test_bad_flags_are_config_errors(flags, needle):
    from alignment.config import ConfigError, parse_args

    with pytest.raises(ConfigError, match=needle):
        parse_args(ChatConfig, ["--pretrain", "x", *flags])

"""A chat template is compiled when its tokenizer loads, so a Jinja syntax error is one line naming where the
template came from and its line, before any data is tokenized or weights load. Without this it surfaced as a
jinja2 TemplateSyntaxError traceback from the first row's apply_chat_template, deep inside data prep."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

from alignment.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class ChatTemplateError(UserError, ValueError):
    """A chat template that does not parse; the message names its source, line and the parser's complaint."""


def template_source(path: str, flag: str, given: bool) -> str:
    """Where the tokenizer's chat template was read from, as the user would look for it."""
    if given:
        return "--tokenizer_chat_template"
    folder = Path(path)
    for name in ("chat_template.jinja", "chat_template.json"):  # transformers reads these before the config
        if (folder / name).is_file():
            return str(folder / name)
    if folder.is_dir():
        return f"{folder / 'tokenizer_config.json'} (its chat_template)"
    return f"the chat template of {flag} {path}"


def check_chat_template(tok: PreTrainedTokenizerBase, path: str, flag: str = "--pretrain", given: bool = False) -> None:
    """Compile `tok`'s chat template(s) the way apply_chat_template will (transformers' own Jinja environment,
    with its {% generation %} tag, so a template it renders is never refused). `given`: the template came
    from --tokenizer_chat_template. Raises ChatTemplateError."""

    templates = getattr(tok, "chat_template", None)
    if not templates:
        return
    named = templates.items() if isinstance(templates, dict) else [(None, templates)]
    for name, source in named:
        try:
            _compile_jinja_template(source)
        except jinja2.TemplateSyntaxError as e:
            where = template_source(path, flag, given) + (f" (template {name!r})" if name else "")
            lines = source.splitlines()
            text = lines[e.lineno - 1].strip()[:80] if 0 < (e.lineno or 0) <= len(lines) else ""
            shown = f" in `{text}`" if text else ""
            fix = "fix the Jinja syntax" + ("" if given else ", or pass a working one with --tokenizer_chat_template")
            raise ChatTemplateError(
                f"{where}: the chat template does not parse: line {e.lineno}: {e.message}{shown}; {fix}"
            ) from None

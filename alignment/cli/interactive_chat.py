"""python -m alignment.cli.interactive_chat --pretrain PATH [--bf16] [--apply_chat_template]: chat with a
model in the terminal, as OpenRLHF's interactive_chat.

--pretrain is a model directory, a committed store URI (s3://..., file://...) or a hub name. Each reply
streams as it is generated; the whole conversation so far is the next prompt (oldest turns dropped
past --max_len). Commands: /reset clears the history; /exit or Ctrl-D quits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alignment.cli.common import run_main
from alignment.config import ChatConfig, parse_args

if TYPE_CHECKING:
    import torch
    from transformers import GenerationMixin, PreTrainedTokenizerBase

RESET, EXIT = "/reset", "/exit"


def render(tokenizer, messages: list[dict], apply_chat_template: bool) -> str:
    """The conversation as the model sees it, ending where the assistant's next reply starts."""
    if apply_chat_template:
        from alignment.datasets.formatting import chat

        return chat(tokenizer, messages, add_generation_prompt=True)
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant: "


def fit(tokenizer, messages: list[dict], cfg: ChatConfig) -> tuple[list[int], int]:
    """Prompt ids and the reply's token budget; drops the oldest exchanges (in place) until
    conversation + --max_new_tokens fit in --max_len, so a long chat keeps going."""
    while True:
        # No special tokens added: like every other prompt in alignflow (the template writes its own).
        ids = tokenizer(render(tokenizer, messages, cfg.data.apply_chat_template), add_special_tokens=False)[
            "input_ids"
        ]
        if len(ids) + cfg.generate.max_new_tokens <= cfg.data.max_len or len(messages) <= 1:
            return ids, min(cfg.generate.max_new_tokens, cfg.data.max_len - len(ids))
        del messages[:2]  # a user message and its reply, so the history still starts with the user
        print(f"[oldest turn dropped to stay within --max_len {cfg.data.max_len}]")


def load_model(cfg: ChatConfig):
    """(model on its device in eval mode, tokenizer, runtime, precision label). Bad paths and a
    missing chat template fail before the weights load."""
    import torch

    from alignment.datasets.formatting import require_chat_template
    from alignment.distributed.runtime import Runtime
    from alignment.models.builder import prepare

    # One process and no process group: a world of one is all prepare() needs to pick precision/attention.
    rt = Runtime(0, 1, 0, 1, "cuda" if torch.cuda.is_available() else "cpu")
    setup = prepare(cfg, rt)  # fetches --pretrain and loads the tokenizer
    tok = setup.tokenizer
    if cfg.data.apply_chat_template:
        require_chat_template(
            tok, cfg.model.model_name_or_path, "drop --apply_chat_template for plain User:/Assistant: text"
        )
    model = setup.causal_lm(cfg.ds.load_in_4bit)
    model = (
        model if cfg.ds.load_in_4bit else model.to(rt.torch_device)
    ).eval()  # bitsandbytes places 4-bit weights itself
    return model, tok, rt, setup.precision.label


def sampling_kwargs(cfg: ChatConfig) -> dict[str, Any]:
    """generate()'s sampling arguments: greedy, or sampled at --temperature and --top_p."""
    return (
        {"do_sample": False}
        if cfg.generate.greedy
        else {"do_sample": True, "temperature": cfg.generate.temperature, "top_p": cfg.generate.top_p}
    )


def generate_streamed(
    model: GenerationMixin,
    tok: PreTrainedTokenizerBase,
    ids: list[int],
    budget: int,
    sampling: dict[str, Any],
    device: torch.device,
) -> torch.Tensor:
    """The reply to prompt `ids` (at most `budget` new tokens), printed to the terminal as it is generated;
    generate()'s output ids, prompt included."""
    import torch
    from transformers import TextStreamer

    prompt = torch.tensor([ids], device=device)
    with torch.no_grad():
        return model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=budget,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            streamer=TextStreamer(tok, skip_prompt=True, skip_special_tokens=True),
            **sampling,
        )


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(ChatConfig, argv, prog="alignment.cli.interactive_chat")
    try:
        import readline  # noqa: F401  (input() then gets line editing and up-arrow history)
    except ImportError:
        pass
    from transformers import set_seed

    model, tok, rt, label = load_model(cfg)
    sampling = sampling_kwargs(cfg)
    set_seed(cfg.train.seed)
    print(
        f"[chatting with {cfg.model.model_name_or_path} on {rt.device}, {label}; "
        f"{RESET} clears the history, {EXIT} or Ctrl-D quits]"
    )

    messages: list[dict] = []
    while True:
        try:
            line = input("User: ").strip()
        except (EOFError, KeyboardInterrupt):
            print()  # leave the shell prompt on a line of its own
            return
        if not line:
            continue
        if line == EXIT:
            return
        if line == RESET:
            messages.clear()
            print("[history cleared]")
            continue
        messages.append({"role": "user", "content": line})
        ids, budget = fit(tok, messages, cfg)
        if budget < 1:
            messages.pop()
            print(
                f"[message not sent: {len(ids)} tokens leave no room for a reply within --max_len {cfg.data.max_len}]"
            )
            continue
        print("Assistant: ", end="", flush=True)
        try:
            out = generate_streamed(model, tok, ids, budget, sampling, rt.torch_device)
        except KeyboardInterrupt:
            # Ctrl-C stops a long reply, not the chat; the unanswered message leaves the history.
            messages.pop()
            print("\n[reply interrupted]")
            continue
        messages.append(
            {"role": "assistant", "content": tok.decode(out[0, len(ids) :], skip_special_tokens=True).strip()}
        )


if __name__ == "__main__":
    run_main(main)

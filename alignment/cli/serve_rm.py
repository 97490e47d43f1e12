"""python -m alignment.cli.serve_rm: an HTTP reward server over trained reward model(s) and/or a
reward_func file, speaking OpenRLHF's protocol, so PPO can use it as --remote_rm_url.

    POST /get_reward  {"query": [...], "prompts": [...], "labels": [...]}  ->  {"rewards": [...]}
    GET  /health      {"status": "ok", "reward": "<source>"}

Requests are scored in micro-batches of --batch_size, one request at a time (the model is not
thread-safe; the server threads only parse and answer). Bad requests get a 4xx with the reason
and never take the server down: 413 for a body over --max_request_bytes or more than
--max_batch queries, 400 for malformed JSON, missing/mistyped fields, lengths that disagree, or
a query longer than --max_len tokens.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from alignment.cli.common import run_main
from alignment.config import parse_args
from alignment.config.serving import ServeRMConfig

log = logging.getLogger("alignment.serve_rm")


class BadRequest(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


def parse_request(
    body: bytes, max_batch: int, count_tokens: Callable[[str], int] | None, max_len: int
) -> tuple[list[str], list[str], list]:
    """Validate a /get_reward body; raises BadRequest(status, reason). Pure: unit-tested."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"body is not JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("query"), list):
        raise BadRequest(400, 'expected {"query": [str, ...], "prompts": [...], "labels": [...]}')
    queries = data["query"]
    if not all(isinstance(q, str) for q in queries):
        raise BadRequest(400, "every query must be a string (prompt + response)")
    if len(queries) > max_batch:
        raise BadRequest(
            413,
            f"{len(queries)} queries in one request; the server takes at most {max_batch} "
            f"(--max_batch): split the batch",
        )
    prompts = data.get("prompts", [""] * len(queries))
    labels = data.get("labels", [None] * len(queries))
    if not isinstance(prompts, list) or not isinstance(labels, list) or not len(prompts) == len(labels) == len(queries):
        raise BadRequest(
            400,
            f"'query', 'prompts' and 'labels' must be lists of the same length "
            f"(got {len(queries)}, {len(prompts) if isinstance(prompts, list) else '-'}, "
            f"{len(labels) if isinstance(labels, list) else '-'})",
        )
    if count_tokens is not None:
        for i, q in enumerate(queries):
            n = count_tokens(q)
            if n > max_len:
                raise BadRequest(400, f"query {i} is {n} tokens, over the server's --max_len {max_len}")
    return queries, prompts, labels


def body_size(content_length: str | None, max_request_bytes: int) -> int:
    """The request body's size from its Content-Length header; raises BadRequest (411 or 413)."""
    try:
        size = int(content_length or -1)
    except ValueError:
        size = -1
    if size < 0:
        raise BadRequest(411, "a Content-Length header is required")
    if size > max_request_bytes:
        raise BadRequest(
            413, f"request body of {size} bytes is over --max_request_bytes {max_request_bytes}: send smaller batches"
        )
    return size


def make_handler(
    score: Callable[[list[str], list[str], list], list[float]],
    source: str,
    cfg: ServeRMConfig,
    count_tokens: Callable[[str], int] | None,
) -> type:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self._reply(200, {"status": "ok", "reward": source})
            else:
                self._reply(404, {"error": f"no such endpoint {self.path}; use POST /get_reward or GET /health"})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/get_reward":
                self._reply(404, {"error": f"no such endpoint {self.path}; use POST /get_reward"})
                return
            try:
                size = body_size(self.headers.get("Content-Length"), cfg.serve.max_request_bytes)
            except BadRequest as e:
                if e.status == 413:
                    self.close_connection = True  # the unread body is dropped with the connection
                self._reply(e.status, {"error": str(e)})
                return
            try:
                queries, prompts, labels = parse_request(
                    self.rfile.read(size), cfg.serve.max_batch, count_tokens, cfg.data.max_len
                )
                with lock:
                    rewards = score(queries, prompts, labels)
            except BadRequest as e:
                self._reply(e.status, {"error": str(e)})
                return
            except Exception as e:  # a scoring failure answers 500 with the reason; the server keeps serving
                log.exception("scoring failed")
                self._reply(500, {"error": f"{type(e).__name__}: {e}"})
                return
            self._reply(200, {"rewards": rewards})

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, self.address_string(), *args)

    return Handler


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(ServeRMConfig, argv, prog="alignment.cli.serve_rm")
    import torch

    from alignment.rewards.scorer import make_reward

    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    tokenizer, count_tokens = None, None
    if cfg.reward.model_name_or_path:
        from alignment.models.loading import load_tokenizer, resolve_model_path, use_modelscope_hub

        use_modelscope_hub(cfg.model.use_ms)
        from alignment.models.precision import attn_implementation, precision_for

        device = "cuda" if torch.cuda.is_available() else "cpu"
        tokenizer = load_tokenizer(
            resolve_model_path(cfg.model.model_name_or_path or cfg.reward.model_name_or_path.split(",")[0]),
            cfg.data.tokenizer_chat_template,
            use_fast=not cfg.data.disable_fast_tokenizer,
        )
        reward = make_reward(
            cfg,
            tokenizer,
            precision_for(cfg.ds.bf16, device).dtype,
            attn_implementation(cfg.attention(), device),
            device,
            cfg.data.max_len if cfg.ds.packing_samples else None,
        )
        count_tokens = lambda q: len(tokenizer(q, add_special_tokens=False)["input_ids"])  # noqa: E731
    else:
        reward = make_reward(cfg, None, torch.float32, "sdpa", "cpu")
    source = cfg.reward.model_name_or_path or cfg.reward.remote_url

    def score(queries: list[str], prompts: list[str], labels: list) -> list[float]:
        out: list[float] = []
        for s in range(0, len(queries), cfg.serve.batch_size):
            e = s + cfg.serve.batch_size
            out += [float(x) for x in reward(queries[s:e], prompts[s:e], labels[s:e]).rewards.tolist()]
        return out

    server = ThreadingHTTPServer((cfg.serve.host, cfg.serve.port), make_handler(score, source, cfg, count_tokens))
    host, port = server.server_address[:2]
    print(f"serving rewards from {source} on http://{host}:{port}/get_reward", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    run_main(main)

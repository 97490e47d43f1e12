"""Rewards from reward servers (`--remote_rm_url http://host:port/get_reward[,...]`).

Protocol (OpenRLHF's): POST {"query": [...], "prompts": [...], "labels": [...]} -> {"rewards": [...]} (optionally
with "scores" and "extra_logs", as a reward_func's dict: alignment/rewards/reward_func.py).
Queries are sent in batches, spread round-robin over the URLs, up to `in_flight` requests at once (a
server that scores one batch at a time still overlaps network and queueing); connection errors and 5xx are
retried with backoff, then raised naming the URL; a 4xx or a malformed reply is raised at once.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from alignment.rewards.reward_func import RewardError, RewardOutput, RewardServerDown, merge_outputs, parse_output


@dataclass
class RemoteRewardClient:
    urls: list[str]
    batch_size: int = 64
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    in_flight: int = 8  # requests awaited at once, over all the URLs

    @classmethod
    def from_flag(cls, value: str, **kwargs) -> "RemoteRewardClient":
        urls = [u.strip() for u in value.split(",") if u.strip()]
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if not urls or bad:
            raise RewardError(f"--remote_rm_url {value!r}: give http(s) URLs (comma-separated) or one .py file")
        return cls(urls, **kwargs)

    def check_reachable(self) -> None:
        """Fail at startup, before any model loads, when a server isn't listening (a TCP connect,
        retried like a request: it works with any server speaking the protocol, not only ours)."""
        for url in self.urls:
            parts = urlsplit(url)
            address = (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
            for attempt in range(self.retries + 1):
                try:
                    socket.create_connection(address, timeout=self.timeout_s).close()
                    break
                except OSError as err:
                    if attempt == self.retries:
                        raise RewardServerDown(
                            f"reward server {url} unreachable after {self.retries + 1} tries "
                            f"({err.strerror or err}); is serve_rm running there?"
                        ) from None
                    time.sleep(self.backoff_s * 2**attempt)

    def __call__(self, queries: list[str], prompts: list[str], labels: list) -> RewardOutput:
        posts = []
        for k, start in enumerate(range(0, len(queries), self.batch_size)):
            end = start + self.batch_size
            url = self.urls[k % len(self.urls)]
            body = {"query": queries[start:end], "prompts": prompts[start:end], "labels": list(labels[start:end])}
            posts.append((url, body))
        if len(posts) <= 1:
            return merge_outputs([self._post(*p) for p in posts])
        with ThreadPoolExecutor(min(self.in_flight, len(posts)), thread_name_prefix="reward-post") as pool:
            return merge_outputs(list(pool.map(lambda p: self._post(*p), posts)))  # in order; the first error raises

    def _post(self, url: str, body: dict) -> RewardOutput:
        data = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as err:
                if err.code < 500 or attempt == self.retries:
                    detail = err.read()[:200].decode(errors="replace")
                    error = RewardServerDown if err.code >= 500 else RewardError
                    raise error(f"reward server {url} answered HTTP {err.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                if attempt == self.retries:
                    reason = getattr(err, "reason", err)
                    raise RewardServerDown(
                        f"reward server {url} unreachable after {self.retries + 1} tries ({reason}); "
                        f"is serve_rm running there?"
                    ) from None
            time.sleep(self.backoff_s * 2**attempt)
        try:
            answer = json.loads(raw)
            answer["rewards"]
        except (ValueError, KeyError, TypeError):
            raise RewardError(
                f"reward server {url} sent a malformed reply (expected JSON with 'rewards'): {raw[:120]!r}"
            ) from None
        return parse_output(answer, len(body["query"]), f"reward server {url}")

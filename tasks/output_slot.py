"""One stage run per output across flow runs: a Prefect global concurrency limit of 1 named after the
output, held while the stage's job runs. Two flow runs that would write one stage directory (same run
name, stage and identity) then queue in Prefect — the second waits, visible in the UI as waiting on the
limit, and finds the output committed when its turn comes — instead of both submitting Ray jobs that
meet at the output's lease (alignment/lease.py), which still guards writers outside Prefect."""

from __future__ import annotations

import hashlib
from contextlib import asynccontextmanager
from typing import AsyncIterator

from prefect.client.orchestration import get_client
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectAlreadyExists

LEASE_S = 300  # Prefect renews the slot while the task runs; a flow process that died frees it after this


def limit_name(output_uri: str) -> str:
    return f"alignflow-output-{hashlib.sha256(output_uri.rstrip('/').encode()).hexdigest()[:16]}"


@asynccontextmanager
async def output_slot(output_uri: str) -> AsyncIterator[str]:
    """Hold the output's slot (creating its limit of 1 on first use); yields the limit's name."""
    name = limit_name(output_uri)
    async with get_client() as client:
        try:
            await client.upsert_global_concurrency_limit_by_name(name, limit=1)
        except ObjectAlreadyExists:  # another flow run created it between the read and the create
            pass
    async with concurrency(name, occupy=1, lease_duration=LEASE_S, strict=True):
        yield name

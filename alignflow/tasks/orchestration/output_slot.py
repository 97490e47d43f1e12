"""One stage run per output across flow runs: a Prefect global concurrency limit of 1 named after the
output, held while the stage's job runs. Two flow runs that would write one stage directory (same run
name, stage and identity) then queue in Prefect — the second waits, visible in the UI as waiting on the
limit, and finds the output committed when its turn comes — instead of both submitting Ray jobs that
meet at the output's lease (alignment/lease.py), which still guards writers outside Prefect.

A flow process killed while it holds a slot never gives it back, and Prefect's own lease expiry does not
run under the ephemeral API (the server died with the flow): the slot stayed taken and the same flow run
again waited without a word. So the holder also writes who it is beside the output
(`<stage dir>/slot.json`: the output lease's Holder record, its heartbeat refreshed every minute), and a
waiter logs what it waits for every minute and frees the slot of a holder that is dead — its process gone
on this host, or its heartbeat older than the lease's TTL elsewhere (alignment/lease.py, Holder.dead).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, replace
from typing import AsyncIterator

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
from prefect.concurrency._asyncio import AcquireConcurrencySlotTimeoutError
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import MissingContextError, ObjectAlreadyExists
from prefect.logging import get_run_logger

from alignment import storage
from alignment.lease import Holder, ttl_s


def _log() -> logging.Logger | logging.LoggerAdapter:
    """The task run's logger (its lines show in the Prefect UI), or this module's outside a run."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


LEASE_S = 300  # Prefect renews the slot while the task runs; a flow process that died frees it after this
WAIT_LOG_S = 60.0  # a waiter says what it waits for this often
SLOT_FILE = "slot.json"


def limit_name(output_uri: str) -> str:
    return f"alignflow-output-{hashlib.sha256(output_uri.rstrip('/').encode()).hexdigest()[:16]}"


def _holder_text(holder: Holder) -> str:
    return json.dumps(asdict(holder))


def _read_holder(out: str) -> Holder | None:
    text = storage.read_text(f"{out.rstrip('/')}/{SLOT_FILE}")
    try:
        return Holder(**json.loads(text)) if text else None
    except (ValueError, TypeError):  # torn: treated as no record
        return None


async def _beat(out: str, holder: Holder) -> None:
    """Refresh the holder record's heartbeat while the slot is held."""
    while True:
        await asyncio.sleep(WAIT_LOG_S)
        holder = replace(holder, heartbeat=time.time())
        await asyncio.to_thread(storage.write_text_atomic, f"{out.rstrip('/')}/{SLOT_FILE}", _holder_text(holder))


async def _free_if_dead(name: str, out: str, waited_s: float | None) -> None:
    """Free the slot when its recorded holder is dead; else, `waited_s` given, log what this run waits for."""
    holder = await asyncio.to_thread(_read_holder, out)
    async with get_client() as client:
        taken = (await client.read_global_concurrency_limit_by_name(name)).active_slots > 0
        if taken and holder is not None and holder.dead(max(ttl_s(), WAIT_LOG_S * 2)):
            _log().warning(
                "the output slot %s of %s is held by %s, which is gone: freeing it", name, out, holder.describe()
            )
            await client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))
            return
    if waited_s is not None:
        who = holder.describe() if holder else "a flow run that recorded no holder"
        _log().info("waiting %.0f s so far for the output slot %s of %s, held by %s", waited_s, name, out, who)


@asynccontextmanager
async def output_slot(out: str) -> AsyncIterator[str]:
    """Hold the output's slot (creating its limit of 1 on first use); yields the limit's name. `out`: the
    stage's folder in the store."""
    name = limit_name(out)
    async with get_client() as client:
        with suppress(ObjectAlreadyExists):  # another flow run created it between the read and the create
            await client.upsert_global_concurrency_limit_by_name(name, limit=1)
    await _free_if_dead(name, out, None)  # a killed flow's slot: taken over at once, not after a wait
    started = time.monotonic()
    while True:
        try:
            slot = concurrency(name, occupy=1, lease_duration=LEASE_S, strict=True, timeout_seconds=WAIT_LOG_S)
            await slot.__aenter__()
            break
        except AcquireConcurrencySlotTimeoutError:
            await _free_if_dead(name, out, time.monotonic() - started)
    try:
        holder = Holder.this_process(uuid.uuid4().hex, f"the flow run holding {name}")
        await asyncio.to_thread(storage.write_text_atomic, f"{out.rstrip('/')}/{SLOT_FILE}", _holder_text(holder))
        beat = asyncio.create_task(_beat(out, holder))
        try:
            yield name
        finally:
            beat.cancel()
            with suppress(asyncio.CancelledError):
                await beat
            await asyncio.to_thread(storage.remove, f"{out.rstrip('/')}/{SLOT_FILE}")
    finally:
        await slot.__aexit__(None, None, None)

"""Work that must survive a crash or run on another host: a job on a queue in Redis (arq), not a background task."""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from aiorest import App, Request

REDIS = RedisSettings.from_dsn(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
QUEUE = "aiorest-example:welcome"


async def send_welcome(ctx: dict[str, Any], address: str) -> str:
    """The job: run by an arq worker (``arq background_arq.WorkerSettings``), on any host that reaches Redis."""
    return f"welcome mail sent to {address}"


class WorkerSettings:  # what `arq background_arq.WorkerSettings` reads
    functions = [send_welcome]
    redis_settings = REDIS
    queue_name = QUEUE
    max_tries = 5  # a job whose worker died is run again, up to 5 times


@asynccontextmanager
async def job_queue(app: App) -> AsyncIterator[None]:
    app.state.jobs = await create_pool(REDIS, default_queue_name=QUEUE)
    try:
        yield
    finally:
        await app.state.jobs.aclose()


app = App(contexts=[job_queue])


@app.post("/signups/{address}", status=202)
async def sign_up(request: Request) -> dict[str, Any]:
    address = request.path_params["address"]
    # In Redis before the response is sent: a crash of this process from now on loses nothing.
    # The job's id makes a retried request enqueue it once (enqueue_job gives None for a known id).
    job = await request.app.state.jobs.enqueue_job("send_welcome", address, _job_id=f"welcome:{address}")
    return {"job": f"welcome:{address}", "queued": job is not None}

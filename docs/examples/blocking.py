"""Two handlers that block the event loop, and one that does the same work without blocking it.

Serve it with the blocked-loop detector on, then ask ``/report`` or ``/signup``:
the log names the route, the request id and the line where the loop is stuck.
"""

import asyncio
import hashlib
import time

from aiorest import App, Request

app = App()


def password_hash(password: str) -> str:
    # scrypt: about 0.2-0.4 s of CPU (64 MiB); a handler that calls it directly stops every other request
    return hashlib.scrypt(password.encode(), salt=b"a salt per user", n=2**16, r=8, p=2, maxmem=80 << 20).hex()


@app.get("/report")
async def report(request: Request) -> dict[str, str]:
    time.sleep(0.3)  # a blocking call (a synchronous client, a file on a slow disk): nothing else runs
    return {"report": "ready"}


@app.post("/signup")
async def signup(request: Request) -> dict[str, int]:
    password = (await request.json())["password"]
    stored = password_hash(password)  # CPU-bound work on the event loop
    return {"hash_length": len(stored)}


@app.post("/signup-in-thread")
async def signup_in_thread(request: Request) -> dict[str, int]:
    password = (await request.json())["password"]
    stored = await asyncio.to_thread(password_hash, password)  # the loop serves others meanwhile
    return {"hash_length": len(stored)}


if __name__ == "__main__":
    app.run(port=8080, blocked_loop_threshold=0.1)  # or: aiorest run blocking:app --blocked-loop-threshold 0.1

"""The aiorest contender for /json and /plaintext (the database endpoints are example_app's)."""

from __future__ import annotations

import argparse

from aiorest import App, Request, Response

app = App()


@app.get("/json")
async def json_endpoint(request: Request) -> dict[str, str]:
    return {"message": "Hello, World!"}


@app.get("/plaintext")
async def plaintext(request: Request) -> Response:
    return Response(b"Hello, World!", media_type="text/plain")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--blocked-loop-threshold", type=float, help="the blocked-loop detector on (the blocked suite)")
    args = parser.parse_args()
    app.run(host="127.0.0.1", port=args.port, log_level="warning", blocked_loop_threshold=args.blocked_loop_threshold)

"""Behind a proxy: the client, scheme and host it forwards, the request id, absolute URLs.

In this folder, behind nginx on the same machine::

    aiorest run behind_proxy:app --forwarded-allow-ips 127.0.0.1 --health --max-concurrency 64
"""

import logging

from aiorest import App, Request, request_id

app = App()
log = logging.getLogger("behind_proxy")


@app.get("/orders/{order_id:int}", name="order")
async def order(request: Request) -> dict[str, object]:
    order_id = request.path_params["order_id"]
    log.info("order %d asked for", order_id)  # the record carries the request's id
    return {
        "client": request.client[0] if request.client else None,  # the client's, not the proxy's
        "scheme": request.scheme,  # "https" when the proxy says so
        "id": request.id,  # also in the X-Request-ID of the answer
        "same_id_everywhere": request_id() == request.id,
        "self": request.url_for("order", _external=True, order_id=order_id),
    }

"""Hello, world. In this folder: ``aiorest run hello:app``."""

from aiorest import App, Request

app = App()


@app.get("/")
async def hello(request: Request) -> dict[str, str]:
    return {"message": "Hello, World!"}


@app.get("/hello/{name}")
async def hello_name(request: Request) -> dict[str, str]:
    return {"message": f"Hello, {request.path_params['name']}!"}


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=8080)

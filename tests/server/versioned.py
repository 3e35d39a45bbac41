"""The app the reload tests serve and change: ``APP.format(version=N, extra="...")``, answering its version
and pid at ``/version``."""

APP = """
import asyncio
import os

from aiorest import App

app = App()
VERSION = {version}
{extra}

@app.get("/version")
async def version(request):
    return {{"version": VERSION, "pid": os.getpid()}}
"""

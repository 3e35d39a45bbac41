"""A user-defined path parameter converter: ISO dates."""

import datetime

from aiorest import App, Request


class DateConvertor:
    regex = "[0-9]{4}-[0-9]{2}-[0-9]{2}"

    def convert(self, value: str) -> datetime.date:
        return datetime.date.fromisoformat(value)  # ValueError for 2024-02-30: no match

    def to_string(self, value: datetime.date) -> str:
        return value.isoformat()


app = App(convertors={"date": DateConvertor()})


@app.get("/days/{day:date}", name="day")
async def day(request: Request) -> dict[str, str]:
    date: datetime.date = request.path_params["day"]
    tomorrow = date + datetime.timedelta(days=1)
    return {"weekday": date.strftime("%A"), "next": request.url_for("day", day=tomorrow)}


@app.get("/files/{path:path}")
async def file(request: Request) -> dict[str, str]:
    return {"path": request.path_params["path"]}

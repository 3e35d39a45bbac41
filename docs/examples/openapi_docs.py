"""The OpenAPI document of typed routes, with Swagger UI and ReDoc served from local files."""

from typing import Annotated

import msgspec
from msgspec import Meta

from aiorest import App, HTTPNotFound, Router

books = Router()


class NewBook(msgspec.Struct):
    title: Annotated[str, Meta(min_length=1, max_length=200)]
    year: Annotated[int, Meta(ge=1450)]


class Book(msgspec.Struct):
    id: int
    title: str
    year: int


BOOKS: dict[int, Book] = {}


@books.post("/books", status=201)
async def add_book(book: NewBook) -> Book:
    """Add a book to the shelf.

    The shelf numbers books from 1, in the order they are added.
    """
    added = Book(len(BOOKS) + 1, book.title, book.year)
    BOOKS[added.id] = added
    return added


@books.get("/books/{book_id:int}", name="get")
async def get_book(book_id: Annotated[int, Meta(ge=1)]) -> Book:
    """One book, by its number."""
    try:
        return BOOKS[book_id]
    except KeyError:
        raise HTTPNotFound(f"no book {book_id}") from None


app = App(title="Shelf", version="1.0")
app.include(books, "/v1", name="books")  # tagged "books" in the document
app.add_openapi_routes()  # /openapi.json, /docs (Swagger UI), /redoc (ReDoc)

from aiorest._support.errors import first_line, one_line


def test_an_error_in_one_line_names_its_type_its_first_line_and_its_notes() -> None:
    error = ValueError("bad value\nmore detail")
    assert first_line(error) == "bad value"
    assert one_line(error) == "ValueError: bad value"
    error.add_note("SQLSTATE 22012")
    error.add_note("raised in the startup hook app.create")
    assert one_line(error) == "ValueError: bad value (SQLSTATE 22012; raised in the startup hook app.create)"


def test_an_error_without_a_message_is_its_type() -> None:
    assert first_line(KeyError()) == "KeyError"
    assert one_line(RuntimeError("  ")) == "RuntimeError"

"""The package's exception table against the C library's: one class per
code, in the C numbering (include/tether/tether.h), with the C name."""

from tether import errors
from tether._native import ffi, lib


def test_every_c_code_has_its_class_with_the_same_name():
    last = 0
    for number in range(1, 64):
        name = ffi.string(lib.tether_error_name(number)).decode()
        if name == "?":
            break
        last = number
        assert number < len(errors._BY_NUMBER), f"C code {number} ({name}) has no Python class"
        assert errors._BY_NUMBER[number].code == name
        assert isinstance(errors.from_code(number, "m"), errors._BY_NUMBER[number])
    assert last == errors._BY_NUMBER.__len__() - 1, "the Python table has codes the C library does not"
    assert last >= 15


def test_an_unknown_code_is_internal():
    e = errors.from_code(999, "")
    assert isinstance(e, errors.InternalError)
    assert e.code == "INTERNAL"

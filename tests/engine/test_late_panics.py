"""A cluster's late panics (a thread that panics after ``cluster_main`` returned) stay off
standard error once the run has failed: the process stops with one line
(``execution.quiet_late_panics``)."""
import ctypes
import sys

import pytest

from rankflow.execution import quiet_late_panics


def print_through_c(exc: str) -> None:
    """An uncaught exception printed by CPython's C API, as Bytewax's panic hook does when its
    channel is closed (``PyErr::print``: ``PyErr_PrintEx``, which calls ``sys.excepthook``)."""
    ctypes.pythonapi.PyRun_SimpleString(f"raise {exc}".encode())


@pytest.fixture
def restore_hook():
    saved = sys.excepthook
    yield
    sys.excepthook = saved


def test_a_late_panic_is_not_printed_other_errors_are(restore_hook, capsys):
    print_through_c("RuntimeError('(src/run.rs:292:17) panicked at timely: Send thread panic')")
    assert "panicked at" in capsys.readouterr().err, "printed before the run failed"
    quiet_late_panics()
    print_through_c("RuntimeError('(src/run.rs:292:17) panicked at timely: Send thread panic')")
    assert capsys.readouterr().err == ""
    print_through_c("ValueError('something else')")
    assert "ValueError: something else" in capsys.readouterr().err

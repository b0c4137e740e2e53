"""The public phase-mark API: agent.mark / agent.pause never raise, are no-ops when not
attached, and normalise the kind to a label (stepwatch.core.contract.phase_name)."""

import pytest

from stepwatch import agent
from stepwatch.core.contract import phase_name


def test_without_an_agent_marks_are_no_ops_and_exceptions_pass_through():
    agent.mark("checkpoint")
    with agent.pause("eval"):
        pass
    with pytest.raises(KeyError):
        with agent.pause():
            raise KeyError("the block's own error is not swallowed")


@pytest.mark.parametrize("kind, name", [("eval", "eval"), ("Eval Loop", "eval_loop"), ("", "pause"),
                                        ("../../x", "x"), ("ü" * 3, "pause"), ("k" * 40, "k" * 32),
                                        (7, "7")])
def test_phase_names_are_bounded_labels(kind, name):
    assert phase_name(kind) == name

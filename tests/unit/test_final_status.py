"""How an execution finishes (docs/semantics.md, "How an execution finishes"): a
final state the application does not name finishes ``failed`` when it is called
``failed``, ``cancelled`` when called ``cancelled``, else ``completed``. A fresh user's
final state ``failed`` used to finish ``completed`` unless ``final_status`` said
otherwise."""

from __future__ import annotations

import pytest

from phronomy_fsm.durable import ExecutionStatus
from phronomy_fsm.durable.machines import MachineFacts
from tests.durable.order_app import TABLE

FINAL = next(s for s in TABLE.states if s.name == "failed")
#: the order table with a final state ``cancelled`` added beside ``failed``
WITH_CANCELLED = TABLE._replace(states=(*TABLE.states, FINAL._replace(name="cancelled")))


def test_a_final_state_not_named_finishes_by_its_name() -> None:
    facts = MachineFacts(WITH_CANCELLED)
    assert facts.final_status == {
        "shipped": ExecutionStatus.COMPLETED,
        "rejected": ExecutionStatus.COMPLETED,
        "failed": ExecutionStatus.FAILED,
        "cancelled": ExecutionStatus.CANCELLED,
    }


def test_the_applications_mapping_wins() -> None:
    facts = MachineFacts(
        WITH_CANCELLED,
        {"rejected": ExecutionStatus.FAILED, "failed": ExecutionStatus.COMPLETED},
    )
    assert facts.final_status["rejected"] is ExecutionStatus.FAILED
    assert facts.final_status["failed"] is ExecutionStatus.COMPLETED
    assert facts.final_status["cancelled"] is ExecutionStatus.CANCELLED


def test_a_mapping_naming_no_final_state_is_refused() -> None:
    with pytest.raises(ValueError, match="'charging' is not a final state"):
        MachineFacts(TABLE, {"charging": ExecutionStatus.FAILED})

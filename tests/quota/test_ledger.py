"""The ledger: what z.ai may have charged of the proxy's requests lies between `lo` (answered cleanly)
and `hi` (sent and not refused)."""

from __future__ import annotations

from chaos_mode.quota.ledger import Ledger


def test_sent_counts_in_hi_answered_in_lo() -> None:
    ledger = Ledger()
    ledger.sent(1, 1.0)
    ledger.sent(2, 3.0)
    assert (ledger.lo, ledger.hi, ledger.open, ledger.open_units) == (0.0, 4.0, 2, 4.0)
    ledger.answered(2)
    assert (ledger.lo, ledger.hi, ledger.open, ledger.open_units) == (3.0, 4.0, 1, 1.0)


def test_a_refusal_is_not_charged_a_request_with_no_verdict_may_have_been() -> None:
    ledger = Ledger()
    for key in (1, 2, 3):
        ledger.sent(key, 1.0)
    ledger.refused(1)
    ledger.ended(2)  # the client left before any answer
    ledger.answered(3)
    ledger.ended(3)  # its slot given back after the answer: nothing more
    assert (ledger.lo, ledger.hi, ledger.open) == (1.0, 2.0, 0)


def test_changes_count_what_happened_not_what_was_already_settled() -> None:
    ledger = Ledger()
    ledger.sent(1, 1.0)
    ledger.answered(1)
    before = ledger.changes
    ledger.ended(1)
    ledger.refused(1)
    assert ledger.changes == before == 2

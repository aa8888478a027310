"""How a learning pool comes to limits unlike the catalog's, through its public API (for status tests)."""

from __future__ import annotations

from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.errors import UpstreamError

ONLY_GLM_4_7 = frozenset({"glm-4.6", "glm-4.5-x"})  # attempted: only glm-4.7 is left to a heavy request
ONLY_GLM_4_5 = frozenset({"glm-4.7", "glm-4.6", "glm-4.5-x", "glm-4.5-air"})  # the same for medium
ONLY_GLM_4_5_AIR = frozenset({"glm-4.7", "glm-4.6", "glm-4.5-x", "glm-4.5"})


def lower_glm_4_7(pool: ChaosPool, busy: UpstreamError) -> None:
    """z.ai refuses a third request on glm-4.7 (the catalog says 3): its learned limit becomes 2; the
    other two are answered cleanly (2 ran full, so a probe may follow). Two requests stay in flight on it."""
    sent = [pool.try_acquire(Ticket("heavy", ONLY_GLM_4_7)) for _ in range(3)]
    assert [s.model if s else None for s in sent] == ["glm-4.7"] * 3
    assert sent[0] is not None and sent[1] is not None and sent[2] is not None
    pool.report_error("glm-4.7", busy, None, sent[2])
    pool.release(sent[2])
    pool.report_success(sent[0])
    pool.report_success(sent[1])


def probe_glm_4_7(pool: ChaosPool) -> Slot:
    """After `lower_glm_4_7` and the probe interval: a heavy request that would wait probes glm-4.7 at 3."""
    probe = pool.try_acquire(Ticket("heavy", ONLY_GLM_4_7))
    assert probe is not None and (probe.model, probe.probe, probe.in_flight) == ("glm-4.7", "model", 3)
    return probe


def learn_account_limit(pool: ChaosPool, busy: UpstreamError) -> None:
    """z.ai served 1 in flight cleanly, then refuses two models far below their limits with 4 and 5 in
    flight: the account is full, and its learned limit becomes 3 ("1302 at 4 in flight"); the last heavy
    one is answered cleanly (3 ran full). Three requests stay in flight, one on each heavy model."""
    first = pool.try_acquire(Ticket("medium", ONLY_GLM_4_5))
    assert first is not None and (first.model, first.total) == ("glm-4.5", 1)
    pool.report_success(first)
    pool.release(first)
    for model in ("glm-4.7", "glm-4.6", "glm-4.5-x"):
        assert pool.acquire(model)
    second = pool.try_acquire(Ticket("medium", ONLY_GLM_4_5))
    third = pool.try_acquire(Ticket("medium", ONLY_GLM_4_5_AIR))
    assert second is not None and (second.model, second.in_flight, second.total) == ("glm-4.5", 1, 4)
    assert third is not None and (third.model, third.in_flight, third.total) == ("glm-4.5-air", 1, 5)
    for refused in (second, third):
        pool.report_error(refused.model, busy, None, refused)
    for refused in (second, third):
        pool.release(refused)
    pool.report_success(Slot("glm-4.5-x", "sent before", 1, 3))

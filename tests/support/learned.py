"""How a learning pool comes to limits unlike the catalog's, through its public API (for status tests)."""

from __future__ import annotations

from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.errors import UpstreamError

ONLY_GLM_4_7 = frozenset({"glm-4.6", "glm-4.5-x"})  # attempted: only glm-4.7 is left to a heavy request
ONLY_GLM_4_5 = frozenset({"glm-4.7", "glm-4.6", "glm-4.5-x", "glm-4.5-air"})  # the same for medium
ONLY_GLM_4_5_AIR = frozenset({"glm-4.7", "glm-4.6", "glm-4.5-x", "glm-4.5"})


def as_on_the_benchmark(pool: ChaosPool) -> None:
    """1-s answers and 3-s refusals, as on the benchmark: a refusal costs three slot-times, so two at a level
    nobody was served at refuse it (cheaper refusals would take more)."""
    for _ in range(60):
        pool.limits.served_for(1.0)


def lower_glm_4_7(pool: ChaosPool, busy: UpstreamError) -> None:
    """z.ai refuses a third request on glm-4.7 (the catalog says 3), twice: its learned limit becomes 2;
    the other two are answered cleanly (2 ran full, so a probe may follow). Two requests stay in flight on
    it."""
    as_on_the_benchmark(pool)
    sent = [pool.try_acquire(Ticket("heavy", ONLY_GLM_4_7)) for _ in range(2)]
    assert [s.model if s else None for s in sent] == ["glm-4.7"] * 2
    assert sent[0] is not None and sent[1] is not None
    pool.ledger.success(sent[0])
    pool.ledger.success(sent[1])
    for _ in range(2):  # z.ai never served 3 of it: refused twice at 3 (once may be chance)
        third = pool.try_acquire(Ticket("heavy", ONLY_GLM_4_7))
        assert third is not None and (third.model, third.in_flight) == ("glm-4.7", 3)
        pool.error("glm-4.7", busy, None, third)
        pool.release(third)


def probe_glm_4_7(pool: ChaosPool) -> Slot:
    """After `lower_glm_4_7` and the probe interval: a heavy request that would wait probes glm-4.7 at 3."""
    probe = pool.try_acquire(Ticket("heavy", ONLY_GLM_4_7))
    assert probe is not None and (probe.model, probe.probe, probe.in_flight) == ("glm-4.7", "model", 3)
    return probe


def learn_account_limit(pool: ChaosPool, busy: UpstreamError) -> None:
    """z.ai served each of glm-4.5 and glm-4.5-air one at a time lately and the account 3 at once, then
    refuses them at 1 in flight with 4 on the account: the account is full, its learned limit becomes 3
    ("1302 at 4 in flight"). Three requests stay in flight, one on each heavy model."""
    as_on_the_benchmark(pool)
    for model in ("glm-4.5", "glm-4.5-air"):
        for _ in range(12):
            pool.limits.succeeded(model, 1, 3, None)
    for model in ("glm-4.7", "glm-4.6", "glm-4.5-x"):
        slot = pool.acquire(model)
        assert slot
        pool.ledger.success(slot)  # z.ai serves them: the refusals below come with 3 beside them
    for only in (ONLY_GLM_4_5, ONLY_GLM_4_5_AIR):
        refused = pool.try_acquire(Ticket("medium", only))
        assert refused is not None and (refused.in_flight, refused.total) == (1, 4)
        pool.error(refused.model, busy, None, refused)
        pool.release(refused)

"""The keep-alive pool by credential: a connection given back for one credential is taken only by a request of
the same credential and way out, whatever the order of requests (hypothesis), and the pool stays bounded."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.forwarding.upstream import (
    IDLE_PER_KEY,
    IDLE_TOTAL,
    Connection,
    Destination,
    UpstreamClients,
    pool_key,
)

Z_AI = Destination("https", "api.z.ai", 443)
OTHER = Destination("https", "open.bigmodel.cn", 443)


@dataclass
class FakeTransport:
    aborted: bool = False

    def abort(self) -> None:
        self.aborted = True


@dataclass
class FakeWriter:
    transport: FakeTransport = field(default_factory=FakeTransport)


def credential(n: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"x-api-key", b"sk-%d" % n)]


def test_the_key_is_the_credential_headers_values_whatever_the_other_headers() -> None:
    a = pool_key(Z_AI, [(b"X-Api-Key", b"sk-1"), (b"user-agent", b"claude-cli/2")])
    assert a == pool_key(Z_AI, [(b"x-api-key", b"sk-1"), (b"anthropic-beta", b"x")])
    assert a != pool_key(Z_AI, [(b"x-api-key", b"sk-2")])
    assert a != pool_key(OTHER, [(b"x-api-key", b"sk-1")])
    assert a != pool_key(Z_AI, [(b"authorization", b"sk-1")])
    bearer = pool_key(Z_AI, [(b"authorization", b"Bearer sk-1")])
    assert bearer != pool_key(Z_AI, [(b"authorization", b"Bearer sk-1"), (b"x-api-key", b"sk-1")])
    assert pool_key(Z_AI, []) == pool_key(Z_AI, [(b"accept", b"*/*")])  # no credential: one pool of its own
    assert b"sk-1" not in a.credential


# (give back: True, or take: False), the credential, the way out
Step = tuple[bool, int, bool]


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.booleans()), max_size=400))
def test_a_connection_serves_only_the_credential_and_way_out_it_was_given_back_for(steps: list[Step]) -> None:
    clients = UpstreamClients()
    owner: dict[int, tuple[int, bool]] = {}
    kept: set[int] = set()
    for n, (give, who, other) in enumerate(steps):
        key = pool_key(OTHER if other else Z_AI, credential(who))
        if give:
            writer = FakeWriter()
            conn: Connection = (n, writer)  # type: ignore[assignment]  # the pool only keeps and aborts it
            owner[n] = (who, other)
            clients.give_back(key, conn)
            if not writer.transport.aborted:
                kept.add(n)
        else:
            taken = clients._take_idle(key)
            if taken is not None:
                number: int = taken[0]  # type: ignore[assignment]
                assert owner[number] == (who, other)
                kept.remove(number)
        assert len(kept) <= IDLE_TOTAL
        assert all(len(idle) <= IDLE_PER_KEY for idle in clients._idle.values())
